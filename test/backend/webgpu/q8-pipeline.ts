// The fused pipeline with activations q8 (or int15) on a Q4_K_M model, for the integer kernels' tests: the kernel
// matching `kernel` runs, the log-probs move off the exact pipeline's, and stay near the reference's (KL < klMax a row:
// 0.005 for q8, measured 2e-4 – 1.1e-3 a row on the register-tiled kernel when written, where a min term 2 % off gave
// 0.025).
import assert from "node:assert/strict";
import { type GpuActivations, GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import type { GpuDeviceInfo } from "../../../src/backend/webgpu/core/device.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { GpuModel } from "../../../src/backend/webgpu/graph/gpu-model.js";
import { logSoftmaxRow } from "../../../src/engine/evaluate.js";
import { loadModel } from "../../../src/runtime/load.js";
import { logprobRows } from "../../helpers/logprobs.js";
import { randomTokens, synthModel } from "../../helpers/synth.js";

export async function checkFusedQ8(
  base: { readonly info: GpuDeviceInfo },
  kernel: RegExp,
  tune: KernelTuning,
  activations: GpuActivations = "q8",
  klMax = 0.005,
): Promise<void> {
  const q8 = new GpuRuntime(base.info, { checkWrites: true, activations, tune });
  const exact = new GpuRuntime(base.info, { checkWrites: true, tune });
  let q8Dispatches = 0;
  const dispatch = q8.dispatch.bind(q8);
  q8.dispatch = (label, code, ...rest) => {
    if (kernel.test(code)) q8Dispatches++;
    dispatch(label, code, ...rest);
  };
  const m = synthModel({ label: "tiny-v3-q4km", base: "tiny", over: {}, type: "Q4_K_M" }, 9);
  try {
    const { model, config } = loadModel(m.path);
    const seq = randomTokens(9, 5, 0, config.nVocab);
    const ref = logprobRows(model, seq, "reference");
    const rows = async (r: GpuRuntime): Promise<Float64Array[]> => {
      const g = new GpuModel(r, model, { slots: 1, context: 16, maxTokens: 9 });
      return (await g.prefill(0, seq, 0, true)).map((row) => logSoftmaxRow(row));
    };
    const got = await rows(q8);
    const plain = await rows(exact);
    assert.ok(q8Dispatches > 0, "the q8 kernel ran");
    const kl = (p: Float64Array, q: Float64Array): number => p.reduce((s, lp, i) => s + Math.exp(lp) * (lp - q[i]), 0);
    got.forEach((row, t) => {
      const k = kl(ref[t], row);
      assert.ok(k >= 0 && k < klMax, `row ${t}: KL ${k}`);
    });
    assert.ok(
      got.some((row, t) => row.some((v, i) => Math.abs(v - plain[t][i]) > 1e-5)),
      "q8 log-probs equal the exact pipeline's",
    );
  } finally {
    m.cleanup();
  }
}
