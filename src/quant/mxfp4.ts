/** MXFP4 (17 bytes per 32): e8m0 exponent byte e, qs[16] of e2m1 nibbles (stored doubled, so the scale is halved). */
import { f32FromBits, type BlockDecoder } from "./common.js";

/** kvalues_fp4: e2m1 values × 2. */
export const KVALUES_FP4: Int8Array = new Int8Array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]);

/** 2^(e−128) as ggml's e8m0_to_fp32_half: e = 0, 1 give the f32 subnormals 2^-128, 2^-127. */
export function e8m0Half(e: number): number {
  return f32FromBits(e < 2 ? 0x00200000 << e : (e - 1) << 23);
}

export const decodeMXFP4: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 17, oo += 32) {
    const d = e8m0Half(src[so]);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 1 + j];
      out[oo + j] = KVALUES_FP4[q & 15] * d;
      out[oo + j + 16] = KVALUES_FP4[q >> 4] * d;
    }
  }
};
