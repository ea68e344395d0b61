/// <reference types="@webgpu/types" />
/** Launchers of the non-matrix kernels (wgsl-ops.ts) with their output ranges declared for --check-writes. */
import type { Rope } from "../../model/rope.js";
import { LatentError } from "../../util/errors.js";
import { f32bits, type GpuRuntime, type OutRange } from "./core/runtime.js";
import { RMS_NORM4_WGSL, ADD_NORM_WGSL as addNormSource, COPY_WGSL as copySource, NORM_WGSL as normSource, withSubgroupTotal as subgroupTotalSource, ROPE_TO_WGSL, ROPE_WGSL, SOFTMAX_WGSL as softmaxSource, SCATTER_WGSL, COPY_U32_WGSL, SWIGLU_WGSL } from "./kernels/rows/rows.wgsl.js";
import { argmaxWGSL as argmaxSource, ARGMAX_SLICE } from "./kernels/sample/argmax.wgsl.js";
import { ATTN_CHUNK, ATTN_COMBINE_WGSL, ATTN_PARAMS, ATTN_QMAX, ATTN_WGSL as attnSource, attnSubgroupWGSL as attnSubgroupSource, KV_CACHE_WGSL as kvCacheSource } from "./kernels/attention/attention.wgsl.js";
import { COMBINE_WGSL, ROUTE_PARAMS, ROUTE_WGSL } from "./kernels/moe/moe.wgsl.js";
import { DSA_SCORES_WGSL, TOPK_WGSL } from "./kernels/dsa/dsa.wgsl.js";
import { routeGrid, routeShape, routeWGSL as routeSource, type RouteShape } from "./kernels/moe/route.wgsl.js";
import { ATTN_WIDE_COMBINE_WGSL, ATTN_WIDE_PARAMS, attnWideBytes, attnWidePlan, attnWideScratch, attnWideWGSL as attnWideSource } from "./kernels/attention/wide.wgsl.js";
import { memoWGSL } from "./core/wgsl-memo.js";
import { NUCLEUS_ROUNDS, NUCLEUS_ROW_WORDS, nucleusWGSL as nucleusSource } from "./kernels/sample/nucleus.wgsl.js";
import { DRAW_WORDS, SAMPLE_TOPK_CAP, SAMPLE_TOPK_MAX, sampleTopKWGSL as sampleTopKSource, sampleWGSL as sampleSource } from "./kernels/sample/sample.wgsl.js";
import type { PickDraw } from "../../engine/scheduler.js";

export { DRAW_WORDS };

const ADD_NORM_WGSL = memoWGSL(addNormSource);
const argmaxWGSL = memoWGSL(argmaxSource);
const ATTN_WGSL = memoWGSL(attnSource);
const attnSubgroupWGSL = memoWGSL(attnSubgroupSource);
const COPY_WGSL = memoWGSL(copySource);
const NORM_WGSL = memoWGSL(normSource);
const KV_CACHE_WGSL = memoWGSL(kvCacheSource);
const SOFTMAX_WGSL = memoWGSL(softmaxSource);
const routeWGSL = memoWGSL(routeSource);
const attnWideWGSL = memoWGSL(attnWideSource);
const sampleWGSL = memoWGSL(sampleSource);
const sampleTopKWGSL = memoWGSL(sampleTopKSource);
const nucleusWGSL = memoWGSL(nucleusSource);
/** withSubgroupTotal by its source (the same string object each time, from the memoized generators) and size */
const subgroupTotals = new Map<string, Map<number | undefined, string>>();
function withSubgroupTotal(code: string, sg: number | undefined): string {
  let bySize = subgroupTotals.get(code);
  if (bySize === undefined) subgroupTotals.set(code, (bySize = new Map()));
  let out = bySize.get(sg);
  if (out === undefined) bySize.set(sg, (out = subgroupTotalSource(code, sg)));
  return out;
}

/** The byte ranges of n rows of `width` floats at off + t·stride. */
export function rows(buffer: GPUBuffer, off: number, n: number, stride: number, width: number): OutRange[] {
  if (n === 0 || width === 0) return [];
  if (stride === width || n === 1) return [{ buffer, offset: off * 4, size: ((n - 1) * stride + width) * 4 }];
  return Array.from({ length: n }, (_, t) => ({ buffer, offset: (off + t * stride) * 4, size: width * 4 }));
}

