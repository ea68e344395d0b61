/**
 * `npm run bench -- webgpu` with LATENT_BENCH_MODEL=FILE.gguf: the fused WebGPU pipeline's prefill / decode speed and
 * roofline fraction (src/backend/webgpu/bench.ts; on the lent H200 run the compiled
 * `node dist/backend/webgpu/bench.js FILE.gguf` — see BENCHMARKS.md "## WebGPU").
 */
import type { BenchResult } from "./run.js";
import { runWebGpuBench } from "../src/backend/webgpu/bench.js";

export async function run(): Promise<BenchResult[]> {
  const path = process.env.LATENT_BENCH_MODEL;
  if (path === undefined) {
    console.log("webgpu: set LATENT_BENCH_MODEL to a GGUF (e.g. latent synth --preset v2-lite --type Q4_K_M -o v2-lite.gguf)");
    return [];
  }
  const batches = process.env.LATENT_BENCH_BATCHES?.split(",").map(Number);
  return runWebGpuBench(path, { batches });
}
