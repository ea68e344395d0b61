/**
 * The row-tiled matrix-matrix kernel for expert lists and plain products of ≥ ROW_TILE_FROM tokens (batched decode,
 * prefill; from 5 tokens with tune.rowTile = 1): one thread per row (or
 * `ksplit` threads per row, each taking every ksplit-th chunk of a step), every weight chunk decoded once into
 * registers and multiplied with a whole tile of tokens whose x sits in workgroup memory.
 *
 * Why this shape: per pair on the wide kernel, batch 64 read every routed expert once per pair (384 pairs over 64
 * experts: 938 µs per layer for gate+up, 1.3 TB/s from memory); the coalesced kernel and an earlier tiled one decode
 * weights into workgroup memory and pay a workgroup-memory load per multiply-add. Here a warp's lanes are 32 rows at
 * the same column, so each x read is one broadcast vec4 that serves four multiply-adds in every lane, and a weight
 * element costs its decode (shared with the wide kernel: typeCode) once per tile of tokens.
 *
 * Per step of `ks` columns: the chunks' weight loads are issued first, then x of the tile's tokens is staged
 * ([token][column], zeros past the tile's tokens), then the chunks are used. With ksplit > 1 the slices' partial
 * sums meet in workgroup memory at the end. Modes, grids and parameters ("plain": [gx,
 * gy·tiles, items]; "experts-list": [gx, gy, experts of the piece], each workgroup taking its expert's pairs a tile at
 * a time). With `dual`, a second matrix (W2: up beside gate) is read by the same threads from the same x and the
 * kernel writes silu(W·x)·(W2·x). x offsets and strides must be multiples of 4 (X is bound as array<vec4f>).
 */
import { LatentError } from "../../../../util/errors.js";
import type { GpuMatrix } from "./matrix.js";
import type { GpuRuntime } from "../../core/runtime.js";
import { chunkBindingsWGSL, typeCode, WIDE_HELPERS, WIDE_MAX_N, WIDE_TYPES } from "./wide.wgsl.js";
import { expertListWGSL, matOutWGSL } from "./mat.wgsl.js";

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

export interface RowTileShape {
  /** rows per workgroup (a multiple of the subgroup size, so that a warp's lanes share their slice) */
  readonly rows: number;
  /** threads per row: slice s of a step takes chunks s, s + ksplit, … (divides the step's chunks) */
  readonly ksplit: number;
  /** tokens (or an expert's pairs) per tile: a multiple of 4 */
  readonly tokens: number;
  /** columns staged per step (divides cols; a multiple of the type's chunk) */
  readonly ks: number;
  /** columns of W (baked in) */
  readonly cols: number;
  /**
   * software-pipelined steps: step s + 1's weight chunks and x are loaded into registers before step s is computed, so
   * that their memory latency overlaps the multiply-adds instead of sitting between the step's two barriers
   */
  readonly pipe?: boolean;
  /** a thread's chunks of one step that share a block (Q4_K) load its header once (TypeCode.sharedHeader) */
  readonly shareHeader?: boolean;
}

/** Vec4s of workgroup memory the kernel declares: the staged x tile, reused for the partial sums of slices 1.. */
export function rowTileSharedVec4s(s: RowTileShape, dual: boolean): number {
  return Math.max(s.tokens * (s.ks / 4), (s.ksplit - 1) * s.rows * (dual ? 2 : 1) * (s.tokens / 4));
}

/**
 * Plain products of at least this many tokens take the row-tiled kernel by default (tune.rowTile = 1: from 5). Measured
 * on the H200 (v2-lite Q4_K_M, 2026-11-29, chained decode): with its 8-token products on it batch 8 was slower (GPU
 * 10.87 → 11.75 ms per step, same call), with its 16-token ones batch 16 too (GPU 20.18 ms vs 18.49 in another call);
 * batch 32 gained (29.33 vs 33.28 ms), batch 64 went 1006.7 → 1493.0 tok/s (GPU 63.25 → 42.52 ms, same call) and the
 * 512-token prefill 1383 → 2179 tok/s.
 */
