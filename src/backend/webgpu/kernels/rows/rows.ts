/// <reference types="@webgpu/types" />
/** Launchers of the row kernels (norms, rope, SwiGLU, softmax, copies) with their output ranges declared for --check-writes. */
import type { Rope } from "../../../../model/rope.js";
import { f32bits, type GpuRuntime, type OutRange } from "../../core/runtime.js";
import {
  RMS_NORM4_WGSL,
  ADD_NORM_WGSL as addNormSource,
  COPY_WGSL as copySource,
  NORM_WGSL as normSource,
  withSubgroupTotal as subgroupTotalSource,
  ROPE_TO_WGSL,
  ROPE_WGSL,
  SOFTMAX_WGSL as softmaxSource,
  SCATTER_WGSL,
  COPY_U32_WGSL,
  SWIGLU_WGSL,
} from "./rows.wgsl.js";
import { memoWGSL } from "../../core/wgsl-memo.js";
import { grid1, rows } from "../launch.js";

const ADD_NORM_WGSL = memoWGSL(addNormSource);
const COPY_WGSL = memoWGSL(copySource);
const NORM_WGSL = memoWGSL(normSource);
const SOFTMAX_WGSL = memoWGSL(softmaxSource);

/** withSubgroupTotal by its source (the same string object each time, from the memoized generators) and size */
const subgroupTotals = new Map<string, Map<number | undefined, string>>();
export function withSubgroupTotal(code: string, sg: number | undefined): string {
  let bySize = subgroupTotals.get(code);
  if (bySize === undefined) subgroupTotals.set(code, (bySize = new Map()));
  let out = bySize.get(sg);
  if (out === undefined) bySize.set(sg, (out = subgroupTotalSource(code, sg)));
  return out;
}

export interface RowArgs {
  readonly n: number;
  readonly dim: number;
  readonly xOff?: number;
  readonly xStride?: number;
  readonly yOff?: number;
  readonly yStride?: number;
}

/** y = x / rms(x) · g per row (y undefined: in place). */
export function rmsNorm(
  rt: GpuRuntime,
  x: GPUBuffer,
  g: GPUBuffer,
  y: GPUBuffer | undefined,
  a: RowArgs,
  eps: number,
): void {
  norm(rt, x, g, undefined, y, a, eps);
}

/** LayerNorm with weight and bias per row (y undefined: in place). */
export function layerNorm(
  rt: GpuRuntime,
  x: GPUBuffer,
  g: GPUBuffer,
  b: GPUBuffer,
  y: GPUBuffer | undefined,
  a: RowArgs,
  eps: number,
): void {
  norm(rt, x, g, b, y, a, eps);
}

function norm(
  rt: GpuRuntime,
  x: GPUBuffer,
  g: GPUBuffer,
  b: GPUBuffer | undefined,
  y: GPUBuffer | undefined,
  a: RowArgs,
  eps: number,
): void {
  const xOff = a.xOff ?? 0;
  const xStride = a.xStride ?? a.dim;
  const yOff = y === undefined ? xOff : (a.yOff ?? 0);
  const yStride = y === undefined ? xStride : (a.yStride ?? a.dim);
  const params = new Uint32Array([a.n, a.dim, xOff, xStride, yOff, yStride, f32bits(eps), 0]);
  const bufs = [x, g, ...(b ? [b] : []), ...(y ? [y] : [])];
  const { gx, gy } = { gx: Math.min(a.n, 65535), gy: Math.ceil(a.n / 65535) };
  // out-of-place RMSNorm over aligned rows reads and writes vec4s
  const vec4 = b === undefined && y !== undefined && [a.dim, xOff, xStride, yOff, yStride].every((v) => v % 4 === 0);
  rt.dispatch(
    b ? "layerNorm" : "rmsNorm",
    withSubgroupTotal(vec4 ? RMS_NORM4_WGSL : NORM_WGSL(y === undefined, b !== undefined), rt.info.subgroupSize),
    bufs,
    params,
    [gx, gy],
    y === undefined ? [] : rows(y, yOff, a.n, yStride, a.dim),
  );
}

