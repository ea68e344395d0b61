// latent CPU kernels: AssemblyScript source compiled to WebAssembly SIMD by scripts/build-wasm.mjs into
// kernels.wasm.ts (base64). Memory is imported and shared (a SharedArrayBuffer): weights, activations and outputs
// all live in it, addressed by byte offsets handed in from TypeScript. Nothing here allocates: no static data.
//
// Weight rows are first "unpacked" into a per-thread scratch area S (cols = values per row):
//   wq   i16[cols]   integer weights with integer sub-block scales folded in (q·sc), 16-aligned at S
//   wd   f32[nb]     float scale per block (K types: 256 values; 32-types: 32 values)
//   wm   f32[nb]     K types: dmin per block (0 when the type has no mins)
//   wmn  i32[nb·8]   K types: integer min per 32-value sub-block
//   wf   f32[cols]   float weights (F32/F16, and the transposed product of every type)
// Activations are quantized per block to integers kept as i16 (finer than ggml's 8 bits at no cost: the dot product
// is i16×i16 either way):
//   K class  (Q4_K Q5_K Q6_K IQ4_XS): per 256 values one f32 scale, |q| ≤ 8191 (14 bits: |w·sc| ≤ 4096 and each i32
//            lane of a block's sum takes 64 products, 64·4096·8191 < 2³¹), and eight i32 sums of 32 values
//   32 class (Q8_0 Q4_0 Q5_0 IQ4_NL): per 32 values one f32 scale, |q| ≤ 32767 (16 bits)
//   F class  (F32 F16): f32 activations as given

// ggml type ids
const F32: i32 = 0;
const F16: i32 = 1;
const Q4_0: i32 = 2;
const Q5_0: i32 = 6;
const Q8_0: i32 = 8;
const Q4_K: i32 = 12;
const Q5_K: i32 = 13;
const Q6_K: i32 = 14;
const IQ4_NL: i32 = 20;
const IQ4_XS: i32 = 23;
/** internal: Q6_K repacked for single-token products (see repackQ6K) */
const Q6_KR: i32 = 1014;
/** internal: Q5_0 cut to u8 values, a copy for q8 mode (see repackQ5_0u8; read only with Q8ACT added) */
const Q5_0R: i32 = 1006;
/** internal: added to Q4_K, Q5_0, Q5_0R and Q6_KR for their 8-bit-activation kernels (q8 mode, relaxed-SIMD module only) */
const Q8ACT: i32 = 4096;

// @ts-ignore: decorator
@inline function r16(x: usize): usize {
  return (x + 15) & ~(<usize>15);
}

/** 0 = F class, 1 = 32 class, 2 = K class, -1 = unsupported */
export function typeClass(type: i32): i32 {
  if (ASC_FEATURE_RELAXED_SIMD) {
    // the 8-bit-activation kernel types (q8 mode): class 3 = 32 values per scale, 4 = 256
    if (type == Q4_K + Q8ACT || type == Q6_KR + Q8ACT) return 4;
    if (type == Q5_0 + Q8ACT || type == Q5_0R + Q8ACT) return 3;
  }
  if (type == F32 || type == F16) return 0;
  if (type == Q8_0 || type == Q4_0 || type == Q5_0 || type == IQ4_NL) return 1;
  if (type == Q4_K || type == Q5_K || type == Q6_K || type == IQ4_XS || type == Q6_KR) return 2;
  return -1;
}

export function blockValues(type: i32): i32 {
  const c = typeClass(type);
  if (ASC_FEATURE_RELAXED_SIMD && c >= 3) return c == 4 ? 256 : 32;
  return c == 2 ? 256 : c == 1 ? 32 : 1;
}

// scratch layout (block arrays sized for the most blocks a row of `cols` can have: cols/32)
// @ts-ignore: decorator
@inline function nbMax(cols: i32): usize {
  return <usize>((cols >> 5) + 1);
}
// @ts-ignore: decorator
@inline function sWd(S: usize, cols: i32): usize {
  return r16(S + (<usize>cols << 1));
}
// @ts-ignore: decorator
@inline function sWm(S: usize, cols: i32): usize {
  return r16(sWd(S, cols) + (nbMax(cols) << 2));
}
// @ts-ignore: decorator
@inline function sWmn(S: usize, cols: i32): usize {
  return r16(sWm(S, cols) + (nbMax(cols) << 2));
}
// @ts-ignore: decorator
@inline function sWf(S: usize, cols: i32): usize {
  return r16(sWmn(S, cols) + (nbMax(cols) << 5));
}

// @ts-ignore: decorator
@inline function rowArea(cols: i32): usize {
  return r16(sWf(0, cols) + (<usize>cols << 2) + 64);
}

/** bytes of scratch one thread needs for rows of `cols` values: two unpacked rows (S and S + rowArea) */
export function scratchBytes(cols: i32): i32 {
  return <i32>(rowArea(cols) << 1) + 64;
}

// @ts-ignore: decorator
@inline function f16(h: u32): f32 {
  const f = reinterpret<f32>((h & 0x7fff) << 13) * 5.192296858534828e33;
  return reinterpret<f32>(reinterpret<u32>(f) | ((h & 0x8000) << 16));
}

// @ts-ignore: decorator
@inline function kvIQ4(): v128 {
  return i8x16(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}

// @ts-ignore: decorator
@inline function store2x16(dst: usize, q: v128, sc: v128): void {
  // q: 16 signed i8 values → two i16x8 scaled by sc
  v128.store(dst, i16x8.mul(i16x8.extend_low_i8x16_s(q), sc));
  v128.store(dst + 16, i16x8.mul(i16x8.extend_high_i8x16_s(q), sc));
}

// @ts-ignore: decorator
@inline function store2x16u(dst: usize, q: v128): void {
  v128.store(dst, i16x8.extend_low_i8x16_s(q));
  v128.store(dst + 16, i16x8.extend_high_i8x16_s(q));
}

// ---------------------------------------------------------------- row unpackers

function unpackQ4K(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols);
  const m4 = i8x16.splat(15);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    store<f32>(wm + (<usize>b << 2), f16(load<u16>(p + 2)));
    const s = p + 4;
    const qs = p + 16;
    const out = S + (<usize>b << 9);
    for (let j = 0; j < 4; j++) {
      const is = j * 2;
      let sc0: i32, m0: i32, sc1: i32, m1: i32;
      if (is < 4) {
        sc0 = load<u8>(s + is) & 63;
        m0 = load<u8>(s + is + 4) & 63;
        sc1 = load<u8>(s + is + 1) & 63;
        m1 = load<u8>(s + is + 5) & 63;
      } else {
        sc0 = (load<u8>(s + is + 4) & 0xf) | ((load<u8>(s + is - 4) >> 6) << 4);
        m0 = (load<u8>(s + is + 4) >> 4) | ((load<u8>(s + is) >> 6) << 4);
        sc1 = (load<u8>(s + is + 5) & 0xf) | ((load<u8>(s + is - 3) >> 6) << 4);
        m1 = (load<u8>(s + is + 5) >> 4) | ((load<u8>(s + is + 1) >> 6) << 4);
      }
      store<i32>(wmn + (<usize>(b * 8 + is) << 2), m0);
      store<i32>(wmn + (<usize>(b * 8 + is + 1) << 2), m1);
      const v0 = i16x8.splat(<i16>sc0);
      const v1 = i16x8.splat(<i16>sc1);
      const o = out + (<usize>j << 7);
      for (let h = 0; h < 2; h++) {
        const q = v128.load(qs + (<usize>j << 5) + (<usize>h << 4));
        store2x16(o + (<usize>h << 5), v128.and(q, m4), v0);
        store2x16(o + 64 + (<usize>h << 5), i8x16.shr_u(q, 4), v1);
      }
    }
  }
}

function unpackQ5K(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols);
  const m4 = i8x16.splat(15);
  const one = i8x16.splat(1);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 176;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    store<f32>(wm + (<usize>b << 2), f16(load<u16>(p + 2)));
    const s = p + 4;
    const qh = p + 16;
    const qs = p + 48;
    const out = S + (<usize>b << 9);
    for (let j = 0; j < 4; j++) {
      const is = j * 2;
      let sc0: i32, m0: i32, sc1: i32, m1: i32;
      if (is < 4) {
        sc0 = load<u8>(s + is) & 63;
        m0 = load<u8>(s + is + 4) & 63;
        sc1 = load<u8>(s + is + 1) & 63;
        m1 = load<u8>(s + is + 5) & 63;
      } else {
        sc0 = (load<u8>(s + is + 4) & 0xf) | ((load<u8>(s + is - 4) >> 6) << 4);
        m0 = (load<u8>(s + is + 4) >> 4) | ((load<u8>(s + is) >> 6) << 4);
        sc1 = (load<u8>(s + is + 5) & 0xf) | ((load<u8>(s + is - 3) >> 6) << 4);
        m1 = (load<u8>(s + is + 5) >> 4) | ((load<u8>(s + is + 1) >> 6) << 4);
      }
      store<i32>(wmn + (<usize>(b * 8 + is) << 2), m0);
      store<i32>(wmn + (<usize>(b * 8 + is + 1) << 2), m1);
      const v0 = i16x8.splat(<i16>sc0);
      const v1 = i16x8.splat(<i16>sc1);
      const o = out + (<usize>j << 7);
      for (let h = 0; h < 2; h++) {
        const q = v128.load(qs + (<usize>j << 5) + (<usize>h << 4));
        const hb = v128.load(qh + (<usize>h << 4));
        const lo = v128.or(v128.and(q, m4), i8x16.shl(v128.and(i8x16.shr_u(hb, is), one), 4));
        const hi = v128.or(i8x16.shr_u(q, 4), i8x16.shl(v128.and(i8x16.shr_u(hb, is + 1), one), 4));
        store2x16(o + (<usize>h << 5), lo, v0);
        store2x16(o + 64 + (<usize>h << 5), hi, v1);
      }
    }
  }
}

function unpackQ6K(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols);
  const m4 = i8x16.splat(15);
  const m3 = i8x16.splat(3);
  const c32 = i8x16.splat(32);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 210;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p + 208)));
    store<f32>(wm + (<usize>b << 2), 0);
    v128.store(wmn + (<usize>b << 5), i32x4.splat(0));
    v128.store(wmn + (<usize>b << 5) + 16, i32x4.splat(0));
    const out = S + (<usize>b << 9);
    for (let nh = 0; nh < 2; nh++) {
      const ql = p + (<usize>nh << 6);
      const qh = p + 128 + (<usize>nh << 5);
      const sc = p + 192 + (<usize>nh << 3);
      const o = out + (<usize>nh << 8);
      for (let l = 0; l < 2; l++) {
        const a = v128.load(ql + (<usize>l << 4));
        const bb = v128.load(ql + 32 + (<usize>l << 4));
        const h = v128.load(qh + (<usize>l << 4));
        const q1 = i8x16.sub(v128.or(v128.and(a, m4), i8x16.shl(v128.and(h, m3), 4)), c32);
        const q2 = i8x16.sub(v128.or(v128.and(bb, m4), i8x16.shl(v128.and(i8x16.shr_u(h, 2), m3), 4)), c32);
        const q3 = i8x16.sub(v128.or(i8x16.shr_u(a, 4), i8x16.shl(v128.and(i8x16.shr_u(h, 4), m3), 4)), c32);
        const q4 = i8x16.sub(v128.or(i8x16.shr_u(bb, 4), i8x16.shl(i8x16.shr_u(h, 6), 4)), c32);
        const ol = o + (<usize>l << 5);
        store2x16(ol, q1, i16x8.splat(<i16>load<i8>(sc + l)));
        store2x16(ol + 64, q2, i16x8.splat(<i16>load<i8>(sc + l + 2)));
        store2x16(ol + 128, q3, i16x8.splat(<i16>load<i8>(sc + l + 4)));
        store2x16(ol + 192, q4, i16x8.splat(<i16>load<i8>(sc + l + 6)));
      }
    }
  }
}

function unpackIQ4XS(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols);
  const m4 = i8x16.splat(15);
  const kv = kvIQ4();
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 136;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    store<f32>(wm + (<usize>b << 2), 0);
    v128.store(wmn + (<usize>b << 5), i32x4.splat(0));
    v128.store(wmn + (<usize>b << 5) + 16, i32x4.splat(0));
    const sh = <i32>load<u16>(p + 2);
    const out = S + (<usize>b << 9);
    for (let ib = 0; ib < 8; ib++) {
      const ls = ((<i32>load<u8>(p + 4 + (ib >> 1)) >> (4 * (ib & 1))) & 0xf) | (((sh >> (2 * ib)) & 3) << 4);
      const sc = i16x8.splat(<i16>(ls - 32));
      const q = v128.load(p + 8 + (<usize>ib << 4));
      const o = out + (<usize>ib << 6);
      store2x16(o, i8x16.swizzle(kv, v128.and(q, m4)), sc);
      store2x16(o + 32, i8x16.swizzle(kv, i8x16.shr_u(q, 4)), sc);
    }
  }
}

function unpackQ8_0(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 34;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    const o = S + (<usize>b << 6);
    store2x16u(o, v128.load(p + 2));
    store2x16u(o + 32, v128.load(p + 18));
  }
}

