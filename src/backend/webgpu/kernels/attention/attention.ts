/// <reference types="@webgpu/types" />
/**
 * Launchers of the attention kernels: the latent cache write, and attention over the cache — the wide kernel where it
 * applies (select.ts: tune.attn), else the flash-style kernel (subgroup form where the subgroup size is fixed), split
 * over key chunks and combined when long.
 */
import { LatentError } from "../../../../util/errors.js";
import { f32bits, type GpuRuntime, type OutRange } from "../../core/runtime.js";
import {
  ATTN_CHUNK,
  ATTN_COMBINE_WGSL,
  ATTN_PARAMS,
  ATTN_QMAX,
  ATTN_WGSL as attnSource,
  attnSubgroupWGSL as attnSubgroupSource,
  KV_CACHE_WGSL as kvCacheSource,
} from "./attention.wgsl.js";
import {
  ATTN_WIDE_COMBINE_WGSL,
  ATTN_WIDE_PARAMS,
  attnWideBytes,
  attnWideScratch,
  attnWideWGSL as attnWideSource,
} from "./wide.wgsl.js";
import { attnTiledChoice, attnWideChoice } from "./select.js";
import { attnTiledWGSL as attnTiledSource } from "./tiled.wgsl.js";
import { memoWGSL } from "../../core/wgsl-memo.js";
import { rows } from "../launch.js";
import { withSubgroupTotal } from "../rows/rows.js";

