/**
 * One-token absorbed MLA attention as one kernel (`tune.attnFuse`; gpu-model.ts): what the decode step otherwise does
 * in three dependent dispatches — the cache write (RMSNorm(c)·g and rope(k_pe)) with q_pe's rope and the absorb
 * q_abs = W_UK·q_nope, then the attention over the latent cache, then W_UV — for a step of one token whose keys fit
 * one chunk (ATTN_CHUNK), without DSA selections.
 *
 * The grid is (head, split of W_UV's rows): each workgroup computes its head's absorbed query and attention itself
 * (W_UK's 512 × 128 values and ≤ 256 keys, small next to the boundaries it saves) and then only its share of W_UV's
 * rows, so that the kernel spreads over heads × splits SMs instead of one per head. W_UK and W_UV go through the wide
 * kernel's chunk decoders (wide.wgsl.ts), lanes of a row on neighbouring chunks and a shuffle-xor sum: each thread's
 * first chunks are loaded before anything else, the rest in a software-pipelined loop of `unroll` chunk steps a turn.
 * The loop is for code size: on a large GPU the fully unrolled kernel was faster alone and slower in the step (see
 * matmul/select.ts, UNROLL). The keys are scored `keys` per subgroup and iteration with an online softmax per subgroup
 * (each key row read once for its score and its share of the latent), and the subgroups' partial latents merge
 * through workgroup memory.
 *
 * Every workgroup normalizes and ropes the token's own key itself (576 values) and uses it as the last key, so that no
 * workgroup waits for another's cache write; workgroup (0, 0) writes it to the cache for later steps. Types without a
 * chunk decoder go through quant.wgsl.ts's `deq`, renamed per matrix.
 */
import { dequantWGSL, unitSize } from "../quant.wgsl.js";
import { ATTN_CHUNK, KEY_ROW_FN } from "./attention.wgsl.js";
import { typeCode, WIDE_HELPERS, WIDE_TYPES } from "../matmul/wide.wgsl.js";

export interface AttnFusedShape {
  readonly heads: number;
  /** q_nope width (W_UK's columns) */
  readonly P: number;
  /** rope width (q_pe, k_pe) */
  readonly R: number;
  /** latent width (W_UK's rows, W_UV's columns) */
  readonly L: number;
  /** value head width (W_UV's rows) */
  readonly V: number;
  readonly typeK: number;
  readonly typeV: number;
  /** the device's fixed subgroup size */
  readonly sg: number;
  /** workgroups per head, each taking ceil(V / split) of W_UV's rows */
  readonly split: number;
  /** cache keys each subgroup scores per iteration (their loads issued together) */
  readonly keys: number;
  /** most chunk steps of a thread's product unrolled (and loaded at the kernel's start); more go in a loop of that many a turn */
  readonly unroll: number;
  /**
   * true: the token's own key is made here from A0's c and k_pe (and written to the cache by workgroup (0, 0)), the
   * queries read from A0; false (q-LoRA models, whose step writes the cache row before its q_b product): every key,
   * the token's own too, is read from the cache, and binding 0 holds the queries Q (heads × (P + R) per token)
   */
  readonly own: boolean;
  /**
   * Contexts past one chunk of keys (ATTN_CHUNK): workgroup (h, s) takes the s-th of `split` equal ranges of the keys
   * instead of a share of W_UV's rows, and writes its unnormalized latent with its (max, sum) to a scratch buffer
   * (attnFusedPartWords); attnFusedFinishWGSL then merges each head's ranges and applies W_UV. Two dispatches where the
   * unfused path takes four, and each key row read by `split` workgroups instead of heads × split.
   */
  readonly keySplit?: boolean;
  /** threads of a workgroup (a multiple of sg; default attnFusedThreads's 8 subgroups, at most 256) */
  readonly threads?: number;
}

