/**
 * The fused graph's selection, the one module of it that reads the tuning (RuntimeOptions.tune): which fusions a step
 * of n tokens takes. StepEncoding and the blocks take these choices as they are.
 */
import type { GpuRuntime } from "../core/runtime.js";

/**
 * Steps of at most this many tokens run independent kernels in one dispatch (GpuRuntime.together); the fuseTokens
 * knob overrides.
 */
export const FUSE_MAX_TOKENS = 4;

/** What a step's size and the tuning allow it to fuse. */
export interface StepFusion {
  /** the attention's RMSNorm (and a pending combine) inside A0's product (normFuse 1 or 3) */
  readonly fuseAttnNorm: boolean;
  /** the FFN's RMSNorm inside the MoE products that read it (normFuse 1 or 2) */
  readonly fuseFFNNorm: boolean;
  /** independent kernels share one dispatch (GpuRuntime.together): small steps, unless together = 0 */
  readonly together: boolean;
  /** a MoE layer's shared down product may run beside the routing (small steps, unless sharedEarly = 0) */
  readonly sharedEarly: boolean;
}

export function stepFusion(rt: GpuRuntime, n: number): StepFusion {
  // independent kernels share one dispatch only in small steps, where per-dispatch costs dominate: on a large GPU
  // (v2-lite) combining cut batch 1 from 351 to 298 dispatches (GPU 3.81 → 3.59 ms per step) but made the 512-token
  // prefill slower (GPU 409 → 444 ms) and gained nothing at batch 64 (64.8 → 65.8 ms)
  const small = n <= (rt.tune.fuseTokens ?? FUSE_MAX_TOKENS);
  // small steps on the wide kernel (tune.normFuse, default 1): the FFN's RMSNorm inside the products that read it, and
  // the attention's RMSNorm (with the last MoE layer's combine into the residual) inside A0's staging of x, the combine
  // added to h by o: two dispatches fewer a layer. On a large GPU (v2-lite batch 1) the attention's side was slower while
  // the kernels were fully unrolled (3.31 against 3.13 ms with the FFN's alone); with one chunk step a pass
  // (matmul/select.ts, UNROLL) it is faster, in one call 2.75 / 2.75 / 2.76 against 2.83 / 2.83 / 2.84 ms with the FFN's
  // alone
  const fuseMode = small ? (rt.tune.normFuse ?? 1) : 0;
  return {
    fuseAttnNorm: fuseMode === 1 || fuseMode === 3,
    fuseFFNNorm: fuseMode === 1 || fuseMode === 2,
    together: small && rt.tune.together !== 0,
    // (moe-block.ts says why, and when else it does not apply)
    sharedEarly: small && rt.tune.sharedEarly !== 0,
  };
}
