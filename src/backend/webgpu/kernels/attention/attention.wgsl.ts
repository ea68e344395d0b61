/**
 * WGSL of the attention kernels other than the wide and fused ones: the flash-style attention used both for absorbed
 * MLA decode (MQA over the latent cache) and prefill MHA (split over key chunks, then combined), its subgroup form, and
 * the latent cache write (RMSNorm of c, rope of k_pe). Pure generators: strings in, strings out.
 */
import { WG_TOTAL } from "../rows/rows.wgsl.js";

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

/** Keys each subgroup scores per iteration of the subgroup attention kernel (their loads issued together). */
const ATTN_SG_KEYS = 2;

/**
 * Key groups of the subgroup attention kernel's weighted sum: as many as fit 16 KB of partial sums (at most 8).
 * Measured on a large GPU (v2-lite, 16 heads): when every thread walked all of a chunk's keys for its output columns,
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
  ${
    split
      ? `let po = ((i * p.heads + h) * p.chunks + ch) * (p.dv + 2u);
  if (li == 0u) { O[po] = select(-3.0e38, m, nk > 0u); O[po + 1u] = l; }`
      : `let oo = p.oOff + i * p.oStride + h * p.oHead;`
  }
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
${
  extra === "qnorm"
    ? `  if (t >= p.n && t < 2u * p.n) {
    // workgroups n..2n-1: the q-LoRA latent's RMSNorm in place (independent of the cache write: one dispatch for both)
    let qo = (t - p.n) * p.stride;
    var qs = 0.0;
    for (var i = li; i < p.qDim; i += 256u) { let v = KV[qo + i]; qs += v * v; }
    let qinv = 1.0 / sqrt(total(li, qs) / f32(p.qDim) + p.eps);
    for (var i = li; i < p.qDim; i += 256u) { KV[qo + i] = KV[qo + i] * qinv * QG[i]; }
    return;
  }`
    : ""
}
${
  extra === "qrope"
    ? `  if (t >= p.n && t < 2u * p.n) {
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
  }`
    : ""
}
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
