/**
 * A load-time NaN/±Inf scan of tensor bytes in their stored type, cheap enough to run on every weight as it is read:
 * float tensors are scanned by their exponent bits, block-quantized ones by their block scales only (the quantized
 * values are small integers, and an fp16 scale times them cannot overflow f32). A
 * type without such a layout (IQ1_M's packed scale, Q8_K's and MXFP4's scales, whose products can overflow) is
 * dequantized and its values scanned.
 */
import { GGMLType, typeTraits } from "../gguf/types.js";
import { dequantize } from "../quant/index.js";

/** Byte offsets of the fp16 scales (d, dmin, …) inside one block of each block type; from the decoders in src/quant. */
const F16_SCALES: ReadonlyMap<number, readonly number[]> = new Map([
  [GGMLType.Q4_0, [0]],
  [GGMLType.Q4_1, [0, 2]],
  [GGMLType.Q5_0, [0]],
  [GGMLType.Q5_1, [0, 2]],
  [GGMLType.Q8_0, [0]],
  [GGMLType.Q8_1, [0]], // s at 2 is a sum the decoder does not read
  [GGMLType.Q2_K, [80, 82]],
  [GGMLType.Q3_K, [108]],
  [GGMLType.Q4_K, [0, 2]],
  [GGMLType.Q5_K, [0, 2]],
  [GGMLType.Q6_K, [208]],
  [GGMLType.IQ2_XXS, [0]],
  [GGMLType.IQ2_XS, [0]],
  [GGMLType.IQ2_S, [0]],
  [GGMLType.IQ3_XXS, [0]],
  [GGMLType.IQ3_S, [0]],
  [GGMLType.IQ1_S, [0]],
  [GGMLType.IQ4_NL, [0]],
  [GGMLType.IQ4_XS, [0]],
  [GGMLType.TQ1_0, [52]],
  [GGMLType.TQ2_0, [64]],
]);

/** The byte offsets of a block type's fp16 scales, or undefined when the type is scanned another way. */
export function f16ScaleOffsets(type: number): readonly number[] | undefined {
  return F16_SCALES.get(type);
}

/** Where the first non-finite value of a tensor is: an element index for float types, else a block index. */
export interface NonFiniteAt {
  readonly unit: "element" | "block";
  readonly index: number;
}

/** fp16 at byte o is NaN or ±Inf: exponent bits (14..10) all set. */
function f16Bad(b: Uint8Array, o: number): boolean {
  return (b[o + 1] & 0x7c) === 0x7c;
}

/** f32 (or the high half of one, bf16) at byte o is NaN or ±Inf: exponent bits all set. */
function f32HighBad(b: Uint8Array, o: number): boolean {
  return (b[o + 1] & 0x7f) === 0x7f && (b[o] & 0x80) !== 0;
}

/**
 * The first of `n` elements of `size` bytes whose exponent bits (`mask` within each little-endian 32-bit word: one
 * f32 or two 16-bit floats) are all set. Whole words are tested four bytes at a time where the bytes are aligned (a
 * few times faster than byte by byte); a hit, and any tail, is resolved with `bad` per element.
 */
function firstBadElement(
  bytes: Uint8Array,
  n: number,
  size: 2 | 4,
  mask: number,
  bad: (b: Uint8Array, o: number) => boolean,
): number {
  let from = 0;
  if (bytes.byteOffset % 4 === 0) {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, Math.floor((n * size) / 4));
    const lo = mask & 0xffff;
    const hi = mask & 0xffff0000;
    let w = 0;
    for (; w < words.length; w++) {
      const x = words[w];
      if ((lo !== 0 && (x & lo) === lo) || (hi !== 0 && (x & hi) >>> 0 === hi >>> 0)) break;
    }
    from = (w * 4) / size;
  }
  for (let i = from; i < n; i++) if (bad(bytes, i * size)) return i;
  return -1;
}

const F16_WORD = 0x7c007c00;
const BF16_WORD = 0x7f807f80;
const F32_WORD = 0x7f800000;

/** The first NaN/±Inf of `n` values stored as `type` in `bytes`, or undefined when every value is finite. */
export function findNonFinite(type: number, bytes: Uint8Array, n: number): NonFiniteAt | undefined {
  let at: number | undefined;
  switch (type) {
    case GGMLType.F32:
      at = firstBadElement(bytes, n, 4, F32_WORD, (b, o) => f32HighBad(b, o + 2));
      break;
    case GGMLType.F16:
      at = firstBadElement(bytes, n, 2, F16_WORD, f16Bad);
      break;
    case GGMLType.BF16:
      at = firstBadElement(bytes, n, 2, BF16_WORD, f32HighBad);
      break;
  }
  if (at !== undefined) return at < 0 ? undefined : { unit: "element", index: at };
  const scales = F16_SCALES.get(type);
  if (scales !== undefined) {
    const size = typeTraits(type)!.typeSize;
    for (let b = 0, o = 0; o + size <= bytes.length; b++, o += size)
      for (const s of scales) if (f16Bad(bytes, o + s)) return { unit: "block", index: b };
    return undefined;
  }
  // dequantized a slice at a time: no float copy of a whole (possibly multi-GB) tensor
  const { blockSize, typeSize } = typeTraits(type)!;
  const blocksPerSlice = 4096;
  for (let first = 0; first * blockSize < n; first += blocksPerSlice) {
    const blocks = Math.min(blocksPerSlice, n / blockSize - first);
    const values = dequantize(type, bytes.subarray(first * typeSize, (first + blocks) * typeSize), blocks * blockSize);
    for (let i = 0; i < values.length; i++)
      if (!Number.isFinite(values[i])) return { unit: "element", index: first * blockSize + i };
  }
  return undefined;
}
