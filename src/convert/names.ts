import type { GGUFFile } from "../gguf/file.js";
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../gguf/types.js";
import type { TensorToWrite } from "../gguf/writer.js";
import { dequantize } from "../quant/index.js";
import { ModelConfigError } from "../util/errors.js";
import type { ModelConfig } from "../model/config.js";

/**
 * GGUF ↔ Hugging Face tensor names for deepseek2 / glm-dsa (reference §3). Three GGUF tensors have no 1:1 HF
 * counterpart: attn_k_b + attn_v_b are the two halves of HF kv_b_proj, and stacked `*_exps` tensors hold one HF
 * tensor per expert.
 */
const LAYER_MAP: readonly (readonly [string, string])[] = [
  ["attn_norm.weight", "input_layernorm.weight"],
  ["attn_q.weight", "self_attn.q_proj.weight"],
  ["attn_q_a.weight", "self_attn.q_a_proj.weight"],
  ["attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"],
  ["attn_q_b.weight", "self_attn.q_b_proj.weight"],
  ["attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"],
  ["attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"],
  ["attn_kv_b.weight", "self_attn.kv_b_proj.weight"],
  ["attn_output.weight", "self_attn.o_proj.weight"],
  ["ffn_norm.weight", "post_attention_layernorm.weight"],
  ["ffn_gate.weight", "mlp.gate_proj.weight"],
  ["ffn_up.weight", "mlp.up_proj.weight"],
  ["ffn_down.weight", "mlp.down_proj.weight"],
  ["ffn_gate_inp.weight", "mlp.gate.weight"],
  ["exp_probs_b.bias", "mlp.gate.e_score_correction_bias"],
  ["ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"],
  ["ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"],
  ["ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"],
  ["indexer.attn_q_b.weight", "self_attn.indexer.wq_b.weight"],
  ["indexer.attn_k.weight", "self_attn.indexer.wk.weight"],
  ["indexer.k_norm.weight", "self_attn.indexer.k_norm.weight"],
  ["indexer.k_norm.bias", "self_attn.indexer.k_norm.bias"],
  ["indexer.proj.weight", "self_attn.indexer.weights_proj.weight"],
  ["nextn.eh_proj.weight", "eh_proj.weight"],
  ["nextn.enorm.weight", "enorm.weight"],
  ["nextn.hnorm.weight", "hnorm.weight"],
  ["nextn.embed_tokens.weight", "embed_tokens.weight"],
  ["nextn.shared_head_head.weight", "shared_head.head.weight"],
  ["nextn.shared_head_norm.weight", "shared_head.norm.weight"],
];
const GLOBAL_MAP: readonly (readonly [string, string])[] = [
  ["token_embd.weight", "model.embed_tokens.weight"],
  ["output_norm.weight", "model.norm.weight"],
  ["output.weight", "lm_head.weight"],
];
const EXPERT_PARTS: Record<string, readonly string[]> = {
  "ffn_gate_exps.weight": ["gate_proj"],
  "ffn_up_exps.weight": ["up_proj"],
  "ffn_down_exps.weight": ["down_proj"],
  "ffn_gate_up_exps.weight": ["gate_proj", "up_proj"],
};
const KV_B_PARTS = new Set(["attn_k_b.weight", "attn_v_b.weight"]);

const BLK = /^blk\.(\d+)\.(.+)$/;
const HF_LAYER = /^model\.layers\.(\d+)\.(.+)$/;
const HF_EXPERT = /^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$/;

/** The HF tensor name(s) a GGUF tensor holds (several for stacked experts); undefined when unknown. */
export function ggufToHf(name: string, nExpert: number): string[] | undefined {
  const g = GLOBAL_MAP.find(([a]) => a === name);
  if (g) return [g[1]];
  const m = BLK.exec(name);
  if (m === null) return undefined;
  const [, il, rest] = m as unknown as [string, string, string];
  const prefix = `model.layers.${il}.`;
  if (KV_B_PARTS.has(rest)) return [`${prefix}self_attn.kv_b_proj.weight`];
  const parts = EXPERT_PARTS[rest];
  if (parts)
    return Array.from({ length: nExpert }, (_, e) => parts.map((p) => `${prefix}mlp.experts.${e}.${p}.weight`)).flat();
  const l = LAYER_MAP.find(([a]) => a === rest);
  return l ? [prefix + l[1]] : undefined;
}

