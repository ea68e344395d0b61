/**
 * A model from an open GGUFFile, whatever its bytes come from (browser-safe: no Node-only imports, no worker-thread
 * backend; `load.ts` adds `loadModel(path, …)` and the fast CPU backend for Node).
 */
import type { MatKernels } from "../backend/cpu/kernels.js";
import type { GGUFFile } from "../gguf/gguf-file.js";
import { parseConfig, type ConfigOptions, type ModelConfig } from "./config.js";
import { DeepSeek2 } from "./deepseek2.js";
import { GlmDsa } from "./glm-dsa.js";
import { loadWeights, type LoadProgress } from "./weights.js";

export interface ModelFromFile {
  readonly file: GGUFFile;
  readonly config: ModelConfig;
  readonly model: DeepSeek2;
}

export interface FromFileOptions extends ConfigOptions {
  /** matrix kernels to run with (default: the plain reference kernels) */
  readonly kernels?: MatKernels;
  /** read the weights through this view of the file instead (a backend's wrapper, see CpuBackend.adopt) */
  readonly weightsFrom?: GGUFFile;
}

/** Parse the config of an open GGUF and load its weights (kept in their quant types). */
export function loadModelFrom(file: GGUFFile, onProgress?: LoadProgress, options: FromFileOptions = {}): ModelFromFile {
  const vocabFromTensor = file.tensors.get("token_embd.weight")?.ne[1];
  const config = parseConfig(file.metadata, vocabFromTensor, options);
  const weights = loadWeights(options.weightsFrom ?? file, config, onProgress);
  const model = config.arch === "glm-dsa" ? new GlmDsa(config, weights) : new DeepSeek2(config, weights);
  if (options.kernels !== undefined) model.kernels = options.kernels;
  return { file, config, model };
}
