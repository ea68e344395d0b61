/**
 * How far whole-model logprobs move when the activations of every quantized-weight product are rounded per 32-element
 * block to signed integers of B bits (scale = block max / (2^(B−1) − 1)), as int8 tensor-core products would see
 * them: B = 8 is one int8 operand; B = 15 is an int8 pair (x ≈ s·(128·hi + lo)), B = 22 three of them; exact integer accumulation assumed.
 * CPU only (the reference kernels with float64 accumulation): `node --import tsx scripts/int8-split-error.ts DIR`.
 */
import { evaluateAll, logSoftmaxRow } from "../src/engine/evaluate.js";
import { loadModel } from "../src/runtime/load.js";
import { preset, withOverrides, type SynthConfig } from "../src/synth/presets.js";
import { synthesize } from "../src/synth/synthesize.js";
import { plainKernels, type MatKernels } from "../src/model/kernels.js";
import { GGMLType } from "../src/gguf/types.js";

function roundedBlocks(x: ArrayLike<number>, n: number, xStride: number, cols: number, bits: number): Float64Array {
  const out = Float64Array.from(x as ArrayLike<number>);
  const qmax = 2 ** (bits - 1) - 1;
  for (let t = 0; t < n; t++) {
    for (let c0 = 0; c0 < cols; c0 += 32) {
      const o = t * xStride + c0;
      const end = Math.min(32, cols - c0);
      let amax = 0;
      for (let i = 0; i < end; i++) amax = Math.max(amax, Math.abs(out[o + i]));
      const s = amax / qmax;
      for (let i = 0; i < end; i++) out[o + i] = s === 0 ? 0 : Math.round(out[o + i] / s) * s;
    }
  }
  return out;
}

function rounding(bits: number): MatKernels {
  return {
    name: `int${bits}-activations`,
    matmul: (w, x, n, xStride, y, yStride) => {
      const q = w.type === GGMLType.F32 ? x : roundedBlocks(x, n, xStride, w.cols, bits);
      plainKernels.matmul(w, q as typeof x, n, xStride, y, yStride);
    },
    matmulT: plainKernels.matmulT,
  };
}

const dir = process.argv[2] ?? "/tmp";
const cases: [string, Partial<SynthConfig>, string][] = [
  ["tiny-v3-q4km", {}, "Q4_K_M"],
  [
    "v2-groups-softmax-q8",
    {
      n_layer: 3,
      n_dense: 1,
      gating: "softmax",
      w_norm: false,
      w_scale: 16,
      groups: 4,
      groups_used: 2,
      n_expert: 8,
      n_used: 3,
      n_shared: 2,
      exp_bias: false,
    },
    "Q8_0",
  ],
  ["v2-lite-2-layers-q4km", { n_layer: 2 }, "Q4_K_M"],
];
for (const [label, over, type] of cases) {
  const base = label.startsWith("v2-lite") ? preset("v2-lite") : preset("tiny", "deepseek2");
  const file = synthesize(withOverrides(base, { ...over, name: label }), {
    out: `${dir}/${label}.gguf`,
    seed: 5,
    type,
  })[0];
  const { model, config } = loadModel(file);
  const tokens = Array.from({ length: 12 }, (_, i) => (i * 37 + 5) % config.nVocab);
  model.kernels = plainKernels;
  const ref = evaluateAll(model, tokens, { path: "prefill", chunk: 12 }).map((r) => logSoftmaxRow(r));
  for (const bits of [8, 15, 22]) {
    model.kernels = rounding(bits);
    const got = evaluateAll(model, tokens, { path: "prefill", chunk: 12 }).map((r) => logSoftmaxRow(r));
    let worst = 0;
    ref.forEach((row, i) => row.forEach((v, j) => (worst = Math.max(worst, Math.abs(got[i][j] - v)))));
    console.log(
      `${label} (${type}): activations as ${bits}-bit integers per 32-block → max |Δ logprob| ${worst.toExponential(2)}`,
    );
  }
}
