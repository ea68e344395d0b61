// MoE routing against hand-worked examples, and DSA: exactly dense while a query sees ≤ top_k keys, sparse after.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { ModelConfig } from "../../src/model/config.js";
import { DeepSeek2 } from "../../src/model/deepseek2.js";
import { loadModel } from "../../src/runtime/load.js";
import { route } from "../../src/model/moe.js";
import { logprobRows, maxAbsDiff } from "../helpers/logprobs.js";
import { randomTokens, synthModel } from "../helpers/synth.js";

function cfg(over: Partial<ModelConfig>): ModelConfig {
  return {
    nExpert: 8,
    nExpertUsed: 2,
    nGroup: 1,
    nGroupUsed: 1,
    gating: "sigmoid",
    weightsNorm: true,
    weightsScale: 1,
    groupScoring: "definition",
    ...over,
  } as ModelConfig;
}
const logit = (p: number): number => Math.log(p / (1 - p));

test("V3 routing: bias selects, unbiased sigmoid weights, group top-2 sums, norm then scale", () => {
  // groups of 2: {0,1} {2,3} {4,5} {6,7}
  const p = [0.9, 0.1, 0.5, 0.45, 0.6, 0.05, 0.2, 0.3];
  const bias = new Float32Array([0, 0, 0, 0, 0, 0, 0.5, 0]);
  // sel = p + bias: [0.9, 0.1, 0.5, 0.45, 0.6, 0.05, 0.7, 0.3]; group sums: 1.0, 0.95, 0.65, 1.0 → keep groups 0 and 3
  const r = route(p.map(logit), cfg({ nGroup: 4, nGroupUsed: 2, weightsScale: 2.5 }), bias);
  assert.deepEqual(r.experts, [0, 6]); // 4 (0.6) is in a dropped group
  const w = [0.9, 0.2].map((x) => (x / 1.1) * 2.5);
  r.weights.forEach((x, i) => assert.ok(Math.abs(x - w[i]) < 1e-9));
});

test("V2 group-limited greedy: a group's score is its max; weights are softmax probs × scale, not normalized", () => {
  const z = [2.0, -5, 1.9, 1.9, 0, 0, 1.0, 1.5];
  // groups of 2: max p per group ranks g0 (2.0) > g1 (1.9) > g3 (1.5) > g2 (0); top-2 sum would rank g1 (3.8) first.
  const c = cfg({ gating: "softmax", weightsNorm: false, weightsScale: 16, nGroup: 4, nGroupUsed: 1, nExpertUsed: 2 });
  const r = route(z, c, undefined);
  assert.deepEqual(r.experts, [0, 1]);
  const sum = z.reduce((a, b) => a + Math.exp(b), 0);
  assert.ok(Math.abs(r.weights[0] - (16 * Math.exp(2)) / sum) < 1e-9);
  const llama = route(z, { ...c, groupScoring: "llama.cpp" }, undefined);
  assert.deepEqual(llama.experts, [2, 3]);
});

test("DSA is exactly dense while a query sees ≤ top_k keys, and sparse after", () => {
  const m = synthModel(
    { label: "dsa-dense", base: "tiny-glm", over: { indexer: { heads: 16, dim: 64, top_k: 16 } } },
    9,
  );
  try {
    const { model, config } = loadModel(m.path);
    const dense = new DeepSeek2(config, model.weights); // same weights, no indexer
    const tokens = randomTokens(30, 4, 0, config.nVocab);
    for (const path of ["reference", "prefill", "decode"] as const) {
      const sparse = logprobRows(model, tokens, path, 7);
      const full = logprobRows(dense, tokens, path, 7);
      assert.equal(maxAbsDiff(sparse.slice(0, 16), full.slice(0, 16)), 0, `${path}: rows 0..15 identical`);
      for (let i = 17; i < 30; i++) assert.ok(maxAbsDiff([sparse[i]], [full[i]]) > 1e-6, `${path}: row ${i} sparse`);
    }
  } finally {
    m.cleanup();
  }
});
