/**
 * Per-tensor ggml types of a synthesized file, as llama.cpp's llama-quantize picks them
 * (src/llama-quant.cpp of the node-llama-cpp 3.21.1 build: llama_tensor_get_type_impl + tensor_type_fallback).
 *
 * Choices where a converter, not llama-quantize, decides:
 * - 1-D tensors, `*_norm.weight`, biases, the router `ffn_gate_inp` and the DSA `indexer.proj` are always F32
 *   (convert_hf_to_gguf keeps them F32; llama-quantize leaves the first four alone).
 * - F32/F16/BF16 files: every other matrix, `token_embd` and `output` included, in that type.
 * - `token_embd` takes the file's base type (llama-quantize changes it only for IQ1/IQ2/IQ3/TQ mixes).
 * - `pure` = llama-quantize --pure: no mix rules, every quantizable matrix in the base type; fallbacks still apply.
 */
import { GGMLType, typeTraits } from "../gguf/types.js";
import { UsageError } from "../util/errors.js";

export interface FileTypeSpec {
  /** name as llama-quantize prints it */
  readonly name: string;
  /** LlamaFileType written to general.file_type */
  readonly ftype: number;
  readonly base: GGMLType;
}

const FILE_TYPES: readonly FileTypeSpec[] = [
  { name: "F32", ftype: 0, base: GGMLType.F32 },
  { name: "F16", ftype: 1, base: GGMLType.F16 },
  { name: "BF16", ftype: 32, base: GGMLType.BF16 },
  { name: "Q4_0", ftype: 2, base: GGMLType.Q4_0 },
  { name: "Q4_1", ftype: 3, base: GGMLType.Q4_1 },
  { name: "Q8_0", ftype: 7, base: GGMLType.Q8_0 },
  { name: "Q5_0", ftype: 8, base: GGMLType.Q5_0 },
  { name: "Q5_1", ftype: 9, base: GGMLType.Q5_1 },
  { name: "Q2_K", ftype: 10, base: GGMLType.Q2_K },
  { name: "Q3_K_S", ftype: 11, base: GGMLType.Q3_K },
  { name: "Q3_K_M", ftype: 12, base: GGMLType.Q3_K },
  { name: "Q3_K_L", ftype: 13, base: GGMLType.Q3_K },
  { name: "Q4_K_S", ftype: 14, base: GGMLType.Q4_K },
  { name: "Q4_K_M", ftype: 15, base: GGMLType.Q4_K },
  { name: "Q5_K_S", ftype: 16, base: GGMLType.Q5_K },
  { name: "Q5_K_M", ftype: 17, base: GGMLType.Q5_K },
  { name: "Q6_K", ftype: 18, base: GGMLType.Q6_K },
  { name: "IQ4_NL", ftype: 25, base: GGMLType.IQ4_NL },
  { name: "IQ4_XS", ftype: 30, base: GGMLType.IQ4_XS },
];

/** llama-quantize's aliases: Q3_K/Q4_K/Q5_K mean the _M mixes. */
const ALIASES: ReadonlyMap<string, string> = new Map([
  ["Q3_K", "Q3_K_M"],
  ["Q4_K", "Q4_K_M"],
  ["Q5_K", "Q5_K_M"],
]);

export const FILE_TYPE_NAMES: readonly string[] = [...FILE_TYPES.map((f) => f.name), ...ALIASES.keys()];

export function fileType(name: string): FileTypeSpec {
  const up = name.toUpperCase();
  const key = ALIASES.get(up) ?? up;
  const spec = FILE_TYPES.find((f) => f.name === key);
  if (spec === undefined) throw new UsageError(`unknown --type "${name}" (known: ${FILE_TYPE_NAMES.join(", ")})`);
  return spec;
}

export function isQuantized(t: GGMLType): boolean {
  return t !== GGMLType.F32 && t !== GGMLType.F16 && t !== GGMLType.BF16;
}

/** What the type chooser needs to know about the model and the tensor order (llama-quantize's counters). */
export interface TypeContext {
  readonly spec: FileTypeSpec;
  readonly pure: boolean;
  readonly nExpert: number;
  /** n_head / head_count_kv as written to the file */
  readonly nGqa: number;
  /** block_count (n_layer + MTP layers) */
  readonly nLayerAll: number;
  /** number of attention-v-like tensors (`attn_kv_b`) in the file */
  readonly nAttnV: number;
}

/** Mutable counter of attention-v-like tensors seen so far (llama-quantize's i_attention_wv). */
export interface TypeCounters {
  iAttnV: number;
}