export const ROW_TILE_FROM = 32;

/**
 * Expert-major products from expert lists on the row-tiled kernel from pairs ≥ this × experts (matrix.ts expertsFrom).
 * Measured on the H200 (v2-lite, 64 experts, 6 a token; chained decode, same call): batch 16 (96 pairs) was slower
 * than per pair on the wide kernel (GPU 22.05 vs 18.49 ms per step); batch 32 (192 pairs, its 32-token products also
 * on this kernel) faster (29.61 vs 33.28 ms).
 */
export const ROW_TILE_EXPERTS_FROM = 2;

/**
 * Chunk streams (chunks × matrices) a thread loads per step: by default at most PER_MATRIX per matrix and at most
 * STREAM_TOKENS / tile tokens, never more than MAX_STREAMS. Measured on the H200 (v2-lite Q4_K_M, 2026-11-29):
 * - the dual routed gate·up at batch 64 (8-token tiles): 4 chunks × 2 matrices a thread spilled (2587 µs alone vs 544
 *   at 2 × 2 and 613 at 1 × 2), and 8 × 2 failed to compile; 2 × 2 instead of 1 × 2 in the whole step (same call):
 *   batch 32 1033.3 → 1113.6 tok/s, batch 64 1467.6 → 1543.8 tok/s;
 * - with the 16-token tiles of a 512-token prefill, 2 × 2 was slower than 1 × 2 (2008 → 1900 tok/s, same call);
 * - on lavapipe 8 chunks a thread took minutes to compile.
 */
const PER_MATRIX = 2;
const STREAM_TOKENS = 32;
const MAX_STREAMS = 4;

/** Threads a row-tiled product aims for before its rows stop splitting over more slices (the H200: 132 SMs × ~1000). */
export const ROW_TILE_FILL = 131072;

/**
 * The row-tiled kernel's shape for n tokens (plain; rowsTotal rows over all batch items) or n pairs over m.items
 * experts (expert lists), or undefined where it does not apply (tune.rowTile = 0, a matvec variant other than the
 * default coalesced one, another type, plain products of
 * fewer than ROW_TILE_FROM tokens, or with tune.rowTile = 1 of at most WIDE_MAX_N (the wide kernel's), x not aligned to
 * 4 floats).
 */
