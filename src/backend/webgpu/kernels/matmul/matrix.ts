/// <reference types="@webgpu/types" />
/**
 * Weight matrices resident on the GPU in their GGUF block layout, bound in pieces when a tensor is larger than the
 * device's maxStorageBufferBindingSize (row ranges; whole items for stacked expert/head tensors), and the launchers
 * of the matrix kernels over them.
 */
import { typeName } from "../../../../gguf/types.js";
import { rowBytes as quantRowBytes } from "../../../../quant/index.js";
import { LatentError } from "../../../../util/errors.js";
import type { GpuRuntime } from "../../core/runtime.js";
import {
  EXPERT_LISTS_WGSL,
  getRowsWGSL as getRowsSource,
  matvec2WGSL as matvec2Source,
  matvecCoalescedWGSL as coalescedSource,
  matvecExpertsWGSL as expertsSource,
  matvecTWGSL as matvecTSource,
  MV_WG,
  packMatParams,
  type MatParams,
  type MatvecShape,
} from "./mat.wgsl.js";
import { gpuSupports, unitSize } from "../quant.wgsl.js";
import { gemmWGSL as gemmSource } from "./gemm.wgsl.js";
import { gemmQ8WGSL as gemmQ8Source } from "./gemm-q8.wgsl.js";
import { matmulRowsWGSL as rowTileSource } from "./rowtile.wgsl.js";
import { matmulRowsQ8WGSL as rowTileQ8Source } from "./rowtile-q8.wgsl.js";
import { coalescedShape, expertsFrom, gemmShape, rowTileShape, vecQ8Shape, wideShape, xq8On } from "./select.js";
import { matvecQ8WGSL as vecQ8Source, vecQ8Rows } from "./vec-q8.wgsl.js";
import {
  fusionBuffers,
  matvecWideWGSL as wideSource,
  wideRowsPerGroup,
  type WideFusion,
  type WideShape,
} from "./wide.wgsl.js";
import { memoWGSL } from "../../core/wgsl-memo.js";
import { QUANTIZE_X_Q8_WGSL, XQ8_WG, xq8Bytes } from "./xq8.wgsl.js";

const matvecWideWGSL = memoWGSL(wideSource);
const matmulRowsWGSL = memoWGSL(rowTileSource);
const gemmWGSL = memoWGSL(gemmSource);
const gemmQ8WGSL = memoWGSL(gemmQ8Source);
const matmulRowsQ8WGSL = memoWGSL(rowTileQ8Source);
const matvecQ8WGSL = memoWGSL(vecQ8Source);

/**
 * A tiled matrix-matrix kernel for a product: its code, rows per workgroup and tokens (pairs) per tile, and whether it
 * reads x quantized by quantizeXq8's pass.
 */
interface TiledKernel {
  readonly code: string;
  readonly rows: number;
  readonly tokens: number;
  readonly xq8: boolean;
}

/**
 * The tiled kernel of a product of n tokens (plain) or n pairs (expert lists), dual for gate and up together: the
 * register-tiled kernel where it applies (many tokens a tile), else the row-tiled one, else (plain, a few tokens, integer
 * activations) the integer matrix-vector kernel, else undefined. With `pre` the integer kernels read x quantized by
 * quantizeXq8's pass (where tune.q8X allows).
 */
function tiledKernel(
  rt: GpuRuntime,
  m: GpuMatrix,
  n: number,
  mode: "plain" | "experts-list",
  aligned: boolean,
  rowsTotal: number,
  dual: boolean,
  pre = false,
): TiledKernel | undefined {
  const gemm = gemmShape(rt, m, n, mode, aligned, dual, rowsTotal);
  if (gemm !== undefined) {
    const xq8 = pre && gemm.q8 === true && xq8On(rt);
    return {
      code: (gemm.q8 === true ? gemmQ8WGSL : gemmWGSL)(m.type, mode, xq8 ? { ...gemm, xq8 } : gemm, dual),
      rows: gemm.rows,
      tokens: gemm.tokens,
      xq8,
    };
  }
  const rowTile = rowTileShape(rt, m, n, mode, aligned, rowsTotal, dual);
  if (rowTile !== undefined) {
    const xq8 = pre && rowTile.q8 === true && rowTile.pieces === undefined && xq8On(rt);
    return {
      code: (rowTile.q8 === true ? matmulRowsQ8WGSL : matmulRowsWGSL)(
        m.type,
        mode,
        xq8 ? { ...rowTile, xq8 } : rowTile,
        dual,
      ),
      rows: rowTile.rows,
      tokens: rowTile.tokens,
      xq8,
    };
  }
  const vec = mode === "plain" ? vecQ8Shape(rt, m, n, aligned, rowsTotal, pre) : undefined;
  if (vec !== undefined)
    return { code: matvecQ8WGSL(m.type, vec, dual), rows: vecQ8Rows(vec), tokens: vec.tokens, xq8: vec.xq8 === true };
  return undefined;
}

