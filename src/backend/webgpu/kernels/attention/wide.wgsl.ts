/**
 * Wide absorbed-MLA decode attention (1–4 queries): all heads of a query attend over the same latent rows (K1 = V = c,
 * K2 = k_pe, head strides 0), so a workgroup takes a group of G heads (default 4) and reads every key once for all of
 * them. Why this shape, from a large GPU's side (132 SMs, 128 FP32 FMA/clk each, about 64 B/clk from L2 into one SM and
 * 128 B/clk of L1/shared bandwidth, ~0.5 µs to DRAM, ≥ 2 µs for each dependent dispatch):
 *
 * - The previous kernel's time was latency: a subgroup scored one key per loop iteration, the V loop walked the keys
 *   again four at a time, and one workgroup per head re-read every key per head. Here a workgroup first stages its q
 *   (vec4 over the G heads per column) and turns all its keys into row indices (selection and page-table lookups at
 *   once), one barrier; then keys go in tiles of TK = 32: each subgroup scores its TK / subgroups keys (4 at 32 lanes),
 *   lane ℓ reading columns ℓ, ℓ + sg, … of each row (coalesced, the 4 × 18 loads of a tile issued together), q in
 *   registers, one vec4 subgroupAdd per key. Per tile two barriers (scores → probabilities → weighted sum); the online
 *   softmax (FlashAttention's running max and rescale) keeps one pass over the keys.
 * - Weighted sum: thread t owns output columns t, t + 256 for the G heads (vec4 accumulators) and reads c of the
 *   tile's rows again, rows the tile has just brought into L1: 2·G accumulators per thread and no merge across
 *   subgroups. Per key and SM that is ≈ 50 L1 wavefronts (18 score loads, 32 for the sum) for G heads, where the
 *   previous kernel spent ≈ 68 per head.
 * - G = 4 balances the SM: a key costs 4 × 1088 FMAs (34 clk at full rate) against 2.3 KB from L2 (36 clk); fewer heads
 *   would leave it bandwidth-bound, more need more registers and workgroup memory (q is 9 KB at G = 4).
 * - Splits: a workgroup streaming all keys alone is bound by its SM (≈ 25 ns per key), so past `splitFrom` keys
 *   (default 256, about where a second dispatch — ≥ 2 µs plus its latency — costs less than the extra keys) they are
 *   split until the grid has about `wgs` (128) workgroups. Splits write (max, sum, Σ p·c); a combine dispatch (one
 *   thread per output column, reading only the splits that hold keys of its query) merges them. WGSL has no
 *   device-scope release/acquire, so a workgroup cannot safely read another's partials within one dispatch: longer
 *   contexts take two dispatches. V3's 128 heads (32 groups per query) fill the GPU with few or no splits.
 *
 * Everything but the grid is decided by the step's key chunks (ceil(maxKeys / ATTN_CHUNK)), as the recorded steps of
 * gpu-model.ts expect: the kernel reads each query's real key count from META.
 */
import { ATTN_CHUNK, KEY_ROW_FN } from "./attention.wgsl.js";

/** The wide kernel serves steps of at most this many queries. */
export const ATTN_WIDE_MAX_Q = 4;
/** Most keys one workgroup takes (their row indices are staged in workgroup memory). */
export const ATTN_WIDE_ROWS = 1024;
/** Most key splits of one (query, head group). */
export const ATTN_WIDE_MAX_SPLITS = 64;
/** Splits never get fewer keys than this (bounds the scratch: at most 8 splits per ATTN_CHUNK). */
export const ATTN_WIDE_MIN_SPLIT_KEYS = 32;
/** Threads a workgroup of the wide kernel. */
export const ATTN_WIDE_THREADS = 256;
const THREADS = ATTN_WIDE_THREADS;
/**
 * Lane-columns per iteration of the score loop (a subgroup of 32 reads a whole 576-wide row in one; subgroups of less
 * than 16 lanes take 4 a step: lavapipe's LLVM needs minutes for the unrolled form), keys per iteration of the
 * weighted sum.
 */
const colsStep = (sg: number): number => (sg >= 16 ? 18 : 4);
const pvStep = (sg: number): number => (sg >= 16 ? 16 : 8);
const NEG = "-3.0e38";

/** Parameter block of the wide kernel and its combine (u32 words; scale as f32 bits). */
export const ATTN_WIDE_PARAMS = [
  "nq",
  "heads",
  "dv",
  "qOff",
  "qStride",
  "qHead",
  "q2Off",
  "k1Off",
  "k1Stride",
  "k2Off",
  "k2Stride",
  "oOff",
  "oStride",
  "oHead",
  "splits",
  "splitKeys",
  "scale",
  "pageSize",
] as const;

