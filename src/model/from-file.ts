/**
 * A model from an open GGUFFile, whatever its bytes come from (browser-safe: no Node-only imports, no worker-thread
 * backend; `load.ts` adds `loadModel(path, …)` and the fast CPU backend for Node).
 */
import type { MatKernels } from "./kernels.js";
import type { GGUFFile } from "../gguf/gguf-file.js";
import { parseConfig, type ConfigOptions, type ModelConfig } from "./config.js";
import { DeepSeek2 } from "./deepseek2.js";
import { GlmDsa } from "./glm-dsa.js";
import type { ExpertStore } from "./expert-store.js";
import { loadWeights, type LoadProgress } from "./weights.js";
import { ModelConfigError } from "../util/errors.js";

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
  /** told of each tensor holding NaN/±Inf, which is then loaded anyway; without it such a tensor is a GGUFError */
  readonly onNonFinite?: (message: string) => void;
  /** the store that the routed experts are read through on demand, chosen from the parsed config (none: resident) */
  readonly experts?: (config: ModelConfig) => ExpertStore | undefined;
}

/** Parse the config of an open GGUF and load its weights (kept in their quant types). */
export function loadModelFrom(file: GGUFFile, onProgress?: LoadProgress, options: FromFileOptions = {}): ModelFromFile {
  const vocabFromTensor = file.tensors.get("token_embd.weight")?.ne[1];
  const config = parseConfig(file.metadata, vocabFromTensor, options);
  checkLayerTensors(file, config);
  const store = options.experts?.(config);
  const weights = loadWeights(options.weightsFrom ?? file, config, onProgress, options.onNonFinite ?? "refuse", store);
  const model = config.arch === "glm-dsa" ? new GlmDsa(config, weights) : new DeepSeek2(config, weights);
  if (options.kernels !== undefined) model.kernels = options.kernels;
  return { file, config, model };
}

const BLOCK = /^blk\.(\d+)\./;

/**
 * block_count against the blk.N tensors, before any layer is loaded: every main layer must have tensors and no tensor
 * may lie past the declared layers (a smaller block_count would otherwise silently drop layers).
 */
export function checkLayerTensors(file: GGUFFile, config: ModelConfig): void {
  const blockCount = config.nLayer + config.nNextn;
  const present = new Set<number>();
  for (const name of file.tensors.keys()) {
    const m = BLOCK.exec(name);
    if (m !== null) present.add(Number(m[1]));
  }
  let missing = -1;
  for (let i = 0; i < config.nLayer && missing < 0; i++) if (!present.has(i)) missing = i;
  const beyond = [...present].filter((i) => i >= blockCount);
  if (missing >= 0 || beyond.length > 0) {
    const key = `${config.arch}.block_count`;
    const layers =
      present.size === 0
        ? "no layer tensors"
        : `tensors for ${present.size} layers (blk.${Math.min(...present)} … blk.${Math.max(...present)})`;
    const why =
      missing >= 0 ? `layer ${missing} has no tensors` : `blk.${Math.min(...beyond)} lies past the declared layers`;
    throw new ModelConfigError(`${key} = ${blockCount}, but the file has ${layers}: ${why}`);
  }
}
