/**
 * WGSL of the MoE kernels beside the subgroup routing (route.wgsl.ts): the routing parameter block and bindings they
 * share, the 256-thread workgroup routing kernel and the weighted expert combine. Pure generators.
 */

export const ROUTE_PARAMS = [
  "n",
  "E",
  "K",
  "nGroup",
  "nGroupUsed",
  "softmax",
  "groupMax",
  "norm",
  "hasBias",
  "scale",
  "zOff",
  "zStride",
] as const;

/** The routing kernels' parameter block (ROUTE_PARAMS) and NEG (ROUTE_WGSL and route.wgsl.ts). */
export const ROUTE_STRUCT_WGSL = /* wgsl */ `
struct P { ${ROUTE_PARAMS.map((k) => `${k}: ${k === "scale" ? "f32" : "u32"}`).join(", ")} }
const NEG = -3.4028234e38;`;

/** The routing kernels' parameters and bindings (ROUTE_WGSL and route.wgsl.ts): logits, bias → ids, weights. */
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
