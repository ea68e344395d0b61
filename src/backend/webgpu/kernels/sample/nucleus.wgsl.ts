/**
 * Top-p and min-p without top-k, drawn on the GPU: the host Sampler's nucleus filters (sampler.ts `kept`) over a kept
 * set of any size, for the rows of sampleWGSL's two stages whose draw has top-k 0 and top-p < 1 or min-p > 0 (others
 * pass through unchanged; greedy rows too, as on the host). Both filters keep a prefix of the row in the host's order —
 * larger x first, ties to the lower id — so the kept set is {i : (key_i, −i) ≥ (K, −L)} for one cut (K, L): K an
 * order-preserving key of x (ordKey), L the last kept id among the elements whose key is K.
 *
 * Top-p's cut is found by a radix select over the keys weighted by mass instead of counted. Each element's mass
 * exp(x − max) is a fixed-point integer (units of 2^-31, summed exactly in 64 bits), so the order of summation cannot
 * move the cut; the goal is topP × the row's total. `round` r (four, 8 bits each): workgroup (g, t) reads the
 * histograms of rounds < r to learn the bits picked so far (each pick: the bucket where the mass from the top first
 * reaches the goal), then adds its slice's elements under that prefix into round r's 256 buckets (64-bit mass and
 * count; workgroup atomics, then device atomics). `cut`: one workgroup a row picks the last digit, takes from the
 * elements at key K the fewest that reach the goal (their lowest ids: a bisection over ids, only where an exact tie
 * of logits straddles the goal), narrows the cut to min-p's (x ≥ max + log(minP)) where that is tighter, and zeroes
 * the row's histograms for the next use (they are zero between uses: a new buffer is). `draw`: workgroup (g, t)
 * draws by the Gumbel-max trick (sampleWGSL's hash of (key, id) at 1/T) among its slice's kept elements and overwrites
 * the slice's candidate in PART, so that sampleWGSL's merge, run again, picks the row's token and its log-probability.
 *
 * Masses are exp in f32, as everywhere on the GPU: a cut can differ from the host's (float64) only where the mass from
 * the top comes within ~1e-6 of topP at an element's boundary.
 */
import { ARGMAX_FNS, ARGMAX_SLICE } from "./argmax.wgsl.js";
import { GUMBEL_FNS, ORD_KEY_FN } from "./sample.wgsl.js";

/** Radix rounds of top-p's cut: 8 bits of the 32-bit key each. */
export const NUCLEUS_ROUNDS = 4;
/** Words a row takes in the nucleus scratch: per round 256 buckets of (mass lo, mass hi, count, 0), then its cut (K, L). */
export const NUCLEUS_ROW_WORDS = NUCLEUS_ROUNDS * 1024 + 4;

