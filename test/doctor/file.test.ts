// File checks: the kit's healthy models pass; files with known defects are caught with a message naming the cause.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { runDoctor } from "../../src/doctor/index.js";
import { writeFaultyFile } from "../helpers/file-faults.js";
import { synthModel } from "../helpers/synth.js";

const KIT = ["ds2-qlora-softmax", "ds2-lite", "ds2-v3", "glm-dsa-topk8", "ds2-v3-mixed-q"];
const fixture = (name: string): string => new URL(`../fixtures/models/${name}.gguf`, import.meta.url).pathname;
/** Quirks a healthy file may legitimately carry. */
const ALLOWED_WARNINGS = new Set(["glm-dsa-log-multiplier-ignored"]);

for (const name of KIT) {
  test(`kit ${name}: healthy, exit 0, no false alarm`, async () => {
    const r = await runDoctor({ model: fixture(name), greedyTokens: 8 });
    const alarms = r.findings.filter(
      (f) => f.severity === "error" || (f.severity === "warning" && !ALLOWED_WARNINGS.has(f.code)),
    );
    assert.deepEqual(alarms, []);
    assert.equal(r.exitCode, 0);
    assert.equal(r.verdict, "healthy");
    assert.ok(r.paths!.comparisons.length >= 6);
    assert.ok(r.file!.stats.length === r.file!.tensorCount);
  });
}

const m = synthModel({ label: "doc-v3", base: "tiny", over: {} }, 5);
after(m.cleanup);

test("synth healthy model: exit 0", async () => {
  const r = await runDoctor({ model: m.path, greedyTokens: 8 });
  assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
});

test("missing expert_gating_func on a model with exp_probs_b: softmax-instead-of-sigmoid named", async () => {
  const p = writeFaultyFile(m.path, join(m.dir, "nogating.gguf"), { dropKeys: ["{arch}.expert_gating_func"] });
  const r = await runDoctor({ model: p, greedyTokens: 0 });
  assert.equal(r.exitCode, 1);
  const f = r.findings.find((x) => x.code === "gating-missing-with-bias");
  assert.ok(f, JSON.stringify(r.findings));
  assert.match(f.message, /softmax/);
  assert.match(f.message, /sigmoid/);
});

test("tensor names mapped GGUF→HF: the name map applied in the wrong direction is named", async () => {
  const p = writeFaultyFile(m.path, join(m.dir, "hfnames.gguf"), { hfNames: true });
  const r = await runDoctor({ model: p, greedyTokens: 0 });
  assert.equal(r.exitCode, 1);
  const f = r.findings.find((x) => x.code === "hf-names-in-gguf");
  assert.ok(f, JSON.stringify(r.findings));
  assert.match(f.message, /wrong direction/);
});

test("a NaN in one weight is found and named", async () => {
  const p = writeFaultyFile(m.path, join(m.dir, "nan.gguf"), { nanIn: ["blk.1.ffn_down_exps.weight"] });
  const r = await runDoctor({ model: p, greedyTokens: 0 });
  assert.equal(r.exitCode, 1);
  const f = r.findings.find((x) => x.code === "non-finite-weights");
  assert.ok(f);
  assert.match(f.message, /blk\.1\.ffn_down_exps\.weight/);
});

test("an all-zero (never written) tensor is flagged", async () => {
  const p = writeFaultyFile(m.path, join(m.dir, "zero.gguf"), { scale: { "blk.0.attn_output.weight": 0 } });
  const r = await runDoctor({ model: p, greedyTokens: 0 });
  assert.equal(r.exitCode, 1);
  assert.ok(r.findings.some((x) => x.code === "all-zero-tensor" && x.message.includes("blk.0.attn_output.weight")));
});

test("legacy attn_kv_b file: quirk flagged as a warning, paths agree, exit 0", async () => {
  const legacy = synthModel({ label: "doc-legacy", base: "tiny", over: {} }, 6, { legacyKvB: true });
  try {
    const r = await runDoctor({ model: legacy.path, greedyTokens: 0 });
    assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
    assert.equal(r.file!.generation, "legacy");
    assert.ok(r.findings.some((x) => x.code === "legacy-kv-b" && x.severity === "warning"));
  } finally {
    legacy.cleanup();
  }
});

test("glm-dsa yarn_log_multiplier is reported as ignored by llama.cpp", async () => {
  const r = await runDoctor({ model: fixture("glm-dsa-topk8"), greedyTokens: 0, skipData: true });
  assert.ok(
    r.findings.some((x) => x.code === "glm-dsa-log-multiplier-ignored" && /ignored by llama\.cpp/.test(x.message)),
  );
  assert.ok(r.findings.some((x) => x.code === "yarn-beta-missing"));
});
