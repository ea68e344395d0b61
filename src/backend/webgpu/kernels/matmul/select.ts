/**
 * The matrix family's selection, the one module of it that reads the tuning (RuntimeOptions.tune): which shape the
 * wide, row-tiled and coalesced kernels take for a product, and from how many pairs gathered products go
 * expert-major. Kept apart from the pure WGSL generators (wide.wgsl.ts, rowtile.wgsl.ts, mat.wgsl.ts) and from the
 * launchers (matrix.ts), which take these choices as they are.
 */
import { LatentError } from "../../../../util/errors.js";
import type { GpuRuntime } from "../../core/runtime.js";
import { gpuSupports, Q8_WEIGHT_TYPES } from "../quant.wgsl.js";
import { gemmQ8SharedBytes } from "./gemm-q8.wgsl.js";
import { GEMM_STEP, gemmSharedBytes, type GemmShape } from "./gemm.wgsl.js";
import { MV_WG } from "./mat.wgsl.js";
import { rowTileSharedVec4s, type RowTileShape } from "./rowtile.wgsl.js";
import { rowTileQ8Fits, rowTileQ8SharedBytes } from "./rowtile-q8.wgsl.js";
import { vecQ8SharedBytes, type VecQ8Shape } from "./vec-q8.wgsl.js";
import {
  STAGE_PAD,
  stagedVec4s,
  SUM_TYPES,
  typeCode,
  WIDE_LIST_PAIRS,
  WIDE_MAX_N,
  WIDE_TYPES,
  type WideShape,
} from "./wide.wgsl.js";

/** What the shape choices read of a matrix (a GpuMatrix is one). */
export interface MatrixShape {
  readonly type: number;
  readonly rows: number;
  readonly cols: number;
  /** stacked items (experts or heads) */
  readonly items: number;
}

/**
 * Threads per workgroup by default (rows = this / subgroup size): 256, as the coalesced and latent-cache kernels, so
 * that GpuRuntime.together can put a wide product and one of those in one dispatch. That saved about a sixth of a
 * batch-1 step's dispatches and 6 % of its GPU time, while the kernels alone time the same at 128 and 256 threads.
 */
const WIDE_WG = 256;
/**
 * Chunk steps a lane issues together (unrolled, in one pass); more go in passes of a loop (software-pipelined with
 * `tune.widePipe`). One, because code size bounds these kernels inside a step: between two uses of a kernel its layer
 * streams tens of MB of weights through the L2, so (the explanation the measurements fit) each dispatch fetches its
 * instructions from memory again, and a fully unrolled kernel pays that for every instruction it runs once. Going from
 * 8 to 1 made a batch-1 step about 8 % faster on the GPU, although each product alone got slower.
 */
const UNROLL = 1;

/**
 * The wide kernel's shape for a product over m with n tokens, or undefined when it does not apply (tuning wide = 0,
 * another matvec variant, no fixed subgroup size, another type, more than WIDE_MAX_N tokens, expert-major gathers,
 * x not aligned to 4 floats).
 */