/** Rows of a product's x: `rows` rows of `cols` floats, row r at float off + r·stride (multiples of 4). */
interface XRows {
  readonly rows: number;
  readonly cols: number;
  readonly off: number;
  readonly stride: number;
}

/**
 * Quantize x's rows to q8_1 into the runtime's scratch buffer (xq8.wgsl.ts) for a kernel that reads them so; undefined
 * (nothing dispatched) where the pass cannot run here: inside together() (its reader would run beside it) or past the
 * binding limit.
 */
function quantizeXq8(rt: GpuRuntime, x: GPUBuffer, r: XRows): GPUBuffer | undefined {
  if (rt.holding) return undefined;
  const bytes = xq8Bytes(r.rows, r.cols);
  const q = rt.scratch("xq8", bytes);
  if (q === undefined) return undefined;
  const groups = Math.ceil((r.rows * r.cols) / 32 / XQ8_WG);
  const { gx, gy } = rowGrid(rt, groups);
  rt.dispatch(
    "quantize x q8",
    QUANTIZE_X_Q8_WGSL,
    [x, q],
    new Uint32Array([r.rows, r.cols / 32, r.off, r.stride, gx, 0, 0, 0]),
    [gx, gy, 1],
    [{ buffer: q, offset: 0, size: bytes }],
  );
  return q;
}

/**
 * Allocate the quantized-x scratch up front for products whose x has at most `floats` values (a model's step buffers),
 * so that its bytes count before a GPU memory budget places the rest (activations q8 only; it still grows if needed).
 */
export function reserveXq8(rt: GpuRuntime, floats: number): void {
  if (rt.activations === "q8") rt.scratch("xq8", xq8Bytes(1, Math.ceil(floats / 32) * 32));
}

/**
 * The kernel a tiled product runs and the x it binds: `k` reading x quantized by the pass (dispatched here) where it
 * asks for that and the pass can run, else the kernel `plain()` chooses over x as it is.
 */
function tiledInput(
  rt: GpuRuntime,
  k: TiledKernel,
  x: GPUBuffer,
  r: XRows,
  plain: () => TiledKernel,
): { k: TiledKernel; x: GPUBuffer } {
  if (!k.xq8) return { k, x };
  const q = quantizeXq8(rt, x, r);
  return q !== undefined ? { k, x: q } : { k: plain(), x };
}
const matvecCoalescedWGSL = memoWGSL(coalescedSource);
const matvecExpertsWGSL = memoWGSL(expertsSource);
const matvec2WGSL = memoWGSL(matvec2Source);
const matvecTWGSL = memoWGSL(matvecTSource);
const getRowsWGSL = memoWGSL(getRowsSource);

export interface MatrixPiece {
  readonly buffer: GPUBuffer;
  /** first row (of each item) and row count held; all rows when the tensor is split by items */
  readonly firstRow: number;
  readonly rows: number;
  /** first item and item count held */
  readonly firstItem: number;
  readonly items: number;
}

/** A [items × rows × cols] weight tensor (items = 1 for a plain matrix) of one GGUF type, resident on the GPU. */
export class GpuMatrix {
  readonly rowBytes: number;
  readonly unit: number;
  readonly nu: number;
  readonly bytes: number;

  private constructor(
    readonly name: string,
    readonly type: number,
    readonly cols: number,
    readonly rows: number,
    readonly items: number,
    readonly pieces: readonly MatrixPiece[],
  ) {
    this.rowBytes = quantRowBytes(type, cols);
    this.unit = unitSize(type, cols);
    this.nu = cols / this.unit;
    this.bytes = this.rowBytes * rows * items;
  }

  /** Upload `data` (items·rows rows of `cols`); rows are `rows` per item. */
  static upload(
    rt: GpuRuntime,
    name: string,
    type: number,
    cols: number,
    rows: number,
    data: Uint8Array,
    items = 1,
  ): GpuMatrix {
    if (!gpuSupports(type)) throw new LatentError(`${name}: the WebGPU backend cannot read ${typeName(type)} weights`);
    const rb = quantRowBytes(type, cols);
    if (data.byteLength !== rb * rows * items)
      throw new LatentError(`${name}: expected ${rb * rows * items} bytes, got ${data.byteLength}`);
    const max = rt.maxBindingBytes;
    const pieces: MatrixPiece[] = [];
    const itemBytes = rb * rows;
    if (items > 1 && itemBytes <= max) {
      const per = Math.max(1, Math.floor(max / itemBytes));
      for (let i = 0; i < items; i += per) {
        const k = Math.min(per, items - i);
        pieces.push({
          buffer: rt.upload(data.subarray(i * itemBytes, (i + k) * itemBytes), `${name}[${i}..]`),
          firstRow: 0,
          rows,
          firstItem: i,
          items: k,
        });
      }
    } else if (items === 1) {
      const per = Math.max(1, Math.floor(max / rb));
      if (rb > max) throw new LatentError(`${name}: one row of ${rb} bytes exceeds the binding limit ${max}`);
      for (let r = 0; r < rows; r += per) {
        const k = Math.min(per, rows - r);
        pieces.push({
          buffer: rt.upload(data.subarray(r * rb, (r + k) * rb), `${name}[rows ${r}..]`),
          firstRow: r,
          rows: k,
          firstItem: 0,
          items: 1,
        });
      }
    } else {
      throw new LatentError(`${name}: one item of ${itemBytes} bytes exceeds the binding limit ${max}`);
    }
    return new GpuMatrix(name, type, cols, rows, items, pieces);
  }

