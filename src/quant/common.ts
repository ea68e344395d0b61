/** Shared helpers of the block decoders/encoders: f16 fields, float32 rounding, ggml's integer rounding. */
import { F16_TABLE, f32ToF16 } from "./f16.js";

/** Decodes `nBlocks` consecutive blocks starting at src[so] into out[oo..]. */
export type BlockDecoder = (src: Uint8Array, so: number, out: Float32Array, oo: number, nBlocks: number) => void;
/** Encodes `nBlocks` blocks of floats starting at src[si] into out[oo..]. */
export type BlockEncoder = (src: Float32Array, si: number, out: Uint8Array, oo: number, nBlocks: number) => void;

/** f16 field (little-endian) at byte o, as float. */
export function f16At(b: Uint8Array, o: number): number {
  return F16_TABLE[b[o] | (b[o + 1] << 8)];
}

export function putF16(b: Uint8Array, o: number, value: number): void {
  const h = f32ToF16(value);
  b[o] = h & 0xff;
  b[o + 1] = h >>> 8;
}

/** Round an f32 value to f16 and back (the value ggml reads after storing it). */
export function viaF16(value: number): number {
  return F16_TABLE[f32ToF16(value)];
}

export function u16At(b: Uint8Array, o: number): number {
  return b[o] | (b[o + 1] << 8);
}

export function u32At(b: Uint8Array, o: number): number {
  return (b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)) >>> 0;
}

const scratchF = new Float32Array(1);
const scratchU = new Uint32Array(scratchF.buffer);

/** f32 with the given bit pattern. */
export function f32FromBits(bits: number): number {
  scratchU[0] = bits >>> 0;
  return scratchF[0];
}

export function f32At(b: Uint8Array, o: number): number {
  return f32FromBits(u32At(b, o));
}

export function putF32(b: Uint8Array, o: number, value: number): void {
  scratchF[0] = value;
  const u = scratchU[0];
  b[o] = u & 0xff;
  b[o + 1] = (u >>> 8) & 0xff;
  b[o + 2] = (u >>> 16) & 0xff;
  b[o + 3] = u >>> 24;
}

/**
 * ggml's nearest_int: float → int by adding 1.5·2^23 in float32 and reading the low mantissa bits. For |x| < 2^22
 * this is round-half-to-even; outside that range (and for inf/NaN, which appear when a scale overflowed f16) the
 * bit trick's own result is reproduced. The argument must already be a float32 value.
 */
export function nearestInt(fval: number): number {
  if (fval > -4194303 && fval < 4194303) {
    const r = Math.round(fval);
    // Math.round rounds .5 up; correct the tie cases to even.
    return r - fval === 0.5 && (r & 1) !== 0 ? r - 1 : r;
  }
  scratchF[0] = fval + 12582912;
  return (scratchU[0] & 0x007fffff) - 0x00400000;
}

/** C roundf: half away from zero. */
export function roundf(x: number): number {
  return x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5);
}
