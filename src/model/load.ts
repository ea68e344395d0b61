import { CpuBackend } from "../backend/cpu/fast.js";
import { GGUFFile } from "../gguf/file.js";
import { parseConfig, type ConfigOptions, type ModelConfig } from "./config.js";
import { DeepSeek2 } from "./deepseek2.js";
import { GlmDsa } from "./glm-dsa.js";
import { loadWeights, type LoadProgress } from "./weights.js";

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
  const vocabFromTensor = file.tensors.get("token_embd.weight")?.ne[1];
  const config = parseConfig(file.metadata, vocabFromTensor, options);
  // backend "cpu": matrices are read straight into the backend's shared wasm memory (issue 7)
  const backend = options.backend === "cpu" ? new CpuBackend({ threads: options.threads }) : undefined;
  const weights = loadWeights(backend?.adopt(file) ?? file, config, onProgress);
  const model = config.arch === "glm-dsa" ? new GlmDsa(config, weights) : new DeepSeek2(config, weights);
  if (backend !== undefined) model.kernels = backend;
  return { file, config, model, backend };
}