  /**
   * `items` stacked items of rows × cols, allocated and left unwritten (writeItem fills them): the slots of an expert
   * cache. Each item starts 4-byte aligned within its piece (queue writes need that), else it takes a piece of its own.
   */
  static empty(rt: GpuRuntime, name: string, type: number, cols: number, rows: number, items: number): GpuMatrix {
    if (!gpuSupports(type)) throw new LatentError(`${name}: the WebGPU backend cannot read ${typeName(type)} weights`);
    const itemBytes = quantRowBytes(type, cols) * rows;
    if (itemBytes > rt.maxBindingBytes)
      throw new LatentError(`${name}: one item of ${itemBytes} bytes exceeds the binding limit ${rt.maxBindingBytes}`);
    const per = itemBytes % 4 === 0 ? Math.max(1, Math.floor(rt.maxBindingBytes / itemBytes)) : 1;
    const pieces: MatrixPiece[] = [];
    for (let i = 0; i < items; i += per) {
      const k = Math.min(per, items - i);
      pieces.push({
        buffer: rt.buffer(Math.ceil((k * itemBytes) / 4) * 4, `${name}[${i}..]`),
        firstRow: 0,
        rows,
        firstItem: i,
        items: k,
      });
    }
    return new GpuMatrix(name, type, cols, rows, items, pieces);
  }

  /** Write item `item`'s bytes (rows × cols in the matrix's type), in queue order before the next submission. */
  writeItem(rt: GpuRuntime, item: number, data: Uint8Array): void {
    const itemBytes = this.rowBytes * this.rows;
    if (data.byteLength !== itemBytes)
      throw new LatentError(`${this.name}: an item is ${itemBytes} bytes, got ${data.byteLength}`);
    const piece = this.pieces.find((p) => item >= p.firstItem && item < p.firstItem + p.items);
    if (piece === undefined || piece.rows !== this.rows)
      throw new LatentError(`${this.name}: no item ${item} (of ${this.items}) in a piece of whole items`);
    rt.write(piece.buffer, (item - piece.firstItem) * itemBytes, data);
  }

  destroy(): void {
    for (const p of this.pieces) p.buffer.destroy();
  }
}

export interface MatmulArgs {
  /** tokens */
  readonly n: number;
  readonly xStride: number;
  readonly yStride: number;
  readonly xOff?: number;
  readonly yOff?: number;
  /** add into y instead of overwriting */
  readonly acc?: boolean;
  /** y = silu(y)·(W·x): SwiGLU fused into the up product, y holding the gate product (not with acc) */
  readonly glu?: boolean;
  /** batch over the matrix's items (heads): item b reads x at + b·xBatch, writes y at + b·yBatch */
  readonly batch?: { readonly count: number; readonly xBatch: number; readonly yBatch: number };
  /** work beside the product on the wide kernel (only where `fusable` says it runs there) */
  readonly fuse?: FusionArgs;
}

/** A MoE layer's weighted expert outputs: ye [n·K rows of the residual's width], w [n·K], K per token. */
export interface CombineArgs {
  readonly ye: GPUBuffer;
  readonly rw: GPUBuffer;
  readonly K: number;
}

/**
 * Work a decode product does beside its own (WideFusion), each saving a step's dependent dispatch: `norm` multiplies by
 * RMSNorm(x')·g instead of x (x' = x, or x + the combine), `addCombine` adds the combine to y as well (with acc:
 * y += W·x + combine; without: y = W·x + combine, e.g. a residual read from another buffer as a combine of one row).
 */
export interface FusionArgs {
  readonly norm?: { readonly g: GPUBuffer; readonly eps: number; readonly combine?: CombineArgs };
  readonly addCombine?: CombineArgs;
}

function wideFusion(f: FusionArgs | undefined, width: number): { fx: WideFusion | undefined; buffers: GPUBuffer[] } {
  if (f === undefined) return { fx: undefined, buffers: [] };
  const c = f.norm?.combine ?? f.addCombine;
  const fx: WideFusion = {
    ...(f.norm !== undefined ? { norm: { eps: f.norm.eps, combine: f.norm.combine?.K ?? 0 } } : {}),
    ...(f.addCombine !== undefined ? { addCombine: { K: f.addCombine.K, width } } : {}),
  };
  // in the order the kernel binds them (fusionBuffers)
  const byName: Record<string, GPUBuffer | undefined> = { G: f.norm?.g, YE: c?.ye, RW: c?.rw };
  return { fx, buffers: fusionBuffers(fx).map((name) => byName[name]!) };
}

