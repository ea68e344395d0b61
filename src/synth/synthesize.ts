/**
 * `latent synth`: random-weight deepseek2 / glm-dsa GGUFs with real shapes, a valid tokenizer and llama.cpp's
 * per-tensor types. Tensors are produced one at a time into one reused buffer and streamed to disk.
 * Init (as the kit's tinymodel.py): matrices N(0, 1/fan_in) with fan_in = ne[0], token_embd N(0,1),
 * output and router std 2/√n_embd, norms 1 + 0.1·N(0,1), biases 0.1·N(0,1).
 */
import { writeThroughTemporary } from "./atomic-output.js";
import { constants as bufferConstants } from "node:buffer";
import { writeModel, tensorBytes, type TensorToWrite } from "../gguf/writer.js";
import { type GGMLType, GGUFValueType, typeName, type GGUFMetadataEntry, type GGUFValue } from "../gguf/types.js";
import { UsageError } from "../util/errors.js";
import { validateConfig, type SynthConfig } from "./presets.js";
import { fillFloat, fillRandom, Rng } from "./random-blocks.js";
import { chooseType, fileType, isQuantized, type TypeContext, type TypeCounters } from "./types.js";
import { synthTokenizer, controlTokenCount } from "./tokenizer.js";

export type TensorKind = "w" | "embd" | "out" | "router" | "norm" | "bias";

export interface SynthTensorSpec {
  readonly name: string;
  /** ggml ne (fastest first) */
  readonly ne: readonly number[];
  readonly kind: TensorKind;
}

export interface SynthOptions {
  /** llama-quantize file type name: F32, F16, BF16, Q8_0, Q4_0, …, Q4_K_M, Q6_K, IQ4_XS (default F32) */
  readonly type?: string;
  /** every quantizable matrix in the base type, as llama-quantize --pure (default false) */
  readonly pure?: boolean;
  readonly seed?: number;
  /** old GGUF generation: `attn_kv_b`, head_count_kv = H, no *_mla keys (deepseek2 only) */
  readonly legacyKvB?: boolean;
  /** number of shards (default 1); the writer balances tensors per shard, so the count may come out lower */
  readonly split?: number;
  readonly out: string;
  readonly onProgress?: (doneBytes: number, totalBytes: number, tensor: string) => void;
}

