/**
 * WGSL dequantization of GGUF blocks, read straight from the file's bytes (bound as array<u32>): one 32-element
 * "unit" at a time (`deq(rowByte, unit)` fills the private array `dv`). The layouts follow src/quant/* exactly,
 * including where ggml rounds to float (dl = d·sc first, then dl·q − ml). F16 is read as packed u32 through
 * unpack2x16float (no shader-f16 needed).
 */
import { GGMLType, typeName } from "../../../gguf/types.js";
import { LatentError } from "../../../util/errors.js";

/** Types the GPU matrix kernels read. */
export const GPU_TYPES: readonly GGMLType[] = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
];

export function gpuSupports(type: number): boolean {
  return (GPU_TYPES as readonly number[]).includes(type);
}

/** Elements per unit: 32 for block formats; for F32/F16/BF16 the largest of 32,16,…,1 that divides the row. */
export function unitSize(type: number, cols: number): number {
  if (type === GGMLType.F32 || type === GGMLType.F16 || type === GGMLType.BF16) {
    for (const u of [32, 16, 8, 4, 2]) if (cols % u === 0) return u;
    return 1;
  }
  return 32;
}

const HELPERS = /* wgsl */ `
fn b8(o: u32) -> u32 { return (W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
fn b16(o: u32) -> u32 {
  if ((o & 3u) == 3u) { return b8(o) | (b8(o + 1u) << 8u); }
  return (W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffffu;
}
fn b32(o: u32) -> u32 {
  let s = (o & 3u) * 8u;
  if (s == 0u) { return W[o >> 2u]; }
  return (W[o >> 2u] >> s) | (W[(o >> 2u) + 1u] << (32u - s));
}
fn h2f(o: u32) -> f32 { return unpack2x16float(b16(o)).x; }
fn sx8(v: u32) -> i32 { return i32(v << 24u) >> 24u; }
const KIQ4 = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
// ggml's get_scale_min_k4: 6-bit (scale, min) pair j of the 12 bytes at s
fn smk4(j: u32, s: u32) -> vec2f {
  if (j < 4u) { return vec2f(f32(b8(s + j) & 63u), f32(b8(s + j + 4u) & 63u)); }
  let a = b8(s + j + 4u);
  return vec2f(f32((a & 15u) | ((b8(s + j - 4u) >> 6u) << 4u)), f32((a >> 4u) | ((b8(s + j) >> 6u) << 4u)));
}
var<private> dv: array<f32, 32>;
`;

