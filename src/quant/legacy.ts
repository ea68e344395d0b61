/**
 * The 32-element "legacy" formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1: decoders and ggml's reference encoders.
 *
 * Float32 semantics: every product below is of two float32 values, which a JS double computes exactly; the store
 * into the Float32Array then rounds once, exactly as C's float multiply does. Sums are rounded with fround where C
 * would hold a float.
 */
import { f16At, putF16, roundf, type BlockDecoder, type BlockEncoder } from "./common.js";

// A module-local alias: V8 inlines Math.fround only when it is not read through an imported binding (10x).
const fround = Math.fround;

// ---------------------------------------------------------------- decoders

/** Q4_0 (18 bytes): d f16, qs[16]; low nibbles → y[0..16), high → y[16..32); value (q − 8)·d. */
export const decodeQ4_0: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 18, oo += 32) {
    const d = f16At(src, so);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 2 + j];
      out[oo + j] = ((q & 15) - 8) * d;
      out[oo + j + 16] = ((q >> 4) - 8) * d;
    }
  }
};

/** Q4_1 (20 bytes): d, m f16, qs[16]; value q·d + m. */
export const decodeQ4_1: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 20, oo += 32) {
    const d = f16At(src, so);
    const m = f16At(src, so + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 4 + j];
      out[oo + j] = fround((q & 15) * d) + m;
      out[oo + j + 16] = fround((q >> 4) * d) + m;
    }
  }
};

/** Q5_0 (22 bytes): d, qh u32 (bit j = 5th bit of element j), qs[16]; value (q − 16)·d. */
export const decodeQ5_0: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 22, oo += 32) {
    const d = f16At(src, so);
    const qh = src[so + 2] | (src[so + 3] << 8) | (src[so + 4] << 16) | (src[so + 5] << 24);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 6 + j];
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[oo + j] = (((q & 15) | h0) - 16) * d;
      out[oo + j + 16] = (((q >> 4) | h1) - 16) * d;
    }
  }
};

/** Q5_1 (24 bytes): d, m, qh u32, qs[16]; value q·d + m. */
export const decodeQ5_1: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 24, oo += 32) {
    const d = f16At(src, so);
    const m = f16At(src, so + 2);
    const qh = src[so + 4] | (src[so + 5] << 8) | (src[so + 6] << 16) | (src[so + 7] << 24);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 8 + j];
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[oo + j] = fround(((q & 15) | h0) * d) + m;
      out[oo + j + 16] = fround(((q >> 4) | h1) * d) + m;
    }
  }
};

/** Q8_0 (34 bytes): d, qs[32] int8; value q·d. */
export const decodeQ8_0: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 34, oo += 32) {
    const d = f16At(src, so);
    for (let j = 0; j < 32; j++) out[oo + j] = ((src[so + 2 + j] << 24) >> 24) * d;
  }
};

/** Q8_1 (36 bytes): d, s (= d·Σq) f16, qs[32] int8; value q·d. */
export const decodeQ8_1: BlockDecoder = (src, so, out, oo, nb) => {
  for (let i = 0; i < nb; i++, so += 36, oo += 32) {
    const d = f16At(src, so);
    for (let j = 0; j < 32; j++) out[oo + j] = ((src[so + 4 + j] << 24) >> 24) * d;
  }
};

// ---------------------------------------------------------------- reference encoders