/** Tensors of a config in file order (the kit's order), with ggml shapes. */
export function tensorSpecs(cfg: SynthConfig, legacyKvB = false): SynthTensorSpec[] {
  const E = cfg.n_embd;
  const H = cfg.n_head;
  const kq = cfg.nope + cfg.rope;
  const s: SynthTensorSpec[] = [
    { name: "token_embd.weight", ne: [E, cfg.n_vocab], kind: "embd" },
    { name: "output_norm.weight", ne: [E], kind: "norm" },
    { name: "output.weight", ne: [E, cfg.n_vocab], kind: "out" },
  ];
  const add = (name: string, ne: number[], kind: TensorKind = "w"): void => {
    s.push({ name, ne, kind });
  };
  for (let i = 0; i < cfg.n_layer + cfg.nextn; i++) {
    const p = `blk.${i}.`;
    add(p + "attn_norm.weight", [E], "norm");
    if (cfg.q_lora > 0) {
      add(p + "attn_q_a.weight", [E, cfg.q_lora]);
      add(p + "attn_q_a_norm.weight", [cfg.q_lora], "norm");
      add(p + "attn_q_b.weight", [cfg.q_lora, H * kq]);
    } else add(p + "attn_q.weight", [E, H * kq]);
    add(p + "attn_kv_a_mqa.weight", [E, cfg.kv_lora + cfg.rope]);
    add(p + "attn_kv_a_norm.weight", [cfg.kv_lora], "norm");
    if (legacyKvB) add(p + "attn_kv_b.weight", [cfg.kv_lora, H * (cfg.nope + cfg.v_head)]);
    else {
      add(p + "attn_k_b.weight", [cfg.nope, cfg.kv_lora, H]);
      add(p + "attn_v_b.weight", [cfg.kv_lora, cfg.v_head, H]);
    }
    add(p + "attn_output.weight", [H * cfg.v_head, E]);
    add(p + "ffn_norm.weight", [E], "norm");
    if (cfg.indexer !== null) {
      const { heads, dim } = cfg.indexer;
      add(p + "indexer.k_norm.weight", [dim], "norm");
      add(p + "indexer.k_norm.bias", [dim], "bias");
      add(p + "indexer.proj.weight", [E, heads]);
      add(p + "indexer.attn_k.weight", [E, dim]);
      add(p + "indexer.attn_q_b.weight", [cfg.q_lora, heads * dim]);
    }
    if (i < cfg.n_dense) {
      add(p + "ffn_gate.weight", [E, cfg.n_ff]);
      add(p + "ffn_up.weight", [E, cfg.n_ff]);
      add(p + "ffn_down.weight", [cfg.n_ff, E]);
    } else {
      const X = cfg.n_expert;
      const F = cfg.n_ff_exp;
      add(p + "ffn_gate_inp.weight", [E, X], "router");
      if (cfg.exp_bias) add(p + "exp_probs_b.bias", [X], "bias");
      add(p + "ffn_gate_exps.weight", [E, F, X]);
      add(p + "ffn_up_exps.weight", [E, F, X]);
      add(p + "ffn_down_exps.weight", [F, E, X]);
      if (cfg.n_shared > 0) {
        add(p + "ffn_gate_shexp.weight", [E, F * cfg.n_shared]);
        add(p + "ffn_up_shexp.weight", [E, F * cfg.n_shared]);
        add(p + "ffn_down_shexp.weight", [F * cfg.n_shared, E]);
      }
    }
    if (i >= cfg.n_layer) {
      // MTP block (glm-dsa): embed_tokens / shared_head_head are optional and fall back to token_embd / output
      add(p + "nextn.eh_proj.weight", [2 * E, E]);
      add(p + "nextn.enorm.weight", [E], "norm");
      add(p + "nextn.hnorm.weight", [E], "norm");
      add(p + "nextn.shared_head_norm.weight", [E], "norm");
    }
  }
  return s;
}

const u32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT32, value });
const f32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.FLOAT32, value });
const str = (value: string): GGUFMetadataEntry => ({ type: GGUFValueType.STRING, value });
const bool = (value: boolean): GGUFMetadataEntry => ({ type: GGUFValueType.BOOL, value });
const arr = (elementType: GGUFValueType, values: readonly GGUFValue[]): GGUFMetadataEntry => ({
  type: GGUFValueType.ARRAY,
  value: { elementType, values },
});