function body(type: number, U: number): string {
  switch (type) {
    case GGMLType.F32:
      return `let o = rb + u * ${U * 4}u; for (var i = 0u; i < ${U}u; i++) { dv[i] = bitcast<f32>(b32(o + 4u * i)); }`;
    case GGMLType.F16:
      return `let o = rb + u * ${U * 2}u; for (var i = 0u; i < ${U}u; i++) { dv[i] = h2f(o + 2u * i); }`;
    case GGMLType.BF16:
      return `let o = rb + u * ${U * 2}u; for (var i = 0u; i < ${U}u; i++) { dv[i] = bitcast<f32>(b16(o + 2u * i) << 16u); }`;
    case GGMLType.Q8_0:
      return `let o = rb + u * 34u; let d = h2f(o); for (var i = 0u; i < 32u; i++) { dv[i] = f32(sx8(b8(o + 2u + i))) * d; }`;
    case GGMLType.Q4_0:
      return `let o = rb + u * 18u; let d = h2f(o);
  for (var j = 0u; j < 16u; j++) { let q = b8(o + 2u + j); dv[j] = (f32(q & 15u) - 8.0) * d; dv[j + 16u] = (f32(q >> 4u) - 8.0) * d; }`;
    case GGMLType.Q4_1:
      return `let o = rb + u * 20u; let d = h2f(o); let m = h2f(o + 2u);
  for (var j = 0u; j < 16u; j++) { let q = b8(o + 4u + j); dv[j] = f32(q & 15u) * d + m; dv[j + 16u] = f32(q >> 4u) * d + m; }`;
    case GGMLType.Q5_0:
      return `let o = rb + u * 22u; let d = h2f(o); let qh = b32(o + 2u);
  for (var j = 0u; j < 16u; j++) {
    let q = b8(o + 6u + j);
    let h0 = ((qh >> j) << 4u) & 16u; let h1 = (qh >> (j + 12u)) & 16u;
    dv[j] = (f32((q & 15u) | h0) - 16.0) * d; dv[j + 16u] = (f32((q >> 4u) | h1) - 16.0) * d;
  }`;
    case GGMLType.Q5_1:
      return `let o = rb + u * 24u; let d = h2f(o); let m = h2f(o + 2u); let qh = b32(o + 4u);
  for (var j = 0u; j < 16u; j++) {
    let q = b8(o + 8u + j);
    let h0 = ((qh >> j) << 4u) & 16u; let h1 = (qh >> (j + 12u)) & 16u;
    dv[j] = f32((q & 15u) | h0) * d + m; dv[j + 16u] = f32((q >> 4u) | h1) * d + m;
  }`;
    case GGMLType.IQ4_NL:
      return `let o = rb + u * 18u; let d = h2f(o);
  for (var j = 0u; j < 16u; j++) { let q = b8(o + 2u + j); dv[j] = d * KIQ4[q & 15u]; dv[j + 16u] = d * KIQ4[q >> 4u]; }`;
    case GGMLType.IQ4_XS:
      return `let o = rb + (u >> 3u) * 136u; let ib = u & 7u; let d = h2f(o); let sh = b16(o + 2u);
  let ls = ((b8(o + 4u + (ib >> 1u)) >> (4u * (ib & 1u))) & 15u) | (((sh >> (2u * ib)) & 3u) << 4u);
  let dl = d * (f32(ls) - 32.0);
  let q = o + 8u + 16u * ib;
  for (var j = 0u; j < 4u; j++) {
    let w = W[(q >> 2u) + j];
    for (var k = 0u; k < 4u; k++) { let b = (w >> (8u * k)) & 0xffu; dv[4u * j + k] = dl * KIQ4[b & 15u]; dv[4u * j + k + 16u] = dl * KIQ4[b >> 4u]; }
  }`;
    case GGMLType.Q4_K:
      return `let o = rb + (u >> 3u) * 144u; let j = u & 7u; let c = j >> 1u;
  let d = h2f(o); let dmin = h2f(o + 2u);
  let sm = smk4(j, o + 4u);
  let dl = d * sm.x; let ml = dmin * sm.y;
  let sh = (j & 1u) * 4u;
  let q = (o + 16u + 32u * c) >> 2u;
  for (var w = 0u; w < 8u; w++) {
    let v = W[q + w] >> sh;
    dv[4u * w] = dl * f32(v & 15u) - ml; dv[4u * w + 1u] = dl * f32((v >> 8u) & 15u) - ml;
    dv[4u * w + 2u] = dl * f32((v >> 16u) & 15u) - ml; dv[4u * w + 3u] = dl * f32((v >> 24u) & 15u) - ml;
  }`;
    case GGMLType.Q5_K:
      return `let o = rb + (u >> 3u) * 176u; let j = u & 7u; let c = j >> 1u;
  let d = h2f(o); let dmin = h2f(o + 2u);
  let sm = smk4(j, o + 4u);
  let dl = d * sm.x; let ml = dmin * sm.y;
  let sh = (j & 1u) * 4u;
  let q = (o + 48u + 32u * c) >> 2u; let qh = (o + 16u) >> 2u; let hb = j;
  for (var w = 0u; w < 8u; w++) {
    let v = W[q + w] >> sh; let h = W[qh + w] >> hb;
    for (var k = 0u; k < 4u; k++) { dv[4u * w + k] = dl * f32(((v >> (8u * k)) & 15u) + ((h >> (8u * k)) & 1u) * 16u) - ml; }
  }`;
    case GGMLType.Q6_K:
      return `let o = rb + (u >> 3u) * 210u; let j = u & 7u; let half = j >> 2u; let g = j & 3u;
  let d = h2f(o + 208u);
  let ql = o + 64u * half + 32u * (g & 1u); let qh = o + 128u + 32u * half; let sc = o + 192u + 8u * half + 2u * g;
  let s0 = d * f32(sx8(b8(sc))); let s1 = d * f32(sx8(b8(sc + 1u)));
  let ns = 4u * (g >> 1u); let hs = 2u * g;
  for (var l = 0u; l < 32u; l++) {
    let q = ((b8(ql + l) >> ns) & 15u) | (((b8(qh + l) >> hs) & 3u) << 4u);
    dv[l] = select(s1, s0, l < 16u) * (f32(q) - 32.0);
  }`;
    default:
      throw new LatentError(`the WebGPU kernels cannot read ${typeName(type)} weights`);
  }
}