export function wideShape(
  rt: GpuRuntime,
  m: MatrixShape,
  n: number,
  gather: boolean | "experts" | "experts-list",
  aligned: boolean,
): WideShape | undefined {
  const sg = rt.info.subgroupSize;
  if (rt.tune.wide === 0 || rt.matvec !== "coalesced" || sg === undefined || sg < 4 || sg > 64) return undefined;
  // expert lists (n = all pairs), with tune.wideLists = 1: each expert's pairs in tiles of WIDE_MAX_N while experts get
  // few pairs. Off by default: it measured slower than the coalesced expert-list kernel at batches 8 and 64 (by a
  // third and more of the step's GPU time)
  if (gather === "experts-list") {
    if (rt.tune.wideLists !== 1 || !WIDE_TYPES.includes(m.type) || !aligned || n > WIDE_LIST_PAIRS * m.items)
      return undefined;
    n = WIDE_MAX_N;
  }
  if (!WIDE_TYPES.includes(m.type) || n < 1 || n > WIDE_MAX_N || gather === "experts" || !aligned) return undefined;
  const rows = Math.max(1, Math.min(Math.floor(256 / sg), Math.floor(rt.tune.wideRows ?? WIDE_WG / sg)));
  const unroll = Math.max(1, Math.floor(rt.tune.wideUnroll ?? Math.round((UNROLL * sg) / 32)));
  // two rows per subgroup for the vocabulary-sized output head (with x staged, a fifth faster there; no gain or a small
  // loss below ~64k rows)
  const sgRowsDefault = m.rows >= 65536 ? 2 : 1;
  const sgRows =
    gather === "experts-list" ? 1 : Math.max(1, Math.min(4, Math.floor(rt.tune.wideSgRows ?? sgRowsDefault)));
  // staged while n tokens of x fit in half the workgroup memory (the other half left for a kernel sharing the dispatch)
  const pad = STAGE_PAD[m.type];
  const sumBytes = rt.tune.wideSums !== 0 && SUM_TYPES.includes(m.type) ? n * (m.cols / 16) * 4 : 0;
  const stage =
    rt.tune.wideStage !== 0 &&
    gather !== "experts-list" &&
    stagedVec4s(n, m.cols, pad) * 16 + sumBytes <= rt.info.limits.maxComputeWorkgroupStorageSize / 2;
  const sums = stage && sumBytes > 0;
  // two rows a run where that fills the lanes' steps ≥ 10 % better, in one pass (dual products take one row a run)
  const chunks = m.cols / typeCode(m.type).elems;
  // the share of a run's lane steps that hold a chunk: rowsRun rows a run over `lanes` lanes
  const fill = (rowsRun: number, lanes = sg): number =>
    (rowsRun * chunks) / (lanes * Math.ceil((rowsRun * chunks) / lanes));
  const packable = gather !== "experts-list" && sgRows === 1;
  const pack =
    packable &&
    (rt.tune.widePack === 1 ||
      (rt.tune.widePack !== 0 && fill(2) >= 1.1 * fill(1) && Math.ceil((2 * chunks) / sg) <= unroll))
      ? 2
      : 1;
  // half a subgroup a row where that fills the lanes' steps ≥ 10 % better (not with pack, nor expert lists): a short
  // row (the routed down product) then keeps all its lanes busy — a fifth faster alone, 2 % on a batch-1 step
  const half =
    pack === 1 &&
    gather !== "experts-list" &&
    sg >= 8 &&
    (rt.tune.wideHalf === 2 || (rt.tune.wideHalf !== 0 && fill(1, sg / 2) >= 1.1 * fill(1)));
  // not by default: pipelined passes measured slightly slower on a batch-1 step than plain ones (each pass's loads,
  // then its uses)
  const pipe = rt.tune.widePipe === 1;
  return {
    sg,
    rows,
    sgRows,
    unroll,
    n,
    cols: m.cols,
    stagePad: stage ? pad : 0,
    pack,
    sums,
    ...(half ? { half } : {}),
    ...(pipe ? { pipe } : {}),
  };
}

/** Most tokens a tile of the integer matrix-vector kernel (its accumulators: rows loaded together × matrices × tokens). */
const VEC_Q8_TOKENS = 16;

/**
 * Most tokens of a plain product on the integer matrix-vector kernel by default (tune.vecQ8 = 2: up to
 * ROW_TILE_FROM − 1). Measured on a large GPU (v2-lite, q8, chained decode, GPU time a step, alternating): batch 8
 * 9.39–9.40 ms against 9.68–9.69 on the coalesced kernel, batch 12 13.39–13.41 against 13.44–13.46, batch 16
 * 16.93–16.94 against 16.14–16.16.
 */
export const VEC_Q8_MAX = 8;

/**
 * Workgroup memory the integer matrix-vector kernel stages x in (at most; the device's limit if lower): 8 workgroups
 * of 256 threads then fit a multiprocessor's memory, so the threads, not the staging, bound how many run at once.
 */
