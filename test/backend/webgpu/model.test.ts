// Whole-model parity: with model.kernels = WebGPUKernels every matrix product of prefill and decode runs on the
// GPU (lavapipe in CI); logits must match the CPU reference path within 1e-3 on the synthetic presets.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../../src/runtime/load.js";
import { WebGPUKernels } from "../../../src/backend/webgpu/engine/kernels.js";
import { logprobRows, maxAbsDiff } from "../../helpers/logprobs.js";
import { CASES, randomTokens, synthModel, type SynthCase } from "../../helpers/synth.js";
import { gpuOrSkip, record } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();
const TOL = 1e-3;

let kernels: WebGPUKernels | undefined;
if (skip === false) {
  kernels = new WebGPUKernels({ checkWrites: true });
  after(() => kernels?.close());
}

const QUANT: SynthCase = { label: "tiny-v3-q4km", base: "tiny", over: {}, type: "Q4_K_M" };

for (const c of [...CASES, QUANT]) {
  test(`${c.label}: prefill and decode with WebGPU products match the CPU reference (≤ ${TOL})`, { skip }, () => {
    const m = synthModel(c, 5);
    try {
      const { model, config } = loadModel(m.path);
      const n = c.base === "tiny-glm" ? 24 : 9;
      const tokens = randomTokens(n, 17, 0, config.nVocab);
      const ref = logprobRows(model, tokens, "reference");
      model.kernels = kernels!;
      kernels!.upload(model.weights);
      const before = kernels!.calls;
      const prefill = logprobRows(model, tokens, "prefill", 4);
      const decode = logprobRows(model, tokens, "decode");
      assert.ok(kernels!.calls > before, "products ran on the GPU");
      const ep = record(`model prefill ${c.label}`, maxAbsDiff(prefill, ref));
      const ed = record(`model decode ${c.label}`, maxAbsDiff(decode, ref));
      assert.ok(ep <= TOL, `prefill: max |Δ logprob| ${ep}`);
      assert.ok(ed <= TOL, `decode: max |Δ logprob| ${ed}`);
    } finally {
      m.cleanup();
    }
  });
}