/** Floats of the scratch a key-split kernel writes: per head and range the latent (L) then its max and sum. */
export function attnFusedPartWords(s: Pick<AttnFusedShape, "heads" | "split" | "L">): number {
  return s.heads * s.split * (s.L + 2);
}

/** Parameter block of the fused attention kernel (u32 words; scale and eps as f32 bits). */
export const ATTN_FUSED_PARAMS = [
  "scale",
  "eps",
  "pageSize",
  "kvOff",
  "rowBytesK",
  "itemBytesK",
  "rowBytesV",
  "itemBytesV",
] as const;

/** Subgroups per workgroup: the partial latents they merge take subgroups × L floats of workgroup memory. */
export const ATTN_FUSED_SUBGROUPS = 8;

/** Threads of the kernel's workgroup: the shape's, or 8 subgroups of size sg (at most 256). */
export function attnFusedThreads(s: Pick<AttnFusedShape, "sg" | "threads">): number {
  return s.threads ?? Math.min(256, ATTN_FUSED_SUBGROUPS * s.sg);
}

/** Elements a lane takes per chunk of a row of `type` (a chunk decoder's chunk, or a `deq` unit). */
export function attnFusedChunk(type: number, cols: number): number {
  return WIDE_TYPES.includes(type) ? typeCode(type).elems : unitSize(type, cols);
}

/** Bytes of workgroup memory the kernel declares. */
export function attnFusedBytes(s: Pick<AttnFusedShape, "P" | "R" | "L" | "sg" | "threads">): number {
  const nsg = attnFusedThreads(s) / s.sg;
  return 16 * (padded(s.P / 4) + padded(s.L / 4)) + 4 * (2 * (s.L + s.R) + nsg * s.L + 3 * nsg) + 16;
}

/** vec4s of a staged x of n vec4s with a pad after every 8 (xp below). */
function padded(n: number): number {
  return n + (n >> 3) + 1;
}