/** Helpers plus `fn deq(rb: u32, u: u32)` for one type (U = unitSize). Expects `W: array<u32>` bound. */
export function dequantWGSL(type: number, U: number): string {
  return `${HELPERS}\nconst U: u32 = ${U}u;\nfn deq(rb: u32, u: u32) {\n  ${body(type, U)}\n}\n`;
}

/**
 * `fn deq4(rb: u32, e: u32) -> vec4f`: elements e..e+3 (e a multiple of 4) of the row at byte rb, for the coalesced
 * matrix kernel (neighbouring threads read neighbouring bytes of one block). Direct decoding for every type but IQ4_XS,
 * which goes through `deq` (the whole 32-element unit, then four of it). Same
 * float operations per element as `deq`. Needs dequantWGSL's helpers in the module.
 */
export function deq4WGSL(type: number): string {
  let b: string;
  switch (type) {
    case GGMLType.F32:
      b = `let q = (rb >> 2u) + e;
  return vec4f(bitcast<f32>(W[q]), bitcast<f32>(W[q + 1u]), bitcast<f32>(W[q + 2u]), bitcast<f32>(W[q + 3u]));`;
      break;
    case GGMLType.F16:
      b = `let q = (rb >> 2u) + (e >> 1u);
  return vec4f(unpack2x16float(W[q]), unpack2x16float(W[q + 1u]));`;
      break;
    case GGMLType.BF16:
      b = `let q = (rb >> 2u) + (e >> 1u); let a = W[q]; let c = W[q + 1u];
  return vec4f(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u), bitcast<f32>(c << 16u), bitcast<f32>(c & 0xffff0000u));`;
      break;
    case GGMLType.Q8_0:
      b = `let o = rb + (e >> 5u) * 34u; let d = h2f(o); let v = b32(o + 2u + (e & 31u));
  return vec4f(f32(sx8(v & 255u)) * d, f32(sx8((v >> 8u) & 255u)) * d, f32(sx8((v >> 16u) & 255u)) * d, f32(sx8(v >> 24u)) * d);`;
      break;
    case GGMLType.Q4_0:
      b = `let o = rb + (e >> 5u) * 18u; let d = h2f(o); let l = e & 31u;
  let v = b32(o + 2u + (l & 15u)) >> ((l >> 4u) * 4u);
  return vec4f((f32(v & 15u) - 8.0) * d, (f32((v >> 8u) & 15u) - 8.0) * d, (f32((v >> 16u) & 15u) - 8.0) * d, (f32((v >> 24u) & 15u) - 8.0) * d);`;
      break;
    case GGMLType.Q4_1:
      b = `let o = rb + (e >> 5u) * 20u; let d = h2f(o); let m = h2f(o + 2u); let l = e & 31u;
  let v = b32(o + 4u + (l & 15u)) >> ((l >> 4u) * 4u);
  return vec4f(f32(v & 15u) * d + m, f32((v >> 8u) & 15u) * d + m, f32((v >> 16u) & 15u) * d + m, f32((v >> 24u) & 15u) * d + m);`;
      break;
    case GGMLType.Q5_0:
      b = `let o = rb + (e >> 5u) * 22u; let d = h2f(o); let l = e & 31u;
  let h = b32(o + 2u) >> l;
  let v = b32(o + 6u + (l & 15u)) >> ((l >> 4u) * 4u);
  return vec4f((f32((v & 15u) | ((h & 1u) << 4u)) - 16.0) * d, (f32(((v >> 8u) & 15u) | (((h >> 1u) & 1u) << 4u)) - 16.0) * d,
    (f32(((v >> 16u) & 15u) | (((h >> 2u) & 1u) << 4u)) - 16.0) * d, (f32(((v >> 24u) & 15u) | (((h >> 3u) & 1u) << 4u)) - 16.0) * d);`;
      break;
    case GGMLType.Q5_1:
      b = `let o = rb + (e >> 5u) * 24u; let d = h2f(o); let m = h2f(o + 2u); let l = e & 31u;
  let h = b32(o + 4u) >> l;
  let v = b32(o + 8u + (l & 15u)) >> ((l >> 4u) * 4u);
  return vec4f(f32((v & 15u) | ((h & 1u) << 4u)) * d + m, f32(((v >> 8u) & 15u) | (((h >> 1u) & 1u) << 4u)) * d + m,
    f32(((v >> 16u) & 15u) | (((h >> 2u) & 1u) << 4u)) * d + m, f32(((v >> 24u) & 15u) | (((h >> 3u) & 1u) << 4u)) * d + m);`;
      break;
    case GGMLType.IQ4_NL:
      b = `let o = rb + (e >> 5u) * 18u; let d = h2f(o); let l = e & 31u;
  let v = b32(o + 2u + (l & 15u)) >> ((l >> 4u) * 4u);
  return vec4f(d * KIQ4[v & 15u], d * KIQ4[(v >> 8u) & 15u], d * KIQ4[(v >> 16u) & 15u], d * KIQ4[(v >> 24u) & 15u]);`;
      break;
    case GGMLType.Q4_K:
      b = `let o = rb + (e >> 8u) * 144u; let j = (e >> 5u) & 7u; let c = j >> 1u;
  let d = h2f(o); let dmin = h2f(o + 2u);
  let sm = smk4(j, o + 4u);
  let dl = d * sm.x; let ml = dmin * sm.y;
  let v = W[(o + 16u + 32u * c + (e & 31u)) >> 2u] >> ((j & 1u) * 4u);
  return vec4f(dl * f32(v & 15u) - ml, dl * f32((v >> 8u) & 15u) - ml, dl * f32((v >> 16u) & 15u) - ml, dl * f32((v >> 24u) & 15u) - ml);`;
      break;
    case GGMLType.Q5_K:
      b = `let o = rb + (e >> 8u) * 176u; let j = (e >> 5u) & 7u; let c = j >> 1u; let l = e & 31u;
  let d = h2f(o); let dmin = h2f(o + 2u);
  let sm = smk4(j, o + 4u);
  let dl = d * sm.x; let ml = dmin * sm.y;
  let v = W[(o + 48u + 32u * c + l) >> 2u] >> ((j & 1u) * 4u);
  let h = W[(o + 16u + l) >> 2u] >> j;
  return vec4f(dl * f32((v & 15u) + (h & 1u) * 16u) - ml, dl * f32(((v >> 8u) & 15u) + ((h >> 8u) & 1u) * 16u) - ml,
    dl * f32(((v >> 16u) & 15u) + ((h >> 16u) & 1u) * 16u) - ml, dl * f32(((v >> 24u) & 15u) + ((h >> 24u) & 1u) * 16u) - ml);`;
      break;
    case GGMLType.Q6_K:
      b = `let o = rb + (e >> 8u) * 210u; let j = (e >> 5u) & 7u; let half = j >> 2u; let g = j & 3u; let l = e & 31u;
  let d = h2f(o + 208u);
  let s = d * f32(sx8(b8(o + 192u + 8u * half + 2u * g + (l >> 4u))));
  let a = b32(o + 64u * half + 32u * (g & 1u) + l) >> (4u * (g >> 1u));
  let hh = b32(o + 128u + 32u * half + l) >> (2u * g);
  return vec4f(s * (f32((a & 15u) | ((hh & 3u) << 4u)) - 32.0), s * (f32(((a >> 8u) & 15u) | (((hh >> 8u) & 3u) << 4u)) - 32.0),
    s * (f32(((a >> 16u) & 15u) | (((hh >> 16u) & 3u) << 4u)) - 32.0), s * (f32(((a >> 24u) & 15u) | (((hh >> 24u) & 3u) << 4u)) - 32.0));`;
      break;
    default:
      b = `deq(rb, e >> 5u); let l = e & 31u;
  return vec4f(dv[l], dv[l + 1u], dv[l + 2u], dv[l + 3u]);`;
  }
  return `fn deq4(rb: u32, e: u32) -> vec4f {\n  ${b}\n}\n`;
}