/**
 * Whether a product of n tokens over m (with `up`: the dual gate·up product) runs on the wide kernel with x staged, so
 * that it can take FusionArgs. `gather`: pair-major (one token per pair).
 */
export function fusable(rt: GpuRuntime, m: GpuMatrix, n: number, gather: boolean, up?: GpuMatrix): boolean {
  const shape = up !== undefined ? dualShape(rt, m, up, n, gather, true) : wideShape(rt, m, n, gather, true);
  return shape !== undefined && shape.stagePad > 0 && m.pieces.length === 1;
}

function base(m: GpuMatrix, a: MatmulArgs): MatParams {
  return {
    rows: m.rows,
    nu: m.nu,
    n: a.n,
    xStride: a.xStride,
    yStride: a.yStride,
    xOff: a.xOff ?? 0,
    yOff: a.yOff ?? 0,
    rowBytes: m.rowBytes,
    rowBase: 0,
    acc: a.glu === true ? 2 : a.acc === true ? 1 : 0,
    gx: 1,
    tiles: 1,
    wOff: 0,
    wBatch: m.rowBytes * m.rows,
    xBatch: a.batch?.xBatch ?? 0,
    yBatch: a.batch?.yBatch ?? 0,
    idsOff: 0,
    e0: 0,
    e1: 0,
    xDiv: 1,
  };
}

function rowGrid(rt: GpuRuntime, rows: number): { gx: number; gy: number } {
  const maxG = rt.info.limits.maxComputeWorkgroupsPerDimension;
  const gx = Math.min(rows, maxG);
  return { gx, gy: Math.ceil(rows / gx) };
}

function f32Range(
  buf: GPUBuffer,
  off: number,
  n: number,
  stride: number,
  width: number,
  widthOff = 0,
): { buffer: GPUBuffer; offset: number; size: number }[] {
  // contiguous when stride == width; else one range per token
  if (stride === width || n === 1)
    return [{ buffer: buf, offset: (off + widthOff) * 4, size: ((n - 1) * stride + width) * 4 }];
  return Array.from({ length: n }, (_, t) => ({
    buffer: buf,
    offset: (off + t * stride + widthOff) * 4,
    size: width * 4,
  }));
}

/** Whether the coalesced kernel runs a product over m (x aligned to 4 floats). */
export function coalesced(rt: GpuRuntime, m: GpuMatrix, aligned: boolean): boolean {
  return rt.matvec === "coalesced" && aligned && m.cols % 4 === 0;
}

export function matvecKernel(
  rt: GpuRuntime,
  m: GpuMatrix,
  n: number,
  gather: boolean | "experts" | "experts-list",
  aligned = false,
  rowsTotal = m.rows,
  fx?: WideFusion,
  pre = false,
): { code: string; tn: number; rowsPerGroup: number; xq8?: boolean } {
  const sg = rt.info.subgroupSize;
  const sgOk = sg !== undefined && sg >= 4 && sg <= 64;
  let tn = 1;
  const tnMax =
    rt.matvec === "subgroup" ||
    (rt.matvec === "coalesced" && sgOk) ||
    rt.info.limits.maxComputeWorkgroupStorageSize >= MV_WG * 16 * 4 + 4096
      ? 16
      : 8;
  while (tn < Math.min(n, tnMax)) tn *= 2;
  const expertMajor = gather === "experts" || gather === "experts-list";
  const wide = wideShape(rt, m, n, gather, aligned);
  if (wide !== undefined)
    return {
      code: matvecWideWGSL(
        m.type,
        gather === true ? "gather" : gather === "experts-list" ? "experts-list" : "plain",
        wide,
        false,
        fx,
      ),
      tn: wide.n,
      rowsPerGroup: wideRowsPerGroup(wide),
    };
  if (fx !== undefined) throw new LatentError(`${m.name}: fused work needs the wide kernel (check fusable())`);
  const rowMode = gather === false ? "plain" : gather === "experts-list" ? gather : undefined;
  const tiled = rowMode !== undefined ? tiledKernel(rt, m, n, rowMode, aligned, rowsTotal, false, pre) : undefined;
  if (tiled !== undefined) return { code: tiled.code, tn: tiled.tokens, rowsPerGroup: tiled.rows, xq8: tiled.xq8 };
  if (coalesced(rt, m, aligned)) {
    const minT = sgOk ? sg : 4;
    const shape = coalescedShape(rt, m, n, minT, rowsTotal, expertMajor);
    const tpr = shape.tpr;
    if (shape.tn !== undefined) tn = shape.tn;
    const mode = gather === "experts" || gather === "experts-list" ? gather : gather ? "gather" : "plain";
    return {
      code: matvecCoalescedWGSL(m.type, m.unit, mode, { tpr, tn, sg: sgOk ? sg : undefined }),
      tn,
      rowsPerGroup: MV_WG / tpr,
    };
  }
  if (gather === "experts-list") throw new LatentError(`${m.name}: expert lists need the coalesced kernel`);
  const useSg = rt.matvec === "subgroup" || (rt.matvec === "coalesced" && sgOk);
  let tpr: number;
  if (useSg) tpr = sg!;
  else {
    tpr = 4;
    while (tpr < 32 && tpr < m.nu) tpr *= 2;
  }
  const shape: MatvecShape = { tpr, tn, subgroup: useSg };
  const code =
    gather === "experts" ? matvecExpertsWGSL(m.type, m.unit, shape) : matvec2WGSL(m.type, m.unit, gather, shape);
  return { code, tn, rowsPerGroup: MV_WG / tpr };
}