/** Signed extreme of the block: the value of largest magnitude (first one on ties). */
function signedMax(x: Float32Array, s: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < 32; j++) {
    const v = x[s + j];
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

/** (min, max) of the block, as ggml scans them. */
function minMax(x: Float32Array, s: number): [number, number] {
  let min = 3.4028234663852886e38;
  let max = -3.4028234663852886e38;
  for (let j = 0; j < 32; j++) {
    const v = x[s + j];
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return [min, max];
}

/** C's (int8_t)(float) on a non-negative in-range value: truncation. */
const trunc = Math.trunc;

export const encodeQ4_0: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 18) {
    const d = fround(signedMax(x, si) / -8);
    const id = d !== 0 ? fround(1 / d) : 0;
    putF16(out, oo, d);
    for (let j = 0; j < 16; j++) {
      const x0 = fround(x[si + j] * id);
      const x1 = fround(x[si + 16 + j] * id);
      const q0 = Math.min(15, trunc(fround(x0 + 8.5)));
      const q1 = Math.min(15, trunc(fround(x1 + 8.5)));
      out[oo + 2 + j] = q0 | (q1 << 4);
    }
  }
};

export const encodeQ4_1: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 20) {
    const [min, max] = minMax(x, si);
    const d = fround(fround(max - min) / 15);
    const id = d !== 0 ? fround(1 / d) : 0;
    putF16(out, oo, d);
    putF16(out, oo + 2, min);
    for (let j = 0; j < 16; j++) {
      const x0 = fround(fround(x[si + j] - min) * id);
      const x1 = fround(fround(x[si + 16 + j] - min) * id);
      const q0 = Math.min(15, trunc(fround(x0 + 0.5)));
      const q1 = Math.min(15, trunc(fround(x1 + 0.5)));
      out[oo + 4 + j] = q0 | (q1 << 4);
    }
  }
};

export const encodeQ5_0: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 22) {
    const d = fround(signedMax(x, si) / -16);
    const id = d !== 0 ? fround(1 / d) : 0;
    putF16(out, oo, d);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const x0 = fround(x[si + j] * id);
      const x1 = fround(x[si + 16 + j] * id);
      const q0 = Math.min(31, trunc(fround(x0 + 16.5)));
      const q1 = Math.min(31, trunc(fround(x1 + 16.5)));
      out[oo + 6 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    out[oo + 2] = qh & 0xff;
    out[oo + 3] = (qh >>> 8) & 0xff;
    out[oo + 4] = (qh >>> 16) & 0xff;
    out[oo + 5] = qh >>> 24;
  }
};

export const encodeQ5_1: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 24) {
    const [min, max] = minMax(x, si);
    const d = fround(fround(max - min) / 31);
    const id = d !== 0 ? fround(1 / d) : 0;
    putF16(out, oo, d);
    putF16(out, oo + 2, min);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const x0 = fround(fround(x[si + j] - min) * id);
      const x1 = fround(fround(x[si + 16 + j] - min) * id);
      const q0 = trunc(fround(x0 + 0.5)) & 0xff;
      const q1 = trunc(fround(x1 + 0.5)) & 0xff;
      out[oo + 8 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    out[oo + 4] = qh & 0xff;
    out[oo + 5] = (qh >>> 8) & 0xff;
    out[oo + 6] = (qh >>> 16) & 0xff;
    out[oo + 7] = qh >>> 24;
  }
};

function absMax(x: Float32Array, s: number): number {
  let amax = 0;
  for (let j = 0; j < 32; j++) {
    const a = Math.abs(x[s + j]);
    amax = Math.max(amax, a);
  }
  return amax;
}

export const encodeQ8_0: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 34) {
    const d = fround(absMax(x, si) / 127);
    const id = d !== 0 ? fround(1 / d) : 0;
    putF16(out, oo, d);
    for (let j = 0; j < 32; j++) out[oo + 2 + j] = roundf(fround(x[si + j] * id)) & 0xff;
  }
};

export const encodeQ8_1: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 36) {
    const d = fround(absMax(x, si) / 127);
    const id = d !== 0 ? fround(1 / d) : 0;
    putF16(out, oo, d);
    let sum = 0;
    for (let j = 0; j < 32; j++) {
      const q = roundf(fround(x[si + j] * id));
      out[oo + 4 + j] = q & 0xff;
      sum += q;
    }
    putF16(out, oo + 2, fround(sum * d));
  }
};
