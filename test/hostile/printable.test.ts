// Control characters from a file never reach the terminal raw: errors stay one line, inspect cannot set the title.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { printable, printableLines } from "../../src/util/printable.js";
import { rewriteGGUF, str } from "../helpers/gguf-rewrite.js";
import { tempDir } from "../gguf/helpers.js";

const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const BIN = new URL("../../bin/latent.mjs", import.meta.url).pathname;
const tmp = tempDir("latent-hostile-printable-");
after(tmp.cleanup);

const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
const TITLE = "\u001b]0;pwned\u0007";

describe("printable", () => {
  it("escapes C0/C1 controls, DEL and bidi overrides; keeps other text", () => {
    assert.equal(printable("a\nb\u001b]0;t\u0007c\u007f\u0085\u202ed"), "a\\nb\\x1b]0;t\\x07c\\x7f\\x85\\u202ed");
    assert.equal(printable("Grüße 日本 🙂 \\ ok"), "Grüße 日本 🙂 \\ ok");
    assert.equal(printableLines("one\ntwo\u001b"), "one\ntwo\\x1b");
  });
});

describe("file strings on the terminal", { timeout: 60_000 }, () => {
  const path = join(tmp.dir, "controls.gguf");
  rewriteGGUF(DEMO, path, {
    meta: (m) => {
      m.set("general.architecture", str(`deep\nseek${TITLE}`));
      m.set("general.name", str(`name${TITLE}\r\n`));
    },
    tensors: (list) => {
      list.find((t) => t.name === "output_norm.weight")!.name = `output_norm${TITLE}\n.weight`;
    },
  });

  it("a load error naming the architecture is one line with the controls escaped", () => {
    const r = spawnSync(process.execPath, [BIN, "logits", path, "--tokens", "1,2"], { encoding: "utf8" });
    assert.equal(r.status, 1, r.stderr);
    assert.equal(r.stderr.trimEnd().split("\n").length, 1, JSON.stringify(r.stderr));
    assert.doesNotMatch(r.stderr.trimEnd(), RAW_CONTROL);
    assert.match(r.stderr, /general\.architecture = "deep\\nseek\\x1b\]0;pwned\\x07"/);
  });

  it("inspect's text output escapes names and values from the file", () => {
    const r = spawnSync(process.execPath, [BIN, "inspect", path, "--tensors"], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    assert.doesNotMatch(r.stdout, RAW_CONTROL);
    assert.match(r.stdout, /output_norm\\x1b\]0;pwned\\x07\\n\.weight/);
    assert.match(r.stdout, /deep\\nseek\\x1b/);
  });
});
