import { GGUFFile } from "../gguf/file.js";
import { parseConfig, type ConfigOptions, type ModelConfig } from "./config.js";
import { DeepSeek2 } from "./deepseek2.js";
import { GlmDsa } from "./glm-dsa.js";
import { loadWeights, type LoadProgress } from "./weights.js";

export interface LoadedModel {
  readonly file: GGUFFile;
  readonly config: ModelConfig;
  readonly model: DeepSeek2;
}

/** Open a GGUF (any shard of a split model), parse the config, load the weights (kept in their quant types). */
export function loadModel(path: string, onProgress?: LoadProgress, options: ConfigOptions = {}): LoadedModel {
  const file = GGUFFile.open(path);
  const vocabFromTensor = file.tensors.get("token_embd.weight")?.ne[1];
  const config = parseConfig(file.metadata, vocabFromTensor, options);
  const weights = loadWeights(file, config, onProgress);
  const model = config.arch === "glm-dsa" ? new GlmDsa(config, weights) : new DeepSeek2(config, weights);
  return { file, config, model };
}
