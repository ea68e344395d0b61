/**
 * ggml's reference K-quant encoders (no importance matrix): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
 *
 * Everything follows ggml's float32 arithmetic step by step: `fround` marks each point where C holds a float
 * (a product, a sum, a quotient), accumulations run in the same order, and integer rounding is ggml's nearest_int
 * (half to even). The last pass of each encoder re-quantizes with the f16-rounded super-block scales it stored.
 */
import { nearestInt, putF16, viaF16, type BlockEncoder } from "./common.js";
import { scaleMinK4 } from "./kquants.js";

// A module-local alias: V8 inlines Math.fround only when it is not read through an imported binding (10x).
const fround = Math.fround;

const GROUP_MAX_EPS = fround(1e-15);
const F_0_1 = fround(0.1);

/** Scratch buffers (encoders are synchronous, so module-level scratch is safe). */
const L = new Uint8Array(256);
const Laux = new Uint8Array(32);
const weights = new Float32Array(32);
const scales = new Float32Array(16);
const mins = new Float32Array(16);
const pair = new Int32Array(2);

/**
 * make_qkx2_quants: affine (scale, min) fit of x[s..s+n) to levels 0..nmax with weights, trying nstep+1 scales.
 * Writes levels into L[lo..lo+n), the min (negated, ≥ 0) into mins[mi]; returns the scale.
 */
