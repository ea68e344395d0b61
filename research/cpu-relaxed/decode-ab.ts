/**
 * Decode of one model file by two CpuBackends in one process, steps alternating A, B, B, A, …: each side's
 * tokens/s per round of `steps` steps and the median of the per-round ratios. Both sides load the file (twice the
 * memory). The sides differ by backend options (JSON), e.g. q8 with and without the Q5_0R copies:
 *
 *   node --import tsx research/cpu-relaxed/decode-ab.ts MODEL.gguf ROUNDS STEPS THREADS PROMPT \
 *     '{"activations":"q8","copyHeadroom":Infinity}' '{"activations":"q8"}'
 *
 * (Infinity is accepted in the JSON.) Greedy tokens of both sides are compared; a difference is reported. With
 * `--blocks` the sides take whole rounds in turn instead of single steps (for options that change how threads wait).
 */
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import type { CpuBackend } from "../../src/backend/cpu/fast.js";
import { LatentCache } from "../../src/model/cache.js";
import { argmax } from "../../src/engine/sampler.js";
import { type LoadModelOptions, loadModel } from "../../src/runtime/load.js";

const blocks = process.argv.includes("--blocks");
const [path, roundsArg, stepsArg, threadsArg, promptArg, optA, optB] = process.argv
  .slice(2)
  .filter((a) => a !== "--blocks");
const rounds = Number(roundsArg);
const steps = Number(stepsArg);
const threads = Number(threadsArg);
const nPrompt = Number(promptArg);
const parse = (s: string): LoadModelOptions => JSON.parse(s.replace(/Infinity/g, "1e308")) as LoadModelOptions;
const sides = [optA, optB].map((o) => {
  const { model, config, backend: b } = loadModel(path, undefined, { ...parse(o), backend: "cpu", threads });
  const backend = b as CpuBackend;
  return {
    backend,
    model,
    config,
    cache: new LatentCache(config, nPrompt + 4 + rounds * steps),
    next: 0,
    tok: [] as number[],
  };
});
let seed = 12345;
const prompt = Array.from({ length: nPrompt }, () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return 10 + (seed % (sides[0].config.nVocab - 10));
});
for (const s of sides) {
  s.next = argmax(s.model.forward(prompt, s.cache, { path: "prefill", logits: "last" }));
  for (let i = 0; i < 2; i++) s.next = argmax(s.model.forward([s.next], s.cache, { path: "decode", logits: "last" })); // warm-up
}
const med = (v: number[]): number => {
  const x = [...v].sort((a, b) => a - b);
  return x.length % 2 ? x[x.length >> 1] : (x[x.length / 2 - 1] + x[x.length / 2]) / 2;
};
const rate: number[][] = [[], []];
const loads: number[] = [];
for (let r = 0; r < rounds; r++) {
  loads.push(loadavg()[0]);
  const ms = [0, 0];
  const step = (k: number): void => {
    const s = sides[k];
    const t0 = performance.now();
    s.next = argmax(s.model.forward([s.next], s.cache, { path: "decode", logits: "last" }));
    ms[k] += performance.now() - t0;
    s.tok.push(s.next);
  };
  if (blocks) {
    // whole rounds in turn (A's steps, then B's; the order swapped every round): one side's spinning threads cannot
    // overlap the other's steps
    for (const k of r % 2 ? [1, 0] : [0, 1]) for (let i = 0; i < steps; i++) step(k);
  } else {
    for (let i = 0; i < steps; i++) for (const k of (r * steps + i) % 2 ? [1, 0] : [0, 1]) step(k);
  }
  rate[0].push((1000 * steps) / ms[0]);
  rate[1].push((1000 * steps) / ms[1]);
  console.log(
    `round ${r + 1}: A ${rate[0][r].toFixed(2)}, B ${rate[1][r].toFixed(2)} tok/s (load ${loads[r].toFixed(2)})`,
  );
}
const ratio = rate[1].map((b, i) => b / rate[0][i]);
const same = sides[0].tok.every((t, i) => t === sides[1].tok[i]);
console.log(
  `A median ${med(rate[0]).toFixed(2)}, B median ${med(rate[1]).toFixed(2)} tok/s; B/A median of rounds ${med(ratio).toFixed(3)}× (${Math.min(...ratio).toFixed(3)}–${Math.max(...ratio).toFixed(3)}); load ${Math.min(...loads).toFixed(2)}–${Math.max(...loads).toFixed(2)}; greedy tokens ${same ? "equal" : "DIFFER"}`,
);
for (const s of sides) s.backend.close();
