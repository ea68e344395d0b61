/**
 * WGSL of the row kernels (f32 activations): RMSNorm / LayerNorm, the MoE combine added to the residual with the next
 * RMSNorm, interleaved rope from a cos/sin table, SwiGLU, softmax / log-softmax, residual add, strided and scattered
 * copies. Pure generators: strings in, strings out.
 */

/** Sum of v over a 256-thread workgroup, returned to every thread (call in workgroup-uniform control flow). */
export const WG_TOTAL = /* wgsl */ `
var<workgroup> red: array<f32, 256>;
fn total(li: u32, v: f32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) { if (li < s) { red[li] += red[li + s]; } workgroupBarrier(); }
  let r = red[0];
  workgroupBarrier();
  return r;
}`;

/**
 * A 256-thread kernel using WG_TOTAL with its workgroup sum taken by subgroups where the device's subgroup size is
 * fixed (4..64): one subgroupAdd and two barriers instead of a nine-barrier tree — the one-workgroup-per-token norms
 * are latency-bound at small batches (on a large GPU, v2-lite batch 1: RMSNorm 3.8 µs, the MoE combine + RMSNorm 7.1 µs).
 */
export function withSubgroupTotal(code: string, sg: number | undefined): string {
  if (sg === undefined || sg < 4 || sg > 64 || !code.includes(WG_TOTAL)) return code;
  const bySubgroups = /* wgsl */ `
var<workgroup> red: array<f32, ${256 / sg}>;
fn total(li: u32, v: f32) -> f32 {
  let s = subgroupAdd(v);
  if (li % ${sg}u == 0u) { red[li / ${sg}u] = s; }
  workgroupBarrier();
  var r = 0.0;
  for (var i = 0u; i < ${256 / sg}u; i++) { r += red[i]; }
  workgroupBarrier();
  return r;
}`;
  return `enable subgroups;\n${code.replace(WG_TOTAL, bySubgroups)}`;
}

export const NORM_WGSL = (inplace: boolean, layer: boolean): string => /* wgsl */ `
struct P { n: u32, dim: u32, xOff: u32, xStride: u32, yOff: u32, yStride: u32, eps: f32, _p: u32 }
@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<storage, read> G: array<f32>;
${layer ? "@group(0) @binding(2) var<storage, read> B: array<f32>;" : ""}
${inplace ? "" : `@group(0) @binding(${layer ? 3 : 2}) var<storage, read_write> Y: array<f32>;`}
@group(0) @binding(${(layer ? 3 : 2) + (inplace ? 0 : 1)}) var<uniform> p: P;
${WG_TOTAL}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let xo = p.xOff + t * p.xStride;
  let yo = p.yOff + t * p.yStride;
  var mean = 0.0;
  ${
    layer
      ? `var s0 = 0.0; for (var i = li; i < p.dim; i += 256u) { s0 += X[xo + i]; }
  mean = total(li, s0) / f32(p.dim);`
      : ""
  }
  var ss = 0.0;
  for (var i = li; i < p.dim; i += 256u) { let d = X[xo + i] - mean; ss += d * d; }
  let inv = 1.0 / sqrt(total(li, ss) / f32(p.dim) + p.eps);
  for (var i = li; i < p.dim; i += 256u) {
    let v = (X[xo + i] - mean) * inv * G[i]${layer ? " + B[i]" : ""};
    ${inplace ? "X[xo + i] = v;" : "Y[yo + i] = v;"}
  }
}`;

/**
 * Interleaved rope by the table's (cos, sin) at POS[posOff + t] (table row: R/2 pairs, already × mscale) of
 * X[xOff + t·tokStride + h·headStride + 2i, +1]: in place (`to` false), or into Y[yOff + t·yTok + h·yHead + 2i, +1]
 * with X unchanged (`to` true: replaces a rope then a copy — absorbed MLA queries, q_pe into [q_abs | q_pe]).
 */
