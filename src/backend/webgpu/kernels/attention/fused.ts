/**
 * The one-token absorbed MLA attention as one dispatch (attention/fused.wgsl.ts): cache write, q_pe rope, W_UK absorb,
 * attention over the latent cache and W_UV, `split` workgroups per head. It replaces three dependent dispatches of a
 * batch-1 decode step (`tune.attnFuse`, on by default on GPUs: on a large GPU, v2-lite batch 1, GPU 3.15 → 3.06 ms a step).
 */
import type { GpuMatrix } from "../matmul/matrix.js";
import type { GpuRuntime } from "../../core/runtime.js";
import { f32bits } from "../../core/runtime.js";
import { LatentError } from "../../../../util/errors.js";
import {
  ATTN_FUSED_PARAMS,
  attnFusedBytes,
  attnFusedChunk,
  attnFusedFinishWGSL as attnFusedFinishSource,
  attnFusedPartWords,
  attnFusedWGSL as attnFusedSource,
  type AttnFusedShape,
} from "./fused.wgsl.js";
import { ATTN_CHUNK } from "./attention.wgsl.js";
import { memoWGSL } from "../../core/wgsl-memo.js";

const attnFusedWGSL = memoWGSL(attnFusedSource);
const attnFusedFinishWGSL = memoWGSL(attnFusedFinishSource);

export { attnFusedPartWords };

export interface AttnFusedDims {
  readonly heads: number;
  readonly P: number;
  readonly R: number;
  readonly L: number;
  readonly V: number;
  /** keys of the step's query (at most) */
  readonly maxKeys: number;
  /** q-LoRA: the queries come from their own product (Q) and the step's cache write has written the token's key */
  readonly lora?: boolean;
}

/**
 * The kernel's shape where it takes this step (tune.attnFuse = 1, by default on GPUs: subgroups ≥ 32; a fixed subgroup
 * size, one piece each, ≤ ATTN_CHUNK keys), else undefined.
 */
export function attnFusedShape(
  rt: GpuRuntime,
  kB: GpuMatrix,
  vB: GpuMatrix,
  d: AttnFusedDims,
): AttnFusedShape | undefined {
  const sg = rt.info.subgroupSize;
  if (sg === undefined || sg < 4 || sg > 64 || 256 % sg !== 0 || (rt.tune.attnFuse ?? (sg >= 32 ? 1 : 0)) !== 1)
    return undefined;
  // past one chunk of keys: the key-split form (two dispatches), unless tune.attnFuseLong = 0
  const keySplit = d.maxKeys > ATTN_CHUNK;
  if ((keySplit && rt.tune.attnFuseLong === 0) || d.R % 2 !== 0 || d.P % 4 !== 0 || d.L % 4 !== 0) return undefined;
  if (kB.pieces.length !== 1 || vB.pieces.length !== 1 || kB.items < d.heads || vB.items < d.heads) return undefined;
  if (kB.cols !== d.P || kB.rows !== d.L || vB.cols !== d.L || vB.rows !== d.V) return undefined;
  if (d.P % attnFusedChunk(kB.type, d.P) !== 0 || d.L % attnFusedChunk(vB.type, d.L) !== 0) return undefined;
  const wide = sg >= 32;
  const clamp = (v: number | undefined, lo: number, hi: number, def: number): number =>
    Math.max(lo, Math.min(hi, Math.floor(v ?? def)));
  // about 128 workgroups (about one per SM of a large GPU; V2-Lite's 16 heads: 8 each), each head's absorb redone by each of its
  // own; on CPU adapters 2
  const split = Math.min(d.V, clamp(rt.tune.attnFuseSplit, 1, 16, wide ? Math.round(128 / d.heads) : 2));
  const keys = clamp(rt.tune.attnFuseKeys, 1, 4, wide ? 2 : 1);
  // one chunk step a turn, in a pipelined loop: on a large GPU (v2-lite batch 1, same call) the step took 3.07 ms on the
  // GPU with 1 (then not pipelined), 3.12 with 2 and 3.48 with 8 unrolled (kernel code fetched again every layer:
  // matmul/select.ts, UNROLL), against 3.18 without the fused kernel
  const unroll = clamp(rt.tune.attnFuseUnroll, 1, 16, 1);
  // subgroups a workgroup (tune.attnFuseSubgroups): on GPUs 16 where their partial latents fit in workgroup memory (v2-lite
  // batch 1, same call: GPU 2.58 / 2.58 ms a step against 2.67 / 2.67 with 8 and 3.04 with 4; with
  // ~128 workgroups, one an SM, more threads hide more of each one's latency), else 8 (at most 256 threads)
  const limit = rt.info.limits.maxComputeWorkgroupStorageSize;
  const base: AttnFusedShape = {
    heads: d.heads,
    P: d.P,
    R: d.R,
    L: d.L,
    V: d.V,
    typeK: kB.type,
    typeV: vB.type,
    sg,
    split,
    keys,
    unroll,
    own: d.lora !== true,
    ...(keySplit ? { keySplit } : {}),
  };
  const asked = rt.tune.attnFuseSubgroups;
  const maxThreads = rt.info.limits.maxComputeInvocationsPerWorkgroup ?? 256;
  const subgroups = asked !== undefined ? clamp(asked, 1, Math.floor(1024 / sg), 8) : wide ? 16 : undefined;
  if (subgroups !== undefined) {
    const wider: AttnFusedShape = { ...base, threads: subgroups * sg };
    if (attnFusedBytes(wider) <= limit && subgroups * sg <= maxThreads) return wider;
    if (asked !== undefined) return undefined;
  }
  return attnFusedBytes(base) <= limit ? base : undefined;
}

