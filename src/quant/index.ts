/**
 * Quantization formats of GGUF tensors: row sizes, decoding to float32 (bit-identical to ggml's to_float), and
 * ggml's reference encoders (no importance matrix) for the types that llama-quantize writes without one.
 */
import { typeName, typeTraits } from "./types.js";
import { QuantTypeError } from "../util/errors.js";
import type { BlockDecoder, BlockEncoder } from "./common.js";
import { decodeBF16, decodeF16, decodeF32, encodeBF16, encodeF16, encodeF32 } from "./float.js";
import {
  decodeIQ1_M,
  decodeIQ1_S,
  decodeIQ2_S,
  decodeIQ2_XS,
  decodeIQ2_XXS,
  decodeIQ3_S,
  decodeIQ3_XXS,
} from "./iquants.js";
import { decodeIQ4_NL, decodeIQ4_XS, encodeIQ4_NL, encodeIQ4_XS } from "./iq4.js";
import { encodeQ2_K, encodeQ3_K, encodeQ4_K, encodeQ5_K, encodeQ6_K } from "./kquants-encode.js";
import { decodeQ2_K, decodeQ3_K, decodeQ4_K, decodeQ5_K, decodeQ6_K, decodeQ8_K } from "./kquants.js";
import {
  decodeQ4_0,
  decodeQ4_1,
  decodeQ5_0,
  decodeQ5_1,
  decodeQ8_0,
  decodeQ8_1,
  encodeQ4_0,
  encodeQ4_1,
  encodeQ5_0,
  encodeQ5_1,
  encodeQ8_0,
  encodeQ8_1,
} from "./legacy.js";
import { decodeMXFP4 } from "./mxfp4.js";
import { decodeTQ1_0, decodeTQ2_0 } from "./ternary.js";

// GGML type ids (see src/gguf/types.ts GGMLType).
const DECODERS = new Map<number, BlockDecoder>([
  [0, decodeF32],
  [1, decodeF16],
  [30, decodeBF16],
  [2, decodeQ4_0],
  [3, decodeQ4_1],
  [6, decodeQ5_0],
  [7, decodeQ5_1],
  [8, decodeQ8_0],
  [9, decodeQ8_1],
  [10, decodeQ2_K],
  [11, decodeQ3_K],
  [12, decodeQ4_K],
  [13, decodeQ5_K],
  [14, decodeQ6_K],
  [15, decodeQ8_K],
  [16, decodeIQ2_XXS],
  [17, decodeIQ2_XS],
  [18, decodeIQ3_XXS],
  [19, decodeIQ1_S],
  [20, decodeIQ4_NL],
  [21, decodeIQ3_S],
  [22, decodeIQ2_S],
  [23, decodeIQ4_XS],
  [29, decodeIQ1_M],
  [34, decodeTQ1_0],
  [35, decodeTQ2_0],
  [39, decodeMXFP4],
]);

const ENCODERS = new Map<number, BlockEncoder>([
  [0, encodeF32],
  [1, encodeF16],
  [30, encodeBF16],
  [2, encodeQ4_0],
  [3, encodeQ4_1],
  [6, encodeQ5_0],
  [7, encodeQ5_1],
  [8, encodeQ8_0],
  [9, encodeQ8_1],
  [10, encodeQ2_K],
  [11, encodeQ3_K],
  [12, encodeQ4_K],
  [13, encodeQ5_K],
  [14, encodeQ6_K],
  [20, encodeIQ4_NL],
  [23, encodeIQ4_XS],
]);

function describe(type: number): string {
  const t = typeTraits(type);
  return t ? `${t.name} (id ${type})` : `unknown type id ${type}`;
}

function where(context: string | undefined): string {
  return context ? ` in ${context}` : "";
}

function traitsOf(type: number, context?: string): { blockSize: number; typeSize: number } {
  const t = typeTraits(type);
  if (!t) throw new QuantTypeError(`unknown ggml type id ${type}${where(context)}`);
  return t;
}