function ropeWGSL(to: boolean): string {
  return /* wgsl */ `
struct P { n: u32, heads: u32, half: u32, xOff: u32, tokStride: u32, headStride: u32, posOff: u32, ${to ? "yOff: u32, yTok: u32, yHead: u32, _p0: u32, _p1: u32" : "_p: u32"} }
@group(0) @binding(0) var<storage, ${to ? "read" : "read_write"}> X: array<f32>;
@group(0) @binding(1) var<storage, read> POS: array<u32>;
@group(0) @binding(2) var<storage, read> CS: array<f32>;
${to ? "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n@group(0) @binding(4) var<uniform> p: P;" : "@group(0) @binding(3) var<uniform> p: P;"}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x;
  let h = g.y;
  let t = g.z;
  if (i >= p.half || h >= p.heads || t >= p.n) { return; }
  let pos = POS[p.posOff + t];
  let c = CS[(pos * p.half + i) * 2u];
  let s = CS[(pos * p.half + i) * 2u + 1u];
  let o = p.xOff + t * p.tokStride + h * p.headStride + 2u * i;
  let x0 = X[o];
  let x1 = X[o + 1u];
  ${to ? "let y = p.yOff + t * p.yTok + h * p.yHead + 2u * i;\n  Y[y] = x0 * c - x1 * s;\n  Y[y + 1u] = x0 * s + x1 * c;" : "X[o] = x0 * c - x1 * s;\n  X[o + 1u] = x0 * s + x1 * c;"}
}`;
}

export const ROPE_WGSL = ropeWGSL(false);
export const ROPE_TO_WGSL = ropeWGSL(true);

/** G[t][j] = silu(G[t][j])·U[t][j] for t < n, j < width. */
export const SWIGLU_WGSL = /* wgsl */ `
struct P { n: u32, width: u32, gOff: u32, gStride: u32, uOff: u32, uStride: u32, gx: u32, _p: u32 }
@group(0) @binding(0) var<storage, read_write> G: array<f32>;
@group(0) @binding(1) var<storage, read> U: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let k = g.x + g.y * p.gx * 256u;
  if (k >= p.n * p.width) { return; }
  let t = k / p.width;
  let j = k % p.width;
  let gi = p.gOff + t * p.gStride + j;
  let a = G[gi];
  G[gi] = a / (1.0 + exp(-a)) * U[p.uOff + t * p.uStride + j];
}`;

/** Y[t][j] (+)= X[t][j] for t < n, j < width (residual add, strided copy). */
export const COPY_WGSL = (add: boolean): string => /* wgsl */ `
struct P { n: u32, width: u32, xOff: u32, xStride: u32, yOff: u32, yStride: u32, gx: u32, _p: u32 }
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let k = g.x + g.y * p.gx * 256u;
  if (k >= p.n * p.width) { return; }
  let t = k / p.width;
  let j = k % p.width;
  let yi = p.yOff + t * p.yStride + j;
  ${add ? "Y[yi] += X[p.xOff + t * p.xStride + j];" : "Y[yi] = X[p.xOff + t * p.xStride + j];"}
}`;

/** Row-wise softmax or log-softmax in place. */
export const SOFTMAX_WGSL = (log: boolean): string => /* wgsl */ `
struct P { n: u32, width: u32, off: u32, stride: u32 }
@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<uniform> p: P;
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let o = p.off + t * p.stride;
  var m = -3.0e38;
  for (var i = li; i < p.width; i += 256u) { m = max(m, X[o + i]); }
  red[li] = m;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) { if (li < s) { red[li] = max(red[li], red[li + s]); } workgroupBarrier(); }
  m = red[0];
  workgroupBarrier();
  var sum = 0.0;
  for (var i = li; i < p.width; i += 256u) { sum += exp(X[o + i] - m); }
  red[li] = sum;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) { if (li < s) { red[li] += red[li + s]; } workgroupBarrier(); }
  sum = red[0];
  ${
    log
      ? "let ls = m + log(sum);\n  for (var i = li; i < p.width; i += 256u) { X[o + i] = X[o + i] - ls; }"
      : "for (var i = li; i < p.width; i += 256u) { X[o + i] = exp(X[o + i] - m) / sum; }"
  }
}`;

/** Y[i] = X[i] for i < n, as u32 (bit patterns kept: META rows are integers, not floats). */
export const COPY_U32_WGSL = /* wgsl */ `
struct P { n: u32, _p0: u32, _p1: u32, _p2: u32 }
@group(0) @binding(0) var<storage, read> X: array<u32>;
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  if (g.x < p.n) { Y[g.x] = X[g.x]; }
}`;

