/**
 * WGSL of the non-matrix kernels (f32 activations): RMSNorm / LayerNorm, interleaved rope from a cos/sin table,
 * SwiGLU, softmax / log-softmax, residual add and strided copies, the flash-style attention used both for absorbed
 * MLA decode (MQA over the latent cache) and prefill MHA (split over key chunks, then combined), MoE routing,
 * weighted expert combine, and the DSA indexer's scores and top-k.
 */

/** Sum of v over a 256-thread workgroup, returned to every thread (call in workgroup-uniform control flow). */
const WG_TOTAL = /* wgsl */ `
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
 * are latency-bound at small batches (on the H200, v2-lite batch 1: RMSNorm 3.8 µs, the MoE combine + RMSNorm 7.1 µs).
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

export const ATTN_CHUNK = 256;
export const ATTN_QMAX = 1024;

/** Attention parameter block (u32 words; scale as f32 bits). */
export const ATTN_PARAMS = [
  "nq",
  "heads",
  "d1",
  "d2",
  "dv",
  "qOff",
  "qStride",
  "qHead",
  "q2Off",
  "k1Off",
  "k1Stride",
  "k1Head",
  "k2Off",
  "k2Stride",
  "vOff",
  "vStride",
  "vHead",
  "oOff",
  "oStride",
  "oHead",
  "chunks",
  "scale",
  "pageSize",
] as const;

/**
 * Row of key u of a query whose META base is `base`: contiguous rows (base + u), or — with pages (p.pageSize > 0) —
 * through the query's page table, stored in SEL from `base` on (SEL[base + u / P] is the page of u).
 */
export const KEY_ROW_FN = /* wgsl */ `
fn keyRow(base: u32, u: u32) -> u32 {
  if (p.pageSize == 0u) { return base + u; }
  return SEL[base + u / p.pageSize] * p.pageSize + u % p.pageSize;
}`;

/**
 * One workgroup per (key chunk, head, query): scores s_j = scale·(q1·K1[u_j] + q2·K2[u_j]) over the chunk's keys,
 * softmax statistics, and Σ p_j V[u_j]. Keys of query i: META[i] = (row base, key count, selection offset, use
 * selection) — u_j = j, or SEL[selOff + j] under DSA. With one chunk the result is final; else PART gets
 * (max, sum, acc[dv]) per chunk for ATTN_COMBINE.
 */
export const ATTN_WGSL = (split: boolean): string => /* wgsl */ `
struct P { ${ATTN_PARAMS.map((k) => `${k}: ${k === "scale" ? "f32" : "u32"}`).join(", ")} }
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> K1: array<f32>;
@group(0) @binding(2) var<storage, read> K2: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read> META: array<u32>;
@group(0) @binding(5) var<storage, read> SEL: array<u32>;
@group(0) @binding(6) var<storage, read_write> O: array<f32>;
@group(0) @binding(7) var<uniform> p: P;
${KEY_ROW_FN}
var<workgroup> qs: array<f32, ${ATTN_QMAX}>;
var<workgroup> sc: array<f32, ${ATTN_CHUNK}>;
var<workgroup> red: array<f32, 64>;
var<workgroup> mt: vec4u;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let ch = wid.x;
  let h = wid.y;
  let i = wid.z;
  if (li == 0u) { mt = vec4u(META[4u * i], META[4u * i + 1u], META[4u * i + 2u], META[4u * i + 3u]); }
  let m4 = workgroupUniformLoad(&mt);
  let j0 = ch * ${ATTN_CHUNK}u;
  let nk = select(0u, min(${ATTN_CHUNK}u, m4.y - j0), m4.y > j0);
  let qo = p.qOff + i * p.qStride + h * p.qHead;
  for (var d = li; d < p.d1; d += 64u) { qs[d] = Q[qo + d]; }
  for (var d = li; d < p.d2; d += 64u) { qs[p.d1 + d] = Q[qo + p.q2Off + d]; }
  workgroupBarrier();
  var m = -3.0e38;
  for (var j = li; j < nk; j += 64u) {
    var u = j0 + j;
    if (m4.w != 0u) { u = SEL[m4.z + u]; }
    let row = keyRow(m4.x, u);
    let k1 = p.k1Off + row * p.k1Stride + h * p.k1Head;
    let k2 = p.k2Off + row * p.k2Stride;
    var s = 0.0;
    for (var d = 0u; d < p.d1; d++) { s += qs[d] * K1[k1 + d]; }
    for (var d = 0u; d < p.d2; d++) { s += qs[p.d1 + d] * K2[k2 + d]; }
    s *= p.scale;
    sc[j] = s;
    m = max(m, s);
  }
  red[li] = m;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) { if (li < s) { red[li] = max(red[li], red[li + s]); } workgroupBarrier(); }
  m = red[0];
  workgroupBarrier();
  var l = 0.0;
  for (var j = li; j < nk; j += 64u) { let e = exp(sc[j] - m); sc[j] = e; l += e; }
  red[li] = l;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) { if (li < s) { red[li] += red[li + s]; } workgroupBarrier(); }
  l = red[0];
  ${
    split
      ? `let po = ((i * p.heads + h) * p.chunks + ch) * (p.dv + 2u);
  if (li == 0u) { O[po] = select(-3.0e38, m, nk > 0u); O[po + 1u] = l; }
  for (var d = li; d < p.dv; d += 64u) {
    var a = 0.0;
    for (var j = 0u; j < nk; j++) {
      var u = j0 + j;
      if (m4.w != 0u) { u = SEL[m4.z + u]; }
      a += sc[j] * V[p.vOff + keyRow(m4.x, u) * p.vStride + h * p.vHead + d];
    }
    O[po + 2u + d] = a;
  }`
      : `let oo = p.oOff + i * p.oStride + h * p.oHead;
  for (var d = li; d < p.dv; d += 64u) {
    var a = 0.0;
    for (var j = 0u; j < nk; j++) {
      var u = j0 + j;
      if (m4.w != 0u) { u = SEL[m4.z + u]; }
      a += sc[j] * V[p.vOff + keyRow(m4.x, u) * p.vStride + h * p.vHead + d];
    }
    O[oo + d] = a / l;
  }`
  }
}`;

export const ATTN_COMBINE_WGSL = /* wgsl */ `
struct P { ${ATTN_PARAMS.map((k) => `${k}: ${k === "scale" ? "f32" : "u32"}`).join(", ")} }
@group(0) @binding(0) var<storage, read> PART: array<f32>;
@group(0) @binding(1) var<storage, read_write> O: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let h = wid.y;
  let i = wid.z;
  let base = (i * p.heads + h) * p.chunks;
  var M = -3.0e38;
  for (var c = 0u; c < p.chunks; c++) { M = max(M, PART[(base + c) * (p.dv + 2u)]); }
  var L = 0.0;
  for (var c = 0u; c < p.chunks; c++) { let o = (base + c) * (p.dv + 2u); L += exp(PART[o] - M) * PART[o + 1u]; }
  let oo = p.oOff + i * p.oStride + h * p.oHead;
  for (var d = li; d < p.dv; d += 64u) {
    var a = 0.0;
    for (var c = 0u; c < p.chunks; c++) { let o = (base + c) * (p.dv + 2u); a += exp(PART[o] - M) * PART[o + 2u + d]; }
    O[oo + d] = a / L;
  }
}`;

export const ROUTE_PARAMS = ["n", "E", "K", "nGroup", "nGroupUsed", "softmax", "groupMax", "norm", "hasBias", "scale", "zOff", "zStride"] as const;

/** The routing kernels' parameter block (ROUTE_PARAMS) and NEG (ROUTE_WGSL, wgsl-route.ts and wgsl-router.ts). */
export const ROUTE_STRUCT_WGSL = /* wgsl */ `
struct P { ${ROUTE_PARAMS.map((k) => `${k}: ${k === "scale" ? "f32" : "u32"}`).join(", ")} }
const NEG = -3.4028234e38;`;

/** The routing kernels' parameters and bindings (ROUTE_WGSL and wgsl-route.ts): logits, bias → ids, weights. */
export const ROUTE_BINDINGS_WGSL = /* wgsl */ `${ROUTE_STRUCT_WGSL}
@group(0) @binding(0) var<storage, read> Z: array<f32>;
@group(0) @binding(1) var<storage, read> BIAS: array<f32>;
@group(0) @binding(2) var<storage, read_write> IDS: array<u32>;
@group(0) @binding(3) var<storage, read_write> WTS: array<f32>;
@group(0) @binding(4) var<uniform> p: P;`;

/**
 * MoE routing, one 256-thread workgroup per token, thread e owning expert e (the model's route(): softmax/sigmoid,
 * bias, group masking, top-k, weights): softmax statistics by workgroup reductions, group scores one thread per group,
 * the kept groups and the final weights by thread 0, and each of the K picks one (value, lowest index) arg-max
 * reduction over the experts not yet taken — the same choices, ties included, as the sequential definition.
 */
export const ROUTE_WGSL = /* wgsl */ `${ROUTE_BINDINGS_WGSL}
const NONE = 0xffffffffu;
var<workgroup> pr: array<f32, 256>;
var<workgroup> sel: array<f32, 256>;
var<workgroup> rv: array<f32, 256>;
var<workgroup> gs: array<f32, 64>;
var<workgroup> keep: array<u32, 64>;
var<workgroup> picked: array<u32, 16>;
fn reduceMax(li: u32, v: f32) -> f32 {
  rv[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) { if (li < s) { rv[li] = max(rv[li], rv[li + s]); } workgroupBarrier(); }
  let r = rv[0];
  workgroupBarrier();
  return r;
}
fn reduceSum(li: u32, v: f32) -> f32 {
  rv[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) { if (li < s) { rv[li] += rv[li + s]; } workgroupBarrier(); }
  let r = rv[0];
  workgroupBarrier();
  return r;
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let zo = p.zOff + t * p.zStride;
  let on = li < p.E;
  var z = NEG;
  if (on) { z = Z[zo + li]; }
  var v = 0.0;
  if (p.softmax != 0u) {
    let m = reduceMax(li, z);
    let ex = select(0.0, exp(z - m), on);
    let s = reduceSum(li, ex);
    v = ex / s;
  } else {
    v = 1.0 / (1.0 + exp(-z));
  }
  pr[li] = v;
  var sv = v;
  if (on && p.hasBias != 0u) { sv = v + BIAS[li]; }
  sel[li] = sv;
  workgroupBarrier();
  if (p.nGroup > 1u && p.nGroupUsed < p.nGroup) {
    let per = p.E / p.nGroup;
    if (li < p.nGroup) {
      var a = NEG;
      var b = NEG;
      for (var e = li * per; e < (li + 1u) * per; e++) {
        let x = sel[e];
        if (x > a) { b = a; a = x; } else if (x > b) { b = x; }
      }
      gs[li] = select(a + select(0.0, b, per > 1u), a, p.groupMax != 0u);
      keep[li] = 0u;
    }
    workgroupBarrier();
    if (li == 0u) {
      for (var k = 0u; k < p.nGroupUsed; k++) {
        var best = 0u;
        var bv = NEG;
        var found = false;
        for (var gi = 0u; gi < p.nGroup; gi++) {
          if (keep[gi] == 0u && (!found || gs[gi] > bv)) { best = gi; bv = gs[gi]; found = true; }
        }
        keep[best] = 1u;
      }
    }
    workgroupBarrier();
    if (on && keep[li / per] == 0u) { sel[li] = NEG; }
    workgroupBarrier();
  }
  // top-K by rank: an expert's rank is the number of experts ahead of it (higher score, or equal with a lower id; NaN
  // counts as the lowest score), a strict order, so ranks 0..K-1 name the picks in order — one pass, no reduction
  // rounds per pick
  if (on) {
    let mine = select(NEG, sel[li], sel[li] == sel[li]);
    var rank = 0u;
    for (var e = 0u; e < p.E; e++) {
      let o = select(NEG, sel[e], sel[e] == sel[e]);
      if (o > mine || (o == mine && e < li)) { rank++; }
    }
    if (rank < p.K) { picked[rank] = li; }
  }
  workgroupBarrier();
  if (li == 0u) {
    var sum = 0.0;
    for (var k = 0u; k < p.K; k++) { sum += pr[picked[k]]; }
    for (var k = 0u; k < p.K; k++) {
      let e = picked[k];
      var w = pr[e];
      if (p.norm != 0u) { w = w / (sum + 1e-20); }
      IDS[t * p.K + k] = e;
      WTS[t * p.K + k] = w * p.scale;
    }
  }
}`;

/** Y[t][j] += Σ_k WTS[t·K + k]·YE[(t·K + k)·width + j] */
export const COMBINE_WGSL = /* wgsl */ `
struct P { n: u32, K: u32, width: u32, yOff: u32, yStride: u32, gx: u32, acc: u32, _p: u32 }
@group(0) @binding(0) var<storage, read> YE: array<f32>;
@group(0) @binding(1) var<storage, read> WTS: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let q = g.x + g.y * p.gx * 256u;
  if (q >= p.n * p.width) { return; }
  let t = q / p.width;
  let j = q % p.width;
  var s = 0.0;
  for (var k = 0u; k < p.K; k++) { s += WTS[t * p.K + k] * YE[(t * p.K + k) * p.width + j]; }
  let yi = p.yOff + t * p.yStride + j;
  if (p.acc != 0u) { Y[yi] += s; } else { Y[yi] = s; }
}`;

/**
 * DSA indexer scores: S[i][s] = Σ_j ReLU(q_ij·k_s)·w_ij·wScale for s ≤ pos_i (else −∞), one thread per (s, i).
 * Q [n × Hi × D] (roped), W [n × Hi], KEYS rows of D from row base META[i].x.
 */
export const DSA_SCORES_WGSL = /* wgsl */ `
struct P { n: u32, T: u32, Hi: u32, D: u32, wScale: f32, kOff: u32, pageSize: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> WI: array<f32>;
@group(0) @binding(2) var<storage, read> KEYS: array<f32>;
@group(0) @binding(3) var<storage, read> META: array<u32>;
@group(0) @binding(4) var<storage, read_write> S: array<f32>;
@group(0) @binding(5) var<storage, read> SEL: array<u32>;
@group(0) @binding(6) var<uniform> p: P;
${KEY_ROW_FN}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let s = g.x;
  let i = g.y;
  if (s >= p.T || i >= p.n) { return; }
  let nk = META[4u * i + 1u];
  if (s >= nk) { S[i * p.T + s] = -3.4028234e38; return; }
  let ko = p.kOff + keyRow(META[4u * i], s) * p.D;
  var total = 0.0;
  for (var j = 0u; j < p.Hi; j++) {
    let qo = (i * p.Hi + j) * p.D;
    var d = 0.0;
    for (var e = 0u; e < p.D; e++) { d += Q[qo + e] * KEYS[ko + e]; }
    if (d > 0.0) { total += d * WI[i * p.Hi + j] * p.wScale; }
  }
  S[i * p.T + s] = total;
}`;

/**
 * Top-k per query (one workgroup each): K rounds of (max value, lowest index) over S[i][0..nk), then the chosen
 * positions in ascending order into SEL[i·K ..]; META[i] becomes (base, K, i·K, 1). Queries with nk ≤ K keep dense
 * attention (META unchanged).
 */
export const TOPK_WGSL = /* wgsl */ `
struct P { n: u32, T: u32, K: u32, _p: u32 }
@group(0) @binding(0) var<storage, read_write> S: array<f32>;
@group(0) @binding(1) var<storage, read_write> META: array<u32>;
@group(0) @binding(2) var<storage, read_write> SEL: array<u32>;
@group(0) @binding(3) var<uniform> p: P;
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;
var<workgroup> nkw: u32;
const TAKEN = -3.4028234e38;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = wid.x;
  if (li == 0u) { nkw = META[4u * i + 1u]; }
  let nk = workgroupUniformLoad(&nkw);
  if (nk <= p.K) { return; }
  let so = i * p.T;
  for (var r = 0u; r < p.K; r++) {
    var v = TAKEN;
    var x = 0xffffffffu;
    for (var s = li; s < nk; s += 256u) {
      let sv = S[so + s];
      if (bitcast<u32>(sv) != 0xff7fffffu && (x == 0xffffffffu || sv > v)) { v = sv; x = s; }
    }
    bv[li] = v;
    bi[li] = x;
    workgroupBarrier();
    for (var st = 128u; st > 0u; st >>= 1u) {
      if (li < st) {
        let ov = bv[li + st];
        let oi = bi[li + st];
        if (oi != 0xffffffffu && (bi[li] == 0xffffffffu || ov > bv[li] || (ov == bv[li] && oi < bi[li]))) { bv[li] = ov; bi[li] = oi; }
      }
      workgroupBarrier();
    }
    if (li == 0u) { S[so + bi[0]] = bitcast<f32>(0xff7fffffu); }
    workgroupBarrier();
  }
  if (li == 0u) {
    var k = 0u;
    for (var s = 0u; s < nk; s++) {
      if (bitcast<u32>(S[so + s]) == 0xff7fffffu) { SEL[i * p.K + k] = s; k++; }
    }
    META[4u * i + 1u] = p.K;
    META[4u * i + 2u] = i * p.K;
    META[4u * i + 3u] = 1u;
  }
}`;

/** Y[IDX[t]·yStride + yOff + j] = X[xOff + t·xStride + j]: rows to scattered places (latent cache writes). */
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

/** Keys each subgroup scores per iteration of the subgroup attention kernel (their loads issued together). */
const ATTN_SG_KEYS = 2;

/**
 * Key groups of the subgroup attention kernel's weighted sum: as many as fit 16 KB of partial sums (at most 8).
 * Measured on the H200 (v2-lite, 16 heads): when every thread walked all of a chunk's keys for its output columns,
 * four loads at a time, the sum was a chain of dependent L2 round trips — 5.9 µs at 16 keys, 18.2 µs per layer in a
 * step at 17–50 keys.
 */
export function attnKeyGroups(dv: number): number {
  let g = 8;
  while (g > 1 && g * dv > 4096) g /= 2;
  return g;
}

/**
 * Attention for devices with a fixed subgroup size `sg`: same bindings, parameters, grid and results as ATTN_WGSL,
 * with 256 threads per (key chunk, head, query) and the widths (d1, d2, dv) compiled in. Each subgroup scores
 * ATTN_SG_KEYS keys per iteration, its lanes reading neighbouring elements of the key rows (unrolled, one vector
 * subgroupAdd for the keys). For the weighted sum the threads form `attnKeyGroups(dv)` groups, each summing p·V over
 * every G-th key of the chunk for all dv columns (a thread's columns `256/G` apart, two keys' loads in flight), and
 * the groups' partial sums meet in workgroup memory: a thread waits for ~nk/(2G) rounds of loads instead of nk/4.
 */
export function attnSubgroupWGSL(d1: number, d2: number, dv: number, sg: number, split: boolean): string {
  const WG = 256;
  const NSG = WG / sg;
  const KS = ATTN_SG_KEYS;
  const G = attnKeyGroups(dv);
  const TPG = WG / G; // threads per key group
  const DPT = Math.ceil(dv / TPG); // output columns per thread
  const dot = (n: number, q: string, k: string, kb: string, s: string): string => {
    const it = Math.ceil(n / sg);
    if (it === 0) return "";
    const guard = n % sg !== 0;
    return `for (var i = 0u; i < ${it}u; i++) { let d = lane + i * ${sg}u; ${guard ? `if (d < ${n}u) { ` : ""}${s} += qs[${q} + d] * ${k}[${kb} + d];${guard ? " }" : ""} }`;
  };
  const keys = Array.from({ length: KS }, (_, k) => k);
  const colGuard = DPT * TPG !== dv;
  // p·V of key slot `j` into the thread's accumulators
  const pv = (j: string): string =>
    `{ let pj = sc[${j}]; let vb = vh + vr[${j}] * p.vStride; for (var c = 0u; c < ${DPT}u; c++) { let d = lt + c * ${TPG}u; ${colGuard ? `if (d < ${dv}u) { ` : ""}acc[c] += pj * V[vb + d];${colGuard ? " }" : ""} } }`;
  return /* wgsl */ `enable subgroups;
