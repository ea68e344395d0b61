/** WGSL of the argmax over logit rows (greedy picks on the GPU) and the comparisons the samplers share. Pure generators. */

/** Elements of a row one workgroup of the argmax kernel scans (256 threads × 16 independent loads each). */
export const ARGMAX_SLICE = 4096;

/** A 256-thread workgroup's `sum` totalled into bs[0] (workgroup memory bs: array<f32, 256>), every thread taking part. */
export const REDUCE_SUM_WGSL = /* wgsl */ `  bs[li] = sum;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) { bs[li] += bs[li + s]; }
    workgroupBarrier();
  }`;

/**
 * The argmax kernels' comparisons (argmaxWGSL, and sample.wgsl.ts's draws): `better` ranks (value, index) pairs —
 * larger first, ties to the lower index, NaN never ahead, an empty slot (NONE) always behind — and `term` is
 * exp(x − m) as a log-sum-exp adds it.
 */
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
 * workgroups of a few round trips to memory each, not one workgroup of 400 dependent ones (145 µs on a large GPU).
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
        (logprobs
          ? "@group(0) @binding(2) var<storage, read_write> LP: array<u32>;\n@group(0) @binding(3) var<uniform> p: P;"
          : "@group(0) @binding(2) var<uniform> p: P;");
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
${
  withSum
    ? `${sum}
${REDUCE_SUM_WGSL}
`
    : ""
}  // a row of NaN only: token 0, as the CPU argmax
  if (li == 0u) {
    ${write}
  }
}`;
}