/** Y[IDX[t]·yStride + yOff + j] = X[xOff + t·xStride + j]: rows to scattered places (latent cache writes). */
export const SCATTER_WGSL = /* wgsl */ `
struct P { n: u32, width: u32, xOff: u32, xStride: u32, yOff: u32, yStride: u32, gx: u32, _p: u32 }
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> IDX: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let k = g.x + g.y * p.gx * 256u;
  if (k >= p.n * p.width) { return; }
  let t = k / p.width;
  let j = k % p.width;
  Y[p.yOff + IDX[t] * p.yStride + j] = X[p.xOff + t * p.xStride + j];
}`;

/**
 * The MoE output added to the residual stream, then the next RMSNorm, in one kernel per token:
 * H[t] += Σ_k WTS[t·K + k]·YE[(t·K + k)·dim ..] (the weighted expert combine), Y[t] = H[t] / rms(H[t]) · G. With
 * `K` given (rows a multiple of 4, K ≤ 16): K baked in and its loop unrolled, YE, H, G and Y as vec4 and the token's
 * K weights in registers, so that a thread issues all of a column's loads at once. (A workgroup per token is a latency
 * chain at batch 1: with K a parameter the weights sat in a dynamically indexed array and every expert's load waited
 * for the one before.)
 */
export const ADD_NORM_WGSL = (K?: number): string => {
  const vec4 = K !== undefined;
  const ks = Array.from({ length: K ?? 0 }, (_, k) => k);
  return /* wgsl */ `
struct P { n: u32, dim: u32, K: u32, eps: f32 }
@group(0) @binding(0) var<storage, read> YE: array<${vec4 ? "vec4f" : "f32"}>;
@group(0) @binding(1) var<storage, read> WTS: array<f32>;
@group(0) @binding(2) var<storage, read_write> H: array<${vec4 ? "vec4f" : "f32"}>;
@group(0) @binding(3) var<storage, read> G: array<${vec4 ? "vec4f" : "f32"}>;
@group(0) @binding(4) var<storage, read_write> Y: array<${vec4 ? "vec4f" : "f32"}>;
@group(0) @binding(5) var<uniform> p: P;
${WG_TOTAL}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let w = p.dim${vec4 ? " / 4u" : ""};
  let ho = t * w;
  ${ks.map((k) => `let wk${k} = WTS[t * ${K}u + ${k}u];`).join(" ")}
  var ss = 0.0;
  for (var i = li; i < w; i += 256u) {
    ${vec4 ? `let s = ${ks.map((k) => `wk${k} * YE[(t * ${K}u + ${k}u) * w + i]`).join(" + ")};` : "var s = 0.0;\n    for (var k = 0u; k < p.K; k++) { s += WTS[t * p.K + k] * YE[(t * p.K + k) * w + i]; }"}
    let h = H[ho + i] + s;
    H[ho + i] = h;
    ss += ${vec4 ? "dot(h, h)" : "h * h"};
  }
  let inv = 1.0 / sqrt(total(li, ss) / f32(p.dim) + p.eps);
  for (var i = li; i < w; i += 256u) { Y[ho + i] = H[ho + i] * inv * G[i]; }
}`;
};

/** RMSNorm out of place (Y = X / rms(X) · G per row) over vec4s: rows, offsets and strides multiples of 4. */
export const RMS_NORM4_WGSL = /* wgsl */ `
struct P { n: u32, dim: u32, xOff: u32, xStride: u32, yOff: u32, yStride: u32, eps: f32, _p: u32 }
@group(0) @binding(0) var<storage, read> X: array<vec4f>;
@group(0) @binding(1) var<storage, read> G: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4f>;
@group(0) @binding(3) var<uniform> p: P;
${WG_TOTAL}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let d4 = p.dim / 4u;
  let xo = (p.xOff + t * p.xStride) / 4u;
  let yo = (p.yOff + t * p.yStride) / 4u;
  var ss = 0.0;
  for (var i = li; i < d4; i += 256u) { let v = X[xo + i]; ss += dot(v, v); }
  let inv = 1.0 / sqrt(total(li, ss) / f32(p.dim) + p.eps);
  for (var i = li; i < d4; i += 256u) { Y[yo + i] = X[xo + i] * inv * G[i]; }
}`;
