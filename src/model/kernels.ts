import type { ModelConfig } from "./config.js";
import type { LatentRows, Projections } from "./mla-types.js";
import type { AttentionWeights } from "./weights.js";
import { plainProducts, type MatProducts } from "../tensor/products.js";

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