const VEC_Q8_STAGE_BYTES = 24576;

/** Workgroups the integer matrix-vector kernel aims for before its subgroups take more rows each (two a multiprocessor of a large GPU). */
const VEC_Q8_GROUPS = 264;

/**
 * The integer matrix-vector kernel's shape (vec-q8.wgsl.ts) for a plain product of n tokens (rowsTotal rows over all
 * batch items), or undefined where it does not apply: neither activations q8 nor tune.rowTileX16 = 1, tune.vecQ8 = 0,
 * another matvec variant, no fixed subgroup size, a type without an integer form, n outside WIDE_MAX_N + 1 .. VEC_Q8_MAX
 * (tune.vecQ8 = 2: .. ROW_TILE_FROM − 1, the row-tiled kernel's start), x not aligned to 4 floats, or columns not a
 * multiple of 64. (The routed experts of such steps stay per pair on the wide kernel: this kernel took a batch-8 step
 * of v2-lite to 10.04 ms of GPU time per pair and to 10.19 from expert lists, against 9.23–9.32 on the wide kernel.)
 * With `pre` (the launcher can run xq8.wgsl.ts's pass) the kernel reads x quantized by it where staging x would go in
 * steps (tune.vecQ8X = 2: always; 0 or tune.q8X = 0: never; never with x in two pieces).
 */
export function vecQ8Shape(
  rt: GpuRuntime,
  m: MatrixShape,
  n: number,
  aligned: boolean,
  rowsTotal = m.rows,
  pre = false,
): VecQ8Shape | undefined {
  const sg = rt.info.subgroupSize;
  const x16 = rt.tune.rowTileX16 === 1;
  const vx = rt.tune.vecQ8X ?? 1;
  if (vx !== 0 && vx !== 1 && vx !== 2) throw new LatentError(`tune.vecQ8X must be 0, 1 or 2, got ${vx}`);
  if (
    rt.tune.vecQ8 === 0 ||
    !(x16 || rt.activations === "q8") ||
    rt.matvec !== "coalesced" ||
    sg === undefined ||
    sg < 4 ||
    sg > 64 ||
    !(Q8_WEIGHT_TYPES as readonly number[]).includes(m.type) ||
    !aligned ||
    n <= WIDE_MAX_N ||
    n > (rt.tune.vecQ8 === 2 ? ROW_TILE_FROM - 1 : VEC_Q8_MAX) ||
    m.cols % 64 !== 0
  )
    return undefined;
  const tiles = Math.ceil(n / VEC_Q8_TOKENS);
  const tokens = 4 * Math.ceil(n / (4 * tiles));
  const pieces = x16 ? 2 : 1;
  const budget = Math.min(rt.info.limits.maxComputeWorkgroupStorageSize, VEC_Q8_STAGE_BYTES);
  // the whole row where its x fits, else the widest step of 64-column groups that divides the row and fits
  let ks = m.cols;
  while (ks >= 64 && (m.cols % ks !== 0 || ks % 64 !== 0 || vecQ8SharedBytes(tokens, ks, pieces) > budget)) ks -= 64;
  // x from the quantizing pass (one piece, where the launcher runs it) by default only where staging would go in steps:
  // elsewhere staging costs little and the pass would be one more dispatch
  const xq8 = pre && !x16 && xq8On(rt) && (vx === 2 || (vx === 1 && ks < m.cols));
  if (xq8) ks = m.cols;
  if (ks < 64) return undefined;
  const par = rt.tune.vecQ8Par ?? 1;
  if (par !== 1 && par !== 2) throw new LatentError(`tune.vecQ8Par must be 1 or 2, got ${par}`);
  const sgs = Math.max(1, Math.floor(256 / sg));
  let rowsPerSg = par;
  if (ks === m.cols) {
    const want = rt.tune.vecQ8Rows;
    if (want !== undefined && (!Number.isInteger(want) || want < 1 || want % par !== 0))
      throw new LatentError(`tune.vecQ8Rows must be a multiple of vecQ8Par (${par}), got ${want}`);
    let rows = 16;
    while (rows > par && Math.ceil(rowsTotal / (sgs * rows)) < VEC_Q8_GROUPS) rows /= 2;
    rowsPerSg = want ?? Math.max(par, rows);
  }
  return {
    sg,
    sgs,
    rowsPerSg,
    par,
    tokens,
    ks,
    cols: m.cols,
    ...(x16 ? { pieces: 2 as const } : {}),
    ...(xq8 ? { xq8 } : {}),
  };
}