struct P { ${ATTN_PARAMS.map((k) => `${k}: ${k === "scale" ? "f32" : "u32"}`).join(", ")} }
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> K1: array<f32>;
@group(0) @binding(2) var<storage, read> K2: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read> META: array<u32>;
@group(0) @binding(5) var<storage, read> SEL: array<u32>;
@group(0) @binding(6) var<storage, read_write> O: array<f32>;
@group(0) @binding(7) var<uniform> p: P;
${KEY_ROW_FN}
var<workgroup> qs: array<f32, ${Math.max(1, d1 + d2)}>;
var<workgroup> sc: array<f32, ${ATTN_CHUNK}>;
var<workgroup> vr: array<u32, ${ATTN_CHUNK}>;
var<workgroup> red: array<f32, ${NSG}>;
${G > 1 ? `var<workgroup> part: array<f32, ${G * dv}>;` : ""}
var<workgroup> mt: vec4u;
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let ch = wid.x;
  let h = wid.y;
  let i = wid.z;
  if (li == 0u) { mt = vec4u(META[4u * i], META[4u * i + 1u], META[4u * i + 2u], META[4u * i + 3u]); }
  let m4 = workgroupUniformLoad(&mt);
  let j0 = ch * ${ATTN_CHUNK}u;
  let nk = select(0u, min(${ATTN_CHUNK}u, m4.y - j0), m4.y > j0);
  let qo = p.qOff + i * p.qStride + h * p.qHead;
  for (var d = li; d < ${d1}u; d += ${WG}u) { qs[d] = Q[qo + d]; }
  for (var d = li; d < ${d2}u; d += ${WG}u) { qs[${d1}u + d] = Q[qo + p.q2Off + d]; }
  workgroupBarrier();
  let sgi = li / ${sg}u;
  let lane = li % ${sg}u;
  var m = -3.0e38;
  for (var jb = 0u; jb < nk; jb += ${NSG * KS}u) {
${keys
  .map(
    (k) => `    let kj${k} = jb + ${k * NSG}u + sgi;
    var u${k} = j0 + min(kj${k}, nk - 1u);
    if (m4.w != 0u) { u${k} = SEL[m4.z + u${k}]; }
    let row${k} = keyRow(m4.x, u${k});
    var s${k} = 0.0;
    {
      let kb = p.k1Off + row${k} * p.k1Stride + h * p.k1Head;
      ${dot(d1, "0u", "K1", "kb", `s${k}`)}
    }
    {
      let kb = p.k2Off + row${k} * p.k2Stride;
      ${dot(d2, `${d1}u`, "K2", "kb", `s${k}`)}
    }`,
  )
  .join("\n")}
    let s = subgroupAdd(vec${KS}f(${keys.map((k) => `s${k}`).join(", ")})) * p.scale;
${keys
  .map(
    (k) => `    if (kj${k} < nk) {
      if (lane == 0u) { sc[kj${k}] = s[${k}]; vr[kj${k}] = row${k}; }
      m = max(m, s[${k}]);
    }`,
  )
  .join("\n")}
  }
  if (lane == 0u) { red[sgi] = m; }
  workgroupBarrier();
  m = red[0];
  for (var k = 1u; k < ${NSG}u; k++) { m = max(m, red[k]); }
  workgroupBarrier();
  var l = 0.0;
  for (var j = li; j < nk; j += ${WG}u) { let e = exp(sc[j] - m); sc[j] = e; l += e; }
  l = subgroupAdd(l);
  if (lane == 0u) { red[sgi] = l; }
  workgroupBarrier();
  l = 0.0;
  for (var k = 0u; k < ${NSG}u; k++) { l += red[k]; }
  let vh = p.vOff + h * p.vHead;
  let kg = li / ${TPG}u;
  let lt = li % ${TPG}u;
  var acc: array<f32, ${DPT}>;
  var j = kg;
  for (; j + ${G}u < nk; j += ${2 * G}u) {
    ${pv("j")}
    ${pv(`j + ${G}u`)}
  }
  if (j < nk) ${pv("j")}
  ${split ? `let po = ((i * p.heads + h) * p.chunks + ch) * (p.dv + 2u);
  if (li == 0u) { O[po] = select(-3.0e38, m, nk > 0u); O[po + 1u] = l; }` : `let oo = p.oOff + i * p.oStride + h * p.oHead;`}
