/** WGSL of the DSA indexer (GLM-DSA's sparse attention): its scores and the top-k selection. Pure generators. */
import { KEY_ROW_FN } from "../attention/attention.wgsl.js";

/**
 * DSA indexer scores as DSA_SCORES_WGSL computes them, one thread per (s, i) looping over heads and depth (each
 * thread reads its key row once per head): the alternative of tune.dsaScores = 0.
 */
export const DSA_SCORES_THREAD_WGSL = /* wgsl */ `
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

/** Keys per workgroup of the DSA scores kernel, and head groups: its 256 threads are (key, head group) pairs. */
export const SCORES_KEYS = 32;
export const SCORES_HEAD_GROUPS = 8;

/**
 * DSA indexer scores: S[i][s] = Σ_j ReLU(q_ij·k_s)·w_ij·wScale for s < nk_i (else −∞). Q [n × Hi × D] (roped),
 * W [n × Hi], KEYS rows of D from row base META[i].x. One workgroup per (block of SCORES_KEYS keys, query): the
 * block's key rows and the query's heads go through workgroup memory in depth chunks of 32 (each key row read from
 * memory once, coalesced, instead of once per head by one thread), every thread keeps the dot products of one key
 * with `headsPerThread` heads, and one thread per key sums the heads in order — the same f32 sums in the same order
 * as one thread per (s, i) looping over heads and depth.
 */
export const DSA_SCORES_WGSL = (headsPerThread: number): string => /* wgsl */ `
struct P { n: u32, T: u32, Hi: u32, D: u32, wScale: f32, kOff: u32, pageSize: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> WI: array<f32>;
@group(0) @binding(2) var<storage, read> KEYS: array<f32>;
@group(0) @binding(3) var<storage, read> META: array<u32>;
@group(0) @binding(4) var<storage, read_write> S: array<f32>;
@group(0) @binding(5) var<storage, read> SEL: array<u32>;
@group(0) @binding(6) var<uniform> p: P;
${KEY_ROW_FN}
const KB = ${SCORES_KEYS}u;
const HG = ${SCORES_HEAD_GROUPS}u;
const HPT = ${headsPerThread}u;
const EC = 32u;
const MASKED = -3.4028234e38;
// the depth chunk of every head [head][e]; after the last chunk, the dot products [key][head] (rows padded by one
// against bank conflicts)
var<workgroup> qs: array<f32, ${Math.max(SCORES_HEAD_GROUPS * headsPerThread * 32, SCORES_KEYS * (SCORES_HEAD_GROUPS * headsPerThread + 1))}>;
// the depth chunk of the block's keys [key][e], rows padded by one
var<workgroup> ks: array<f32, ${SCORES_KEYS * 33}>;
var<workgroup> mt: vec2u;
@compute @workgroup_size(${SCORES_KEYS * SCORES_HEAD_GROUPS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = wid.y;
  let s0 = wid.x * KB;
  if (li == 0u) { mt = vec2u(META[4u * i], META[4u * i + 1u]); }
  let m = workgroupUniformLoad(&mt);
  let nk = m.y;
  let kl = li % KB;
  let g = li / KB;
  let s = s0 + kl;
  if (s0 >= nk) {
    if (g == 0u && s < p.T) { S[i * p.T + s] = MASKED; }
    return;
  }
  var acc: array<f32, HPT>;
  for (var e0 = 0u; e0 < p.D; e0 += EC) {
    for (var x = li; x < p.Hi * EC; x += KB * HG) {
      let e = e0 + x % EC;
      var v = 0.0;
      if (e < p.D) { v = Q[(i * p.Hi + x / EC) * p.D + e]; }
      qs[x] = v;
    }
    for (var x = li; x < KB * EC; x += KB * HG) {
      let r = x / EC;
      let e = e0 + x % EC;
      var v = 0.0;
      if (s0 + r < nk && e < p.D) { v = KEYS[p.kOff + keyRow(m.x, s0 + r) * p.D + e]; }
      ks[r * (EC + 1u) + x % EC] = v;
    }
    workgroupBarrier();
    let ne = min(EC, p.D - e0);
    for (var e = 0u; e < ne; e++) {
      let kv = ks[kl * (EC + 1u) + e];
      for (var h = 0u; h < HPT; h++) { acc[h] += qs[(g * HPT + h) * EC + e] * kv; }
    }
    workgroupBarrier();
  }
  for (var h = 0u; h < HPT; h++) {
    let j = g * HPT + h;
    if (j < p.Hi) { qs[kl * (HG * HPT + 1u) + j] = acc[h]; }
  }
  workgroupBarrier();
  if (g == 0u && s < p.T) {
    if (s >= nk) {
      S[i * p.T + s] = MASKED;
    } else {
      var total = 0.0;
      for (var j = 0u; j < p.Hi; j++) {
        let d = qs[kl * (HG * HPT + 1u) + j];
        if (d > 0.0) { total += d * WI[i * p.Hi + j] * p.wScale; }
      }
      S[i * p.T + s] = total;
    }
  }
}`;

/** Threads of the top-k workgroup (one workgroup per query; at decode it is the only one running). */
export const TOPK_THREADS = 256;

/**
 * In-place inclusive scan of `arr` (TOPK_THREADS u32 in workgroup memory, one per thread) over the lower indices
 * (prefix sums) or the higher ones (suffix sums), Hillis–Steele: log2(threads) steps of two barriers.
 */
function scanWgsl(arr: string, fromHigh: boolean): string {
  const other = fromHigh ? `li + st < ${TOPK_THREADS}u` : "li >= st";
  const at = fromHigh ? "li + st" : "li - st";
  return /* wgsl */ `
  for (var st = 1u; st < ${TOPK_THREADS}u; st <<= 1u) {
    var v = ${arr}[li];
    if (${other}) { v += ${arr}[${at}]; }
    workgroupBarrier();
    ${arr}[li] = v;
    workgroupBarrier();
  }`;
}

/**
 * Top-k per query by radix select (one workgroup each): scores map to order-preserving u32 keys; four passes of a
 * 256-bin histogram over the key's bytes (high to low), each restricted to the keys matching the bytes fixed so far,
 * find the K-th largest key `thr` and how many keys equal to it are taken (`eqTake`). Then every thread compacts a
 * contiguous chunk of positions: those with key > thr, and those with key == thr while the ones at lower positions
 * (a workgroup prefix sum) have not used up eqTake — so ties go to the lowest position and SEL[i·K ..] comes out in
 * ascending position order. Masked scores (−3.4028234e38) are never selected. META[i] becomes (base, K, i·K, 1);
 * queries with nk ≤ K keep dense attention (META unchanged).
 */
export const TOPK_WGSL = /* wgsl */ `
struct P { n: u32, T: u32, K: u32, _p: u32 }
@group(0) @binding(0) var<storage, read> S: array<f32>;
@group(0) @binding(1) var<storage, read_write> META: array<u32>;
@group(0) @binding(2) var<storage, read_write> SEL: array<u32>;
@group(0) @binding(3) var<uniform> p: P;
const WG = ${TOPK_THREADS}u;
const MASKED = 0xff7fffffu;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> sa: array<u32, ${TOPK_THREADS}>;
var<workgroup> sb: array<u32, ${TOPK_THREADS}>;
// (key bytes fixed so far, how many keys still to take among those matching them)
var<workgroup> pick: vec2u;
var<workgroup> nkw: u32;
// larger float → larger key; −0 and +0 are the same score (as the reference's comparison has them)
fn sortKey(bits: u32) -> u32 {
  let b = select(bits, 0u, bits == 0x80000000u);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
@compute @workgroup_size(${TOPK_THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = wid.x;
  if (li == 0u) { nkw = META[4u * i + 1u]; pick = vec2u(0u, p.K); }
  let nk = workgroupUniformLoad(&nkw);
  if (nk <= p.K) { return; }
  let so = i * p.T;
  for (var digit = 0u; digit < 4u; digit++) {
    let shift = 24u - 8u * digit;
    let fixedMask = select(0xffffffffu << ((shift + 8u) % 32u), 0u, digit == 0u);
    if (li < 256u) { atomicStore(&hist[li], 0u); }
    let pk = workgroupUniformLoad(&pick);
    for (var s = li; s < nk; s += WG) {
      let b = bitcast<u32>(S[so + s]);
      if (b == MASKED) { continue; }
      let key = sortKey(b);
      if ((key & fixedMask) == pk.x) { atomicAdd(&hist[(key >> shift) & 255u], 1u); }
    }
    workgroupBarrier();
    sa[li] = select(0u, atomicLoad(&hist[li]), li < 256u);
    workgroupBarrier();
    ${scanWgsl("sa", true)}
    // sa[b] = how many candidates fall in bins ≥ b: bin b holds the pk.y-th largest when sa[b] ≥ pk.y > sa[b + 1]
    if (li < 256u) {
      var above = 0u;
      if (li < 255u) { above = sa[li + 1u]; }
      if (sa[li] >= pk.y && above < pk.y) { pick = vec2u(pk.x | (li << shift), pk.y - above); }
    }
    // fewer unmasked scores than K: take them all (threshold 0, every tie)
    if (digit == 0u && li == 0u && sa[0] < pk.y) { pick = vec2u(0u, 0xffffffffu); }
  }
  let fin = workgroupUniformLoad(&pick);
  let thr = fin.x;
  let eqTake = fin.y;
  let chunk = (nk + WG - 1u) / WG;
  let s0 = min(li * chunk, nk);
  let s1 = min(s0 + chunk, nk);
  var gt = 0u;
  var eq = 0u;
  for (var s = s0; s < s1; s++) {
    let b = bitcast<u32>(S[so + s]);
    if (b == MASKED) { continue; }
    let key = sortKey(b);
    if (key > thr) { gt++; } else if (key == thr) { eq++; }
  }
  sa[li] = eq;
  workgroupBarrier();
  ${scanWgsl("sa", false)}
  let eqBefore = sa[li] - eq;
  let eqMine = min(eq, eqTake - min(eqTake, eqBefore));
  let count = gt + eqMine;
  sb[li] = count;
  workgroupBarrier();
  ${scanWgsl("sb", false)}
  var o = i * p.K + sb[li] - count;
  var eqLeft = eqMine;
  for (var s = s0; s < s1; s++) {
    let b = bitcast<u32>(S[so + s]);
    if (b == MASKED) { continue; }
    let key = sortKey(b);
    if (key > thr || (key == thr && eqLeft > 0u)) {
      if (key == thr) { eqLeft--; }
      SEL[o] = s;
      o++;
    }
  }
  if (li == 0u) {
    META[4u * i + 1u] = p.K;
    META[4u * i + 2u] = i * p.K;
    META[4u * i + 3u] = 1u;
  }
}`;
