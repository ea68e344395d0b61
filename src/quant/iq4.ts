/**
 * Non-linear 4-bit formats IQ4_NL (32 per block) and IQ4_XS (256 per super-block, 6-bit sub-scales):
 * decoders, and ggml's encoder without importance weights.
 */
import { f16At, nearestInt, putF16, type BlockDecoder, type BlockEncoder } from "./common.js";

// A module-local alias: V8 inlines Math.fround only when it is not read through an imported binding (10x).
const fround = Math.fround;

/** kvalues_iq4nl: the 16 levels. */
export const KVALUES_IQ4NL: Int8Array = new Int8Array([
  -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
]);

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

// ---------------------------------------------------------------- encoder (ggml's quantize_iq4_nl / _xs, no imatrix)

const GROUP_MAX_EPS = Math.fround(1e-15);

/** Index of the level nearest to x (ggml's best_index_int8; ties go to the upper level). */
function bestIndex(x: number): number {
  const v = KVALUES_IQ4NL;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  let ml = 0;
  let mu = 15;
  while (mu - ml > 1) {
    const mav = (ml + mu) >> 1;
    if (x < v[mav]) mu = mav;
    else ml = mav;
  }
  return fround(x - v[mu - 1]) < fround(v[mu] - x) ? mu - 1 : mu;
}

const L = new Uint8Array(256);
const scales = new Float32Array(8);

/**
 * quantize_row_iq4_nl_impl with ntry = 7 and no weights, for one super-block of `sbs` values (32: IQ4_NL,
 * 256: IQ4_XS). Writes d (f16) at out[od], the nibbles at out[oq..], and for IQ4_XS scales_h/scales_l at out[osc..].
 */
function encodeIQ4(
  x: Float32Array,
  s: number,
  sbs: number,
  out: Uint8Array,
  od: number,
  oq: number,
  osc: number,
): void {
  const ntry = 7;
  const v0 = KVALUES_IQ4NL[0];
  let maxScale = 0;
  let amaxScale = 0;
  const nsub = sbs / 32;
  for (let ib = 0; ib < nsub; ib++) {
    const xb = s + 32 * ib;
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 32; j++) {
      const ax = Math.abs(x[xb + j]);
      if (ax > amax) {
        amax = ax;
        max = x[xb + j];
      }
    }
    if (amax < GROUP_MAX_EPS) {
      scales[ib] = 0;
      continue;
    }
    let d = fround(-max / v0);
    let id = fround(1 / d);
    let sumqx = 0;
    let sumq2 = 0;
    for (let j = 0; j < 32; j++) {
      const xv = x[xb + j];
      const l = bestIndex(fround(id * xv));
      L[32 * ib + j] = l;
      const q = KVALUES_IQ4NL[l];
      const w = fround(xv * xv);
      const wq = fround(w * q);
      sumqx = fround(sumqx + fround(wq * xv));
      sumq2 = fround(sumq2 + fround(wq * q));
    }
    d = sumq2 > 0 ? fround(sumqx / sumq2) : 0;
    let best = fround(d * sumqx);
    for (let itry = -ntry; itry <= ntry; itry++) {
      id = fround((itry + v0) / max);
      sumqx = 0;
      sumq2 = 0;
      for (let j = 0; j < 32; j++) {
        const xv = x[xb + j];
        const q = KVALUES_IQ4NL[bestIndex(fround(id * xv))];
        const w = fround(xv * xv);
        const wq = fround(w * q);
        sumqx = fround(sumqx + fround(wq * xv));
        sumq2 = fround(sumq2 + fround(wq * q));
      }
      if (sumq2 > 0 && fround(sumqx * sumqx) > fround(best * sumq2)) {
        d = fround(sumqx / sumq2);
        best = fround(d * sumqx);
      }
    }
    scales[ib] = d;
    const absD = Math.abs(d);
    if (absD > amaxScale) {
      amaxScale = absD;
      maxScale = d;
    }
  }

  if (nsub > 1) {
    out[osc] = 0;
    out[osc + 1] = 0;
    let sh = 0;
    const d = fround(-maxScale / 32);
    putF16(out, od, d);
    const id = d !== 0 ? fround(1 / d) : 0;
    for (let ib = 0; ib < nsub; ib++) {
      let l = Math.max(-32, Math.min(31, nearestInt(fround(id * scales[ib]))));
      const dl = fround(d * l);
      const idl = dl !== 0 ? fround(1 / dl) : 0;
      for (let j = 0; j < 32; j++) L[32 * ib + j] = bestIndex(fround(idl * x[s + 32 * ib + j]));
      l += 32;
      if (ib % 2 === 0) out[osc + 2 + (ib >> 1)] = l & 15;
      else out[osc + 2 + (ib >> 1)] |= (l & 15) << 4;
      sh |= (l >> 4) << (2 * ib);
    }
    out[osc] = sh & 0xff;
    out[osc + 1] = sh >>> 8;
  } else {
    putF16(out, od, scales[0]);
    const id = scales[0] !== 0 ? fround(1 / scales[0]) : 0;
    for (let j = 0; j < sbs; j++) L[j] = bestIndex(fround(id * x[s + j]));
  }
  for (let i = 0; i < sbs / 32; i++) {
    for (let j = 0; j < 16; j++) out[oq + 16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4);
  }
}

export const encodeIQ4_NL: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 32, oo += 18) encodeIQ4(x, si, 32, out, oo, oo + 2, -1);
};

export const encodeIQ4_XS: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 256, oo += 136) encodeIQ4(x, si, 256, out, oo, oo + 8, oo + 2);
};