/** A type's dequantization helpers with every module-scope name suffixed, so that two types live in one module. */
function dequantAs(type: number, unit: number, suffix: string, buffer: string): string {
  return dequantWGSL(type, unit)
    .replace(/\bW\[/g, `${buffer}[`)
    .replace(/\b(b8|b16|b32|h2f|sx8|smk4|deq|dv|KIQ4|U)\b/g, `$1${suffix}`);
}

interface Product {
  /** statements issuing every load of the thread's chunks (before anything else in the kernel), or "" when `uses` loads in a loop */
  readonly loads: string;
  /** statements computing the rows' sums and calling `store` for each row the thread reports */
  readonly uses: string;
}

/**
 * Rows [first, first + count) of head h's matrix M (`rows` × `cols`, GGUF blocks at p.itemBytesM·h + r·p.rowBytesM)
 * times x, staged in workgroup memory as vec4s (X{M}[xp(v)]). Lanes of a row take neighbouring chunks (`lpr` lanes a
 * row, a power of two ≤ the subgroup), so one pass covers WG / lpr rows; a row's sum is a shuffle-xor over its lanes.
 */
function headProduct(
  M: "K" | "V",
  type: number,
  cols: number,
  first: string,
  count: number,
  rowsAll: number,
  sg: number,
  wg: number,
  unroll: number,
  store: (r: string, v: string) => string,
): Product {
  const wide = WIDE_TYPES.includes(type);
  const elems = attnFusedChunk(type, cols);
  const chunks = cols / elems;
  let lpr = 1;
  while (lpr * 2 <= Math.min(chunks, sg)) lpr *= 2;
  const steps = Math.ceil(chunks / lpr);
  const perPass = wg / lpr;
  const passes = Math.ceil(count / perPass);
  // passes a turn, all unrolled: every pass where they fit `unroll` steps (the GPUs' shapes), else a loop
  const per = Math.max(1, Math.min(passes, Math.floor(unroll / steps)));
  const turns = Math.ceil(passes / per);
  const base = M === "K" ? 0 : 5000;
  const tc = wide ? typeCode(type) : undefined;
  const rename = (code: string, s: number): string =>
    code
      .replace(/\brb\b/g, `rb${s}`)
      .replaceAll("W[", `W${M}[`)
      .replaceAll("wd(", `wd${M}(`)
      .replace(/XREAD\(0, ([^)]*)\)/g, (_, v: string) => `X${M}[xp(${v})]`);
  const limit = `min(${first} + ${count}u, ${rowsAll}u)`;
  const loads: string[] = [];
  const uses: string[] = [];
  for (let q = 0; q < per; q++) {
    const row = `${first} + ${turns > 1 ? `tn${M} * ${per * perPass}u + ` : ""}${q * perPass}u + li / ${lpr}u`;
    const body: string[] = [];
    for (let k = 0; k < steps; k++) {
      const s = base + q * steps + k;
      const chunk = `li % ${lpr}u + ${k * lpr}u`;
      loads.push(
        `let r${s} = min(${row}, ${rowsAll - 1}u); let rb${s} = h * p.itemBytes${M} + r${s} * p.rowBytes${M}; let c${s} = min(${chunk}, ${chunks - 1}u);`,
      );
      let use: string;
      if (tc !== undefined) {
        loads.push(rename(tc.load(s), s));
        use = rename(tc.use(s, 1), s).replaceAll("acc +=", `acc${M} +=`);
      } else {
        use = `deq${M}(rb${s}, c${s});
    for (var i = 0u; i < ${elems}u; i++) { let e = c${s} * ${elems}u + i; acc${M}.x += dv${M}[i] * X${M}[xp(e >> 2u)][e & 3u]; }`;
      }
      body.push((k + 1) * lpr > chunks ? `if (${chunk} < ${chunks}u) {\n    ${use}\n    }` : use);
    }
    const reduce = Array.from(
      { length: Math.log2(lpr) },
      (_, i) => `v${M} += subgroupShuffleXor(v${M}, ${1 << i}u);`,
    ).join(" ");
    uses.push(`acc${M} = vec4f(0.0);
  {
    ${body.join("\n    ")}
  }
  {
    var v${M} = acc${M}.x; ${reduce}
    let row = ${row};
    if (li % ${lpr}u == 0u && row < ${limit}) { ${store("row", `v${M}`)} }
  }`);
  }
  const first_ = loads.join("\n  ");
  if (turns === 1) return { loads: first_, uses: `var acc${M} = vec4f(0.0);\n  ${uses.join("\n  ")}` };
  // software-pipelined turns: the loads' names become variables, loaded for turn 0 at the kernel's start and then, in
  // turn t, for turn t + 1 (the last reloads itself, in bounds and unused) after turn t's values are copied out
  const names = [...first_.matchAll(/let (\w+) =/g)].map((m) => m[1]);
  const current = (code: string): string => code.replace(new RegExp(`\\b(${names.join("|")})\\b`, "g"), "$1_");
  const turn = new RegExp(`\\btn${M}\\b`, "g");
  return {
    loads: first_.replace(turn, "0u").replace(/let (\w+) =/g, "var $1 ="),
    uses: `var acc${M} = vec4f(0.0);
  for (var tn${M} = 0u; tn${M} < ${turns}u; tn${M}++) {
  ${names.map((n) => `let ${n}_ = ${n};`).join(" ")}
  ${first_.replace(turn, `min(tn${M} + 1u, ${turns - 1}u)`).replace(/let (\w+) =/g, "$1 =")}
  ${current(uses.join("\n  "))}
  }`,
  };
}