/**
 * Block formats whose values are small integers times a per-32 (Q6_K: per-16) scale, so that a product can run on
 * integer dot products against activations quantized to int8 (the opt-in `activations: "q8"` of the register-tiled
 * kernel, gemm-q8.wgsl.ts). F32, F16 and BF16 weights have no integer form and keep the float kernels.
 */
export const Q8_WEIGHT_TYPES: readonly GGMLType[] = GPU_TYPES.filter(
  (t) => t !== GGMLType.F32 && t !== GGMLType.F16 && t !== GGMLType.BF16,
);

/** How a type's 32-element unit reads as integers: w = s_h·q − min, h the unit's half (only Q6_K has two scales). */
export function q8WeightForm(type: number): { readonly twoScales: boolean; readonly min: boolean } {
  if (!(Q8_WEIGHT_TYPES as readonly number[]).includes(type))
    throw new LatentError(`${typeName(type)} weights have no integer form`);
  return {
    twoScales: type === GGMLType.Q6_K,
    min: [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q4_K, GGMLType.Q5_K].includes(type),
  };
}

/**
 * `fn wq4(rb: u32, e: u32) -> u32`: the integers q of elements e..e+3 (e a multiple of 4) of the row at byte rb as four
 * int8 bytes (element e in the low byte), and `fn wsc(rb: u32, k: u32) -> vec4f`: unit k's (s0, s1, min, 0) with
 * element value s_h·q − min (h = 0 for the unit's first 16 elements). The scales are the ones `deq` multiplies by
 * (ggml's dl = d·sc, ml = dmin·m); offsets (Q4_0's 8, Q5_0's 16) go into min, Q6_K's 32 into q (signed). Needs
 * dequantWGSL's helpers in the module.
 */