function makeQkx2(
  n: number,
  nmax: number,
  x: Float32Array,
  s: number,
  w: Float32Array,
  lo: number,
  mi: number,
  rmin: number,
  rdelta: number,
  nstep: number,
  useMad: boolean,
): number {
  let min = x[s];
  let max = x[s];
  let sumW = w[0];
  let sumX = fround(sumW * x[s]);
  for (let i = 1; i < n; i++) {
    const v = x[s + i];
    if (v < min) min = v;
    if (v > max) max = v;
    sumW = fround(sumW + w[i]);
    sumX = fround(sumX + fround(w[i] * v));
  }
  if (min > 0) min = 0;
  if (max === min) {
    for (let i = 0; i < n; i++) L[lo + i] = 0;
    mins[mi] = -min;
    return 0;
  }
  // Note: once a better fit is found, `min` changes, and later tries use the new (max - min) and x - min.
  let iscale = fround(nmax / fround(max - min));
  let scale = fround(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const l = Math.max(0, Math.min(nmax, nearestInt(fround(iscale * fround(x[s + i] - min)))));
    L[lo + i] = l;
    let diff = fround(fround(fround(scale * l) + min) - x[s + i]);
    diff = useMad ? Math.abs(diff) : fround(diff * diff);
    bestError = fround(bestError + fround(w[i] * diff));
  }
  for (let is = 0; is <= nstep; is++) {
    iscale = fround(fround(fround(rmin + fround(rdelta * is)) + nmax) / fround(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.max(0, Math.min(nmax, nearestInt(fround(iscale * fround(x[s + i] - min)))));
      Laux[i] = l;
      const wl = fround(w[i] * l);
      sumL = fround(sumL + wl);
      sumL2 = fround(sumL2 + fround(wl * l));
      sumXL = fround(sumXL + fround(wl * x[s + i]));
    }
    const D = fround(fround(sumW * sumL2) - fround(sumL * sumL));
    if (D > 0) {
      let thisScale = fround(fround(fround(sumW * sumXL) - fround(sumX * sumL)) / D);
      let thisMin = fround(fround(fround(sumL2 * sumX) - fround(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fround(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        let diff = fround(fround(fround(thisScale * Laux[i]) + thisMin) - x[s + i]);
        diff = useMad ? Math.abs(diff) : fround(diff * diff);
        curError = fround(curError + fround(w[i] * diff));
      }
      if (curError < bestError) {
        for (let i = 0; i < n; i++) L[lo + i] = Laux[i];
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  mins[mi] = -min;
  return scale;
}

/** Pack 256 2-bit levels of L: byte l of each 32-byte half holds elements l, l+32, l+64, l+96. */
function pack2(out: Uint8Array, q: number): void {
  for (let j = 0; j < 256; j += 128) {
    for (let l = 0; l < 32; l++) {
      out[q + j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
    }
  }
}

export const encodeQ2_K: BlockEncoder = (x, si, out, oo, nb) => {
  const Q4SCALE = 15;
  for (let i = 0; i < nb; i++, si += 256, oo += 84) {
    let maxScale = 0;
    let maxMin = 0;
    for (let j = 0; j < 16; j++) {
      for (let l = 0; l < 16; l++) weights[l] = Math.abs(x[si + 16 * j + l]);
      scales[j] = makeQkx2(16, 3, x, si + 16 * j, weights, 16 * j, j, -0.5, F_0_1, 15, true);
      if (scales[j] > maxScale) maxScale = scales[j];
      if (mins[j] > maxMin) maxMin = mins[j];
    }
    if (maxScale > 0) {
      const iscale = fround(Q4SCALE / maxScale);
      for (let j = 0; j < 16; j++) out[oo + j] = nearestInt(fround(iscale * scales[j])) & 0xff;
      putF16(out, oo + 80, fround(maxScale / Q4SCALE));
    } else {
      for (let j = 0; j < 16; j++) out[oo + j] = 0;
      putF16(out, oo + 80, 0);
    }
    if (maxMin > 0) {
      const iscale = fround(Q4SCALE / maxMin);
      for (let j = 0; j < 16; j++) out[oo + j] |= (nearestInt(fround(iscale * mins[j])) << 4) & 0xff;
      putF16(out, oo + 82, fround(maxMin / Q4SCALE));
    } else {
      putF16(out, oo + 82, 0);
    }
    const dAll = viaF16(fround(maxScale / Q4SCALE));
    const mAll = viaF16(fround(maxMin / Q4SCALE));
    for (let j = 0; j < 16; j++) {
      const d = fround((maxScale > 0 ? dAll : 0) * (out[oo + j] & 15));
      if (d === 0) continue; // C: `if (!d)`; a NaN d does not skip
      const dm = fround((maxMin > 0 ? mAll : 0) * (out[oo + j] >> 4));
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fround(fround(x[si + 16 * j + ii] + dm) / d));
        L[16 * j + ii] = Math.max(0, Math.min(3, l));
      }
    }
    pack2(out, oo + 16);
  }
};

/** make_q3_quants with do_rmse: signed levels −nmax..nmax−1 fitted with weights x², refined 5 rounds. */
function makeQ3(n: number, nmax: number, x: Float32Array, s: number, Ls: Int8Array, lo: number): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[s + i]);
    if (ax > amax) {
      amax = ax;
      max = x[s + i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    for (let i = 0; i < n; i++) Ls[lo + i] = 0;
    return 0;
  }
  const iscale = fround(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const v = x[s + i];
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(iscale * v))));
    Ls[lo + i] = l;
    const w = fround(v * v);
    sumlx = fround(sumlx + fround(fround(w * v) * l));
    suml2 = fround(suml2 + fround(fround(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const v = x[s + i];
      const w = fround(v * v);
      const li = Ls[lo + i];
      let slx = fround(sumlx - fround(fround(w * v) * li));
      if (slx > 0) {
        let sl2 = fround(suml2 - fround(fround(w * li) * li));
        const nl = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(fround(v * sl2) / slx))));
        if (nl !== li) {
          slx = fround(slx + fround(fround(w * v) * nl));
          sl2 = fround(sl2 + fround(fround(w * nl) * nl));
          if (sl2 > 0 && fround(fround(slx * slx) * suml2) > fround(fround(sumlx * sumlx) * sl2)) {
            Ls[lo + i] = nl;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (let i = 0; i < n; i++) Ls[lo + i] += nmax;
  return suml2 > 0 ? fround(sumlx / suml2) : 0;
}

const L3 = new Int8Array(256);

export const encodeQ3_K: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 256, oo += 110) {
    let maxScale = 0;
    let amax = 0;
    for (let j = 0; j < 16; j++) {
      scales[j] = makeQ3(16, 4, x, si + 16 * j, L3, 16 * j);
      const a = Math.abs(scales[j]);
      if (a > amax) {
        amax = a;
        maxScale = scales[j];
      }
    }
    const sb = oo + 96;
    out.fill(0, sb, sb + 12);
    if (maxScale !== 0) {
      const iscale = fround(-32 / maxScale);
      for (let j = 0; j < 16; j++) {
        // C: int8_t l = nearest_int(...), clamped to [-32, 31], + 32
        let l = (nearestInt(fround(iscale * scales[j])) << 24) >> 24;
        l = Math.max(-32, Math.min(31, l)) + 32;
        if (j < 8) out[sb + j] = l & 15;
        else out[sb + j - 8] |= (l & 15) << 4;
        out[sb + 8 + (j % 4)] |= (l >> 4) << (2 * (j >> 2));
      }
      putF16(out, oo + 108, fround(1 / iscale));
    } else {
      putF16(out, oo + 108, 0);
    }
    const dAll = viaF16(maxScale !== 0 ? fround(1 / fround(-32 / maxScale)) : 0);
    for (let j = 0; j < 16; j++) {
      const low = j < 8 ? out[sb + j] & 15 : out[sb + j - 8] >> 4;
      const sc = (low | (((out[sb + 8 + (j % 4)] >> (2 * (j >> 2))) & 3) << 4)) - 32;
      const d = fround(dAll * sc);
      if (d === 0) continue; // C: `if (!d)`; a NaN d does not skip
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fround(x[si + 16 * j + ii] / d));
        L3[16 * j + ii] = Math.max(-4, Math.min(3, l)) + 4;
      }
    }
    out.fill(0, oo, oo + 32);
    let m = 0;
    let hm = 1;
    for (let j = 0; j < 256; j++) {
      let l = L3[j];
      if (l > 3) {
        out[oo + m] |= hm;
        l -= 4;
      }
      L[j] = l;
      if (++m === 32) {
        m = 0;
        hm <<= 1;
      }
    }
    pack2(out, oo + 32);
  }
};

/** Q4_K and Q5_K share the scale search and 6-bit scale packing; nmax is 15 or 31. */
function encodeQ45K(
  x: Float32Array,
  si: number,
  out: Uint8Array,
  oo: number,
  nmax: number,
  rmin: number,
  nstep: number,
): void {
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    const s = si + 32 * j;
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) sumX2 = fround(sumX2 + fround(x[s + l] * x[s + l]));
    const avX = fround(Math.sqrt(fround(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = avX + Math.abs(x[s + l]);
    scales[j] = makeQkx2(32, nmax, x, s, weights, 32 * j, j, rmin, F_0_1, nstep, false);
    if (scales[j] > maxScale) maxScale = scales[j];
    if (mins[j] > maxMin) maxMin = mins[j];
  }
  const invScale = maxScale > 0 ? fround(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fround(63 / maxMin) : 0;
  const sc = oo + 4;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(fround(invScale * scales[j])) & 0xff);
    const lm = Math.min(63, nearestInt(fround(invMin * mins[j])) & 0xff);
    if (j < 4) {
      out[sc + j] = ls;
      out[sc + j + 4] = lm;
    } else {
      out[sc + j + 4] = (ls & 15) | ((lm & 15) << 4);
      out[sc + j - 4] |= (ls >> 4) << 6;
      out[sc + j] |= (lm >> 4) << 6;
    }
  }
  putF16(out, oo, fround(maxScale / 63));
  putF16(out, oo + 2, fround(maxMin / 63));
  const dAll = viaF16(fround(maxScale / 63));
  const mAll = viaF16(fround(maxMin / 63));
  for (let j = 0; j < 8; j++) {
    scaleMinK4(j, out, sc, pair);
    const d = fround(dAll * pair[0]);
    if (d === 0) continue; // C: `if (!d)`; a NaN d does not skip
    const dm = fround(mAll * pair[1]);
    for (let ii = 0; ii < 32; ii++) {
      const l = nearestInt(fround(fround(x[si + 32 * j + ii] + dm) / d));
      L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
    }
  }
}

export const encodeQ4_K: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 256, oo += 144) {
    encodeQ45K(x, si, out, oo, 15, -1, 20);
    const q = oo + 16;
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++) out[q + 32 * c + l] = L[64 * c + l] | (L[64 * c + l + 32] << 4);
    }
  }
};

