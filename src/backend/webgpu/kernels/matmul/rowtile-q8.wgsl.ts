/**
 * The row-tiled kernel on integer dot products, for the opt-in 8-bit activations (RuntimeOptions `activations: "q8"`):
 * the shapes, grids, modes and bindings of rowtile.wgsl.ts (one thread per row or `ksplit` threads per row, a tile of
 * tokens or of an expert's pairs, steps of `ks` columns), with the arithmetic of gemm-q8.wgsl.ts:
 * - per step each thread first loads its units' weights as integers (32 int8 per 32-column unit, two vec4u) and the
 *   unit's (s0, s1, min) — Q4_K as vec4s, a pair of units from the same 32 bytes of nibbles; Q5_0 as the six words
 *   that hold a block; other types through q8WeightWGSL, a word per four values (each lane reads its own row, so the
 *   number of load instructions, not the arithmetic, bounds the kernel on a large GPU) — then the workgroup
 *   stages the tile's x quantized per 32 values as ggml's q8_1 (d = amax/127, q = round(x/d), d·Σq) between two
 *   barriers;
 * - a (row, token) unit is eight `dot4I8Packed` against two broadcast vec4u reads of workgroup memory, exact in i32,
 *   and one scaled f32 update (Q6_K: its two half scales on their halves' sums; types with mins subtract min·d·Σq).
 * - With `pieces` = 2 (tune.rowTileX16) x is quantized to 15 bits (d = amax/16256, q = 128·hi + lo) and each half-unit
 *   sum is 128·Σw·hi + Σw·lo, still exact in i32.
 *
 * With `xq8` (one piece) the x comes quantized from the pass of xq8.wgsl.ts and the staging only copies it.
 *
 * Why: at a batched decode step the routed experts get a few pairs each, too few for the register-tiled kernels; the
 * f32 row-tiled kernel spends a multiply-add and a quarter of a workgroup-memory read per weight and token, here one
 * integer instruction does four and a read serves sixteen. With `ksplit` > 1 the slices' partial sums meet in
 * workgroup memory at the end, as in the f32 kernel.
 */
import { GGMLType } from "../../../../gguf/types.js";
import { dequantWGSL, q8WeightForm, q8WeightWGSL } from "../quant.wgsl.js";
import { dequantForW2, GEMM_STEP } from "./gemm.wgsl.js";
import { bindXq8, loadXq8WGSL, quantizeX32WGSL } from "./xq8.wgsl.js";
import { matOutWGSL } from "./mat.wgsl.js";
import { type RowTileShape, rowTileEntryWGSL } from "./rowtile.wgsl.js";
import { chunkBindingsWGSL } from "./wide.wgsl.js";

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

/** Bytes of workgroup memory the q8 row-tiled kernel declares (x tile, its scales, the slices' partial sums). */
export function rowTileQ8SharedBytes(s: RowTileShape, dual: boolean): number {
  const units = s.ks / 32;
  return (
    (s.pieces ?? 1) * 2 * units * s.tokens * 16 +
    units * s.tokens * 8 +
    Math.max(1, (s.ksplit - 1) * s.rows * (dual ? 2 : 1) * s.tokens) * 4
  );
}

/** 32-column units a thread takes together: Q4_K's two that share their 32 bytes of nibbles, else one. */
function rowTileQ8Group(type: number): number {
  return type === GGMLType.Q4_K ? 2 : 1;
}

/** Whether the q8 row-tiled kernel takes a shape: whole groups of 32-column units a step, shared evenly by the slices. */
export function rowTileQ8Fits(type: number, s: RowTileShape): boolean {
  const groups = s.ks / 32 / rowTileQ8Group(type);
  return Number.isInteger(groups) && groups % s.ksplit === 0 && s.cols % s.ks === 0;
}

/** Q5_0's words: the word at a 2-byte-aligned offset, and the fifth bits of four values a byte, at bit 4 of each. */
const Q5_0_WORDS = /* wgsl */ `
// the word at byte 4·i + 2 (odd) or 4·i (lo = word i, hi = word i + 1), or 2 bytes further when not odd: ggml's Q5_0
// fields start 2 bytes after the block (qh) and 6 bytes after it (qs)
fn at2(lo: u32, hi: u32, odd: bool) -> u32 { return select((lo >> 16u) | (hi << 16u), hi, odd); }
// bits 4i..4i+3 of qh as bit 4 of the four bytes of word i
fn fifth(qh: u32) -> vec4u {
  let h = (vec4u(qh) >> vec4u(0u, 4u, 8u, 12u)) & vec4u(15u);
  return ((h & vec4u(1u)) | ((h & vec4u(2u)) << vec4u(7u)) | ((h & vec4u(4u)) << vec4u(14u)) | ((h & vec4u(8u)) << vec4u(21u))) << vec4u(4u);
}`;

