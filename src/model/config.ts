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
  const keys = new ArchKeys(meta, arch);
  const layers = readLayerCounts(keys);
  const dims = readAttentionDims(keys, layers);
  const experts = readExperts(keys, layers);
  const nVocab =
    meta.integer(keys.key("vocab_size")) ?? nVocabFromTensors ?? meta.stringArray("tokenizer.ggml.tokens")?.length;
  if (nVocab === undefined)
    throw new ModelConfigError(
      `cannot tell the vocabulary size: no ${keys.key("vocab_size")}, no tokenizer.ggml.tokens`,
    );
  keys.atMost("vocab_size", nVocab, CONFIG_LIMITS.vocab);
  const contextLength = keys.positive("context_length", keys.integer("context_length") ?? 4096, CONFIG_LIMITS.context);
  const gating = readGating(keys, layers.blockCount, nVocab);
  const scale = keys.real(
    "expert_weights_scale",
    keys.number("expert_weights_scale") ?? 0,
    (x) => x >= 0,
    "a finite number ≥ 0 (0 = absent = 1)",
  );
  // ε ≥ 1 swamps the mean square of any real activation: the norm would return ~x/√ε, not a normalized vector.
  const rmsEps = keys.real(
    "attention.layer_norm_rms_epsilon",
    keys.number("attention.layer_norm_rms_epsilon") ?? 1e-6,
    (x) => x > 0 && x < 1,
    "a finite number in (0, 1)",
  );
  const rope = readRope(keys);
  const scales = attentionScales(arch, rope.yarn, dims.qkNope + dims.qkRope);
  const indexer = readIndexer(keys, dims.qkRope);

  return {
    arch,
    nVocab,
    nEmbd: dims.nEmbd,
    nLayer: layers.nLayer,
    nNextn: layers.nNextn,
    contextLength,
    nHead: dims.nHead,
    qLoraRank: dims.qLoraRank,
    kvLoraRank: dims.kvLoraRank,
    qkNope: dims.qkNope,
    qkRope: dims.qkRope,
    vHead: dims.vHead,
    nFF: experts.nFF,
    nFFExp: experts.nFFExp,
    nExpert: experts.nExpert,
    nExpertUsed: experts.nExpertUsed,
    nExpertShared: experts.nExpertShared,
    nLeadingDense: experts.nLeadingDense,
    nGroup: experts.nGroup,
    nGroupUsed: experts.nGroupUsed,
    gating: gating.gating,
    gatingSource: gating.gatingSource,
    weightsNorm: meta.bool(keys.key("expert_weights_norm")) ?? false,
    weightsScale: scale === 0 ? 1 : scale,
    rmsEps,
    ropeBase: rope.ropeBase,
    yarn: rope.yarn,
    indexer,
    kqScale: scales.kqScale,
    ropeMscale: scales.ropeMscale,
    groupScoring: options.llamaCppGroupScoring === true ? "llama.cpp" : "definition",
  };
}

/** The `<arch>.*` keys of a file, read with the range checks every config value gets (errors name the key). */
class ArchKeys {
  constructor(
    readonly meta: Metadata,
    readonly arch: Arch,
  ) {}

  key(name: string): string {
    return `${this.arch}.${name}`;
  }

  need(name: string): number {
    return this.meta.requireNumber(this.key(name));
  }

  integer(name: string): number | undefined {
    return this.meta.integer(this.key(name));
  }

  number(name: string): number | undefined {
    return this.meta.number(this.key(name));
  }

  positive(name: string, v: number, max: number = CONFIG_LIMITS.width): number {
    if (!Number.isInteger(v) || v <= 0)
      throw new ModelConfigError(`${this.key(name)} = ${v} must be a positive integer`);
    return this.atMost(name, v, max);
  }

  atMost(name: string, v: number, max: number): number {
    if (v > max)
      throw new ModelConfigError(
        `${this.key(name)} = ${v} exceeds ${max}, more than any model latent can run (a corrupt or hostile file)`,
      );
    return v;
  }

  /** a real-valued hyper-parameter that must be finite and pass `ok` (`what` says the range) */
  real(name: string, v: number, ok: (x: number) => boolean, what: string): number {
    if (!Number.isFinite(v) || !ok(v)) throw new ModelConfigError(`${this.key(name)} = ${v} must be ${what}`);
    return v;
  }

