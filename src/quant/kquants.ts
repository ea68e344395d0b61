/**
 * K-quant decoders (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
 * The encoders live in kquants-encode.ts.
 *
 * Bit-exactness: ggml forms a float sub-block scale first (`dl = d * sc`, a rounded float product) and then
 * `dl * q - ml`; the fround calls below mark every point where C rounds to float. The final rounding is the store
 * into the Float32Array.
 */
import { f16At, f32At, type BlockDecoder } from "./common.js";

// A module-local alias: V8 inlines Math.fround only when it is not read through an imported binding (10x).
const fround = Math.fround;

/** Q2_K (84 bytes): scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. */
export const decodeQ2_K: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 84) {
    const d = f16At(src, so + 80);
    const dmin = f16At(src, so + 82);
    let is = 0;
    for (let half = 0; half < 2; half++) {
      const q = so + 16 + 32 * half;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let k = 0; k < 2; k++) {
          const sc = src[so + is++];
          const dl = fround(d * (sc & 15));
          const ml = fround(dmin * (sc >> 4));
          const qb = q + 16 * k;
          for (let l = 0; l < 16; l++) out[oo++] = fround(dl * ((src[qb + l] >> shift) & 3)) - ml;
        }
      }
    }
  }
};

/** Q3_K (110 bytes): hmask[32], qs[64], scales[12] (16 packed 6-bit signed scales), d. */
export const decodeQ3_K: BlockDecoder = (src, so, out, oo, nb) => {
  const scales = new Int32Array(16);
  for (let i = 0; i < nb; i++, so += 110) {
    const d = f16At(src, so + 108);
    const sb = so + 96;
    for (let j = 0; j < 16; j++) {
      const low = j < 8 ? src[sb + j] & 15 : src[sb + j - 8] >> 4;
      const high = (src[sb + 8 + (j & 3)] >> (2 * (j >> 2))) & 3;
      scales[j] = (low | (high << 4)) - 32;
    }
    let is = 0;
    let m = 1;
    for (let half = 0; half < 2; half++) {
      const q = so + 32 + 32 * half;
      for (let shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (let k = 0; k < 2; k++) {
          const dl = fround(d * scales[is++]);
          const qb = q + 16 * k;
          const hb = so + 16 * k;
          for (let l = 0; l < 16; l++) {
            out[oo++] = dl * (((src[qb + l] >> shift) & 3) - (src[hb + l] & m ? 0 : 4));
          }
        }
      }
    }
  }
};

/**
 * Q4_K / Q5_K 6-bit (scale, min) pair j of the 12 packed bytes at s, written into pair[0], pair[1]
 * (ggml's get_scale_min_k4).
 */
export function scaleMinK4(j: number, b: Uint8Array, s: number, pair: Int32Array): void {
  if (j < 4) {
    pair[0] = b[s + j] & 63;
    pair[1] = b[s + j + 4] & 63;
  } else {
    pair[0] = (b[s + j + 4] & 15) | ((b[s + j - 4] >> 6) << 4);
    pair[1] = (b[s + j + 4] >> 4) | ((b[s + j] >> 6) << 4);
  }
}

/** Q4_K (144 bytes): d, dmin, scales[12], qs[128]; 8 sub-blocks of 32. */
export const decodeQ4_K: BlockDecoder = (src, so, out, oo, nb) => {
  const p = new Int32Array(2);
  for (let i = 0; i < nb; i++, so += 144) {
    const d = f16At(src, so);
    const dmin = f16At(src, so + 2);
    let q = so + 16;
    for (let c = 0; c < 4; c++, q += 32) {
      scaleMinK4(2 * c, src, so + 4, p);
      const d1 = fround(d * p[0]);
      const m1 = fround(dmin * p[1]);
      scaleMinK4(2 * c + 1, src, so + 4, p);
      const d2 = fround(d * p[0]);
      const m2 = fround(dmin * p[1]);
      for (let l = 0; l < 32; l++) out[oo + l] = fround(d1 * (src[q + l] & 15)) - m1;
      for (let l = 0; l < 32; l++) out[oo + 32 + l] = fround(d2 * (src[q + l] >> 4)) - m2;
      oo += 64;
    }
  }
};

/** Q5_K (176 bytes): d, dmin, scales[12], qh[32], qs[128]. */
export const decodeQ5_K: BlockDecoder = (src, so, out, oo, nb) => {
  const p = new Int32Array(2);
  for (let i = 0; i < nb; i++, so += 176) {
    const d = f16At(src, so);
    const dmin = f16At(src, so + 2);
    const qh = so + 16;
    let q = so + 48;
    let u1 = 1;
    let u2 = 2;
    for (let c = 0; c < 4; c++, q += 32, u1 <<= 2, u2 <<= 2) {
      scaleMinK4(2 * c, src, so + 4, p);
      const d1 = fround(d * p[0]);
      const m1 = fround(dmin * p[1]);
      scaleMinK4(2 * c + 1, src, so + 4, p);
      const d2 = fround(d * p[0]);
      const m2 = fround(dmin * p[1]);
      for (let l = 0; l < 32; l++) out[oo + l] = fround(d1 * ((src[q + l] & 15) + (src[qh + l] & u1 ? 16 : 0))) - m1;
      for (let l = 0; l < 32; l++)
        out[oo + 32 + l] = fround(d2 * ((src[q + l] >> 4) + (src[qh + l] & u2 ? 16 : 0))) - m2;
      oo += 64;
    }
  }
};

/** Q6_K (210 bytes): ql[128], qh[64], scales[16] int8, d. */
export const decodeQ6_K: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 210) {
    const d = f16At(src, so + 208);
    for (let half = 0; half < 2; half++, oo += 128) {
      const ql = so + 64 * half;
      const qh = so + 128 + 32 * half;
      const sc = so + 192 + 8 * half;
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const a = src[ql + l];
        const b = src[ql + l + 32];
        const h = src[qh + l];
        const s0 = fround(d * ((src[sc + is] << 24) >> 24));
        const s2 = fround(d * ((src[sc + is + 2] << 24) >> 24));
        const s4 = fround(d * ((src[sc + is + 4] << 24) >> 24));
        const s6 = fround(d * ((src[sc + is + 6] << 24) >> 24));
        out[oo + l] = s0 * (((a & 15) | ((h & 3) << 4)) - 32);
        out[oo + l + 32] = s2 * (((b & 15) | (((h >> 2) & 3) << 4)) - 32);
        out[oo + l + 64] = s4 * (((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
        out[oo + l + 96] = s6 * (((b >> 4) | (((h >> 6) & 3) << 4)) - 32);
      }
    }
  }
};

/** Q8_K (292 bytes): d f32, qs[256] int8, bsums[16] int16 (ignored when decoding). */
export const decodeQ8_K: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 292, oo += 256) {
    const d = f32At(src, so);
    for (let j = 0; j < 256; j++) out[oo + j] = d * ((src[so + 4 + j] << 24) >> 24);
  }
};
