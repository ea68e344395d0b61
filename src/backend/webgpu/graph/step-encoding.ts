/// <reference types="@webgpu/types" />
/**
 * What every block of one encoded step shares: the runtime, the config, the step's buffers, its token and key counts,
 * which fusions its size allows, and the residual's pending MoE combine (a MoE layer's weighted expert outputs wait in
 * YE until the next RMSNorm of h adds them, in one kernel).
 */
import type { ModelConfig } from "../../../model/config.js";
import type { GpuRuntime } from "../core/runtime.js";
import type { CombineArgs } from "../kernels/matmul/matrix.js";
import { addNorm, rmsNorm } from "../kernels/rows/rows.js";

/** Steps of at most this many tokens run independent kernels in one dispatch (GpuRuntime.together); tune.fuseTokens overrides. */
export const FUSE_MAX_TOKENS = 4;

/** Width of an A0 row: the first product's outputs (q or the q-LoRA latent) then kv_a's (c, k_pe). */
export function a0Stride(c: ModelConfig): number {
  return (c.qLoraRank > 0 ? c.qLoraRank : c.nHead * (c.qkNope + c.qkRope)) + c.kvLoraRank + c.qkRope;
}

export class StepEncoding {
  /** independent kernels share one dispatch (see `together`) and norms fuse into their readers only in small steps */
  readonly small: boolean;
  /** the attention's RMSNorm (and a pending combine) inside A0's product (tune.normFuse 1 or 3) */
  readonly fuseAttnNorm: boolean;
  /** the FFN's RMSNorm inside the MoE products that read it (tune.normFuse 1 or 2) */
  readonly fuseFFNNorm: boolean;
  /** width of an A0 row (a0Stride) */
  readonly a0Stride: number;
  /** the residual's pending combine: YE weighted by RW, added to h by the next norm (or the product that fuses it) */
  readonly combineArgs: CombineArgs;
  /** a MoE layer's weighted expert outputs wait in YE until the next RMSNorm, which adds them to h first (one kernel) */
  combinePending = false;

  constructor(
    readonly rt: GpuRuntime,
    readonly c: ModelConfig,
    /** the step's buffers by name (h and hAlt swap where a MoE layer writes the residual's other buffer) */
    readonly b: Record<string, GPUBuffer>,
    /** tokens in the step */
    readonly n: number,
    /** the most keys any token of the step attends to */
    readonly maxKeys: number,
    /** the rope table, covering the context */
    readonly table: GPUBuffer,
    /** positions per page of a paged cache, 0 for contiguous caches */
    readonly pageSize: number,
  ) {
    // independent kernels share one dispatch only in small steps, where per-dispatch costs dominate: on a large GPU
    // (v2-lite) combining cut batch 1 from 351 to 298 dispatches (GPU 3.81 → 3.59 ms per step) but made the 512-token
    // prefill slower (GPU 409 → 444 ms) and gained nothing at batch 64 (64.8 → 65.8 ms)
    this.small = n <= (rt.tune.fuseTokens ?? FUSE_MAX_TOKENS);
    // small steps on the wide kernel (tune.normFuse, default 1): the FFN's RMSNorm inside the products that read it, and
    // the attention's RMSNorm (with the last MoE layer's combine into the residual) inside A0's staging of x, the combine
    // added to h by o: two dispatches fewer a layer. On a large GPU (v2-lite batch 1) the attention's side was slower while
    // the kernels were fully unrolled (3.31 against 3.13 ms with the FFN's alone); with one chunk step a pass
    // (matmul/select.ts, UNROLL) it is faster, in one call 2.75 / 2.75 / 2.76 against 2.83 / 2.83 / 2.84 ms with the FFN's
    // alone
    const fuseMode = this.small ? (rt.tune.normFuse ?? 1) : 0;
    this.fuseAttnNorm = fuseMode === 1 || fuseMode === 3;
    this.fuseFFNNorm = fuseMode === 1 || fuseMode === 2;
    this.a0Stride = a0Stride(c);
    this.combineArgs = { ye: b.ye!, rw: b.rw!, K: c.nExpertUsed };
  }

  /** Run `fn`'s kernels in one dispatch where the step is small (GpuRuntime.together), else one by one. */
  together(fn: () => void): void {
    if (this.small && this.rt.tune.together !== 0) this.rt.together(fn);
    else fn();
  }

  /** y = RMSNorm(h)·g, adding a pending combine to h first. */
  normH(g: GPUBuffer, y: GPUBuffer): void {
    const { rt, c, b, n } = this;
    if (this.combinePending) addNorm(rt, b.ye!, b.rw!, b.h!, g, y, { n, K: c.nExpertUsed, dim: c.nEmbd }, c.rmsEps);
    else rmsNorm(rt, b.h!, g, y, { n, dim: c.nEmbd }, c.rmsEps);
    this.combinePending = false;
  }
}
