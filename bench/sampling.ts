/**
 * Host sampling cost per 102400-entry logits row (v2-lite's vocabulary): what `latent serve` spends per sequence and
 * step on requests the GPU does not pick for (temperature > 0, or logprobs asked). Not a test: run via bench/run.ts
 * (`npm run bench -- sampling`).
 */
import { performance } from "node:perf_hooks";
import { createSampler, type SamplerOptions } from "../src/engine/sampler.js";
import type { BenchResult } from "./run.js";

const VOCAB = 102400;
const ROWS = 50;

/** Logits as a language model's: normal with std `spread` (3 peaks like a trained model's row; 1 is a flat one). */
function row(seed: number, spread: number): Float32Array {
  const out = new Float32Array(VOCAB);
  let s = seed >>> 0 || 1;
  const u = (): number => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return ((s >>> 0) + 0.5) / 4294967296;
  };
  for (let i = 0; i < VOCAB; i++) out[i] = spread * Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u());
  return out;
}

export function run(): BenchResult[] {
  const cases: [string, SamplerOptions][] = [
    ["greedy", { temperature: 0 }],
    ["temperature 1 (the OpenAI default)", { temperature: 1 }],
    ["temperature 0.7", { temperature: 0.7 }],
    ["temperature 1, top-k 40", { temperature: 1, topK: 40 }],
    ["temperature 1, top-p 0.9", { temperature: 1, topP: 0.9 }],
    ["temperature 1, min-p 0.05", { temperature: 1, minP: 0.05 }],
  ];
  const results: BenchResult[] = [];
  for (const [spread, kind] of [
    [3, "peaked"],
    [1, "flat"],
  ] as const) {
    const rows = Array.from({ length: 8 }, (_, i) => row(i + 1, spread));
    for (const [name, opts] of cases) {
      const sampler = createSampler({ ...opts, seed: 7 });
      for (let i = 0; i < 10; i++) sampler.sample(rows[i % rows.length]);
      const t0 = performance.now();
      for (let i = 0; i < ROWS; i++) sampler.sample(rows[i % rows.length]);
      const ms = (performance.now() - t0) / ROWS;
      results.push({ name: `sample a ${VOCAB}-entry ${kind} row: ${name}`, value: ms, unit: "ms/row" });
    }
  }
  return results;
}
