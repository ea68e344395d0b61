/** Ternary formats TQ1_0 (base-3 packed, 1.6875 bpw) and TQ2_0 (2 bits per value); values in {-1, 0, 1}·d. */
import { f16At, type BlockDecoder } from "./common.js";

const POW3 = [1, 3, 9, 27, 81, 243];

/** Trit n of a byte packed as ggml does: (byte·3^n mod 256)·3 >> 8. */
function trit(b: number, n: number): number {
  return (((b * POW3[n]) & 255) * 3) >> 8;
}

/**
 * TQ1_0 (54 bytes): qs[48] (5 trits per byte), qh[4] (4 trits per byte), d.
 * Order: qs[0..32) × 5 trits, qs[32..48) × 5 trits, then qh × 4 trits; within a group the trit index is outer.
 */
export const decodeTQ1_0: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 54) {
    const d = f16At(src, so + 52);
    for (let n = 0; n < 5; n++) for (let m = 0; m < 32; m++) out[oo++] = (trit(src[so + m], n) - 1) * d;
    for (let n = 0; n < 5; n++) for (let m = 0; m < 16; m++) out[oo++] = (trit(src[so + 32 + m], n) - 1) * d;
    for (let n = 0; n < 4; n++) for (let m = 0; m < 4; m++) out[oo++] = (trit(src[so + 48 + m], n) - 1) * d;
  }
};

/** TQ2_0 (66 bytes): qs[64] (four 2-bit values per byte, value q − 1), d. */
export const decodeTQ2_0: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 66) {
    const d = f16At(src, so + 64);
    for (let j = 0; j < 64; j += 32) {
      for (let shift = 0; shift < 8; shift += 2) {
        for (let m = 0; m < 32; m++) out[oo++] = (((src[so + j + m] >> shift) & 3) - 1) * d;
      }
    }
  }
};
