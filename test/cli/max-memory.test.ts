// `--max-memory` on run, logits and serve: a budget below the file streams the routed experts (said on stderr) with the same
// tokens and logits as the resident model; a budget below the resident weights, or a malformed size, is a UsageError.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { logitsMain } from "../../src/cli/logits.js";
import { runMain } from "../../src/cli/run.js";
import { UsageError } from "../../src/util/errors.js";
import { fixture } from "../gguf/helpers.js";
import { captureCli } from "../helpers/cli.js";
import { spawnServe } from "../helpers/serve-child.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "latent.mjs");

const M = fixture("ds2-lite"); // 1.0 MB: 0.54 MB resident, 2 MoE layers of 8 experts of 30 KB, top-2
/** resident bytes + room for 3 experts: streaming with a cache of 3 */
const BUDGET = String(543872 + 3 * 30720 + 100);

for (const backend of ["cpu", "reference"]) {
  test(`run --backend ${backend} --max-memory: experts streamed, the same tokens and logprobs`, async () => {
    const argv = [M, "-p", "hello world", "-n", "8", "--temp", "0", "--ignore-eos", "--json", "--backend", backend];
    const resident = await captureCli(runMain, argv);
    const streamed = await captureCli(runMain, [...argv, "--max-memory", BUDGET]);
    assert.doesNotMatch(resident.err, /streaming/);
    assert.match(streamed.err, /streaming routed experts from disk: budget .*cache of 3 of 16 experts/);
    const a = JSON.parse(resident.out) as { tokens: number[]; logprobs: unknown[] };
    const b = JSON.parse(streamed.out) as { tokens: number[]; logprobs: unknown[]; expert_cache: { misses: number } };
    assert.deepEqual(b.tokens, a.tokens);
    assert.deepEqual(b.logprobs, a.logprobs);
    assert.ok(b.expert_cache.misses > 3, JSON.stringify(b.expert_cache));
  });
}

test("logits --max-memory: the same numbers as the resident model", async () => {
  const argv = [M, "--prompt", "the quick brown fox", "--path", "prefill", "--backend", "cpu", "--full", "--json"];
  const resident = await captureCli(logitsMain, argv);
  const streamed = await captureCli(logitsMain, [...argv, "--max-memory", BUDGET]);
  assert.match(streamed.err, /streaming routed experts/);
  assert.equal(streamed.out, resident.out);
});

test("--max-memory below the resident weights, or not a size, is a usage error", async () => {
  await assert.rejects(
    captureCli(runMain, [M, "-p", "hi", "-n", "1", "--max-memory", "100K"]),
    (e: Error) =>
      e instanceof UsageError &&
      e.message ===
        "--max-memory 100.0 KiB does not hold the resident weights (531.1 KiB) plus one layer's top-2 experts (60.0 KiB): give at least 591.1 KiB",
  );
  await assert.rejects(captureCli(runMain, [M, "-p", "hi", "--max-memory", "lots"]), UsageError);
  await assert.rejects(captureCli(logitsMain, [M, "--prompt", "hi", "--max-memory", "0"]), UsageError);
});

test("serve --max-memory: cpu chosen, the streaming line logged, completions equal the resident server's", async () => {
  const complete = async (extra: string[]): Promise<{ text: string; log: string }> => {
    const s = spawnServe([M, "--port", "0", "--alias", "m", ...extra]);
    try {
      const base = await s.url;
      const r = await fetch(`${base}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", prompt: "hello world", max_tokens: 8, temperature: 0 }),
      });
      assert.equal(r.status, 200, await r.clone().text());
      const body = (await r.json()) as { choices: { text: string }[] };
      return { text: body.choices[0].text, log: s.stderr() };
    } finally {
      s.child.kill("SIGKILL");
    }
  };
  const resident = await complete(["--backend", "cpu"]);
  const streamed = await complete(["--max-memory", BUDGET]);
  assert.match(streamed.log, /^backend cpu: --max-memory streams experts on the cpu backend$/m);
  assert.match(streamed.log, /^streaming routed experts from disk: budget .*cache of 3 of 16 experts/m);
  assert.doesNotMatch(resident.log, /streaming/);
  assert.equal(streamed.text, resident.text);
  const r = spawnSync(process.execPath, [BIN, "serve", M, "--port", "0", "--backend", "webgpu", "--max-memory", "1G"], {
    encoding: "utf8",
  });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--max-memory \(experts streamed from disk\) needs the cpu or reference backend/);
});
