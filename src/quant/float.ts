/** Unquantized element types: F32, F16, BF16 (decoding is a bit copy or a table lookup). */
import { F16_TABLE, f32ToBF16, f32ToF16 } from "./f16.js";
import type { BlockDecoder, BlockEncoder } from "./common.js";

/** F32: copy the bytes, so every bit pattern (NaN payloads, -0) survives. */
export const decodeF32: BlockDecoder = (src, so, out, oo, n) => {
  new Uint8Array(out.buffer, out.byteOffset + oo * 4, n * 4).set(src.subarray(so, so + n * 4));
};

export const decodeF16: BlockDecoder = (src, so, out, oo, n) => {
  const table = F16_TABLE; // a local: reading an imported binding inside the loop is much slower
  for (let i = 0; i < n; i++, so += 2) out[oo + i] = table[src[so] | (src[so + 1] << 8)];
};

/** BF16 is the top half of an f32: write the bits through an integer view. */
export const decodeBF16: BlockDecoder = (src, so, out, oo, n) => {
  const bits = new Uint32Array(out.buffer, out.byteOffset + oo * 4, n);
  for (let i = 0; i < n; i++, so += 2) bits[i] = ((src[so] | (src[so + 1] << 8)) << 16) >>> 0;
};

export const encodeF32: BlockEncoder = (src, si, out, oo, n) => {
  out.set(new Uint8Array(src.buffer, src.byteOffset + si * 4, n * 4), oo);
};

export const encodeF16: BlockEncoder = (src, si, out, oo, n) => {
  for (let i = 0; i < n; i++, oo += 2) {
    const h = f32ToF16(src[si + i]);
    out[oo] = h & 0xff;
    out[oo + 1] = h >>> 8;
  }
};

export const encodeBF16: BlockEncoder = (src, si, out, oo, n) => {
  for (let i = 0; i < n; i++, oo += 2) {
    const h = f32ToBF16(src[si + i]);
    out[oo] = h & 0xff;
    out[oo + 1] = h >>> 8;
  }
};