  /** a key that may be one value or one per layer; the main layers must agree */
  perLayerUniform(name: string, layers: LayerCounts, required: boolean, dflt = 0): number {
    const key = this.key(name);
    if (!this.meta.has(key)) {
      if (required) throw new ModelConfigError(`missing metadata key "${key}"`);
      return dflt;
    }
    // A scalar needs no per-layer copy; an array is already in memory (its size bounded by the file's).
    if (!isGGUFArray(this.meta.raw(key)!)) return this.meta.requireNumber(key);
    const arr = this.meta.perLayer(key, layers.blockCount)!;
    const first = arr[0];
    if (arr.slice(0, layers.nLayer).some((v) => v !== first)) {
      throw new ModelConfigError(`${key} varies per layer (${arr.join(",")}); latent needs one value for every layer`);
    }
    return first;
  }
}

interface LayerCounts {
  readonly blockCount: number;
  readonly nNextn: number;
  readonly nLayer: number;
}

function readLayerCounts(keys: ArchKeys): LayerCounts {
  const blockCount = keys.positive("block_count", keys.need("block_count"), CONFIG_LIMITS.layers);
  const nNextn = keys.integer("nextn_predict_layers") ?? 0;
  if (nNextn >= blockCount)
    throw new ModelConfigError(
      `${keys.key("nextn_predict_layers")} = ${nNextn} leaves no main layers of ${keys.key("block_count")} = ${blockCount}`,
    );
  return { blockCount, nNextn, nLayer: blockCount - nNextn };
}

type AttentionDims = Pick<ModelConfig, "nEmbd" | "nHead" | "kvLoraRank" | "qLoraRank" | "qkRope" | "qkNope" | "vHead">;

/** Width, heads, LoRA ranks and per-head dims of MLA. */
function readAttentionDims(keys: ArchKeys, layers: LayerCounts): AttentionDims {
  const nEmbd = keys.positive("embedding_length", keys.need("embedding_length"));
  const nHead = keys.positive(
    "attention.head_count",
    keys.perLayerUniform("attention.head_count", layers, true),
    CONFIG_LIMITS.heads,
  );
  const kvLoraRank = keys.positive("attention.kv_lora_rank", keys.need("attention.kv_lora_rank"));
  const qLoraRank = keys.atMost(
    "attention.q_lora_rank",
    keys.integer("attention.q_lora_rank") ?? 0,
    CONFIG_LIMITS.width,
  );
  const qkRope = keys.positive("rope.dimension_count", keys.need("rope.dimension_count"));
  if (qkRope % 2 !== 0) throw new ModelConfigError(`${keys.key("rope.dimension_count")} = ${qkRope} must be even`);
  const { qkHead, vHead } = readHeadDims(keys, kvLoraRank + qkRope);
  const qkNope = qkHead - qkRope;
  if (qkNope < 1) throw new ModelConfigError(`key length ${qkHead} must exceed rope dims ${qkRope}`);
  keys.positive("attention.value_length_mla", vHead);
  return { nEmbd, nHead, kvLoraRank, qLoraRank, qkRope, qkNope, vHead };
}

/** Per-head key and value dims: current GGUFs carry them in *_mla keys; legacy ones in key_length/value_length. */
function readHeadDims(keys: ArchKeys, latentWidth: number): { qkHead: number; vHead: number } {
  const keyMla = keys.integer("attention.key_length_mla");
  const valueMla = keys.integer("attention.value_length_mla");
  if (keyMla !== undefined || valueMla !== undefined) {
    if (keyMla === undefined || valueMla === undefined) {
      throw new ModelConfigError(
        `${keys.key("attention.key_length_mla")} and ${keys.key("attention.value_length_mla")} must both be present`,
      );
    }
    const qkHead = keys.atMost("attention.key_length_mla", keyMla, CONFIG_LIMITS.width);
    const vHead = keys.atMost("attention.value_length_mla", valueMla, CONFIG_LIMITS.width);
    const keyLen = keys.integer("attention.key_length");
    if (keyLen !== undefined && keyLen !== latentWidth) {
      throw new ModelConfigError(
        `${keys.key("attention.key_length")} = ${keyLen}, expected kv_lora_rank + rope dims = ${latentWidth} in an MLA file`,
      );
    }
    return { qkHead, vHead };
  }
  const qkHead = keys.atMost("attention.key_length", keys.integer("attention.key_length") ?? 0, CONFIG_LIMITS.width);
  const vHead = keys.atMost("attention.value_length", keys.integer("attention.value_length") ?? 0, CONFIG_LIMITS.width);
  if (qkHead === 0 || vHead === 0)
    throw new ModelConfigError(
      `missing ${keys.key("attention.key_length_mla")} / ${keys.key("attention.key_length")}: cannot size the attention heads`,
    );
  return { qkHead, vHead };
}