/**
 * Q4_K read as vec4s (its 144-byte blocks are 16-byte aligned): a block's header (d, dmin and the 12 scale bytes) is one
 * vec4u, each pair of units (2q, 2q + 1) the low and high nibbles of the same two vec4u.
 */
export const Q4K_VEC4 = /* wgsl */ `
fn sbyte(h: vec4u, k: u32) -> u32 { return (h[1u + (k >> 2u)] >> (8u * (k & 3u))) & 255u; }
// unit j's (d·sc, d·sc, dmin·m, 0): ggml's get_scale_min_k4 on the header's scale bytes
fn q4kScale(h: vec4u, j: u32) -> vec4f {
  var sc: u32; var mn: u32;
  if (j < 4u) { sc = sbyte(h, j) & 63u; mn = sbyte(h, j + 4u) & 63u; }
  else { sc = (sbyte(h, j + 4u) & 15u) | ((sbyte(h, j - 4u) >> 6u) << 4u); mn = (sbyte(h, j + 4u) >> 4u) | ((sbyte(h, j) >> 6u) << 4u); }
  let dm = unpack2x16float(h.x);
  let dl = dm.x * f32(sc);
  return vec4f(dl, dl, dm.y * f32(mn), 0.0);
}`;

export function matmulRowsQ8WGSL(type: number, mode: "plain" | "experts-list", s: RowTileShape, dual = false): string {
  const { rows: RW, ksplit: KSPL, tokens: T } = s;
  if (!rowTileQ8Fits(type, s) || T % 4 !== 0) throw new Error(`q8 row-tiled kernel: bad shape ${JSON.stringify(s)}`);
  const WG = RW * KSPL;
  const KB = s.ks / 32; // units a step
  const GU = rowTileQ8Group(type); // units a thread takes together
  const PER = KB / KSPL; // units a thread takes of each step
  const vec4 = type === GGMLType.Q4_K;
  const q5 = type === GGMLType.Q5_0;
  const NS = s.cols / s.ks;
  const form = q8WeightForm(type);
  const S = dual ? 2 : 1;
  const P = s.pieces ?? 1;
  const LO = 2 * KB * T; // the low pieces' offset in XQ
  const sfx = (k: number): string => (k === 0 ? "" : "_2");
  const acc = (k: number, t: number): string => `a${k}_${t}`;
  // x row (vec4 index) of tile token t (t < nt)
  const xRow = mode === "plain" ? "xq + (t0 + t) * xs4" : "(p.xOff + (IDS[lb + t0 + t] / p.xDiv) * p.xBatch) >> 2u";
  // unit j of a thread's units of a step is unit unitOf(j) of the step: groups of GU units, group g = slice + g·ksplit
  const unitOf = (j: number): string => `(${GU}u * (slice + ${Math.floor(j / GU) * KSPL}u) + ${j % GU}u)`;
  // Q4_K: per pair of units the block's header and the pair's two vec4u of nibbles (low: the first unit, high: the second)
  const vec4Loads = range(PER / GU)
    .map((g) => {
      const j0 = g * GU;
      return `let u${j0} = st * ${KB}u + ${unitOf(j0)}; let u${j0 + 1} = u${j0} + 1u;
      let bo${g} = (rb >> 4u) + (u${j0} >> 3u) * 9u; let pq${g} = (u${j0} & 7u) >> 1u;
      ${range(S)
        .map((k) => {
          const Wk = k === 0 ? "W" : "W2";
          return `let hd${k}_${g} = ${Wk}[bo${g}];
      let qa${k}_${g} = ${Wk}[bo${g} + 1u + 2u * pq${g}]; let qb${k}_${g} = ${Wk}[bo${g} + 2u + 2u * pq${g}];
      let wa${k}_${j0} = qa${k}_${g} & vec4u(0x0f0f0f0fu); let wb${k}_${j0} = qb${k}_${g} & vec4u(0x0f0f0f0fu);
      let wa${k}_${j0 + 1} = (qa${k}_${g} >> vec4u(4u)) & vec4u(0x0f0f0f0fu); let wb${k}_${j0 + 1} = (qb${k}_${g} >> vec4u(4u)) & vec4u(0x0f0f0f0fu);
      let c${k}_${j0} = q4kScale(hd${k}_${g}, u${j0} & 7u); let c${k}_${j0 + 1} = q4kScale(hd${k}_${g}, u${j0 + 1} & 7u);`;
        })
        .join("\n      ")}`;
    })
    .join("\n      ");
  // Q5_0: a unit is a 22-byte block, read as the six words that hold it (2-byte aligned: halves joined where odd)
  const q5Loads = range(PER)
    .map((j) => {
      const u = `st * ${KB}u + ${unitOf(j)}`;
      return `let u${j} = ${u}; let o${j} = rb + u${j} * 22u; let wi${j} = o${j} >> 2u; let odd${j} = (o${j} & 2u) != 0u;
      ${range(S)
        .map((k) => {
          const w = (i: number): string => `${k === 0 ? "W" : "W2"}[wi${j} + ${i}u]`;
          return `{ let w0 = ${w(0)}; let w1 = ${w(1)}; let w2 = ${w(2)}; let w3 = ${w(3)}; let w4 = ${w(4)}; let w5 = ${w(5)};
        let qs = vec4u(at2(w1, w2, odd${j}), at2(w2, w3, odd${j}), at2(w3, w4, odd${j}), at2(w4, w5, odd${j}));
        let qh = at2(w0, w1, odd${j});
        wa${k}_${j} = (qs & vec4u(0x0f0f0f0fu)) | fifth(qh);
        wb${k}_${j} = ((qs >> vec4u(4u)) & vec4u(0x0f0f0f0fu)) | fifth(qh >> 16u);
        let d = unpack2x16float(select(w0, w0 >> 16u, odd${j})).x;
        c${k}_${j} = vec4f(d, d, 16.0 * d, 0.0); }`;
        })
        .join("\n      ")}`;
    })
    .join("\n      ");
  const q5Decl = range(PER)
    .flatMap((j) => range(S).map((k) => `var wa${k}_${j}: vec4u; var wb${k}_${j}: vec4u; var c${k}_${j}: vec4f;`))
    .join(" ");
  // other types: unit by unit through q8WeightWGSL, loaded before the x staging's barriers
  const loads = range(PER)
    .map((j) => {
      const u = `st * ${KB}u + ${unitOf(j)}`;
      return `let u${j} = ${u}; let e${j} = u${j} * 32u;
      ${range(S)
        .map(
          (k) =>
            `let wa${k}_${j} = vec4u(wq4${sfx(k)}(rb, e${j}), wq4${sfx(k)}(rb, e${j} + 4u), wq4${sfx(k)}(rb, e${j} + 8u), wq4${sfx(k)}(rb, e${j} + 12u));
      let wb${k}_${j} = vec4u(wq4${sfx(k)}(rb, e${j} + 16u), wq4${sfx(k)}(rb, e${j} + 20u), wq4${sfx(k)}(rb, e${j} + 24u), wq4${sfx(k)}(rb, e${j} + 28u));
      let c${k}_${j} = wsc${sfx(k)}(rb, u${j});`,
        )
        .join("\n      ")}`;
    })
    .join("\n      ");
  const dot = (w: string, x: string): string =>
    `dot4I8Packed(${w}.x, ${x}.x) + dot4I8Packed(${w}.y, ${x}.y) + dot4I8Packed(${w}.z, ${x}.z) + dot4I8Packed(${w}.w, ${x}.w)`;
  // unit j of the thread, token t: the integer sums, then the scaled terms
  const use = (j: number, t: number): string => {
    const h = unitOf(j);
    const lows =
      P === 1
        ? ""
        : ` let la = XQ[${LO}u + 2u * ${h} * ${T}u + ${t}u]; let lb = XQ[${LO}u + (2u * ${h} + 1u) * ${T}u + ${t}u];`;
    const head = `{ let xa = XQ[2u * ${h} * ${T}u + ${t}u]; let xb = XQ[(2u * ${h} + 1u) * ${T}u + ${t}u];${lows} let d = XD[${h} * ${T}u + ${t}u];`;
    // a half-unit's integer sum: one piece, or 128·hi + lo (exact in i32: ≤ 16·127·16320)
    const half = (w: string, x: string, l: string): string =>
      P === 1 ? `(${dot(w, x)})` : `(128i * (${dot(w, x)}) + (${dot(w, l)}))`;
    const body = range(S).map((k) => {
      const a = acc(k, t);
      const c = `c${k}_${j}`;
      const ha = half(`wa${k}_${j}`, "xa", "la");
      const hb = half(`wb${k}_${j}`, "xb", "lb");
      const term = form.twoScales
        ? `${a} = fma(d.x, fma(${c}.x, f32${ha}, ${c}.y * f32${hb}), ${a});`
        : `${a} = fma(f32(${ha} + ${hb}), ${c}.x * d.x, ${a});`;
      return form.min ? `${term} ${a} = fma(-${c}.z, d.y, ${a});` : term;
    });
    return `${head} ${body.join(" ")} }`;
  };
  // the tile's x: slot i = (token, unit of the step), quantized by one thread
  const stage = range(Math.ceil((T * KB) / WG))
    .map(
      (q) =>
        `{ let i = li + ${q * WG}u; ${(q + 1) * WG > T * KB ? `if (i < ${T * KB}u) ` : ""}{ let t = i / ${KB}u; let h = i % ${KB}u;
        ${
          s.xq8 === true
            ? loadXq8WGSL(
                "t < nt",
                mode === "plain" ? "t0 + t" : "IDS[lb + t0 + t] / p.xDiv",
                `st * ${KB}u + h`,
                s.cols / 32,
              )
            : quantizeX32WGSL("t < nt", `(${xRow}) + st * ${s.ks / 4}u + 8u * h`, P)
        }
        XQ[2u * h * ${T}u + t] = xqa; XQ[(2u * h + 1u) * ${T}u + t] = xqb; XD[h * ${T}u + t] = xd;${P === 1 ? "" : ` XQ[${LO}u + 2u * h * ${T}u + t] = xla; XQ[${LO}u + (2u * h + 1u) * ${T}u + t] = xlb;`} } }`,
    )
    .join("\n      ");
  const steps = `for (var st = 0u; st < ${NS}u; st++) {
      ${vec4 ? vec4Loads : q5 ? `${q5Decl}\n      ${q5Loads}` : loads}
      workgroupBarrier();
      ${stage}
      workgroupBarrier();
      ${range(PER)
        .flatMap((j) => range(T).map((t) => use(j, t)))
        .join("\n      ")}
    }`;
  const accs = range(S)
    .flatMap((k) => range(T).map((t) => `var ${acc(k, t)} = 0.0;`))
    .join(" ");
  const R = S * T;
  const reduce =
    KSPL === 1
      ? ""
      : `workgroupBarrier();
    if (slice > 0u) {
      ${range(S)
        .flatMap((k) =>
          range(T).map((t) => `RED[((slice - 1u) * ${RW}u + row) * ${R}u + ${k * T + t}u] = ${acc(k, t)};`),
        )
        .join(" ")}
    }
    workgroupBarrier();
    if (slice == 0u) {
      for (var sl = 0u; sl < ${KSPL - 1}u; sl++) {
        ${range(S)
          .flatMap((k) => range(T).map((t) => `${acc(k, t)} += RED[(sl * ${RW}u + row) * ${R}u + ${k * T + t}u];`))
          .join(" ")}
      }
    }`;
  const result = (t: number): string => (dual ? `silu(${acc(0, t)}) * ${acc(1, t)}` : acc(0, t));
  const writes = (dest: (t: number) => string): string =>
    range(T)
      .map((t) => `if (${t}u < nt) { out(${dest(t)}, r, ${result(t)}); }`)
      .join("\n      ");
  const weights = vec4
    ? Q4K_VEC4
    : q5
      ? Q5_0_WORDS
      : `${dequantWGSL(type, GEMM_STEP)}\n${q8WeightWGSL(type)}\n${dual ? dequantForW2(type, q8WeightWGSL(type), ["wq4", "wsc"]) : ""}`;
  if (s.xq8 === true && P !== 1) throw new Error("q8 row-tiled kernel: x comes quantized only in one piece");
  const code = /* wgsl */ `${chunkBindingsWGSL(vec4, mode, dual)}
var<workgroup> XQ: array<vec4u, ${P * 2 * KB * T}>;
var<workgroup> XD: array<vec2f, ${KB * T}>;
var<workgroup> RED: array<f32, ${Math.max(1, (KSPL - 1) * RW * R)}>;
fn silu(g: f32) -> f32 { return g / (1.0 + exp(-g)); }
${weights}
${matOutWGSL(true)}
// row-tiled product on int8 dot products${P === 2 ? " (x in two pieces)" : ""}: ${RW} rows × ${KSPL} slice(s), ${T} tokens a tile, ${NS} step(s) of ${s.ks} columns, ${PER} unit(s) per thread and step
${rowTileEntryWGSL(mode, RW, WG, T, { accs, steps, reduce, writes })}`;
  return s.xq8 === true ? bindXq8(code) : code;
}
