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
import { stepFusion, type StepFusion } from "./select.js";

/** Width of an A0 row: the first product's outputs (q or the q-LoRA latent) then kv_a's (c, k_pe). */
export function a0Stride(c: ModelConfig): number {
  return (c.qLoraRank > 0 ? c.qLoraRank : c.nHead * (c.qkNope + c.qkRope)) + c.kvLoraRank + c.qkRope;
}

export class StepEncoding {
  /** which fusions the step's size and the tuning allow (graph/select.ts) */
  readonly fusion: StepFusion;
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
    this.fusion = stepFusion(rt, n);
    this.a0Stride = a0Stride(c);
    this.combineArgs = { ye: b.ye!, rw: b.rw!, K: c.nExpertUsed };
  }

  /** Run `fn`'s kernels in one dispatch where the step is small (GpuRuntime.together), else one by one. */
  together(fn: () => void): void {
    if (this.fusion.together) this.rt.together(fn);
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