const ATTN_WGSL = memoWGSL(attnSource);
const attnSubgroupWGSL = memoWGSL(attnSubgroupSource);
const KV_CACHE_WGSL = memoWGSL(kvCacheSource);
const attnWideWGSL = memoWGSL(attnWideSource);
const attnTiledWGSL = memoWGSL(attnTiledSource);

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
  const params = new Uint32Array([
    a.n,
    a.L,
    dims / 2,
    stride,
    f32bits(eps),
    q?.dim ?? 0,
    a.kvOff ?? 0,
    r?.heads ?? 0,
    r?.qpOff ?? 0,
    r?.qHead ?? 0,
    r?.yOff ?? 0,
    r?.yTok ?? 0,
    r?.yHead ?? 0,
    0,
    0,
    0,
  ]);
  const groups = q === undefined && r === undefined ? a.n : 2 * a.n;
  const bufs = [kv, g, pos, table, rowIdx, cacheC, cacheK, ...(q !== undefined ? [q.g] : r !== undefined ? [r.y] : [])];
  const outs: OutRange[] = [];
  if (r !== undefined)
    for (let t = 0; t < a.n; t++) outs.push(...rows(r.y, r.yOff + t * r.yTok, r.heads, r.yHead, dims));
  rt.dispatch(
    "kvCache",
    withSubgroupTotal(
      KV_CACHE_WGSL(q !== undefined ? "qnorm" : r !== undefined ? "qrope" : "none"),
      rt.info.subgroupSize,
    ),
    bufs,
    params,
    [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    outs,
  );
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

type AttentionBuffers = {
  q: GPUBuffer;
  k1: GPUBuffer;
  k2: GPUBuffer;
  v: GPUBuffer;
  meta: GPUBuffer;
  sel: GPUBuffer;
  o: GPUBuffer;
  part: GPUBuffer | undefined;
};

/**
 * Flash-style attention: absorbed MLA decode (q1 = q_abs, K1 = V = latent c, K2 = k_pe, head strides 0) or prefill MHA
 * (K1 = k_nope, V = v per head). Decode of 1–4 queries over more than one chunk of 256 keys takes the wide kernel
 * (attention/wide.wgsl.ts; tune.attn = 1 at every key count, 0 never); otherwise one workgroup per (key chunk of 256, head, query)
 * with a combine pass over the chunks
 * (FlashMLA's split-KV). `part` is scratch of at least attentionScratch() floats when the keys span more than one chunk.
 * A query without keys gets zeros from the wide kernel (NaN from the others).
 */
export function attention(rt: GpuRuntime, bufs: AttentionBuffers, a: AttentionArgs): void {
  if (a.d1 + a.d2 > ATTN_QMAX) throw new LatentError(`attention: query width ${a.d1 + a.d2} exceeds ${ATTN_QMAX}`);
  if (attentionWide(rt, bufs, a)) return;
  if (attentionTiled(rt, bufs, a)) return;
  const chunks = Math.max(1, Math.ceil(a.maxKeys / ATTN_CHUNK));
  const p: AttnParams = { ...attnFields(a), chunks };
  const params = Uint32Array.from(ATTN_PARAMS.map((k) => p[k]));
  const outs = attnOutputs(bufs.o, a);
  // the subgroup kernel where the subgroup size is fixed (and divides its 256 threads)
  const sg = rt.info.subgroupSize;
  const kernel = (split: boolean): string =>
    sg !== undefined && sg >= 4 && sg <= 64 ? attnSubgroupWGSL(a.d1, a.d2, a.dv, sg, split) : ATTN_WGSL(split);
  if (chunks === 1) {
    rt.dispatch(
      "attention",
      kernel(false),
      [bufs.q, bufs.k1, bufs.k2, bufs.v, bufs.meta, bufs.sel, bufs.o],
      params,
      [1, a.heads, a.nq],
      outs,
    );
    return;
  }
  const part = bufs.part;
  const need = a.nq * a.heads * chunks * (a.dv + 2);
  if (part === undefined || part.size < need * 4)
    throw new LatentError(`attention over ${a.maxKeys} keys needs ${need} floats of scratch`);
  rt.dispatch(
    "attention split",
    kernel(true),
    [bufs.q, bufs.k1, bufs.k2, bufs.v, bufs.meta, bufs.sel, part],
    params,
    [chunks, a.heads, a.nq],
    [{ buffer: part, offset: 0, size: need * 4 }],
  );
  rt.dispatch("attention combine", ATTN_COMBINE_WGSL, [part, bufs.o], params, [1, a.heads, a.nq], outs);
}

/** Whether the keys are the latent cache: c is both K1 and V for every head (one read of a key row serves them all). */
function latentKeys(bufs: AttentionBuffers, a: AttentionArgs): boolean {
  return (
    a.k1.head === 0 &&
    a.v.head === 0 &&
    bufs.k1 === bufs.v &&
    a.k1.off === a.v.off &&
    a.k1.stride === a.v.stride &&
    a.dv === a.d1 &&
    a.d2 >= 1
  );
}

/** The latent kernels' shared plan: heads a workgroup, keys split over `splits` workgroups of splitKeys each. */
interface LatentPlan {
  readonly group: number;
  readonly splits: number;
  readonly splitKeys: number;
}

/**
 * One latent kernel (wide or tiled, `name`) over the step: with one split its final rows; else its partials into the
 * scratch, combined by ATTN_WIDE_COMBINE_WGSL (both kernels write the wide kernel's layout).
 */
function dispatchLatent(
  rt: GpuRuntime,
  bufs: AttentionBuffers,
  a: AttentionArgs,
  plan: LatentPlan,
  name: string,
  code: (split: boolean) => string,
): void {
  const p: Record<(typeof ATTN_WIDE_PARAMS)[number], number> = {
    ...attnFields(a),
    splits: plan.splits,
    splitKeys: plan.splitKeys,
  };
  const params = Uint32Array.from(ATTN_WIDE_PARAMS.map((k) => p[k]));
  const grid: [number, number, number] = [plan.splits, Math.ceil(a.heads / plan.group), a.nq];
  const inputs = [bufs.q, bufs.k1, bufs.k2, bufs.meta, bufs.sel];
  const outs = attnOutputs(bufs.o, a);
  if (plan.splits === 1) {
    rt.dispatch(name, code(false), [...inputs, bufs.o], params, grid, outs);
    return;
  }
  const need = a.nq * a.heads * plan.splits * (a.dv + 2);
  const part = bufs.part;
  if (part === undefined || part.size < need * 4)
    throw new LatentError(`attention over ${a.maxKeys} keys needs ${need} floats of scratch`);
  rt.dispatch(`${name} split`, code(true), [...inputs, part], params, grid, [
    { buffer: part, offset: 0, size: need * 4 },
  ]);
  rt.dispatch(
    `${name} combine`,
    ATTN_WIDE_COMBINE_WGSL,
    [part, bufs.meta, bufs.o],
    params,
    [Math.ceil(a.dv / 128), a.heads, a.nq],
    outs,
  );
}

/**
 * The tiled latent kernel for many queries (tiled.wgsl.ts: each key row read once for a group of heads) where it
 * applies (false: nothing dispatched).
 */
function attentionTiled(rt: GpuRuntime, bufs: AttentionBuffers, a: AttentionArgs): boolean {
  const plan = latentKeys(bufs, a) ? attnTiledChoice(rt, a) : undefined;
  if (plan === undefined) return false;
  dispatchLatent(rt, bufs, a, plan, "attention tiled", (split) => attnTiledWGSL(a.d1, a.d2, a.dv, plan.group, split));
  return true;
}

/** The wide decode kernel where it applies (false: nothing dispatched). */
function attentionWide(rt: GpuRuntime, bufs: AttentionBuffers, a: AttentionArgs): boolean {
  const sg = rt.info.subgroupSize;
  // (where the tuning and the step's size take it: select.ts)
  if (!latentKeys(bufs, a) || sg === undefined) return false;
  const plan = attnWideChoice(rt, sg, a);
  if (plan === undefined || attnWideBytes(a.d1, a.d2, sg, plan) > rt.info.limits.maxComputeWorkgroupStorageSize)
    return false;
  dispatchLatent(rt, bufs, a, plan, "attention wide", (split) => attnWideWGSL(a.d1, a.d2, sg, plan, split));
  return true;
}

/** Floats of split-attention scratch (for either kernel). */
export function attentionScratch(nq: number, heads: number, dv: number, maxKeys: number): number {
  return Math.max(
    nq * heads * Math.max(1, Math.ceil(maxKeys / ATTN_CHUNK)) * (dv + 2),
    attnWideScratch(nq, heads, dv, maxKeys),
  );
}
