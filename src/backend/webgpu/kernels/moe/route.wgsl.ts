/**
 * MoE routing with one subgroup per token, for devices with a fixed subgroup size: the same bindings, parameter block
 * (ROUTE_PARAMS) and results as ROUTE_WGSL, without a single workgroup barrier. ROUTE_WGSL (one 256-thread workgroup
 * per token) spends most of its time in the serial chain of barriers of its tree reductions and rank pass; here every
 * reduction is one subgroup operation.
 *
 * Lane l of a token's subgroup owns the consecutive experts l·J … l·J + J − 1 (J = perLane): with consecutive runs,
 * among lanes holding equal best scores the lowest lane holds the lowest expert id, so "value, then lowest id" is a
 * subgroupMax of the value and a ballot of the lanes that hold it. Scores are compared as u32 keys with the order of
 * the floats (NaN ranked as the lowest finite value, as ROUTE_WGSL's rank pass does); taken and absent experts hold
 * key 0, below every expert's key.
 *
 * Steps: softmax statistics by subgroupMax / subgroupAdd (sigmoid needs none); with group-limited routing each group's
 * top two by subgroupShuffleXor over the lanes that share the group (the layout puts groups on aligned power-of-two
 * runs of lanes, or whole groups in one lane) and each group's rank among all groups from one shuffle per group; then
 * K rounds of (subgroupMax of the lanes' best keys, ballot → winning lane, shuffles of its expert and probability),
 * lane k keeping the k-th pick; finally each lane writes its picks, normalized by the sum of all K.
 *
 * The shape (subgroup size, experts, groups) is compiled in, so the per-lane loops have constant bounds.
 */
import { ROUTE_BINDINGS_WGSL } from "./moe.wgsl.js";
import { wgslFloat } from "../matmul/wide.wgsl.js";

/**
 * Threads per workgroup by default (tokens: this / the subgroup size, at least one): 256, the size of the wide and
 * coalesced products, so that small steps' routing shares the shared down product's dispatch (GpuRuntime.together
 * combines kernels of unequal sizes only where the smaller uses no subgroup or barrier operations). On a large GPU
 * (v2-lite batch 1, alternating in one call) GPU 2.48 / 2.49 ms a step with 64 threads (the routing a dispatch of its
 * own), 2.36 / 2.37 with 256.
 */
const ROUTE_THREADS = 256;
/** Most experts used per token (moeRoute's limit): lanes keep ⌈MAX_PICKS / sg⌉ picks each. */
const MAX_PICKS = 16;

export interface RouteShape {
  /** the device's fixed subgroup size: lanes per token */
  readonly sg: number;
  /** experts */
  readonly experts: number;
  /** consecutive experts each lane owns */
  readonly perLane: number;
  /** expert groups when group-limited routing applies (nGroup > 1, nGroupUsed < nGroup), else 1 */
  readonly groups: number;
  /** lanes sharing one group: a power of two, 1 where lanes hold whole groups */
  readonly lanesPerGroup: number;
  /** whole groups per lane, 1 where groups span several lanes */
  readonly groupsPerLane: number;
  /** tokens (subgroups) per workgroup */
  readonly tokens: number;
}

/**
 * The kernel's shape for E experts in nGroup groups of which nGroupUsed are kept, or undefined where it does not
 * apply: a subgroup size outside 4..64, or groups that do not divide the experts.
 */
export function routeShape(
  sg: number,
  E: number,
  nGroup: number,
  nGroupUsed: number,
  threads = ROUTE_THREADS,
): RouteShape | undefined {
  if (sg < 4 || sg > 64 || E < 1) return undefined;
  const tokens = Math.max(1, Math.floor(threads / sg));
  const grouped = nGroup > 1 && nGroupUsed < nGroup;
  if (!grouped)
    return { sg, experts: E, perLane: Math.ceil(E / sg), groups: 1, lanesPerGroup: 1, groupsPerLane: 1, tokens };
  if (E % nGroup !== 0) return undefined;
  const perGroup = E / nGroup;
  if (nGroup > sg) {
    const groupsPerLane = Math.ceil(nGroup / sg);
    return {
      sg,
      experts: E,
      perLane: groupsPerLane * perGroup,
      groups: nGroup,
      lanesPerGroup: 1,
      groupsPerLane,
      tokens,
    };
  }
  // as many lanes per group as fit (fewer experts per lane, shorter loops), in power-of-two runs for the xor shuffles
  let lanesPerGroup = 1;
  while (2 * lanesPerGroup * nGroup <= sg && perGroup % (2 * lanesPerGroup) === 0) lanesPerGroup *= 2;
  return { sg, experts: E, perLane: perGroup / lanesPerGroup, groups: nGroup, lanesPerGroup, groupsPerLane: 1, tokens };
}