function unpackQ4_0(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols);
  const m4 = i8x16.splat(15);
  const c8 = i8x16.splat(8);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 18;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    const q = v128.load(p + 2);
    const o = S + (<usize>b << 6);
    store2x16u(o, i8x16.sub(v128.and(q, m4), c8));
    store2x16u(o + 32, i8x16.sub(i8x16.shr_u(q, 4), c8));
  }
}

function unpackIQ4NL(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols);
  const m4 = i8x16.splat(15);
  const kv = kvIQ4();
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 18;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    const q = v128.load(p + 2);
    const o = S + (<usize>b << 6);
    store2x16u(o, i8x16.swizzle(kv, v128.and(q, m4)));
    store2x16u(o + 32, i8x16.swizzle(kv, i8x16.shr_u(q, 4)));
  }
}

function unpackQ5_0(row: usize, nb: i32, S: usize, cols: i32): void {
  const wd = sWd(S, cols);
  const m4 = i8x16.splat(15);
  const c16 = i8x16.splat(16);
  const idxLo = i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const idxHi = i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const bits = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const zero = i8x16.splat(0);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 22;
    store<f32>(wd + (<usize>b << 2), f16(load<u16>(p)));
    const qh = i32x4.splat(load<u32>(p + 2));
    const hLo = v128.and(i8x16.ne(v128.and(i8x16.swizzle(qh, idxLo), bits), zero), c16);
    const hHi = v128.and(i8x16.ne(v128.and(i8x16.swizzle(qh, idxHi), bits), zero), c16);
    const q = v128.load(p + 6);
    const o = S + (<usize>b << 6);
    store2x16u(o, i8x16.sub(v128.or(v128.and(q, m4), hLo), c16));
    store2x16u(o + 32, i8x16.sub(v128.or(i8x16.shr_u(q, 4), hHi), c16));
  }
}

function unpackF32(row: usize, S: usize, cols: i32): void {
  memory.copy(sWf(S, cols), row, <usize>cols << 2);
}

function unpackF16(row: usize, S: usize, cols: i32): void {
  const wf = sWf(S, cols);
  let i = 0;
  const mAbs = i32x4.splat(0x7fff);
  const mSign = i32x4.splat(0x8000);
  const mul = f32x4.splat(5.192296858534828e33);
  for (; i + 8 <= cols; i += 8) {
    const h = v128.load(row + (<usize>i << 1));
    const lo = i32x4.extend_low_i16x8_u(h);
    const hi = i32x4.extend_high_i16x8_u(h);
    const flo = v128.or(f32x4.mul(i32x4.shl(v128.and(lo, mAbs), 13), mul), i32x4.shl(v128.and(lo, mSign), 16));
    const fhi = v128.or(f32x4.mul(i32x4.shl(v128.and(hi, mAbs), 13), mul), i32x4.shl(v128.and(hi, mSign), 16));
    v128.store(wf + (<usize>i << 2), flo);
    v128.store(wf + (<usize>i << 2) + 16, fhi);
  }
  for (; i < cols; i++) store<f32>(wf + (<usize>i << 2), f16(load<u16>(row + (<usize>i << 1))));
}

/** Unpack one row (for F types into wf, else into wq/wd/wm/wmn). */
export function unpack(type: i32, row: usize, cols: i32, S: usize): void {
  const nb = cols / blockValues(type);
  if (type == Q4_K) unpackQ4K(row, nb, S, cols);
  else if (type == Q6_K) unpackQ6K(row, nb, S, cols);
  else if (type == Q5_K) unpackQ5K(row, nb, S, cols);
  else if (type == IQ4_XS) unpackIQ4XS(row, nb, S, cols);
  else if (type == Q8_0) unpackQ8_0(row, nb, S, cols);
  else if (type == Q4_0) unpackQ4_0(row, nb, S, cols);
  else if (type == Q5_0) unpackQ5_0(row, nb, S, cols);
  else if (type == IQ4_NL) unpackIQ4NL(row, nb, S, cols);
  else if (type == F32) unpackF32(row, S, cols);
  else if (type == F16) unpackF16(row, S, cols);
  else unreachable();
}

/** After unpack: the row as float32 in wf (for the transposed product). */
export function unpackedToF32(type: i32, cols: i32, S: usize): void {
  const cls = typeClass(type);
  const bv = blockValues(type);
  const nb = cols / bv;
  if (cls == 0) return;
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols), wf = sWf(S, cols);
  for (let b = 0; b < nb; b++) {
    const d = f32x4.splat(load<f32>(wd + (<usize>b << 2)));
    const dm = cls == 2 ? load<f32>(wm + (<usize>b << 2)) : 0;
    for (let s = 0; s < bv; s += 32) {
      const m = cls == 2 ? f32x4.splat(dm * <f32>load<i32>(wmn + (<usize>(b * 8 + (s >> 5)) << 2))) : f32x4.splat(0);
      for (let k = 0; k < 32; k += 8) {
        const i = b * bv + s + k;
        const q = v128.load(S + (<usize>i << 1));
        v128.store(wf + (<usize>i << 2), f32x4.sub(f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(q)), d), m));
        v128.store(wf + (<usize>i << 2) + 16, f32x4.sub(f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(q)), d), m));
      }
    }
  }
}

// ---------------------------------------------------------------- activations

/**
 * Quantize n rows of `cols` f32 activations (row t at x + t·xStride floats) for weights of class `cls`:
 * aq i16[n·cols], ad f32[n·nb], asum i32[n·nb·8] (K class only).
 */
