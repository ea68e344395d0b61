import { isGGUFArray, type Metadata } from "../gguf/metadata.js";
import { ModelConfigError } from "../util/errors.js";

export type Arch = "deepseek2" | "glm-dsa";
export type GatingFunc = "softmax" | "sigmoid";

export interface YarnConfig {
  /** f: context extension factor (freq_scale = 1/f) */
  readonly factor: number;
  /** N0: original_max_position_embeddings */
  readonly originalContext: number;
  readonly betaFast: number;
  readonly betaSlow: number;
  /** m_all, recovered from yarn_log_multiplier = 0.1·m_all (deepseek2 only; undefined when absent/ignored) */
  readonly mscaleAllDim: number | undefined;
}

export interface IndexerConfig {
  /** n_idx: indexer heads */
  readonly nHead: number;
  /** D_idx: indexer head dim */
  readonly headDim: number;
  /** keys kept per query */
  readonly topK: number;
}

/** Everything the forward pass needs, from `<arch>.*` GGUF metadata. Symbols follow the reference (§3). */
export interface ModelConfig {
  readonly arch: Arch;
  readonly nVocab: number;
  /** Hd */
  readonly nEmbd: number;
  /** layers of the main stack (glm-dsa: block_count − nextn_predict_layers) */
  readonly nLayer: number;
  /** MTP layers stored after the main stack (skipped) */
  readonly nNextn: number;
  readonly contextLength: number;
  /** H */
  readonly nHead: number;
  /** Lq; 0 = no q-LoRA (a single attn_q) */
  readonly qLoraRank: number;
  /** L */
  readonly kvLoraRank: number;
  /** P */
  readonly qkNope: number;
  /** R */
  readonly qkRope: number;
  /** V */
  readonly vHead: number;
  /** F: dense FFN width */
  readonly nFF: number;
  /** Fe: expert FFN width */
  readonly nFFExp: number;
  readonly nExpert: number;
  readonly nExpertUsed: number;
  readonly nExpertShared: number;
  readonly nLeadingDense: number;
  readonly nGroup: number;
  readonly nGroupUsed: number;
  readonly gating: GatingFunc;
  /** where `gating` came from: the key, or a documented default */
  readonly gatingSource: "metadata" | "default-softmax" | "glm47-flash-heuristic" | "glm-dsa-default";
  readonly weightsNorm: boolean;
  /** routed_scaling_factor; 1 when absent or 0 */
  readonly weightsScale: number;
  readonly rmsEps: number;
  readonly ropeBase: number;
  readonly yarn: YarnConfig | undefined;
  readonly indexer: IndexerConfig | undefined;
  /** softmax scale of MLA scores: mscale²/√(P+R) */
  readonly kqScale: number;
  /** multiplier on rope cos/sin (1 except glm-dsa with YaRN, see ropeMscale) */
  readonly ropeMscale: number;
  /**
   * How expert groups are scored. "definition": V2 softmax models by the max of each group (DeepSeek-V2's
   * group_limited_greedy), sigmoid models by the sum of the top-2. "llama.cpp": always the top-2 sum, as llama.cpp
   * does — a deviation for V2-style files, selectable only to compare against llama.cpp.
   */
  readonly groupScoring: "definition" | "llama.cpp";
}

export interface ConfigOptions {
  /** score expert groups as llama.cpp does (see ModelConfig.groupScoring) */
  readonly llamaCppGroupScoring?: boolean;
}

/** get_mscale(f, m) of DeepSeek YaRN. */
export function yarnMscale(factor: number, m: number): number {
  return factor <= 1 ? 1 : 0.1 * m * Math.log(factor) + 1;
}

const GLM47_FLASH_VOCAB = 154880;

/**
 * Ceilings on what a file may declare, checked before anything is sized from it. Each is far above every released
 * model (DeepSeek-V3: 61 layers, 128 heads, 256 experts, width 7168, 163 840 context, 129 280 vocab) and far below
 * what would exhaust memory when an array is allocated per layer, head or expert. The tensors then pin the exact
 * values (loadWeights checks every shape; loadModelFrom checks block_count against the blk.N tensors).
 */
export const CONFIG_LIMITS = {
  layers: 4096,
  heads: 65536,
  experts: 65536,
  /** widths, ranks and head dims */
  width: 1 << 20,
  vocab: 1 << 24,
  context: 1 << 26,
} as const;