export interface AttnFusedBuffers {
  /** the step's A0 row: [q (heads × (P + R)) | c (L) | k_pe (R)]; with q-LoRA (shape.own false) the queries Q (heads × (P + R)) */
  readonly a0: GPUBuffer;
  readonly kB: GpuMatrix;
  readonly vB: GpuMatrix;
  /** the latent's RMSNorm weights (unused with q-LoRA) */
  readonly g: GPUBuffer;
  /** the rope table (RopeTable) */
  readonly table: GPUBuffer;
  readonly pos: GPUBuffer;
  /** the token's cache row (unused with q-LoRA) */
  readonly rowIdx: GPUBuffer;
  readonly cacheC: GPUBuffer;
  readonly cacheK: GPUBuffer;
  /** the query's (row base, key count, selection offset, selections used) */
  readonly meta: GPUBuffer;
  /** page tables (paged caches) */
  readonly sel: GPUBuffer;
  /** the heads' outputs [heads × V] */
  readonly o: GPUBuffer;
  /** a key-split shape's scratch (attnFusedPartWords floats) */
  readonly part?: GPUBuffer;
}

/** o = W_UV·attention(W_UK·q_nope | rope(q_pe); latent cache + the token's own key) per head, the key written to the cache. */
export function attentionFused(
  rt: GpuRuntime,
  s: AttnFusedShape,
  b: AttnFusedBuffers,
  a: { readonly scale: number; readonly eps: number; readonly pageSize: number; readonly kvOff: number },
): void {
  const p: Record<(typeof ATTN_FUSED_PARAMS)[number], number> = {
    scale: f32bits(a.scale),
    eps: f32bits(a.eps),
    pageSize: a.pageSize,
    kvOff: a.kvOff,
    rowBytesK: b.kB.rowBytes,
    itemBytesK: b.kB.rowBytes * b.kB.rows,
    rowBytesV: b.vB.rowBytes,
    itemBytesV: b.vB.rowBytes * b.vB.rows,
  };
  // (the latent's norm weights and the token's row only where the kernel makes and writes the token's key)
  const params = Uint32Array.from(ATTN_FUSED_PARAMS.map((k) => p[k]));
  if (s.keySplit === true) {
    // the key ranges' latents into the scratch, then per head their merge and W_UV
    if (b.part === undefined || b.part.size < attnFusedPartWords(s) * 4)
      throw new LatentError(`attentionFused: a key-split shape needs a scratch of ${attnFusedPartWords(s)} floats`);
    const bufs = [
      b.a0,
      b.kB.pieces[0].buffer,
      ...(s.own ? [b.g] : []),
      b.table,
      b.pos,
      ...(s.own ? [b.rowIdx] : []),
      b.cacheC,
      b.cacheK,
      b.meta,
      b.sel,
      b.part,
    ];
    rt.dispatch(
      "attention fused keys",
      attnFusedWGSL(s),
      bufs,
      params,
      [s.heads, s.split],
      [{ buffer: b.part, offset: 0, size: attnFusedPartWords(s) * 4 }],
    );
    rt.dispatch(
      "attention fused finish",
      attnFusedFinishWGSL(s),
      [b.vB.pieces[0].buffer, b.part, b.o],
      params,
      [s.heads, s.split],
      [{ buffer: b.o, offset: 0, size: s.heads * s.V * 4 }],
    );
    return;
  }
  const bufs = [
    b.a0,
    b.kB.pieces[0].buffer,
    b.vB.pieces[0].buffer,
    ...(s.own ? [b.g] : []),
    b.table,
    b.pos,
    ...(s.own ? [b.rowIdx] : []),
    b.cacheC,
    b.cacheK,
    b.meta,
    b.sel,
    b.o,
  ];
  rt.dispatch(
    "attention fused",
    attnFusedWGSL(s),
    bufs,
    params,
    [s.heads, s.split],
    [{ buffer: b.o, offset: 0, size: s.heads * s.V * 4 }],
  );
}