export function quantize(cls: i32, x: usize, n: i32, cols: i32, xStride: i32, aq: usize, ad: usize, asum: usize): void {
  if (ASC_FEATURE_RELAXED_SIMD && cls >= 3) return quantize8(cls, x, n, cols, xStride, aq, ad, asum);
  const bv = cls == 2 ? 256 : 32;
  const nb = cols / bv;
  for (let t = 0; t < n; t++) {
    const xr = x + (<usize>(t * xStride) << 2);
    for (let b = 0; b < nb; b++) {
      const xb = xr + (<usize>(b * bv) << 2);
      let mx = f32x4.splat(0);
      for (let i = 0; i < bv; i += 4) mx = f32x4.max(mx, f32x4.abs(v128.load(xb + (<usize>i << 2))));
      const amax = max(max(f32x4.extract_lane(mx, 0), f32x4.extract_lane(mx, 1)), max(f32x4.extract_lane(mx, 2), f32x4.extract_lane(mx, 3)));
      const d: f32 = amax / (cls == 2 ? <f32>8191 : <f32>32767);
      const id = f32x4.splat(d != 0 ? 1 / d : 0);
      store<f32>(ad + (<usize>(t * nb + b) << 2), d);
      const qo = aq + (<usize>(t * cols + b * bv) << 1);
      for (let s = 0; s < bv; s += 32) {
        let sum = i32x4.splat(0);
        for (let i = s; i < s + 32; i += 8) {
          const a = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(xb + (<usize>i << 2)), id)));
          const b2 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(xb + (<usize>i << 2) + 16), id)));
          const q = i16x8.narrow_i32x4_s(a, b2);
          v128.store(qo + (<usize>i << 1), q);
          sum = i32x4.add(sum, i32x4.add(a, b2));
        }
        if (cls == 2) {
          const tot = i32x4.extract_lane(sum, 0) + i32x4.extract_lane(sum, 1) + i32x4.extract_lane(sum, 2) + i32x4.extract_lane(sum, 3);
          store<i32>(asum + (<usize>((t * nb + b) * 8 + (s >> 5)) << 2), tot);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- dot products of an unpacked row

// @ts-ignore: decorator
@inline function hsum(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

// @ts-ignore: decorator
@inline function minDot(m: usize, a: usize): v128 {
  return i32x4.add(i32x4.mul(v128.load(m), v128.load(a)), i32x4.mul(v128.load(m + 16), v128.load(a + 16)));
}

// Batch invariance: every K-class dot (unpacked single/4-token, fused single-token, repacked) reduces a block's
// integer sums exactly (f64 holds them) and then combines the block in one canonical f32 expression, in block order.
// So a token's result does not depend on which kernel or how many tokens shared the call (the server's batched steps
// equal each request alone).
// @ts-ignore: decorator
@inline function isumExact(v: v128): f64 {
  return <f64>i32x4.extract_lane(v, 0) + <f64>i32x4.extract_lane(v, 1) + <f64>i32x4.extract_lane(v, 2) + <f64>i32x4.extract_lane(v, 3);
}

// @ts-ignore: decorator
@inline function blockTerm(i: f64, m: f64, dw: f32, dm: f32, da: f32): f32 {
  return <f32>i * (dw * da) - <f32>m * (dm * da);
}

function dotK(S: usize, cols: i32, aq: usize, ad: usize, asum: usize): f32 {
  const nb = cols >> 8;
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const w = S + (<usize>b << 9);
    const a = aq + (<usize>b << 9);
    let s0 = i32x4.splat(0);
    let s1 = i32x4.splat(0);
    for (let i: usize = 0; i < 512; i += 64) {
      s0 = i32x4.add(s0, i32x4.dot_i16x8_s(v128.load(w + i), v128.load(a + i)));
      s1 = i32x4.add(s1, i32x4.dot_i16x8_s(v128.load(w + i + 16), v128.load(a + i + 16)));
      s0 = i32x4.add(s0, i32x4.dot_i16x8_s(v128.load(w + i + 32), v128.load(a + i + 32)));
      s1 = i32x4.add(s1, i32x4.dot_i16x8_s(v128.load(w + i + 48), v128.load(a + i + 48)));
    }
    const ms = minDot(wmn + (<usize>b << 5), asum + (<usize>b << 5));
    const da = load<f32>(ad + (<usize>b << 2));
    acc += blockTerm(isumExact(s0) + isumExact(s1), isumExact(ms), load<f32>(wd + (<usize>b << 2)), load<f32>(wm + (<usize>b << 2)), da);
  }
  return acc;
}

// [Σa, Σb, Σc, Σd] of four i32x4 as f32: each sum exact in f64 and rounded once, as isumExact + <f32> does
// @ts-ignore: decorator
@inline function isum4(a: v128, b: v128, c: v128, d: v128): v128 {
  const A = f64x2.add(f64x2.convert_low_i32x4_s(a), f64x2.convert_low_i32x4_s(i8x16.shuffle(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const B = f64x2.add(f64x2.convert_low_i32x4_s(b), f64x2.convert_low_i32x4_s(i8x16.shuffle(b, b, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const C = f64x2.add(f64x2.convert_low_i32x4_s(c), f64x2.convert_low_i32x4_s(i8x16.shuffle(c, c, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const D = f64x2.add(f64x2.convert_low_i32x4_s(d), f64x2.convert_low_i32x4_s(i8x16.shuffle(d, d, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const AB = f64x2.add(i8x16.shuffle(A, B, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(A, B, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  const CD = f64x2.add(i8x16.shuffle(C, D, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(C, D, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  const ab = f32x4.demote_f64x2_zero(AB);
  const cd = f32x4.demote_f64x2_zero(CD);
  return i8x16.shuffle(ab, cd, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
}

// the four tokens' blockTerm at once (the same f32 operations, lane by lane)
// @ts-ignore: decorator
@inline function blockTerm4(I: v128, M: v128, dw: f32, dm: f32, DA: v128): v128 {
  return f32x4.sub(f32x4.mul(I, f32x4.mul(f32x4.splat(dw), DA)), f32x4.mul(M, f32x4.mul(f32x4.splat(dm), DA)));
}

// @ts-ignore: decorator
@inline function load4f(p: usize, stride: usize): v128 {
  let v = f32x4.splat(load<f32>(p));
  v = f32x4.replace_lane(v, 1, load<f32>(p + stride));
  v = f32x4.replace_lane(v, 2, load<f32>(p + 2 * stride));
  return f32x4.replace_lane(v, 3, load<f32>(p + 3 * stride));
}

/** four activation rows at once (a rows aStride bytes apart), results to out[0..3] */
function dotK4(S: usize, cols: i32, aq: usize, aqStride: usize, ad: usize, adStride: usize, asum: usize, asStride: usize, out: usize): void {
  const nb = cols >> 8;
  const wd = sWd(S, cols), wm = sWm(S, cols), wmn = sWmn(S, cols);
  let acc = f32x4.splat(0);
  for (let b = 0; b < nb; b++) {
    const w = S + (<usize>b << 9);
    const a0 = aq + (<usize>b << 9);
    const a1 = a0 + aqStride;
    const a2 = a1 + aqStride;
    const a3 = a2 + aqStride;
    let s0 = i32x4.splat(0);
    let s1 = i32x4.splat(0);
    let s2 = i32x4.splat(0);
    let s3 = i32x4.splat(0);
    for (let i: usize = 0; i < 512; i += 16) {
      const wv = v128.load(w + i);
      s0 = i32x4.add(s0, i32x4.dot_i16x8_s(wv, v128.load(a0 + i)));
      s1 = i32x4.add(s1, i32x4.dot_i16x8_s(wv, v128.load(a1 + i)));
      s2 = i32x4.add(s2, i32x4.dot_i16x8_s(wv, v128.load(a2 + i)));
      s3 = i32x4.add(s3, i32x4.dot_i16x8_s(wv, v128.load(a3 + i)));
    }
    const mv = wmn + (<usize>b << 5);
    const so = asum + (<usize>b << 5);
    const M = isum4(minDot(mv, so), minDot(mv, so + asStride), minDot(mv, so + 2 * asStride), minDot(mv, so + 3 * asStride));
    const DA = load4f(ad + (<usize>b << 2), adStride);
    acc = f32x4.add(acc, blockTerm4(isum4(s0, s1, s2, s3), M, load<f32>(wd + (<usize>b << 2)), load<f32>(wm + (<usize>b << 2)), DA));
  }
  v128.store(out, acc);
}

/** two unpacked rows (scratch S and S2) × four activation rows: out[0..3] for the row in S, out[4..7] for S2 */
function dotK24(S: usize, S2: usize, cols: i32, aq: usize, aqStride: usize, ad: usize, adStride: usize, asum: usize, asStride: usize, out: usize): void {
  const nb = cols >> 8;
  const wdA = sWd(S, cols), wmA = sWm(S, cols), wmnA = sWmn(S, cols);
  const wdB = sWd(S2, cols), wmB = sWm(S2, cols), wmnB = sWmn(S2, cols);
  let accA = f32x4.splat(0);
  let accB = f32x4.splat(0);
  for (let b = 0; b < nb; b++) {
    const wA = S + (<usize>b << 9);
    const wB = S2 + (<usize>b << 9);
    const a0 = aq + (<usize>b << 9);
    const a1 = a0 + aqStride;
    const a2 = a1 + aqStride;
    const a3 = a2 + aqStride;
    let p0 = i32x4.splat(0), p1 = i32x4.splat(0), p2 = i32x4.splat(0), p3 = i32x4.splat(0);
    let q0 = i32x4.splat(0), q1 = i32x4.splat(0), q2 = i32x4.splat(0), q3 = i32x4.splat(0);
    for (let i: usize = 0; i < 512; i += 16) {
      const u = v128.load(wA + i);
      const v = v128.load(wB + i);
      const x0 = v128.load(a0 + i);
      p0 = i32x4.add(p0, i32x4.dot_i16x8_s(u, x0));
      q0 = i32x4.add(q0, i32x4.dot_i16x8_s(v, x0));
      const x1 = v128.load(a1 + i);
      p1 = i32x4.add(p1, i32x4.dot_i16x8_s(u, x1));
      q1 = i32x4.add(q1, i32x4.dot_i16x8_s(v, x1));
      const x2 = v128.load(a2 + i);
      p2 = i32x4.add(p2, i32x4.dot_i16x8_s(u, x2));
      q2 = i32x4.add(q2, i32x4.dot_i16x8_s(v, x2));
      const x3 = v128.load(a3 + i);
      p3 = i32x4.add(p3, i32x4.dot_i16x8_s(u, x3));
      q3 = i32x4.add(q3, i32x4.dot_i16x8_s(v, x3));
    }
    const so = asum + (<usize>b << 5);
    const DA = load4f(ad + (<usize>b << 2), adStride);
    const bo = <usize>b << 2;
    const mA = wmnA + (<usize>b << 5);
    const MA = isum4(minDot(mA, so), minDot(mA, so + asStride), minDot(mA, so + 2 * asStride), minDot(mA, so + 3 * asStride));
    accA = f32x4.add(accA, blockTerm4(isum4(p0, p1, p2, p3), MA, load<f32>(wdA + bo), load<f32>(wmA + bo), DA));
    const mB = wmnB + (<usize>b << 5);
    const MB = isum4(minDot(mB, so), minDot(mB, so + asStride), minDot(mB, so + 2 * asStride), minDot(mB, so + 3 * asStride));
    accB = f32x4.add(accB, blockTerm4(isum4(q0, q1, q2, q3), MB, load<f32>(wdB + bo), load<f32>(wmB + bo), DA));
  }
  v128.store(out, accA);
  v128.store(out + 16, accB);
}

// The 32 class (Q8_0 Q4_0 Q5_0 IQ4_NL) likewise: a block's 32 products are summed exactly in i32 (|Σ| < 32·128·32767
// < 2³¹) and the block adds <f32>Σ · (dw·da) to an f32 sum, in block order, in every kernel (single token, fused,
// 2 rows × 4 tokens), so a token's result does not depend on the kernel or on the tokens sharing the call.
// @ts-ignore: decorator
@inline function isumI(v: v128): i32 {
  return i32x4.extract_lane(v, 0) + i32x4.extract_lane(v, 1) + i32x4.extract_lane(v, 2) + i32x4.extract_lane(v, 3);
}

// [Σa, Σb, Σc, Σd] of four i32x4 (exact)
// @ts-ignore: decorator
@inline function isum4i(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = i32x4.add(i8x16.shuffle(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  const cd = i32x4.add(i8x16.shuffle(c, d, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(c, d, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  return i32x4.add(i8x16.shuffle(ab, cd, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27), i8x16.shuffle(ab, cd, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
}

function dot32(S: usize, cols: i32, aq: usize, ad: usize): f32 {
  const nb = cols >> 5;
  const wd = sWd(S, cols);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const w = S + (<usize>b << 6);
    const a = aq + (<usize>b << 6);
    const s = i32x4.add(
      i32x4.add(i32x4.dot_i16x8_s(v128.load(w), v128.load(a)), i32x4.dot_i16x8_s(v128.load(w + 16), v128.load(a + 16))),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(w + 32), v128.load(a + 32)), i32x4.dot_i16x8_s(v128.load(w + 48), v128.load(a + 48))),
    );
    acc += <f32>isumI(s) * (load<f32>(wd + (<usize>b << 2)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

/** two unpacked rows (S, S2) of the 32 class × four activation rows: out[0..3] for the row in S, out[4..7] for S2 */
function dot32x24(S: usize, S2: usize, cols: i32, aq: usize, aqStride: usize, ad: usize, adStride: usize, out: usize): void {
  const nb = cols >> 5;
  const wdA = sWd(S, cols);
  const wdB = sWd(S2, cols);
  let accA = f32x4.splat(0);
  let accB = f32x4.splat(0);
  for (let b = 0; b < nb; b++) {
    const wA = S + (<usize>b << 6);
    const wB = S2 + (<usize>b << 6);
    const a0 = aq + (<usize>b << 6);
    const a1 = a0 + aqStride;
    const a2 = a1 + aqStride;
    const a3 = a2 + aqStride;
    let p0 = i32x4.splat(0), p1 = i32x4.splat(0), p2 = i32x4.splat(0), p3 = i32x4.splat(0);
    let q0 = i32x4.splat(0), q1 = i32x4.splat(0), q2 = i32x4.splat(0), q3 = i32x4.splat(0);
    for (let i: usize = 0; i < 64; i += 16) {
      const u = v128.load(wA + i);
      const v = v128.load(wB + i);
      const x0 = v128.load(a0 + i);
      p0 = i32x4.add(p0, i32x4.dot_i16x8_s(u, x0));
      q0 = i32x4.add(q0, i32x4.dot_i16x8_s(v, x0));
      const x1 = v128.load(a1 + i);
      p1 = i32x4.add(p1, i32x4.dot_i16x8_s(u, x1));
      q1 = i32x4.add(q1, i32x4.dot_i16x8_s(v, x1));
      const x2 = v128.load(a2 + i);
      p2 = i32x4.add(p2, i32x4.dot_i16x8_s(u, x2));
      q2 = i32x4.add(q2, i32x4.dot_i16x8_s(v, x2));
      const x3 = v128.load(a3 + i);
      p3 = i32x4.add(p3, i32x4.dot_i16x8_s(u, x3));
      q3 = i32x4.add(q3, i32x4.dot_i16x8_s(v, x3));
    }
    const DA = load4f(ad + (<usize>b << 2), adStride);
    const bo = <usize>b << 2;
    accA = f32x4.add(accA, f32x4.mul(f32x4.convert_i32x4_s(isum4i(p0, p1, p2, p3)), f32x4.mul(f32x4.splat(load<f32>(wdA + bo)), DA)));
    accB = f32x4.add(accB, f32x4.mul(f32x4.convert_i32x4_s(isum4i(q0, q1, q2, q3)), f32x4.mul(f32x4.splat(load<f32>(wdB + bo)), DA)));
  }
  v128.store(out, accA);
  v128.store(out + 16, accB);
}

function dotF(wf: usize, x: usize, cols: i32): f32 {
  let acc0 = f32x4.splat(0);
  let acc1 = f32x4.splat(0);
  let i = 0;
  for (; i + 8 <= cols; i += 8) {
    const o = <usize>i << 2;
    acc0 = f32x4.add(acc0, f32x4.mul(v128.load(wf + o), v128.load(x + o)));
    acc1 = f32x4.add(acc1, f32x4.mul(v128.load(wf + o + 16), v128.load(x + o + 16)));
  }
  let s = hsum(f32x4.add(acc0, acc1));
  for (; i < cols; i++) s += load<f32>(wf + (<usize>i << 2)) * load<f32>(x + (<usize>i << 2));
  return s;
}

// ---------------------------------------------------------------- fused single-token dots (decode): no unpack pass

// Weights are unpacked straight into i16 lanes (v128.load8x8_u: 8 bytes → 8 u16) so that nibble and bit fields are
// cut with 16-bit shifts and masks (x86 has no 8-bit vector shifts), then dotted with the activations. (Q5_0 is the
// exception: its fifth bits cost less in i8 lanes, one byte shuffle and compare per 16 values, than in i16 lanes.)

// Q4_K's eight 6-bit scales and eight 6-bit mins, one byte each (scales in bytes 0..7, mins in 8..15), cut from the
// 12 scale bytes at s with ggml's 32-bit masks, in vector lanes (u0, u1, u2 = the three 32-bit words):
//   scales 0..3 = u0 & 0x3f3f3f3f            scales 4..7 = (u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4)
//   mins 0..3   = u1 & 0x3f3f3f3f            mins 4..7   = ((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4)
// (reads 16 bytes: the last 4 are the block's first quants, unused)
// @ts-ignore: decorator
@inline function scalesMinsQ4K(s: usize): v128 {
  const L = v128.load(s);
  const lo = v128.and(L, i32x4.splat(0x3f3f3f3f)); // [sc 0..3, mn 0..3, ·, ·]
  // [u2, u2 >> 4, ·, ·] & 0x0f0f0f0f
  const x = v128.and(i8x16.shuffle(L, i32x4.shr_u(L, 4), 8, 9, 10, 11, 24, 25, 26, 27, 8, 9, 10, 11, 24, 25, 26, 27), i32x4.splat(0x0f0f0f0f));
  // [(u0 >> 6) & 3.., (u1 >> 6) & 3.., ·, ·] << 4
  const y = i32x4.shl(v128.and(i32x4.shr_u(L, 6), i32x4.splat(0x03030303)), 4);
  const hi = v128.or(x, y); // [sc 4..7, mn 4..7, ·, ·]
  return i8x16.shuffle(lo, hi, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
}

// the f16 pair at p (a Q4_K block's d and dmin) as f32 lanes [d, dmin, d, dmin], f16 lane by lane
// @ts-ignore: decorator
@inline function f16pair(p: usize): v128 {
  const h = i32x4.extend_low_i16x8_u(i32x4.splat(<i32>load<u32>(p)));
  const mag = f32x4.mul(i32x4.shl(v128.and(h, i32x4.splat(0x7fff)), 13), f32x4.splat(5.192296858534828e33));
  return v128.or(mag, i32x4.shl(v128.and(h, i32x4.splat(0x8000)), 16));
}

// The low (q4kLow) or high (q4kHigh) nibbles of 32 bytes, loaded as four i16x8 (Q0..Q3), against 32 i16 activations
// at a: four i32 lanes.
// @ts-ignore: decorator
@inline function q4kLow(Q0: v128, Q1: v128, Q2: v128, Q3: v128, a: usize, m4: v128): v128 {
  return i32x4.add(
    i32x4.add(i32x4.dot_i16x8_s(v128.and(Q0, m4), v128.load(a)), i32x4.dot_i16x8_s(v128.and(Q1, m4), v128.load(a + 16))),
    i32x4.add(i32x4.dot_i16x8_s(v128.and(Q2, m4), v128.load(a + 32)), i32x4.dot_i16x8_s(v128.and(Q3, m4), v128.load(a + 48))),
  );
}
// @ts-ignore: decorator
@inline function q4kHigh(Q0: v128, Q1: v128, Q2: v128, Q3: v128, a: usize): v128 {
  return i32x4.add(
    i32x4.add(i32x4.dot_i16x8_s(i16x8.shr_u(Q0, 4), v128.load(a)), i32x4.dot_i16x8_s(i16x8.shr_u(Q1, 4), v128.load(a + 16))),
    i32x4.add(i32x4.dot_i16x8_s(i16x8.shr_u(Q2, 4), v128.load(a + 32)), i32x4.dot_i16x8_s(i16x8.shr_u(Q3, 4), v128.load(a + 48))),
  );
}

// Each sub-block's products stay in four i32 lanes (t0..t7); the lanes of four sub-blocks are summed across at once
// (isum4i) and multiplied by their four scales in one i32 product, the mins likewise: no per-sub-block scalar work.
// The block's integer sums are the same as the unpacked kernels' (exact), hence the same result bits.
function dotQ4K1(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  const m4 = i16x8.splat(15);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const qs = p + 16;
    const a = aq + (<usize>b << 9);
    const bs = asum + (<usize>b << 5);
    const SM = scalesMinsQ4K(p + 4);
    const S16 = i16x8.extend_low_i8x16_u(SM);
    const M16 = i16x8.extend_high_i8x16_u(SM);
    // |min · Σ32 a| ≤ 63·32·8191 per lane
    const ms = i32x4.add(
      i32x4.mul(i32x4.extend_low_i16x8_u(M16), v128.load(bs)),
      i32x4.mul(i32x4.extend_high_i16x8_u(M16), v128.load(bs + 16)),
    );
    // a loop, not unrolled by hand: unrolled, the four passes' 16 weight vectors and 8 sums outgrow x64's 16 vector
    // registers and the kernel runs slower
    let t0 = i32x4.splat(0), t1 = t0, t2 = t0, t3 = t0, t4 = t0, t5 = t0, t6 = t0, t7 = t0;
    for (let j = 0; j < 4; j++) {
      const q = qs + (<usize>j << 5);
      const ao = a + (<usize>j << 7);
      const Q0 = v128.load8x8_u(q);
      const Q1 = v128.load8x8_u(q + 8);
      const Q2 = v128.load8x8_u(q + 16);
      const Q3 = v128.load8x8_u(q + 24);
      const s0 = q4kLow(Q0, Q1, Q2, Q3, ao, m4);
      const s1 = q4kHigh(Q0, Q1, Q2, Q3, ao + 64);
      if (j == 0) {
        t0 = s0;
        t1 = s1;
      } else if (j == 1) {
        t2 = s0;
        t3 = s1;
      } else if (j == 2) {
        t4 = s0;
        t5 = s1;
      } else {
        t6 = s0;
        t7 = s1;
      }
    }
    // per lane: two sub-blocks, each Σ32 ≤ 32·15·8191 times its scale ≤ 63: 2·32·15·8191·63 < 2³¹
    const isum = i32x4.add(
      i32x4.mul(isum4i(t0, t1, t2, t3), i32x4.extend_low_i16x8_u(S16)),
      i32x4.mul(isum4i(t4, t5, t6, t7), i32x4.extend_high_i16x8_u(S16)),
    );
    // the block's sums across lanes in i32 (exact: |Σ| ≤ 256·15·63·8191 < 2³¹, |Σ mins| smaller), then blockTerm's
    // f32 operations on lanes: [Σi, Σi, Σm, Σm] · ([dw, dm, dw, dm] · da) → Σi·(dw·da) − Σm·(dm·da) from lanes 0 and 3
    const h = i32x4.add(i8x16.shuffle(isum, ms, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(isum, ms, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
    const H = f32x4.convert_i32x4_s(i32x4.add(h, i8x16.shuffle(h, h, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11)));
    const T = f32x4.mul(H, f32x4.mul(f16pair(p), f32x4.splat(load<f32>(ad + (<usize>b << 2)))));
    acc += f32x4.extract_lane(T, 0) - f32x4.extract_lane(T, 3);
  }
  return acc;
}

// Q6_K: per 16 values an i8 scale, folded into the i16 weights (|q·sc| ≤ 32·128 = 4096; a block's i32 lane takes 64
// products ≤ 4096·8191: 64·4096·8191 < 2³¹).
function dotQ6K1(row: usize, nb: i32, aq: usize, ad: usize): f32 {
  const m4 = i16x8.splat(15);
  const m30 = i16x8.splat(0x30);
  const c32 = i16x8.splat(32);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 210;
    const a = aq + (<usize>b << 9);
    let tot = i32x4.splat(0);
    for (let nh = 0; nh < 2; nh++) {
      const ql = p + (<usize>nh << 6);
      const qh = p + 128 + (<usize>nh << 5);
      const sc = p + 192 + (<usize>nh << 3);
      const ab = a + (<usize>nh << 8);
      let isum = i32x4.splat(0);
      for (let l = 0; l < 2; l++) {
        const S1 = i16x8.splat(<i16>load<i8>(sc + l));
        const S2 = i16x8.splat(<i16>load<i8>(sc + l + 2));
        const S3 = i16x8.splat(<i16>load<i8>(sc + l + 4));
        const S4 = i16x8.splat(<i16>load<i8>(sc + l + 6));
        for (let h = 0; h < 2; h++) {
          const j = (l << 4) + (h << 3);
          const A = v128.load8x8_u(ql + j);
          const B = v128.load8x8_u(ql + 32 + j);
          const H = v128.load8x8_u(qh + j);
          const q1 = i16x8.sub(v128.or(v128.and(A, m4), v128.and(i16x8.shl(H, 4), m30)), c32);
          const q2 = i16x8.sub(v128.or(v128.and(B, m4), v128.and(i16x8.shl(H, 2), m30)), c32);
          const q3 = i16x8.sub(v128.or(i16x8.shr_u(A, 4), v128.and(H, m30)), c32);
          const q4 = i16x8.sub(v128.or(i16x8.shr_u(B, 4), v128.and(i16x8.shr_u(H, 2), m30)), c32);
          const aj = ab + (<usize>j << 1);
          isum = i32x4.add(isum, i32x4.add(
            i32x4.add(i32x4.dot_i16x8_s(i16x8.mul(q1, S1), v128.load(aj)), i32x4.dot_i16x8_s(i16x8.mul(q2, S2), v128.load(aj + 64))),
            i32x4.add(i32x4.dot_i16x8_s(i16x8.mul(q3, S3), v128.load(aj + 128)), i32x4.dot_i16x8_s(i16x8.mul(q4, S4), v128.load(aj + 192))),
          ));
        }
      }
      tot = i32x4.add(tot, isum);
    }
    acc += blockTerm(isumExact(tot), 0, f16(load<u16>(p + 208)), 0, load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// Q6_K repacked (type Q6_KR, 276 bytes per 256 values): f32 d, 16 i8 scales, 256 i8 values q − 32 in order. The same
// numbers as Q6_K with no bit fields to cut: one sign-extending load per 8 values. Built once per matrix at first use.

/** rows of Q6_K at src → Q6_KR at dst */
export function repackQ6K(src: usize, rows: i32, cols: i32, dst: usize): void {
  const nb = cols >> 8;
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const p = src + (<usize>(r * nb + b)) * 210;
      const o = dst + (<usize>(r * nb + b)) * 276;
      store<f32>(o, f16(load<u16>(p + 208)));
      for (let g = 0; g < 16; g++) store<i8>(o + 4 + g, load<i8>(p + 192 + g));
      const q = o + 20;
      for (let nh = 0; nh < 2; nh++) {
        const ql = p + (<usize>nh << 6);
        const qh = p + 128 + (<usize>nh << 5);
        const qo = q + (<usize>nh << 7);
        for (let j = 0; j < 32; j++) {
          const a = <i32>load<u8>(ql + j);
          const bb = <i32>load<u8>(ql + 32 + j);
          const h = <i32>load<u8>(qh + j);
          store<i8>(qo + j, <i8>(((a & 15) | ((h & 3) << 4)) - 32));
          store<i8>(qo + 32 + j, <i8>(((bb & 15) | (((h >> 2) & 3) << 4)) - 32));
          store<i8>(qo + 64 + j, <i8>(((a >> 4) | (((h >> 4) & 3) << 4)) - 32));
          store<i8>(qo + 96 + j, <i8>(((bb >> 4) | (((h >> 6) & 3) << 4)) - 32));
        }
      }
    }
  }
}

// per lane of a block: 16 groups × 4 products ≤ 32·8191, each group's sum × |sc| ≤ 128: 16·4·32·128·8191 < 2³¹
function dotQ6KR1(row: usize, nb: i32, aq: usize, ad: usize): f32 {
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 276;
    const q = p + 20;
    const a = aq + (<usize>b << 9);
    let isum = i32x4.splat(0);
    for (let g = 0; g < 16; g += 2) {
      const o = <usize>g << 4;
      const ao = <usize>g << 5;
      const s0 = i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(q + o), v128.load(a + ao)), i32x4.dot_i16x8_s(v128.load8x8_s(q + o + 8), v128.load(a + ao + 16)));
      const s1 = i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(q + o + 16), v128.load(a + ao + 32)), i32x4.dot_i16x8_s(v128.load8x8_s(q + o + 24), v128.load(a + ao + 48)));
      isum = i32x4.add(isum, i32x4.add(i32x4.mul(s0, i32x4.splat(<i32>load<i8>(p + 4 + g))), i32x4.mul(s1, i32x4.splat(<i32>load<i8>(p + 5 + g)))));
    }
    acc += blockTerm(isumExact(isum), 0, load<f32>(p), 0, load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// The 32 classes' fused dots take their blocks four at a time: the four i32 sums across lanes at once (isum4i), the
// four f16 scales converted at once, the four terms <f32>Σ·(dw·da) computed as f32x4 (the same operations as the
// scalar term, lane by lane) and then added to the sum one after the other in block order: the same bits as dot32.

// four f16 values at p, p + stride, … as f32x4 (f16 lane by lane)
// @ts-ignore: decorator
@inline function f16x4(p: usize, stride: usize): v128 {
  let h = i32x4.splat(<i32>load<u16>(p));
  h = i32x4.replace_lane(h, 1, <i32>load<u16>(p + stride));
  h = i32x4.replace_lane(h, 2, <i32>load<u16>(p + 2 * stride));
  h = i32x4.replace_lane(h, 3, <i32>load<u16>(p + 3 * stride));
  const mag = f32x4.mul(i32x4.shl(v128.and(h, i32x4.splat(0x7fff)), 13), f32x4.splat(5.192296858534828e33));
  return v128.or(mag, i32x4.shl(v128.and(h, i32x4.splat(0x8000)), 16));
}

// acc + t0 + t1 + t2 + t3 (f32, in that order)
// @ts-ignore: decorator
@inline function addLanes(acc: f32, t: v128): f32 {
  acc += f32x4.extract_lane(t, 0);
  acc += f32x4.extract_lane(t, 1);
  acc += f32x4.extract_lane(t, 2);
  return acc + f32x4.extract_lane(t, 3);
}

// @ts-ignore: decorator
@inline function q8Block(p: usize, a: usize): v128 {
  return i32x4.add(
    i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(p + 2), v128.load(a)), i32x4.dot_i16x8_s(v128.load8x8_s(p + 10), v128.load(a + 16))),
    i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(p + 18), v128.load(a + 32)), i32x4.dot_i16x8_s(v128.load8x8_s(p + 26), v128.load(a + 48))),
  );
}

function dotQ8_01(row: usize, nb: i32, aq: usize, ad: usize): f32 {
  let acc: f32 = 0;
  let b = 0;
  for (; b + 4 <= nb; b += 4) {
    const p = row + <usize>b * 34;
    const a = aq + (<usize>b << 6);
    const I = isum4i(q8Block(p, a), q8Block(p + 34, a + 64), q8Block(p + 68, a + 128), q8Block(p + 102, a + 192));
    acc = addLanes(acc, f32x4.mul(f32x4.convert_i32x4_s(I), f32x4.mul(f16x4(p, 34), v128.load(ad + (<usize>b << 2)))));
  }
  for (; b < nb; b++) {
    const p = row + <usize>b * 34;
    acc += <f32>isumI(q8Block(p, aq + (<usize>b << 6))) * (f16(load<u16>(p)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// Q5_0: the fifth bits of all 32 values at once in i8 lanes, as unpackQ5_0 (swizzle the qh bytes so that each lane
// holds the byte of its bit, test the bit), then widened to i16 for the dot.
// @ts-ignore: decorator
@inline function q5Block(p: usize, a: usize, m4: v128, c16: v128, idxLo: v128, idxHi: v128, bits: v128): v128 {
  const qh = i32x4.splat(load<u32>(p + 2));
  // 16 where the bit is clear: q − 16 = (nibble | 16·bit) − 16 = nibble − 16·(1 − bit)
  const nLo = v128.andnot(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxLo), bits), bits));
  const nHi = v128.andnot(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxHi), bits), bits));
  const q = v128.load(p + 6);
  const lo = i8x16.sub(v128.and(q, m4), nLo);
  const hi = i8x16.sub(v128.and(i16x8.shr_u(q, 4), m4), nHi);
  return i32x4.add(
    i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(lo), v128.load(a)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(lo), v128.load(a + 16))),
    i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(hi), v128.load(a + 32)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(hi), v128.load(a + 48))),
  );
}

function dotQ5_01(row: usize, nb: i32, aq: usize, ad: usize): f32 {
  const m4 = i8x16.splat(15);
  const c16 = i8x16.splat(16);
  const idxLo = i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const idxHi = i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const bits = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  let acc: f32 = 0;
  let b = 0;
  for (; b + 4 <= nb; b += 4) {
    const p = row + <usize>b * 22;
    const a = aq + (<usize>b << 6);
    const s0 = q5Block(p, a, m4, c16, idxLo, idxHi, bits);
    const s1 = q5Block(p + 22, a + 64, m4, c16, idxLo, idxHi, bits);
    const s2 = q5Block(p + 44, a + 128, m4, c16, idxLo, idxHi, bits);
    const s3 = q5Block(p + 66, a + 192, m4, c16, idxLo, idxHi, bits);
    acc = addLanes(acc, f32x4.mul(f32x4.convert_i32x4_s(isum4i(s0, s1, s2, s3)), f32x4.mul(f16x4(p, 22), v128.load(ad + (<usize>b << 2)))));
  }
  for (; b < nb; b++) {
    const p = row + <usize>b * 22;
    const s = q5Block(p, aq + (<usize>b << 6), m4, c16, idxLo, idxHi, bits);
    acc += <f32>isumI(s) * (f16(load<u16>(p)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// ---------------------------------------------------------------- 8-bit activations (opt-in "q8" mode, relaxed SIMD)

// Compiled only into the relaxed-SIMD module (kernels-q8.wasm.ts: `ASC_FEATURE_RELAXED_SIMD` is a compile-time
// constant, so the default module contains none of this). For products of one or two tokens (Q4_K: of any number of
// tokens) the backend may hand in the kernel types Q4_K, Q5_0 and Q6_KR plus Q8ACT: their activations are then one
// int8 per value, ggml-style,
//   class 4 (Q4_K, Q6_KR): per 256 values one f32 scale amax/127 and 16 i16 sums of 16 values (32 bytes per block),
//   class 3 (Q5_0):        per 32 values one f32 scale amax/127 and one i32 sum,
// laid out as the exact classes (aq rows of cols·2 bytes, of which the first cols hold the i8 values; nb·32 bytes of
// sums per token), and the dots use i16x8.relaxed_dot_i8x16_i7x16_s (x86: one pmaddubsw, 16 multiply-adds) with the
// activations as the signed i8 operand and the weights as the i7 operand, which must lie in 0..127 for the result to
// be defined: Q4_K nibbles (0..15), Q5_0 values before their −16 offset (0..31) and Q6_KR values before their −32
// offset (0..63); the offsets come back through the activation sums. Q8_0 weights use all of i8 (no operand is i7),
// so Q8_0 keeps the exact path. Every sum is exact in integers; only the activations' rounding differs from exact mode.

// The i16 lanes of one relaxed dot hold two products: |a·w| ≤ 2·127·63 = 16002 for Q6_KR, 2·127·31 = 7874 for Q5_0,
// 2·127·15 = 3810 for Q4_K. Adding two dots stays below 2¹⁵ for Q4_K and Q5_0 (15748); Q6_KR widens every dot.
// @ts-ignore: decorator
@inline function rdot(a: v128, w: v128): v128 {
  return i16x8.relaxed_dot_i8x16_i7x16_s(a, w);
}

/** 8-bit activations for class 3 or 4 (layout above); rounding as `quantize` (f32 scale, nearest even, saturating) */
function quantize8(cls: i32, x: usize, n: i32, cols: i32, xStride: i32, aq: usize, ad: usize, asum: usize): void {
  const bv = cls == 4 ? 256 : 32;
  const nb = cols / bv;
  for (let t = 0; t < n; t++) {
    const xr = x + (<usize>(t * xStride) << 2);
    const qr = aq + (<usize>(t * cols) << 1);
    const sr = asum + (<usize>(t * nb) << 5);
    for (let b = 0; b < nb; b++) {
      const xb = xr + (<usize>(b * bv) << 2);
      let mx = f32x4.splat(0);
      for (let i = 0; i < bv; i += 4) mx = f32x4.max(mx, f32x4.abs(v128.load(xb + (<usize>i << 2))));
      const amax = max(max(f32x4.extract_lane(mx, 0), f32x4.extract_lane(mx, 1)), max(f32x4.extract_lane(mx, 2), f32x4.extract_lane(mx, 3)));
      const d: f32 = amax / <f32>127;
      const id = f32x4.splat(d != 0 ? 1 / d : 0);
      store<f32>(ad + (<usize>(t * nb + b) << 2), d);
      let s32 = 0;
      for (let i = 0; i < bv; i += 16) {
        const p = xb + (<usize>i << 2);
        const q0 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p), id)));
        const q1 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + 16), id)));
        const q2 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + 32), id)));
        const q3 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + 48), id)));
        const q = i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(q0, q1), i16x8.narrow_i32x4_s(q2, q3));
        v128.store(qr + <usize>(b * bv + i), q);
        // the sum of the stored (saturated) values
        const w = i32x4.extadd_pairwise_i16x8_s(i16x8.extadd_pairwise_i8x16_s(q));
        const s16 = i32x4.extract_lane(w, 0) + i32x4.extract_lane(w, 1) + i32x4.extract_lane(w, 2) + i32x4.extract_lane(w, 3);
        if (cls == 4) store<i16>(sr + (<usize>(b * 16 + (i >> 4)) << 1), <i16>s16);
        else s32 += s16;
      }
      if (cls == 3) store<i32>(sr + (<usize>b << 2), s32);
    }
  }
}

// Q4_K: per 32 bytes of quants (sub-blocks 2j and 2j+1: low and high nibbles), four relaxed dots; each sub-block's
// two dots add in i16 (≤ 7620) and are widened and scaled at once by an i16 dot with the sub-block's scale in every
// lane (|Σ| per i32 lane ≤ 8 · 2·7620·63 < 2³¹), into one i32x4 per block: no per-sub-block reductions. The four
// passes are written out (constant shuffles pick the scales; few registers live). Mins: m_j·(Σ16 + Σ16) for the
// eight sub-blocks as two i16 dot products. The block's integer sums are exact; its f32 tail is dotQ4K1's.
// @ts-ignore: decorator
@inline function q4kLo8(Q0: v128, Q1: v128, a: usize, m4: v128): v128 {
  return i16x8.add(rdot(v128.load(a), v128.and(Q0, m4)), rdot(v128.load(a + 16), v128.and(Q1, m4)));
}
// @ts-ignore: decorator
@inline function q4kHi8(Q0: v128, Q1: v128, a: usize, m4: v128): v128 {
  return i16x8.add(rdot(v128.load(a + 32), v128.and(i16x8.shr_u(Q0, 4), m4)), rdot(v128.load(a + 48), v128.and(i16x8.shr_u(Q1, 4), m4)));
}

function dotQ4K8(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  const m4 = i8x16.splat(15);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const q = p + 16;
    const a = aq + (<usize>b << 8);
    const bs = asum + (<usize>b << 5);
    const SM = scalesMinsQ4K(p + 4);
    const S = i16x8.extend_low_i8x16_u(SM);
    // [m0, m0, m1, m1, m2, m2, m3, m3] and [m4, …, m7, m7] as i16 against the 16 sums of 16
    const Mlo = i8x16.shuffle(SM, i8x16.splat(0), 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16);
    const Mhi = i8x16.shuffle(SM, i8x16.splat(0), 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16);
    const ms = i32x4.add(i32x4.dot_i16x8_s(v128.load(bs), Mlo), i32x4.dot_i16x8_s(v128.load(bs + 16), Mhi));
    let Q0 = v128.load(q);
    let Q1 = v128.load(q + 16);
    let s = i32x4.dot_i16x8_s(q4kLo8(Q0, Q1, a, m4), i8x16.shuffle(S, S, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1));
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kHi8(Q0, Q1, a, m4), i8x16.shuffle(S, S, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3)));
    Q0 = v128.load(q + 32);
    Q1 = v128.load(q + 48);
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kLo8(Q0, Q1, a + 64, m4), i8x16.shuffle(S, S, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5)));
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kHi8(Q0, Q1, a + 64, m4), i8x16.shuffle(S, S, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7)));
    Q0 = v128.load(q + 64);
    Q1 = v128.load(q + 80);
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kLo8(Q0, Q1, a + 128, m4), i8x16.shuffle(S, S, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9)));
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kHi8(Q0, Q1, a + 128, m4), i8x16.shuffle(S, S, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11)));
    Q0 = v128.load(q + 96);
    Q1 = v128.load(q + 112);
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kLo8(Q0, Q1, a + 192, m4), i8x16.shuffle(S, S, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13)));
    s = i32x4.add(s, i32x4.dot_i16x8_s(q4kHi8(Q0, Q1, a + 192, m4), i8x16.shuffle(S, S, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15)));
    // as dotQ4K1: [Σi, Σi, Σm, Σm] · ([d, dmin, d, dmin] · da), lanes 0 and 3
    const h = i32x4.add(i8x16.shuffle(s, ms, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(s, ms, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
    const H = f32x4.convert_i32x4_s(i32x4.add(h, i8x16.shuffle(h, h, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11)));
    const T = f32x4.mul(H, f32x4.mul(f16pair(p), f32x4.splat(load<f32>(ad + (<usize>b << 2)))));
    acc += f32x4.extract_lane(T, 0) - f32x4.extract_lane(T, 3);
  }
  return acc;
}

// Q4_K, two rows × four tokens (products of more than two tokens): per sub-block the two rows' 32 nibbles are cut
// once and feed four tokens, each token's 32 activations feed both rows (eight i32x4 sums, one per row and token).
// Per sub-block the same integers as dotQ4K8 (two relaxed dots added in i16, widened by an i16 dot with the scale in
// every lane), the mins likewise; the block's sums across lanes are exact in i32 and the tail is dotQ4K8's f32
// operations on four tokens' lanes — so every (row, token) result equals dotQ4K8's bit for bit. The sub-block scales
// go through `sc` (32 bytes of scratch) as i16 so that a variable sub-block index can splat them.
function dotQ4K8x24(row: usize, row2: usize, nb: i32, aq: usize, aqStride: usize, ad: usize, adStride: usize, asum: usize, asStride: usize, sc: usize, out: usize): void {
  const m4 = i8x16.splat(15);
  let accA = f32x4.splat(0);
  let accB = accA;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const p2 = row2 + <usize>b * 144;
    const SMa = scalesMinsQ4K(p + 4);
    const SMb = scalesMinsQ4K(p2 + 4);
    v128.store(sc, i16x8.extend_low_i8x16_u(SMa));
    v128.store(sc + 16, i16x8.extend_low_i8x16_u(SMb));
    const a = aq + (<usize>b << 8);
    let x0 = i32x4.splat(0), x1 = x0, x2 = x0, x3 = x0, y0 = x0, y1 = x0, y2 = x0, y3 = x0;
    // four passes of 32 quant bytes: sub-block 2j (low nibbles), then 2j + 1 (high nibbles)
    for (let j = 0; j < 4; j++) {
      const off = (<usize>j << 5) + 16;
      const QA0 = v128.load(p + off);
      const QA1 = v128.load(p + off + 16);
      const QB0 = v128.load(p2 + off);
      const QB1 = v128.load(p2 + off + 16);
      let wa0: v128, wa1: v128, wb0: v128, wb1: v128, sa: v128, sb: v128, at: usize, u: v128, v: v128;
      wa0 = v128.and(QA0, m4);
      wa1 = v128.and(QA1, m4);
      wb0 = v128.and(QB0, m4);
      wb1 = v128.and(QB1, m4);
      sa = v128.load16_splat(sc + (<usize>(2 * j + 0) << 1));
      sb = v128.load16_splat(sc + 16 + (<usize>(2 * j + 0) << 1));
      at = a + (<usize>(2 * j + 0) << 5);
      u = v128.load(at);
      v = v128.load(at + 16);
      x0 = i32x4.add(x0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y0 = i32x4.add(y0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x1 = i32x4.add(x1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y1 = i32x4.add(y1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x2 = i32x4.add(x2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y2 = i32x4.add(y2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x3 = i32x4.add(x3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y3 = i32x4.add(y3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      wa0 = v128.and(i16x8.shr_u(QA0, 4), m4);
      wa1 = v128.and(i16x8.shr_u(QA1, 4), m4);
      wb0 = v128.and(i16x8.shr_u(QB0, 4), m4);
      wb1 = v128.and(i16x8.shr_u(QB1, 4), m4);
      sa = v128.load16_splat(sc + (<usize>(2 * j + 1) << 1));
      sb = v128.load16_splat(sc + 16 + (<usize>(2 * j + 1) << 1));
      at = a + (<usize>(2 * j + 1) << 5);
      u = v128.load(at);
      v = v128.load(at + 16);
      x0 = i32x4.add(x0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y0 = i32x4.add(y0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x1 = i32x4.add(x1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y1 = i32x4.add(y1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x2 = i32x4.add(x2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y2 = i32x4.add(y2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x3 = i32x4.add(x3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y3 = i32x4.add(y3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
    }
    // mins: m_j · (Σ16 + Σ16) per sub-block as in dotQ4K8, per row and token
    const MloA = i8x16.shuffle(SMa, i8x16.splat(0), 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16);
    const MhiA = i8x16.shuffle(SMa, i8x16.splat(0), 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16);
    const MloB = i8x16.shuffle(SMb, i8x16.splat(0), 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16);
    const MhiB = i8x16.shuffle(SMb, i8x16.splat(0), 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16);
    const bs0 = asum + (<usize>b << 5);
    const bs1 = bs0 + asStride;
    const bs2 = bs1 + asStride;
    const bs3 = bs2 + asStride;
    const MA = isum4i(
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs0), MloA), i32x4.dot_i16x8_s(v128.load(bs0 + 16), MhiA)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs1), MloA), i32x4.dot_i16x8_s(v128.load(bs1 + 16), MhiA)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs2), MloA), i32x4.dot_i16x8_s(v128.load(bs2 + 16), MhiA)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs3), MloA), i32x4.dot_i16x8_s(v128.load(bs3 + 16), MhiA)),
    );
    const MB = isum4i(
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs0), MloB), i32x4.dot_i16x8_s(v128.load(bs0 + 16), MhiB)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs1), MloB), i32x4.dot_i16x8_s(v128.load(bs1 + 16), MhiB)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs2), MloB), i32x4.dot_i16x8_s(v128.load(bs2 + 16), MhiB)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs3), MloB), i32x4.dot_i16x8_s(v128.load(bs3 + 16), MhiB)),
    );
    // dotQ4K8's tail on lanes: Σi·(d·da) − Σm·(dmin·da), d and dmin from f16pair as there
    const DA = load4f(ad + (<usize>b << 2), adStride);
    const FA = f16pair(p);
    const FB = f16pair(p2);
    accA = f32x4.add(accA, blockTerm8x4(isum4i(x0, x1, x2, x3), MA, FA, DA));
    accB = f32x4.add(accB, blockTerm8x4(isum4i(y0, y1, y2, y3), MB, FB, DA));
  }
  v128.store(out, accA);
  v128.store(out + 16, accB);
}

