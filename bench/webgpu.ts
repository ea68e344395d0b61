/**
 * `npm run bench -- --backend webgpu --model FILE.gguf [--batches 1,8,64]` (or `npm run bench -- webgpu` with
 * LATENT_BENCH_MODEL=FILE.gguf, LATENT_BENCH_BATCHES=1,8,64): the fused WebGPU pipeline's prefill / decode speed and
 * roofline fraction (src/backend/webgpu/bench.ts; on the lent H200 run the compiled
 * `node dist/backend/webgpu/bench.js FILE.gguf`, or scripts/h200-bench.sh — see BENCHMARKS.md "## WebGPU").
 */
import type { BenchResult } from "./run.js";
import { arg } from "./args.js";
import { runWebGpuBench } from "../src/backend/webgpu/bench.js";

export async function run(): Promise<BenchResult[]> {
  const path = arg("model") ?? process.env.LATENT_BENCH_MODEL;
  if (path === undefined) {
    console.log("webgpu: give a GGUF with --model FILE.gguf (or LATENT_BENCH_MODEL); the issue's model: latent synth --preset v2-lite --type Q4_K_M -o v2-lite.gguf");
    return [];
  }
  const batches = (arg("batches") ?? process.env.LATENT_BENCH_BATCHES)?.split(",").map(Number);
  return runWebGpuBench(path, { batches });
}