export const encodeQ5_K: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 256, oo += 176) {
    encodeQ45K(x, si, out, oo, 31, -0.5, 15);
    const qh = oo + 16;
    const ql = oo + 48;
    out.fill(0, qh, qh + 32);
    let m1 = 1;
    let m2 = 2;
    for (let c = 0; c < 4; c++, m1 <<= 2, m2 <<= 2) {
      for (let j = 0; j < 32; j++) {
        let l1 = L[64 * c + j];
        if (l1 > 15) {
          l1 -= 16;
          out[qh + j] |= m1;
        }
        let l2 = L[64 * c + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          out[qh + j] |= m2;
        }
        out[ql + 32 * c + j] = l1 | (l2 << 4);
      }
    }
  }
};

/** make_qx_quants with rmse_type 1 (weights x²): symmetric levels −nmax..nmax−1, 18 extra scale tries. */
function makeQx(n: number, nmax: number, x: Float32Array, s: number, Ls: Uint8Array, lo: number): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[s + i]);
    if (ax > amax) {
      amax = ax;
      max = x[s + i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    for (let i = 0; i < n; i++) Ls[lo + i] = 0;
    return 0;
  }
  let iscale = fround(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const v = x[s + i];
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(iscale * v))));
    Ls[lo + i] = l + nmax;
    const w = fround(v * v);
    sumlx = fround(sumlx + fround(fround(w * v) * l));
    suml2 = fround(suml2 + fround(fround(w * l) * l));
  }
  let scale = suml2 !== 0 ? fround(sumlx / suml2) : 0;
  let best = fround(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fround(-fround(nmax + fround(F_0_1 * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const v = x[s + i];
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(iscale * v))));
      const w = fround(v * v);
      sumlx = fround(sumlx + fround(fround(w * v) * l));
      suml2 = fround(suml2 + fround(fround(w * l) * l));
    }
    if (suml2 > 0 && fround(sumlx * sumlx) > fround(best * suml2)) {
      for (let i = 0; i < n; i++) {
        Ls[lo + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(iscale * x[s + i]))));
      }
      scale = fround(sumlx / suml2);
      best = fround(scale * sumlx);
    }
  }
  return scale;
}

