/**
 * Hugging Face config.json → the hyper-parameters `synthMetadata` writes as GGUF keys (reference §4), for
 * DeepseekV2/V3ForCausalLM, Glm4MoeLiteForCausalLM (both `deepseek2`) and GlmMoeDsaForCausalLM (`glm-dsa`).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { SynthConfig, TokenizerPre } from "../synth/presets.js";
import { ConvertError } from "./safetensors.js";

type Json = Record<string, unknown>;

export interface HfModelInfo {
  readonly modelType: string;
  readonly architecture: string;
  /** hyper-parameters in synth's vocabulary (tokenizer fields are placeholders) */
  readonly config: SynthConfig;
  /** HF layers to convert (deepseek2 drops MTP layers ≥ num_hidden_layers; glm-dsa keeps them) */
  readonly nLayersKept: number;
  readonly yarnBeta?: { readonly fast: number; readonly slow: number };
  readonly name: string;
}

const FAMILIES: Record<
  string,
  { arch: "deepseek2" | "glm-dsa"; gating: "softmax" | "sigmoid" | "config"; pre: TokenizerPre }
> = {
  deepseek_v2: { arch: "deepseek2", gating: "config", pre: "deepseek-llm" },
  deepseek_v3: { arch: "deepseek2", gating: "sigmoid", pre: "deepseek-v3" },
  glm4_moe_lite: { arch: "deepseek2", gating: "sigmoid", pre: "glm4" },
  glm_moe_dsa: { arch: "glm-dsa", gating: "sigmoid", pre: "glm4" },
};
const ARCH_TO_TYPE: Record<string, string> = {
  DeepseekV2ForCausalLM: "deepseek_v2",
  DeepseekV3ForCausalLM: "deepseek_v3",
  Glm4MoeLiteForCausalLM: "glm4_moe_lite",
  GlmMoeDsaForCausalLM: "glm_moe_dsa",
};

export function readHfConfig(dir: string): Json {
  const path = join(dir, "config.json");
  if (!existsSync(path))
    throw new ConvertError(`${dir}: no config.json (is this a Hugging Face checkpoint directory?)`);
  let v: unknown;
  try {
    v = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ConvertError(`${path}: ${(e as Error).message}`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new ConvertError(`${path}: not a JSON object`);
  return v as Json;
}

export function parseHfConfig(cfg: Json, name: string, hasExpBias: boolean): HfModelInfo {
  const archs = Array.isArray(cfg.architectures) ? (cfg.architectures as unknown[]) : [];
  const architecture = typeof archs[0] === "string" ? archs[0] : "";
  const modelType = typeof cfg.model_type === "string" ? cfg.model_type : (ARCH_TO_TYPE[architecture] ?? "");
  const fam = FAMILIES[modelType];
  if (fam === undefined) {
    throw new ConvertError(
      `unsupported architecture ${architecture || "(none)"} / model_type "${modelType}": latent convert handles ${Object.entries(
        ARCH_TO_TYPE,
      )
        .map(([a, t]) => `${a} (${t})`)
        .join(", ")}`,
    );
  }
  const num = (key: string, dflt?: number): number => {
    const v = cfg[key];
    if (typeof v === "number" && Number.isFinite(v)) return v;
    if ((v === undefined || v === null) && dflt !== undefined) return dflt;
    throw new ConvertError(
      `config.json: "${key}" ${v === undefined ? "is missing" : `must be a number, got ${JSON.stringify(v)}`}`,
    );
  };
  const rp = (cfg.rope_parameters ?? null) as Json | null;
  const rs = (cfg.rope_scaling ?? null) as Json | null;
  const scaling = rs ?? rp;
  const ropeType = scaling === null ? "default" : String(scaling.rope_type ?? scaling.type ?? "default");
  let yarn: SynthConfig["yarn"] = null;
  let yarnBeta: HfModelInfo["yarnBeta"];
  if (ropeType === "yarn") {
    const sc = scaling!;
    const factor = Number(sc.factor);
    const orig = Number(sc.original_max_position_embeddings ?? 4096);
    if (!Number.isFinite(factor) || !Number.isInteger(orig))
      throw new ConvertError("config.json: yarn rope scaling needs factor and original_max_position_embeddings");
    yarn = { factor, orig_ctx: orig, mscale_all_dim: Number(sc.mscale_all_dim ?? 0) };
    if (sc.beta_fast !== undefined || sc.beta_slow !== undefined)
      yarnBeta = { fast: Number(sc.beta_fast ?? 32), slow: Number(sc.beta_slow ?? 1) };
  } else if (ropeType !== "default")
    throw new ConvertError(`config.json: rope type "${ropeType}" is not supported (default or yarn)`);
  const ropeTheta =
    typeof cfg.rope_theta === "number" ? cfg.rope_theta : typeof rp?.rope_theta === "number" ? rp.rope_theta : 10000;
  let gating: "softmax" | "sigmoid" = fam.gating === "config" ? "softmax" : fam.gating;
  if (typeof cfg.scoring_func === "string") {
    if (cfg.scoring_func !== "softmax" && cfg.scoring_func !== "sigmoid")
      throw new ConvertError(`config.json: scoring_func "${cfg.scoring_func}" is not supported`);
    gating = cfg.scoring_func;
  }
  const nLayer = num("num_hidden_layers");
  const nextn = fam.arch === "glm-dsa" ? num("num_nextn_predict_layers", 0) : 0;
  const partial = num("partial_rotary_factor", 1);
  const rope = Math.round(num("qk_rope_head_dim") * (fam.arch === "glm-dsa" ? partial : 1));
  const nGroup = num("n_group", 1);
  const config: SynthConfig = {
    arch: fam.arch,
    name,
    n_vocab: num("vocab_size"),
    n_embd: num("hidden_size"),
    n_layer: nLayer,
    n_dense: num("first_k_dense_replace", 0),
    n_head: num("num_attention_heads"),
    q_lora: num("q_lora_rank", 0),
    kv_lora: num("kv_lora_rank"),
    nope: num("qk_nope_head_dim"),
    rope,
    v_head: num("v_head_dim"),
    n_ff: num("intermediate_size"),
    n_ff_exp: num("moe_intermediate_size"),
    n_expert: num("n_routed_experts"),
    n_used: num("num_experts_per_tok"),
    n_shared: num("n_shared_experts", 0),
    gating,
    w_norm: cfg.norm_topk_prob === true,
    w_scale: num("routed_scaling_factor", 1),
    groups: nGroup,
    groups_used: num("topk_group", nGroup),
    exp_bias: hasExpBias,
    rms_eps: num("rms_norm_eps", 1e-6),
    rope_base: ropeTheta,
    yarn,
    indexer:
      fam.arch === "glm-dsa"
        ? { heads: num("index_n_heads"), dim: num("index_head_dim"), top_k: num("index_topk") }
        : null,
    nextn,
    context_length: num("max_position_embeddings"),
    pre: fam.pre,
    router_std: 1,
    output_std: 1,
  };
  if (cfg.tie_word_embeddings === true)
    throw new ConvertError("config.json: tie_word_embeddings = true is not supported (no MLA MoE release ties them)");
  return { modelType, architecture, config, nLayersKept: nLayer + nextn, yarnBeta, name };
}