export function attnFusedWGSL(s: AttnFusedShape): string {
  const { P, R, L, V, sg: SG } = s;
  const WG = attnFusedThreads(s);
  const NSG = WG / SG;
  const D = P + R;
  const HALF = R / 2;
  const CL = Math.ceil(L / SG);
  const CR = Math.ceil(R / SG);
  const VS = Math.ceil(V / s.split);
  const KPS = s.keys;
  const wideK = WIDE_TYPES.includes(s.typeK);
  const wideV = WIDE_TYPES.includes(s.typeV);
  const bind = (M: "K" | "V", type: number, wide: boolean): string => {
    const vec4 = wide && typeCode(type).vec4;
    return `var<storage, read> W${M}: array<${vec4 ? "vec4u" : "u32"}>;${wide && !vec4 ? `\nfn wd${M}(i: u32) -> u32 { return W${M}[i]; }` : ""}`;
  };
  const pk = headProduct("K", s.typeK, P, "0u", L, L, SG, WG, s.unroll, (r, v) => `qs[${r}] = ${v};`);
  const split = s.keySplit === true;
  const pv = headProduct(
    "V",
    s.typeV,
    L,
    `wid.y * ${VS}u`,
    VS,
    V,
    SG,
    WG,
    s.unroll,
    (r, v) => `O[h * ${V}u + ${r}] = ${v};`,
  );
  // lane ℓ's columns of a key: ℓ + SG·i of c (CL of them) and of k_pe (CR)
  const cols = (n: number, count: number, f: (i: number, d: string) => string): string =>
    Array.from({ length: count }, (_, i) => f(i, `min(lane + ${i * SG}u, ${n - 1}u)`)).join(" ");
  // keys read from the cache: all but the token's own (the last) when it is made here
  const KC = s.own ? "(nk - 1u)" : "nk";
  const keyLoads = Array.from({ length: KPS }, (_, kk) => {
    return `let j${kk} = jb + ${kk * NSG}u + sgi; let ok${kk} = j${kk} < kend; let kr${kk} = keyRow(m4.x, min(j${kk}, ${KC} - 1u));
    ${cols(L, CL, (i, d) => `let kc${kk}_${i} = CC[kr${kk} * ${L}u + ${d}];`)}
    ${cols(R, CR, (i, d) => `let kp${kk}_${i} = CK[kr${kk} * ${R}u + ${d}];`)}`;
  }).join("\n    ");
  const keyUses = Array.from({ length: KPS }, (_, kk) => {
    const dot = [
      ...Array.from({ length: CL }, (_, i) => `qv[${i}] * kc${kk}_${i}`),
      ...Array.from({ length: CR }, (_, i) => `qr[${i}] * kp${kk}_${i}`),
    ].join(" + ");
    return `{
      let sv = select(${NEG}, subgroupAdd(${dot}) * p.scale, ok${kk});
      let mn = max(mrun, sv);
      let corr = exp(mrun - mn);
      let pj = select(0.0, exp(sv - mn), ok${kk});
      lrun = lrun * corr + pj;
      ${Array.from({ length: CL }, (_, i) => `acc[${i}] = acc[${i}] * corr + pj * kc${kk}_${i};`).join(" ")}
      mrun = mn;
    }`;
  }).join("\n    ");
  const cacheAccess = s.own ? "read_write" : "read";
  const bindings = [
    "var<storage, read> A0: array<f32>;",
    bind("K", s.typeK, wideK),
    ...(split ? [] : [bind("V", s.typeV, wideV)]),
    ...(s.own ? ["var<storage, read> G: array<f32>;"] : []),
    "var<storage, read> CS: array<f32>;",
    "var<storage, read> POS: array<u32>;",
    ...(s.own ? ["var<storage, read> ROW: array<u32>;"] : []),
    `var<storage, ${cacheAccess}> CC: array<f32>;`,
    `var<storage, ${cacheAccess}> CK: array<f32>;`,
    "var<storage, read> META: array<u32>;",
    "var<storage, read> SEL: array<u32>;",
    "var<storage, read_write> O: array<f32>;",
    "var<uniform> p: P;",
  ];
  const ownDot = [
    ...Array.from({ length: CL }, (_, i) => `qv[${i}] * cur[min(lane + ${i * SG}u, ${L - 1}u)]`),
    ...Array.from({ length: CR }, (_, i) => `qr[${i}] * cur[${L}u + min(lane + ${i * SG}u, ${R - 1}u)]`),
  ].join(" + ");
  return /* wgsl */ `enable subgroups;
struct P { ${ATTN_FUSED_PARAMS.map((k) => `${k}: ${k === "scale" || k === "eps" ? "f32" : "u32"}`).join(", ")} }
${bindings.map((b, i) => `@group(0) @binding(${i}) ${b}`).join("\n")}
${KEY_ROW_FN}
${wideK || wideV ? WIDE_HELPERS : ""}
${wideK ? "" : dequantAs(s.typeK, attnFusedChunk(s.typeK, P), "K", "WK")}
${wideV || split ? "" : dequantAs(s.typeV, attnFusedChunk(s.typeV, L), "V", "WV")}
// q_nope and the latent as vec4s with a pad after every 8 (lanes of a row read neighbouring chunks)
var<workgroup> XK: array<vec4f, ${padded(P / 4)}>;
var<workgroup> XV: array<vec4f, ${padded(L / 4)}>;
var<workgroup> qs: array<f32, ${L + R}>;
var<workgroup> cur: array<f32, ${L + R}>;
var<workgroup> part: array<f32, ${NSG * L}>;
var<workgroup> sm: array<f32, ${NSG}>;
var<workgroup> sl: array<f32, ${NSG}>;
var<workgroup> red: array<f32, ${NSG}>;
var<workgroup> mt: vec4u;
fn xp(v: u32) -> u32 { return v + (v >> 3u); }
fn total(li: u32, v: f32) -> f32 {
  let t = subgroupAdd(v);
  if (li % ${SG}u == 0u) { red[li / ${SG}u] = t; }
  workgroupBarrier();
  var a = 0.0;
  for (var k = 0u; k < ${NSG}u; k++) { a += red[k]; }
  workgroupBarrier();
  return a;
}
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let lane = li % ${SG}u;
  let sgi = li / ${SG}u;
  if (li == 0u) { mt = vec4u(META[0], META[1], META[2], META[3]); }
  // every weight load of this thread first: W_UK's chunks for the absorb, W_UV's for this split's rows
  ${pk.loads}
  ${split ? "" : pv.loads}
  let m4 = workgroupUniformLoad(&mt);
  let nk = ${split ? "m4.y" : `min(m4.y, ${ATTN_CHUNK}u)`};
  let pos = POS[0];
  let qo = h * ${D}u;
  // q_nope; q_pe roped into qs[L..L+R)${s.own ? "; the token's own key: RMSNorm(c)·g and rope(k_pe) into cur" : ""}
  for (var i = li; i < ${P / 4}u; i += ${WG}u) { XK[xp(i)] = vec4f(A0[qo + 4u * i], A0[qo + 4u * i + 1u], A0[qo + 4u * i + 2u], A0[qo + 4u * i + 3u]); }
  ${s.own ? "var ss = 0.0;" : ""}
  ${s.own ? `for (var i = li; i < ${L}u; i += ${WG}u) { let v = A0[p.kvOff + i]; ss += v * v; }` : ""}
  for (var i = li; i < ${HALF}u; i += ${WG}u) {
    let c = CS[(pos * ${HALF}u + i) * 2u];
    let sn = CS[(pos * ${HALF}u + i) * 2u + 1u];
    let x0 = A0[qo + ${P}u + 2u * i];
    let x1 = A0[qo + ${P}u + 2u * i + 1u];
    qs[${L}u + 2u * i] = x0 * c - x1 * sn;
    qs[${L}u + 2u * i + 1u] = x0 * sn + x1 * c;${
      s.own
        ? `
    let y0 = A0[p.kvOff + ${L}u + 2u * i];
    let y1 = A0[p.kvOff + ${L}u + 2u * i + 1u];
    cur[${L}u + 2u * i] = y0 * c - y1 * sn;
    cur[${L}u + 2u * i + 1u] = y0 * sn + y1 * c;`
        : ""
    }
  }
  ${
    s.own
      ? `let inv = 1.0 / sqrt(total(li, ss) / ${L}.0 + p.eps);
  for (var i = li; i < ${L}u; i += ${WG}u) { cur[i] = A0[p.kvOff + i] * inv * G[i]; }
  workgroupBarrier();
  if (h == 0u && wid.y == 0u) {
    let row = ROW[0];
    for (var i = li; i < ${L}u; i += ${WG}u) { CC[row * ${L}u + i] = cur[i]; }
    for (var i = li; i < ${R}u; i += ${WG}u) { CK[row * ${R}u + i] = cur[${L}u + i]; }
  }`
      : "workgroupBarrier();"
  }
  // the absorbed query: qs[r] = W_UK[h][r]·q_nope
  ${pk.uses}
  workgroupBarrier();
  // the query's columns of this lane in registers; each subgroup starts an online softmax (subgroup 0 with the token's
  // own key when it is in cur), then takes the cache keys jb + kk·${NSG} + sgi, ${KPS} an iteration
  var qv: array<f32, ${CL}>;
  var qr: array<f32, ${CR}>;
  ${Array.from({ length: CL }, (_, i) => `qv[${i}] = select(0.0, qs[min(lane + ${i * SG}u, ${L - 1}u)], lane + ${i * SG}u < ${L}u);`).join(" ")}
  ${Array.from({ length: CR }, (_, i) => `qr[${i}] = select(0.0, qs[${L}u + min(lane + ${i * SG}u, ${R - 1}u)], lane + ${i * SG}u < ${R}u);`).join(" ")}
  ${
    s.own
      ? `let own = subgroupAdd(${ownDot}) * p.scale;
  let first = sgi == 0u${split ? " && wid.y == 0u" : ""};
  var mrun = select(${NEG}, own, first);
  var lrun = select(0.0, 1.0, first);
  var acc: array<f32, ${CL}>;
  ${Array.from({ length: CL }, (_, i) => `acc[${i}] = select(0.0, cur[min(lane + ${i * SG}u, ${L - 1}u)], first);`).join(" ")}`
      : `var mrun = ${NEG};
  var lrun = 0.0;
  var acc: array<f32, ${CL}>;`
  }
  // the cache keys this workgroup scores: ${split ? `its range, the wid.y-th of ${s.split}` : "all of them"}
  ${
    split
      ? `let kspan = (${KC} + ${s.split - 1}u) / ${s.split}u;
  let kstart = min(wid.y * kspan, ${KC});
  let kend = min(kstart + kspan, ${KC});`
      : `let kstart = 0u;
  let kend = ${KC};`
  }
  for (var jb = kstart; jb < kend; jb += ${NSG * KPS}u) {
    ${keyLoads}
    ${keyUses}
  }
  // merge the subgroups' (max, sum, Σ p·c) into the latent (XV)
  if (lane == 0u) { sm[sgi] = mrun; sl[sgi] = lrun; }
  ${Array.from({ length: CL }, (_, i) => `if (lane + ${i * SG}u < ${L}u) { part[sgi * ${L}u + lane + ${i * SG}u] = acc[${i}]; }`).join(" ")}
  workgroupBarrier();
  var mt_ = sm[0];
  for (var k = 1u; k < ${NSG}u; k++) { mt_ = max(mt_, sm[k]); }
  var lt = 0.0;
  for (var k = 0u; k < ${NSG}u; k++) { lt += sl[k] * exp(sm[k] - mt_); }
  for (var c4 = li; c4 < ${L / 4}u; c4 += ${WG}u) {
    var a = vec4f(0.0);
    for (var k = 0u; k < ${NSG}u; k++) {
      let o = k * ${L}u + 4u * c4;
      a += exp(sm[k] - mt_) * vec4f(part[o], part[o + 1u], part[o + 2u], part[o + 3u]);
    }
    ${split ? `O[(h * ${s.split}u + wid.y) * ${L + 2}u + 4u * c4] = a.x; O[(h * ${s.split}u + wid.y) * ${L + 2}u + 4u * c4 + 1u] = a.y; O[(h * ${s.split}u + wid.y) * ${L + 2}u + 4u * c4 + 2u] = a.z; O[(h * ${s.split}u + wid.y) * ${L + 2}u + 4u * c4 + 3u] = a.w;` : "XV[xp(c4)] = a / lt;"}
  }
  ${
    split
      ? `if (li == 0u) { O[(h * ${s.split}u + wid.y) * ${L + 2}u + ${L}u] = mt_; O[(h * ${s.split}u + wid.y) * ${L + 2}u + ${L + 1}u] = lt; }
}`
      : `workgroupBarrier();
  // this split's rows of the head's output: W_UV[h]·latent
  ${pv.uses}
}`
  }`;
}