export const encodeQ6_K: BlockEncoder = (x, si, out, oo, nb) => {
  for (let i = 0; i < nb; i++, si += 256, oo += 210) {
    let maxScale = 0;
    let maxAbs = 0;
    for (let ib = 0; ib < 16; ib++) {
      scales[ib] = makeQx(16, 32, x, si + 16 * ib, L, 16 * ib);
      const a = Math.abs(scales[ib]);
      if (a > maxAbs) {
        maxAbs = a;
        maxScale = scales[ib];
      }
    }
    if (maxAbs < GROUP_MAX_EPS) {
      out.fill(0, oo, oo + 210);
      continue;
    }
    const iscale = fround(-128 / maxScale);
    const dStored = fround(1 / iscale);
    putF16(out, oo + 208, dStored);
    const dAll = viaF16(dStored);
    for (let ib = 0; ib < 16; ib++) out[oo + 192 + ib] = Math.min(127, nearestInt(fround(iscale * scales[ib]))) & 0xff;
    for (let j = 0; j < 16; j++) {
      const d = fround(dAll * ((out[oo + 192 + j] << 24) >> 24));
      if (d === 0) continue; // C: `if (!d)`; a NaN d does not skip
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fround(x[si + 16 * j + ii] / d));
        L[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    for (let half = 0; half < 2; half++) {
      const j = 128 * half;
      const ql = oo + 64 * half;
      const qh = oo + 128 + 32 * half;
      for (let l = 0; l < 32; l++) {
        const a = L[j + l];
        const b = L[j + l + 32];
        const c = L[j + l + 64];
        const e = L[j + l + 96];
        out[ql + l] = (a & 15) | ((c & 15) << 4);
        out[ql + l + 32] = (b & 15) | ((e & 15) << 4);
        out[qh + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
    }
  }
};
