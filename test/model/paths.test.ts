// The three attention paths (reference, prefill in chunks, absorbed decode) agree on random synthetic models of many
// shapes, for 1- and 2-token prompts, prompts longer than the prefill chunk, and a 300-token DSA input (top_k 16).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { logprobRows, maxAbsDiff } from "../helpers/logprobs.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";

const TOL = 1e-4;

for (const c of CASES) {
  const m = synthModel(c, 7);
  after(m.cleanup);
  const { model, config } = loadModel(m.path);
  const long = c.base === "tiny-glm" ? 300 : 37;
  for (const n of [1, 2, long]) {
    test(`${c.label}: ${n}-token prompt: prefill and decode equal the reference`, () => {
      const tokens = randomTokens(n, 11 * n + 3, 0, config.nVocab);
      const ref = logprobRows(model, tokens, "reference");
      for (const chunk of n > 2 ? [5, 64] : [undefined]) {
        assert.ok(maxAbsDiff(logprobRows(model, tokens, "prefill", chunk), ref) <= TOL, `prefill chunk ${chunk}`);
      }
      assert.ok(maxAbsDiff(logprobRows(model, tokens, "decode"), ref) <= TOL, "decode");
      for (const row of ref) assert.ok(row.every((v) => Number.isFinite(v)));
    });
  }
}

test("the paths are not trivially equal: a wrong softmax scale in one path is caught", () => {
  const m = synthModel(CASES[0], 3);
  try {
    const { model } = loadModel(m.path);
    const tokens = randomTokens(9, 5, 0, model.config.nVocab);
    const ref = logprobRows(model, tokens, "reference");
    const broken = { ...model.config, kqScale: model.config.kqScale * 1.01 };
    Object.defineProperty(model, "config", { value: broken });
    assert.ok(maxAbsDiff(logprobRows(model, tokens, "decode"), ref) > 1e-3);
  } finally {
    m.cleanup();
  }
});