/**
 * Plain products of at least this many tokens take the row-tiled kernel by default (tune.rowTile = 1: from 5). Below
 * it the tile's reuse of each decoded weight does not pay for its staging: batches 8 and 16 of a v2-lite decode were
 * slower on it, batch 32 faster, batch 64 and a 512-token prefill about 1.5× faster.
 */
export const ROW_TILE_FROM = 32;

/**
 * Expert-major products from expert lists on the row-tiled kernel from pairs ≥ this × experts (expertsFrom below).
 * With fewer pairs an expert's tile is mostly empty: on v2-lite (64 experts, 6 a token) batch 16 (96 pairs) was slower
 * than per pair on the wide kernel, batch 32 (192 pairs) faster.
 */
export const ROW_TILE_EXPERTS_FROM = 2;

/**
 * Chunk streams (chunks × matrices) a thread loads per step: by default at most PER_MATRIX per matrix and at most
 * STREAM_TOKENS / tile tokens, never more than MAX_STREAMS. Why these bounds:
 * - the dual routed gate·up with 8-token tiles: 4 chunks × 2 matrices a thread spilled registers (about 5× slower than
 *   2 × 2), and 8 × 2 failed to compile; 2 × 2 beat 1 × 2 by 5–8 % on batch 32 and 64 steps;
 * - with the 16-token tiles of a long prefill, 2 × 2 was slower than 1 × 2;
 * - on lavapipe 8 chunks a thread took minutes to compile.
 */
const PER_MATRIX = 2;
const STREAM_TOKENS = 32;
const MAX_STREAMS = 4;

/** Threads a row-tiled product aims for before its rows stop splitting over more slices (about 1000 per SM of a large GPU). */
export const ROW_TILE_FILL = 131072;

/**
 * The row-tiled kernel's shape for n tokens (plain; rowsTotal rows over all batch items) or n pairs over m.items
 * experts (expert lists), or undefined where it does not apply (tune.rowTile = 0, a matvec variant other than the
 * default coalesced one, another type, plain products of fewer than ROW_TILE_FROM tokens, or with tune.rowTile = 1 of at most WIDE_MAX_N (the wide kernel's), x not aligned to
 * 4 floats).
 */