// Q4_K rows cut once per chunk of tokens (unpackQ4K8; the prefill path): per block 320 bytes — the 256 nibbles as u8
// in sub-block order (sub-block 2j: the low nibbles of quant bytes 32j..32j+31, 2j+1: their high nibbles), the eight
// scales as i16, Mlo and Mhi (the mins as i16 against the sums of 16, as dotQ4K8 builds them) and f16pair's [d, dmin,
// d, dmin]. dotQ4K8u24 is dotQ4K8x24 reading them: no nibbles to cut, no scales to decode per four tokens; the same
// integers and f32 operations, so the same bits as dotQ4K8.
function unpackQ4K8(row: usize, nb: i32, S: usize): void {
  const m4 = i8x16.splat(15);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const o = S + <usize>b * 320;
    for (let j = 0; j < 4; j++) {
      const q = p + 16 + (<usize>j << 5);
      const Q0 = v128.load(q);
      const Q1 = v128.load(q + 16);
      const d = o + (<usize>j << 6);
      v128.store(d, v128.and(Q0, m4));
      v128.store(d + 16, v128.and(Q1, m4));
      v128.store(d + 32, v128.and(i16x8.shr_u(Q0, 4), m4));
      v128.store(d + 48, v128.and(i16x8.shr_u(Q1, 4), m4));
    }
    const SM = scalesMinsQ4K(p + 4);
    v128.store(o + 256, i16x8.extend_low_i8x16_u(SM));
    v128.store(o + 272, i8x16.shuffle(SM, i8x16.splat(0), 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16));
    v128.store(o + 288, i8x16.shuffle(SM, i8x16.splat(0), 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16));
    v128.store(o + 304, f16pair(p));
  }
}

