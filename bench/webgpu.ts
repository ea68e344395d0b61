/**
 * `npm run bench -- --backend webgpu --model FILE.gguf [--batches 1,8,64] [--gpu-activations q8]` (or `npm run bench -- webgpu` with
 * LATENT_BENCH_MODEL=FILE.gguf, LATENT_BENCH_BATCHES=1,8,64): the fused WebGPU pipeline's prefill / decode speed and
 * roofline fraction (bench/webgpu-model.ts, which also runs alone:
 * `node --import tsx bench/webgpu-model.ts FILE.gguf`, or compiled through scripts/h200-bench.sh — see BENCHMARKS.md "## WebGPU").
 */
import type { BenchResult } from "./run.js";
import { arg } from "./args.js";
import { runWebGpuBench } from "./webgpu-model.js";
import { GPU_ACTIVATIONS, type GpuActivations } from "../src/backend/webgpu/core/runtime.js";
import { UsageError } from "../src/util/errors.js";

export async function run(): Promise<BenchResult[]> {
  const path = arg("model") ?? process.env.LATENT_BENCH_MODEL;
  if (path === undefined) {
    console.log(
      "webgpu: give a GGUF with --model FILE.gguf (or LATENT_BENCH_MODEL); the issue's model: latent synth --preset v2-lite --type Q4_K_M -o v2-lite.gguf",
    );
    return [];
  }
  const batches = (arg("batches") ?? process.env.LATENT_BENCH_BATCHES)?.split(",").map(Number);
  const activations = arg("gpuActivations");
  if (activations !== undefined && !(GPU_ACTIVATIONS as readonly string[]).includes(activations))
    throw new UsageError(`--gpu-activations must be ${GPU_ACTIVATIONS.join(" or ")}, got "${activations}"`);
  return runWebGpuBench(path, {
    batches,
    ...(activations !== undefined ? { activations: activations as GpuActivations } : {}),
  });
}