function grid1(n: number, wg: number): { gx: number; gy: number } {
  const groups = Math.max(1, Math.ceil(n / wg));
  const gx = Math.min(groups, 65535);
  return { gx, gy: Math.ceil(groups / gx) };
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
export function rmsNorm(rt: GpuRuntime, x: GPUBuffer, g: GPUBuffer, y: GPUBuffer | undefined, a: RowArgs, eps: number): void {
  norm(rt, x, g, undefined, y, a, eps);
}

/** LayerNorm with weight and bias per row (y undefined: in place). */
export function layerNorm(rt: GpuRuntime, x: GPUBuffer, g: GPUBuffer, b: GPUBuffer, y: GPUBuffer | undefined, a: RowArgs, eps: number): void {
  norm(rt, x, g, b, y, a, eps);
}

function norm(rt: GpuRuntime, x: GPUBuffer, g: GPUBuffer, b: GPUBuffer | undefined, y: GPUBuffer | undefined, a: RowArgs, eps: number): void {
  const xOff = a.xOff ?? 0;
  const xStride = a.xStride ?? a.dim;
  const yOff = y === undefined ? xOff : a.yOff ?? 0;
  const yStride = y === undefined ? xStride : a.yStride ?? a.dim;
  const params = new Uint32Array([a.n, a.dim, xOff, xStride, yOff, yStride, f32bits(eps), 0]);
  const bufs = [x, g, ...(b ? [b] : []), ...(y ? [y] : [])];
  const { gx, gy } = { gx: Math.min(a.n, 65535), gy: Math.ceil(a.n / 65535) };
  // out-of-place RMSNorm over aligned rows reads and writes vec4s
  const vec4 = b === undefined && y !== undefined && [a.dim, xOff, xStride, yOff, yStride].every((v) => v % 4 === 0);
  rt.dispatch(b ? "layerNorm" : "rmsNorm", withSubgroupTotal(vec4 ? RMS_NORM4_WGSL : NORM_WGSL(y === undefined, b !== undefined), rt.info.subgroupSize), bufs, params, [gx, gy], y === undefined ? [] : rows(y, yOff, a.n, yStride, a.dim));
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
      for (let i = 0; i < 2 * half; i++) t[pos * 2 * half + i] = x[i]!;
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
export function ropeTo(rt: GpuRuntime, table: GPUBuffer, dims: number, x: GPUBuffer, pos: GPUBuffer, y: GPUBuffer, a: RopeArgs & { readonly yOff: number; readonly yTok: number; readonly yHead: number }): void {
  const half = dims / 2;
  const params = new Uint32Array([a.n, a.heads, half, a.xOff, a.tokStride, a.headStride, a.posOff ?? 0, a.yOff, a.yTok, a.yHead, 0, 0]);
  const outs: OutRange[] = [];
  for (let t = 0; t < a.n; t++) outs.push(...rows(y, a.yOff + t * a.yTok, a.heads, a.yHead, dims));
  rt.dispatch("ropeTo", ROPE_TO_WGSL, [x, pos, table, y], params, [Math.ceil(half / 64), a.heads, a.n], outs);
}

/**
 * Latent cache rows of n tokens from kv = [c (L) | k_pe (dims)] per token (at kvOff + t·stride; default 0 and L + dims):
 * cacheC[rowIdx[t]] = RMSNorm(c)·g, cacheK[rowIdx[t]] = rope(k_pe) at POS[t] (scattered rows: no write check). With qNorm,
 * the first qNorm.dim values of each token's row of kv (the q-LoRA latent) get their RMSNorm in place, same dispatch.
 */
export function kvCacheWrite(
  rt: GpuRuntime,
  kv: GPUBuffer,
  g: GPUBuffer,
  table: GPUBuffer,
  dims: number,
  pos: GPUBuffer,
  rowIdx: GPUBuffer,
  cacheC: GPUBuffer,
  cacheK: GPUBuffer,
  a: {
    n: number;
    L: number;
    kvOff?: number;
    stride?: number;
    qNorm?: { g: GPUBuffer; dim: number };
    /** ropeTo of the queries' q_pe (in the same rows of kv: at qpOff + h·qHead) into y (yOff + t·yTok + h·yHead) */
    qRope?: { y: GPUBuffer; heads: number; qpOff: number; qHead: number; yOff: number; yTok: number; yHead: number };
  },
  eps: number,
): void {
  const { qNorm: q, qRope: r } = a;
  if (q !== undefined && r !== undefined) throw new LatentError("kvCacheWrite takes one extra op, not both");
  const stride = a.stride ?? a.L + dims;
  const params = new Uint32Array([a.n, a.L, dims / 2, stride, f32bits(eps), q?.dim ?? 0, a.kvOff ?? 0, r?.heads ?? 0, r?.qpOff ?? 0, r?.qHead ?? 0, r?.yOff ?? 0, r?.yTok ?? 0, r?.yHead ?? 0, 0, 0, 0]);
  const groups = q === undefined && r === undefined ? a.n : 2 * a.n;
  const bufs = [kv, g, pos, table, rowIdx, cacheC, cacheK, ...(q !== undefined ? [q.g] : r !== undefined ? [r.y] : [])];
  const outs: OutRange[] = [];
  if (r !== undefined) for (let t = 0; t < a.n; t++) outs.push(...rows(r.y, r.yOff + t * r.yTok, r.heads, r.yHead, dims));
  rt.dispatch("kvCache", withSubgroupTotal(KV_CACHE_WGSL(q !== undefined ? "qnorm" : r !== undefined ? "qrope" : "none"), rt.info.subgroupSize), bufs, params, [Math.min(groups, 65535), Math.ceil(groups / 65535)], outs);
}

/** h[t] += Σ_k wts[t·K+k]·ye[t·K+k] (the MoE output into the residual), then y[t] = RMSNorm(h[t])·g: one kernel. */
export function addNorm(rt: GpuRuntime, ye: GPUBuffer, wts: GPUBuffer, h: GPUBuffer, g: GPUBuffer, y: GPUBuffer, a: { n: number; K: number; dim: number }, eps: number): void {
  const params = new Uint32Array([a.n, a.dim, a.K, f32bits(eps)]);
  rt.dispatch("addNorm", withSubgroupTotal(ADD_NORM_WGSL(a.dim % 4 === 0 && a.K >= 1 && a.K <= 16 ? a.K : undefined), rt.info.subgroupSize), [ye, wts, h, g, y], params, [Math.min(a.n, 65535), Math.ceil(a.n / 65535)], rows(y, 0, a.n, a.dim, a.dim));
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
  rt.dispatch(add ? "add" : "copy", COPY_WGSL(add), [x, y], params, [gx, gy], add ? [] : rows(y, yOff, a.n, yStride, a.width));
}

/** Row-wise softmax (or log-softmax) in place. */
export function softmax(rt: GpuRuntime, x: GPUBuffer, n: number, width: number, log = false, off = 0, stride = width): void {
  rt.dispatch(log ? "logSoftmax" : "softmax", SOFTMAX_WGSL(log), [x], new Uint32Array([n, width, off, stride]), [Math.min(n, 65535), Math.ceil(n / 65535)]);
}

export type AttnParams = Record<(typeof ATTN_PARAMS)[number], number>;

export interface AttentionArgs {
  /** queries; META holds 4 u32 per query: (key row base, key count, selection offset, use selection) */
  readonly nq: number;
  readonly heads: number;
  readonly d1: number;
  readonly d2: number;
  readonly dv: number;
  readonly scale: number;
  /** the longest key list of any query (sets the number of key chunks) */
  readonly maxKeys: number;
  readonly q: { readonly off: number; readonly stride: number; readonly head: number; readonly q2Off: number };
  readonly k1: { readonly off: number; readonly stride: number; readonly head: number };
  readonly k2: { readonly off: number; readonly stride: number };
  readonly v: { readonly off: number; readonly stride: number; readonly head: number };
  readonly o: { readonly off: number; readonly stride: number; readonly head: number };
  /** keys through page tables in SEL (META base = the table's offset, u32 page ids); 0 (default) = contiguous rows */
  readonly pageSize?: number;
}

/** The parameter words of both attention kernels but the split counts: the layout of `a`, scale as f32 bits. */
function attnFields(a: AttentionArgs): Omit<AttnParams, "chunks"> {
  return {
    nq: a.nq,
    heads: a.heads,
    d1: a.d1,
    d2: a.d2,
    dv: a.dv,
    qOff: a.q.off,
    qStride: a.q.stride,
    qHead: a.q.head,
    q2Off: a.q.q2Off,
    k1Off: a.k1.off,
    k1Stride: a.k1.stride,
    k1Head: a.k1.head,
    k2Off: a.k2.off,
    k2Stride: a.k2.stride,
    vOff: a.v.off,
    vStride: a.v.stride,
    vHead: a.v.head,
    oOff: a.o.off,
    oStride: a.o.stride,
    oHead: a.o.head,
    scale: f32bits(a.scale),
    pageSize: a.pageSize ?? 0,
  };
}

/** The output rows (dv wide) of every (query, head) of an attention step. */
function attnOutputs(o: GPUBuffer, a: AttentionArgs): OutRange[] {
  const outs: OutRange[] = [];
  for (let i = 0; i < a.nq; i++) outs.push(...rows(o, a.o.off + i * a.o.stride, a.heads, a.o.head, a.dv));
  return outs;
}

type AttentionBuffers = { q: GPUBuffer; k1: GPUBuffer; k2: GPUBuffer; v: GPUBuffer; meta: GPUBuffer; sel: GPUBuffer; o: GPUBuffer; part: GPUBuffer | undefined };

/**
 * Flash-style attention: absorbed MLA decode (q1 = q_abs, K1 = V = latent c, K2 = k_pe, head strides 0) or prefill MHA
 * (K1 = k_nope, V = v per head). Decode of 1–4 queries over more than one chunk of 256 keys takes the wide kernel
 * (wgsl-attn.ts; tune.attn = 1 at every key count, 0 never); otherwise one workgroup per (key chunk of 256, head, query)
 * with a combine pass over the chunks
 * (FlashMLA's split-KV). `part` is scratch of at least attentionScratch() floats when the keys span more than one chunk.
 * A query without keys gets zeros from the wide kernel (NaN from the others).
 */
export function attention(rt: GpuRuntime, bufs: AttentionBuffers, a: AttentionArgs): void {
  if (a.d1 + a.d2 > ATTN_QMAX) throw new LatentError(`attention: query width ${a.d1 + a.d2} exceeds ${ATTN_QMAX}`);
  if (attentionWide(rt, bufs, a)) return;
  const chunks = Math.max(1, Math.ceil(a.maxKeys / ATTN_CHUNK));
  const p: AttnParams = { ...attnFields(a), chunks };
  const params = Uint32Array.from(ATTN_PARAMS.map((k) => p[k]));
  const outs = attnOutputs(bufs.o, a);
  // the subgroup kernel where the subgroup size is fixed (and divides its 256 threads)
  const sg = rt.info.subgroupSize;
  const kernel = (split: boolean): string => (sg !== undefined && sg >= 4 && sg <= 64 ? attnSubgroupWGSL(a.d1, a.d2, a.dv, sg, split) : ATTN_WGSL(split));
  if (chunks === 1) {
    rt.dispatch("attention", kernel(false), [bufs.q, bufs.k1, bufs.k2, bufs.v, bufs.meta, bufs.sel, bufs.o], params, [1, a.heads, a.nq], outs);
    return;
  }
  const part = bufs.part;
  const need = a.nq * a.heads * chunks * (a.dv + 2);
  if (part === undefined || part.size < need * 4) throw new LatentError(`attention over ${a.maxKeys} keys needs ${need} floats of scratch`);
  rt.dispatch("attention split", kernel(true), [bufs.q, bufs.k1, bufs.k2, bufs.v, bufs.meta, bufs.sel, part], params, [chunks, a.heads, a.nq], [{ buffer: part, offset: 0, size: need * 4 }]);
  rt.dispatch("attention combine", ATTN_COMBINE_WGSL, [part, bufs.o], params, [1, a.heads, a.nq], outs);
}

/** The wide decode kernel where it applies (false: nothing dispatched). */
function attentionWide(rt: GpuRuntime, bufs: AttentionBuffers, a: AttentionArgs): boolean {
  const sg = rt.info.subgroupSize;
  // the latent is both K1 and V: one read of a key row serves the scores and the weighted sum of every head
  const latent = a.k1.head === 0 && a.v.head === 0 && bufs.k1 === bufs.v && a.k1.off === a.v.off && a.k1.stride === a.v.stride && a.dv === a.d1 && a.d2 >= 1;
  // by default only past one chunk of keys, where the chunked kernel splits too. Measured on the H200 (v2-lite batch 1,
  // whole step): decoding from 512 keys, GPU 5.20 → 3.65 ms per step with this kernel, from 4096 keys 6.04 → 4.18 ms;
  // at 17–50 keys it cost time instead (3.43 vs 3.23 ms: 4 workgroups for 16 heads where the chunked kernel has 16)
  const wide = rt.tune.attn ?? (a.maxKeys > ATTN_CHUNK ? 1 : 0);
  if (wide !== 1 || !latent || sg === undefined) return false;
  const plan = attnWidePlan(rt.tune, sg, a.nq, a.heads, a.maxKeys);
  if (plan === undefined || attnWideBytes(a.d1, a.d2, sg, plan) > rt.info.limits.maxComputeWorkgroupStorageSize) return false;
  const p: Record<(typeof ATTN_WIDE_PARAMS)[number], number> = { ...attnFields(a), splits: plan.splits, splitKeys: plan.splitKeys };
  const params = Uint32Array.from(ATTN_WIDE_PARAMS.map((k) => p[k]));
  const outs = attnOutputs(bufs.o, a);
  const grid: [number, number, number] = [plan.splits, Math.ceil(a.heads / plan.group), a.nq];
  const inputs = [bufs.q, bufs.k1, bufs.k2, bufs.meta, bufs.sel];
  if (plan.splits === 1) {
    rt.dispatch("attention wide", attnWideWGSL(a.d1, a.d2, sg, plan, false), [...inputs, bufs.o], params, grid, outs);
    return true;
  }
  const need = a.nq * a.heads * plan.splits * (a.dv + 2);
  const part = bufs.part;
  if (part === undefined || part.size < need * 4) throw new LatentError(`attention over ${a.maxKeys} keys needs ${need} floats of scratch`);
  rt.dispatch("attention wide split", attnWideWGSL(a.d1, a.d2, sg, plan, true), [...inputs, part], params, grid, [{ buffer: part, offset: 0, size: need * 4 }]);
  rt.dispatch("attention wide combine", ATTN_WIDE_COMBINE_WGSL, [part, bufs.meta, bufs.o], params, [Math.ceil(a.dv / 128), a.heads, a.nq], outs);
  return true;
}

/** Floats of split-attention scratch (for either kernel). */
export function attentionScratch(nq: number, heads: number, dv: number, maxKeys: number): number {
  return Math.max(nq * heads * Math.max(1, Math.ceil(maxKeys / ATTN_CHUNK)) * (dv + 2), attnWideScratch(nq, heads, dv, maxKeys));
}

export interface RouteArgs {
  readonly n: number;
  readonly E: number;
  readonly K: number;
  readonly nGroup: number;
  readonly nGroupUsed: number;
  readonly softmax: boolean;
  /** group score = max (V2 softmax by definition) instead of the top-2 sum */
  readonly groupMax: boolean;
  readonly norm: boolean;
  readonly scale: number;
  readonly zOff?: number;
  readonly zStride?: number;
}

/**
 * The routing kernel for these arguments and its grid: one subgroup per token (wgsl-route.ts) on devices with a fixed
 * subgroup size in 4..64, else (or with tune.route = 0, or groups that do not divide the experts) ROUTE_WGSL, one
 * 256-thread workgroup per token.
 */
export function routeKernel(rt: GpuRuntime, a: RouteArgs): { code: string; groups: [number, number] } {
  const shape = subgroupRouteShape(rt, a);
  if (shape !== undefined) return { code: routeWGSL(shape), groups: routeGrid(shape, a.n) };
  return { code: ROUTE_WGSL, groups: [Math.min(a.n, 65535), Math.ceil(a.n / 65535)] };
}

/** The logits z'·1/rms(h) per token: z' from a router whose rows hold the norm's weights (gpu-model.ts). */
export interface RouteNorm {
  readonly h: GPUBuffer;
  readonly dim: number;
  readonly eps: number;
}

/** The subgroup routing kernel's shape where moeRoute can take a RouteNorm (the routing kernel's own choice), else undefined. */
export function routeNormShape(rt: GpuRuntime, a: RouteArgs, dim: number): RouteShape | undefined {
  return dim % 4 === 0 && routeFits(a) ? subgroupRouteShape(rt, a) : undefined;
}

/** The subgroup routing kernel's shape where routeKernel picks it (a fixed subgroup size, not tuned off). */
function subgroupRouteShape(rt: GpuRuntime, a: RouteArgs): RouteShape | undefined {
  const sg = rt.info.subgroupSize;
  return rt.tune.route === 0 || sg === undefined ? undefined : routeShape(sg, a.E, a.nGroup, a.nGroupUsed, rt.tune.routeThreads);
}

/** Whether the routing kernels take these arguments (≤ 256 experts, ≤ 16 used, ≤ 64 groups). */
export function routeFits(a: RouteArgs): boolean {
  return a.E <= 256 && a.K <= 16 && a.nGroup <= 64;
}

/** The routing kernels' parameter block (ROUTE_PARAMS) for these arguments. */
export function routeParams(a: RouteArgs, hasBias: boolean): Uint32Array {
  const p: Record<(typeof ROUTE_PARAMS)[number], number> = {
    n: a.n,
    E: a.E,
    K: a.K,
    nGroup: a.nGroup,
    nGroupUsed: a.nGroupUsed,
    softmax: a.softmax ? 1 : 0,
    groupMax: a.groupMax ? 1 : 0,
    norm: a.norm ? 1 : 0,
    hasBias: hasBias ? 1 : 0,
    scale: f32bits(a.scale),
    zOff: a.zOff ?? 0,
    zStride: a.zStride ?? a.E,
  };
  return Uint32Array.from(ROUTE_PARAMS.map((k) => p[k]));
}

/** MoE routing: router logits z [n × E] → ids [n × K] (best first), weights [n × K]. */
export function moeRoute(rt: GpuRuntime, z: GPUBuffer, bias: GPUBuffer | undefined, ids: GPUBuffer, wts: GPUBuffer, a: RouteArgs, norm?: RouteNorm): void {
  if (!routeFits(a)) throw new LatentError(`moeRoute supports ≤ 256 experts, ≤ 16 used, ≤ 64 groups (got ${a.E}, ${a.K}, ${a.nGroup})`);
  let kernel = routeKernel(rt, a);
  if (norm !== undefined) {
    const shape = routeNormShape(rt, a, norm.dim);
    if (shape === undefined) throw new LatentError("moeRoute: the norm's scale needs the subgroup routing kernel and a row width that is a multiple of 4 (check routeNormShape())");
    kernel = { code: routeWGSL(shape, norm), groups: routeGrid(shape, a.n) };
  }
  const { code, groups } = kernel;
  rt.dispatch("moeRoute", code, [z, bias ?? z, ids, wts, ...(norm !== undefined ? [norm.h] : [])], routeParams(a, bias !== undefined), groups, [
    { buffer: ids, offset: 0, size: a.n * a.K * 4 },
    { buffer: wts, offset: 0, size: a.n * a.K * 4 },
  ]);
}

/** y[t] (+)= Σ_k wts[t·K+k]·ye[t·K+k] over rows of `width`. */
export function moeCombine(rt: GpuRuntime, ye: GPUBuffer, wts: GPUBuffer, y: GPUBuffer, a: { n: number; K: number; width: number; yOff?: number; yStride?: number; acc: boolean }): void {
  const { gx, gy } = grid1(a.n * a.width, 256);
  const yOff = a.yOff ?? 0;
  const yStride = a.yStride ?? a.width;
  const params = new Uint32Array([a.n, a.K, a.width, yOff, yStride, gx, a.acc ? 1 : 0, 0]);
  rt.dispatch("moeCombine", COMBINE_WGSL, [ye, wts, y], params, [gx, gy], a.acc ? [] : rows(y, yOff, a.n, yStride, a.width));
}

export interface DsaArgs {
  readonly n: number;
  /** width of the score rows (≥ every query's key count) */
  readonly T: number;
  readonly Hi: number;
  readonly D: number;
  readonly topK: number;
  readonly kOff?: number;
  /** keys through page tables in SEL (META base = the table's offset); 0 = contiguous rows */
  readonly pageSize?: number;
}

/**
 * The DSA indexer's selection on the GPU: scores [n × T] from roped indexer queries q [n × Hi × D], head weights
 * w [n × Hi] and keys; then per query the top-k positions (ascending) into sel [n × topK], and META updated so that
 * the attention kernel reads only those keys (queries with ≤ topK keys stay dense).
 */
export function dsaSelect(rt: GpuRuntime, bufs: { q: GPUBuffer; w: GPUBuffer; keys: GPUBuffer; meta: GPUBuffer; scores: GPUBuffer; sel: GPUBuffer }, a: DsaArgs): void {
  const wScale = 1 / Math.sqrt(a.Hi * a.D);
  rt.dispatch("dsaScores", DSA_SCORES_WGSL, [bufs.q, bufs.w, bufs.keys, bufs.meta, bufs.scores, bufs.sel], new Uint32Array([a.n, a.T, a.Hi, a.D, f32bits(wScale), a.kOff ?? 0, a.pageSize ?? 0, 0]), [Math.ceil(a.T / 64), a.n], [
    { buffer: bufs.scores, offset: 0, size: a.n * a.T * 4 },
  ]);
  rt.dispatch("dsaTopK", TOPK_WGSL, [bufs.scores, bufs.meta, bufs.sel], new Uint32Array([a.n, a.T, a.topK, 0]), [a.n]);
}

/** y[idx[t]·yStride + yOff ..] = x[xOff + t·xStride ..] (width values per row); no write check (scattered rows). */
export function scatterRows(rt: GpuRuntime, x: GPUBuffer, idx: GPUBuffer, y: GPUBuffer, a: CopyArgs): void {
  const { gx, gy } = grid1(a.n * a.width, 256);
  const params = new Uint32Array([a.n, a.width, a.xOff ?? 0, a.xStride ?? a.width, a.yOff ?? 0, a.yStride ?? a.width, gx, 0]);
  rt.dispatch("scatter", SCATTER_WGSL, [x, idx, y], params, [gx, gy]);
}

/** y[0..n) = x[0..n) as u32 words (restores a META copy before each DSA layer: the selection rewrites META). */
export function copyU32(rt: GpuRuntime, x: GPUBuffer, y: GPUBuffer, n: number): void {
  rt.dispatch("copyU32", COPY_U32_WGSL, [x, y], new Uint32Array([n, 0, 0, 0]), [Math.ceil(n / 64)], [{ buffer: y, offset: 0, size: n * 4 }]);
}

/** Words of the scratch sampleRows needs for n rows of `width`: two vec4u per slice of a row (wgsl-sample.ts). */
export function sampleScratchWords(n: number, width: number): number {
  return 8 * n * Math.ceil(width / ARGMAX_SLICE);
}

/** The draws buffer's words for these rows' draws (DRAW_WORDS each: see sampleRows). */
export function drawWords(draws: readonly PickDraw[]): Uint32Array {
  return Uint32Array.from(draws.flatMap((d) => [f32bits(d.temperature > 0 ? 1 / d.temperature : 0), d.key >>> 0, d.topK ?? 0, f32bits(d.topP ?? 1), f32bits(d.minP ?? 0), 0, 0, 0]));
}

/** Words of the candidates buffer sampleRows needs for top-k rows: SAMPLE_TOPK_MAX (x, id) pairs per slice of a row. */
export function sampleTopKWords(n: number, width: number): number {
  return 2 * SAMPLE_TOPK_MAX * n * Math.ceil(width / ARGMAX_SLICE);
}

/** Words of the scratch sampleRows needs for n rows' top-p and min-p without top-k (wgsl-nucleus.ts). */
export function sampleNucleusWords(n: number): number {
  return n * NUCLEUS_ROW_WORDS;
}

/** Whether sampleRows draws top-k rows of this width (its merge holds a row's candidates in workgroup memory). */
export function sampleTopKFits(width: number): boolean {
  return Math.ceil(width / ARGMAX_SLICE) * SAMPLE_TOPK_MAX <= SAMPLE_TOPK_CAP;
}

/**
 * ids[t] = a token drawn from softmax(x_t / T_t) by the Gumbel-max trick (wgsl-sample.ts), or argmax(x_t) where 1/T_t
 * is 0, for rows t of x [n × width]; `draws` holds per row DRAW_WORDS words — (1/T as f32 bits, a 32-bit key, top-k,
 * top-p as f32 bits), (min-p as f32 bits, 0, 0, 0) — the key drawn from the request's seeded sampler. With `cand`
 * (sampleTopKWords), rows with top-k 1..SAMPLE_TOPK_MAX are drawn after top-k → top-p → min-p as the host Sampler
 * filters (sampleTopKWGSL; two more dispatches); with `nucleus` (sampleNucleusWords, zeroed when made), rows without
 * top-k are drawn after top-p → min-p (wgsl-nucleus.ts; seven more dispatches); without them those filters are ignored.
 * logprobs[t] = log_softmax(x_t) at ids[t] (NaN where the host sampler would refuse the row). Two dispatches, as
 * argmaxRows, or more.
 */
export function sampleRows(rt: GpuRuntime, x: GPUBuffer, draws: GPUBuffer, ids: GPUBuffer, logprobs: GPUBuffer, part: GPUBuffer, a: { n: number; width: number; xOff?: number; xStride?: number; cand?: GPUBuffer; nucleus?: GPUBuffer }): void {
  const slices = Math.ceil(a.width / ARGMAX_SLICE);
  if (a.cand !== undefined && !sampleTopKFits(a.width)) throw new LatentError(`top-k draws on the GPU take rows of up to ${(SAMPLE_TOPK_CAP / SAMPLE_TOPK_MAX) * ARGMAX_SLICE} logits, not ${a.width}`);
  if (a.nucleus !== undefined && a.nucleus.size < 4 * sampleNucleusWords(a.n)) throw new LatentError(`top-p draws of ${a.n} rows need a scratch of ${4 * sampleNucleusWords(a.n)} bytes, not ${a.nucleus.size}`);
  // bits of the ids a row's slices span (the top-k selection's second key)
  const idBits = Math.max(1, Math.ceil(Math.log2(slices * ARGMAX_SLICE)));
  const params = new Uint32Array([a.n, a.width, a.xOff ?? 0, a.xStride ?? a.width, slices, idBits, 0, 0]);
  rt.dispatch("sample slices", sampleWGSL("slices"), [x, draws, part], params, [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)], [{ buffer: part, offset: 0, size: a.n * slices * 32 }]);
  const rowGrid = [Math.min(a.n, 65535), Math.ceil(a.n / 65535)] as const;
  const sliceGrid = [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)] as const;
  const merge = (): void =>
    rt.dispatch("sample merge", sampleWGSL("merge"), [part, ids, logprobs], params, rowGrid, [
      { buffer: ids, offset: 0, size: a.n * 4 },
      { buffer: logprobs, offset: 0, size: a.n * 4 },
    ]);
  merge();
  if (a.nucleus !== undefined) {
    // top-p's cut over four rounds and min-p's, each nucleus row's draw among what they keep into its slices'
    // candidates, then the merge again (the other rows' candidates unchanged: the same ids and log-probabilities)
    for (let r = 0; r < NUCLEUS_ROUNDS; r++) {
      const round = params.slice();
      round[6] = r;
      rt.dispatch("sample nucleus round", nucleusWGSL("round"), [x, draws, part, a.nucleus], round, sliceGrid);
    }
    rt.dispatch("sample nucleus cut", nucleusWGSL("cut"), [x, draws, part, a.nucleus], params, rowGrid);
    rt.dispatch("sample nucleus draw", nucleusWGSL("draw"), [x, draws, a.nucleus, part], params, sliceGrid);
    merge();
  }
  if (a.cand === undefined) return;
  // (rows without top-k write nothing here: no completeness check on these outputs)
  rt.dispatch("sample topk slices", sampleTopKWGSL("slices"), [x, draws, a.cand], params, [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)]);
  rt.dispatch("sample topk merge", sampleTopKWGSL("merge"), [a.cand, part, draws, ids, logprobs], params, [Math.min(a.n, 65535), Math.ceil(a.n / 65535)]);
}

