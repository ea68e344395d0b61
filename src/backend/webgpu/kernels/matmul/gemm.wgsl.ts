/**
 * The register-tiled matrix-matrix kernel for products of many tokens (prompt chunks, and expert lists whose experts
 * average many pairs): a workgroup computes a tile of `rows` rows × `tokens` tokens, each thread `tm` rows × `tn`
 * tokens of it in registers. Per step of 32 columns the workgroup decodes its rows' weights once into workgroup
 * memory (deq4, the same float operations per element as every other kernel) and stages its tokens' x beside them;
 * then each thread reads tm weight vec4s and tn x vec4s per 4 columns and does tm·tn·4 multiply-adds.
 *
 * Why this shape: the row-tiled kernel (rowtile.wgsl.ts) keeps one row per thread and reads a broadcast x vec4 from
 * workgroup memory for every 4 multiply-adds, and decodes each weight once per tile of ≤ 16 tokens; with a few hundred
 * tokens that workgroup-memory read and the decode bound it. Here a thread's reads per step serve tm·tn multiply-adds
 * each, and a weight is decoded once per tile of up to 64 tokens.
 *
 * Threads (tx, ty) with tx = li % (rows / tm): rows r0 + tx + (rows/tm)·i and tokens t0 + ty + (tokens/tn)·j, so that
 * a quarter-warp's weight reads are 8 consecutive vec4s and its x reads one broadcast. Workgroup memory is [column
 * vec4][row] with one vec4 of padding per column vec4, so that the 8 threads decoding one row's 32 columns store to
 * distinct banks. Modes and grids are the row-tiled kernel's ("plain": [gx, gy·tiles, items]; "experts-list": [gx,
 * gy, experts of the piece], each workgroup taking its expert's pairs a tile at a time); with `dual` a second matrix
 * (W2: up beside gate) is decoded beside the first and the kernel writes silu(W·x)·(W2·x). x offsets and strides must
 * be multiples of 4 (X is bound as array<vec4f>); columns a multiple of 32.
 */
import { deq4WGSL, dequantWGSL } from "../quant.wgsl.js";
import { expertListWGSL, matOutWGSL } from "./mat.wgsl.js";
import { chunkBindingsWGSL } from "./wide.wgsl.js";

export interface GemmShape {
  /** rows per workgroup tile (rows / tm threads along the rows: at least 8) */
  readonly rows: number;
  /** tokens (an expert's pairs) per workgroup tile */
  readonly tokens: number;
  /** rows per thread */
  readonly tm: number;
  /** tokens per thread */
  readonly tn: number;
  /** columns per step: 32 (one unit of every block format) or 16 (half the workgroup memory) */
  readonly ks: number;
  /** columns of W (baked in; a multiple of 32) */
  readonly cols: number;
  /**
   * software-pipelined steps: step s + 1's weights are decoded and its x loaded into registers before step s is
   * computed (the multiply-adds unrolled), so that their memory latency can overlap the arithmetic; only the stores to
   * workgroup memory sit between the step's two barriers
   */
  readonly pipe?: boolean;
  /** integer dot products on activations quantized to int8 (gemm-q8.wgsl.ts; ks 32, 64 or 128) */
  readonly q8?: boolean;
  /** (q8) x read quantized from the buffer of xq8.wgsl.ts's pass, bound as X, instead of quantized by each workgroup */
  readonly xq8?: boolean;
}

/** Columns a row must be a multiple of: one 32-element unit of every block format. */
export const GEMM_STEP = 32;

export function gemmThreads(s: GemmShape): number {
  return (s.rows / s.tm) * (s.tokens / s.tn);
}

/** Bytes of workgroup memory the kernel declares. */
export function gemmSharedBytes(s: GemmShape, dual: boolean): number {
  const kv = s.ks / 4;
  return ((dual ? 2 : 1) * kv * (s.rows + 1) + kv * (s.tokens + 1)) * 16;
}

/**
 * The dequantizer of `type` reading W2 instead of W (its functions renamed with "_2"; shared declarations left out),
 * with `extra` (more functions of the W helpers, `names` renamed the same way; default deq4's source).
 */