const al4 = (...v: (number | undefined)[]): boolean => v.every((x) => (x ?? 0) % 4 === 0);

/** y = W·x for n tokens (and optionally every item of a stacked tensor). */
export function matmul(rt: GpuRuntime, m: GpuMatrix, x: GPUBuffer, y: GPUBuffer, a: MatmulArgs): void {
  const count = a.batch?.count ?? 1;
  if (count > m.items) throw new LatentError(`${m.name}: batch of ${count} over ${m.items} items`);
  if (a.fuse !== undefined && (!fusable(rt, m, a.n, false) || a.batch !== undefined))
    throw new LatentError(`${m.name}: fused work needs one wide product (check fusable()) and no batch`);
  const { fx, buffers: fxBufs } = wideFusion(a.fuse, m.rows);
  const kernel = (pre: boolean): ReturnType<typeof matvecKernel> =>
    matvecKernel(rt, m, a.n, false, al4(a.xOff, a.n > 1 ? a.xStride : 0, a.batch?.xBatch), m.rows * count, fx, pre);
  // x quantized once by its own pass for the integer tiled kernels (one batch item: its rows are the tokens')
  const chosen = kernel(a.batch === undefined);
  const input = tiledInput(
    rt,
    { code: chosen.code, rows: chosen.rowsPerGroup, tokens: chosen.tn, xq8: chosen.xq8 === true },
    x,
    { rows: a.n, cols: m.cols, off: a.xOff ?? 0, stride: a.xStride },
    () => {
      const k = kernel(false);
      return { code: k.code, rows: k.rowsPerGroup, tokens: k.tn, xq8: false };
    },
  );
  const { code, rows: rowsPerGroup, tokens: tn } = input.k;
  const tiles = Math.ceil(a.n / tn);
  for (const piece of m.pieces) {
    if (piece.firstItem >= count) continue;
    const items = Math.min(piece.items, count - piece.firstItem);
    const p = base(m, a);
    const { gx, gy } = rowGrid(rt, Math.ceil(piece.rows / rowsPerGroup));
    p.rows = piece.rows;
    p.rowBase = piece.firstRow;
    p.gx = gx;
    p.tiles = tiles;
    p.xOff += piece.firstItem * p.xBatch;
    p.yOff += piece.firstItem * p.yBatch;
    const outs = Array.from({ length: items }, (_, b) =>
      f32Range(y, p.yOff + b * p.yBatch, a.n, a.yStride, piece.rows, piece.firstRow),
    ).flat();
    rt.dispatch(
      `matmul ${m.name}`,
      code,
      [piece.buffer, input.x, y, ...fxBufs],
      packMatParams(p),
      [gx, gy * tiles, items],
      a.acc === true || a.glu === true ? [] : outs,
    );
  }
}

/** y = Wᵀ·x: y[t][c] = Σ_r W[r][c]·x[t][r] for n tokens (and optionally every item). */
export function matmulT(rt: GpuRuntime, m: GpuMatrix, x: GPUBuffer, y: GPUBuffer, a: MatmulArgs): void {
  if (a.glu === true) throw new LatentError("matmulT has no SwiGLU form");
  const count = a.batch?.count ?? 1;
  if (count > m.items) throw new LatentError(`${m.name}: batch of ${count} over ${m.items} items`);
  const code = matvecTWGSL(m.type, m.unit);
  m.pieces.forEach((piece, i) => {
    if (piece.firstItem >= count) return;
    const items = Math.min(piece.items, count - piece.firstItem);
    const p = base(m, a);
    p.rows = piece.rows;
    p.rowBase = piece.firstRow;
    // row pieces of one matrix add into the first piece's result
    const acc = a.acc === true || (m.items === 1 && i > 0);
    p.acc = acc ? 1 : 0;
    p.xOff += piece.firstItem * p.xBatch;
    p.yOff += piece.firstItem * p.yBatch;
    const outs = Array.from({ length: items }, (_, b) =>
      f32Range(y, p.yOff + b * p.yBatch, a.n, a.yStride, m.cols),
    ).flat();
    rt.dispatch(
      `matmulT ${m.name}`,
      code,
      [piece.buffer, x, y],
      packMatParams(p),
      [Math.ceil(m.nu / 64), a.n, items],
      acc ? [] : outs,
    );
  });
}

