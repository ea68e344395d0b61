/**
 * Hyper-parameters of the models `latent synth` can fake: the real DeepSeek-V2-Lite, DeepSeek-V3, GLM-4.7-Flash
 * and GLM-5 shapes (reference configurations table of mla-models.md §4) and two tiny test models.
 * Field names follow the kit's tinymodel.py so that configs can be copied between the two.
 */
import { UsageError } from "../util/errors.js";

export type SynthArch = "deepseek2" | "glm-dsa";
export type Gating = "softmax" | "sigmoid";
export type TokenizerPre = "deepseek-llm" | "deepseek-v3" | "glm4";

export interface YarnConfig {
  readonly factor: number;
  readonly orig_ctx: number;
  readonly mscale_all_dim: number;
}

export interface IndexerConfig {
  readonly heads: number;
  /** index_head_dim: llama.cpp needs a power of two ≥ 64 */
  readonly dim: number;
  readonly top_k: number;
}

export interface SynthConfig {
  readonly arch: SynthArch;
  /** general.name is `synth-<name>` */
  readonly name: string;
  readonly n_vocab: number;
  readonly n_embd: number;
  /** main decoder layers (without the MTP layers of `nextn`) */
  readonly n_layer: number;
  /** leading dense layers (first_k_dense_replace) */
  readonly n_dense: number;
  readonly n_head: number;
  /** q-LoRA rank; 0 = a single `attn_q` (V2-Lite) */
  readonly q_lora: number;
  readonly kv_lora: number;
  /** qk_nope_head_dim (P) */
  readonly nope: number;
  /** qk_rope_head_dim (R) */
  readonly rope: number;
  /** v_head_dim (V) */
  readonly v_head: number;
  /** dense FFN width */
  readonly n_ff: number;
  /** expert FFN width */
  readonly n_ff_exp: number;
  readonly n_expert: number;
  readonly n_used: number;
  readonly n_shared: number;
  readonly gating: Gating;
  /** expert_weights_norm (norm_topk_prob) */
  readonly w_norm: boolean;
  /** expert_weights_scale (routed_scaling_factor) */
  readonly w_scale: number;
  /** expert groups; 0 = no group keys written */
  readonly groups: number;
  readonly groups_used: number;
  /** write `exp_probs_b.bias` (e_score_correction_bias) */
  readonly exp_bias: boolean;
  readonly rms_eps: number;
  readonly rope_base: number;
  readonly yarn: YarnConfig | null;
  /** glm-dsa only */
  readonly indexer: IndexerConfig | null;
  /** MTP layers `blk.{n_layer+i}.nextn.*` (glm-dsa), counted in block_count */
  readonly nextn: number;
  readonly context_length: number;
  readonly pre: TokenizerPre;
  /** std of `ffn_gate_inp` and `output` is `router_std / √n_embd` (tinymodel.py: 2) */
  readonly router_std: number;
  readonly output_std: number;
}

const TINY: SynthConfig = {
  arch: "deepseek2",
  name: "tiny",
  n_vocab: 400,
  n_embd: 64,
  n_layer: 2,
  n_dense: 1,
  n_head: 4,
  q_lora: 48,
  kv_lora: 32,
  nope: 24,
  rope: 8,
  v_head: 20,
  n_ff: 96,
  n_ff_exp: 32,
  n_expert: 8,
  n_used: 3,
  n_shared: 1,
  gating: "sigmoid",
  w_norm: true,
  w_scale: 2.5,
  groups: 2,
  groups_used: 1,
  exp_bias: true,
  rms_eps: 1e-6,
  rope_base: 10000,
  yarn: { factor: 40, orig_ctx: 4096, mscale_all_dim: 1.0 },
  indexer: null,
  nextn: 0,
  context_length: 163840,
  pre: "deepseek-v3",
  router_std: 2,
  output_std: 2,
};

const TINY_GLM: SynthConfig = {
  ...TINY,
  arch: "glm-dsa",
  name: "tiny-glm-dsa",
  groups: 0,
  groups_used: 0,
  rms_eps: 1e-5,
  rope_base: 1e6,
  yarn: null,
  indexer: { heads: 4, dim: 64, top_k: 16 },
  nextn: 1,
  context_length: 202752,
  pre: "glm4",
};

const V2_LITE: SynthConfig = {
  arch: "deepseek2",
  name: "deepseek-v2-lite",
  n_vocab: 102400,
  n_embd: 2048,
  n_layer: 27,
  n_dense: 1,
  n_head: 16,
  q_lora: 0,
  kv_lora: 512,
  nope: 128,
  rope: 64,
  v_head: 128,
  n_ff: 10944,
  n_ff_exp: 1408,
  n_expert: 64,
  n_used: 6,
  n_shared: 2,
  gating: "softmax",
  w_norm: false,
  w_scale: 1.0,
  groups: 1,
  groups_used: 1,
  exp_bias: false,
  rms_eps: 1e-6,
  rope_base: 10000,
  yarn: { factor: 40, orig_ctx: 4096, mscale_all_dim: 0.707 },
  indexer: null,
  nextn: 0,
  context_length: 163840,
  pre: "deepseek-llm",
  router_std: 2,
  output_std: 2,
};