export function rowTileShape(
  rt: GpuRuntime,
  m: MatrixShape,
  n: number,
  mode: "plain" | "experts-list",
  aligned: boolean,
  rowsTotal = m.rows,
  dual = false,
): RowTileShape | undefined {
  if (
    rt.tune.rowTile === 0 ||
    rt.matvec !== "coalesced" ||
    !WIDE_TYPES.includes(m.type) ||
    !aligned ||
    (mode === "plain" && n < (rt.tune.rowTile === 1 ? WIDE_MAX_N + 1 : ROW_TILE_FROM))
  )
    return undefined;
  const sg = rt.info.subgroupSize ?? 32;
  const per = mode === "plain" ? n : n / m.items;
  // tiles of up to 16 tokens (a long prefill: 10–40 % faster than 8); up to 8 at subgroups narrower than 32
  // (CPU adapters: lavapipe's LLVM took 31 s to compile a 16-token Q4_K tile, 4 s an 8-token one)
  let tokens = rt.tune.rowTileTokens ?? (per <= 4 ? 4 : per <= 8 || sg < 32 ? 8 : 16);
  if (!Number.isInteger(tokens) || tokens < 4 || tokens > 32 || tokens % 4 !== 0)
    throw new LatentError(`tune.rowTileTokens must be a multiple of 4 in 4..32, got ${tokens}`);
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
  const fits = (k: number): boolean =>
    k * sg <= 256 &&
    rowTileSharedVec4s({ rows: Math.max(sg, 256 / k), ksplit: k, tokens, ks, cols: m.cols }, dual) * 16 + 16 <= limit;
  const streams = (k: number): number => (chunks / k) * S;
  const want = rt.tune.rowTileSplit;
  if (want !== undefined && (!Number.isInteger(want) || want < 1 || (want & (want - 1)) !== 0))
    throw new LatentError(`tune.rowTileSplit must be a power of two, got ${want}`);
  // threads per row (a tuned split is a least): enough that each thread loads at most `most` chunk streams per step,
  // then more while the product has few threads
  let ksplit = Math.min(want ?? 1, chunks);
  const most = want === undefined ? Math.min(PER_MATRIX * S, Math.max(1, STREAM_TOKENS / tokens)) : MAX_STREAMS;
  while (ksplit < chunks && streams(ksplit) > most) ksplit *= 2;
  if (want === undefined) while (ksplit < chunks && units * ksplit < ROW_TILE_FILL && fits(ksplit * 2)) ksplit *= 2;
  // pipelined steps on GPUs (a batch-64 step 10 % faster); not on CPU adapters, where there
  // is no memory latency to hide and lavapipe took twice as long to compile the pipelined kernel
  const pipe = rt.tune.rowTilePipe !== undefined ? rt.tune.rowTilePipe === 1 : sg >= 32;
  // a Q4_K block's header loaded once for a thread's chunks of a step, on GPUs (batch 32 and 64 steps 2–5 % faster);
  // not on CPU adapters (not measured there, and another variant for lavapipe to compile)
  const header = rt.tune.rowTileHeader !== undefined ? rt.tune.rowTileHeader === 1 : sg >= 32;
  const shape = {
    rows: Math.max(sg, 256 / ksplit),
    ksplit,
    tokens,
    ks,
    cols: m.cols,
    ...(pipe ? { pipe: true } : {}),
    ...(header ? { shareHeader: true } : {}),
  };
  if (streams(ksplit) > MAX_STREAMS || !fits(ksplit)) return undefined;
  // activations q8 (or tune.rowTileX16) on types with an integer form: the same shape on int8 dot products
  // (rowtile-q8.wgsl.ts), its steps widened, else its threads a row halved, until every slice takes whole groups of
  // 32-column units (Q4_K's pairs), where its workgroup memory fits
  let ksQ8 = ks;
  let splitQ8 = ksplit;
  while (!rowTileQ8Fits(m.type, { ...shape, ks: ksQ8, ksplit: splitQ8 }) && m.cols % (2 * ksQ8) === 0) ksQ8 *= 2;
  while (!rowTileQ8Fits(m.type, { ...shape, ks: ksQ8, ksplit: splitQ8 }) && splitQ8 > 1) splitQ8 /= 2;
  // activations int15 (or tune.rowTileX16 = 1, in any mode): x in two int8 pieces (15 bits per 32 values)
  const x16 = rt.tune.rowTileX16 === 1 || rt.activations === "int15";
  const q8Shape: RowTileShape = {
    rows: Math.max(sg, 256 / splitQ8),
    ksplit: splitQ8,
    tokens,
    ks: ksQ8,
    cols: m.cols,
    q8: true,
    ...(x16 ? { pieces: 2 as const } : {}),
  };
  const q8 =
    (x16 || (rt.activations === "q8" && rt.tune.rowTileQ8 !== 0)) &&
    (Q8_WEIGHT_TYPES as readonly number[]).includes(m.type) &&
    rowTileQ8Fits(m.type, q8Shape) &&
    rowTileQ8SharedBytes(q8Shape, dual) <= limit;
  return q8 ? q8Shape : shape;
}