type ExpertCounts = Pick<
  ModelConfig,
  "nExpert" | "nExpertUsed" | "nLeadingDense" | "nFF" | "nFFExp" | "nExpertShared" | "nGroup" | "nGroupUsed"
>;

/** FFN widths, expert counts and expert groups (checked only when the model has MoE layers). */
function readExperts(keys: ArchKeys, layers: LayerCounts): ExpertCounts {
  const nExpert = keys.atMost("expert_count", keys.integer("expert_count") ?? 0, CONFIG_LIMITS.experts);
  const nExpertUsed = keys.atMost("expert_used_count", keys.integer("expert_used_count") ?? 0, CONFIG_LIMITS.experts);
  const nLeadingDense = keys.integer("leading_dense_block_count") ?? 0;
  const hasMoe = nExpert > 0 && nLeadingDense < layers.nLayer;
  if (hasMoe && (nExpertUsed < 1 || nExpertUsed > nExpert)) {
    throw new ModelConfigError(
      `${keys.key("expert_used_count")} = ${nExpertUsed} must be in 1..${keys.key("expert_count")} (${nExpert})`,
    );
  }
  const nFF =
    nLeadingDense > 0
      ? keys.positive("feed_forward_length", keys.perLayerUniform("feed_forward_length", layers, true))
      : keys.perLayerUniform("feed_forward_length", layers, false);
  const nFFExp = hasMoe
    ? keys.positive("expert_feed_forward_length", keys.perLayerUniform("expert_feed_forward_length", layers, true))
    : 0;
  const nExpertShared = hasMoe
    ? keys.atMost("expert_shared_count", keys.integer("expert_shared_count") ?? 0, CONFIG_LIMITS.experts)
    : 0;
  const nGroup = Math.max(
    1,
    keys.atMost("expert_group_count", keys.integer("expert_group_count") ?? 1, CONFIG_LIMITS.experts),
  );
  const nGroupUsed = Math.max(
    1,
    keys.atMost("expert_group_used_count", keys.integer("expert_group_used_count") ?? nGroup, CONFIG_LIMITS.experts),
  );
  if (hasMoe && nGroup > 1) {
    if (nExpert % nGroup !== 0)
      throw new ModelConfigError(
        `${keys.key("expert_count")} = ${nExpert} is not divisible by ${keys.key("expert_group_count")} = ${nGroup}`,
      );
    if (nGroupUsed > nGroup)
      throw new ModelConfigError(
        `${keys.key("expert_group_used_count")} = ${nGroupUsed} exceeds ${keys.key("expert_group_count")} = ${nGroup}`,
      );
    if (nGroupUsed * (nExpert / nGroup) < nExpertUsed)
      throw new ModelConfigError(
        `${nGroupUsed} groups of ${nExpert / nGroup} experts cannot supply ${nExpertUsed} experts`,
      );
  }
  return { nExpert, nExpertUsed, nLeadingDense, nFF, nFFExp, nExpertShared, nGroup, nGroupUsed };
}

/** The router's gating function: the key when present, else the documented default for the file. */
function readGating(keys: ArchKeys, blockCount: number, nVocab: number): Pick<ModelConfig, "gating" | "gatingSource"> {
  const gf = keys.integer("expert_gating_func");
  if (gf !== undefined && gf !== 0) {
    if (gf !== 1 && gf !== 2)
      throw new ModelConfigError(`${keys.key("expert_gating_func")} = ${gf}: expected 1 (softmax) or 2 (sigmoid)`);
    return { gating: gf === 1 ? "softmax" : "sigmoid", gatingSource: "metadata" };
  }
  if (keys.arch === "glm-dsa") return { gating: "sigmoid", gatingSource: "glm-dsa-default" };
  // GLM-4.7-Flash files made before llama.cpp PR #18980 lack the key; the model is sigmoid-gated.
  if ((blockCount === 47 || blockCount === 48) && nVocab === GLM47_FLASH_VOCAB)
    return { gating: "sigmoid", gatingSource: "glm47-flash-heuristic" };
  return { gating: "softmax", gatingSource: "default-softmax" };
}