const NEG = "-3.0e38";

/**
 * The second dispatch of a key-split shape: workgroup (h, s) merges head h's `split` key ranges from the scratch
 * (latents weighted by exp(max − the head's max), over the same-weighted sums) into the latent, then computes its share
 * of W_UV's rows as attnFusedWGSL does. Bindings: WV, PART (attnFusedPartWords floats), O, then the parameter block.
 */
export function attnFusedFinishWGSL(s: AttnFusedShape): string {
  const { L, V, sg: SG } = s;
  const WG = attnFusedThreads(s);
  const VS = Math.ceil(V / s.split);
  const wideV = WIDE_TYPES.includes(s.typeV);
  const vec4 = wideV && typeCode(s.typeV).vec4;
  const pv = headProduct(
    "V",
    s.typeV,
    L,
    `wid.y * ${VS}u`,
    VS,
    V,
    SG,
    WG,
    s.unroll,
    (r, v) => `O[h * ${V}u + ${r}] = ${v};`,
  );
  const at = (k: string): string => `(h * ${s.split}u + ${k}) * ${L + 2}u`;
  return /* wgsl */ `enable subgroups;
struct P { ${ATTN_FUSED_PARAMS.map((k) => `${k}: ${k === "scale" || k === "eps" ? "f32" : "u32"}`).join(", ")} }
@group(0) @binding(0) var<storage, read> WV: array<${vec4 ? "vec4u" : "u32"}>;${wideV && !vec4 ? "\nfn wdV(i: u32) -> u32 { return WV[i]; }" : ""}
@group(0) @binding(1) var<storage, read> PART: array<f32>;
@group(0) @binding(2) var<storage, read_write> O: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
${wideV ? WIDE_HELPERS : dequantAs(s.typeV, attnFusedChunk(s.typeV, L), "V", "WV")}
var<workgroup> XV: array<vec4f, ${padded(L / 4)}>;
fn xp(v: u32) -> u32 { return v + (v >> 3u); }
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  ${pv.loads}
  // the head's max over its ranges (a range without keys has max ${NEG} and sum 0), then the merged sum
  var mx = ${NEG};
  for (var k = 0u; k < ${s.split}u; k++) { mx = max(mx, PART[${at("k")} + ${L}u]); }
  var lt = 0.0;
  for (var k = 0u; k < ${s.split}u; k++) { lt += PART[${at("k")} + ${L + 1}u] * exp(PART[${at("k")} + ${L}u] - mx); }
  for (var c4 = li; c4 < ${L / 4}u; c4 += ${WG}u) {
    var a = vec4f(0.0);
    for (var k = 0u; k < ${s.split}u; k++) {
      let o = ${at("k")} + 4u * c4;
      a += exp(PART[${at("k")} + ${L}u] - mx) * vec4f(PART[o], PART[o + 1u], PART[o + 2u], PART[o + 3u]);
    }
    XV[xp(c4)] = a / lt;
  }
  workgroupBarrier();
  ${pv.uses}
}`;
}