/**
 * Plain products of at least this many tokens take the register-tiled kernel (gemm.wgsl.ts) by default: a 512-token
 * prefill of v2-lite ran its plain products 1.3–1.6× faster on it than on the row-tiled kernel, while a batch-64
 * decode step took 48.4 ms of GPU time with its 64-token products on it against 37.3 ms without.
 */
export const GEMM_FROM = 128;

/**
 * Expert lists whose experts average at least this many pairs take the register-tiled kernel by default: v2-lite's
 * 512-token prefill (48 pairs an expert) ran its routed products 1.1–1.2× faster on it, while on the GLM-5 shape (16
 * pairs an expert, 16-token tiles) the prefill took 228 ms of GPU time against 222 on the row-tiled kernel.
 */
export const GEMM_EXPERTS_FROM = 24;

/**
 * The same with activations q8 (the integer kernel, about 1.7× the f32 one's speed): a v2-lite prefill in 128-token
 * steps (12 pairs an expert) took 239.0 ms of GPU time with its expert lists on it against 263.0 on the f32 row-tiled
 * kernel; at 24 pairs an expert both settings take it (145.5 / 145.6 ms).
 */
export const GEMM_Q8_EXPERTS_FROM = 12;

/**
 * With activations q8, plain products of at least GEMM_HEAD_ROWS rows (an output head: 102,400 rows for v2-lite,
 * 154,880 for GLM-5) take the register-tiled kernel from this many tokens (the gemmHeadFrom knob) instead of
 * GEMM_FROM: at a batched decode step the head is the one product whose rows alone fill the GPU with 64-token tiles,
 * and the row-tiled kernel decodes each of its weights once per 16 tokens.
 */
export const GEMM_HEAD_FROM = 32;
export const GEMM_HEAD_ROWS = 65536;

/**
 * Plain products whose tiles give fewer workgroups than this stay on the row-tiled kernel (which splits a row's
 * columns over threads when a product is small): v2-lite's router (64 rows × 512 tokens: 8 tiles) took 3.5 ms of a
 * prefill on the register-tiled kernel against 0.7 ms on the row-tiled one.
 */
export const GEMM_MIN_GROUPS = 128;

/**
 * The register-tiled kernel's shape for n tokens (plain) or n pairs over m.items experts (expert lists), or undefined
 * where it does not apply: tune.gemm = 0, by default a CPU adapter (subgroups narrower than 32), fewer tokens or pairs
 * an expert than its thresholds (tune.gemm = 2: any), plain products of fewer than GEMM_MIN_GROUPS tiles (rowsTotal
 * rows over all batch items), x not aligned to 4 floats, columns not a multiple of 32, or no tile that fits the
 * workgroup memory.
 */
