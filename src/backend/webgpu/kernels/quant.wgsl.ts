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