export interface GatherArgs {
  /** (token, slot) pairs: pair b uses expert ids[idsOff + b] */
  readonly pairs: number;
  readonly idsOff?: number;
  /** x of pair b at xOff + floor(b / xDiv)·xBatch (xDiv = slots per token when every slot reads its token's x) */
  readonly xDiv: number;
  readonly xBatch: number;
  readonly xOff?: number;
  /** y of pair b at yOff + b·yBatch */
  readonly yBatch: number;
  readonly yOff?: number;
  readonly acc?: boolean;
  /** y = silu(y)·(W·x) per pair (SwiGLU fused into the up product; y holds the gate products) */
  readonly glu?: boolean;
  /**
   * expert lists of these pairs (expertLists()): the expert-major mode reads them instead of scanning the ids in every
   * workgroup (coalesced kernel only; ignored otherwise)
   */
  readonly lists?: GPUBuffer;
  /**
   * "pairs": one product per (token, slot) pair; "experts": one workgroup per (row group, expert) over the pairs that
   * picked it, tn at a time (each selected expert read once per tn tokens). Default: experts when pairs ≥ the number
   * of experts (batched decode, prefill), else pairs.
   */
  readonly mode?: "pairs" | "experts";
  /** a norm of x beside a pair-major wide product (FusionArgs.norm without combine; check fusable()) */
  readonly fuse?: FusionArgs;
}

/** How a gathered product over m runs: expert-major or per pair, and (expert-major on the coalesced kernel) from expert lists. */
function gatherMode(
  rt: GpuRuntime,
  m: GpuMatrix,
  a: GatherArgs,
): { experts: boolean; aligned: boolean; listed: boolean } {
  const experts = (a.mode ?? (a.pairs >= expertsFrom(rt, m) * m.items ? "experts" : "pairs")) === "experts";
  const aligned = al4(a.xOff, a.xBatch);
  return { experts, aligned, listed: experts && a.lists !== undefined && coalesced(rt, m, aligned) };
}

/**
 * Dispatch a gathered product's kernel over every piece of m (whole items per piece): `extra` binds after the ids (the
 * dual kernel's up matrix, same pieces). The output is checked (--check-writes) when one piece overwrites it.
 */
function dispatchGather(
  rt: GpuRuntime,
  label: string,
  code: string,
  rowsPerGroup: number,
  m: GpuMatrix,
  x: GPUBuffer,
  y: GPUBuffer,
  ids: GPUBuffer,
  a: GatherArgs,
  mode: { experts: boolean; listed: boolean },
  extra?: GpuMatrix,
): void {
  const outs = [{ buffer: y, offset: (a.yOff ?? 0) * 4, size: ((a.pairs - 1) * a.yBatch + m.rows) * 4 }];
  const fxBufs = wideFusion(a.fuse, m.rows).buffers;
  m.pieces.forEach((piece, i) => {
    if (piece.rows !== m.rows) throw new LatentError(`${m.name}: gathered products need whole items per piece`);
    const p = base(m, {
      n: mode.experts ? a.pairs : 1,
      xStride: 0,
      yStride: 0,
      xOff: a.xOff,
      yOff: a.yOff,
      acc: a.acc,
      glu: a.glu,
    });
    const { gx, gy } = rowGrid(rt, Math.ceil(m.rows / rowsPerGroup));
    p.gx = gx;
    p.xBatch = a.xBatch;
    p.yBatch = a.yBatch;
    p.xDiv = a.xDiv;
    p.idsOff = mode.listed ? 2 * m.items : (a.idsOff ?? 0);
    p.e0 = piece.firstItem;
    p.e1 = piece.firstItem + piece.items;
    const bufs = [
      piece.buffer,
      x,
      y,
      mode.listed ? a.lists! : ids,
      ...(extra !== undefined ? [extra.pieces[i].buffer] : []),
      ...fxBufs,
    ];
    rt.dispatch(
      `${label} ${m.name}`,
      code,
      bufs,
      packMatParams(p),
      [gx, gy, mode.experts ? piece.items : a.pairs],
      a.acc !== true && a.glu !== true && m.pieces.length === 1 ? outs : [],
    );
  });
}

/** Grouped expert products reading only the selected experts: y_b = W_{ids[b]}·x_b for every pair b. */
export function matmulGather(
  rt: GpuRuntime,
  m: GpuMatrix,
  x: GPUBuffer,
  y: GPUBuffer,
  ids: GPUBuffer,
  a: GatherArgs,
): void {
  if (a.fuse !== undefined) throw new LatentError(`${m.name}: only the dual gathered product fuses a norm`);
  const mode = gatherMode(rt, m, a);
  const kernel = (pre: boolean): TiledKernel => {
    const k = matvecKernel(
      rt,
      m,
      mode.experts ? a.pairs : 1,
      mode.listed ? "experts-list" : mode.experts ? "experts" : true,
      mode.aligned,
      m.rows * a.pairs,
      undefined,
      pre,
    );
    return { code: k.code, rows: k.rowsPerGroup, tokens: k.tn, xq8: k.xq8 === true };
  };
  const input = tiledInput(rt, kernel(mode.listed), x, gatherRows(m, a), () => kernel(false));
  dispatchGather(rt, "matmulGather", input.k.code, input.k.rows, m, input.x, y, ids, a, mode);
}

