import type { ModelConfig } from "./config.js";
import type { LatentRows, Projections } from "./mla-types.js";
import type { AttentionWeights } from "./weights.js";
import { plainProducts, type MatProducts } from "../tensor/products.js";
import type { QMatrix } from "../tensor/qmatrix.js";
import type { Vec } from "../tensor/ops.js";

/** one gated FFN of `MatKernels.swigluMany`: for each of its tokens t, out[t] += s_t · down(silu(gate·x_t) ⊙ up·x_t) */
export interface GatedFFN {
  readonly gate: QMatrix;
  readonly up: QMatrix;
  readonly down: QMatrix;
  /** the tokens it applies to, ascending (undefined: all n) */
  readonly tokens?: readonly number[];
  /** each listed token's weight s_t (undefined: 1) */
  readonly scale?: ArrayLike<number>;
}

/**
 * The kernels of a forward pass: the matrix products plus optional fast MLA attention. The reference path always uses
 * `plainKernels` (row dequantization, float64 accumulation); fast backends implement the same contract and are checked
 * against it.
 */
export interface MatKernels extends MatProducts {
  /** optional fast attention, dense causal keys only (mla.ts `mha`): o [n × H·V]; absent → the plain loops */
  mha?(
    cfg: ModelConfig,
    pr: Projections,
    n: number,
    pos0: number,
    kNope: Float64Array,
    v: Float64Array,
    lat: LatentRows,
  ): Float64Array;
  /**
   * optional: several SwiGLU FFNs over rows of x [n × dim], added into out [n × dim] FFN by FFN in the order given (a
   * token's additions in that order, each d·s_t in f64, as moe.ts `swigluManyByProducts` does); absent → that function
   */
  swigluMany?(ffns: readonly GatedFFN[], x: Vec, n: number, dim: number, out: Vec): void;
  /** optional fast absorbed decode attention, dense causal keys only (mla.ts `attendAbsorbed`); absent → the plain loops */
  absorbed?(
    w: AttentionWeights,
    cfg: ModelConfig,
    pr: Projections,
    n: number,
    pos0: number,
    lat: LatentRows,
  ): Float64Array;
}

export const plainKernels: MatKernels = plainProducts;