const V3: SynthConfig = {
  ...V2_LITE,
  name: "deepseek-v3",
  n_vocab: 129280,
  n_embd: 7168,
  n_layer: 61,
  n_dense: 3,
  n_head: 128,
  q_lora: 1536,
  n_ff: 18432,
  n_ff_exp: 2048,
  n_expert: 256,
  n_used: 8,
  n_shared: 1,
  gating: "sigmoid",
  w_norm: true,
  w_scale: 2.5,
  groups: 8,
  groups_used: 4,
  exp_bias: true,
  yarn: { factor: 40, orig_ctx: 4096, mscale_all_dim: 1.0 },
  pre: "deepseek-v3",
};

const GLM47_FLASH: SynthConfig = {
  ...V2_LITE,
  name: "glm-4.7-flash",
  n_vocab: 154880,
  n_embd: 2048,
  n_layer: 47,
  n_dense: 1,
  n_head: 20,
  q_lora: 768,
  nope: 192,
  rope: 64,
  v_head: 256,
  n_ff: 10240,
  n_ff_exp: 1536,
  n_expert: 64,
  n_used: 4,
  n_shared: 1,
  gating: "sigmoid",
  w_norm: true,
  w_scale: 1.8,
  groups: 1,
  groups_used: 1,
  exp_bias: true,
  rms_eps: 1e-5,
  rope_base: 1e6,
  yarn: null,
  context_length: 202752,
  pre: "glm4",
};

const GLM5: SynthConfig = {
  ...GLM47_FLASH,
  arch: "glm-dsa",
  name: "glm-5",
  n_embd: 6144,
  n_layer: 78,
  n_dense: 3,
  n_head: 64,
  q_lora: 2048,
  n_ff: 12288,
  n_ff_exp: 2048,
  n_expert: 256,
  n_used: 8,
  n_shared: 1,
  w_scale: 2.5,
  indexer: { heads: 32, dim: 128, top_k: 2048 },
  nextn: 1,
};

export const PRESET_NAMES = ["tiny", "v2-lite", "v3", "glm47-flash", "glm5"] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

/** A preset's config; `tiny` has a deepseek2 and a glm-dsa flavour, the others fix their arch. */
export function preset(name: string, arch?: SynthArch): SynthConfig {
  switch (name) {
    case "tiny":
      return arch === "glm-dsa" ? TINY_GLM : TINY;
    case "v2-lite":
      return checkArch(V2_LITE, name, arch);
    case "v3":
      return checkArch(V3, name, arch);
    case "glm47-flash":
      return checkArch(GLM47_FLASH, name, arch);
    case "glm5":
      return checkArch(GLM5, name, arch);
    default:
      throw new UsageError(`unknown preset "${name}" (known: ${PRESET_NAMES.join(", ")})`);
  }
}

function checkArch(cfg: SynthConfig, name: string, arch: SynthArch | undefined): SynthConfig {
  if (arch !== undefined && arch !== cfg.arch)
    throw new UsageError(`preset "${name}" is a ${cfg.arch} model, not ${arch}`);
  return cfg;
}

function fail(field: string, msg: string): never {
  throw new UsageError(`synth config: ${field} ${msg}`);
}

function int(cfg: SynthConfig, field: keyof SynthConfig, min: number): void {
  const v = cfg[field];
  if (typeof v !== "number" || !Number.isInteger(v) || v < min)
    fail(field, `must be an integer ≥ ${min}, got ${String(v)}`);
}

function finite(field: string, v: unknown, positive: boolean): void {
  if (typeof v !== "number" || !Number.isFinite(v) || (positive && v <= 0))
    fail(field, `must be a ${positive ? "positive" : "finite"} number, got ${String(v)}`);
}