/** The rows of a gathered product's x: pair b reads row floor(b / xDiv). */
function gatherRows(m: GpuMatrix, a: GatherArgs): XRows {
  return { rows: Math.ceil(a.pairs / a.xDiv), cols: m.cols, off: a.xOff ?? 0, stride: a.xBatch };
}

/** Words of an expert-list buffer for `pairs` pairs over E experts. */
export function expertListWords(pairs: number, E: number): number {
  return 2 * E + pairs;
}

/** Group the pairs' expert ids (ids[idsOff + b], b < pairs) by expert into `lists` (see EXPERT_LISTS_WGSL), for matmulGather's lists. */
export function expertLists(
  rt: GpuRuntime,
  ids: GPUBuffer,
  lists: GPUBuffer,
  a: { pairs: number; E: number; idsOff?: number },
): void {
  if (a.E > 256) throw new LatentError(`expert lists take at most 256 experts, got ${a.E}`);
  rt.dispatch(
    "expertLists",
    EXPERT_LISTS_WGSL,
    [ids, lists],
    new Uint32Array([a.pairs, a.E, a.idsOff ?? 0, 0]),
    [1],
    [{ buffer: lists, offset: 0, size: expertListWords(a.pairs, a.E) * 4 }],
  );
}

/** y[t] = row ids[t] of W, dequantized (embedding lookup). */
export function getRows(
  rt: GpuRuntime,
  m: GpuMatrix,
  ids: GPUBuffer,
  y: GPUBuffer,
  n: number,
  idsOff = 0,
  yOff = 0,
): void {
  const code = getRowsWGSL(m.type, m.unit);
  for (const piece of m.pieces) {
    const p = base(m, { n, xStride: 0, yStride: m.cols, yOff });
    p.rows = piece.rows;
    p.rowBase = piece.firstRow;
    p.idsOff = idsOff;
    rt.dispatch(
      `getRows ${m.name}`,
      code,
      [piece.buffer, ids, y],
      packMatParams(p),
      [Math.ceil(m.nu / 64), n, 1],
      m.pieces.length === 1 ? [{ buffer: y, offset: yOff * 4, size: n * m.cols * 4 }] : [],
    );
  }
}

/** Whether gate and up have the same type, shape and pieces (so that one dual kernel can read both). */
function alike(gate: GpuMatrix, up: GpuMatrix): boolean {
  if (
    gate.type !== up.type ||
    gate.cols !== up.cols ||
    gate.rows !== up.rows ||
    gate.items !== up.items ||
    gate.pieces.length !== up.pieces.length
  )
    return false;
  return gate.pieces.every(
    (p, i) =>
      p.firstRow === up.pieces[i].firstRow &&
      p.rows === up.pieces[i].rows &&
      p.firstItem === up.pieces[i].firstItem &&
      p.items === up.pieces[i].items,
  );
}

/** Whether gate and up can run as one dual wide product (alike, the wide kernel applies). */
function dualShape(
  rt: GpuRuntime,
  gate: GpuMatrix,
  up: GpuMatrix,
  n: number,
  gather: boolean | "experts-list",
  aligned: boolean,
): WideShape | undefined {
  const wide = alike(gate, up) ? wideShape(rt, gate, n, gather, aligned) : undefined;
  // (a dual product runs one row a run: WideShape.pack)
  return wide !== undefined ? { ...wide, pack: 1 } : undefined;
}

/** The dual tiled kernel of gate and up, where they are alike and a tiled kernel applies. */
function dualTiled(
  rt: GpuRuntime,
  gate: GpuMatrix,
  up: GpuMatrix,
  n: number,
  mode: "plain" | "experts-list",
  aligned: boolean,
  pre = false,
): TiledKernel | undefined {
  return alike(gate, up) ? tiledKernel(rt, gate, n, mode, aligned, gate.rows, true, pre) : undefined;
}

/**
 * y = silu(gate·x)·(up·x) for n tokens (the SwiGLU input of the down product): one dual wide dispatch reading x once
 * for both matrices where the wide kernel applies (1–4 tokens), else the gate product then the up product with glu.
 */
export function matmulSwiGLU(
  rt: GpuRuntime,
  gate: GpuMatrix,
  up: GpuMatrix,
  x: GPUBuffer,
  y: GPUBuffer,
  a: Omit<MatmulArgs, "acc" | "glu" | "batch">,
): void {
  for (const step of matmulSwiGLUSteps(rt, gate, up, x, y, a)) step();
}

/**
 * matmulSwiGLU as its dependent steps (the dual dispatch, or the gate product then the up product that reads it): the
 * first one alone may share a dispatch (GpuRuntime.together) with work independent of it.
 */