/** GGUF metadata of a synthesized model (the keys llama.cpp reads; see oracle/README.md "What llama.cpp requires"). */
export function synthMetadata(
  cfg: SynthConfig,
  ftype: number,
  quantized: boolean,
  legacyKvB: boolean,
): Map<string, GGUFMetadataEntry> {
  const a = cfg.arch;
  const m = new Map<string, GGUFMetadataEntry>();
  const k = (key: string, e: GGUFMetadataEntry): void => void m.set(`${a}.${key}`, e);
  m.set("general.architecture", str(a));
  m.set("general.name", str(`synth-${cfg.name}`));
  m.set("general.file_type", u32(ftype));
  if (quantized) m.set("general.quantization_version", u32(2));
  k("context_length", u32(cfg.context_length));
  k("embedding_length", u32(cfg.n_embd));
  k("block_count", u32(cfg.n_layer + cfg.nextn));
  k("feed_forward_length", u32(cfg.n_ff));
  k("attention.head_count", u32(cfg.n_head));
  if (legacyKvB) {
    k("attention.head_count_kv", u32(cfg.n_head));
    k("attention.key_length", u32(cfg.nope + cfg.rope));
    k("attention.value_length", u32(cfg.v_head));
  } else {
    k("attention.head_count_kv", u32(1));
    k("attention.key_length", u32(cfg.kv_lora + cfg.rope));
    k("attention.value_length", u32(cfg.kv_lora));
    k("attention.key_length_mla", u32(cfg.nope + cfg.rope));
    k("attention.value_length_mla", u32(cfg.v_head));
  }
  k("attention.layer_norm_rms_epsilon", f32(cfg.rms_eps));
  k("attention.q_lora_rank", u32(cfg.q_lora));
  k("attention.kv_lora_rank", u32(cfg.kv_lora));
  k("rope.dimension_count", u32(cfg.rope));
  k("rope.freq_base", f32(cfg.rope_base));
  if (cfg.yarn !== null) {
    k("rope.scaling.type", str("yarn"));
    k("rope.scaling.factor", f32(cfg.yarn.factor));
    k("rope.scaling.original_context_length", u32(cfg.yarn.orig_ctx));
    k("rope.scaling.yarn_log_multiplier", f32(0.1 * cfg.yarn.mscale_all_dim));
  }
  k("leading_dense_block_count", u32(cfg.n_dense));
  k("vocab_size", u32(cfg.n_vocab));
  k("expert_feed_forward_length", u32(cfg.n_ff_exp));
  k("expert_count", u32(cfg.n_expert));
  k("expert_used_count", u32(cfg.n_used));
  k("expert_shared_count", u32(cfg.n_shared));
  k("expert_weights_scale", f32(cfg.w_scale));
  k("expert_weights_norm", bool(cfg.w_norm));
  k("expert_gating_func", u32(cfg.gating === "sigmoid" ? 2 : 1));
  if (cfg.groups > 0) {
    k("expert_group_count", u32(cfg.groups));
    k("expert_group_used_count", u32(cfg.groups_used));
  }
  if (a === "glm-dsa") k("nextn_predict_layers", u32(cfg.nextn));
  if (cfg.indexer !== null) {
    k("attention.indexer.head_count", u32(cfg.indexer.heads));
    k("attention.indexer.key_length", u32(cfg.indexer.dim));
    k("attention.indexer.top_k", u32(cfg.indexer.top_k));
  }
  const tok = synthTokenizer(cfg.n_vocab, cfg.pre);
  m.set("tokenizer.ggml.model", str("gpt2"));
  m.set("tokenizer.ggml.pre", str(cfg.pre));
  m.set("tokenizer.ggml.tokens", arr(GGUFValueType.STRING, tok.tokens));
  m.set("tokenizer.ggml.token_type", arr(GGUFValueType.INT32, tok.types));
  m.set("tokenizer.ggml.merges", arr(GGUFValueType.STRING, tok.merges));
  m.set("tokenizer.ggml.bos_token_id", u32(tok.bos));
  m.set("tokenizer.ggml.eos_token_id", u32(tok.eos));
  if (tok.eot !== undefined) m.set("tokenizer.ggml.eot_token_id", u32(tok.eot));
  if (tok.eom !== undefined) m.set("tokenizer.ggml.eom_token_id", u32(tok.eom));
  if (tok.unk !== undefined) m.set("tokenizer.ggml.unknown_token_id", u32(tok.unk));
  if (tok.pad !== undefined) m.set("tokenizer.ggml.padding_token_id", u32(tok.pad));
  m.set("tokenizer.ggml.add_bos_token", bool(tok.addBos));
  m.set("tokenizer.ggml.add_eos_token", bool(false));
  m.set("tokenizer.chat_template", str(tok.chatTemplate));
  return m;
}

/** std (and mean) of each tensor kind's values. */
function initOf(spec: SynthTensorSpec, cfg: SynthConfig): { std: number; mean: number } {
  switch (spec.kind) {
    case "w":
      return { std: 1 / Math.sqrt(spec.ne[0]), mean: 0 };
    case "embd":
      return { std: 1, mean: 0 };
    case "out":
      return { std: cfg.output_std / Math.sqrt(cfg.n_embd), mean: 0 };
    case "router":
      return { std: cfg.router_std / Math.sqrt(cfg.n_embd), mean: 0 };
    case "norm":
      return { std: 0.1, mean: 1 };
    case "bias":
      return { std: 0.1, mean: 0 };
  }
}