export interface AttnWidePlan {
  /** heads per workgroup (G) */
  readonly group: number;
  /** keys per tile (TK = subgroups × keys per subgroup) */
  readonly tile: number;
  /** key splits per (query, head group); 1 = one dispatch, final results */
  readonly splits: number;
  /** keys per split (a multiple of the tile) */
  readonly splitKeys: number;
}

/**
 * A lane's columns of a row `width` wide in loops of `per` lane-columns (sg apart) per iteration, `padded` columns in
 * all (q is 0 in the padding, whose key loads are clamped into the row).
 */
function lanePart(width: number, sg: number): { per: number; iters: number; padded: number } {
  const n = Math.ceil(width / sg);
  const iters = Math.ceil(n / colsStep(sg));
  const per = Math.ceil(n / iters);
  return { per, iters, padded: per * iters * sg };
}

/** Bytes of workgroup memory the wide kernel takes. */
export function attnWideBytes(d1: number, d2: number, sg: number, plan: Pick<AttnWidePlan, "group" | "tile">): number {
  const GV = Math.ceil(plan.group / 4);
  return (
    ATTN_WIDE_ROWS * 4 +
    (GV * (lanePart(d1, sg).padded + lanePart(d2, sg).padded) + 2 * plan.tile * GV + (THREADS / sg) * GV) * 16
  );
}

/** Floats of split scratch the wide kernel may need in steps of up to `nq` queries (it serves at most ATTN_WIDE_MAX_Q). */
export function attnWideScratch(nq: number, heads: number, dv: number, maxKeys: number): number {
  const keys = Math.max(1, Math.ceil(maxKeys / ATTN_CHUNK)) * ATTN_CHUNK;
  return (
    Math.min(nq, ATTN_WIDE_MAX_Q) * heads * Math.min(ATTN_WIDE_MAX_SPLITS, keys / ATTN_WIDE_MIN_SPLIT_KEYS) * (dv + 2)
  );
}

const paramStruct = `struct P { ${ATTN_WIDE_PARAMS.map((k) => `${k}: ${k === "scale" ? "f32" : "u32"}`).join(", ")} }`;

/**
 * The latent attention kernels' interface (this kernel's and tiled.wgsl.ts'): the parameter block and bindings Q, KC
 * (c: keys and values), KP (k_pe), META, SEL, O, with keyRow.
 */
export const LATENT_ATTN_BINDINGS = `${paramStruct}
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> KC: array<f32>;
@group(0) @binding(2) var<storage, read> KP: array<f32>;
@group(0) @binding(3) var<storage, read> META: array<u32>;
@group(0) @binding(4) var<storage, read> SEL: array<u32>;
@group(0) @binding(5) var<storage, read_write> O: array<f32>;
@group(0) @binding(6) var<uniform> p: P;
${KEY_ROW_FN}`;

/**
 * The wide kernel for latent widths d1 (= dv) and d2 ≥ 1, subgroup size `sg`, G heads and TK keys per tile. Grid:
 * (splits, head groups, queries). Bindings: Q, KC (c: K1 and V), KP (k_pe), META, SEL, O (final rows, or with `split`
 * the partials ((i·heads + h)·splits + s)·(dv + 2): max, sum, Σ p·c).
 *
 * The per-lane work is written as loops of at most colsStep columns (scores) and pvStep keys (weighted sum) per
 * iteration, each iteration's loads independent and issued together: on a GPU with subgroups of 32 the score loop is
 * straight-line code (a lane's 4 × 18 loads of a tile at once, q in registers with constant indices); with small
 * subgroups (lavapipe's 8, four times the columns per lane) fully unrolled code would take LLVM minutes to compile.
 */
