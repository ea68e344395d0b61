/**
 * How far the CPU backend's activations move the next-token distribution from the reference path (plain kernels,
 * f64 activations): teacher-forced decode over a few prompts, each step's log-softmax of the "exact" and "q8" modes
 * against the reference's. Prints, per mode: mean and max KL(reference ‖ mode) in nats, the largest |Δ log-prob| of
 * the reference's top token, the largest |Δ log-prob| over tokens the reference gives ≥ 1e-4, and top-1 agreement.
 *
 *   node --import tsx research/cpu-relaxed/q8-kl.ts MODEL.gguf [--prefill 8] [--steps 16] [--threads 2]
 *
 * Prompts are the texts below through the model's tokenizer. Not a test.
 */
import { LatentCache } from "../../src/model/cache.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/tokenizer.js";

const TEXTS = [
  "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.",
  "And it came to pass, when men began to multiply on the face of the earth, and daughters were born unto them, that the sons of God saw the daughters of men.",
  "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly report on memory bandwidth and cache behaviour.",
];

const argv = process.argv.slice(2);
const opt = (name: string, dflt: number): number => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const path = argv[0];
const prefill = opt("--prefill", 8);
const steps = opt("--steps", 16);
const threads = opt("--threads", 2);

function logSoftmax(l: ArrayLike<number>): Float64Array {
  let mx = -Infinity;
  for (let i = 0; i < l.length; i++) mx = Math.max(mx, l[i]);
  let s = 0;
  for (let i = 0; i < l.length; i++) s += Math.exp(l[i] - mx);
  const lse = mx + Math.log(s);
  return Float64Array.from(l, (x) => x - lse);
}

type Mode = "reference" | "exact" | "q8";

/** the log-probs after each teacher-forced decode step of each prompt */
function run(mode: Mode, prompts: readonly number[][]): Float64Array[] {
  const loaded = loadModel(path, undefined, {
    backend: mode === "reference" ? "reference" : "cpu",
    threads,
    ...(mode === "q8" ? { cpuActivations: "q8" as const } : {}),
  });
  const { model, config, backend } = loaded;
  if (mode !== "reference" && backend?.activations !== mode) throw new Error(`${mode} mode is not available here`);
  const out: Float64Array[] = [];
  try {
    for (const p of prompts) {
      const cache = new LatentCache(config);
      model.forward(p.slice(0, prefill), cache, { path: "prefill", logits: "last" });
      for (let i = prefill; i < prefill + steps; i++)
        out.push(logSoftmax(model.forward([p[i]], cache, { path: "decode", logits: "last" })));
    }
  } finally {
    backend?.close();
    loaded.file.close();
  }
  return out;
}

const tok = (() => {
  const l = loadModel(path, undefined, { backend: "reference" });
  try {
    return Tokenizer.fromMetadata(l.file.metadata);
  } finally {
    l.file.close();
  }
})();
const prompts = TEXTS.map((t) => tok.encode(t).slice(0, prefill + steps));
if (prompts.some((p) => p.length < prefill + steps)) throw new Error("a prompt is shorter than --prefill + --steps");
const ref = run("reference", prompts);
for (const mode of ["exact", "q8"] as const) {
  const got = run(mode, prompts);
  let klSum = 0;
  let klMax = 0;
  let topMax = 0;
  let likelyMax = 0;
  let agree = 0;
  ref.forEach((r, s) => {
    const g = got[s];
    let kl = 0;
    let top = 0;
    let gTop = 0;
    for (let i = 0; i < r.length; i++) {
      const p = Math.exp(r[i]);
      kl += p * (r[i] - g[i]);
      if (r[i] > r[top]) top = i;
      if (g[i] > g[gTop]) gTop = i;
      if (p >= 1e-4) likelyMax = Math.max(likelyMax, Math.abs(r[i] - g[i]));
    }
    klSum += kl;
    klMax = Math.max(klMax, kl);
    topMax = Math.max(topMax, Math.abs(r[top] - g[top]));
    if (top === gTop) agree++;
  });
  console.log(
    `${mode}: ${ref.length} positions (${prompts.length} prompts × ${steps} decode steps after ${prefill}), KL mean ${(klSum / ref.length).toExponential(2)} max ${klMax.toExponential(2)} nats; |Δ log p| of the reference's top token max ${topMax.toExponential(2)}, over tokens with p ≥ 1e-4 max ${likelyMax.toExponential(2)}; top-1 agreement ${agree}/${ref.length}`,
  );
}
