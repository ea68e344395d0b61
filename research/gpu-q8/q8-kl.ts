/**
 * How far the GPU's opt-in 8-bit activations (RuntimeOptions.activations "q8") move the next-token distribution from
 * the reference path (plain kernels, f64 activations): one prompt of `--prefill` tokens (verses of the texts below
 * through the model's tokenizer, repeated to length) as one prefill step of the fused pipeline, every position's
 * log-softmax of the "exact" and "q8" runtimes against the reference's. Prints per mode: mean and max KL(reference ‖
 * mode) in nats, the largest |Δ log-prob| of the reference's top token, and top-1 agreement.
 *
 *   node --import tsx research/gpu-q8/q8-kl.ts MODEL.gguf [--prefill 192] [--tune gemm=1]
 *
 * The products take the q8 kernel where the register-tiled kernel applies (plain products of ≥ 128 tokens, expert
 * lists of ≥ 24 pairs an expert); on a CPU adapter (lavapipe) that kernel is off unless `--tune gemm=1`. Not a test.
 */
import { requestGpuDevice } from "../../src/backend/webgpu/core/device.js";
import { GpuRuntime } from "../../src/backend/webgpu/core/runtime.js";
import { parseTuning } from "../../src/backend/webgpu/core/tuning.js";
import { GpuModel } from "../../src/backend/webgpu/graph/gpu-model.js";
import { evaluateAll, logSoftmaxRow } from "../../src/engine/evaluate.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/tokenizer.js";

const TEXTS = [
  "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.",
  "And it came to pass, when men began to multiply on the face of the earth, and daughters were born unto them, that the sons of God saw the daughters of men that they were fair.",
  "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly report on memory bandwidth and cache behaviour.",
];

const argv = process.argv.slice(2);
const path = argv[0];
const at = (name: string): string | undefined => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : undefined);
const prefill = Number(at("--prefill") ?? 192);
const tune = at("--tune") !== undefined ? parseTuning(at("--tune")!) : {};

const { model, file } = loadModel(path);
const tokenizer = Tokenizer.fromMetadata(file.metadata);
const ids: number[] = [];
while (ids.length < prefill) for (const t of TEXTS) ids.push(...tokenizer.encode(` ${t}`));
const seq = ids.slice(0, prefill);
const ref = evaluateAll(model, seq, { path: "reference" }).map((row) => logSoftmaxRow(row));
const info = await requestGpuDevice();
console.log(`${path}: ${prefill} tokens in one prefill step on ${info.adapterInfo}; tuning ${JSON.stringify(tune)}`);
for (const activations of ["exact", "q8"] as const) {
  const rt = new GpuRuntime(info, { activations, tune });
  const g = new GpuModel(rt, model, { slots: 1, context: prefill + 1, maxTokens: prefill });
  const rows = (await g.prefill(0, seq, 0, true)).map((row) => logSoftmaxRow(row));
  let klSum = 0;
  let klMax = 0;
  let topMax = 0;
  let agree = 0;
  rows.forEach((row, t) => {
    const p = ref[t];
    let kl = 0;
    let top = 0;
    for (let i = 0; i < p.length; i++) {
      kl += Math.exp(p[i]) * (p[i] - row[i]);
      if (p[i] > p[top]) top = i;
    }
    let best = 0;
    for (let i = 0; i < row.length; i++) if (row[i] > row[best]) best = i;
    klSum += kl;
    klMax = Math.max(klMax, kl);
    topMax = Math.max(topMax, Math.abs(row[top] - p[top]));
    if (best === top) agree++;
  });
  console.log(
    `${activations}: KL mean ${(klSum / rows.length).toExponential(2)} max ${klMax.toExponential(2)} nats; top token |Δ log-prob| ≤ ${topMax.toExponential(2)}; top-1 ${agree}/${rows.length}`,
  );
}
process.exit(0);