/** The GGUF tensor(s) holding an HF tensor: kv_b_proj → attn_k_b + attn_v_b (current) or attn_kv_b (legacy). */
export function hfToGguf(
  name: string,
  generation: "current" | "legacy",
): { gguf: string[]; expert?: number } | undefined {
  const g = GLOBAL_MAP.find(([, b]) => b === name);
  if (g) return { gguf: [g[0]] };
  const m = HF_LAYER.exec(name);
  if (m === null) return undefined;
  const [, il, rest] = m as unknown as [string, string, string];
  if (rest === "self_attn.kv_b_proj.weight" && generation === "current")
    return { gguf: [`blk.${il}.attn_k_b.weight`, `blk.${il}.attn_v_b.weight`] };
  const e = HF_EXPERT.exec(rest);
  if (e) return { gguf: [`blk.${il}.ffn_${e[2].replace("_proj", "")}_exps.weight`], expert: Number(e[1]) };
  const l = LAYER_MAP.find(([, b]) => b === rest);
  return l ? { gguf: [`blk.${il}.${l[0]}`] } : undefined;
}

/** An HF tensor: PyTorch shape (GGUF ne reversed) and float32 values, row-major. */
export interface HFTensor {
  readonly shape: number[];
  readonly data: Float32Array;
}

/** kv_b_proj [H·(P+V), L] from attn_k_b (ne {P,L,H}) and attn_v_b (ne {L,V,H}): kv_b[h(P+V)+p][c] = k_b[h][c][p]. */
export function joinKvB(kB: Float32Array, vB: Float32Array, H: number, P: number, V: number, L: number): Float32Array {
  const out = new Float32Array(H * (P + V) * L);
  for (let h = 0; h < H; h++) {
    const base = h * (P + V) * L;
    for (let c = 0; c < L; c++) for (let p = 0; p < P; p++) out[base + p * L + c] = kB[(h * L + c) * P + p];
    out.set(vB.subarray(h * V * L, (h + 1) * V * L), base + P * L);
  }
  return out;
}

/** The reverse of joinKvB (the converter's split, llama.cpp PR #12801). */
export function splitKvB(
  kvB: Float32Array,
  H: number,
  P: number,
  V: number,
  L: number,
): { kB: Float32Array; vB: Float32Array } {
  const kB = new Float32Array(H * L * P);
  const vB = new Float32Array(H * V * L);
  for (let h = 0; h < H; h++) {
    const base = h * (P + V) * L;
    for (let c = 0; c < L; c++) for (let p = 0; p < P; p++) kB[(h * L + c) * P + p] = kvB[base + p * L + c];
    vB.set(kvB.subarray(base + P * L, base + (P + V) * L), h * V * L);
  }
  return { kB, vB };
}

function values(file: GGUFFile, name: string): Float32Array {
  const info = file.tensor(name);
  return dequantize(
    info.type,
    file.readBytes(info),
    info.ne.reduce((a, b) => a * b, 1),
  );
}

/** Every tensor of a GGUF as HF tensors (float32): kv_b_proj reassembled, experts unstacked. */
export function toHfStateDict(file: GGUFFile, c: ModelConfig): Map<string, HFTensor> {
  const out = new Map<string, HFTensor>();
  for (const info of file.tensors.values()) {
    const m = BLK.exec(info.name);
    const rest = m?.[2] ?? "";
    if (rest === "attn_v_b.weight") continue; // emitted with attn_k_b
    const hf = ggufToHf(info.name, c.nExpert);
    if (hf === undefined) throw new ModelConfigError(`no Hugging Face name for tensor "${info.name}"`);
    if (rest === "attn_k_b.weight") {
      const il = m![1];
      const kB = values(file, info.name);
      const vB = values(file, `blk.${il}.attn_v_b.weight`);
      const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = c;
      out.set(hf[0], { shape: [H * (P + V), L], data: joinKvB(kB, vB, H, P, V, L) });
      continue;
    }
    const data = values(file, info.name);
    const shape = [...info.ne].reverse();
    if (EXPERT_PARTS[rest]) {
      const [E, rows, cols] = shape as [number, number, number];
      const parts = EXPERT_PARTS[rest];
      const rowsEach = rows / parts.length;
      for (let e = 0; e < E; e++) {
        parts.forEach((_, k) => {
          const start = (e * rows + k * rowsEach) * cols;
          out.set(hf[e * parts.length + k], {
            shape: [rowsEach, cols],
            data: data.slice(start, start + rowsEach * cols),
          });
        });
      }
      continue;
    }
    out.set(hf[0], { shape, data });
  }
  return out;
}

