// Test helper: a GGUF model written back out as a Hugging Face checkpoint directory (config.json, safetensors,
// tokenizer.json, tokenizer_config.json), so `latent convert` can be checked by a round trip.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { GGUFFile } from "../../src/gguf/file.js";
import { parseConfig } from "../../src/model/config.js";
import { toHfStateDict, type HFTensor } from "../../src/convert/names.js";
import type { SynthConfig } from "../../src/synth/presets.js";
import { f32ToBF16, f32ToF16 } from "../../src/quant/f16.js";
import { PRE_TOKENIZER_REGEXES } from "../../src/tokenizer/index.js";

export type StDType = "F32" | "F16" | "BF16";

export interface ExportOptions {
  readonly dtype?: StDType;
  /** tensors per shard: writes model-0000i-of-0000N.safetensors + model.safetensors.index.json */
  readonly shardTensors?: number;
  /** write experts as transformers 5's fused `mlp.experts.gate_up_proj` / `mlp.experts.down_proj` */
  readonly fusedExperts?: boolean;
  /** merges as ["a", "b"] pairs (tokenizers ≥ 0.20) instead of "a b" strings */
  readonly pairMerges?: boolean;
}

/** Bytes of one safetensors file. */
export function safetensorsBytes(
  tensors: readonly { name: string; dtype: string; shape: readonly number[]; data: Uint8Array }[],
): Buffer {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let off = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.data.length] };
    off += t.data.length;
  }
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += " ";
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  return Buffer.concat([
    len,
    Buffer.from(json),
    ...tensors.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.length)),
  ]);
}

export function encodeValues(data: Float32Array, dtype: StDType): Uint8Array {
  if (dtype === "F32") return new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  const out = Buffer.alloc(data.length * 2);
  for (let i = 0; i < data.length; i++)
    out.writeUInt16LE(dtype === "F16" ? f32ToF16(data[i]) : f32ToBF16(data[i]), i * 2);
  return new Uint8Array(out.buffer, out.byteOffset, out.length);
}

/** HF config.json of a synth config (the inverse of src/convert/hf-config.ts). */
export function hfConfigOf(cfg: SynthConfig): Record<string, unknown> {
  const modelType =
    cfg.arch === "glm-dsa"
      ? "glm_moe_dsa"
      : cfg.pre === "glm4"
        ? "glm4_moe_lite"
        : cfg.gating === "softmax"
          ? "deepseek_v2"
          : "deepseek_v3";
  const arch = {
    glm_moe_dsa: "GlmMoeDsaForCausalLM",
    glm4_moe_lite: "Glm4MoeLiteForCausalLM",
    deepseek_v2: "DeepseekV2ForCausalLM",
    deepseek_v3: "DeepseekV3ForCausalLM",
  }[modelType];
  const c: Record<string, unknown> = {
    architectures: [arch],
    model_type: modelType,
    vocab_size: cfg.n_vocab,
    hidden_size: cfg.n_embd,
    intermediate_size: cfg.n_ff,
    moe_intermediate_size: cfg.n_ff_exp,
    num_hidden_layers: cfg.n_layer,
    num_nextn_predict_layers: cfg.nextn,
    num_attention_heads: cfg.n_head,
    num_key_value_heads: cfg.n_head,
    n_shared_experts: cfg.n_shared,
    n_routed_experts: cfg.n_expert,
    num_experts_per_tok: cfg.n_used,
    routed_scaling_factor: cfg.w_scale,
    norm_topk_prob: cfg.w_norm,
    kv_lora_rank: cfg.kv_lora,
    q_lora_rank: cfg.q_lora === 0 ? null : cfg.q_lora,
    qk_rope_head_dim: cfg.rope,
    qk_nope_head_dim: cfg.nope,
    v_head_dim: cfg.v_head,
    first_k_dense_replace: cfg.n_dense,
    rms_norm_eps: cfg.rms_eps,
    rope_theta: cfg.rope_base,
    max_position_embeddings: cfg.context_length,
    tie_word_embeddings: false,
    torch_dtype: "bfloat16",
  };
  if (cfg.groups > 0) {
    c.n_group = cfg.groups;
    c.topk_group = cfg.groups_used;
  }
  if (modelType === "deepseek_v2") c.scoring_func = cfg.gating;
  if (cfg.yarn !== null) {
    c.rope_scaling = {
      type: "yarn",
      factor: cfg.yarn.factor,
      original_max_position_embeddings: cfg.yarn.orig_ctx,
      mscale: cfg.yarn.mscale_all_dim,
      mscale_all_dim: cfg.yarn.mscale_all_dim,
    };
  }
  if (cfg.indexer !== null) {
    c.index_n_heads = cfg.indexer.heads;
    c.index_head_dim = cfg.indexer.dim;
    c.index_topk = cfg.indexer.top_k;
  }
  return c;
}