export function nucleusWGSL(stage: "round" | "cut" | "draw"): string {
  const CH = ARGMAX_SLICE / 256;
  const common = /* wgsl */ `
struct P { n: u32, width: u32, xOff: u32, xStride: u32, slices: u32, idBits: u32, round: u32, _c: u32 }
const ROW = ${NUCLEUS_ROW_WORDS}u;
const CUT = ${NUCLEUS_ROUNDS * 1024}u;
${ARGMAX_FNS}
${ORD_KEY_FN}`;
  if (stage === "draw") {
    return /* wgsl */ `${common}
${GUMBEL_FNS}
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> DR: array<vec4u>;
@group(0) @binding(2) var<storage, read> NH: array<u32>;
@group(0) @binding(3) var<storage, read_write> PART: array<vec4u>;
@group(0) @binding(4) var<uniform> p: P;
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;
var<workgroup> bx: array<f32, 256>;
var<workgroup> on: u32;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.y + wid.z * 65535u;
  if (t >= p.n) { return; }
  let dr = DR[2u * t];
  if (li == 0u) { on = select(0u, 1u, dr.x != 0u && dr.z == 0u && (bitcast<f32>(dr.w) < 1.0 || bitcast<f32>(DR[2u * t + 1u].x) > 0.0)); }
  if (workgroupUniformLoad(&on) == 0u) { return; }
  // (a refused row's cut is stale: its token does not matter, its log-probability is NaN)
  let K = NH[t * ROW + CUT];
  let L = NH[t * ROW + CUT + 1u];
  let invT = bitcast<f32>(dr.x);
  let xo = p.xOff + t * p.xStride;
  let k0 = wid.x * ${ARGMAX_SLICE}u + li;
  var w: array<f32, ${CH}>;
  for (var c = 0u; c < ${CH}u; c++) { w[c] = X[xo + min(k0 + 256u * c, p.width - 1u)]; }
  var v = 0.0;
  var i = NONE;
  var xv = 0.0;
  for (var c = 0u; c < ${CH}u; c++) {
    let id = k0 + 256u * c;
    let key = ordKey(w[c]);
    if (id < p.width && (key > K || (key == K && id <= L))) {
      let y = w[c] * invT + gumbel(dr.y, id);
      if (better(y, id, v, i)) { v = y; i = id; xv = w[c]; }
    }
  }
  bv[li] = v;
  bi[li] = i;
  bx[li] = xv;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s && better(bv[li + s], bi[li + s], bv[li], bi[li])) { bv[li] = bv[li + s]; bi[li] = bi[li + s]; bx[li] = bx[li + s]; }
    workgroupBarrier();
  }
  if (li == 0u) {
    let at = 2u * (t * p.slices + wid.x);
    PART[at] = vec4u(bitcast<u32>(bv[0]), bi[0], bitcast<u32>(bx[0]), PART[at].w);
  }
}`;
  }
  // the round and cut stages: the row's max and whether it is drawn here, and the picks over the histograms
  const picks = /* wgsl */ `${common}
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> DR: array<vec4u>;
@group(0) @binding(2) var<storage, read> PART: array<vec4u>;
@group(0) @binding(3) var<storage, read_write> NH: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> p: P;
var<workgroup> RI: vec4u;
var<workgroup> amx: atomic<u32>;
var<workgroup> abad: atomic<u32>;
var<workgroup> SC: array<vec2u, 256>;
var<workgroup> SEL: vec4u;
fn add64(a: vec2u, b: vec2u) -> vec2u { let lo = a.x + b.x; return vec2u(lo, a.y + b.y + select(0u, 1u, lo < a.x)); }
fn sub64(a: vec2u, b: vec2u) -> vec2u { return vec2u(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x)); }
fn lt64(a: vec2u, b: vec2u) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }
// a·b exactly, in 64 bits
fn mul64(a: u32, b: u32) -> vec2u {
  let ll = (a & 0xffffu) * (b & 0xffffu); let lh = (a & 0xffffu) * (b >> 16u); let hl = (a >> 16u) * (b & 0xffffu);
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return vec2u((ll & 0xffffu) | (mid << 16u), (a >> 16u) * (b >> 16u) + (lh >> 16u) + (hl >> 16u) + (mid >> 16u));
}
// exp(x − mx) for x ≤ mx in units of 2^-31 (at most 2^31); 0 for −Infinity and NaN
fn mass(x: f32, mx: f32) -> u32 {
  let w = exp(x - mx);
  return select(0u, u32(w * 2147483648.0), w > 0.0);
}
// row t: (max x bits, 1 where its draw is filtered here, top-p bits, min-p bits), the same in every invocation. Drawn
// here: 1/T > 0, no top-k, top-p < 1 (or, with minp, min-p > 0), and not refused by the host's rules (sampleWGSL's
// slices saw no NaN or +Infinity, and a max above −Infinity)
fn rowInfo(t: u32, li: u32, minp: bool) -> vec4u {
  if (li == 0u) { atomicStore(&amx, 0u); atomicStore(&abad, 0u); }
  workgroupBarrier();
  for (var g = li; g < p.slices; g += 256u) {
    let c = PART[2u * (t * p.slices + g)];
    let r = PART[2u * (t * p.slices + g) + 1u];
    if (c.w != 0u) { atomicOr(&abad, 1u); }
    // (ordKey of a non-NaN x is never 0: 0 stays "no max")
    if (r.z != 0u) { atomicMax(&amx, ordKey(bitcast<f32>(r.x))); }
  }
  workgroupBarrier();
  if (li == 0u) {
    let dr = DR[2u * t];
    let mp = DR[2u * t + 1u].x;
    let mk = atomicLoad(&amx);
    let mx = ordValue(mk);
    let on = dr.x != 0u && dr.z == 0u && (bitcast<f32>(dr.w) < 1.0 || (minp && bitcast<f32>(mp) > 0.0)) && atomicLoad(&abad) == 0u && mk != 0u && bitcast<u32>(mx) != 0xff800000u;
    RI = vec4u(bitcast<u32>(mx), select(0u, 1u, on), dr.w, mp);
  }
  return workgroupUniformLoad(&RI);
}
// SC[i] = the masses of round h's buckets from digit 255 down to digit 255 − i, summed (row base b)
fn scan(b: u32, h: u32, li: u32) {
  let at = b + 1024u * h + 4u * (255u - li);
  SC[li] = vec2u(atomicLoad(&NH[at]), atomicLoad(&NH[at + 1u]));
  workgroupBarrier();
  for (var o = 1u; o < 256u; o <<= 1u) {
    let v = select(vec2u(0u), SC[li - min(li, o)], li >= o);
    workgroupBarrier();
    SC[li] = add64(SC[li], v);
    workgroupBarrier();
  }
}
struct Narrow { prefix: u32, above: vec2u, goal: vec2u, count: u32 }
// the digits of rounds 0..R−1 (high bits first): each round's bucket where the mass from the top, after the mass above
// the prefix so far, first reaches the goal (topP × the row's total, from round 0's buckets); with the mass above the
// last bucket and that bucket's count. (Exactly one bucket qualifies: the goal is above what lies above it, and the
// bucket picked before holds exactly the elements counted in the next round.)
fn narrow(b: u32, li: u32, R: u32, topP: f32) -> Narrow {
  scan(b, 0u, li);
  let total = SC[255];
  let tf = f32(total.y) * 4294967296.0 + f32(total.x);
  let tt = min(topP * tf, tf);
  let th = u32(tt * 2.3283064365386963e-10);
  var goal = vec2u(u32(tt - f32(th) * 4294967296.0), th);
  if (lt64(total, goal)) { goal = total; }
  if (goal.x == 0u && goal.y == 0u) { goal = vec2u(1u, 0u); }
  var above = vec2u(0u);
  var prefix = 0u;
  var count = 0u;
  for (var h = 0u; h < R; h++) {
    if (h > 0u) { scan(b, h, li); }
    let excl = add64(above, select(vec2u(0u), SC[li - min(li, 1u)], li >= 1u));
    let incl = add64(above, SC[li]);
    if (lt64(excl, goal) && !lt64(incl, goal)) { SEL = vec4u(255u - li, excl.x, excl.y, atomicLoad(&NH[b + 1024u * h + 4u * (255u - li) + 2u])); }
    workgroupBarrier();
    let s = SEL;
    prefix |= s.x << (24u - 8u * h);
    above = s.yz;
    count = s.w;
    workgroupBarrier();
  }
  return Narrow(prefix, above, goal, count);
}`;
  if (stage === "round") {
    return /* wgsl */ `${picks}
// the slice's buckets in four copies (thread li adds to copy li % 4: a quarter of the contention for a bucket's address
// where most elements share a digit, as in round 0), summed as they are flushed; counts only in the last round
var<workgroup> LLO: array<atomic<u32>, 1024>;
var<workgroup> LHI: array<atomic<u32>, 1024>;
var<workgroup> LN: array<atomic<u32>, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.y + wid.z * 65535u;
  if (t >= p.n) { return; }
  let info = rowInfo(t, li, false);
  if (info.y == 0u) { return; }
  let mx = bitcast<f32>(info.x);
  let b = t * ROW;
  var prefix = 0u;
  if (p.round > 0u) { prefix = narrow(b, li, p.round, bitcast<f32>(info.z)).prefix; }
  for (var q = 0u; q < 4u; q++) {
    atomicStore(&LLO[256u * q + li], 0u);
    atomicStore(&LHI[256u * q + li], 0u);
  }
  atomicStore(&LN[li], 0u);
  workgroupBarrier();
  let last = p.round == ${NUCLEUS_ROUNDS - 1}u;
  let cp = 256u * (li & 3u);
  let sh = 24u - 8u * p.round;
  let xo = p.xOff + t * p.xStride;
  let k0 = wid.x * ${ARGMAX_SLICE}u + li;
  var w: array<f32, ${CH}>;
  for (var c = 0u; c < ${CH}u; c++) { w[c] = X[xo + min(k0 + 256u * c, p.width - 1u)]; }
  for (var c = 0u; c < ${CH}u; c++) {
    let key = ordKey(w[c]);
    // under the prefix picked so far (its bits above this round's 8)
    if (k0 + 256u * c < p.width && (p.round == 0u || (key >> (sh + 8u)) == (prefix >> (sh + 8u)))) {
      let d = (key >> sh) & 255u;
      if (last) { atomicAdd(&LN[d], 1u); }
      let m = mass(w[c], mx);
      if (m != 0u) {
        let old = atomicAdd(&LLO[cp + d], m);
        if (old > 0xffffffffu - m) { atomicAdd(&LHI[cp + d], 1u); }
      }
    }
  }
  workgroupBarrier();
  var sm = vec2u(0u);
  for (var q = 0u; q < 4u; q++) { sm = add64(sm, vec2u(atomicLoad(&LLO[256u * q + li]), atomicLoad(&LHI[256u * q + li]))); }
  let n = atomicLoad(&LN[li]);
  let at = b + 1024u * p.round + 4u * li;
  if (sm.x != 0u || sm.y != 0u) {
    let old = atomicAdd(&NH[at], sm.x);
    atomicAdd(&NH[at + 1u], sm.y + select(0u, 1u, old > 0xffffffffu - sm.x));
  }
  if (n != 0u) { atomicAdd(&NH[at + 2u], n); }
}`;
  }
  return /* wgsl */ `${picks}
var<workgroup> tie: vec4u;
var<workgroup> cnt: atomic<u32>;
var<workgroup> cntv: u32;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let info = rowInfo(t, li, true);
  if (info.y == 0u) { return; }
  let mx = bitcast<f32>(info.x);
  let topP = bitcast<f32>(info.z);
  let minP = bitcast<f32>(info.w);
  let b = t * ROW;
  var K = 0u;
  var L = NONE;
  if (topP < 1.0) {
    let nr = narrow(b, li, ${NUCLEUS_ROUNDS}u, topP);
    // the elements at the cut share x = ordValue(K), so each one's mass: the fewest of them (1..count) that reach the goal
    let w1 = mass(ordValue(nr.prefix), mx);
    let need = sub64(nr.goal, nr.above);
    var lo = 1u;
    var hi = max(nr.count, 1u);
    while (lo < hi) {
      let mid = (lo + hi) / 2u;
      if (lt64(mul64(mid, w1), need)) { lo = mid + 1u; } else { hi = mid; }
    }
    if (li == 0u) { tie = vec4u(nr.prefix, lo, select(0u, 1u, lo < nr.count), 0u); }
    let tu = workgroupUniformLoad(&tie);
    K = tu.x;
    if (tu.z != 0u) {
      // an exact tie of logits straddles the goal: keep the lowest tu.y ids of key K — the least L with that many at or
      // below it, by bisection (a count over the row each step)
      let xo = p.xOff + t * p.xStride;
      var a = 0u;
      var z = p.width - 1u;
      for (var s = 0u; s <= p.idBits; s++) {
        let m = (a + z) / 2u;
        if (li == 0u) { atomicStore(&cnt, 0u); }
        workgroupBarrier();
        var c = 0u;
        for (var i = li; i <= m; i += 256u) { if (ordKey(X[xo + i]) == K) { c++; } }
        atomicAdd(&cnt, c);
        workgroupBarrier();
        if (li == 0u) { cntv = atomicLoad(&cnt); }
        if (workgroupUniformLoad(&cntv) >= tu.y) { z = m; } else { a = min(m + 1u, z); }
      }
      L = z;
    }
    // this row's histograms back to zero for the next use
    workgroupBarrier();
    for (var i = li; i < CUT; i += 256u) { atomicStore(&NH[b + i], 0u); }
  }
  if (minP > 0.0) {
    let km = ordKey(mx + log(minP));
    if (km > K) { K = km; L = NONE; }
  }
  if (li == 0u) {
    atomicStore(&NH[b + CUT], K);
    atomicStore(&NH[b + CUT + 1u], L);
  }
}`;
}
