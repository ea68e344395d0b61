import { CpuBackend } from "../backend/cpu/fast.js";
import { GGUFFile } from "../gguf/file.js";
import type { ConfigOptions, ModelConfig } from "./config.js";
import type { DeepSeek2 } from "./deepseek2.js";
import { loadModelFrom } from "./from-file.js";
import type { LoadProgress } from "./weights.js";

export { loadModelFrom, type ModelFromFile, type FromFileOptions } from "./from-file.js";

export interface LoadedModel {
  readonly file: GGUFFile;
  readonly config: ModelConfig;
  readonly model: DeepSeek2;
  /** the fast CPU backend when loaded with backend "cpu" (its kernels are model.kernels) */
  readonly backend?: CpuBackend;
}

/** Matrix kernels: "cpu" = WebAssembly SIMD over shared memory + worker threads; "reference" (default) = plain. */
export interface BackendOptions {
  readonly backend?: "cpu" | "reference";
  /** threads of the "cpu" backend, the caller's included (default: available parallelism) */
  readonly threads?: number;
}

/** Open a GGUF (any shard of a split model), parse the config, load the weights (kept in their quant types). */
export function loadModel(path: string, onProgress?: LoadProgress, options: ConfigOptions & BackendOptions = {}): LoadedModel {
  const file = GGUFFile.open(path);
  // backend "cpu": matrices are read straight into the backend's shared wasm memory (issue 7)
  const backend = options.backend === "cpu" ? new CpuBackend({ threads: options.threads }) : undefined;
  const { config, model } = loadModelFrom(file, onProgress, { ...options, kernels: backend, weightsFrom: backend?.adopt(file) });
  return { file, config, model, backend };
}
