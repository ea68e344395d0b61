/// <reference types="@webgpu/types" />
// Shared by the WebGPU parity tests: one runtime per test file (or a skip reason when no adapter exists), seeded
// random inputs, and error measures against the CPU reference.
import { requestGpuDevice } from "../../../src/backend/webgpu/core/device.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";

process.env.XDG_RUNTIME_DIR ??= "/tmp";

export interface GpuOrSkip {
  readonly rt: GpuRuntime | undefined;
  /** a skip message when no adapter could be created */
  readonly skip: string | false;
}

export async function gpuOrSkip(opts: RuntimeOptions = { checkWrites: true }): Promise<GpuOrSkip> {
  try {
    const info = await requestGpuDevice();
    return { rt: new GpuRuntime(info, opts), skip: false };
  } catch (e) {
    if (process.env.LATENT_REQUIRE_GPU === "1") throw e;
    return { rt: undefined, skip: `no WebGPU adapter (${(e as Error).message})` };
  }
}

/** Deterministic uniform and normal draws (mulberry32). */
export { Mulberry32 as Rng } from "../../helpers/rng.js";

export { relErr } from "../../helpers/measure.js";

export function f32(rt: GpuRuntime, x: ArrayLike<number>, label?: string): GPUBuffer {
  return rt.upload(Float32Array.from(x), label);
}

export function u32(rt: GpuRuntime, x: ArrayLike<number>, label?: string): GPUBuffer {
  return rt.upload(Uint32Array.from(x), label);
}

/** WGSL validation (uniformity included) of a kernel: its compilation messages and a pipeline error, [] when valid. */
export async function wgslProblems(rt: GpuRuntime, code: string): Promise<string[]> {
  const device = rt.device;
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code });
  const messages = (await module.getCompilationInfo()).messages.map((m) => `${m.type}: ${m.message}`);
  device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const error = await device.popErrorScope();
  return error === null ? messages : [...messages, `pipeline: ${error.message}`];
}

/** Largest error seen per test name, printed at exit for the report. */
export const worst = new Map<string, number>();
export function record(name: string, err: number): number {
  worst.set(name, Math.max(worst.get(name) ?? 0, err));
  return err;
}
process.on("exit", () => {
  if (worst.size > 0 && process.env.LATENT_PARITY_REPORT === "1") {
    for (const [k, v] of worst) console.log(`# parity ${k}: max rel err ${v.toExponential(2)}`);
  }
});

/**
 * Tuning-knob sweeps take minutes a case on a software adapter (lavapipe, in CI): beyond the default tuning they run
 * with LATENT_LONG_SWEEPS=1 (scripts/h200-tests.sh sets it). The `skip` option of a sweep case that is not the default.
 */
export const LONG_SWEEPS = process.env.LATENT_LONG_SWEEPS === "1";
export function sweepSkip(skip: string | false | undefined, isDefault: boolean): string | false | undefined {
  return skip || (isDefault || LONG_SWEEPS ? false : "a tuning sweep beyond the default: LATENT_LONG_SWEEPS=1");
}