export function attnWideWGSL(
  d1: number,
  d2: number,
  sg: number,
  plan: Pick<AttnWidePlan, "group" | "tile">,
  split: boolean,
): string {
  const G = plan.group;
  const GV = Math.ceil(G / 4);
  const NSG = THREADS / sg;
  const TK = plan.tile;
  const B = TK / NSG;
  const NC = Math.ceil(d1 / THREADS);
  // keys per iteration of the weighted sum: a divisor of the tile (the iterations stay inside the tile's scores)
  let PU = Math.min(TK, pvStep(sg));
  while (TK % PU !== 0) PU--;
  const L = (...lines: string[]): string => lines.join("\n  ");
  const range = (n: number): number[] => Array.from({ length: n }, (_, k) => k);
  const P1 = lanePart(d1, sg);
  const P2 = lanePart(d2, sg);
  // q columns in workgroup memory: [c part (P1.padded) | k_pe part (P2.padded)] per vec4 of heads
  const QP = P1.padded + P2.padded;
  // q of the group's heads in registers: q4[hv·QN + k] is the lane's k-th column (c part, then k_pe part)
  const QN = QP / sg;
  const scoreLoop = (
    buf: string,
    off: string,
    width: number,
    pt: { per: number; iters: number; padded: number },
    qBase: number,
  ): string[] => {
    const clamp = pt.padded > width;
    // one iteration: straight-line code with constant q4 indices; else a loop over column chunks
    const k0 = pt.iters === 1 ? "0u" : "k0";
    const qIndex = (hv: number, u: number): string =>
      pt.iters === 1 ? `${hv * QN + qBase / sg + u}` : `${hv * QN + qBase / sg + u}u + k0 / ${sg}u`;
    return [
      ...(pt.iters === 1 ? [`{`] : [`for (var k0 = 0u; k0 < ${pt.padded}u; k0 += ${pt.per * sg}u) {`]),
      ...range(B).flatMap((b) =>
        range(pt.per).map(
          (u) =>
            `  let v${b}_${u} = ${buf}[${off}${b} + ${clamp ? `min(${k0} + lane + ${u * sg}u, ${width - 1}u)` : `${k0} + lane + ${u * sg}u`}];`,
        ),
      ),
      ...range(B).flatMap((b) =>
        range(GV).map(
          (hv) =>
            `  s${b}_${hv} += ${range(pt.per)
              .map((u) => `q4[${qIndex(hv, u)}] * v${b}_${u}`)
              .join(" + ")};`,
        ),
      ),
      `}`,
    ];
  };
  const scores = [
    ...range(B).flatMap((b) => [
      `let r${b} = vr[min(tb + w * ${B}u + ${b}u, cnt - 1u)];`,
      `let cb${b} = p.k1Off + r${b} * p.k1Stride;`,
      `let pb${b} = p.k2Off + r${b} * p.k2Stride;`,
      ...range(GV).map((hv) => `var s${b}_${hv} = vec4f(0.0);`),
    ]),
    ...scoreLoop("KC", "cb", d1, P1, 0),
    ...scoreLoop("KP", "pb", d2, P2, P1.padded),
    ...range(B).flatMap((b) =>
      range(GV).map(
        (hv) =>
          `s${b}_${hv} = select(vec4f(${NEG}), subgroupAdd(s${b}_${hv}) * p.scale, tb + w * ${B}u + ${b}u < cnt);`,
      ),
    ),
  ];
  const pv = [
    `let jn = min(${TK}u, cnt - tb);`,
    `for (var j0 = 0u; j0 < jn; j0 += ${PU}u) {`,
    ...range(PU).flatMap((j) => [
      `  let vb${j} = p.k1Off + vr[min(tb + j0 + ${j}u, cnt - 1u)] * p.k1Stride;`,
      ...range(GV).map((hv) => `  let p${j}_${hv} = sc[par + (j0 + ${j}u) * ${GV}u + ${hv}u];`),
      ...range(NC).map(
        (c) =>
          `  let v${j}_${c} = KC[vb${j} + ${(c + 1) * THREADS > d1 ? `min(li + ${c * THREADS}u, ${d1 - 1}u)` : `li + ${c * THREADS}u`}];`,
      ),
    ]),
    ...range(GV).map(
      (hv) =>
        `  l[${hv}] += ${range(PU)
          .map((j) => `p${j}_${hv}`)
          .join(" + ")};`,
    ),
    ...range(NC).flatMap((c) =>
      range(GV).map(
        (hv) =>
          `  acc[${c * GV + hv}] += ${range(PU)
            .map((j) => `p${j}_${hv} * v${j}_${c}`)
            .join(" + ")};`,
      ),
    ),
    `}`,
  ];
  // per head of the group: write its results (h: the head's index within the group, e: its vec4 component)
  const perHead = (body: (h: number, hv: number, e: string) => string[]): string[] =>
    range(G).map((h) =>
      L(
        `if (h0 + ${h}u < p.heads) {`,
        ...body(h, Math.floor(h / 4), ["x", "y", "z", "w"][h % 4]).map((s) => `  ${s}`),
        `}`,
      ),
    );
  const columns = (body: (c: number, d: string) => string[]): string[] =>
    range(NC).map((c) => {
      const d = `li + ${c * THREADS}u`;
      const inner = body(c, d);
      return (c + 1) * THREADS > d1 ? L(`if (${d} < ${d1}u) {`, ...inner.map((s) => `  ${s}`), `}`) : L(...inner);
    });
  const partBase = (h: number): string => `((i * p.heads + h0 + ${h}u) * p.splits + sp) * (p.dv + 2u)`;
  const finish = split
    ? [
        `if (li == 0u) {`,
        ...perHead((h, hv, e) => [`O[${partBase(h)}] = m[${hv}].${e};`, `O[${partBase(h)} + 1u] = l[${hv}].${e};`]).map(
          (s) => `  ${s}`,
        ),
        `}`,
        ...columns((c, d) =>
          perHead((h, hv, e) => [`O[${partBase(h)} + 2u + ${d}] = acc[${c * GV + hv}].${e};`]).flat(),
        ),
      ]
    : columns((c, d) =>
        perHead((h, hv, e) => [
          `O[oo + (h0 + ${h}u) * p.oHead + ${d}] = acc[${c * GV + hv}].${e} / l[${hv}].${e};`,
        ]).flat(),
      );
  const empty = split
    ? [
        `if (li == 0u) {`,
        ...perHead((h) => [`O[${partBase(h)}] = ${NEG};`, `O[${partBase(h)} + 1u] = 0.0;`]).map((s) => `  ${s}`),
        `}`,
        ...columns((_, d) => perHead((h) => [`O[${partBase(h)} + 2u + ${d}] = 0.0;`]).flat()),
      ]
    : columns((_, d) => perHead((h) => [`O[oo + (h0 + ${h}u) * p.oHead + ${d}] = 0.0;`]).flat());
  // one vec4 of q (4 heads) at padded column c of head vec4 hv
  const qColumn = [
    `let hv = e / ${QP}u;`,
    `let c = e % ${QP}u;`,
    `let inC = c < ${P1.padded}u;`,
    `let d = select(c - ${P1.padded}u, c, inC);`,
    `let ok = d < select(${d2}u, ${d1}u, inC);`,
    `let qo = qb + select(p.q2Off, 0u, inC) + min(d, select(${d2 - 1}u, ${d1 - 1}u, inC));`,
    `var v = vec4f(0.0);`,
    ...range(4).map(
      (k) =>
        `if (ok && hv * 4u + ${k}u < ${G}u && h0 + hv * 4u + ${k}u < p.heads) { v[${k}] = Q[qo + (h0 + hv * 4u + ${k}u) * p.qHead]; }`,
    ),
    `qs[e] = v;`,
  ];
  return /* wgsl */ `enable subgroups;
${LATENT_ATTN_BINDINGS}
var<workgroup> vr: array<u32, ${ATTN_WIDE_ROWS}>;
var<workgroup> qs: array<vec4f, ${GV * QP}>;
var<workgroup> sc: array<vec4f, ${2 * TK * GV}>;
var<workgroup> smax: array<vec4f, ${NSG * GV}>;
@compute @workgroup_size(${THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let sp = wid.x;
  let h0 = wid.y * ${G}u;
  let i = wid.z;
  let w = li / ${sg}u;
  let lane = li % ${sg}u;
  // the group's queries (vec4 over heads per column) into workgroup memory, issued before anything they do not need
  let qb = p.qOff + i * p.qStride;
  ${range(Math.ceil((GV * QP) / THREADS))
    .map((k) =>
      L(
        `{`,
        `  let e = li + ${k * THREADS}u;`,
        `  if (e < ${GV * QP}u) {`,
        ...qColumn.map((x) => `    ${x}`),
        `  }`,
        `}`,
      ),
    )
    .join("\n  ")}
  // META is read-only storage: the same words in every thread, uniform for the barriers below
  let base = META[4u * i];
  let nk = META[4u * i + 1u];
  let selOff = META[4u * i + 2u];
  let useSel = META[4u * i + 3u];
  let j0 = sp * p.splitKeys;
  let cnt = select(0u, min(p.splitKeys, nk - j0), nk > j0);
  let oo = p.oOff + i * p.oStride;
  if (cnt == 0u) {
    ${L(...empty).replaceAll("\n  ", "\n    ")}
    return;
  }
  // the row indices of the split's keys (straight-line code: every lookup issued at once)
  ${range(ATTN_WIDE_ROWS / THREADS)
    .map((k) =>
      L(
        `if (li + ${k * THREADS}u < cnt) {`,
        `  var u = j0 + li + ${k * THREADS}u;`,
        `  if (useSel != 0u) { u = SEL[selOff + u]; }`,
        `  vr[li + ${k * THREADS}u] = keyRow(base, u);`,
        `}`,
      ),
    )
    .join("\n  ")}
  workgroupBarrier();
  // (unrolled where it becomes registers on a GPU; a loop for small subgroups, where 4× the registers take LLVM long)
  var q4: array<vec4f, ${GV * QN}>;
  ${
    sg >= 16
      ? range(GV * QN)
          .map((k) => `q4[${k}] = qs[${Math.floor(k / QN) * QP + (k % QN) * sg}u + lane];`)
          .join("\n  ")
      : `for (var k = 0u; k < ${GV * QN}u; k++) { q4[k] = qs[(k / ${QN}u) * ${QP}u + (k % ${QN}u) * ${sg}u + lane]; }`
  }
  let tiles = (cnt + ${TK - 1}u) / ${TK}u;
  var m = array<vec4f, ${GV}>(${range(GV)
    .map(() => `vec4f(${NEG})`)
    .join(", ")});
  var l: array<vec4f, ${GV}>;
  var acc: array<vec4f, ${NC * GV}>;
  for (var t = 0u; t < tiles; t++) {
    let tb = t * ${TK}u;
    let par = (t & 1u) * ${TK * GV}u;
    // scores of this subgroup's ${B} key(s) for the group's heads
    ${L(...scores).replaceAll("\n  ", "\n    ")}
    if (lane == 0u) {
      ${range(GV)
        .flatMap((hv) => [
          ...range(B).map((b) => `sc[par + (w * ${B}u + ${b}u) * ${GV}u + ${hv}u] = s${b}_${hv};`),
          `smax[w * ${GV}u + ${hv}u] = ${range(B).reduce((a, b) => (a === "" ? `s${b}_${hv}` : `max(${a}, s${b}_${hv})`), "")};`,
        ])
        .join("\n      ")}
    }
    workgroupBarrier();
    // the running max over the tile; the tile's probabilities (one thread per key)
    var mn = m;
    for (var s = 0u; s < ${NSG}u; s++) {
      ${range(GV)
        .map((hv) => `mn[${hv}] = max(mn[${hv}], smax[s * ${GV}u + ${hv}u]);`)
        .join("\n      ")}
    }
    if (li < ${TK}u) {
      ${range(GV)
        .map((hv) => `sc[par + li * ${GV}u + ${hv}u] = exp(sc[par + li * ${GV}u + ${hv}u] - mn[${hv}]);`)
        .join("\n      ")}
    }
    workgroupBarrier();
    // rescale to the new max, then Σ p·c over the tile for this thread's columns
    ${range(GV)
      .flatMap((hv) => [
        `let a${hv} = exp(m[${hv}] - mn[${hv}]);`,
        `l[${hv}] *= a${hv};`,
        ...range(NC).map((c) => `acc[${c * GV + hv}] *= a${hv};`),
      ])
      .join("\n    ")}
    m = mn;
    ${L(...pv).replaceAll("\n  ", "\n    ")}
  }
  ${L(...finish)}
}`;
}

