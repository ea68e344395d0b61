// A hostile chat template is rendered under a time, memory and output budget: a clear error, never a frozen or dead process.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import "../../src/tokenizer/chat-thread.js";
import { renderChatTemplate, renderChatTemplateAsync } from "../../src/tokenizer/chat.js";
import { LatentError } from "../../src/util/errors.js";
import { loadModel } from "../../src/runtime/load.js";
import { startServer } from "../../src/server/server.js";
import { rewriteGGUF, str } from "../helpers/gguf-rewrite.js";
import { tempDir } from "../gguf/helpers.js";

const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const BIN = new URL("../../bin/latent.mjs", import.meta.url).pathname;
const tmp = tempDir("latent-hostile-chat-");
after(tmp.cleanup);

const HI = [{ role: "user", content: "hi" }];
const LOOP = "{% for x in range(999999999) %}{% endfor %}";
const NESTED = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
const BIG_OUTPUT = "{% for a in range(3000) %}{% for b in range(3000) %}xxxxxxxxxx{% endfor %}{% endfor %}";

function refused(template: string, re: RegExp, label: string): void {
  const t0 = performance.now();
  assert.throws(
    () => renderChatTemplate(template, HI, { limits: { timeMs: 1500 } }),
    (e: unknown) => e instanceof LatentError && re.test(e.message),
    label,
  );
  const ms = performance.now() - t0;
  assert.ok(ms < 8000, `${label}: took ${ms.toFixed(0)} ms`);
}

describe("chat template budget", { timeout: 60_000 }, () => {
  it("an ordinary template renders (control)", () => {
    assert.equal(
      renderChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", HI),
      "<user>hi",
    );
  });

  it("range(999999999), nested loops and a huge output are refused with a clear error", () => {
    refused(LOOP, /chat template .*(budget|memory)/, "range(999999999)");
    refused(NESTED, /chat template .*budget/, "nested loops");
    refused(BIG_OUTPUT, /chat template .*(output|budget|memory)/, "90 MB of output");
    // and the renderer still works afterwards
    assert.equal(renderChatTemplate("{{ messages[0].content }}!", HI), "hi!");
  });

  it("latent run --chat on a file with such a template: exit 1 with one line", () => {
    const path = join(tmp.dir, "loop-template.gguf");
    rewriteGGUF(DEMO, path, { meta: (m) => m.set("tokenizer.chat_template", str(LOOP)) });
    const r = spawnSync(
      process.execPath,
      [BIN, "run", path, "-p", "hi", "--chat", "-n", "2", "--backend", "reference"],
      { encoding: "utf8", timeout: 50_000 },
    );
    assert.equal(r.status, 1, `exit ${r.status} ${r.signal}: ${r.stderr.slice(0, 2000)}`);
    assert.match(r.stderr, /^latent run: chat template /);
    assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
  });
});

describe("chat template budget, asynchronously", { timeout: 60_000 }, () => {
  it("the event loop runs on while a hostile template is stopped; renders queue and later ones succeed", async () => {
    assert.equal(await renderChatTemplateAsync("{{ messages[0].content }}?", HI), "hi?");
    let ticks = 0;
    const timer = setInterval(() => ticks++, 50);
    try {
      const t0 = performance.now();
      const [hostile, after1, after2] = await Promise.allSettled([
        renderChatTemplateAsync(NESTED, HI, { limits: { timeMs: 1000 } }),
        renderChatTemplateAsync("a{{ messages[0].content }}", HI),
        renderChatTemplateAsync(LOOP, HI),
      ]);
      const ms = performance.now() - t0;
      assert.ok(
        hostile.status === "rejected" &&
          hostile.reason instanceof LatentError &&
          /no result within 1000 ms/.test(hostile.reason.message),
        String(hostile.status === "rejected" ? hostile.reason : "resolved"),
      );
      assert.deepEqual(after1, { status: "fulfilled", value: "ahi" });
      assert.ok(after2.status === "rejected" && /range\(0, 999999999, 1\)/.test((after2.reason as Error).message));
      // the loop ticked through the whole second the hostile render held its thread
      assert.ok(ticks >= Math.floor(ms / 50) / 2 && ticks >= 8, `${ticks} ticks in ${ms.toFixed(0)} ms`);
    } finally {
      clearInterval(timer);
    }
  });
});

describe("latent serve with a hostile chat template", { timeout: 60_000 }, () => {
  it("the chat request gets a 4xx naming the budget; completions and later requests are served", async () => {
    const path = join(tmp.dir, "serve-loop-template.gguf");
    rewriteGGUF(DEMO, path, { meta: (m) => m.set("tokenizer.chat_template", str(LOOP)) });
    const loaded = loadModel(path);
    const server = await startServer({ loaded, port: 0, modelId: "m" });
    try {
      const post = (route: string, body: object): Promise<Response> =>
        fetch(`${server.url}${route}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      const chat = await post("/v1/chat/completions", {
        model: "m",
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 2,
      });
      assert.ok(chat.status >= 400 && chat.status < 600, `status ${chat.status}`);
      assert.match(await chat.text(), /chat template is over its budget/);
      for (let i = 0; i < 2; i++) {
        const ok = await post("/v1/completions", {
          model: "m",
          prompt: "In the beginning",
          max_tokens: 3,
          temperature: 0,
        });
        assert.equal(ok.status, 200, await ok.text());
      }
    } finally {
      await server.close();
      loaded.file.close();
    }
  });
});
