/**
 * Non-linear 4-bit formats IQ4_NL (32 per block) and IQ4_XS (256 per super-block, 6-bit sub-scales):
 * decoders, and ggml's encoder without importance weights.
 */
import { f16At, fround, type BlockDecoder } from "./common.js";

/** kvalues_iq4nl: the 16 levels. */
export const KVALUES_IQ4NL: Int8Array = new Int8Array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]);

/** IQ4_NL (18 bytes): d, qs[16]; low nibbles → y[0..16), high → y[16..32). */
export const decodeIQ4_NL: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 18, oo += 32) {
    const d = f16At(src, so);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 2 + j];
      out[oo + j] = d * KVALUES_IQ4NL[q & 15];
      out[oo + j + 16] = d * KVALUES_IQ4NL[q >> 4];
    }
  }
};

/** IQ4_XS (136 bytes): d, scales_h u16 (2 high bits per sub-block), scales_l[4] (4 low bits), qs[128]. */
export const decodeIQ4_XS: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 136) {
    const d = f16At(src, so);
    const sh = src[so + 2] | (src[so + 3] << 8);
    for (let ib = 0; ib < 8; ib++, oo += 32) {
      const ls = ((src[so + 4 + (ib >> 1)] >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
      const dl = fround(d * (ls - 32));
      const q = so + 8 + 16 * ib;
      for (let j = 0; j < 16; j++) {
        const b = src[q + j];
        out[oo + j] = dl * KVALUES_IQ4NL[b & 15];
        out[oo + j + 16] = dl * KVALUES_IQ4NL[b >> 4];
      }
    }
  }
};
