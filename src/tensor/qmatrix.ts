import { GGMLType, typeName } from "../gguf/types.js";
import { dequantizeRow, rowBytes } from "../quant/index.js";
import type { Vec } from "./ops.js";

/**
 * A weight matrix kept in its GGUF quant type: `rows` rows of `cols` contiguous values (ggml ne = {cols, rows}).
 * Products dequantize one row at a time into a scratch buffer, so memory stays at the quantized size.
 */
export class QMatrix {
  readonly rowBytes: number;
  private readonly scratch: Float32Array;
  /** zero-copy view of F32 data, when the bytes are 4-aligned */
  private readonly f32: Float32Array | undefined;

  constructor(
    readonly name: string,
    readonly type: number,
    readonly cols: number,
    readonly rows: number,
    readonly data: Uint8Array,
  ) {
    this.rowBytes = rowBytes(type, cols);
    if (data.length !== this.rowBytes * rows) {
      throw new Error(
        `${name}: ${typeName(type)} ${cols}x${rows} needs ${this.rowBytes * rows} bytes, got ${data.length}`,
      );
    }
    this.scratch = new Float32Array(cols);
    this.f32 =
      type === GGMLType.F32 && data.byteOffset % 4 === 0
        ? new Float32Array(data.buffer, data.byteOffset, cols * rows)
        : undefined;
  }

  /** Rows [first, first+count) as a matrix sharing this one's bytes (e.g. one expert of a stacked tensor, one head). */
  slice(first: number, count: number, name = this.name): QMatrix {
    return new QMatrix(
      name,
      this.type,
      this.cols,
      count,
      this.data.subarray(first * this.rowBytes, (first + count) * this.rowBytes),
    );
  }

  /** Row r as float32 (a view into a shared scratch buffer: copy it to keep it). */
  row(r: number): Float32Array {
    if (this.f32 !== undefined) return this.f32.subarray(r * this.cols, (r + 1) * this.cols);
    dequantizeRow(this.type, this.data, r * this.rowBytes, this.scratch, 0, this.cols);
    return this.scratch;
  }

  /** Whole matrix as float32, row-major [rows × cols]. */
  toF32(): Float32Array {
    const out = new Float32Array(this.rows * this.cols);
    for (let r = 0; r < this.rows; r++) out.set(this.row(r), r * this.cols);
    return out;
  }

  /** y[yOff + r] = Σ_c W[r][c]·x[xOff + c] */
  matvec(x: Vec, xOff: number, y: Vec, yOff: number): void {
    const n = this.cols;
    for (let r = 0; r < this.rows; r++) {
      const w = this.row(r);
      let s = 0;
      for (let c = 0; c < n; c++) s += w[c] * x[xOff + c];
      y[yOff + r] = s;
    }
  }

  /** y[yOff + c] = Σ_r W[r][c]·x[xOff + r]  (the transposed product) */
  matvecT(x: Vec, xOff: number, y: Vec, yOff: number): void {
    const n = this.cols;
    y.fill(0, yOff, yOff + n);
    for (let r = 0; r < this.rows; r++) {
      const w = this.row(r);
      const a = x[xOff + r];
      for (let c = 0; c < n; c++) y[yOff + c] += w[c] * a;
    }
  }

  /**
   * Batched product over `n` inputs laid out with stride `xStride` / outputs with stride `yStride`:
   * each row is dequantized once and used for every input.
   */
  matmul(x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    const cols = this.cols;
    for (let r = 0; r < this.rows; r++) {
      const w = this.row(r);
      for (let t = 0; t < n; t++) {
        const xo = t * xStride;
        let s = 0;
        for (let c = 0; c < cols; c++) s += w[c] * x[xo + c];
        y[t * yStride + r] = s;
      }
    }
  }

  /** Batched transposed product: y[t·yStride + c] = Σ_r W[r][c]·x[t·xStride + r] for t < n. */
  matmulT(x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    const cols = this.cols;
    for (let t = 0; t < n; t++) y.fill(0, t * yStride, t * yStride + cols);
    for (let r = 0; r < this.rows; r++) {
      const w = this.row(r);
      for (let t = 0; t < n; t++) {
        const a = x[t * xStride + r];
        const yo = t * yStride;
        for (let c = 0; c < cols; c++) y[yo + c] += w[c] * a;
      }
    }
  }
}