function dotQ4K8u24(SA: usize, SB: usize, nb: i32, aq: usize, aqStride: usize, ad: usize, adStride: usize, asum: usize, asStride: usize, out: usize): void {
  let accA = f32x4.splat(0);
  let accB = accA;
  for (let b = 0; b < nb; b++) {
    const oA = SA + <usize>b * 320;
    const oB = SB + <usize>b * 320;
    const a = aq + (<usize>b << 8);
    let x0 = i32x4.splat(0), x1 = x0, x2 = x0, x3 = x0, y0 = x0, y1 = x0, y2 = x0, y3 = x0;
    // four passes of 32 quant bytes: sub-block 2j (low nibbles), then 2j + 1 (high nibbles)
    for (let j = 0; j < 4; j++) {
      const off = <usize>j << 6;
      let wa0: v128, wa1: v128, wb0: v128, wb1: v128, sa: v128, sb: v128, at: usize, u: v128, v: v128;
      wa0 = v128.load(oA + off);
      wa1 = v128.load(oA + off + 16);
      wb0 = v128.load(oB + off);
      wb1 = v128.load(oB + off + 16);
      sa = v128.load16_splat(oA + 256 + (<usize>(2 * j + 0) << 1));
      sb = v128.load16_splat(oB + 256 + (<usize>(2 * j + 0) << 1));
      at = a + (<usize>(2 * j + 0) << 5);
      u = v128.load(at);
      v = v128.load(at + 16);
      x0 = i32x4.add(x0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y0 = i32x4.add(y0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x1 = i32x4.add(x1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y1 = i32x4.add(y1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x2 = i32x4.add(x2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y2 = i32x4.add(y2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x3 = i32x4.add(x3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y3 = i32x4.add(y3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      wa0 = v128.load(oA + off + 32);
      wa1 = v128.load(oA + off + 48);
      wb0 = v128.load(oB + off + 32);
      wb1 = v128.load(oB + off + 48);
      sa = v128.load16_splat(oA + 256 + (<usize>(2 * j + 1) << 1));
      sb = v128.load16_splat(oB + 256 + (<usize>(2 * j + 1) << 1));
      at = a + (<usize>(2 * j + 1) << 5);
      u = v128.load(at);
      v = v128.load(at + 16);
      x0 = i32x4.add(x0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y0 = i32x4.add(y0, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x1 = i32x4.add(x1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y1 = i32x4.add(y1, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x2 = i32x4.add(x2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y2 = i32x4.add(y2, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
      at += aqStride;
      u = v128.load(at);
      v = v128.load(at + 16);
      x3 = i32x4.add(x3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wa0), rdot(v, wa1)), sa));
      y3 = i32x4.add(y3, i32x4.dot_i16x8_s(i16x8.add(rdot(u, wb0), rdot(v, wb1)), sb));
    }
    // mins: m_j · (Σ16 + Σ16) per sub-block as in dotQ4K8, per row and token
    const MloA = v128.load(oA + 272);
    const MhiA = v128.load(oA + 288);
    const MloB = v128.load(oB + 272);
    const MhiB = v128.load(oB + 288);
    const bs0 = asum + (<usize>b << 5);
    const bs1 = bs0 + asStride;
    const bs2 = bs1 + asStride;
    const bs3 = bs2 + asStride;
    const MA = isum4i(
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs0), MloA), i32x4.dot_i16x8_s(v128.load(bs0 + 16), MhiA)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs1), MloA), i32x4.dot_i16x8_s(v128.load(bs1 + 16), MhiA)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs2), MloA), i32x4.dot_i16x8_s(v128.load(bs2 + 16), MhiA)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs3), MloA), i32x4.dot_i16x8_s(v128.load(bs3 + 16), MhiA)),
    );
    const MB = isum4i(
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs0), MloB), i32x4.dot_i16x8_s(v128.load(bs0 + 16), MhiB)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs1), MloB), i32x4.dot_i16x8_s(v128.load(bs1 + 16), MhiB)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs2), MloB), i32x4.dot_i16x8_s(v128.load(bs2 + 16), MhiB)),
      i32x4.add(i32x4.dot_i16x8_s(v128.load(bs3), MloB), i32x4.dot_i16x8_s(v128.load(bs3 + 16), MhiB)),
    );
    // dotQ4K8's tail on lanes: Σi·(d·da) − Σm·(dmin·da), d and dmin from f16pair as there
    const DA = load4f(ad + (<usize>b << 2), adStride);
    const FA = v128.load(oA + 304);
    const FB = v128.load(oB + 304);
    accA = f32x4.add(accA, blockTerm8x4(isum4i(x0, x1, x2, x3), MA, FA, DA));
    accB = f32x4.add(accB, blockTerm8x4(isum4i(y0, y1, y2, y3), MB, FB, DA));
  }
  v128.store(out, accA);
  v128.store(out + 16, accB);
}

