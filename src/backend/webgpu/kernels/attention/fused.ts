/**
 * The one-token absorbed MLA attention as one dispatch (attention/fused.wgsl.ts): cache write, q_pe rope, W_UK absorb,
 * attention over the latent cache and W_UV, `split` workgroups per head. It replaces three dependent dispatches of a
 * batch-1 decode step (`tune.attnFuse`, on by default on GPUs: on a large GPU, v2-lite batch 1, GPU 3.15 → 3.06 ms a step).
 * Its shape, and whether it takes a step, is select.ts's attnFusedShape.
 */
import type { GpuMatrix } from "../matmul/matrix.js";
import type { GpuRuntime } from "../../core/runtime.js";
import { f32bits } from "../../core/runtime.js";
import { LatentError } from "../../../../util/errors.js";
import {
  ATTN_FUSED_PARAMS,
  attnFusedFinishWGSL as attnFusedFinishSource,
  attnFusedPartWords,
  attnFusedWGSL as attnFusedSource,
  type AttnFusedShape,
} from "./fused.wgsl.js";
import { memoWGSL } from "../../core/wgsl-memo.js";

const attnFusedWGSL = memoWGSL(attnFusedSource);
const attnFusedFinishWGSL = memoWGSL(attnFusedFinishSource);

export { attnFusedPartWords };

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
