import type { QMatrix } from "./qmatrix.js";
import type { Vec } from "./ops.js";

/** one product of `MatProducts.matmulMany`: y[t·yStride + r] = Σ_c W[r][c]·x[t·xStride + c] for t < n */
export interface Product {
  readonly w: QMatrix;
  readonly x: Vec;
  readonly n: number;
  readonly xStride: number;
  readonly y: Vec;
  readonly yStride: number;
}

/**
 * Weight-matrix products over batches of row vectors. `plainProducts` dequantizes one row at a time and accumulates
 * in float64 (the reference); fast backends implement the same contract and are checked against it.
 */
export interface MatProducts {
  readonly name: string;
  /** y[t·yStride + r] = Σ_c W[r][c]·x[t·xStride + c] for t < n, r < W.rows */
  matmul(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void;
  /** y[t·yStride + c] = Σ_r W[r][c]·x[t·xStride + r] for t < n, c < W.cols */
  matmulT(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void;
  /** optional: several independent products at once (one dispatch on a threaded backend); absent → one matmul each */
  matmulMany?(ps: readonly Product[]): void;
}

export const plainProducts: MatProducts = {
  name: "plain",
  matmul: (w, x, n, xStride, y, yStride) => w.matmul(x, n, xStride, y, yStride),
  matmulT: (w, x, n, xStride, y, yStride) => w.matmulT(x, n, xStride, y, yStride),
};