// four tokens' Σi·(d·da) − Σm·(dmin·da) (F = [d, dmin, d, dmin]), the f32 operations of dotQ4K8's tail lane by lane
// @ts-ignore: decorator
@inline function blockTerm8x4(I: v128, M: v128, F: v128, DA: v128): v128 {
  const d = i8x16.shuffle(F, F, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
  const dm = i8x16.shuffle(F, F, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
  return f32x4.sub(f32x4.mul(f32x4.convert_i32x4_s(I), f32x4.mul(d, DA)), f32x4.mul(f32x4.convert_i32x4_s(M), f32x4.mul(dm, DA)));
}

// Q5_0: the values q = nibble + 16·bit (0..31; the fifth bits cut as in q5Block), one relaxed dot per 16, the two
// added in i16 (≤ 15748) and widened; the block's Σ a·(q − 16) = Σ a·q − 16·Σa.
// @ts-ignore: decorator
@inline function q5Block8(p: usize, a: usize, m4: v128, c16: v128, idxLo: v128, idxHi: v128, bits: v128): v128 {
  const qh = i32x4.splat(load<u32>(p + 2));
  const bLo = v128.and(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxLo), bits), bits));
  const bHi = v128.and(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxHi), bits), bits));
  const q = v128.load(p + 6);
  const lo = v128.or(v128.and(q, m4), bLo);
  const hi = v128.or(v128.and(i16x8.shr_u(q, 4), m4), bHi);
  return i32x4.extadd_pairwise_i16x8_s(i16x8.add(rdot(v128.load(a), lo), rdot(v128.load(a + 16), hi)));
}

function dotQ5_08(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  const m4 = i8x16.splat(15);
  const c16 = i8x16.splat(16);
  const idxLo = i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const idxHi = i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const bits = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  let acc: f32 = 0;
  let b = 0;
  for (; b + 4 <= nb; b += 4) {
    const p = row + <usize>b * 22;
    const a = aq + (<usize>b << 5);
    const s0 = q5Block8(p, a, m4, c16, idxLo, idxHi, bits);
    const s1 = q5Block8(p + 22, a + 32, m4, c16, idxLo, idxHi, bits);
    const s2 = q5Block8(p + 44, a + 64, m4, c16, idxLo, idxHi, bits);
    const s3 = q5Block8(p + 66, a + 96, m4, c16, idxLo, idxHi, bits);
    const I = i32x4.sub(isum4i(s0, s1, s2, s3), i32x4.shl(v128.load(asum + (<usize>b << 2)), 4));
    acc = addLanes(acc, f32x4.mul(f32x4.convert_i32x4_s(I), f32x4.mul(f16x4(p, 22), v128.load(ad + (<usize>b << 2)))));
  }
  for (; b < nb; b++) {
    const p = row + <usize>b * 22;
    const s = isumI(q5Block8(p, aq + (<usize>b << 5), m4, c16, idxLo, idxHi, bits)) - (load<i32>(asum + (<usize>b << 2)) << 4);
    acc += <f32>s * (f16(load<u16>(p)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// Q5_0R (q8 mode's copy of Q5_0 for products of ≤ 2 tokens): a row as `cols` u8 values (nibble + 16·bit, 0..31:
// the relaxed dot's i7 operand, no −16 yet) and nb f32 scales (f16 as dotQ5_08 converts them).
function unpackQ5_0u8(row: usize, nb: i32, S: usize): void {
  const sd = S + (<usize>nb << 5);
  const m4 = i8x16.splat(15);
  const c16 = i8x16.splat(16);
  const idxLo = i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const idxHi = i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const bits = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 22;
    store<f32>(sd + (<usize>b << 2), f16(load<u16>(p)));
    const qh = i32x4.splat(load<u32>(p + 2));
    const bLo = v128.and(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxLo), bits), bits));
    const bHi = v128.and(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxHi), bits), bits));
    const q = v128.load(p + 6);
    const o = S + (<usize>b << 5);
    v128.store(o, v128.or(v128.and(q, m4), bLo));
    v128.store(o + 16, v128.or(v128.and(i16x8.shr_u(q, 4), m4), bHi));
  }
}

/**
 * q8 mode: rows of Q5_0 at src → Q5_0R at dst, each row as unpackQ5_0u8 cuts it ([nb·32 u8 values 0..31][nb f32
 * scales], 36 bytes per 32 values against 22): the same numbers with no bit fields left, so that single-token products
 * (dotQ5R8) only load and dot. (An empty function in the default module.)
 */
export function repackQ5_0u8(src: usize, rows: i32, cols: i32, dst: usize): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    const nb = cols >> 5;
    for (let r = 0; r < rows; r++) unpackQ5_0u8(src + <usize>r * <usize>(nb * 22), nb, dst + <usize>r * <usize>(nb * 36));
  }
}

// Q5_0R, one token: dotQ5_08's integers and f32 operations (four blocks at a time, terms added in block order) on the
// cut values: the same bits as dotQ5_08 on the original row.
// @ts-ignore: decorator
@inline function q5rBlock8(w: usize, a: usize): v128 {
  return i32x4.extadd_pairwise_i16x8_s(i16x8.add(rdot(v128.load(a), v128.load(w)), rdot(v128.load(a + 16), v128.load(w + 16))));
}

