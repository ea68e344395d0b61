// Calibration of `latent doctor --endpoint`'s same-GGUF tolerance (docs/doctor.md "Endpoint"): how far apart two
// correct implementations on the same weights land (float32 kernels, bf16/f16 activations or logits) and how far the
// faults the doctor must catch land, in the doctor's own measures (mean KL over top-5 + rest, mean |Δ logprob| of the
// actual token), on the endpoint probes (one token, a sentence, > a prefill chunk; 16 greedy tokens each).
//
//   node --import tsx tools/doctor/endpoint-noise.ts [model.gguf]
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { compareAll, summarize, type Scored } from "../../src/doctor/endpoint/compare.js";
import { withExpertZeroed, withKvBSwapped, withRopeBase } from "../../src/doctor/endpoint/variants.js";
import { defaultEndpointPrompts } from "../../src/doctor/endpoint.js";
import { evaluateAll, logSoftmaxRow } from "../../src/engine/evaluate.js";
import { topLogprobs } from "../../src/engine/logprobs.js";
import { DeepSeek2, type TraceStage } from "../../src/model/deepseek2.js";
import { withFaults } from "../../src/doctor/faults/faults.js";
import { loadModel } from "../../src/runtime/load.js";
import { loadWeights } from "../../src/model/weights.js";
import { bf16ToF32, f16ToF32, f32ToBF16, f32ToF16 } from "../../src/quant/f16.js";
import { Tokenizer } from "../../src/tokenizer/index.js";

const path = process.argv[2] ?? "models/latent-demo-kjv.gguf";
const { model, file } = loadModel(path);
const tok = file.metadata.has("tokenizer.ggml.tokens") ? Tokenizer.fromMetadata(file.metadata) : undefined;
const K = 5;
const GEN = 16;

const bf16 = (x: number): number => bf16ToF32(f32ToBF16(x));
const f16 = (x: number): number => f16ToF32(f32ToF16(x));

// probe sequences: prompt + 16 greedy tokens of the reference
const seqs = defaultEndpointPrompts(tok, model.config.nVocab).map((p) => {
  const s = [...p];
  for (let j = 0; j < GEN; j++) {
    const l = model.forward(s, undefined, { path: "reference", logits: "last" });
    s.push(topLogprobs(logSoftmaxRow(l), 1)[0][0]);
  }
  return s;
});
const ref = seqs.map((s) => evaluateAll(model, s, { path: "reference" }).map((r) => logSoftmaxRow(r)));

/** The doctor's measures of an implementation whose log-softmax rows are `rows(seq)`. */
function measure(label: string, rows: (seq: number) => readonly Float64Array[]): void {
  const scored: Scored[] = [];
  seqs.forEach((s, seq) => {
    const r = rows(seq);
    for (let pos = 0; pos + 1 < s.length; pos++) {
      const row = r[pos];
      const next = s[pos + 1];
      scored.push({
        pos,
        group: "prompt",
        step: undefined,
        seq,
        top: new Map(topLogprobs(row, K)),
        returned: K,
        unmapped: 0,
        next,
        nextLogprob: row[next],
      });
    }
  });
  const positions = compareAll((seq) => ref[seq], scored);
  const m = summarize(positions);
  // the doctor also judges every probe on its own: the probe means matter as much as the overall one
  const per = seqs.map((_, seq) => summarize(positions.filter((p) => p.seq === seq)));
  const probes = per.map((x) => `${x.meanKL.toExponential(1)}/${x.meanGap.toExponential(1)}`).join(" ");
  console.log(
    `${label.padEnd(50)} mean KL ${m.meanKL.toExponential(2)}  max KL ${m.maxKL.toExponential(2)}  mean |Δlp| ${m.meanGap.toExponential(2)}  max |Δlp| ${m.maxGap.toExponential(2)}  top-1 ${(m.top1 * 100).toFixed(1)}%  per probe KL/|Δlp| ${probes}`,
  );
}

const rowsOf =
  (
    m: DeepSeek2,
    path: "reference" | "prefill",
    map?: (x: number) => number,
    trace?: (il: number, stage: TraceStage, rows: Float64Array) => void,
  ) =>
  (seq: number): Float64Array[] => {
    const s = seqs[seq];
    if (path === "prefill")
      return evaluateAll(m, s, { path, chunk: 256 }).map((r) => logSoftmaxRow(map ? r.map(map) : r));
    const l = m.forward(s, undefined, { path, logits: "all", ...(trace ? { trace } : {}) });
    const V = m.config.nVocab;
    return Array.from({ length: s.length }, (_, i) =>
      logSoftmaxRow(Array.from(l.subarray(i * V, (i + 1) * V), map ?? ((x) => x))),
    );
  };

/** Activations rounded in place where the forward pass hands them on: matmul inputs and the residual stream. */
const rounded =
  (round: (x: number) => number) =>
  (_il: number, stage: TraceStage, rows: Float64Array): void => {
    if (stage === "attn_norm" || stage === "ffn_norm" || stage === "residual" || stage === "output_norm")
      for (let i = 0; i < rows.length; i++) rows[i] = round(rows[i]);
  };

console.log(`${path}: ${seqs.map((s) => s.length).join(" + ")} tokens (prompts + ${GEN} generated), top-${K}`);
console.log("-- same weights, other arithmetic (noise) --");
const backend = new CpuBackend({});
try {
  const fast = new DeepSeek2(model.config, loadWeights(backend.adopt(file), model.config));
  fast.kernels = backend;
  measure("fast CPU backend (f32 kernels), prefill path", rowsOf(fast, "prefill"));
} finally {
  backend.close();
}
measure("reference, logits rounded to f16", rowsOf(model, "reference", f16));
measure("reference, logits rounded to bf16", rowsOf(model, "reference", bf16));
measure("reference, activations rounded to f16", rowsOf(model, "reference", undefined, rounded(f16)));
measure("reference, activations rounded to bf16", rowsOf(model, "reference", undefined, rounded(bf16)));
measure("reference, activations + logits rounded to bf16", rowsOf(model, "reference", bf16, rounded(bf16)));
console.log("-- faults the doctor must catch --");
measure(
  "log-probs of 0.9 × logits",
  rowsOf(model, "reference", (x) => 0.9 * x),
);
measure(
  "log-probs of 0.95 × logits",
  rowsOf(model, "reference", (x) => 0.95 * x),
);
for (const b of [model.config.ropeBase * 2, model.config.ropeBase * 10, 1e6])
  measure(`RoPE base ${b} (file: ${model.config.ropeBase})`, rowsOf(withRopeBase(model, b), "reference"));
const moe = model.weights.layers.flatMap((l, i) => (l.moe ? [i] : []));
for (const [il, e] of [
  [moe[0], 0],
  [moe[moe.length - 1], 3],
  [moe[Math.floor(moe.length / 2)], 5],
] as const)
  measure(`expert ${e} of layer ${il} zeroed`, rowsOf(withExpertZeroed(model, e, il), "reference"));
const swapped = withKvBSwapped(model);
if (swapped) measure("attn_k_b / attn_v_b swapped", rowsOf(swapped, "reference"));
measure("NeoX RoPE", rowsOf(withFaults(model, { neoxRope: true }), "reference"));
file.close();
