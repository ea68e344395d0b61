// FusedGpuModel: the fused pipeline behind the engine's synchronous forward (worker thread, blocking calls). Chunked
// prefill with every position's logits, then decode steps, against the CPU reference path (≤ 1e-3); a new cache
// object starts the sequence over; the context limit, the reference path and unsupported models are clear errors;
// close() drains the worker.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LatentCache } from "../../../src/engine/latent-cache.js";
import { logSoftmaxRow } from "../../../src/engine/evaluate.js";
import { loadModel } from "../../../src/model/load.js";
import { FusedGpuModel } from "../../../src/backend/webgpu/fused.js";
import { LatentError } from "../../../src/util/errors.js";
import { logprobRows, maxAbsDiff } from "../../helpers/logprobs.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

test("FusedGpuModel.forward: prefill chunks (all logits) + decode steps match the reference; a new cache restarts", { skip }, () => {
  const c = CASES.find((x) => x.base === "tiny")!;
  const m = synthModel(c, 21);
  const fused = (() => {
    const { model, config } = loadModel(m.path);
    const tokens = randomTokens(10, 5, 0, config.nVocab);
    const ref = logprobRows(model, tokens, "reference");
    const f = new FusedGpuModel(config, { context: 12, maxTokens: 3 });
    f.load(m.path);
    return { f, tokens, ref, V: config.nVocab };
  })();
  const { f, tokens, ref, V } = fused;
  try {
    for (let round = 0; round < 2; round++) {
      const cache = new LatentCache(f.config);
      const got: Float64Array[] = [];
      const all = f.forward(tokens.slice(0, 7), cache, { path: "prefill", logits: "all" });
      for (let i = 0; i < 7; i++) got.push(logSoftmaxRow(all.subarray(i * V, (i + 1) * V)));
      for (let i = 7; i < 10; i++) got.push(logSoftmaxRow(f.forward([tokens[i]!], cache, { path: "decode", logits: "last" })));
      const err = maxAbsDiff(got, ref);
      assert.ok(err <= 1e-3, `round ${round}: max |Δ logprob| ${err}`);
    }
    const cache = new LatentCache(f.config);
    assert.equal(f.config.contextLength, 12);
    assert.throws(() => f.forward(randomTokens(13, 1, 0, V), cache, { path: "prefill", logits: "last" }), /context full/);
    assert.throws(() => f.forward(tokens, undefined, { path: "reference", logits: "last" }), LatentError);
  } finally {
    void f.close();
    m.cleanup();
  }
});

test("FusedGpuModel refuses models the fused pipeline does not run (glm-dsa)", { skip }, () => {
  const c = CASES.find((x) => x.base === "tiny-glm")!;
  const m = synthModel(c, 2);
  try {
    const { config } = loadModel(m.path);
    assert.throws(() => new FusedGpuModel(config, { context: 8, maxTokens: 4 }), /not wired into the fused pipeline/);
  } finally {
    m.cleanup();
  }
});