/** Check every field; throws a UsageError naming the first bad one. */
export function validateConfig(cfg: SynthConfig): void {
  if (cfg.arch !== "deepseek2" && cfg.arch !== "glm-dsa")
    fail("arch", `must be "deepseek2" or "glm-dsa", got ${String(cfg.arch)}`);
  if (typeof cfg.name !== "string" || cfg.name.length === 0) fail("name", "must be a non-empty string");
  for (const f of [
    "n_embd",
    "n_layer",
    "n_head",
    "kv_lora",
    "nope",
    "v_head",
    "n_ff",
    "n_ff_exp",
    "n_expert",
    "n_used",
    "context_length",
  ] as const)
    int(cfg, f, 1);
  for (const f of ["n_dense", "q_lora", "n_shared", "groups", "groups_used", "nextn", "n_vocab"] as const)
    int(cfg, f, 0);
  int(cfg, "rope", 2);
  if (cfg.rope % 2 !== 0) fail("rope", `must be even (rope rotates pairs), got ${cfg.rope}`);
  if (cfg.n_dense > cfg.n_layer) fail("n_dense", `(${cfg.n_dense}) exceeds n_layer (${cfg.n_layer})`);
  if (cfg.n_used > cfg.n_expert) fail("n_used", `(${cfg.n_used}) exceeds n_expert (${cfg.n_expert})`);
  if (cfg.groups > 0) {
    if (cfg.n_expert % cfg.groups !== 0) fail("groups", `(${cfg.groups}) must divide n_expert (${cfg.n_expert})`);
    if (cfg.groups_used < 1 || cfg.groups_used > cfg.groups)
      fail("groups_used", `must be in [1, groups=${cfg.groups}], got ${cfg.groups_used}`);
    if (cfg.groups > 1 && (cfg.n_expert / cfg.groups) * cfg.groups_used < cfg.n_used) {
      fail(
        "groups_used",
        `(${cfg.groups_used}) groups of ${cfg.n_expert / cfg.groups} experts cannot hold n_used = ${cfg.n_used} experts`,
      );
    }
  } else if (cfg.groups_used !== 0) fail("groups_used", "must be 0 when groups is 0");
  if (cfg.gating !== "softmax" && cfg.gating !== "sigmoid")
    fail("gating", `must be "softmax" or "sigmoid", got ${String(cfg.gating)}`);
  if (typeof cfg.w_norm !== "boolean") fail("w_norm", "must be a boolean");
  if (typeof cfg.exp_bias !== "boolean") fail("exp_bias", "must be a boolean");
  finite("w_scale", cfg.w_scale, false);
  finite("rms_eps", cfg.rms_eps, true);
  finite("rope_base", cfg.rope_base, true);
  finite("router_std", cfg.router_std, true);
  finite("output_std", cfg.output_std, true);
  if (cfg.yarn !== null) {
    if (typeof cfg.yarn !== "object") fail("yarn", "must be an object or null");
    finite("yarn.factor", cfg.yarn.factor, true);
    finite("yarn.mscale_all_dim", cfg.yarn.mscale_all_dim, false);
    if (!Number.isInteger(cfg.yarn.orig_ctx) || cfg.yarn.orig_ctx < 1)
      fail("yarn.orig_ctx", `must be a positive integer, got ${String(cfg.yarn.orig_ctx)}`);
  }
  if (cfg.pre !== "deepseek-llm" && cfg.pre !== "deepseek-v3" && cfg.pre !== "glm4")
    fail("pre", `must be deepseek-llm, deepseek-v3 or glm4, got ${String(cfg.pre)}`);
  if (cfg.arch === "glm-dsa") {
    if (cfg.indexer === null || typeof cfg.indexer !== "object")
      fail("indexer", "is required for glm-dsa ({heads, dim, top_k})");
    if (cfg.q_lora === 0) fail("q_lora", "must be > 0 for glm-dsa (the indexer reads the q-LoRA latent)");
    const { heads, dim, top_k } = cfg.indexer;
    if (!Number.isInteger(heads) || heads < 1)
      fail("indexer.heads", `must be a positive integer, got ${String(heads)}`);
    if (!Number.isInteger(dim) || dim < 64 || (dim & (dim - 1)) !== 0)
      fail("indexer.dim", `must be a power of two ≥ 64 (llama.cpp's Hadamard rotation), got ${String(dim)}`);
    if (dim < cfg.rope) fail("indexer.dim", `(${dim}) must be ≥ rope (${cfg.rope})`);
    if (!Number.isInteger(top_k) || top_k < 1)
      fail("indexer.top_k", `must be a positive integer, got ${String(top_k)}`);
  } else {
    if (cfg.indexer !== null) fail("indexer", "is only allowed for glm-dsa");
    if (cfg.nextn !== 0) fail("nextn", "MTP layers are only written for glm-dsa (deepseek2 converters drop them)");
  }
}

/**
 * A preset with overrides applied. When `n_layer` is overridden (`--layers N`) and `n_dense` is not, the dense lead
 * is cut to `min(n_dense, N − 1)` so that even a 1-layer model keeps an MoE layer with the real expert shapes.
 */
export function withOverrides(base: SynthConfig, over: Partial<SynthConfig>): SynthConfig {
  const cfg: SynthConfig = { ...base, ...over };
  if (over.n_layer !== undefined && over.n_dense === undefined && Number.isInteger(cfg.n_layer) && cfg.n_layer >= 1) {
    return { ...cfg, n_dense: Math.min(cfg.n_dense, cfg.n_layer - 1) };
  }
  return cfg;
}
