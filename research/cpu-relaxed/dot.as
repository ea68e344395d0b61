// Micro-benchmark kernels: the fused single-token Q4_K dot of src/backend/cpu/wasm/kernels.as (i16 lanes,
// i32x4.dot_i16x8_s) against relaxed-SIMD versions that keep the weights in i8 lanes and the 14-bit activations as
// two i8 pieces (a = 256·hi + lo, lo ∈ [-128, 127], hi ∈ [-32, 32]). All versions sum each block exactly in i32, so
// their results are bit-identical. Built by build.mjs (not part of the engine).

// @ts-ignore: decorator
@inline function f16(h: u32): f32 {
  const f = reinterpret<f32>((h & 0x7fff) << 13) * 5.192296858534828e33;
  return reinterpret<f32>(reinterpret<u32>(f) | ((h & 0x8000) << 16));
}
// @ts-ignore: decorator
@inline function isumExact(v: v128): f64 {
  return <f64>i32x4.extract_lane(v, 0) + <f64>i32x4.extract_lane(v, 1) + <f64>i32x4.extract_lane(v, 2) + <f64>i32x4.extract_lane(v, 3);
}
// @ts-ignore: decorator
@inline function blockTerm(i: f64, m: f64, dw: f32, dm: f32, da: f32): f32 {
  return <f32>i * (dw * da) - <f32>m * (dm * da);
}

// 6-bit scale and min j of a Q4_K block (scales at s)
// @ts-ignore: decorator
@inline function scK(s: usize, j: i32): i32 {
  return j < 4 ? load<u8>(s + j) & 63 : (load<u8>(s + j + 4) & 0xf) | ((load<u8>(s + j - 4) >> 6) << 4);
}
// @ts-ignore: decorator
@inline function mnK(s: usize, j: i32): i32 {
  return j < 4 ? load<u8>(s + j + 4) & 63 : (load<u8>(s + j + 4) >> 4) | ((load<u8>(s + j) >> 6) << 4);
}