function dotQ5R8(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  const sd = row + (<usize>nb << 5);
  let acc: f32 = 0;
  let b = 0;
  for (; b + 4 <= nb; b += 4) {
    const o = <usize>b << 5;
    const w = row + o;
    const a = aq + o;
    const bo = <usize>b << 2;
    const I = i32x4.sub(isum4i(q5rBlock8(w, a), q5rBlock8(w + 32, a + 32), q5rBlock8(w + 64, a + 64), q5rBlock8(w + 96, a + 96)), i32x4.shl(v128.load(asum + bo), 4));
    acc = addLanes(acc, f32x4.mul(f32x4.convert_i32x4_s(I), f32x4.mul(v128.load(sd + bo), v128.load(ad + bo))));
  }
  for (; b < nb; b++) {
    const o = <usize>b << 5;
    const s = isumI(q5rBlock8(row + o, aq + o)) - (load<i32>(asum + (<usize>b << 2)) << 4);
    acc += <f32>s * (load<f32>(sd + (<usize>b << 2)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

/**
 * q8 mode: the values of Q6_KR rows at p made unsigned in place (q − 32 → q, 0..63), the relaxed dot's i7 operand;
 * such a copy is read by dotQ6KR8 only. (An empty function in the default module.)
 */
export function unsignQ6KR(p: usize, rows: i32, cols: i32): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    const blocks = <usize>rows * <usize>(cols >> 8);
    const c32 = i8x16.splat(32);
    for (let b: usize = 0; b < blocks; b++) {
      const q = p + b * 276 + 20;
      for (let i: usize = 0; i < 256; i += 16) v128.store(q + i, i8x16.add(v128.load(q + i), c32));
    }
  }
}

// Q6_KR made unsigned (unsignQ6KR): per 16 values one relaxed dot of the activations with q (0..63; ≤ 16002 per i16
// lane), widened by an i16 dot with the group's scale in every lane (constant shuffles of the 16 scales as i16; |sc| ≤
// 128: ≤ 2·16002·128 per i32 lane and group, 16 groups < 2³¹); then − 32·Σ_g sc_g·Σ16_g for the offset.
// @ts-ignore: decorator
@inline function q6Group8(a: usize, q: usize, S: v128): v128 {
  return i32x4.dot_i16x8_s(rdot(v128.load(a), v128.load(q)), S);
}

function dotQ6KR8(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 276;
    const q = p + 20;
    const a = aq + (<usize>b << 8);
    const bs = asum + (<usize>b << 5);
    const SC = v128.load(p + 4);
    const L = i16x8.extend_low_i8x16_s(SC);
    const H = i16x8.extend_high_i8x16_s(SC);
    let s = i32x4.add(i32x4.dot_i16x8_s(v128.load(bs), L), i32x4.dot_i16x8_s(v128.load(bs + 16), H));
    s = i32x4.sub(i32x4.splat(0), i32x4.shl(s, 5));
    s = i32x4.add(s, q6Group8(a, q, i8x16.shuffle(L, L, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1)));
    s = i32x4.add(s, q6Group8(a + 16, q + 16, i8x16.shuffle(L, L, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3)));
    s = i32x4.add(s, q6Group8(a + 32, q + 32, i8x16.shuffle(L, L, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5)));
    s = i32x4.add(s, q6Group8(a + 48, q + 48, i8x16.shuffle(L, L, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7)));
    s = i32x4.add(s, q6Group8(a + 64, q + 64, i8x16.shuffle(L, L, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9)));
    s = i32x4.add(s, q6Group8(a + 80, q + 80, i8x16.shuffle(L, L, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11)));
    s = i32x4.add(s, q6Group8(a + 96, q + 96, i8x16.shuffle(L, L, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13)));
    s = i32x4.add(s, q6Group8(a + 112, q + 112, i8x16.shuffle(L, L, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15)));
    s = i32x4.add(s, q6Group8(a + 128, q + 128, i8x16.shuffle(H, H, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1)));
    s = i32x4.add(s, q6Group8(a + 144, q + 144, i8x16.shuffle(H, H, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3)));
    s = i32x4.add(s, q6Group8(a + 160, q + 160, i8x16.shuffle(H, H, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5)));
    s = i32x4.add(s, q6Group8(a + 176, q + 176, i8x16.shuffle(H, H, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7)));
    s = i32x4.add(s, q6Group8(a + 192, q + 192, i8x16.shuffle(H, H, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9)));
    s = i32x4.add(s, q6Group8(a + 208, q + 208, i8x16.shuffle(H, H, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11)));
    s = i32x4.add(s, q6Group8(a + 224, q + 224, i8x16.shuffle(H, H, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13)));
    s = i32x4.add(s, q6Group8(a + 240, q + 240, i8x16.shuffle(H, H, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15)));
    acc += <f32>isumI(s) * (load<f32>(p) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

/**
 * the products of the 8-bit kernel types: single-token dots, and for Q4_K two rows × four tokens (dotQ4K8x24, the same
 * bits) in chunks of `tc` tokens when a chunk has four or more
 */
/** Q4_K chunks of at least this many tokens cut their rows once (unpackQ4K8, dotQ4K8u24) */
const CUT_MIN: i32 = 8;

function matmulQ8(type: i32, w: usize, rowBytes: i32, r0: i32, r1: i32, cols: i32, n: i32, aq: usize, ad: usize, asum: usize, y: usize, yStride: i32, S: usize, tc: i32): void {
  const base = type - Q8ACT;
  const nb = cols / (base == Q5_0 || base == Q5_0R ? 32 : 256);
  const aqRow = <usize>cols << 1;
  const adRow = <usize>nb << 2;
  const asRow = <usize>nb << 5;
  const tmp = S + 32;
  for (let t0 = 0; t0 < n; t0 += tc) {
    const t1 = min(n, t0 + tc);
    let r = r0;
    if (base == Q4_K && t1 - t0 >= 4) {
      // rows in pairs, cut once per chunk (unpackQ4K8) when the chunk has CUT_MIN or more tokens
      const SA = S + 64;
      const SB = SA + <usize>nb * 320;
      const cut = t1 - t0 >= CUT_MIN;
      for (; r + 2 <= r1; r += 2) {
        const rp = w + <usize>r * <usize>rowBytes;
        const rp2 = rp + <usize>rowBytes;
        if (cut) {
          unpackQ4K8(rp, nb, SA);
          unpackQ4K8(rp2, nb, SB);
        }
        let t = t0;
        for (; t + 4 <= t1; t += 4) {
          if (cut) dotQ4K8u24(SA, SB, nb, aq + <usize>t * aqRow, aqRow, ad + <usize>t * adRow, adRow, asum + <usize>t * asRow, asRow, tmp);
          else dotQ4K8x24(rp, rp2, nb, aq + <usize>t * aqRow, aqRow, ad + <usize>t * adRow, adRow, asum + <usize>t * asRow, asRow, S, tmp);
          for (let k = 0; k < 4; k++) {
            store<f32>(y + (<usize>((t + k) * yStride + r) << 2), load<f32>(tmp + (<usize>k << 2)));
            store<f32>(y + (<usize>((t + k) * yStride + r + 1) << 2), load<f32>(tmp + 16 + (<usize>k << 2)));
          }
        }
        for (; t < t1; t++) {
          const qa = aq + <usize>t * aqRow, da = ad + <usize>t * adRow, sa = asum + <usize>t * asRow;
          store<f32>(y + (<usize>(t * yStride + r) << 2), dotQ4K8(rp, nb, qa, da, sa));
          store<f32>(y + (<usize>(t * yStride + r + 1) << 2), dotQ4K8(rp2, nb, qa, da, sa));
        }
      }
    }
    for (; r < r1; r++) {
      const rp = w + <usize>r * <usize>rowBytes;
      for (let t = t0; t < t1; t++) {
        const qa = aq + <usize>t * aqRow, da = ad + <usize>t * adRow, sa = asum + <usize>t * asRow;
        let v: f32;
        if (base == Q4_K) v = dotQ4K8(rp, nb, qa, da, sa);
        else if (base == Q5_0) v = dotQ5_08(rp, nb, qa, da, sa);
        else if (base == Q5_0R) v = dotQ5R8(rp, nb, qa, da, sa);
        else v = dotQ6KR8(rp, nb, qa, da, sa);
        store<f32>(y + (<usize>(t * yStride + r) << 2), v);
      }
    }
  }
}

// ---------------------------------------------------------------- products

/**
 * y[t·yStride + r] = Σ_c W[r][c]·x_t[c] for rows r0 ≤ r < r1 and tokens t < n.
 * Activations: F class reads f32 x (xStride floats); other classes read the quantized aq/ad/asum of `quantize`.
 * Tokens go in chunks of `tc` so that a chunk's activations stay in cache while its rows stream by.
 */
export function matmul(type: i32, w: usize, rowBytes: i32, r0: i32, r1: i32, cols: i32, n: i32, x: usize, xStride: i32, aq: usize, ad: usize, asum: usize, y: usize, yStride: i32, S: usize, tc: i32): void {
  if (ASC_FEATURE_RELAXED_SIMD && type >= Q8ACT) return matmulQ8(type, w, rowBytes, r0, r1, cols, n, aq, ad, asum, y, yStride, S, tc);
  const cls = typeClass(type);
  const bv = blockValues(type);
  const nb = cols / bv;
  const wf = sWf(S, cols);
  const tmp = wf + (<usize>cols << 2);
  const aqRow = <usize>cols << 1;
  const adRow = <usize>nb << 2;
  const asRow = <usize>nb << 5;
  for (let t0 = 0; t0 < n; t0 += tc) {
    const t1 = min(n, t0 + tc);
    if (type == Q6_KR || ((type == Q4_K || type == Q6_K || type == Q8_0 || type == Q5_0) && t1 - t0 < 3)) {
      for (let r = r0; r < r1; r++) {
        const rp = w + <usize>r * <usize>rowBytes;
        for (let t = t0; t < t1; t++) {
          const qa = aq + <usize>t * aqRow, da = ad + <usize>t * adRow;
          let v: f32;
          if (type == Q4_K) v = dotQ4K1(rp, nb, qa, da, asum + <usize>t * asRow);
          else if (type == Q6_KR) v = dotQ6KR1(rp, nb, qa, da);
          else if (type == Q6_K) v = dotQ6K1(rp, nb, qa, da);
          else if (type == Q8_0) v = dotQ8_01(rp, nb, qa, da);
          else v = dotQ5_01(rp, nb, qa, da);
          store<f32>(y + (<usize>(t * yStride + r) << 2), v);
        }
      }
      continue;
    }
    const S2 = S + rowArea(cols);
    let r = r0;
    if ((cls == 2 || cls == 1) && t1 - t0 >= 4) {
      // rows in pairs: each activation load feeds two rows
      for (; r + 2 <= r1; r += 2) {
        unpack(type, w + <usize>r * <usize>rowBytes, cols, S);
        unpack(type, w + <usize>(r + 1) * <usize>rowBytes, cols, S2);
        let t = t0;
        for (; t + 4 <= t1; t += 4) {
          if (cls == 2) dotK24(S, S2, cols, aq + <usize>t * aqRow, aqRow, ad + <usize>t * adRow, adRow, asum + <usize>t * asRow, asRow, tmp);
          else dot32x24(S, S2, cols, aq + <usize>t * aqRow, aqRow, ad + <usize>t * adRow, adRow, tmp);
          for (let k = 0; k < 4; k++) {
            store<f32>(y + (<usize>((t + k) * yStride + r) << 2), load<f32>(tmp + (<usize>k << 2)));
            store<f32>(y + (<usize>((t + k) * yStride + r + 1) << 2), load<f32>(tmp + 16 + (<usize>k << 2)));
          }
        }
        for (; t < t1; t++) {
          const qa = aq + <usize>t * aqRow, da = ad + <usize>t * adRow;
          store<f32>(y + (<usize>(t * yStride + r) << 2), cls == 2 ? dotK(S, cols, qa, da, asum + <usize>t * asRow) : dot32(S, cols, qa, da));
          store<f32>(y + (<usize>(t * yStride + r + 1) << 2), cls == 2 ? dotK(S2, cols, qa, da, asum + <usize>t * asRow) : dot32(S2, cols, qa, da));
        }
      }
    }
    for (; r < r1; r++) {
      unpack(type, w + <usize>r * <usize>rowBytes, cols, S);
      const wfr = cls == 0 ? sWf(S, cols) : wf;
      let t = t0;
      if (cls == 2) {
        for (; t + 4 <= t1; t += 4) {
          dotK4(S, cols, aq + <usize>t * aqRow, aqRow, ad + <usize>t * adRow, adRow, asum + <usize>t * asRow, asRow, tmp);
          for (let k = 0; k < 4; k++) store<f32>(y + (<usize>((t + k) * yStride + r) << 2), load<f32>(tmp + (<usize>k << 2)));
        }
      }
      for (; t < t1; t++) {
        let v: f32;
        if (cls == 2) v = dotK(S, cols, aq + <usize>t * aqRow, ad + <usize>t * adRow, asum + <usize>t * asRow);
        else if (cls == 1) v = dot32(S, cols, aq + <usize>t * aqRow, ad + <usize>t * adRow);
        else v = dotF(wfr, x + (<usize>(t * xStride) << 2), cols);
        store<f32>(y + (<usize>(t * yStride + r) << 2), v);
      }
    }
  }
}

/**
 * Transposed product for tokens t0 ≤ t < t1: y[t·yStride + c] = Σ_r W[r][c]·x[t·xStride + r], all rows, f32
 * activations. Each row is unpacked to f32 once per call and added into every token's output.
 */
export function matmulT(type: i32, w: usize, rowBytes: i32, rows: i32, cols: i32, t0: i32, t1: i32, x: usize, xStride: i32, y: usize, yStride: i32, S: usize): void {
  const nb = cols / blockValues(type);
  const wf = sWf(S, cols);
  for (let t = t0; t < t1; t++) memory.fill(y + (<usize>(t * yStride) << 2), 0, <usize>cols << 2);
  for (let r = 0; r < rows; r++) {
    unpack(type, w + <usize>r * <usize>rowBytes, cols, S);
    unpackedToF32(type, cols, S);
    for (let t = t0; t < t1; t++) {
      const a = load<f32>(x + (<usize>(t * xStride + r) << 2));
      if (a == 0) continue;
      const av = f32x4.splat(a);
      const yr = y + (<usize>(t * yStride) << 2);
      let c = 0;
      for (; c + 4 <= cols; c += 4) {
        const o = <usize>c << 2;
        v128.store(yr + o, f32x4.add(v128.load(yr + o), f32x4.mul(v128.load(wf + o), av)));
      }
      for (; c < cols; c++) store<f32>(yr + (<usize>c << 2), load<f32>(yr + (<usize>c << 2)) + load<f32>(wf + (<usize>c << 2)) * a);
    }
  }
}

// ---------------------------------------------------------------- gated FFNs (SwiGLU) around the products

/** dst row i (rowBytes bytes) = src row idx[i] for i < m (idx: i32[m]); gathers a routed expert's tokens */
export function gatherRows(src: usize, rowBytes: i32, idx: usize, m: i32, dst: usize): void {
  const rb = <usize>rowBytes;
  for (let i = 0; i < m; i++) memory.copy(dst + <usize>i * rb, src + <usize>load<i32>(idx + (<usize>i << 2)) * rb, rb);
}

/**
 * h = silu(g) ⊙ u over rows r0 ≤ r < r1 of F values (g, u f32 [rows × F]; h written over g), computed in f64 as the
 * reference does (silu(x) = x / (1 + e^(−x))) and rounded to f32 once; then, for weights of class cls ≠ 0, quantized
 * for the down product (aq/ad/asum laid out as `quantize` does for all rows).
 */
export function swigluQuant(cls: i32, g: usize, u: usize, r0: i32, r1: i32, F: i32, aq: usize, ad: usize, asum: usize): void {
  const lo = <usize>r0 * <usize>F;
  const hi = <usize>r1 * <usize>F;
  for (let i = lo; i < hi; i++) {
    const x = <f64>load<f32>(g + (i << 2));
    store<f32>(g + (i << 2), <f32>((x / (1 + Math.exp(-x))) * <f64>load<f32>(u + (i << 2))));
  }
  if (cls == 0 || r1 <= r0) return;
  const nb = F / (cls == 2 || (ASC_FEATURE_RELAXED_SIMD && cls == 4) ? 256 : 32);
  quantize(cls, g + (lo << 2), r1 - r0, F, F, aq + (lo << 1), ad + (<usize>(r0 * nb) << 2), asum + (<usize>(r0 * nb) << 5));
}

/**
 * out[t·dim + c] += d[r·dim + c]·s_r for rows r < m, t = idx[r] (idx = 0: t = r), s_r = scale[r] (scale = 0: 1);
 * out f64, d f32, scale f64: the same IEEE operations as the reference's f64 loop, so the sums are bit-identical.
 */
export function addScaledRows(out: usize, d: usize, m: i32, dim: i32, idx: usize, scale: usize): void {
  for (let r = 0; r < m; r++) {
    const t = idx == 0 ? r : load<i32>(idx + (<usize>r << 2));
    const s = scale == 0 ? <f64>1 : load<f64>(scale + (<usize>r << 3));
    const sv = f64x2.splat(s);
    const o = out + (<usize>t * <usize>dim << 3);
    const x = d + (<usize>r * <usize>dim << 2);
    let c = 0;
    for (; c + 4 <= dim; c += 4) {
      const v = v128.load(x + (<usize>c << 2));
      const oc = o + (<usize>c << 3);
      v128.store(oc, f64x2.add(v128.load(oc), f64x2.mul(f64x2.promote_low_f32x4(v), sv)));
      const w = i8x16.shuffle(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
      v128.store(oc + 16, f64x2.add(v128.load(oc + 16), f64x2.mul(f64x2.promote_low_f32x4(w), sv)));
    }
    for (; c < dim; c++) {
      const oc = o + (<usize>c << 3);
      store<f64>(oc, load<f64>(oc) + <f64>load<f32>(x + (<usize>c << 2)) * s);
    }
  }
}

// ---------------------------------------------------------------- attention (absorbed decode, prefill MHA)

// Both attention paths are groups of up to 4 queries over shared key rows: a key row is loaded once for four query
// dot products, the scores of the group go to a scratch of 4·Tmax + 4 floats, are softmaxed there (f64 exp and sum),
// and the weighted sum of value rows runs two queries at a time with 16 output columns in registers. A key is split in
// two parts that live in different arrays (the latent c or k_nope, and the shared roped k_pe), and so is a query.

/**
 * Absorbed MLA decode attention (MQA over the latent cache) for heads h0 ≤ h < h1:
 *   s_t = scale·(C_t·qc_h + K_t·qp_h) for t < T,  p = softmax(s),  out_h = Σ_t p_t·C_t
 * C f32[T × L], K f32[T × R] (k_pe), qc f32[H × L], qp f32[H × R], out f32[H × L]; sc: scratch of 4·T + 4 f32.
 */
export function attnAbsorbed(C: usize, K: usize, T: i32, L: i32, R: i32, qc: usize, qp: usize, h0: i32, h1: i32, scale: f32, sc: usize, out: usize): void {
  for (let h = h0; h < h1; h += 4) {
    const g = min(4, h1 - h);
    attendGroup(C, L, K, R, L, R, qc + (<usize>(h * L) << 2), L, qp + (<usize>(h * R) << 2), R, g, T, 0, scale, C, L, L, out + (<usize>(h * L) << 2), L, sc);
  }
}

/**
 * Causal prefill attention (decompressed MHA) of n queries at positions pos0 … pos0+n−1 for heads h0 ≤ h < h1:
 *   s_u = scale·(kNope_{u,h}·q_{i,h}[0:P] + kPe_u·q_{i,h}[P:P+R]) for u ≤ pos0+i,  o_{i,h} = Σ_u p_u·v_{u,h}
 * kNope f32[T × H × P], kPe f32[T × R], v f32[T × H × V], q f32[n × H × (P+R)], out f32[n × H × V] (T = pos0 + n);
 * sc: scratch of 4·T + 4 f32.
 */
export function attnPrefill(kNope: usize, kPe: usize, v: usize, q: usize, n: i32, pos0: i32, H: i32, P: i32, R: i32, V: i32, h0: i32, h1: i32, scale: f32, sc: usize, out: usize): void {
  const D = P + R;
  for (let h = h0; h < h1; h++) {
    for (let i = 0; i < n; i += 4) {
      const g = min(4, n - i);
      const qi = q + (<usize>((i * H + h) * D) << 2);
      attendGroup(kNope + (<usize>(h * P) << 2), H * P, kPe, R, P, R, qi, H * D, qi + (<usize>P << 2), H * D, g, pos0 + i + 1, 1, scale,
        v + (<usize>(h * V) << 2), H * V, V, out + (<usize>((i * H + h) * V) << 2), H * V, sc);
    }
  }
}

/**
 * g ≤ 4 queries; query j sees keys u < nk0 + j·step. Key u = [A_u (L values, row stride as) | B_u (R values, stride bs)],
 * query j = [QA + j·qas (L) | QB + j·qbs (R)] (floats); value rows Vr_u (Vd values, stride vs); out_j at out + j·os.
 */
function attendGroup(A: usize, as: i32, B: usize, bs: i32, L: i32, R: i32, QA: usize, qas: i32, QB: usize, qbs: i32, g: i32, nk0: i32, step: i32, scale: f32, Vr: usize, vs: i32, Vd: i32, out: usize, os: i32, sc: usize): void {
  const T = nk0 + (g - 1) * step;
  const tmp = sc + (<usize>(4 * T) << 2);
  // a group of fewer than four queries pads with copies of the first (stride 0): their lanes are dropped
  const qa: usize = g == 4 ? <usize>qas << 2 : 0;
  const qb: usize = g == 4 ? <usize>qbs << 2 : 0;
  const ar = <usize>as << 2, br = <usize>bs << 2;
  for (let u = 0; u < T; u++) {
    v128.store(tmp, f32x4.splat(0));
    if (g == 4) {
      dot4(A + <usize>u * ar, QA, L, qa, tmp);
      dot4(B + <usize>u * br, QB, R, qb, tmp);
    } else {
      for (let j = 0; j < g; j++) {
        store<f32>(tmp + (<usize>j << 2), dotF(A + <usize>u * ar, QA + (<usize>(j * qas) << 2), L) + dotF(B + <usize>u * br, QB + (<usize>(j * qbs) << 2), R));
      }
    }
    for (let j = 0; j < g; j++) {
      const visible = u < nk0 + j * step;
      store<f32>(sc + (<usize>(j * T + u) << 2), visible ? load<f32>(tmp + (<usize>j << 2)) * scale : -Infinity);
    }
  }
  for (let j = 0; j < g; j++) softmaxRow(sc + (<usize>(j * T) << 2), T);
  let j = 0;
  for (; j + 2 <= g; j += 2) weighted2(Vr, vs, T, Vd, sc + (<usize>(j * T) << 2), sc + (<usize>((j + 1) * T) << 2), out + (<usize>(j * os) << 2), out + (<usize>((j + 1) * os) << 2));
  if (j < g) weighted2(Vr, vs, T, Vd, sc + (<usize>(j * T) << 2), 0, out + (<usize>(j * os) << 2), 0);
}

// @ts-ignore: decorator
@inline function dot4(row: usize, q: usize, n: i32, qStride: usize, out: usize): void {
  // adds the dot products of one row with q, q + qStride, q + 2·qStride, q + 3·qStride (n values) to out[0..3]
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    const r = v128.load(row + o);
    a0 = f32x4.add(a0, f32x4.mul(r, v128.load(q + o)));
    a1 = f32x4.add(a1, f32x4.mul(r, v128.load(q + qStride + o)));
    a2 = f32x4.add(a2, f32x4.mul(r, v128.load(q + 2 * qStride + o)));
    a3 = f32x4.add(a3, f32x4.mul(r, v128.load(q + 3 * qStride + o)));
  }
  let s0 = hsum(a0), s1 = hsum(a1), s2 = hsum(a2), s3 = hsum(a3);
  for (; i < n; i++) {
    const o = <usize>i << 2;
    const r = load<f32>(row + o);
    s0 += r * load<f32>(q + o);
    s1 += r * load<f32>(q + qStride + o);
    s2 += r * load<f32>(q + 2 * qStride + o);
    s3 += r * load<f32>(q + 3 * qStride + o);
  }
  store<f32>(out, load<f32>(out) + s0);
  store<f32>(out + 4, load<f32>(out + 4) + s1);
  store<f32>(out + 8, load<f32>(out + 8) + s2);
  store<f32>(out + 12, load<f32>(out + 12) + s3);
}

/** in place: p = softmax(s) over T values (f64 exp and sum; −∞ entries become 0) */
function softmaxRow(s: usize, T: i32): void {
  let mx: f32 = -Infinity;
  for (let t = 0; t < T; t++) mx = max(mx, load<f32>(s + (<usize>t << 2)));
  let sum: f64 = 0;
  for (let t = 0; t < T; t++) {
    const e = Math.exp(<f64>(load<f32>(s + (<usize>t << 2)) - mx));
    store<f32>(s + (<usize>t << 2), <f32>e);
    sum += e;
  }
  const inv = <f32>(1 / sum);
  for (let t = 0; t < T; t++) store<f32>(s + (<usize>t << 2), load<f32>(s + (<usize>t << 2)) * inv);
}

/** outA = Σ_t pA_t·X_t and (when pB ≠ 0) outB = Σ_t pB_t·X_t over rows X_t (W values, xs floats apart), 16 columns at a time in registers */
function weighted2(X: usize, xs: i32, T: i32, W: i32, pA: usize, pB: usize, outA: usize, outB: usize): void {
  const xr = <usize>xs << 2;
  const two = pB != 0;
  const pb = two ? pB : pA;
  let c = 0;
  for (; c + 16 <= W; c += 16) {
    let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
    let b0 = f32x4.splat(0), b1 = f32x4.splat(0), b2 = f32x4.splat(0), b3 = f32x4.splat(0);
    let row = X + (<usize>c << 2);
    for (let t = 0; t < T; t++) {
      const pa = v128.load32_splat(pA + (<usize>t << 2));
      const pv = v128.load32_splat(pb + (<usize>t << 2));
      const r0 = v128.load(row), r1 = v128.load(row + 16), r2 = v128.load(row + 32), r3 = v128.load(row + 48);
      a0 = f32x4.add(a0, f32x4.mul(r0, pa));
      a1 = f32x4.add(a1, f32x4.mul(r1, pa));
      a2 = f32x4.add(a2, f32x4.mul(r2, pa));
      a3 = f32x4.add(a3, f32x4.mul(r3, pa));
      b0 = f32x4.add(b0, f32x4.mul(r0, pv));
      b1 = f32x4.add(b1, f32x4.mul(r1, pv));
      b2 = f32x4.add(b2, f32x4.mul(r2, pv));
      b3 = f32x4.add(b3, f32x4.mul(r3, pv));
      row += xr;
    }
    const oa = outA + (<usize>c << 2);
    v128.store(oa, a0);
    v128.store(oa + 16, a1);
    v128.store(oa + 32, a2);
    v128.store(oa + 48, a3);
    if (two) {
      const ob = outB + (<usize>c << 2);
      v128.store(ob, b0);
      v128.store(ob + 16, b1);
      v128.store(ob + 32, b2);
      v128.store(ob + 48, b3);
    }
  }
  for (; c < W; c++) {
    let sa: f32 = 0, sb: f32 = 0;
    for (let t = 0; t < T; t++) {
      const x = load<f32>(X + <usize>t * xr + (<usize>c << 2));
      sa += load<f32>(pA + (<usize>t << 2)) * x;
      sb += load<f32>(pb + (<usize>t << 2)) * x;
    }
    store<f32>(outA + (<usize>c << 2), sa);
    if (two) store<f32>(outB + (<usize>c << 2), sb);
  }
}
