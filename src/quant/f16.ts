/** IEEE binary16 and bfloat16 conversions (bit-exact, as ggml's). */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Exact value of f16 bits h as a float (every f16 is exactly representable in f32). */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1024 + mant) * 2 ** (exp - 25);
}

/** Precomputed table: f16 bits → f32 value; dequantization reads it in hot loops. */
export const F16_TABLE: Float32Array = (() => {
  const t = new Float32Array(65536);
  for (let i = 0; i < 65536; i++) t[i] = f16ToF32(i);
  return t;
})();

/** Round a float to the nearest f16 (ties to even), returning the 16 bits; as ggml's GGML_FP32_TO_FP16 on x86 (F16C). */
export function f32ToF16(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  // unbiased exponent for f16
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    // subnormal: shift the full mantissa (with implicit 1) right, round to nearest even
    const m = mant | 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = m & ((1 << shift) - 1);
    let r = m >>> shift;
    if (rest > half || (rest === half && (r & 1) === 1)) r += 1;
    return sign | r;
  }
  let r = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (r & 1) === 1)) r += 1; // may carry into the exponent: correct rounding
  return sign | r;
}

export function bf16ToF32(b: number): number {
  u32[0] = (b & 0xffff) << 16;
  return f32[0];
}

/** Round to nearest even bf16 bits (as ggml's GGML_FP32_TO_BF16; NaN kept quiet). */
export function f32ToBF16(value: number): number {
  f32[0] = value;
  const x = u32[0];
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 64) & 0xffff;
  return ((x + (0x7fff + ((x >>> 16) & 1))) >>> 16) & 0xffff;
}