export interface PlannedTensor extends SynthTensorSpec {
  readonly type: GGMLType;
  readonly nbytes: number;
}

/** Tensors with the ggml type each gets for a file type (llama-quantize's choices and fallbacks). */
export function planTensors(
  cfg: SynthConfig,
  opts: Pick<SynthOptions, "type" | "pure" | "legacyKvB"> = {},
): PlannedTensor[] {
  validateConfig(cfg);
  const legacy = opts.legacyKvB ?? false;
  if (legacy && cfg.arch === "glm-dsa")
    throw new UsageError(
      "--legacy-kv-b: glm-dsa files are always MLA (llama.cpp refuses glm-dsa without the *_mla keys)",
    );
  const min = controlTokenCount(cfg.pre) + 256;
  if (cfg.n_vocab < min)
    throw new UsageError(
      `synth config: n_vocab must be at least ${min} for tokenizer "${cfg.pre}", got ${cfg.n_vocab}`,
    );
  const specs = tensorSpecs(cfg, legacy);
  const ctx: TypeContext = {
    spec: fileType(opts.type ?? "F32"),
    pure: opts.pure ?? false,
    nExpert: cfg.n_expert,
    nGqa: legacy ? 1 : cfg.n_head,
    nLayerAll: cfg.n_layer + cfg.nextn,
    nAttnV: specs.filter((s) => s.name.includes("attn_kv_b.weight")).length,
  };
  const counters: TypeCounters = { iAttnV: 0 };
  return specs.map((s) => {
    const type = chooseType(s.name, s.ne, ctx, counters);
    return { ...s, type, nbytes: tensorBytes(s.ne, type) };
  });
}

/** Write a random-weight model; returns the file paths written (one, or the shards). */
export function synthesize(config: SynthConfig, opts: SynthOptions): string[] {
  const spec = fileType(opts.type ?? "F32");
  const seed = opts.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) throw new UsageError(`seed must be a non-negative integer, got ${seed}`);
  const split = opts.split ?? 1;
  if (!Number.isInteger(split) || split < 1) throw new UsageError(`split must be a positive integer, got ${split}`);
  const legacy = opts.legacyKvB ?? false;
  const plan = planTensors(config, opts);
  const maxBytes = Math.max(...plan.map((t) => t.nbytes));
  const limit = Math.min(bufferConstants.MAX_LENGTH, 2 ** 32);
  const big = plan.find((t) => t.nbytes + 4 > limit);
  if (big !== undefined) {
    throw new UsageError(
      `tensor ${big.name} (${typeName(big.type)} ${big.ne.join("x")}) is ${big.nbytes} bytes, over this platform's buffer limit; use a smaller --type or fewer dims`,
    );
  }
  const metadata = synthMetadata(
    config,
    spec.ftype,
    plan.some((t) => isQuantized(t.type)),
    legacy,
  );
  const scratch = new Uint8Array(Math.ceil(maxBytes / 4) * 4);
  const totalBytes = plan.reduce((s, t) => s + t.nbytes, 0);
  let doneBytes = 0;
  const tensors: TensorToWrite[] = plan.map((t) => ({
    name: t.name,
    ne: t.ne,
    type: t.type,
    data: () => {
      const out = scratch.subarray(0, t.nbytes);
      const rng = new Rng(seed, t.name);
      const n = t.ne.reduce((a, b) => a * b, 1);
      const { std, mean } = initOf(t, config);
      if (mean !== 0 || !isQuantized(t.type)) fillFloat(t.type, out, n, std, mean, rng);
      else fillRandom(t.type, out, n, std, rng);
      return out;
    },
  }));
  const perShard = split > 1 ? Math.ceil(tensors.length / split) : undefined;
  return writeThroughTemporary(opts.out, (temporaryOut) =>
    writeModel(temporaryOut, metadata, tensors, {
      ...(perShard !== undefined ? { maxTensorsPerShard: perShard } : {}),
      onTensor: (done, _total, bytes) => {
        doneBytes += bytes;
        opts.onProgress?.(doneBytes, totalBytes, plan[done - 1].name);
      },
    }),
  );
}