/** cos/sin rows of a Rope for positions [0, capacity), taken from the reference Rope itself (× mscale included). */
export class RopeTable {
  buffer: GPUBuffer | undefined;
  private capacity = 0;
  constructor(
    private readonly rt: GpuRuntime,
    readonly rope: Rope,
  ) {}

  /** The table covering positions < maxPos. */
  ensure(maxPos: number): GPUBuffer {
    if (this.buffer !== undefined && maxPos <= this.capacity) return this.buffer;
    const cap = Math.max(64, 2 ** Math.ceil(Math.log2(Math.max(1, maxPos))));
    const half = this.rope.dims / 2;
    const t = new Float32Array(cap * half * 2);
    const x = new Float64Array(this.rope.dims);
    for (let pos = 0; pos < cap; pos++) {
      for (let i = 0; i < half; i++) {
        x[2 * i] = 1;
        x[2 * i + 1] = 0;
      }
      this.rope.apply(x, 0, pos);
      for (let i = 0; i < 2 * half; i++) t[pos * 2 * half + i] = x[i];
    }
    this.buffer?.destroy();
    this.buffer = this.rt.upload(t, "rope table");
    this.capacity = cap;
    return this.buffer;
  }
}

export interface RopeArgs {
  readonly n: number;
  readonly heads: number;
  readonly xOff: number;
  readonly tokStride: number;
  readonly headStride: number;
  readonly posOff?: number;
}

/**
 * Interleaved rope of x[xOff + t·tokStride + h·headStride ..] written to y[yOff + t·yTok + h·yHead ..] (x unchanged)
 * for n tokens at POS[t].
 */
export function ropeTo(
  rt: GpuRuntime,
  table: GPUBuffer,
  dims: number,
  x: GPUBuffer,
  pos: GPUBuffer,
  y: GPUBuffer,
  a: RopeArgs & { readonly yOff: number; readonly yTok: number; readonly yHead: number },
): void {
  const half = dims / 2;
  const params = new Uint32Array([
    a.n,
    a.heads,
    half,
    a.xOff,
    a.tokStride,
    a.headStride,
    a.posOff ?? 0,
    a.yOff,
    a.yTok,
    a.yHead,
    0,
    0,
  ]);
  const outs: OutRange[] = [];
  for (let t = 0; t < a.n; t++) outs.push(...rows(y, a.yOff + t * a.yTok, a.heads, a.yHead, dims));
  rt.dispatch("ropeTo", ROPE_TO_WGSL, [x, pos, table, y], params, [Math.ceil(half / 64), a.heads, a.n], outs);
}

/** h[t] += Σ_k wts[t·K+k]·ye[t·K+k] (the MoE output into the residual), then y[t] = RMSNorm(h[t])·g: one kernel. */
export function addNorm(
  rt: GpuRuntime,
  ye: GPUBuffer,
  wts: GPUBuffer,
  h: GPUBuffer,
  g: GPUBuffer,
  y: GPUBuffer,
  a: { n: number; K: number; dim: number },
  eps: number,
): void {
  const params = new Uint32Array([a.n, a.dim, a.K, f32bits(eps)]);
  rt.dispatch(
    "addNorm",
    withSubgroupTotal(ADD_NORM_WGSL(a.dim % 4 === 0 && a.K >= 1 && a.K <= 16 ? a.K : undefined), rt.info.subgroupSize),
    [ye, wts, h, g, y],
    params,
    [Math.min(a.n, 65535), Math.ceil(a.n / 65535)],
    rows(y, 0, a.n, a.dim, a.dim),
  );
}