/** the engine's kernel, as is */
function dotQ4K1(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  const m4 = i16x8.splat(15);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const s = p + 4;
    const qs = p + 16;
    const a = aq + (<usize>b << 9);
    const bs = asum + (<usize>b << 5);
    let isum = i32x4.splat(0);
    let msum: i32 = 0;
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
      msum += m0 * load<i32>(bs + (<usize>is << 2)) + m1 * load<i32>(bs + (<usize>(is + 1) << 2));
      const q = qs + (<usize>j << 5);
      const ao = a + (<usize>j << 7);
      const Q0 = v128.load8x8_u(q);
      const Q1 = v128.load8x8_u(q + 8);
      const Q2 = v128.load8x8_u(q + 16);
      const Q3 = v128.load8x8_u(q + 24);
      const s0 = i32x4.add(
        i32x4.add(i32x4.dot_i16x8_s(v128.and(Q0, m4), v128.load(ao)), i32x4.dot_i16x8_s(v128.and(Q1, m4), v128.load(ao + 16))),
        i32x4.add(i32x4.dot_i16x8_s(v128.and(Q2, m4), v128.load(ao + 32)), i32x4.dot_i16x8_s(v128.and(Q3, m4), v128.load(ao + 48))),
      );
      const s1 = i32x4.add(
        i32x4.add(i32x4.dot_i16x8_s(i16x8.shr_u(Q0, 4), v128.load(ao + 64)), i32x4.dot_i16x8_s(i16x8.shr_u(Q1, 4), v128.load(ao + 80))),
        i32x4.add(i32x4.dot_i16x8_s(i16x8.shr_u(Q2, 4), v128.load(ao + 96)), i32x4.dot_i16x8_s(i16x8.shr_u(Q3, 4), v128.load(ao + 112))),
      );
      isum = i32x4.add(isum, i32x4.add(i32x4.mul(s0, i32x4.splat(sc0)), i32x4.mul(s1, i32x4.splat(sc1))));
    }
    acc += blockTerm(isumExact(isum), <f64>msum, f16(load<u16>(p)), f16(load<u16>(p + 2)), load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// Relaxed, i16 form: i16x8.relaxed_dot_i8x16_i7x16_s (x86: one pmaddubsw) of the activation pieces (signed i8, first
// operand) with the nibbles (0..15, the i7 operand: never the implementation-defined case). Two of them cover a
// 32-value sub-block: an i16 lane holds 4 products, |lo| ≤ 4·128·15, |hi| ≤ 4·32·15. Then i32x4.dot_i16x8_s against
// the splatted scale sc (lo) and sc·256 (hi, ≤ 63·256 fits i16) widens, scales and recombines the pieces.
// Activation layout per 256-block: 256 lo bytes, then 256 hi bytes.
function dotQ4K1r(row: usize, nb: i32, a8: usize, ad: usize, asum: usize): f32 {
  const m4 = i8x16.splat(15);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const s = p + 4;
    const qs = p + 16;
    const lo = a8 + (<usize>b << 9);
    const hi = lo + 256;
    const bs = asum + (<usize>b << 5);
    let isum = i32x4.splat(0);
    let msum: i32 = 0;
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
      msum += m0 * load<i32>(bs + (<usize>is << 2)) + m1 * load<i32>(bs + (<usize>(is + 1) << 2));
      const q = qs + (<usize>j << 5);
      const o = <usize>j << 6;
      const B0 = v128.load(q);
      const B1 = v128.load(q + 16);
      const W0 = v128.and(B0, m4);
      const W1 = v128.and(B1, m4);
      const W2 = v128.and(i16x8.shr_u(B0, 4), m4);
      const W3 = v128.and(i16x8.shr_u(B1, 4), m4);
      const l0 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o), W0), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o + 16), W1));
      const h0 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o), W0), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o + 16), W1));
      const l1 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o + 32), W2), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o + 48), W3));
      const h1 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o + 32), W2), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o + 48), W3));
      isum = i32x4.add(
        isum,
        i32x4.add(
          i32x4.add(i32x4.dot_i16x8_s(l0, i16x8.splat(<i16>sc0)), i32x4.dot_i16x8_s(h0, i16x8.splat(<i16>(sc0 << 8)))),
          i32x4.add(i32x4.dot_i16x8_s(l1, i16x8.splat(<i16>sc1)), i32x4.dot_i16x8_s(h1, i16x8.splat(<i16>(sc1 << 8)))),
        ),
      );
    }
    acc += blockTerm(isumExact(isum), <f64>msum, f16(load<u16>(p)), f16(load<u16>(p + 2)), load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// Relaxed, i32 form: i32x4.relaxed_dot_i8x16_i7x16_add_s per piece (a single vpdpbusd only with AVX-VNNI), then
// (256·hi + lo)·sc in i32.
function dotQ4K1r32(row: usize, nb: i32, a8: usize, ad: usize, asum: usize): f32 {
  const m4 = i8x16.splat(15);
  const z = i32x4.splat(0);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const s = p + 4;
    const qs = p + 16;
    const lo = a8 + (<usize>b << 9);
    const hi = lo + 256;
    const bs = asum + (<usize>b << 5);
    let isum = i32x4.splat(0);
    let msum: i32 = 0;
    for (let j = 0; j < 4; j++) {
      const is = j * 2;
      const sc0 = scK(s, is), sc1 = scK(s, is + 1);
      msum += mnK(s, is) * load<i32>(bs + (<usize>is << 2)) + mnK(s, is + 1) * load<i32>(bs + (<usize>(is + 1) << 2));
      const q = qs + (<usize>j << 5);
      const o = <usize>j << 6;
      const B0 = v128.load(q);
      const B1 = v128.load(q + 16);
      const W0 = v128.and(B0, m4);
      const W1 = v128.and(B1, m4);
      const W2 = v128.and(i16x8.shr_u(B0, 4), m4);
      const W3 = v128.and(i16x8.shr_u(B1, 4), m4);
      const l0 = i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(lo + o + 16), W1, i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(lo + o), W0, z));
      const h0 = i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(hi + o + 16), W1, i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(hi + o), W0, z));
      const l1 = i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(lo + o + 48), W3, i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(lo + o + 32), W2, z));
      const h1 = i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(hi + o + 48), W3, i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(hi + o + 32), W2, z));
      isum = i32x4.add(
        isum,
        i32x4.add(i32x4.mul(i32x4.add(i32x4.shl(h0, 8), l0), i32x4.splat(sc0)), i32x4.mul(i32x4.add(i32x4.shl(h1, 8), l1), i32x4.splat(sc1))),
      );
    }
    acc += blockTerm(isumExact(isum), <f64>msum, f16(load<u16>(p)), f16(load<u16>(p + 2)), load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// Block scales and mins of Q4_K decoded four at a time (ggml's 32-bit masks on the 12 scale bytes): lo = scales 0..7,
// hi = mins 0..7, one byte each.
// @ts-ignore: decorator
@inline function scalesK(s: usize): v128 {
  const u0 = load<u32>(s), u1 = load<u32>(s + 4), u2 = load<u32>(s + 8);
  const sc0 = u0 & 0x3f3f3f3f;
  const sc1 = (u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4);
  const mn0 = u1 & 0x3f3f3f3f;
  const mn1 = ((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4);
  return i64x2.replace_lane(i64x2.splat(<i64>sc0 | (<i64>sc1 << 32)), 1, <i64>mn0 | (<i64>mn1 << 32));
}

// i16 kernel, restructured: each sub-block's four i32 lanes summed across lanes four sub-blocks at a time (isum4i),
// then one i32 multiply by the four scales; mins as two vector products. The same exact integers as dotQ4K1.
function dotQ4K1v(row: usize, nb: i32, aq: usize, ad: usize, asum: usize): f32 {
  const m4 = i16x8.splat(15);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const qs = p + 16;
    const a = aq + (<usize>b << 9);
    const bs = asum + (<usize>b << 5);
    const SM = scalesK(p + 4);
    const S16 = i16x8.extend_low_i8x16_u(SM);
    const M16 = i16x8.extend_high_i8x16_u(SM);
    const ms = i32x4.add(
      i32x4.mul(i32x4.extend_low_i16x8_u(M16), v128.load(bs)),
      i32x4.mul(i32x4.extend_high_i16x8_u(M16), v128.load(bs + 16)),
    );
    let t0 = i32x4.splat(0), t1 = t0, t2 = t0, t3 = t0, t4 = t0, t5 = t0, t6 = t0, t7 = t0;
    for (let j = 0; j < 4; j++) {
      const q = qs + (<usize>j << 5);
      const ao = a + (<usize>j << 7);
      const Q0 = v128.load8x8_u(q);
      const Q1 = v128.load8x8_u(q + 8);
      const Q2 = v128.load8x8_u(q + 16);
      const Q3 = v128.load8x8_u(q + 24);
      const s0 = i32x4.add(
        i32x4.add(i32x4.dot_i16x8_s(v128.and(Q0, m4), v128.load(ao)), i32x4.dot_i16x8_s(v128.and(Q1, m4), v128.load(ao + 16))),
        i32x4.add(i32x4.dot_i16x8_s(v128.and(Q2, m4), v128.load(ao + 32)), i32x4.dot_i16x8_s(v128.and(Q3, m4), v128.load(ao + 48))),
      );
      const s1 = i32x4.add(
        i32x4.add(i32x4.dot_i16x8_s(i16x8.shr_u(Q0, 4), v128.load(ao + 64)), i32x4.dot_i16x8_s(i16x8.shr_u(Q1, 4), v128.load(ao + 80))),
        i32x4.add(i32x4.dot_i16x8_s(i16x8.shr_u(Q2, 4), v128.load(ao + 96)), i32x4.dot_i16x8_s(i16x8.shr_u(Q3, 4), v128.load(ao + 112))),
      );
      if (j == 0) { t0 = s0; t1 = s1; } else if (j == 1) { t2 = s0; t3 = s1; } else if (j == 2) { t4 = s0; t5 = s1; } else { t6 = s0; t7 = s1; }
    }
    const isum = i32x4.add(
      i32x4.mul(isum4i(t0, t1, t2, t3), i32x4.extend_low_i16x8_u(S16)),
      i32x4.mul(isum4i(t4, t5, t6, t7), i32x4.extend_high_i16x8_u(S16)),
    );
    acc += blockTerm(isumExact(isum), isumExact(ms), f16(load<u16>(p)), f16(load<u16>(p + 2)), load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

// [Σa, Σb, Σc, Σd] of four i32x4 (exact)
// @ts-ignore: decorator
@inline function isum4i(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = i32x4.add(i8x16.shuffle(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  const cd = i32x4.add(i8x16.shuffle(c, d, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), i8x16.shuffle(c, d, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
  return i32x4.add(i8x16.shuffle(ab, cd, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27), i8x16.shuffle(ab, cd, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
}

// relaxed i16x8 form with the same restructuring: per sub-block the lo and hi pmaddubsw sums (i16) are widened by one
// i32x4.dot_i16x8_s against [1, 256, 1, 256, ...] after interleaving lo and hi lanes... (simpler: two dots with 1/256)
function dotQ4K1rv(row: usize, nb: i32, a8: usize, ad: usize, asum: usize): f32 {
  const m4 = i8x16.splat(15);
  const one = i16x8.splat(1);
  const c256 = i16x8.splat(256);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 144;
    const qs = p + 16;
    const lo = a8 + (<usize>b << 9);
    const hi = lo + 256;
    const bs = asum + (<usize>b << 5);
    const SM = scalesK(p + 4);
    const S16 = i16x8.extend_low_i8x16_u(SM);
    const M16 = i16x8.extend_high_i8x16_u(SM);
    const ms = i32x4.add(
      i32x4.mul(i32x4.extend_low_i16x8_u(M16), v128.load(bs)),
      i32x4.mul(i32x4.extend_high_i16x8_u(M16), v128.load(bs + 16)),
    );
    let t0 = i32x4.splat(0), t1 = t0, t2 = t0, t3 = t0, t4 = t0, t5 = t0, t6 = t0, t7 = t0;
    for (let j = 0; j < 4; j++) {
      const q = qs + (<usize>j << 5);
      const o = <usize>j << 6;
      const B0 = v128.load(q);
      const B1 = v128.load(q + 16);
      const W0 = v128.and(B0, m4);
      const W1 = v128.and(B1, m4);
      const W2 = v128.and(i16x8.shr_u(B0, 4), m4);
      const W3 = v128.and(i16x8.shr_u(B1, 4), m4);
      const l0 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o), W0), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o + 16), W1));
      const h0 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o), W0), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o + 16), W1));
      const l1 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o + 32), W2), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(lo + o + 48), W3));
      const h1 = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o + 32), W2), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(hi + o + 48), W3));
      const s0 = i32x4.add(i32x4.dot_i16x8_s(l0, one), i32x4.dot_i16x8_s(h0, c256));
      const s1 = i32x4.add(i32x4.dot_i16x8_s(l1, one), i32x4.dot_i16x8_s(h1, c256));
      if (j == 0) { t0 = s0; t1 = s1; } else if (j == 1) { t2 = s0; t3 = s1; } else if (j == 2) { t4 = s0; t5 = s1; } else { t6 = s0; t7 = s1; }
    }
    const isum = i32x4.add(
      i32x4.mul(isum4i(t0, t1, t2, t3), i32x4.extend_low_i16x8_u(S16)),
      i32x4.mul(isum4i(t4, t5, t6, t7), i32x4.extend_high_i16x8_u(S16)),
    );
    acc += blockTerm(isumExact(isum), isumExact(ms), f16(load<u16>(p)), f16(load<u16>(p + 2)), load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

/** i16 activations (aq) → the two i8 pieces per 256-block (a8: lo[256] then hi[256]) */
export function split(aq: usize, n: i32, a8: usize): void {
  for (let i = 0; i < n; i++) {
    const v = <i32>load<i16>(aq + (<usize>i << 1));
    const l = ((v + 128) & 255) - 128;
    const blk = <usize>(i >> 8) << 9;
    const k = <usize>(i & 255);
    store<i8>(a8 + blk + k, <i8>l);
    store<i8>(a8 + blk + 256 + k, <i8>((v - l) >> 8));
  }
}

/** rows r0..r1 of a Q4_K matrix against one token; kind 0 = engine, 1 = relaxed i16 form, 2 = relaxed i32 form,
 * 3 = engine restructured (vector scales), 4 = relaxed i16 form restructured */
export function matvec(kind: i32, w: usize, rowBytes: i32, rows: i32, cols: i32, aq: usize, a8: usize, ad: usize, asum: usize, y: usize): void {
  const nb = cols >> 8;
  for (let r = 0; r < rows; r++) {
    const rp = w + <usize>r * <usize>rowBytes;
    let v: f32;
    if (kind == 0) v = dotQ4K1(rp, nb, aq, ad, asum);
    else if (kind == 1) v = dotQ4K1r(rp, nb, a8, ad, asum);
    else if (kind == 2) v = dotQ4K1r32(rp, nb, a8, ad, asum);
    else if (kind == 3) v = dotQ4K1v(rp, nb, aq, ad, asum);
    else v = dotQ4K1rv(rp, nb, a8, ad, asum);
    store<f32>(y + (<usize>r << 2), v);
  }
}

// ---------------------------------------------------------------- Q5_0 (the routed experts' down matrices)

// @ts-ignore: decorator
@inline function isumI(v: v128): i32 {
  return i32x4.extract_lane(v, 0) + i32x4.extract_lane(v, 1) + i32x4.extract_lane(v, 2) + i32x4.extract_lane(v, 3);
}

/** the engine's fused Q5_0 dot, as is: fifth bits by splat, mask and compare in i16 lanes */
function dotQ5_01(row: usize, nb: i32, aq: usize, ad: usize): f32 {
  const m4 = i16x8.splat(15);
  const c16 = i16x8.splat(16);
  const bits = i16x8(1, 2, 4, 8, 16, 32, 64, 128);
  const zero = i16x8.splat(0);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 22;
    const a = aq + (<usize>b << 6);
    const qh = load<u32>(p + 2);
    let s = i32x4.splat(0);
    for (let k = 0; k < 2; k++) {
      const Q = v128.load8x8_u(p + 6 + (<usize>k << 3));
      const hl = v128.and(i16x8.ne(v128.and(i16x8.splat(<i16>((qh >> (k << 3)) & 0xff)), bits), zero), c16);
      const hh = v128.and(i16x8.ne(v128.and(i16x8.splat(<i16>((qh >> (16 + (k << 3))) & 0xff)), bits), zero), c16);
      const lo = i16x8.sub(v128.or(v128.and(Q, m4), hl), c16);
      const hi = i16x8.sub(v128.or(i16x8.shr_u(Q, 4), hh), c16);
      s = i32x4.add(s, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(a + (<usize>k << 4))), i32x4.dot_i16x8_s(hi, v128.load(a + 32 + (<usize>k << 4)))));
    }
    acc += <f32>isumI(s) * (f16(load<u16>(p)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

/** fifth bits for all 32 values at once in i8 lanes (swizzle the qh bytes, test one bit per lane), as unpackQ5_0 */
function dotQ5_01s(row: usize, nb: i32, aq: usize, ad: usize): f32 {
  const m4 = i8x16.splat(15);
  const c16 = i8x16.splat(16);
  const idxLo = i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const idxHi = i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const bits = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  let acc: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const p = row + <usize>b * 22;
    const a = aq + (<usize>b << 6);
    const qh = i32x4.splat(load<u32>(p + 2));
    // 16 where the bit is clear: q − 16 = (nibble | 16·bit) − 16 = nibble − 16·(1 − bit)
    const nLo = v128.andnot(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxLo), bits), bits));
    const nHi = v128.andnot(c16, i8x16.eq(v128.and(i8x16.swizzle(qh, idxHi), bits), bits));
    const q = v128.load(p + 6);
    const lo = i8x16.sub(v128.and(q, m4), nLo);
    const hi = i8x16.sub(v128.and(i16x8.shr_u(q, 4), m4), nHi);
    const s = i32x4.add(
      i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(lo), v128.load(a)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(lo), v128.load(a + 16))),
      i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(hi), v128.load(a + 32)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(hi), v128.load(a + 48))),
    );
    acc += <f32>isumI(s) * (f16(load<u16>(p)) * load<f32>(ad + (<usize>b << 2)));
  }
  return acc;
}

/** rows of a Q5_0 matrix against one token (i16 activations, one scale per 32); kind 0 = engine, 1 = swizzled bits */
export function matvec32(kind: i32, w: usize, rowBytes: i32, rows: i32, cols: i32, aq: usize, ad: usize, y: usize): void {
  const nb = cols >> 5;
  for (let r = 0; r < rows; r++) {
    const rp = w + <usize>r * <usize>rowBytes;
    store<f32>(y + (<usize>r << 2), kind == 0 ? dotQ5_01(rp, nb, aq, ad) : dotQ5_01s(rp, nb, aq, ad));
  }
}