/** Words of the scratch argmaxRows needs for n rows of `width`: per slice of a row its best (value, index) and Σ exp. */
export function argmaxScratchWords(n: number, width: number): number {
  return 4 * n * Math.ceil(width / ARGMAX_SLICE);
}

/**
 * ids[t] = argmax of row t of x [n × width] (greedy sampling on the GPU; lowest id on ties, NaN never chosen, as the
 * CPU sampler; a row of only NaN → 0), and with `logprobs` ([n] f32) logprobs[t] = log_softmax of row t at ids[t]
 * (as the sampler's logprob; see argmaxWGSL for non-finite rows): the best and Σ exp(x − best) of every slice of a
 * row into `part` (argmaxScratchWords), then per row the best of those and the log-sum-exp over them. Two dispatches.
 */
export function argmaxRows(rt: GpuRuntime, x: GPUBuffer, ids: GPUBuffer, part: GPUBuffer, a: { n: number; width: number; xOff?: number; xStride?: number; logprobs?: GPUBuffer }): void {
  const slices = Math.ceil(a.width / ARGMAX_SLICE);
  const params = new Uint32Array([a.n, a.width, a.xOff ?? 0, a.xStride ?? a.width, slices, 0, 0, 0]);
  rt.dispatch("argmax slices", argmaxWGSL("slices"), [x, part], params, [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)], [{ buffer: part, offset: 0, size: a.n * slices * 16 }]);
  const lp = a.logprobs;
  rt.dispatch(
    "argmax merge",
    argmaxWGSL("merge", lp !== undefined),
    lp !== undefined ? [part, ids, lp] : [part, ids],
    params,
    [Math.min(a.n, 65535), Math.ceil(a.n / 65535)],
    [{ buffer: ids, offset: 0, size: a.n * 4 }, ...(lp !== undefined ? [{ buffer: lp, offset: 0, size: a.n * 4 }] : [])],
  );
}