export function gemmShape(
  rt: GpuRuntime,
  m: MatrixShape,
  n: number,
  mode: "plain" | "experts-list",
  aligned: boolean,
  dual = false,
  rowsTotal = m.rows,
): GemmShape | undefined {
  const sg = rt.info.subgroupSize ?? 32;
  const on = rt.tune.gemm !== undefined ? rt.tune.gemm >= 1 : sg >= 32;
  const per = mode === "plain" ? n : n / m.items;
  // activations q8 on types with an integer form: the q8 kernel, in the widest step that divides the row and fits
  const q8 = rt.activations === "q8" && (Q8_WEIGHT_TYPES as readonly number[]).includes(m.type);
  const expertsMin = rt.tune.gemmExpertsFrom ?? (q8 ? GEMM_Q8_EXPERTS_FROM : GEMM_EXPERTS_FROM);
  const headFrom = rt.tune.gemmHeadFrom ?? GEMM_HEAD_FROM;
  const plainMin = q8 && headFrom > 0 && rowsTotal >= GEMM_HEAD_ROWS ? Math.min(headFrom, GEMM_FROM) : GEMM_FROM;
  if (
    !on ||
    rt.matvec !== "coalesced" ||
    !gpuSupports(m.type) ||
    !aligned ||
    m.cols % GEMM_STEP !== 0 ||
    per < (rt.tune.gemm === 2 ? 1 : mode === "plain" ? plainMin : expertsMin)
  )
    return undefined;
  // plain products: 64-token tiles, 32 where a product has no more tokens; expert lists: the pairs an expert averages
  const tokens = rt.tune.gemmTokens ?? (mode === "plain" ? (per > 32 ? 64 : 32) : per > 32 ? 64 : per > 16 ? 32 : 16);
  if (tokens !== 16 && tokens !== 32 && tokens !== 64)
    throw new LatentError(`tune.gemmTokens must be 16, 32 or 64, got ${tokens}`);
  const tm = rt.tune.gemmRows ?? (tokens === 16 ? 2 : 4);
  if (![1, 2, 4, 8].includes(tm)) throw new LatentError(`tune.gemmRows must be 1, 2, 4 or 8, got ${tm}`);
  if (rt.tune.gemmStep !== undefined && rt.tune.gemmStep !== 16 && rt.tune.gemmStep !== 32)
    throw new LatentError(`tune.gemmStep must be 16 or 32, got ${rt.tune.gemmStep}`);
  const tn = 4;
  // 256 threads: tokens / tn along the tokens, the rest along the rows
  const tx = 256 / (tokens / tn);
  const limit = rt.info.limits.maxComputeWorkgroupStorageSize;
  // steps of 16 columns for dual products and expert lists, else of 32 where the tiles fit (else 16, else fewer rows a
  // thread). On a v2-lite 512-token prefill (H200), steps of 16 took the routed gate·up from 78.9 to 68.6 ms, the routed
  // down from 38.1 to 33.9 and the shared gate·up from 14.8 to 13.6 (half the workgroup memory: more workgroups a
  // multiprocessor), while single plain products (q/kv_a, o, shared down) lost 9–14 % to the doubled barriers
  const steps = rt.tune.gemmStep !== undefined ? [rt.tune.gemmStep] : dual || mode === "experts-list" ? [16] : [32, 16];
  // pipelined steps: by default the q8 kernel's on GPUs (a v2-lite 512-token prompt 85.5 → 83.8 ms of GPU time, the
  // GLM-5 shape's 105.8 → 100.8); the f32 kernel's measured no gain (170.9 against 170.3 ms) and stays off
  const pipe = rt.tune.gemmPipe !== undefined ? rt.tune.gemmPipe === 1 : q8 && sg >= 32;
  const shape = (t: number, ks: number): GemmShape => ({
    rows: tx * t,
    tokens,
    tm: t,
    tn,
    ks,
    cols: m.cols,
    ...(pipe ? { pipe } : {}),
  });
  const q8Steps = rt.tune.gemmQ8Step !== undefined ? [rt.tune.gemmQ8Step] : [128, 64, 32];
  if (q8 && !q8Steps.every((k) => [32, 64, 128].includes(k)))
    throw new LatentError(`tune.gemmQ8Step must be 32, 64 or 128, got ${rt.tune.gemmQ8Step}`);
  let fit: GemmShape | undefined;
  for (let t = tm; t >= 1 && fit === undefined; t /= 2)
    if (q8) {
      for (const ks of q8Steps)
        if (fit === undefined && m.cols % ks === 0 && gemmQ8SharedBytes(shape(t, ks), dual) <= limit)
          fit = { ...shape(t, ks), q8 };
    } else
      for (const ks of steps) if (fit === undefined && gemmSharedBytes(shape(t, ks), dual) <= limit) fit = shape(t, ks);
  const groups = fit !== undefined ? Math.ceil(rowsTotal / fit.rows) * Math.ceil(n / fit.tokens) : 0;
  return mode === "plain" && rt.tune.gemm !== 2 && groups < GEMM_MIN_GROUPS ? undefined : fit;
}

