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
 *
 * Rows with top-k (1..SAMPLE_TOPK_MAX, any top-p and min-p) go on to sampleTopKWGSL, which rewrites their ids and
 * log-probabilities; the draws buffer holds DRAW_WORDS a row.
 */
import { DEVICE_DRAW_TOPK_MAX } from "../../../../engine/sampler.js";
import { ARGMAX_FNS, ARGMAX_SLICE, REDUCE_SUM_WGSL } from "./argmax.wgsl.js";

/** The draws' noise, the same in both kernels: a row's key and an element's id give the element's Gumbel draw. */
export const GUMBEL_FNS = /* wgsl */ `
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
}`;

/** x's bits as an unsigned key of the same order (NaN lowest), and back (for keys of non-NaN x). */
export const ORD_KEY_FN = /* wgsl */ `
fn ordKey(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if (isNan(x)) { return 0u; }
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
fn ordValue(k: u32) -> f32 { return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u)); }`;

/** Most top-k a row drawn on the GPU keeps: the host Sampler's DEVICE_DRAW_TOPK_MAX (larger ones sample on the host). */
export const SAMPLE_TOPK_MAX = DEVICE_DRAW_TOPK_MAX;
/** Top-k candidates a row's merge holds in workgroup memory (its slices × k): rows of up to 48 slices (196608 ids). */
export const SAMPLE_TOPK_CAP = 3072;

/** Words a row's draw takes in the draws buffer: (1/T, key, top-k, top-p) and (min-p, 0, 0, 0), floats as bits. */
export const DRAW_WORDS = 8;

export function sampleWGSL(stage: "slices" | "merge"): string {
  const CH = ARGMAX_SLICE / 256;
  const bindings =
    stage === "slices"
      ? `@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> DR: array<vec4u>;
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
  let dr = DR[2u * t];
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
${GUMBEL_FNS}
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
${REDUCE_SUM_WGSL}
  if (li == 0u) {
    ${write}
  }
}`;
}

/**
 * Top-k → top-p → min-p → temperature draws (the host Sampler's order and semantics) for the rows whose draw has top-k
 * k ≥ 1, after sampleWGSL's two stages (whose per-slice max and Σ exp give the log-probability); rows with k = 0 are
 * left as those stages wrote them.
 *
 * `slices` — workgroup (g, t) finds the k best of its 4096 elements: (x, id) ordered by x, ties to the lower id, as a
 * 64-bit key (x's bits made order-preserving, then the id's complement), whose k-th largest value is found bit by bit
 * (radix select, 8 bits a round: 4 + ceil(idBits / 8) rounds of a histogram), and writes those k to CAND (ids past the row: NONE).
 * `merge` — one workgroup a row gathers its slices' candidates into workgroup memory, selects the row's k best the same
 * way, sorts them (bitonic), and one thread then applies top-p (the smallest most-likely prefix holding topP of the
 * k's mass at temperature 1), min-p (x ≥ x_max + log(minP), past the first) and draws among what is kept by the
 * Gumbel-max trick with sampleWGSL's hash of (key, id) at 1/T. Its log-probability comes from the row's slices in
 * PART, as sampleWGSL's merge computes it (NaN for the rows the host refuses).
 */