/** Interleaved rope in place on x[xOff + t·tokStride + h·headStride ..] for n tokens at POS[t]. */
export function rope(rt: GpuRuntime, table: GPUBuffer, dims: number, x: GPUBuffer, pos: GPUBuffer, a: RopeArgs): void {
  const half = dims / 2;
  const params = new Uint32Array([a.n, a.heads, half, a.xOff, a.tokStride, a.headStride, a.posOff ?? 0, 0]);
  rt.dispatch("rope", ROPE_WGSL, [x, pos, table], params, [Math.ceil(half / 64), a.heads, a.n]);
}

export interface PairArgs {
  readonly n: number;
  readonly width: number;
  readonly gOff?: number;
  readonly gStride?: number;
  readonly uOff?: number;
  readonly uStride?: number;
}

/** g = silu(g)·u */
export function swiglu(rt: GpuRuntime, g: GPUBuffer, u: GPUBuffer, a: PairArgs): void {
  const { gx, gy } = grid1(a.n * a.width, 256);
  const gOff = a.gOff ?? 0;
  const gStride = a.gStride ?? a.width;
  const params = new Uint32Array([a.n, a.width, gOff, gStride, a.uOff ?? 0, a.uStride ?? a.width, gx, 0]);
  // in place: a NaN fill would destroy the input, so --check-writes covers it through its producer
  rt.dispatch("swiglu", SWIGLU_WGSL, [g, u], params, [gx, gy]);
}

export interface CopyArgs {
  readonly n: number;
  readonly width: number;
  readonly xOff?: number;
  readonly xStride?: number;
  readonly yOff?: number;
  readonly yStride?: number;
}

/** y (+)= x row by row */
export function copyRows(rt: GpuRuntime, x: GPUBuffer, y: GPUBuffer, a: CopyArgs, add = false): void {
  const { gx, gy } = grid1(a.n * a.width, 256);
  const yOff = a.yOff ?? 0;
  const yStride = a.yStride ?? a.width;
  const params = new Uint32Array([a.n, a.width, a.xOff ?? 0, a.xStride ?? a.width, yOff, yStride, gx, 0]);
  rt.dispatch(
    add ? "add" : "copy",
    COPY_WGSL(add),
    [x, y],
    params,
    [gx, gy],
    add ? [] : rows(y, yOff, a.n, yStride, a.width),
  );
}

/** Row-wise softmax (or log-softmax) in place. */
export function softmax(
  rt: GpuRuntime,
  x: GPUBuffer,
  n: number,
  width: number,
  log = false,
  off = 0,
  stride = width,
): void {
  rt.dispatch(log ? "logSoftmax" : "softmax", SOFTMAX_WGSL(log), [x], new Uint32Array([n, width, off, stride]), [
    Math.min(n, 65535),
    Math.ceil(n / 65535),
  ]);
}

/** y[idx[t]·yStride + yOff ..] = x[xOff + t·xStride ..] (width values per row); no write check (scattered rows). */
export function scatterRows(rt: GpuRuntime, x: GPUBuffer, idx: GPUBuffer, y: GPUBuffer, a: CopyArgs): void {
  const { gx, gy } = grid1(a.n * a.width, 256);
  const params = new Uint32Array([
    a.n,
    a.width,
    a.xOff ?? 0,
    a.xStride ?? a.width,
    a.yOff ?? 0,
    a.yStride ?? a.width,
    gx,
    0,
  ]);
  rt.dispatch("scatter", SCATTER_WGSL, [x, idx, y], params, [gx, gy]);
}

/** y[0..n) = x[0..n) as u32 words (restores a META copy before each DSA layer: the selection rewrites META). */
export function copyU32(rt: GpuRuntime, x: GPUBuffer, y: GPUBuffer, n: number): void {
  rt.dispatch(
    "copyU32",
    COPY_U32_WGSL,
    [x, y],
    new Uint32Array([n, 0, 0, 0]),
    [Math.ceil(n / 64)],
    [{ buffer: y, offset: 0, size: n * 4 }],
  );
}
