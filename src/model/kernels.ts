import type { ModelConfig } from "./config.js";
import type { LatentRows, Projections } from "./mla.js";
import type { AttentionWeights } from "./weights.js";
import type { QMatrix } from "../tensor/qmatrix.js";
import type { Vec } from "../tensor/ops.js";

/** one product of `MatKernels.matmulMany`: y[t·yStride + r] = Σ_c W[r][c]·x[t·xStride + c] for t < n */
export interface Product {
  readonly w: QMatrix;
  readonly x: Vec;
  readonly n: number;
  readonly xStride: number;
  readonly y: Vec;
  readonly yStride: number;
}

/**
 * The matrix products of a forward pass. The reference path always uses `plainKernels` (row dequantization, float64
 * accumulation); fast backends implement the same contract and are checked against it.
 */
export interface MatKernels {
  readonly name: string;
  /** y[t·yStride + r] = Σ_c W[r][c]·x[t·xStride + c] for t < n, r < W.rows */
  matmul(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void;
  /** y[t·yStride + c] = Σ_r W[r][c]·x[t·xStride + r] for t < n, c < W.cols */
  matmulT(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void;
  /** optional: several independent products at once (one dispatch on a threaded backend); absent → one matmul each */
  matmulMany?(ps: readonly Product[]): void;
  /** optional fast attention, dense causal keys only (mla.ts `mha`): o [n × H·V]; absent → the plain loops */
  mha?(cfg: ModelConfig, pr: Projections, n: number, pos0: number, kNope: Float64Array, v: Float64Array, lat: LatentRows): Float64Array;
  /** optional fast absorbed decode attention, dense causal keys only (mla.ts `attendAbsorbed`); absent → the plain loops */
  absorbed?(w: AttentionWeights, cfg: ModelConfig, pr: Projections, n: number, pos0: number, lat: LatentRows): Float64Array;
}

export const plainKernels: MatKernels = {
  name: "plain",
  matmul: (w, x, n, xStride, y, yStride) => w.matmul(x, n, xStride, y, yStride),
  matmulT: (w, x, n, xStride, y, yStride) => w.matmulT(x, n, xStride, y, yStride),
};