/**
 * Merges the splits' partials: one thread per output column, grid (ceil(dv / 128), heads, queries); only the splits
 * that hold keys of the query (its count from META) are read.
 */
export const ATTN_WIDE_COMBINE_WGSL = /* wgsl */ `
${paramStruct}
@group(0) @binding(0) var<storage, read> PART: array<f32>;
@group(0) @binding(1) var<storage, read> META: array<u32>;
@group(0) @binding(2) var<storage, read_write> O: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let d = wid.x * 128u + li;
  let h = wid.y;
  let i = wid.z;
  if (d >= p.dv) { return; }
  let nk = META[4u * i + 1u];
  let used = min(p.splits, (nk + p.splitKeys - 1u) / p.splitKeys);
  let base = (i * p.heads + h) * p.splits;
  let stride = p.dv + 2u;
  var mx = ${NEG};
  for (var s = 0u; s < used; s++) { mx = max(mx, PART[(base + s) * stride]); }
  var sum = 0.0;
  var a = 0.0;
  for (var s = 0u; s < used; s++) {
    let o = (base + s) * stride;
    let e = exp(PART[o] - mx);
    sum += e * PART[o + 1u];
    a += e * PART[o + 2u + d];
  }
  O[p.oOff + i * p.oStride + h * p.oHead + d] = select(0.0, a / sum, used > 0u);
}`;