export function sampleTopKWGSL(stage: "slices" | "merge"): string {
  const KM = SAMPLE_TOPK_MAX;
  const CH = ARGMAX_SLICE / 256;
  const CAP = SAMPLE_TOPK_CAP;
  const IT = CAP / 256;
  // the radix select's workgroup memory and its pick of a digit
  const common = /* wgsl */ `
struct P { n: u32, width: u32, xOff: u32, xStride: u32, slices: u32, idBits: u32, _b: u32, _c: u32 }
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> scn: array<u32, 256>;
var<workgroup> pk: vec2u;
var<workgroup> pos: atomic<u32>;
var<workgroup> kw: u32;
${ARGMAX_FNS}
${ORD_KEY_FN}
// the digit whose bucket of hist holds the rem-th largest item, counting from digit 255 down: pk = (the digit, the
// items in the buckets above it); every invocation takes part
fn pickDigit(li: u32, rem: u32) {
  let c = atomicLoad(&hist[255u - li]);
  scn[li] = c;
  workgroupBarrier();
  for (var o = 1u; o < 256u; o <<= 1u) {
    let v = select(0u, scn[li - min(li, o)], li >= o);
    workgroupBarrier();
    scn[li] += v;
    workgroupBarrier();
  }
  if (scn[li] - c < rem && rem <= scn[li]) { pk = vec2u(255u - li, scn[li] - c); }
  workgroupBarrier();
}`;
  // the k-th largest key (th, tl) of the workgroup's items, 8 bits a round: hi's four digits, then those of lo's low
  // idBits (lo = ~id: the bits above are 1s), each round a histogram of the items under the digits picked so far. (Bit
  // by bit, 32 + idBits rounds of a count, it took 39 µs a slice stage and 71 µs a merge on a large GPU; now 22 and 47.)
  const radixSelect = (items: string, n: string): string => /* wgsl */ `
  var th = 0u;
  var rem = k;
  for (var r = 0u; r < 4u; r++) {
    let sh = 24u - 8u * r;
    atomicStore(&hist[li], 0u);
    workgroupBarrier();
    for (var j = 0u; j < ${n}; j++) { ${items} if (r == 0u || (hi >> (sh + 8u)) == (th >> (sh + 8u))) { atomicAdd(&hist[(hi >> sh) & 255u], 1u); } }
    workgroupBarrier();
    pickDigit(li, rem);
    th |= pk.x << sh;
    rem -= pk.y;
    workgroupBarrier();
  }
  let loDigits = (p.idBits + 7u) / 8u;
  var tl = select(0xffffffffu << (8u * loDigits), 0u, loDigits >= 4u);
  for (var r = 0u; r < loDigits; r++) {
    let sh = 8u * (loDigits - 1u - r);
    atomicStore(&hist[li], 0u);
    workgroupBarrier();
    for (var j = 0u; j < ${n}; j++) { ${items} if (hi == th && (r == 0u || (lo >> (sh + 8u)) == (tl >> (sh + 8u)))) { atomicAdd(&hist[(lo >> sh) & 255u], 1u); } }
    workgroupBarrier();
    pickDigit(li, rem);
    tl |= pk.x << sh;
    rem -= pk.y;
    workgroupBarrier();
  }
  if (li == 0u) { atomicStore(&pos, 0u); }
  workgroupBarrier();`;
  if (stage === "slices") {
    return /* wgsl */ `${common}
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> DR: array<vec4u>;
@group(0) @binding(2) var<storage, read_write> CAND: array<vec2u>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.y + wid.z * 65535u;
  if (t >= p.n) { return; }
  // (k through workgroup memory: a value every invocation of the workgroup provably shares, for the barriers below)
  if (li == 0u) { kw = min(DR[2u * t].z, ${KM}u); }
  let k = workgroupUniformLoad(&kw);
  if (k == 0u) { return; }
  let xo = p.xOff + t * p.xStride;
  let k0 = wid.x * ${ARGMAX_SLICE}u + li;
  var xs: array<f32, ${CH}>;
  for (var c = 0u; c < ${CH}u; c++) { xs[c] = X[xo + min(k0 + 256u * c, p.width - 1u)]; }
  ${radixSelect(`let id = k0 + 256u * j; let hi = select(0u, ordKey(xs[j]), id < p.width); let lo = ~id;`, `${CH}u`)}
  for (var j = 0u; j < ${CH}u; j++) {
    let id = k0 + 256u * j; let hi = select(0u, ordKey(xs[j]), id < p.width); let lo = ~id;
    if (hi > th || (hi == th && lo >= tl)) {
      let at = atomicAdd(&pos, 1u);
      CAND[(t * p.slices + wid.x) * ${KM}u + at] = vec2u(bitcast<u32>(xs[j]), select(NONE, id, id < p.width));
    }
  }
}`;
  }
  return /* wgsl */ `${common}
@group(0) @binding(0) var<storage, read> CAND: array<vec2u>;
@group(0) @binding(1) var<storage, read> PART: array<vec4u>;
@group(0) @binding(2) var<storage, read> DR: array<vec4u>;
@group(0) @binding(3) var<storage, read_write> IDS: array<u32>;
@group(0) @binding(4) var<storage, read_write> LP: array<u32>;
@group(0) @binding(5) var<uniform> p: P;
var<workgroup> CX: array<u32, ${CAP}>;
var<workgroup> CI: array<u32, ${CAP}>;
var<workgroup> SH: array<u32, ${KM}>;
var<workgroup> SL: array<u32, ${KM}>;
var<workgroup> SX: array<f32, ${KM}>;
${GUMBEL_FNS}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t >= p.n) { return; }
  let dr = DR[2u * t];
  if (li == 0u) { kw = min(dr.z, ${KM}u); }
  let k = workgroupUniformLoad(&kw);
  if (k == 0u) { return; }
  // the row's candidates: slice g's first k (ids NONE past the row, their keys lowest)
  let nc = p.slices * k;
  for (var i = li; i < nc; i += 256u) {
    let c = CAND[(t * p.slices + i / k) * ${KM}u + i % k];
    CX[i] = c.x;
    CI[i] = c.y;
  }
  workgroupBarrier();
  ${radixSelect(`let i = li + 256u * j; let ok = i < nc && CI[min(i, ${CAP - 1}u)] != NONE; let hi = select(0u, ordKey(bitcast<f32>(CX[min(i, ${CAP - 1}u)])), ok); let lo = select(0u, ~CI[min(i, ${CAP - 1}u)], ok);`, `${IT}u`)}
  // the k best, unsorted, then sorted by key (descending; empty slots lowest)
  if (li < ${KM}u) { SH[li] = 0u; SL[li] = 0u; }
  workgroupBarrier();
  for (var j = 0u; j < ${IT}u; j++) {
    let i = li + 256u * j;
    if (i < nc && CI[i] != NONE) {
      let hi = ordKey(bitcast<f32>(CX[i])); let lo = ~CI[i];
      if (hi > th || (hi == th && lo >= tl)) {
        let at = atomicAdd(&pos, 1u);
        if (at < ${KM}u) { SH[at] = hi; SL[at] = lo; SX[at] = bitcast<f32>(CX[i]); }
      }
    }
  }
  workgroupBarrier();
  for (var size = 2u; size <= ${KM}u; size <<= 1u) {
    for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
      if (li < ${KM}u) {
        let o = li ^ stride;
        if (o > li) {
          // descending within blocks whose (li & size) is 0, ascending otherwise: descending overall at the end
          let first = (li & size) == 0u;
          let less = SH[li] < SH[o] || (SH[li] == SH[o] && SL[li] < SL[o]);
          if (less == first) {
            let h = SH[li]; SH[li] = SH[o]; SH[o] = h;
            let l = SL[li]; SL[li] = SL[o]; SL[o] = l;
            let x = SX[li]; SX[li] = SX[o]; SX[o] = x;
          }
        }
      }
      workgroupBarrier();
    }
  }
  if (li == 0u) {
    let kept = min(atomicLoad(&pos), k);
    // the log-sum-exp of the row from its slices, as sampleWGSL's merge
    var mx = 0.0;
    var has = false;
    var bad = false;
    for (var g = 0u; g < p.slices; g++) {
      let c = PART[2u * (t * p.slices + g)];
      let r = PART[2u * (t * p.slices + g) + 1u];
      if (c.w != 0u) { bad = true; }
      if (r.z != 0u && (!has || bitcast<f32>(r.x) > mx)) { mx = bitcast<f32>(r.x); has = true; }
    }
    var sum = 0.0;
    for (var g = 0u; g < p.slices; g++) {
      let r = PART[2u * (t * p.slices + g) + 1u];
      if (has && r.z != 0u) { sum += bitcast<f32>(r.y) * term(bitcast<f32>(r.x), mx); }
    }
    // top-p over the k's mass at temperature 1, then min-p (the first always kept)
    let x0 = SX[0];
    var mass = 0.0;
    for (var i = 0u; i < kept; i++) { mass += term(SX[i], x0); }
    var keep = kept;
    let topP = bitcast<f32>(dr.w);
    if (topP < 1.0) {
      var cum = 0.0;
      for (var i = 0u; i < kept; i++) {
        cum += term(SX[i], x0);
        if (cum >= topP * mass) { keep = i + 1u; break; }
      }
    }
    let minP = bitcast<f32>(DR[2u * t + 1u].x);
    if (minP > 0.0) {
      let cut = x0 + log(minP);
      for (var i = 1u; i < keep; i++) { if (SX[i] < cut) { keep = i; break; } }
    }
    let invT = bitcast<f32>(dr.x);
    var best = 0u;
    var by = 0.0;
    for (var i = 0u; i < max(keep, 1u); i++) {
      let y = select(SX[i] * invT + gumbel(dr.y, ~SL[i]), SX[i], invT == 0.0);
      if (i == 0u || y > by) { by = y; best = i; }
    }
    let id = select(~SL[best], 0u, kept == 0u);
    IDS[t] = id;
    LP[t] = select(bitcast<u32>(SX[best] - mx - log(sum)), 0x7fc00000u, kept == 0u || !has || bad || bitcast<u32>(mx) == 0xff800000u);
  }
}`;
}