export function dequantForW2(type: number, extra = deq4WGSL(type), names: readonly string[] = []): string {
  const src = `${dequantWGSL(type, GEMM_STEP)}\n${extra}`;
  const fns = ["b8", "b16", "b32", "h2f", "smk4", "deq4", "deq", ...names].join("|");
  return src
    .split("\n")
    .filter((l) => !/^(const KIQ4|var<private> dv|fn sx8|const U:)/.test(l))
    .join("\n")
    .replace(/\bW\[/g, "W2[")
    .replace(new RegExp(`\\b(${fns})\\(`, "g"), "$1_2(");
}

/**
 * A register-tiled shape's threads along the rows (TX) and the tokens (TY), workgroup size and steps, checked: whole
 * threads, at least 8 along the rows, at most 256 in all, whole steps of one of `steps` columns.
 */
export function gemmLayout(
  s: GemmShape,
  steps: readonly number[],
  kernel: string,
): { TX: number; TY: number; WG: number; NS: number } {
  const TX = s.rows / s.tm;
  const TY = s.tokens / s.tn;
  const WG = TX * TY;
  const NS = s.cols / s.ks;
  if (
    !Number.isInteger(TX) ||
    !Number.isInteger(TY) ||
    TX < 8 ||
    WG > 256 ||
    !Number.isInteger(NS) ||
    !steps.includes(s.ks)
  )
    throw new Error(`${kernel}: bad shape ${JSON.stringify(s)}`);
  return { TX, TY, WG, NS };
}

export function gemmWGSL(type: number, mode: "plain" | "experts-list", s: GemmShape, dual = false): string {
  const { rows: BM, tokens: BN, tm: TM, tn: TN } = s;
  const { TX, TY, WG, NS } = gemmLayout(s, [16, 32], "gemm kernel");
  const KV = s.ks / 4;
  const S = dual ? 2 : 1;
  const PW = BM + 1; // padded column-vec4 stride of the weight tiles
  const PX = BN + 1;
  const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
  const acc = gemmAcc;
  // x of tile token t (t < nt) as a vec4 row index
  const xRow = mode === "plain" ? "xq + (t0 + t) * xs4" : "(p.xOff + (IDS[lb + t0 + t] / p.xDiv) * p.xBatch) >> 2u";
  // a thread's share of a step's staging: weight vec4 slots (row, column vec4) and x vec4 slots (token, column vec4)
  const QW = Math.ceil((BM * KV) / WG);
  const QX = Math.ceil((BN * KV) / WG);
  const wSlot = (q: number, body: string): string =>
    `{ let i = li + ${q * WG}u; let row = i / ${KV}u; let kv = i % ${KV}u; ${(q + 1) * WG > BM * KV ? `if (i < ${BM * KV}u) ` : ""}{ ${body} } }`;
  const xSlot = (q: number, body: string): string =>
    `{ let i = li + ${q * WG}u; let t = i / ${KV}u; let kv = i % ${KV}u; if (i < ${BN * KV}u) { ${body} } }`;
  // the slot's decoded weights of matrix k (W, or W2 when dual) at step `step`, and its x (zero past the tile's tokens)
  // (rb: the slot's row, clamped into the matrix, as declared by rowAt)
  const rowAt = "let rb = wb + min(r0 + row, p.rows - 1u) * p.rowBytes;";
  const weights = (k: number, step: string): string =>
    `${k === 0 ? "deq4" : "deq4_2"}(rb, (${step}) * ${s.ks}u + 4u * kv)`;
  const xLoad = (into: string, step: string): string =>
    `${into} = vec4f(0.0); if (t < nt) { ${into} = X[(${xRow}) + (${step}) * ${KV}u + kv]; }`;
  const wStore = (k: number, v: string): string => `${k === 0 ? "WS" : "WS2"}[kv * ${PW}u + row] = ${v};`;
  const xStore = (v: string): string => `XS[kv * ${PX}u + t] = ${v};`;
  // unpipelined: decoded and loaded straight into workgroup memory
  const stage = [
    ...range(QW).map((q) => wSlot(q, [rowAt, ...range(S).map((k) => wStore(k, weights(k, "st")))].join(" "))),
    ...range(QX).map((q) => xSlot(q, `var v: vec4f; ${xLoad("v", "st")} ${xStore("v")}`)),
  ].join("\n      ");
  // pipelined: the same decodes and loads into registers (rw<k>_<q>, rx<q>) for a step, stored after the barrier
  const regDecls = [
    ...range(S).flatMap((k) => range(QW).map((q) => `var rw${k}_${q} = vec4f(0.0);`)),
    ...range(QX).map((q) => `var rx${q} = vec4f(0.0);`),
  ].join(" ");
  const loadRegs = (step: string): string =>
    [
      ...range(QW).map((q) =>
        wSlot(q, [rowAt, ...range(S).map((k) => `rw${k}_${q} = ${weights(k, step)};`)].join(" ")),
      ),
      ...range(QX).map((q) => xSlot(q, xLoad(`rx${q}`, step))),
    ].join("\n      ");
  const storeRegs = [
    ...range(QW).map((q) =>
      wSlot(
        q,
        range(S)
          .map((k) => wStore(k, `rw${k}_${q}`))
          .join(" "),
      ),
    ),
    ...range(QX).map((q) => xSlot(q, xStore(`rx${q}`))),
  ].join("\n      ");
  const fma4 = (a: string, w: string, x: string): string =>
    `${a} = fma(${w}.w, ${x}.w, fma(${w}.z, ${x}.z, fma(${w}.y, ${x}.y, fma(${w}.x, ${x}.x, ${a}))));`;
  // the multiply-adds of column vec4 `kv` (an expression): the thread's weights and x read once each
  const columns = (kv: string): string => `${range(S)
    .flatMap((k) =>
      range(TM).map((i) => `let w${k}_${i} = ${k === 0 ? "WS" : "WS2"}[${kv} * ${PW}u + tx + ${TX * i}u];`),
    )
    .join(" ")}
        ${range(TN)
          .map((j) => `let x${j} = XS[${kv} * ${PX}u + ty + ${TY * j}u];`)
          .join(" ")}
        ${range(S)
          .flatMap((k) => range(TM).flatMap((i) => range(TN).map((j) => fma4(acc(k, i, j), `w${k}_${i}`, `x${j}`))))
          .join("\n        ")}`;
  const steps =
    s.pipe === true
      ? `${regDecls}
    ${loadRegs("0u")}
    for (var st = 0u; st < ${NS}u; st++) {
      workgroupBarrier();
      ${storeRegs}
      workgroupBarrier();
      ${loadRegs(`min(st + 1u, ${NS - 1}u)`)}
      ${range(KV)
        .map((kv) => `{\n        ${columns(`${kv}u`)}\n      }`)
        .join("\n      ")}
    }`
      : `for (var st = 0u; st < ${NS}u; st++) {
      workgroupBarrier();
      ${stage}
      workgroupBarrier();
      for (var kv = 0u; kv < ${KV}u; kv++) {
        ${columns("kv")}
      }
    }`;
  const head = /* wgsl */ `${chunkBindingsWGSL(false, mode, dual)}
var<workgroup> WS: array<vec4f, ${KV * PW}>;
${dual ? `var<workgroup> WS2: array<vec4f, ${KV * PW}>;` : ""}
var<workgroup> XS: array<vec4f, ${KV * PX}>;
fn silu(g: f32) -> f32 { return g / (1.0 + exp(-g)); }
${dequantWGSL(type, GEMM_STEP)}
${deq4WGSL(type)}
${dual ? dequantForW2(type) : ""}
${matOutWGSL(true)}
// register-tiled product: ${BM} rows × ${BN} tokens a workgroup, ${TM} × ${TN} a thread, ${NS} steps of ${s.ks} columns${s.pipe === true ? ", pipelined" : ""}
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let tx = li % ${TX}u;
  let ty = li / ${TX}u;`;
  return `${head}
${gemmEntryWGSL(mode, s, dual, steps)}`;
}

/** The f32 sum of matrix k (0, or 1 for W2 when dual), thread row i and thread token j of a register-tiled kernel. */
export const gemmAcc = (k: number, i: number, j: number): string => `a${k}_${i}_${j}`;

/**
 * The body of a register-tiled kernel's entry point after its thread indices (tx along the rows, ty along the tokens):
 * the tile's rows and tokens ("plain": one tile of tokens of one batch item a workgroup; "experts-list": each of an
 * expert's tiles of pairs in turn), the sums (gemmAcc) declared, the `steps` that fill them, and the writes (with `dual`,
 * silu of the first matrix's sum times the second's).
 */
export function gemmEntryWGSL(mode: "plain" | "experts-list", s: GemmShape, dual: boolean, steps: string): string {
  const { rows: BM, tokens: BN, tm: TM, tn: TN } = s;
  const TX = BM / TM;
  const TY = BN / TN;
  const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
  const decls = range(dual ? 2 : 1)
    .flatMap((k) => range(TM).flatMap((i) => range(TN).map((j) => `var ${gemmAcc(k, i, j)} = 0.0;`)))
    .join(" ");
  const value = (i: number, j: number): string =>
    dual ? `silu(${gemmAcc(0, i, j)}) * ${gemmAcc(1, i, j)}` : gemmAcc(0, i, j);
  const writes = (dest: (t: string) => string): string =>
    range(TM)
      .flatMap((i) =>
        range(TN).map(
          (j) =>
            `{ let r = r0 + tx + ${TX * i}u; let t = ty + ${TY * j}u; if (r < p.rows && t < nt) { out(${dest("t")}, r, ${value(i, j)}); } }`,
        ),
      )
      .join("\n      ");
  if (mode === "plain")
    return `  let tt = wid.y % p.tiles;
  let r0 = (wid.x + (wid.y / p.tiles) * p.gx) * ${BM}u;
  if (r0 >= p.rows) { return; }
  let b = wid.z;
  let wb = p.wOff + b * p.wBatch;
  let xq = (p.xOff + b * p.xBatch) >> 2u;
  let xs4 = p.xStride >> 2u;
  let t0 = tt * ${BN}u;
  let nt = min(${BN}u, p.n - t0);
  ${decls}
  ${steps}
  ${writes((t) => `b, t0 + ${t}`)}
}`;
  return `  let r0 = (wid.x + wid.y * p.gx) * ${BM}u;
  let ex = p.e0 + wid.z;
  let wb = p.wOff + wid.z * p.wBatch;
  ${expertListWGSL("ex", "r0 < p.rows")}
  for (var t0 = 0u; t0 < m; t0 += ${BN}u) {
    let nt = min(${BN}u, m - t0);
    ${decls}
    ${steps}
    ${writes((t) => `IDS[lb + t0 + ${t}], 0u`)}
  }
}`;
}
