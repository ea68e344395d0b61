import { type CpuActivations, CpuBackend } from "../backend/cpu/fast.js";
import type { CpuKernels } from "../backend/cpu/native.js";
import { NoGpuError, WebGPUKernels, type GpuActivations } from "../backend/webgpu/index.js";
import { GGUFFile } from "../gguf/file.js";
import { UsageError } from "../util/errors.js";
import type { ConfigOptions, ModelConfig } from "../model/config.js";
import type { DeepSeek2 } from "../model/deepseek2.js";
import { loadModelFrom, type FromFileOptions } from "../model/from-file.js";
// chat templates render in a worker thread with a time limit wherever a model is loaded in Node
import "../tokenizer/chat-thread.js";
import type { LoadProgress } from "../model/weights.js";
import type { ExpertStore } from "../model/expert-store.js";
import { planStreaming, type StreamingOptions } from "./memory-budget.js";
import { ThreadReader } from "./expert-reader.js";

export { loadModelFrom, type ModelFromFile, type FromFileOptions } from "../model/from-file.js";

export interface LoadedModel {
  readonly file: GGUFFile;
  readonly config: ModelConfig;
  readonly model: DeepSeek2;
  /** the fast CPU backend when loaded with backend "cpu" (its kernels are model.kernels) */
  readonly backend?: CpuBackend;
  /** the WebGPU kernels when loaded with backend "webgpu" (or "auto" on a machine with a hardware adapter) */
  readonly gpu?: WebGPUKernels;
  /** where the routed experts come from when they are streamed from disk (its `stats` count hits and reads) */
  readonly experts?: ExpertStore;
}

/** Backend names the CLI accepts. */
export type BackendChoice = "cpu" | "reference" | "webgpu" | "auto";

/** Release a loaded model's backend threads / GPU worker. */
export function closeLoaded(m: LoadedModel): void {
  m.backend?.close();
  void m.gpu?.close();
  m.experts?.close();
}

/** Software adapters (Mesa lavapipe/llvmpipe, SwiftShader): correct but slower than the CPU backend, so "auto" skips them. */
export function isSoftwareAdapter(name: string): boolean {
  return /llvmpipe|lavapipe|swiftshader|software/i.test(name);
}

/** "auto": WebGPU when a hardware adapter exists, else the cpu backend. */
function autoGpu(activations: GpuActivations | undefined): WebGPUKernels | undefined {
  try {
    const k = new WebGPUKernels(activations === undefined ? {} : { activations });
    if (!isSoftwareAdapter(k.adapter)) return k;
    void k.close();
  } catch (e) {
    if (!(e instanceof NoGpuError)) throw e;
  }
  return undefined;
}

/**
 * Matrix kernels: "cpu" = WebAssembly SIMD over shared memory + worker threads; "reference" (default) = plain;
 * "webgpu" = every matrix product on the GPU (WebGPUKernels); "auto" = webgpu on a hardware adapter, else cpu.
 */
export interface BackendOptions {
  readonly backend?: BackendChoice;
  /** threads of the "cpu" backend, the caller's included (default: available parallelism) */
  readonly threads?: number;
  /** activations of the "cpu" backend's integer dots: "exact" (default) or the faster, opt-in "q8" (CpuActivations) */
  readonly cpuActivations?: CpuActivations;
  /** activations of the "webgpu" backend's matrix products: "exact" (default) or the faster, opt-in "int15" and "q8" */
  readonly gpuActivations?: GpuActivations;
  /** bytes the "cpu" backend's arenas keep free when q8 mode makes its Q5_0 copies (CpuBackendOptions.copyHeadroom) */
  readonly cpuCopyHeadroom?: number;
  /** spin iterations of the "cpu" backend's waiting threads before they sleep (CpuBackendOptions.spin) */
  readonly cpuSpin?: number;
  /** kernels of the "cpu" backend's exact integer products: "native" (default where built) or "wasm" (CpuKernels) */
  readonly cpuKernels?: CpuKernels;
}

/** What loadModel takes beyond the path: config overrides, kernels, NaN policy, memory budget. */
export interface LoadModelOptions
  extends ConfigOptions,
    BackendOptions,
    StreamingOptions,
    Pick<FromFileOptions, "onNonFinite"> {
  /** told one line when the routed experts are streamed from disk (the budget and the cache size), and when the cpu backend cannot run cpuActivations "q8" (without onNote that line goes to stderr) */
  readonly onNote?: (line: string) => void;
}

/**
 * Open a GGUF (any shard of a split model), parse the config, load the weights (kept in their quant types). A model
 * larger than the memory budget (options.maxMemory, default what the machine can spare) keeps its routed experts on
 * disk and reads them on demand through a bounded cache (cpu and reference backends).
 */
export function loadModel(path: string, onProgress?: LoadProgress, options: LoadModelOptions = {}): LoadedModel {
  const file = GGUFFile.open(path);
  const askedToStream = options.maxMemory !== undefined || options.expertCache !== undefined;
  if (askedToStream && options.backend === "webgpu") {
    file.close();
    throw new UsageError("streaming experts from disk (--max-memory) needs the cpu or reference backend");
  }
  const gpu =
    options.backend === "webgpu"
      ? new WebGPUKernels(options.gpuActivations === undefined ? {} : { activations: options.gpuActivations })
      : options.backend === "auto" && !askedToStream
        ? autoGpu(options.gpuActivations)
        : undefined;
  if (gpu !== undefined) {
    try {
      const { config, model } = loadModelFrom(file, onProgress, { ...options, kernels: gpu });
      gpu.upload(model.weights);
      return { file, config, model, gpu };
    } catch (e) {
      void gpu.close();
      file.close();
      throw e;
    }
  }
  // backend "cpu": matrices are read straight into the backend's shared wasm memory, never held twice
  const backend =
    options.backend === "cpu" || options.backend === "auto"
      ? new CpuBackend({
          threads: options.threads,
          ...(options.cpuActivations === undefined ? {} : { activations: options.cpuActivations }),
          ...(options.cpuCopyHeadroom === undefined ? {} : { copyHeadroom: options.cpuCopyHeadroom }),
          ...(options.cpuSpin === undefined ? {} : { spin: options.cpuSpin }),
          ...(options.cpuKernels === undefined ? {} : { kernels: options.cpuKernels }),
          ...(options.onNote === undefined ? {} : { onNote: options.onNote }),
        })
      : undefined;
  try {
    let experts: ExpertStore | undefined;
    const slots = backend && {
      alloc: (n: number) => backend.allocSlot(n),
      reuse: (v: Uint8Array) => backend.releaseSlot(v),
    };
    const { config, model } = loadModelFrom(file, onProgress, {
      ...options,
      kernels: backend,
      weightsFrom: backend?.adopt(file),
      experts: (config) => {
        const plan = planStreaming(file, config, options, slots, backend !== undefined, () => new ThreadReader(file));
        if (plan !== undefined) options.onNote?.(plan.note);
        experts = plan?.store;
        return experts;
      },
    });
    return { file, config, model, backend, ...(experts === undefined ? {} : { experts }) };
  } catch (e) {
    // a file refused mid-load must not leave the backend's worker threads holding the process open
    backend?.close();
    file.close();
    throw e;
  }
}