export function parseConfig(meta: Metadata, nVocabFromTensors?: number, options: ConfigOptions = {}): ModelConfig {
  const arch = meta.requireString("general.architecture");
  if (arch !== "deepseek2" && arch !== "glm-dsa") {
    throw new ModelConfigError(`general.architecture = "${arch}": latent runs deepseek2 and glm-dsa models`);
  }
  const k = (name: string): string => `${arch}.${name}`;
  const need = (name: string): number => meta.requireNumber(k(name));
  const opt = (name: string, dflt: number): number => meta.number(k(name)) ?? dflt;
  const positive = (name: string, v: number, max: number = CONFIG_LIMITS.width): number => {
    if (!Number.isInteger(v) || v <= 0) throw new ModelConfigError(`${k(name)} = ${v} must be a positive integer`);
    return atMost(name, v, max);
  };
  const atMost = (name: string, v: number, max: number): number => {
    if (v > max) throw new ModelConfigError(`${k(name)} = ${v} exceeds ${max}, more than any model latent can run (a corrupt or hostile file)`);
    return v;
  };
  /** a real-valued hyper-parameter that must be finite and pass `ok` (`what` says the range) */
  const real = (name: string, v: number, ok: (x: number) => boolean, what: string): number => {
    if (!Number.isFinite(v) || !ok(v)) throw new ModelConfigError(`${k(name)} = ${v} must be ${what}`);
    return v;
  };

  const blockCount = positive("block_count", need("block_count"), CONFIG_LIMITS.layers);
  const nNextn = meta.integer(k("nextn_predict_layers")) ?? 0;
  if (nNextn >= blockCount) throw new ModelConfigError(`${k("nextn_predict_layers")} = ${nNextn} leaves no main layers of ${k("block_count")} = ${blockCount}`);
  const nLayer = blockCount - nNextn;

  const perLayerUniform = (name: string, required: boolean, dflt = 0): number => {
    if (!meta.has(k(name))) {
      if (required) throw new ModelConfigError(`missing metadata key "${k(name)}"`);
      return dflt;
    }
    // A scalar needs no per-layer copy; an array is already in memory (its size bounded by the file's).
    if (!isGGUFArray(meta.raw(k(name))!)) return meta.requireNumber(k(name));
    const arr = meta.perLayer(k(name), blockCount)!;
    const first = arr[0]!;
    if (arr.slice(0, nLayer).some((v) => v !== first)) {
      throw new ModelConfigError(`${k(name)} varies per layer (${arr.join(",")}); latent needs one value for every layer`);
    }
    return first;
  };

  const nEmbd = positive("embedding_length", need("embedding_length"));
  const nHead = positive("attention.head_count", perLayerUniform("attention.head_count", true), CONFIG_LIMITS.heads);
  const kvLoraRank = positive("attention.kv_lora_rank", need("attention.kv_lora_rank"));
  const qLoraRank = atMost("attention.q_lora_rank", meta.integer(k("attention.q_lora_rank")) ?? 0, CONFIG_LIMITS.width);
  const qkRope = positive("rope.dimension_count", need("rope.dimension_count"));
  if (qkRope % 2 !== 0) throw new ModelConfigError(`${k("rope.dimension_count")} = ${qkRope} must be even`);

  // Current GGUFs carry the per-head dims in *_mla keys; legacy ones in key_length/value_length.
  const keyMla = meta.integer(k("attention.key_length_mla"));
  const valueMla = meta.integer(k("attention.value_length_mla"));
  let qkHead: number;
  let vHead: number;
  if (keyMla !== undefined || valueMla !== undefined) {
    if (keyMla === undefined || valueMla === undefined) {
      throw new ModelConfigError(`${k("attention.key_length_mla")} and ${k("attention.value_length_mla")} must both be present`);
    }
    qkHead = atMost("attention.key_length_mla", keyMla, CONFIG_LIMITS.width);
    vHead = atMost("attention.value_length_mla", valueMla, CONFIG_LIMITS.width);
    const keyLen = meta.integer(k("attention.key_length"));
    if (keyLen !== undefined && keyLen !== kvLoraRank + qkRope) {
      throw new ModelConfigError(`${k("attention.key_length")} = ${keyLen}, expected kv_lora_rank + rope dims = ${kvLoraRank + qkRope} in an MLA file`);
    }
  } else {
    qkHead = atMost("attention.key_length", meta.integer(k("attention.key_length")) ?? 0, CONFIG_LIMITS.width);
    vHead = atMost("attention.value_length", meta.integer(k("attention.value_length")) ?? 0, CONFIG_LIMITS.width);
    if (qkHead === 0 || vHead === 0) throw new ModelConfigError(`missing ${k("attention.key_length_mla")} / ${k("attention.key_length")}: cannot size the attention heads`);
  }
  const qkNope = qkHead - qkRope;
  if (qkNope < 1) throw new ModelConfigError(`key length ${qkHead} must exceed rope dims ${qkRope}`);
  positive("attention.value_length_mla", vHead);

  const nExpert = atMost("expert_count", meta.integer(k("expert_count")) ?? 0, CONFIG_LIMITS.experts);
  const nExpertUsed = atMost("expert_used_count", meta.integer(k("expert_used_count")) ?? 0, CONFIG_LIMITS.experts);
  const nLeadingDense = meta.integer(k("leading_dense_block_count")) ?? 0;
  const hasMoe = nExpert > 0 && nLeadingDense < nLayer;
  if (hasMoe && (nExpertUsed < 1 || nExpertUsed > nExpert)) {
    throw new ModelConfigError(`${k("expert_used_count")} = ${nExpertUsed} must be in 1..${k("expert_count")} (${nExpert})`);
  }
  const nFF = nLeadingDense > 0 ? positive("feed_forward_length", perLayerUniform("feed_forward_length", true)) : perLayerUniform("feed_forward_length", false);
  const nFFExp = hasMoe ? positive("expert_feed_forward_length", perLayerUniform("expert_feed_forward_length", true)) : 0;
  const nExpertShared = hasMoe ? atMost("expert_shared_count", meta.integer(k("expert_shared_count")) ?? 0, CONFIG_LIMITS.experts) : 0;
  const nGroup = Math.max(1, atMost("expert_group_count", meta.integer(k("expert_group_count")) ?? 1, CONFIG_LIMITS.experts));
  const nGroupUsed = Math.max(1, atMost("expert_group_used_count", meta.integer(k("expert_group_used_count")) ?? nGroup, CONFIG_LIMITS.experts));
  if (hasMoe && nGroup > 1) {
    if (nExpert % nGroup !== 0) throw new ModelConfigError(`${k("expert_count")} = ${nExpert} is not divisible by ${k("expert_group_count")} = ${nGroup}`);
    if (nGroupUsed > nGroup) throw new ModelConfigError(`${k("expert_group_used_count")} = ${nGroupUsed} exceeds ${k("expert_group_count")} = ${nGroup}`);
    if (nGroupUsed * (nExpert / nGroup) < nExpertUsed) throw new ModelConfigError(`${nGroupUsed} groups of ${nExpert / nGroup} experts cannot supply ${nExpertUsed} experts`);
  }

  const nVocab = meta.integer(k("vocab_size")) ?? nVocabFromTensors ?? meta.stringArray("tokenizer.ggml.tokens")?.length;
  if (nVocab === undefined) throw new ModelConfigError(`cannot tell the vocabulary size: no ${k("vocab_size")}, no tokenizer.ggml.tokens`);
  atMost("vocab_size", nVocab, CONFIG_LIMITS.vocab);
  const contextLength = positive("context_length", meta.integer(k("context_length")) ?? 4096, CONFIG_LIMITS.context);

  let gating: GatingFunc;
  let gatingSource: ModelConfig["gatingSource"];
  const gf = meta.integer(k("expert_gating_func"));
  if (gf !== undefined && gf !== 0) {
    if (gf !== 1 && gf !== 2) throw new ModelConfigError(`${k("expert_gating_func")} = ${gf}: expected 1 (softmax) or 2 (sigmoid)`);
    gating = gf === 1 ? "softmax" : "sigmoid";
    gatingSource = "metadata";
  } else if (arch === "glm-dsa") {
    gating = "sigmoid";
    gatingSource = "glm-dsa-default";
  } else if ((blockCount === 47 || blockCount === 48) && nVocab === GLM47_FLASH_VOCAB) {
    // GLM-4.7-Flash files made before llama.cpp PR #18980 lack the key; the model is sigmoid-gated.
    gating = "sigmoid";
    gatingSource = "glm47-flash-heuristic";
  } else {
    gating = "softmax";
    gatingSource = "default-softmax";
  }

  const scale = real("expert_weights_scale", meta.number(k("expert_weights_scale")) ?? 0, (x) => x >= 0, "a finite number ≥ 0 (0 = absent = 1)");
  const weightsScale = scale === 0 ? 1 : scale;
  // ε ≥ 1 swamps the mean square of any real activation: the norm would return ~x/√ε, not a normalized vector.
  const rmsEps = real("attention.layer_norm_rms_epsilon", meta.number(k("attention.layer_norm_rms_epsilon")) ?? 1e-6, (x) => x > 0 && x < 1, "a finite number in (0, 1)");
  const ropeBase = real("rope.freq_base", meta.number(k("rope.freq_base")) ?? 10000, (x) => x > 1, "a finite number > 1");

  const scalingType = meta.string(k("rope.scaling.type")) ?? "none";
  let yarn: YarnConfig | undefined;
  if (scalingType === "yarn") {
    const factor = real("rope.scaling.factor", meta.number(k("rope.scaling.factor")) ?? 1, (x) => x >= 1, "a finite number ≥ 1 for YaRN");
    const logMulRaw = meta.number(k("rope.scaling.yarn_log_multiplier"));
    const logMul = logMulRaw === undefined ? undefined : real("rope.scaling.yarn_log_multiplier", logMulRaw, (x) => x >= 0, "a finite number ≥ 0");
    const origRaw = meta.number(k("rope.scaling.original_context_length")) ?? 4096;
    if (!Number.isInteger(origRaw)) throw new ModelConfigError(`${k("rope.scaling.original_context_length")} = ${origRaw} must be a positive integer`);
    const positiveBeta = (name: string, dflt: number): number => real(name, meta.number(k(name)) ?? dflt, (x) => x > 0, "a finite number > 0");
    yarn = {
      factor,
      originalContext: positive("rope.scaling.original_context_length", origRaw, CONFIG_LIMITS.context),
      betaFast: positiveBeta("rope.scaling.yarn_beta_fast", 32),
      betaSlow: positiveBeta("rope.scaling.yarn_beta_slow", 1),
      // The converter writes 0.1·mscale_all_dim. glm-dsa (llama.cpp) never reads the key; see ropeMscale below.
      mscaleAllDim: arch === "deepseek2" && logMul !== undefined ? logMul / 0.1 : undefined,
    };
  } else if (scalingType !== "none" && scalingType !== "") {
    throw new ModelConfigError(`${k("rope.scaling.type")} = "${scalingType}": only "yarn" and "none" are supported`);
  }

  // Softmax scale and rope magnitude. deepseek2 (HF DeepseekV3 semantics): scale = get_mscale(f, m_all)²/√(P+R) and
  // the rope magnitude get_mscale(f,m)/get_mscale(f,m_all) = 1 (m = m_all in every released config).
  // glm-dsa: the file's log multiplier is not read by llama.cpp; both the rope magnitude and √scale are
  // get_mscale(f, 1) — the same as HF when rope_scaling has no mscale/mscale_all_dim pair.
  let mscale = 1;
  let ropeMscale = 1;
  if (yarn !== undefined) {
    if (arch === "deepseek2") {
      mscale = yarn.mscaleAllDim !== undefined ? yarnMscale(yarn.factor, yarn.mscaleAllDim) : 1;
    } else {
      mscale = yarnMscale(yarn.factor, 1);
      ropeMscale = mscale;
    }
  }
  const kqScale = (mscale * mscale) / Math.sqrt(qkNope + qkRope);

  let indexer: IndexerConfig | undefined;
  if (arch === "glm-dsa") {
    const ih = meta.integer(k("attention.indexer.head_count"));
    const id = meta.integer(k("attention.indexer.key_length"));
    const it = meta.integer(k("attention.indexer.top_k"));
    if (ih !== undefined || id !== undefined || it !== undefined) {
      if (!ih || !id || !it) throw new ModelConfigError(`${k("attention.indexer.head_count")}, .key_length and .top_k must all be set and non-zero`);
      if (id < qkRope) throw new ModelConfigError(`${k("attention.indexer.key_length")} = ${id} is smaller than the rope dims ${qkRope}`);
      indexer = { nHead: ih, headDim: id, topK: it };
    }
  }

  return {
    arch,
    nVocab,
    nEmbd,
    nLayer,
    nNextn,
    contextLength,
    nHead,
    qLoraRank,
    kvLoraRank,
    qkNope,
    qkRope,
    vHead,
    nFF,
    nFFExp,
    nExpert,
    nExpertUsed,
    nExpertShared,
    nLeadingDense,
    nGroup,
    nGroupUsed,
    gating,
    gatingSource,
    weightsNorm: meta.bool(k("expert_weights_norm")) ?? false,
    weightsScale,
    rmsEps,
    ropeBase,
    yarn,
    indexer,
    kqScale,
    ropeMscale,
    groupScoring: options.llamaCppGroupScoring === true ? "llama.cpp" : "definition",
  };
}