export function q8WeightWGSL(type: number): string {
  let q: string;
  let sc: string;
  switch (type) {
    case GGMLType.Q8_0:
      q = `return b32(rb + (e >> 5u) * 34u + 2u + (e & 31u));`;
      sc = `let d = h2f(rb + k * 34u); return vec4f(d, d, 0.0, 0.0);`;
      break;
    case GGMLType.Q4_0:
    case GGMLType.IQ4_NL: {
      const nib = `let o = rb + (e >> 5u) * 18u; let l = e & 31u;
  let v = (b32(o + 2u + (l & 15u)) >> ((l >> 4u) * 4u)) & 0x0f0f0f0fu;`;
      q =
        type === GGMLType.Q4_0
          ? `${nib} return v;`
          : `${nib}
  return pack4xI8(vec4i(i32(KIQ4[v & 15u]), i32(KIQ4[(v >> 8u) & 15u]), i32(KIQ4[(v >> 16u) & 15u]), i32(KIQ4[v >> 24u])));`;
      sc = `let d = h2f(rb + k * 18u); return vec4f(d, d, ${type === GGMLType.Q4_0 ? "8.0 * d" : "0.0"}, 0.0);`;
      break;
    }
    case GGMLType.Q4_1:
      q = `let o = rb + (e >> 5u) * 20u; let l = e & 31u;
  return (b32(o + 4u + (l & 15u)) >> ((l >> 4u) * 4u)) & 0x0f0f0f0fu;`;
      sc = `let o = rb + k * 20u; let d = h2f(o); return vec4f(d, d, -h2f(o + 2u), 0.0);`;
      break;
    case GGMLType.Q5_0:
    case GGMLType.Q5_1: {
      const [bs, qo, ho] = type === GGMLType.Q5_0 ? [22, 6, 2] : [24, 8, 4];
      q = `let o = rb + (e >> 5u) * ${bs}u; let l = e & 31u;
  let h = (b32(o + ${ho}u) >> l) & 15u;
  let hb = (h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u);
  return ((b32(o + ${qo}u + (l & 15u)) >> ((l >> 4u) * 4u)) & 0x0f0f0f0fu) | (hb << 4u);`;
      sc =
        type === GGMLType.Q5_0
          ? `let d = h2f(rb + k * 22u); return vec4f(d, d, 16.0 * d, 0.0);`
          : `let o = rb + k * 24u; let d = h2f(o); return vec4f(d, d, -h2f(o + 2u), 0.0);`;
      break;
    }
    case GGMLType.IQ4_XS:
      q = `let o = rb + (e >> 8u) * 136u; let ib = (e >> 5u) & 7u; let l = e & 31u;
  let v = (b32(o + 8u + 16u * ib + (l & 15u)) >> ((l >> 4u) * 4u)) & 0x0f0f0f0fu;
  return pack4xI8(vec4i(i32(KIQ4[v & 15u]), i32(KIQ4[(v >> 8u) & 15u]), i32(KIQ4[(v >> 16u) & 15u]), i32(KIQ4[v >> 24u])));`;
      sc = `let o = rb + (k >> 3u) * 136u; let ib = k & 7u; let d = h2f(o); let sh = b16(o + 2u);
  let ls = ((b8(o + 4u + (ib >> 1u)) >> (4u * (ib & 1u))) & 15u) | (((sh >> (2u * ib)) & 3u) << 4u);
  let dl = d * (f32(ls) - 32.0); return vec4f(dl, dl, 0.0, 0.0);`;
      break;
    case GGMLType.Q4_K:
      q = `let o = rb + (e >> 8u) * 144u; let j = (e >> 5u) & 7u;
  return (W[(o + 16u + 32u * (j >> 1u) + (e & 31u)) >> 2u] >> ((j & 1u) * 4u)) & 0x0f0f0f0fu;`;
      sc = `let o = rb + (k >> 3u) * 144u; let sm = smk4(k & 7u, o + 4u);
  let dl = h2f(o) * sm.x; return vec4f(dl, dl, h2f(o + 2u) * sm.y, 0.0);`;
      break;
    case GGMLType.Q5_K:
      q = `let o = rb + (e >> 8u) * 176u; let j = (e >> 5u) & 7u; let l = e & 31u;
  let v = (W[(o + 48u + 32u * (j >> 1u) + l) >> 2u] >> ((j & 1u) * 4u)) & 0x0f0f0f0fu;
  return v | (((W[(o + 16u + l) >> 2u] >> j) & 0x01010101u) << 4u);`;
      sc = `let o = rb + (k >> 3u) * 176u; let sm = smk4(k & 7u, o + 4u);
  let dl = h2f(o) * sm.x; return vec4f(dl, dl, h2f(o + 2u) * sm.y, 0.0);`;
      break;
    case GGMLType.Q6_K:
      q = `let o = rb + (e >> 8u) * 210u; let j = (e >> 5u) & 7u; let half = j >> 2u; let g = j & 3u; let l = e & 31u;
  let a = (b32(o + 64u * half + 32u * (g & 1u) + l) >> (4u * (g >> 1u))) & 0x0f0f0f0fu;
  let hh = (b32(o + 128u + 32u * half + l) >> (2u * g)) & 0x03030303u;
  let v = a | (hh << 4u);
  return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u; // each byte 0..63 minus 32, borrow-free through its top bit`;
      sc = `let o = rb + (k >> 3u) * 210u; let j = k & 7u; let s = o + 192u + 8u * (j >> 2u) + 2u * (j & 3u);
  let d = h2f(o + 208u); return vec4f(d * f32(sx8(b8(s))), d * f32(sx8(b8(s + 1u))), 0.0, 0.0);`;
      break;
    default:
      throw new LatentError(`${typeName(type)} weights have no integer form`);
  }
  return `fn wq4(rb: u32, e: u32) -> u32 {\n  ${q}\n}\nfn wsc(rb: u32, k: u32) -> vec4f {\n  ${sc}\n}\n`;
}