export function rowTileShape(rt: GpuRuntime, m: GpuMatrix, n: number, mode: "plain" | "experts-list", aligned: boolean, rowsTotal = m.rows, dual = false): RowTileShape | undefined {
  if (rt.tune.rowTile === 0 || rt.matvec !== "coalesced" || !WIDE_TYPES.includes(m.type) || !aligned || (mode === "plain" && n < (rt.tune.rowTile === 1 ? WIDE_MAX_N + 1 : ROW_TILE_FROM))) return undefined;
  const sg = rt.info.subgroupSize ?? 32;
  const per = mode === "plain" ? n : n / m.items;
  // tiles of up to 16 tokens (H200, 512-token prefill: 10–40 % faster than 8); up to 8 at subgroups narrower than 32
  // (CPU adapters: lavapipe's LLVM took 31 s to compile a 16-token Q4_K tile, 4 s an 8-token one)
  let tokens = rt.tune.rowTileTokens ?? (per <= 4 ? 4 : per <= 8 || sg < 32 ? 8 : 16);
  if (!Number.isInteger(tokens) || tokens < 4 || tokens > 32 || tokens % 4 !== 0) throw new LatentError(`tune.rowTileTokens must be a multiple of 4 in 4..32, got ${tokens}`);
  const elems = typeCode(m.type).elems;
  const limit = rt.info.limits.maxComputeWorkgroupStorageSize;
  // the widest step (≤ 256 columns) of whole chunks that divides the row and whose x tile fits
  let ks = 256;
  while (ks > elems && (m.cols % ks !== 0 || tokens * ks * 4 > limit)) ks /= 2;
  while (tokens > 4 && tokens * ks * 4 > limit) tokens -= 4;
  if (m.cols % ks !== 0 || ks % elems !== 0 || tokens * ks * 4 > limit) return undefined;
  const chunks = ks / elems;
  const tiles = mode === "plain" ? Math.ceil(n / tokens) : 1;
  const units = mode === "plain" ? rowsTotal * tiles : m.rows * Math.min(m.items, n);
  const S = dual ? 2 : 1;
  const fits = (k: number): boolean => k * sg <= 256 && rowTileSharedVec4s({ rows: Math.max(sg, 256 / k), ksplit: k, tokens, ks, cols: m.cols }, dual) * 16 + 16 <= limit;
  const streams = (k: number): number => (chunks / k) * S;
  const want = rt.tune.rowTileSplit;
  if (want !== undefined && (!Number.isInteger(want) || want < 1 || (want & (want - 1)) !== 0)) throw new LatentError(`tune.rowTileSplit must be a power of two, got ${want}`);
  // threads per row (a tuned split is a least): enough that each thread loads at most `most` chunk streams per step,
  // then more while the product has few threads
  let ksplit = Math.min(want ?? 1, chunks);
  const most = want === undefined ? Math.min(PER_MATRIX * S, Math.max(1, STREAM_TOKENS / tokens)) : MAX_STREAMS;
  while (ksplit < chunks && streams(ksplit) > most) ksplit *= 2;
  if (want === undefined) while (ksplit < chunks && units * ksplit < ROW_TILE_FILL && fits(ksplit * 2)) ksplit *= 2;
  // pipelined steps on GPUs (H200, batch 64, same call: GPU 41.1 → 36.9 ms per step); not on CPU adapters, where there
  // is no memory latency to hide and lavapipe took twice as long to compile the pipelined kernel
  const pipe = rt.tune.rowTilePipe !== undefined ? rt.tune.rowTilePipe === 1 : sg >= 32;
  // a Q4_K block's header loaded once for a thread's chunks of a step, on GPUs (H200, same call, alternating: batch 32
  // GPU 25.70 → 24.42–24.43 ms per step, batch 64 36.61 → 35.82–35.84); not on CPU adapters (not measured there, and
  // another variant for lavapipe to compile)
  const header = rt.tune.rowTileHeader !== undefined ? rt.tune.rowTileHeader === 1 : sg >= 32;
  const shape = { rows: Math.max(sg, 256 / ksplit), ksplit, tokens, ks, cols: m.cols, ...(pipe ? { pipe: true } : {}), ...(header ? { shareHeader: true } : {}) };
  return streams(ksplit) <= MAX_STREAMS && fits(ksplit) ? shape : undefined;
}