function f32Tensor(name: string, shape: readonly number[], data: Float32Array): TensorToWrite {
  return {
    name,
    ne: [...shape].reverse(),
    type: GGMLType.F32,
    data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  };
}

/** HF tensors back to GGUF tensors (float32), as the current (k_b/v_b) or legacy (kv_b) generation, in GGUF order. */
export function fromHfStateDict(
  sd: ReadonlyMap<string, HFTensor>,
  c: ModelConfig,
  generation: "current" | "legacy",
): TensorToWrite[] {
  const out: TensorToWrite[] = [];
  const stacks = new Map<string, Float32Array[]>();
  const stackShape = new Map<string, number[]>();
  for (const [name, t] of sd) {
    const g = hfToGguf(name, generation);
    if (g === undefined) throw new ModelConfigError(`no GGUF name for Hugging Face tensor "${name}"`);
    if (g.expert !== undefined) {
      const key = g.gguf[0];
      if (!stacks.has(key)) {
        stacks.set(key, new Array<Float32Array>(c.nExpert));
        stackShape.set(key, [c.nExpert, ...t.shape]);
        out.push({ name: key, ne: [], type: GGMLType.F32, data: new Uint8Array() }); // placeholder keeps the order
      }
      stacks.get(key)![g.expert] = t.data;
      continue;
    }
    if (g.gguf.length === 2) {
      const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = c;
      const { kB, vB } = splitKvB(t.data, H, P, V, L);
      out.push(f32Tensor(g.gguf[0], [H, L, P], kB), f32Tensor(g.gguf[1], [H, V, L], vB));
      continue;
    }
    out.push(f32Tensor(g.gguf[0], t.shape, t.data));
  }
  return out.map((t) => {
    const parts = stacks.get(t.name);
    if (parts === undefined) return t;
    const shape = stackShape.get(t.name)!;
    const each = shape[1] * shape[2];
    const data = new Float32Array(shape[0] * each);
    parts.forEach((p, e) => {
      if (p === undefined) throw new ModelConfigError(`expert ${e} of ${t.name} missing`);
      data.set(p, e * each);
    });
    return f32Tensor(t.name, shape, data);
  });
}

/** Metadata of a file rewritten in the other kv_b generation (head_count_kv, key/value lengths, *_mla keys). */
export function generationMetadata(
  meta: ReadonlyMap<string, GGUFMetadataEntry>,
  c: ModelConfig,
  generation: "current" | "legacy",
): Map<string, GGUFMetadataEntry> {
  const a = c.arch;
  const u32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT32, value });
  const out = new Map(meta);
  if (generation === "legacy") {
    out.set(`${a}.attention.head_count_kv`, u32(c.nHead));
    out.set(`${a}.attention.key_length`, u32(c.qkNope + c.qkRope));
    out.set(`${a}.attention.value_length`, u32(c.vHead));
    out.delete(`${a}.attention.key_length_mla`);
    out.delete(`${a}.attention.value_length_mla`);
  } else {
    out.set(`${a}.attention.head_count_kv`, u32(1));
    out.set(`${a}.attention.key_length`, u32(c.kvLoraRank + c.qkRope));
    out.set(`${a}.attention.value_length`, u32(c.kvLoraRank));
    out.set(`${a}.attention.key_length_mla`, u32(c.qkNope + c.qkRope));
    out.set(`${a}.attention.value_length_mla`, u32(c.vHead));
  }
  return out;
}
