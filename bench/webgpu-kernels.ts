/**
 * `LATENT_BENCH_KERNEL_TOKENS=1,64 npm run bench -- webgpu-kernels`: each matrix product of a v2-lite decode step alone
 * on the GPU, µs per dispatch and GB/s of weights (bench/webgpu-kernel-bench.ts, which also runs alone:
 * `node --import tsx bench/webgpu-kernel-bench.ts` — see BENCHMARKS.md "## WebGPU").
 */
import type { BenchResult } from "./run.js";
import { runKernelBench } from "./webgpu-kernel-bench.js";

export async function run(): Promise<BenchResult[]> {
  const tokens = process.env.LATENT_BENCH_KERNEL_TOKENS;
  if (tokens === undefined) {
    console.log(
      "webgpu-kernels: set LATENT_BENCH_KERNEL_TOKENS (e.g. 1,64) to time the decode products alone on the GPU",
    );
    return [];
  }
  const timings = await runKernelBench({
    tokens: tokens.split(",").map(Number),
    reps: 100,
    tunes: [process.env.LATENT_BENCH_TUNE ?? ""],
  });
  return timings.map((t) => ({
    name: t.name,
    value: t.usPerDispatch,
    unit: "µs",
    extra: { gb_per_s: t.gbPerS, tune: t.tune },
  }));
}