/** Workgroups for n tokens ([x, y]: at most 65535 along x, as the kernel's token index expects). */
export function routeGrid(s: RouteShape, n: number): [number, number] {
  const groups = Math.ceil(n / s.tokens);
  return [Math.min(groups, 65535), Math.ceil(groups / 65535)];
}

/**
 * Group-limited routing: the experts of groups outside the best nGroupUsed get the key of NEG (ROUTE_WGSL masks
 * them with NEG). Group scores as ROUTE_WGSL's: top-2 sum (or max with groupMax) of max(score, NEG), NaN as NEG.
 */
function groupMaskWGSL(s: RouteShape): string {
  const span = s.perLane / s.groupsPerLane;
  const perGroup = s.experts / s.groups;
  const L = s.lanesPerGroup;
  const G = s.groupsPerLane;
  const merge =
    L === 1
      ? ""
      : `// the group's top two over its ${L} lanes
  for (var m = 1u; m < ${L}u; m <<= 1u) {
    let oa = subgroupShuffleXor(top1[0], m);
    let ob = subgroupShuffleXor(top2[0], m);
    top2[0] = max(min(top1[0], oa), max(top2[0], ob));
    top1[0] = max(top1[0], oa);
  }`;
  return `
  var top1: array<f32, ${G}>;
  var top2: array<f32, ${G}>;
  for (var i = 0u; i < ${G}u; i++) {
    var a = NEG;
    var b = NEG;
    for (var j = i * ${span}u; j < (i + 1u) * ${span}u; j++) {
      let x = max(sel[j], NEG);
      b = max(b, min(a, x));
      a = max(a, x);
    }
    top1[i] = a;
    top2[i] = b;
  }
  ${merge}
  var score: array<f32, ${G}>;
  for (var i = 0u; i < ${G}u; i++) { score[i] = select(${perGroup > 1 ? "top1[i] + top2[i]" : "top1[i]"}, top1[i], p.groupMax != 0u); }
  // a group's rank: the groups ahead of it (higher score, or equal with a lower index); the first nGroupUsed stay
  var ahead: array<u32, ${G}>;
  for (var h = 0u; h < ${s.groups}u; h++) {
    let other = subgroupShuffle(score[h % ${G}u], (h / ${G}u) * ${L}u);
    for (var i = 0u; i < ${G}u; i++) {
      let g = (lane / ${L}u) * ${G}u + i;
      ahead[i] += u32(other > score[i] || (other == score[i] && h < g));
    }
  }
  for (var j = 0u; j < J; j++) {
    if (ahead[j / ${span}u] >= p.nGroupUsed && first + j < E) { key[j] = NEG_KEY; }
  }`;
}

/** WGSL: (bestKey, bestSlot, bestProb) ← the lane's highest key above bestKey, the lowest slot among equal keys. */
const BEST_SLOT = `for (var j = 0u; j < J; j++) {
    let better = key[j] > bestKey;
    bestSlot = select(bestSlot, j, better);
    bestProb = select(bestProb, pr[j], better);
    bestKey = select(bestKey, key[j], better);
  }`;

/**
 * WGSL shared by the routing kernels: `fn routeToken(lane, t, live)` routes token t on one subgroup (lane: the
 * subgroup invocation id) into IDS / WTS [t·K …] (written only where live), reading the parameter block p (ROUTE_PARAMS).
 * The kernel declares `fn logit(t: u32, e: u32) -> f32` (the token's logit of expert e) and `fn bias(e: u32) -> f32`
 * (read only where p.hasBias != 0). Call it in uniform control flow: it is made of subgroup operations.
 */
