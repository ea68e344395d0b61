/** WGSL of the DSA indexer (GLM-DSA's sparse attention): its scores and the top-k selection. Pure generators. */
import { KEY_ROW_FN } from "../attention/attention.wgsl.js";

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