/** Write `file` (a deepseek2 / glm-dsa GGUF) as an HF checkpoint directory with this config.json (see hfConfigOf). */
export function exportHf(
  file: GGUFFile,
  config: Record<string, unknown>,
  dir: string,
  opts: ExportOptions = {},
): Map<string, HFTensor> {
  mkdirSync(dir, { recursive: true });
  const dtype = opts.dtype ?? "F32";
  const c = parseConfig(file.metadata, file.tensors.get("token_embd.weight")?.ne[1]);
  const sd = toHfStateDict(file, c);
  let entries = [...sd].map(([name, t]) => ({ name, shape: t.shape, values: t.data }));
  if (opts.fusedExperts === true) {
    const fused: typeof entries = [];
    const groups = new Map<string, Map<number, Map<string, HFTensor>>>();
    for (const e of entries) {
      const m = /^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$/.exec(e.name);
      if (m === null) {
        fused.push(e);
        continue;
      }
      if (!groups.has(m[1])) groups.set(m[1], new Map());
      const g = groups.get(m[1])!;
      if (!g.has(Number(m[2]))) g.set(Number(m[2]), new Map());
      g.get(Number(m[2]))!.set(m[3], { shape: e.shape, data: e.values });
    }
    for (const [prefix, byExpert] of groups) {
      const E = byExpert.size;
      const one = byExpert.get(0)!;
      const [Fe, H] = one.get("gate_proj")!.shape as [number, number];
      const gu = new Float32Array(E * 2 * Fe * H);
      const down = new Float32Array(E * H * Fe);
      for (let e = 0; e < E; e++) {
        const x = byExpert.get(e)!;
        gu.set(x.get("gate_proj")!.data, e * 2 * Fe * H);
        gu.set(x.get("up_proj")!.data, e * 2 * Fe * H + Fe * H);
        down.set(x.get("down_proj")!.data, e * H * Fe);
      }
      fused.push({ name: `${prefix}.gate_up_proj`, shape: [E, 2 * Fe, H], values: gu });
      fused.push({ name: `${prefix}.down_proj`, shape: [E, H, Fe], values: down });
    }
    entries = fused;
  }
  const tensors = entries.map((e) => ({ name: e.name, dtype, shape: e.shape, data: encodeValues(e.values, dtype) }));
  const per = opts.shardTensors;
  if (per === undefined || per >= tensors.length)
    writeFileSync(join(dir, "model.safetensors"), safetensorsBytes(tensors));
  else {
    const n = Math.ceil(tensors.length / per);
    const weightMap: Record<string, string> = {};
    for (let i = 0; i < n; i++) {
      const name = `model-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`;
      const part = tensors.slice(i * per, (i + 1) * per);
      for (const t of part) weightMap[t.name] = name;
      writeFileSync(join(dir, name), safetensorsBytes(part));
    }
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: weightMap }));
  }
  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2));
  writeTokenizer(file, dir, opts.pairMerges === true);
  return sd;
}

function writeTokenizer(file: GGUFFile, dir: string, pairMerges: boolean): void {
  const md = file.metadata;
  const arr = (key: string): unknown[] => {
    const v = md.raw(key);
    return typeof v === "object" && v !== null && "values" in v ? [...v.values] : [];
  };
  const tokens = arr("tokenizer.ggml.tokens") as string[];
  const types = arr("tokenizer.ggml.token_type") as number[];
  const merges = arr("tokenizer.ggml.merges") as string[];
  const pre = md.raw("tokenizer.ggml.pre") as string;
  const vocab: Record<string, number> = {};
  const added: unknown[] = [];
  tokens.forEach((t, i) => {
    if (types[i] === 3 || types[i] === 4)
      added.push({
        id: i,
        content: t,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: types[i] === 3,
      });
    else vocab[t] = i;
  });
  const key = pre === "chatglm-bpe" ? "glm4" : pre;
  const tj = {
    version: "1.0",
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        ...PRE_TOKENIZER_REGEXES[key].map((r) => ({
          type: "Split",
          pattern: { Regex: r },
          behavior: "Isolated",
          invert: false,
        })),
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: pairMerges ? merges.map((m) => m.split(" ")) : merges,
    },
  };
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tj));
  const id = (k: string): string | undefined => {
    const v = md.raw(k);
    return typeof v === "number" ? tokens[v] : undefined;
  };
  writeFileSync(
    join(dir, "tokenizer_config.json"),
    JSON.stringify({
      add_bos_token: md.raw("tokenizer.ggml.add_bos_token") === true,
      add_eos_token: false,
      bos_token: id("tokenizer.ggml.bos_token_id"),
      eos_token: id("tokenizer.ggml.eos_token_id"),
      pad_token: id("tokenizer.ggml.padding_token_id"),
      chat_template: md.raw("tokenizer.chat_template"),
    }),
  );
}