export function routeTokenWGSL(s: RouteShape): string {
  const grouped = s.groups > 1;
  const picks = Math.ceil(MAX_PICKS / s.sg);
  // the ballot's lowest set bit: the lowest lane holding the best key
  const winner =
    s.sg > 32
      ? "select(32u + firstTrailingBit(holders.y), firstTrailingBit(holders.x), holders.x != 0u)"
      : "firstTrailingBit(holders.x)";
  return /* wgsl */ `
// orderKey(NEG)
const NEG_KEY = 0x00800000u;
// taken and absent experts: below every expert's key (orderKey(-inf) = 0x007fffff)
const TAKEN = 0u;
const SG = ${s.sg}u;
const J = ${s.perLane}u;
const E = ${s.experts}u;
// by its bits: a compiler may assume float comparisons never see NaN
fn isNan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
/** a u32 with the order of the float (-0 as +0); x not NaN */
fn orderKey(x: f32) -> u32 {
  let b = select(bitcast<u32>(x), 0u, bitcast<u32>(x) == 0x80000000u);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
fn routeToken(lane: u32, t: u32, live: bool) {
  let first = lane * J;
  var pr: array<f32, J>;
  var zMax = NEG;
  for (var j = 0u; j < J; j++) {
    var z = NEG;
    if (first + j < E) { z = logit(t, first + j); }
    pr[j] = z;
    zMax = max(zMax, z);
  }
  if (p.softmax != 0u) {
    let m = subgroupMax(zMax);
    var sum = 0.0;
    for (var j = 0u; j < J; j++) {
      pr[j] = select(0.0, exp(pr[j] - m), first + j < E);
      sum += pr[j];
    }
    let total = subgroupAdd(sum);
    for (var j = 0u; j < J; j++) { pr[j] = pr[j] / total; }
  } else {
    for (var j = 0u; j < J; j++) { pr[j] = 1.0 / (1.0 + exp(-pr[j])); }
  }
  // selection scores (probability + bias), NaN as NEG
  var sel: array<f32, J>;
  var key: array<u32, J>;
  for (var j = 0u; j < J; j++) {
    var x = pr[j];
    if (p.hasBias != 0u && first + j < E) { x += bias(first + j); }
    sel[j] = select(x, NEG, isNan(x));
    key[j] = select(TAKEN, orderKey(sel[j]), first + j < E);
  }
  ${grouped ? groupMaskWGSL(s) : ""}
  // the lane's best expert not yet taken (lowest slot among equal keys)
  var bestKey = TAKEN;
  var bestSlot = 0u;
  var bestProb = 0.0;
  ${BEST_SLOT}
  // pick k is kept by lane k % SG, in its slot k / SG
  var pickId: array<u32, ${picks}>;
  var pickProb: array<f32, ${picks}>;
  var pickedSum = 0.0;
  for (var k = 0u; k < p.K; k++) {
    let top = subgroupMax(bestKey);
    let holders = subgroupBallot(bestKey == top);
    let winner = ${winner};
    let id = subgroupShuffle(first + bestSlot, winner);
    let prob = subgroupShuffle(bestProb, winner);
    pickedSum += prob;
    for (var r = 0u; r < ${picks}u; r++) {
      if (k == lane + r * SG) { pickId[r] = id; pickProb[r] = prob; }
    }
    if (lane == winner) {
      for (var j = 0u; j < J; j++) { key[j] = select(key[j], TAKEN, j == bestSlot); }
      bestKey = TAKEN;
      ${BEST_SLOT}
    }
  }
  if (live) {
    for (var r = 0u; r < ${picks}u; r++) {
      let k = lane + r * SG;
      if (k < p.K) {
        var w = pickProb[r];
        if (p.norm != 0u) { w = w / (pickedSum + 1e-20); }
        IDS[t * p.K + k] = pickId[r];
        WTS[t * p.K + k] = w * p.scale;
      }
    }
  }
}`;
}

/**
 * The routing kernel of a shape (workgroup: shape.tokens subgroups, one token each; grid from routeGrid). With `norm`,
 * the logits are z'·1/rms(h) of the token's residual row h (H, `dim` wide, bound after WTS): the router product took
 * h itself with the norm's weights folded into its rows, so that it needs no normalized x (gpu-model.ts).
 */
export function routeWGSL(s: RouteShape, norm?: { readonly dim: number; readonly eps: number }): string {
  const bindings =
    norm === undefined
      ? ROUTE_BINDINGS_WGSL
      : ROUTE_BINDINGS_WGSL.replace("@binding(4) var<uniform>", "@binding(5) var<uniform>").replace(
          "var<storage, read_write> WTS: array<f32>;",
          "var<storage, read_write> WTS: array<f32>;\n@group(0) @binding(4) var<storage, read> H: array<vec4f>;",
        );
  const rms =
    norm === undefined
      ? ""
      : `\n  // a constant trip count, so that every load is issued before the sums need them
  var ss = vec4f(0.0);
  for (var k = 0u; k < ${Math.ceil(norm.dim / 4 / s.sg)}u; k++) { let j = k * SG + lane; if (j < ${norm.dim / 4}u) { let v = H[tk * ${norm.dim / 4}u + j]; ss += v * v; } }
  ninv = inverseSqrt(subgroupAdd((ss.x + ss.y) + (ss.z + ss.w)) / ${norm.dim}.0 + ${wgslFloat(norm.eps)});`;
  return /* wgsl */ `enable subgroups;${bindings}
${norm !== undefined ? "var<private> ninv: f32;" : ""}
fn logit(t: u32, e: u32) -> f32 { return Z[p.zOff + t * p.zStride + e]${norm !== undefined ? " * ninv" : ""}; }
fn bias(e: u32) -> f32 { return BIAS[e]; }${routeTokenWGSL(s)}
@compute @workgroup_size(${s.sg * s.tokens})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) lane: u32) {
  let token = (wid.x + wid.y * 65535u) * ${s.tokens}u + li / SG;
  // a subgroup past the last token routes the last one again and writes nothing: no early return, the subgroup
  // operations below stay in uniform control flow
  let tk = min(token, p.n - 1u);${rms}
  routeToken(lane, tk, token < p.n);
}`;
}