/** Whether llama.cpp would leave this tensor in F32 (never quantized, never converted to F16). */
export function keepsF32(name: string, ne: readonly number[]): boolean {
  return (
    ne.length < 2 ||
    !name.endsWith("weight") ||
    name.includes("_norm.weight") ||
    name.includes("ffn_gate_inp.weight") ||
    name.includes("indexer.proj.weight")
  );
}

const blockOf = (t: GGMLType): number => typeTraits(t)!.blockSize;

/** llama-quant.cpp tensor_type_fallback: row lengths that don't fit the block size. */
export function fallbackType(t: GGMLType, ncols: number): GGMLType {
  if (ncols % blockOf(t) === 0) return t;
  let r: GGMLType;
  switch (t) {
    case GGMLType.IQ4_XS:
      r = GGMLType.IQ4_NL;
      break;
    case GGMLType.Q2_K:
    case GGMLType.Q3_K:
      r = GGMLType.Q4_0;
      break;
    case GGMLType.Q4_K:
      r = GGMLType.Q5_0;
      break;
    case GGMLType.Q5_K:
      r = GGMLType.Q5_1;
      break;
    case GGMLType.Q6_K:
      r = GGMLType.Q8_0;
      break;
    default:
      r = t;
  }
  return ncols % blockOf(r) === 0 ? r : GGMLType.F16;
}

const useMoreBits = (i: number, n: number): boolean =>
  i < Math.trunc(n / 8) || i >= Math.trunc((7 * n) / 8) || (i - Math.trunc(n / 8)) % 3 === 2;

function layerOf(name: string): number {
  const m = /^blk\.(\d+)\./.exec(name);
  return m === null ? 0 : Number(m[1]);
}

/** The ggml type of one tensor; call in file order (the attention-v counter advances). */
export function chooseType(name: string, ne: readonly number[], ctx: TypeContext, counters: TypeCounters): GGMLType {
  if (keepsF32(name, ne)) return GGMLType.F32;
  const { spec } = ctx;
  const base = spec.base;
  if (!isQuantized(base)) return base;
  let t: GGMLType = base;
  if (!ctx.pure) t = mixRule(name, ne, ctx, counters, base);
  return fallbackType(t, ne[0]);
}

function mixRule(
  name: string,
  ne: readonly number[],
  ctx: TypeContext,
  counters: TypeCounters,
  base: GGMLType,
): GGMLType {
  const f = ctx.spec.name;
  const e8 = ctx.nExpert === 8;
  if (name === "output.weight") {
    if (ne[0] % blockOf(base) !== 0) return GGMLType.Q8_0;
    return base === GGMLType.Q8_0 ? base : GGMLType.Q6_K;
  }
  if (name === "token_embd.weight") return base;
  if (name.includes("attn_kv_b.weight")) {
    const i = counters.iAttnV++;
    let t = base;
    if (f === "Q2_K") t = ctx.nGqa >= 4 ? GGMLType.Q4_K : GGMLType.Q3_K;
    else if (f === "Q3_K_M") t = i < 2 ? GGMLType.Q5_K : GGMLType.Q4_K;
    else if (f === "Q3_K_L") t = GGMLType.Q5_K;
    else if ((f === "IQ4_NL" || f === "IQ4_XS") && ctx.nGqa >= 4) t = GGMLType.Q5_K;
    else if ((f === "Q4_K_M" || f === "Q5_K_M") && useMoreBits(i, ctx.nAttnV)) t = GGMLType.Q6_K;
    else if (f === "Q4_K_S" && i < 4) t = GGMLType.Q5_K;
    return e8 ? GGMLType.Q8_0 : t;
  }
  if (name.includes("ffn_down")) {
    const i = layerOf(name);
    const n = ctx.nLayerAll;
    if (f === "Q2_K") return GGMLType.Q3_K;
    if (f === "Q3_K_M") return i < Math.trunc(n / 16) ? GGMLType.Q5_K : GGMLType.Q4_K;
    if (f === "Q3_K_L") return GGMLType.Q5_K;
    if (f === "Q4_K_M") return useMoreBits(i, n) ? GGMLType.Q6_K : base;
    if (i < Math.trunc(n / 8) && (f === "IQ4_NL" || f === "IQ4_XS")) return GGMLType.Q5_K;
    if (f === "Q5_K_M" && useMoreBits(i, n)) return GGMLType.Q6_K;
    if (f === "Q4_K_S" && i < Math.trunc(n / 8)) return GGMLType.Q5_K;
    return base;
  }
  if (name.includes("attn_output.weight")) {
    if (e8)
      return ["Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS"].includes(f) ? GGMLType.Q5_K : base;
    if (f === "Q2_K") return GGMLType.Q3_K;
    if (f === "Q3_K_M") return GGMLType.Q4_K;
    if (f === "Q3_K_L") return GGMLType.Q5_K;
  }
  return base;
}