/**
 * Threads per row of the coalesced kernel: as many as keep every thread on at least `steps` vec4 steps of the row
 * (more threads per row at small batches, where the product is latency-bound), at least one subgroup, at most MV_WG.
 * For one token, also no more than fill the GPU about once (`fill` threads over all `rows` of the dispatch): past
 * that, extra workgroups run in further waves, each paying the whole chain of dependent loads again.
 */
function coalescedTpr(cols: number, n: number, minT: number, rows: number, fill: number): number {
  const steps = n <= 1 ? 2 : n <= 4 ? 4 : 8;
  let tpr = MV_WG;
  while (tpr > minT && (tpr * 4 * steps > cols || (n <= 1 && fill > 0 && tpr * rows > fill))) tpr /= 2;
  return tpr;
}

/** Threads that fill the GPU about once (132 SMs × 2048 threads on a large GPU); the fillThreads knob overrides, 0 turns it off. */
export const FILL_THREADS = 262144;

/**
 * The coalesced kernel's threads per row for a product over m with n tokens (rowsTotal rows over the dispatch), and
 * for expert-major products (expertMajor) its tokens a tile (tn; undefined: the launcher's own, the tokens rounded up
 * to a power of two). minT: the fewest threads a row (a subgroup where its size is fixed, else 4).
 */
export function coalescedShape(
  rt: GpuRuntime,
  m: MatrixShape,
  n: number,
  minT: number,
  rowsTotal: number,
  expertMajor: boolean,
): { tpr: number; tn?: number } {
  if (!expertMajor) return { tpr: coalescedTpr(m.cols, n, minT, rowsTotal, rt.tune.fillThreads ?? FILL_THREADS) };
  // measured on a large GPU (v2-lite, bench --tune): one subgroup per row, and tiles sized to the pairs an expert
  // gets on average (n / items; at least 4): 8 at batch 64, 16 for a 512-token prefill
  const tpr = rt.tune.expertTpr !== undefined ? Math.max(minT, rt.tune.expertTpr) : minT;
  let tn = 4;
  while (tn < Math.min(16, n / m.items)) tn *= 2;
  if (rt.tune.expertTn !== undefined) tn = rt.tune.expertTn;
  return { tpr, tn };
}

/**
 * Expert-major gathered products over m from pairs ≥ this × experts (the expertsFrom knob). Where the wide
 * kernel takes m's pairs one by one: 8 — measured on a large GPU (v2-lite Q4_K_M, chained decode), per pair on
 * the wide kernel instead of expert-major from lists: batch 8 (48 pairs over 64 experts) 349.6 → 718.6 tok/s (GPU
 * 19.66 → 10.76 ms per step), batch 16 521.5 → 781.0, batch 32 732.8 → 938.7, batch 64 (384 pairs) GPU 64.8 → 63.2 ms.
 * Where the row-tiled kernel takes m's expert lists (by default, for the same types): ROW_TILE_EXPERTS_FROM = 2
 * (rowtile.wgsl.ts), so the 8 above holds only with tune.rowTile = 0. Elsewhere 1/4 (measured before the wide kernel
 * existed: batch 8 ran 287 → 337 tok/s expert-major with tiles of 4 instead of per pair on the coalesced kernel).
 */
export function expertsFrom(rt: GpuRuntime, m: MatrixShape): number {
  if (rt.tune.expertsFrom !== undefined) return rt.tune.expertsFrom;
  if (rt.matvec !== "coalesced") return 1;
  if (rowTileShape(rt, m, 2 * m.items, "experts-list", true) !== undefined) return ROW_TILE_EXPERTS_FROM;
  return wideShape(rt, m, 1, true, true) !== undefined ? 8 : 0.25;
}

/**
 * Whether the integer register-tiled and row-tiled products (activations q8, one piece) read x quantized once by the
 * pass of xq8.wgsl.ts (tune.q8X, default on) where their launcher can run it.
 */
export function xq8On(rt: GpuRuntime): boolean {
  const v = rt.tune.q8X;
  if (v !== undefined && v !== 0 && v !== 1) throw new LatentError(`tune.q8X must be 0 or 1, got ${v}`);
  return v !== 0;
}