export function matmulSwiGLUSteps(
  rt: GpuRuntime,
  gate: GpuMatrix,
  up: GpuMatrix,
  x: GPUBuffer,
  y: GPUBuffer,
  a: Omit<MatmulArgs, "acc" | "glu" | "batch">,
): (() => void)[] {
  const aligned = al4(a.xOff, a.n > 1 ? a.xStride : 0);
  if (
    a.fuse !== undefined &&
    (!fusable(rt, gate, a.n, false, up) || a.fuse.norm?.combine !== undefined || a.fuse.addCombine !== undefined)
  )
    throw new LatentError(`${gate.name}: a dual product fuses only a norm, on the wide kernel (check fusable())`);
  const { fx, buffers: fxBufs } = wideFusion(a.fuse, gate.rows);
  const wide = dualShape(rt, gate, up, a.n, false, aligned);
  const tiled = wide === undefined ? dualTiled(rt, gate, up, a.n, "plain", aligned, true) : undefined;
  if (wide === undefined && tiled === undefined)
    return [() => matmul(rt, gate, x, y, a), () => matmul(rt, up, x, y, { ...a, glu: true })];
  return [
    () => {
      // (decided here: the step may run inside together(), where x cannot be quantized by a pass of its own)
      const input =
        tiled !== undefined
          ? tiledInput(
              rt,
              tiled,
              x,
              { rows: a.n, cols: gate.cols, off: a.xOff ?? 0, stride: a.xStride },
              () => dualTiled(rt, gate, up, a.n, "plain", aligned)!,
            )
          : undefined;
      const code = wide !== undefined ? matvecWideWGSL(gate.type, "plain", wide, true, fx) : input!.k.code;
      const rowsPerGroup = wide !== undefined ? wideRowsPerGroup(wide) : input!.k.rows;
      const tiles = input !== undefined ? Math.ceil(a.n / input.k.tokens) : 1;
      const xb = input?.x ?? x;
      gate.pieces.forEach((piece, i) => {
        const p = base(gate, a);
        const { gx, gy } = rowGrid(rt, Math.ceil(piece.rows / rowsPerGroup));
        p.rows = piece.rows;
        p.rowBase = piece.firstRow;
        p.gx = gx;
        p.tiles = tiles;
        const outs = f32Range(y, p.yOff, a.n, a.yStride, piece.rows, piece.firstRow);
        rt.dispatch(
          `matmulSwiGLU ${gate.name}`,
          code,
          [piece.buffer, xb, y, up.pieces[i].buffer, ...fxBufs],
          packMatParams(p),
          [gx, gy * tiles, 1],
          outs,
        );
      });
    },
  ];
}

/**
 * Gathered y_b = silu(W_gate,e·x_b)·(W_up,e·x_b) for every pair b (e = ids[b]): one dual wide dispatch in pair-major
 * mode, else the gathered gate product then the up product with glu.
 */
export function matmulGatherSwiGLU(
  rt: GpuRuntime,
  gate: GpuMatrix,
  up: GpuMatrix,
  x: GPUBuffer,
  y: GPUBuffer,
  ids: GPUBuffer,
  a: Omit<GatherArgs, "acc" | "glu">,
): void {
  const mode = gatherMode(rt, gate, a);
  if (
    a.fuse !== undefined &&
    (mode.experts ||
      !fusable(rt, gate, 1, true, up) ||
      a.fuse.norm?.combine !== undefined ||
      a.fuse.addCombine !== undefined)
  )
    throw new LatentError(
      `${gate.name}: a gathered dual product fuses only a norm, pair-major on the wide kernel (check fusable())`,
    );
  const tiled = mode.listed ? dualTiled(rt, gate, up, a.pairs, "experts-list", mode.aligned, true) : undefined;
  if (tiled !== undefined) {
    const input = tiledInput(
      rt,
      tiled,
      x,
      gatherRows(gate, a),
      () => dualTiled(rt, gate, up, a.pairs, "experts-list", mode.aligned)!,
    );
    dispatchGather(rt, "matmulGatherSwiGLU", input.k.code, input.k.rows, gate, input.x, y, ids, a, mode, up);
    return;
  }
  const wide =
    mode.experts && !mode.listed
      ? undefined
      : dualShape(rt, gate, up, mode.listed ? a.pairs : 1, mode.listed ? "experts-list" : true, mode.aligned);
  if (wide === undefined) {
    matmulGather(rt, gate, x, y, ids, a);
    matmulGather(rt, up, x, y, ids, { ...a, glu: true });
    return;
  }
  const code = matvecWideWGSL(
    gate.type,
    mode.listed ? "experts-list" : "gather",
    wide,
    true,
    wideFusion(a.fuse, gate.rows).fx,
  );
  dispatchGather(rt, "matmulGatherSwiGLU", code, wideRowsPerGroup(wide), gate, x, y, ids, a, mode, up);
}
