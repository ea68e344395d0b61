/**
 * Token choice on the GPU for rows sampled at a temperature (and greedy rows beside them), so that such rows need no
 * logits read back nor host sampling (~2.7 ms a 102400-entry row on the host: BENCHMARKS, "Host sampling per row").
 *
 * Sampling by the Gumbel-max trick: argmax_i (x_i / T + g_i), with g_i = −log(−log u_i) and u_i uniform on (0, 1), is a
 * draw from softmax(x / T). Here u_i comes from a counter-based hash of (the row's 32-bit key, i), the key drawn from the
 * request's seeded sampler once a token: the same seed gives the same tokens on this backend (not the host sampler's
 * tokens: another way of drawing from the same distribution). A row with 1/T = 0 is greedy (argmax of x, ties to the
 * lowest id, NaN never chosen, as argmaxWGSL). Each row's chosen id also gets its log-probability under the
 * unmodified distribution, log_softmax(x) at it, as the host sampler reports.
 *
 * Two stages as argmaxWGSL: `slices` — workgroup (g, t) takes elements [g·SLICE, (g+1)·SLICE) of row t (16 loads a
 * thread issued together) and writes, in two vec4u of PART, its best (y, index, x there, bad) and (max x, Σ exp(x − max
 * x)); `merge` — one workgroup a row picks the best of its slices and the log-sum-exp of x over them.
 *
 * Non-finite logits: a NaN or +Infinity logit, or a row without a logit above −Infinity, gives a NaN log-probability
 * (an id is still written), so that the caller refuses the row as the host sampler would.
 */
import { ARGMAX_FNS, ARGMAX_SLICE } from "./wgsl-ops.js";