export function matmulRowsWGSL(type: number, mode: "plain" | "experts-list", s: RowTileShape, dual = false): string {
  const tc = typeCode(type);
  const { rows: RW, ksplit: KSPL, tokens: T } = s;
  const WG = RW * KSPL;
  const G4 = T / 4;
  const KS4 = s.ks / 4;
  const CS = s.ks / tc.elems;
  const NS = s.cols / s.ks;
  const PER = CS / KSPL;
  if (!Number.isInteger(CS) || !Number.isInteger(NS) || !Number.isInteger(PER) || T % 4 !== 0) throw new Error(`row-tiled kernel: bad shape ${JSON.stringify(s)} for chunks of ${tc.elems}`);
  const S = dual ? 2 : 1;
  const groups = Array.from({ length: G4 }, (_, g) => g);
  // one use of a chunk: the decode once, then its accumulation for every group of 4 tokens (XREAD's token shifted)
  const retarget = (code: string, k: number): string => {
    let out = code.replace(/acc \+= ([^;]*);/g, (_, rhs: string) => groups.map((g) => `acc${k}_${g} += ${rhs.replace(/XREAD\((\d+), /g, (_m, t: string) => `XREAD(${Number(t) + 4 * g}, `)};`).join("\n    "));
    if (k === 1) out = out.replaceAll("W[", "W2[").replaceAll("wd(", "wd2(");
    return out;
  };
  // a thread's chunks of one step lie in one block where the block's chunks are a multiple of the step's: then
  // chunks j > 0 take chunk 0's header (TypeCode.sharedHeader)
  const shared = s.shareHeader === true && tc.sharedHeader !== undefined && tc.sharedHeader.blockChunks % CS === 0 ? tc.sharedHeader : undefined;
  // the chunk loads of step `step` (an expression)
  const loadsAt = (step: string): string[] => {
    const out: string[] = [];
    for (let k = 0; k < S; k++)
      for (let j = 0; j < PER; j++) {
        const c = j + 1000 * k;
        const load = shared !== undefined && j > 0 ? shared.load(c) : tc.load(c);
        out.push(`let c${c} = ${k === 0 ? `(${step}) * ${CS}u + slice + ${j * KSPL}u` : `c${j}`};\n    ${retarget(load, k)}`);
      }
    return out;
  };
  const uses: string[] = [];
  for (let k = 0; k < S; k++)
    for (let j = 0; j < PER; j++) uses.push(retarget(shared !== undefined && j > 0 ? shared.use(j + 1000 * k, 4, 1000 * k) : tc.use(j + 1000 * k, 4), k));
  const xread = (code: string): string => code.replace(/XREAD\((\d+), ([^)]*)\)/g, (_, t: string, v: string) => `XS[${Number(t) * KS4}u + (${v}) - kb]`);
  const accs = Array.from({ length: S }, (_, k) => groups.map((g) => `var acc${k}_${g} = vec4f(0.0);`).join(" ")).join(" ");
  // x row (vec4 index) of tile token t (t < nt)
  const xRow = mode === "plain" ? "xq + (t0 + t) * xs4" : "(p.xOff + (IDS[lb + t0 + t] / p.xDiv) * p.xBatch) >> 2u";
  // each step: its chunks' loads, x staged between two barriers, then the chunks' uses
  const plainSteps = (): string => `for (var st = 0u; st < ${NS}u; st++) {
      let kb = st * ${KS4}u;
      ${loadsAt("st").join("\n      ")}
      workgroupBarrier();
      for (var i = li; i < ${T * KS4}u; i += ${WG}u) {
        let t = i / ${KS4}u;
        var v = vec4f(0.0);
        if (t < nt) { v = X[(${xRow}) + kb + i % ${KS4}u]; }
        XS[i] = v;
      }
      workgroupBarrier();
      ${xread(uses.join("\n      "))}
    }`;
  // pipelined: the loads' names become variables, loaded first for step 0 and then, in step st, for step st + 1 (the last
  // step reloads step 0, in bounds and unused) after the step's own values are copied out for its uses; x likewise
  // through registers xr, so that only x's store to XS sits between the barriers
  const pipedSteps = (): string => {
    const XPER = Math.ceil((T * KS4) / WG);
    const xLoad = (j: number, step: string): string =>
      `{ let i = li + ${j * WG}u; let t = i / ${KS4}u; xr${j} = vec4f(0.0); if (i < ${T * KS4}u && t < nt) { xr${j} = X[(${xRow}) + (${step}) * ${KS4}u + i % ${KS4}u]; } }`;
    const first = loadsAt("0u").join("\n    ");
    const names = [...first.matchAll(/let (\w+) =/g)].map((m) => m[1]!);
    const current = (code: string): string => code.replace(new RegExp(`\\b(${names.join("|")})\\b`, "g"), "$1_");
    return `${first.replace(/let (\w+) =/g, "var $1 =")}
    ${range(XPER).map((j) => `var xr${j} = vec4f(0.0); ${xLoad(j, "0u")}`).join("\n    ")}
    for (var st = 0u; st < ${NS}u; st++) {
      let kb = st * ${KS4}u;
      let nx = (st + 1u) % ${NS}u;
      ${names.map((n) => `let ${n}_ = ${n};`).join(" ")}
      ${loadsAt("nx").join("\n      ").replace(/let (\w+) =/g, "$1 =")}
      workgroupBarrier();
      ${range(XPER).map((j) => `if (li + ${j * WG}u < ${T * KS4}u) { XS[li + ${j * WG}u] = xr${j}; }`).join("\n      ")}
      ${range(XPER).map((j) => xLoad(j, "nx")).join("\n      ")}
      workgroupBarrier();
      ${xread(uses.map(current).join("\n      "))}
    }`;
  };
  const steps = s.pipe === true ? pipedSteps() : plainSteps();
  // the slices' partial sums meet in slice 0 (XS reused once every thread is past its last read)
  const reduce =
    KSPL === 1
      ? ""
      : `workgroupBarrier();
    if (slice > 0u) {
      ${Array.from({ length: S }, (_, k) => groups.map((g) => `XS[((slice - 1u) * ${RW}u + row) * ${S * G4}u + ${k * G4 + g}u] = acc${k}_${g};`).join(" ")).join(" ")}
    }
    workgroupBarrier();
    if (slice == 0u) {
      for (var sl = 0u; sl < ${KSPL - 1}u; sl++) {
        ${Array.from({ length: S }, (_, k) => groups.map((g) => `acc${k}_${g} += XS[(sl * ${RW}u + row) * ${S * G4}u + ${k * G4 + g}u];`).join(" ")).join(" ")}
      }
    }`;
  // token t's result: the product, or (dual) silu(gate)·up
  const result = (t: number): string => {
    const c = `${Math.floor(t / 4)}.${"xyzw"[t % 4]}`;
    return dual ? `silu(acc0_${c}) * acc1_${c}` : `acc0_${c}`;
  };
  const writes = (dest: (t: number) => string): string =>
    Array.from({ length: T }, (_, t) => `if (${t}u < nt) { out(${dest(t)}, r, ${result(t)}); }`).join("\n      ");
  const head = /* wgsl */ `${chunkBindingsWGSL(tc.vec4, mode, dual)}
var<workgroup> XS: array<vec4f, ${rowTileSharedVec4s(s, dual)}>;
fn silu(g: f32) -> f32 { return g / (1.0 + exp(-g)); }
${WIDE_HELPERS}
${matOutWGSL(true)}
// row-tiled product: ${RW} rows × ${KSPL} slice(s), ${T} tokens a tile, ${NS} step(s) of ${s.ks} columns, ${PER} chunk(s) per thread and step
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let row = li % ${RW}u;
  let slice = li / ${RW}u;`;
  if (mode === "plain") {
    return `${head}
  let tt = wid.y % p.tiles;
  let r0 = (wid.x + (wid.y / p.tiles) * p.gx) * ${RW}u;
  if (r0 >= p.rows) { return; }
  let b = wid.z;
  let r = r0 + row;
  let valid = r < p.rows;
  let rb = p.wOff + b * p.wBatch + select(0u, r, valid) * p.rowBytes;
  let xq = (p.xOff + b * p.xBatch) >> 2u;
  let xs4 = p.xStride >> 2u;
  let t0 = tt * ${T}u;
  let nt = min(${T}u, p.n - t0);
  {
    ${accs}
    ${steps}
    ${reduce}
    if (slice == 0u && valid) {
      ${writes((t) => `b, t0 + ${t}u`)}
    }
  }
}`;
  }
  return `${head}
  let r0 = (wid.x + wid.y * p.gx) * ${RW}u;
  let ex = p.e0 + wid.z;
  let r = r0 + row;
  let valid = r < p.rows;
  let rb = p.wOff + wid.z * p.wBatch + select(0u, r, valid) * p.rowBytes;
  ${expertListWGSL("ex", "r0 < p.rows")}
  for (var t0 = 0u; t0 < m; t0 += ${T}u) {
    let nt = min(${T}u, m - t0);
    ${accs}
    ${steps}
    ${reduce}
    if (slice == 0u && valid) {
      ${writes((t) => `IDS[lb + t0 + ${t}u], 0u`)}
    }
    workgroupBarrier();
  }
}`;
}