${
  G > 1
    ? `  for (var c = 0u; c < ${DPT}u; c++) { let d = lt + c * ${TPG}u; ${colGuard ? `if (d < ${dv}u) { ` : ""}part[kg * ${dv}u + d] = acc[c];${colGuard ? " }" : ""} }
  workgroupBarrier();
  for (var d = li; d < ${dv}u; d += ${WG}u) {
    var a = 0.0;
    for (var g = 0u; g < ${G}u; g++) { a += part[g * ${dv}u + d]; }
    ${split ? "O[po + 2u + d] = a;" : "O[oo + d] = a / l;"}
  }`
    : `  for (var c = 0u; c < ${DPT}u; c++) { let d = lt + c * ${TPG}u; ${colGuard ? `if (d < ${dv}u) { ` : ""}${split ? "O[po + 2u + d] = acc[c];" : "O[oo + d] = acc[c] / l;"}${colGuard ? " }" : ""} }`
}
}`;
}

/**
 * The latent cache write of n tokens (RMSNorm(c)·g and rope(k_pe) at their cache rows) from rows [.. | c | k_pe ..] of KV
 * (token stride `stride`, c at `kvOff`), one workgroup per token, with one more independent op in workgroups n..2n−1 of
 * the same dispatch: "qnorm" applies the q-LoRA RMSNorm in place to the first qDim values of each row (the latent beside
 * c); "qrope" ropes every head's q_pe (at qpOff + h·qHead in the row) into the absorbed query rows QY (ropeTo's layout).
 */
export const KV_CACHE_WGSL = (extra: "none" | "qnorm" | "qrope"): string => /* wgsl */ `
struct P { n: u32, L: u32, half: u32, stride: u32, eps: f32, qDim: u32, kvOff: u32, heads: u32, qpOff: u32, qHead: u32, yOff: u32, yTok: u32, yHead: u32, _p0: u32, _p1: u32, _p2: u32 }
@group(0) @binding(0) var<storage, ${extra === "qnorm" ? "read_write" : "read"}> KV: array<f32>;
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read> POS: array<u32>;
@group(0) @binding(3) var<storage, read> CS: array<f32>;
@group(0) @binding(4) var<storage, read> IDX: array<u32>;
@group(0) @binding(5) var<storage, read_write> CC: array<f32>;
@group(0) @binding(6) var<storage, read_write> CK: array<f32>;
${extra === "qnorm" ? "@group(0) @binding(7) var<storage, read> QG: array<f32>;" : extra === "qrope" ? "@group(0) @binding(7) var<storage, read_write> QY: array<f32>;" : ""}
@group(0) @binding(${extra === "none" ? 7 : 8}) var<uniform> p: P;
${WG_TOTAL}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
${extra === "qnorm" ? `  if (t >= p.n && t < 2u * p.n) {
    // workgroups n..2n-1: the q-LoRA latent's RMSNorm in place (independent of the cache write: one dispatch for both)
    let qo = (t - p.n) * p.stride;
    var qs = 0.0;
    for (var i = li; i < p.qDim; i += 256u) { let v = KV[qo + i]; qs += v * v; }
    let qinv = 1.0 / sqrt(total(li, qs) / f32(p.qDim) + p.eps);
    for (var i = li; i < p.qDim; i += 256u) { KV[qo + i] = KV[qo + i] * qinv * QG[i]; }
    return;
  }` : ""}
${extra === "qrope" ? `  if (t >= p.n && t < 2u * p.n) {
    // workgroups n..2n-1: every head's q_pe of token t-n roped into the absorbed query rows (QY), one dispatch with the write
    let tq = t - p.n;
    let pq = POS[tq];
    for (var k = li; k < p.heads * p.half; k += 256u) {
      let hh = k / p.half;
      let i = k % p.half;
      let c = CS[(pq * p.half + i) * 2u];
      let s = CS[(pq * p.half + i) * 2u + 1u];
      let xo = tq * p.stride + p.qpOff + hh * p.qHead + 2u * i;
      let yo = p.yOff + tq * p.yTok + hh * p.yHead + 2u * i;
      let x0 = KV[xo];
      let x1 = KV[xo + 1u];
      QY[yo] = x0 * c - x1 * s;
      QY[yo + 1u] = x0 * s + x1 * c;
    }
    return;
  }` : ""}
  if (t >= p.n) { return; }
  let xo = p.kvOff + t * p.stride;
  var ss = 0.0;
  for (var i = li; i < p.L; i += 256u) { let v = KV[xo + i]; ss += v * v; }
  let inv = 1.0 / sqrt(total(li, ss) / f32(p.L) + p.eps);
  let row = IDX[t];
  for (var i = li; i < p.L; i += 256u) { CC[row * p.L + i] = KV[xo + i] * inv * G[i]; }
  let pos = POS[t];
  let R = 2u * p.half;
  for (var i = li; i < p.half; i += 256u) {
    let c = CS[(pos * p.half + i) * 2u];
    let s = CS[(pos * p.half + i) * 2u + 1u];
    let x0 = KV[xo + p.L + 2u * i];
    let x1 = KV[xo + p.L + 2u * i + 1u];
    CK[row * R + 2u * i] = x0 * c - x1 * s;
    CK[row * R + 2u * i + 1u] = x0 * s + x1 * c;
  }
}`;

/** Elements of a row one workgroup of the argmax kernel scans (256 threads × 16 independent loads each). */
export const ARGMAX_SLICE = 4096;

/**
 * The argmax kernels' comparisons (argmaxWGSL, and wgsl-sample.ts's draws): `better` ranks (value, index) pairs —
 * larger first, ties to the lower index, NaN never ahead, an empty slot (NONE) always behind — and `term` is
 * exp(x − m) as a log-sum-exp adds it.
 */
/** A 256-thread workgroup's `sum` totalled into bs[0] (workgroup memory bs: array<f32, 256>), every thread taking part. */
export const REDUCE_SUM_WGSL = /* wgsl */ `  bs[li] = sum;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) { bs[li] += bs[li + s]; }
    workgroupBarrier();
  }`;

export const ARGMAX_FNS = /* wgsl */ `const NONE = 0xffffffffu;
// NaN by its bits: a compiler may assume that float comparisons never see NaN
fn isNan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
fn better(v: f32, i: u32, w: f32, j: u32) -> bool {
  // is (v, i) ahead of (w, j)? NaN is never ahead; an empty slot (index NONE) always behind
  if (i == NONE || isNan(v)) { return false; }
  if (j == NONE) { return true; }
  return v > w || (v == w && i < j);
}
fn term(x: f32, m: f32) -> f32 {
  // exp(x − m) for x ≤ m: NaN adds nothing; x == m adds 1 (also when m is ±Infinity, where x − m is NaN)
  if (isNan(x)) { return 0.0; }
  if (x == m) { return 1.0; }
  return exp(max(x - m, -104.0));
}`;

/**
 * Greedy sampling on the GPU: IDS[t] = argmax of row t (X[xOff + t·xStride ..][0..width)), lowest index on ties, NaN
 * never chosen (the CPU sampler's argmax), and — with `logprobs` (merge) — LP[t] = that token's log-probability,
 * log_softmax of the row at it = −log Σ_k exp(x_k − max). `slices`: workgroup (g, t) takes elements
 * [g·SLICE, (g+1)·SLICE) of row t, each thread 16 loads issued together, and writes its best (value bits, index) and
 * the slice's Σ exp(x − slice max) to PART[t·G + g] (G = p.slices); `merge`: one workgroup per row picks the best of
 * the row's G candidates and rescales their sums to the row's max (log-sum-exp). A 102400-wide row is then 25
 * workgroups of a few round trips to memory each, not one workgroup of 400 dependent ones (145 µs on the H200).
 *
 * Non-finite logits: the host sampler rejects NaN, +Infinity and rows of only −Infinity with a UsageError; here the
 * argmax still picks an id (NaN never chosen; a row of only NaN gives token 0) and LP[t] is NaN, so that the caller can
 * refuse the row as the host would (the generation loop does).
 */
export function argmaxWGSL(stage: "slices" | "merge", logprobs = false): string {
  const CH = ARGMAX_SLICE / 256;
  const scan =
    stage === "slices"
      ? `  let xo = p.xOff + t * p.xStride;
  let k0 = wid.x * ${ARGMAX_SLICE}u + li;
  var w: array<f32, ${CH}>;
  for (var c = 0u; c < ${CH}u; c++) { w[c] = X[xo + min(k0 + 256u * c, p.width - 1u)]; }
  for (var c = 0u; c < ${CH}u; c++) {
    let k = k0 + 256u * c;
    if (k < p.width && better(w[c], k, v, i)) { v = w[c]; i = k; }
    // NaN or +Infinity: the host sampler rejects such logits; the merge reports the row's logprob as NaN
    if (k < p.width && (isNan(w[c]) || bitcast<u32>(w[c]) == 0x7f800000u)) { atomicOr(&bad, 1u); }
  }`
      : `  for (var g = li; g < p.slices; g += 256u) {
    let c = PART[t * p.slices + g];
    if (better(bitcast<f32>(c.x), c.y, v, i)) { v = bitcast<f32>(c.x); i = c.y; }
    if (c.w != 0u) { atomicOr(&bad, 1u); }
  }`;
  // Σ exp(x − m) over this thread's share, m = the max of the slice (slices) or of the row (merge): after the argmax
  // reduction (which ends with a barrier), bv[0] holds it, bi[0] == NONE when the slice or row has no non-NaN entry
  const sum =
    stage === "slices"
      ? `  var sum = 0.0;
  if (bi[0] != NONE) {
    let m = bv[0];
    for (var c = 0u; c < ${CH}u; c++) {
      let k = k0 + 256u * c;
      if (k < p.width) { sum += term(w[c], m); }
    }
  }`
      : `  var sum = 0.0;
  if (bi[0] != NONE) {
    let m = bv[0];
    for (var g = li; g < p.slices; g += 256u) {
      let c = PART[t * p.slices + g];
      // a slice without a non-NaN entry holds sum 0 (and index NONE); its max is then meaningless
      if (c.y != NONE) { sum += bitcast<f32>(c.z) * term(bitcast<f32>(c.x), m); }
    }
  }`;
  const write =
    stage === "slices"
      ? `PART[t * p.slices + wid.x] = vec4u(bitcast<u32>(bv[0]), bi[0], bitcast<u32>(bs[0]), atomicLoad(&bad));`
      : `IDS[t] = select(bi[0], 0u, bi[0] == NONE);${logprobs ? "\n    // NaN where the host sampler would refuse the row: a NaN or +Infinity logit, or no logit above -Infinity\n    LP[t] = select(bitcast<u32>(-log(bs[0])), 0x7fc00000u, bi[0] == NONE || atomicLoad(&bad) != 0u || bitcast<u32>(bv[0]) == 0xff800000u);" : ""}`;
  const bindings =
    stage === "slices"
      ? "@group(0) @binding(0) var<storage, read> X: array<f32>;\n@group(0) @binding(1) var<storage, read_write> PART: array<vec4u>;\n@group(0) @binding(2) var<uniform> p: P;"
      : "@group(0) @binding(0) var<storage, read> PART: array<vec4u>;\n@group(0) @binding(1) var<storage, read_write> IDS: array<u32>;\n" +
        (logprobs ? "@group(0) @binding(2) var<storage, read_write> LP: array<u32>;\n@group(0) @binding(3) var<uniform> p: P;" : "@group(0) @binding(2) var<uniform> p: P;");
  const withSum = stage === "slices" || logprobs;
  return /* wgsl */ `
struct P { n: u32, width: u32, xOff: u32, xStride: u32, slices: u32, _a: u32, _b: u32, _c: u32 }
${bindings}
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;
${withSum ? "var<workgroup> bs: array<f32, 256>;" : ""}
var<workgroup> bad: atomic<u32>;
${ARGMAX_FNS}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = ${stage === "slices" ? "wid.y + wid.z * 65535u" : "wid.x + wid.y * 65535u"};
  if (t >= p.n) { return; }
  if (li == 0u) { atomicStore(&bad, 0u); }
  workgroupBarrier();
  var v = 0.0;
  var i = NONE;
${scan}
  bv[li] = v;
  bi[li] = i;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s && better(bv[li + s], bi[li + s], bv[li], bi[li])) { bv[li] = bv[li + s]; bi[li] = bi[li + s]; }
    workgroupBarrier();
  }
${withSum ? `${sum}
${REDUCE_SUM_WGSL}
` : ""}  // a row of NaN only: token 0, as the CPU argmax
  if (li == 0u) {
    ${write}
  }
}`;
}

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