/** Bytes of a row of n elements; throws QuantTypeError for an unknown type or n not a multiple of the block size. */
export function rowBytes(type: number, n: number, context?: string): number {
  const t = traitsOf(type, context);
  if (!Number.isInteger(n) || n < 0 || n % t.blockSize !== 0) {
    throw new QuantTypeError(
      `${describe(type)}: ${n} elements is not a whole number of ${t.blockSize}-element blocks${where(context)}`,
    );
  }
  return (n / t.blockSize) * t.typeSize;
}

export function canDequantize(type: number): boolean {
  return DECODERS.has(type);
}

export function canQuantize(type: number): boolean {
  return ENCODERS.has(type);
}

/** Decode n elements (a whole number of blocks) from src[srcByteOffset..] into out[outOffset..]. */
export function dequantizeRow(
  type: number,
  src: Uint8Array,
  srcByteOffset: number,
  out: Float32Array,
  outOffset: number,
  n: number,
  context?: string,
): void {
  const decode = DECODERS.get(type);
  if (!decode) throw new QuantTypeError(`cannot dequantize ${describe(type)}${where(context)}: unsupported type`);
  const bytes = rowBytes(type, n, context);
  if (srcByteOffset < 0 || srcByteOffset + bytes > src.length) {
    throw new RangeError(
      `${typeName(type)} row${where(context)}: needs bytes [${srcByteOffset}, ${srcByteOffset + bytes}) of a ${src.length}-byte buffer`,
    );
  }
  if (outOffset < 0 || outOffset + n > out.length) {
    throw new RangeError(
      `${typeName(type)} row${where(context)}: needs ${n} floats at ${outOffset} of a ${out.length}-float output`,
    );
  }
  decode(src, srcByteOffset, out, outOffset, n / traitsOf(type).blockSize);
}

/** Decode the first n elements (a whole number of blocks) of src. */
export function dequantize(type: number, src: Uint8Array, n: number, context?: string): Float32Array {
  const out = new Float32Array(n);
  dequantizeRow(type, src, 0, out, 0, n, context);
  return out;
}

/** Encode n elements src[srcOffset..] (a whole number of blocks) into out[outByteOffset..], as ggml's reference code. */
export function quantizeRow(
  type: number,
  src: Float32Array,
  srcOffset: number,
  n: number,
  out: Uint8Array,
  outByteOffset: number,
  context?: string,
): void {
  const encode = ENCODERS.get(type);
  if (!encode) throw new QuantTypeError(`cannot quantize to ${describe(type)}${where(context)}: unsupported type`);
  const bytes = rowBytes(type, n, context);
  if (srcOffset < 0 || srcOffset + n > src.length) {
    throw new RangeError(
      `${typeName(type)} row${where(context)}: needs ${n} floats at ${srcOffset} of a ${src.length}-float input`,
    );
  }
  if (outByteOffset < 0 || outByteOffset + bytes > out.length) {
    throw new RangeError(
      `${typeName(type)} row${where(context)}: needs bytes [${outByteOffset}, ${outByteOffset + bytes}) of a ${out.length}-byte output`,
    );
  }
  out.fill(0, outByteOffset, outByteOffset + bytes);
  encode(src, srcOffset, out, outByteOffset, n / traitsOf(type).blockSize);
}

/** Encode src as rows of nPerRow elements (src.length must be a multiple of nPerRow). */
export function quantize(type: number, src: Float32Array, nPerRow: number, context?: string): Uint8Array {
  if (!canQuantize(type))
    throw new QuantTypeError(`cannot quantize to ${describe(type)}${where(context)}: unsupported type`);
  if (!Number.isInteger(nPerRow) || nPerRow <= 0 || src.length % nPerRow !== 0) {
    throw new RangeError(
      `quantize${where(context)}: ${src.length} floats is not a whole number of ${nPerRow}-element rows`,
    );
  }
  const rows = src.length / nPerRow;
  const rb = rowBytes(type, nPerRow, context);
  const out = new Uint8Array(rows * rb);
  for (let r = 0; r < rows; r++) quantizeRow(type, src, r * nPerRow, nPerRow, out, r * rb, context);
  return out;
}