/** The rope base and, for rope.scaling.type = yarn, the YaRN parameters. */
function readRope(keys: ArchKeys): { ropeBase: number; yarn: YarnConfig | undefined } {
  const ropeBase = keys.real(
    "rope.freq_base",
    keys.number("rope.freq_base") ?? 10000,
    (x) => x > 1,
    "a finite number > 1",
  );
  const scalingType = keys.meta.string(keys.key("rope.scaling.type")) ?? "none";
  if (scalingType === "yarn") return { ropeBase, yarn: readYarn(keys) };
  if (scalingType !== "none" && scalingType !== "") {
    throw new ModelConfigError(
      `${keys.key("rope.scaling.type")} = "${scalingType}": only "yarn" and "none" are supported`,
    );
  }
  return { ropeBase, yarn: undefined };
}

function readYarn(keys: ArchKeys): YarnConfig {
  const factor = keys.real(
    "rope.scaling.factor",
    keys.number("rope.scaling.factor") ?? 1,
    (x) => x >= 1,
    "a finite number ≥ 1 for YaRN",
  );
  const logMulRaw = keys.number("rope.scaling.yarn_log_multiplier");
  const logMul =
    logMulRaw === undefined
      ? undefined
      : keys.real("rope.scaling.yarn_log_multiplier", logMulRaw, (x) => x >= 0, "a finite number ≥ 0");
  const origRaw = keys.number("rope.scaling.original_context_length") ?? 4096;
  if (!Number.isInteger(origRaw))
    throw new ModelConfigError(
      `${keys.key("rope.scaling.original_context_length")} = ${origRaw} must be a positive integer`,
    );
  const positiveBeta = (name: string, dflt: number): number =>
    keys.real(name, keys.number(name) ?? dflt, (x) => x > 0, "a finite number > 0");
  return {
    factor,
    originalContext: keys.positive("rope.scaling.original_context_length", origRaw, CONFIG_LIMITS.context),
    betaFast: positiveBeta("rope.scaling.yarn_beta_fast", 32),
    betaSlow: positiveBeta("rope.scaling.yarn_beta_slow", 1),
    // The converter writes 0.1·mscale_all_dim. glm-dsa (llama.cpp) never reads the key; see attentionScales.
    mscaleAllDim: keys.arch === "deepseek2" && logMul !== undefined ? logMul / 0.1 : undefined,
  };
}

/**
 * Softmax scale and rope magnitude. deepseek2 (HF DeepseekV3 semantics): scale = get_mscale(f, m_all)²/√(P+R) and
 * the rope magnitude get_mscale(f,m)/get_mscale(f,m_all) = 1 (m = m_all in every released config).
 * glm-dsa: the file's log multiplier is not read by llama.cpp; both the rope magnitude and √scale are
 * get_mscale(f, 1) — the same as HF when rope_scaling has no mscale/mscale_all_dim pair.
 */
function attentionScales(
  arch: Arch,
  yarn: YarnConfig | undefined,
  qkHead: number,
): { kqScale: number; ropeMscale: number } {
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
  return { kqScale: (mscale * mscale) / Math.sqrt(qkHead), ropeMscale };
}

/** The DSA lightning indexer's shape (glm-dsa only; undefined when the file declares none). */
function readIndexer(keys: ArchKeys, qkRope: number): IndexerConfig | undefined {
  if (keys.arch !== "glm-dsa") return undefined;
  const ih = keys.integer("attention.indexer.head_count");
  const id = keys.integer("attention.indexer.key_length");
  const it = keys.integer("attention.indexer.top_k");
  if (ih === undefined && id === undefined && it === undefined) return undefined;
  if (!ih || !id || !it)
    throw new ModelConfigError(
      `${keys.key("attention.indexer.head_count")}, .key_length and .top_k must all be set and non-zero`,
    );
  if (id < qkRope)
    throw new ModelConfigError(
      `${keys.key("attention.indexer.key_length")} = ${id} is smaller than the rope dims ${qkRope}`,
    );
  return { nHead: ih, headDim: id, topK: it };
}