export function sampleWGSL(stage: "slices" | "merge"): string {
  const CH = ARGMAX_SLICE / 256;
  const bindings =
    stage === "slices"
      ? `@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> DR: array<vec2u>;
@group(0) @binding(2) var<storage, read_write> PART: array<vec4u>;
@group(0) @binding(3) var<uniform> p: P;`
      : `@group(0) @binding(0) var<storage, read> PART: array<vec4u>;
@group(0) @binding(1) var<storage, read_write> IDS: array<u32>;
@group(0) @binding(2) var<storage, read_write> LP: array<u32>;
@group(0) @binding(3) var<uniform> p: P;`;
  // each thread's candidate (y, index, x there) and its share of the raw max and sum
  const scan =
    stage === "slices"
      ? `  let xo = p.xOff + t * p.xStride;
  let k0 = wid.x * ${ARGMAX_SLICE}u + li;
  let dr = DR[t];
  let invT = bitcast<f32>(dr.x);
  var w: array<f32, ${CH}>;
  for (var c = 0u; c < ${CH}u; c++) { w[c] = X[xo + min(k0 + 256u * c, p.width - 1u)]; }
  for (var c = 0u; c < ${CH}u; c++) {
    let k = k0 + 256u * c;
    if (k >= p.width) { continue; }
    let x = w[c];
    let y = select(x * invT + gumbel(dr.y, k), x, invT == 0.0);
    if (better(y, k, v, i)) { v = y; i = k; xv = x; }
    if (!isNan(x) && (!hasMax || x > mx)) { mx = x; hasMax = true; }
    if (isNan(x) || bitcast<u32>(x) == 0x7f800000u) { atomicOr(&bad, 1u); }
  }`
      : `  for (var g = li; g < p.slices; g += 256u) {
    let c = PART[2u * (t * p.slices + g)];
    let r = PART[2u * (t * p.slices + g) + 1u];
    if (better(bitcast<f32>(c.x), c.y, v, i)) { v = bitcast<f32>(c.x); i = c.y; xv = bitcast<f32>(c.z); }
    if (c.w != 0u) { atomicOr(&bad, 1u); }
    if (r.z != 0u && (!hasMax || bitcast<f32>(r.x) > mx)) { mx = bitcast<f32>(r.x); hasMax = true; }
  }`;
  // Σ exp(x − the max) over this thread's share once the max is known (bm[0]; has[0] == 0: no non-NaN x)
  const sum =
    stage === "slices"
      ? `  var sum = 0.0;
  if (has[0] != 0u) {
    for (var c = 0u; c < ${CH}u; c++) {
      let k = k0 + 256u * c;
      if (k < p.width) { sum += term(w[c], bm[0]); }
    }
  }`
      : `  var sum = 0.0;
  if (has[0] != 0u) {
    for (var g = li; g < p.slices; g += 256u) {
      let r = PART[2u * (t * p.slices + g) + 1u];
      if (r.z != 0u) { sum += bitcast<f32>(r.y) * term(bitcast<f32>(r.x), bm[0]); }
    }
  }`;
  const write =
    stage === "slices"
      ? `PART[2u * (t * p.slices + wid.x)] = vec4u(bitcast<u32>(bv[0]), bi[0], bitcast<u32>(bx[0]), atomicLoad(&bad));
    PART[2u * (t * p.slices + wid.x) + 1u] = vec4u(bitcast<u32>(bm[0]), bitcast<u32>(bs[0]), has[0], 0u);`
      : `IDS[t] = select(bi[0], 0u, bi[0] == NONE);
    // NaN where the host sampler would refuse the row: a NaN or +Infinity logit, or no logit above -Infinity
    LP[t] = select(bitcast<u32>(bx[0] - bm[0] - log(bs[0])), 0x7fc00000u, bi[0] == NONE || has[0] == 0u || atomicLoad(&bad) != 0u || bitcast<u32>(bm[0]) == 0xff800000u);`;
  return /* wgsl */ `
struct P { n: u32, width: u32, xOff: u32, xStride: u32, slices: u32, _a: u32, _b: u32, _c: u32 }
${bindings}
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;
var<workgroup> bx: array<f32, 256>;
var<workgroup> bm: array<f32, 256>;
var<workgroup> hm: array<u32, 256>;
var<workgroup> bs: array<f32, 256>;
var<workgroup> has: array<u32, 1>;
var<workgroup> bad: atomic<u32>;
${ARGMAX_FNS}
// a 32-bit integer hash (lowbias32) of the row's key and the element's index
fn hash(key: u32, k: u32) -> u32 {
  var h = key ^ (k * 0x9e3779b9u);
  h ^= h >> 16u; h *= 0x7feb352du; h ^= h >> 15u; h *= 0x846ca68bu; h ^= h >> 16u;
  return h;
}
// a standard Gumbel draw from u = (24 hashed bits + 0.5) / 2^24, in (0, 1)
fn gumbel(key: u32, k: u32) -> f32 {
  let u = (f32(hash(key, k) >> 8u) + 0.5) * 5.9604644775390625e-8;
  return -log(-log(u));
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = ${stage === "slices" ? "wid.y + wid.z * 65535u" : "wid.x + wid.y * 65535u"};
  if (t >= p.n) { return; }
  if (li == 0u) { atomicStore(&bad, 0u); }
  workgroupBarrier();
  var v = 0.0;
  var i = NONE;
  var xv = 0.0;
  // this thread's max of x, where it saw a non-NaN one
  var mx = 0.0;
  var hasMax = false;
${scan}
  bv[li] = v;
  bi[li] = i;
  bx[li] = xv;
  bm[li] = mx;
  hm[li] = select(0u, 1u, hasMax);
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) {
      if (better(bv[li + s], bi[li + s], bv[li], bi[li])) { bv[li] = bv[li + s]; bi[li] = bi[li + s]; bx[li] = bx[li + s]; }
      if (hm[li + s] != 0u && (hm[li] == 0u || bm[li + s] > bm[li])) { bm[li] = bm[li + s]; hm[li] = 1u; }
    }
    workgroupBarrier();
  }
  if (li == 0u) { has[0] = hm[0]; }
  workgroupBarrier();
${sum}
  bs[li] = sum;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) { bs[li] += bs[li + s]; }
    workgroupBarrier();
  }
  if (li == 0u) {
    ${write}
  }
}`;
}
