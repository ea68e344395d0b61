/**
 * Q8_0 block scales that belong to the neighbouring block. ggml's Q8_0 stores per 32 values an f16 scale
 * d = max|x|/127; the scales of one row follow that row's magnitude, so across rows the first and last block's
 * (log) scale correlates with the row's interior blocks more than with the next or previous row's. A scale array
 * written one block off gives each row's last block the next row's first scale (or its first block the previous
 * row's last): the correlation then favours the neighbouring row. Rows of similar magnitude carry no signal
 * (both correlations near 0) and are not judged; the cut scales with 1/√rows so that noise cannot trip it.
 */
import { f16ToF32 } from "../quant/f16.js";
import { corr } from "./correlation.js";

const BLOCK_BYTES = 34;

export interface ScaleAlignment {
  readonly rows: number;
  /** corr(last block, own row's interior) and corr(last block, next row's interior) */
  readonly lastOwn: number;
  readonly lastNext: number;
  /** corr(first block, own row's interior) and corr(first block, previous row's interior) */
  readonly firstOwn: number;
  readonly firstPrev: number;
}

/** Collects per-row log scales of a Q8_0 tensor while it is streamed (rows of ≥ 3 blocks). */
export class Q8ScaleCollector {
  private readonly interior: Float64Array;
  private readonly first: Float64Array;
  private readonly last: Float64Array;

  constructor(
    private readonly blocksPerRow: number,
    readonly rows: number,
  ) {
    this.interior = new Float64Array(rows);
    this.first = new Float64Array(rows);
    this.last = new Float64Array(rows);
  }

  static applies(type: number, cols: number, rows: number): boolean {
    return type === 8 && cols / 32 >= 3 && rows >= 64;
  }

  /** `bytes` holds rows [row0, row0 + n) */
  add(bytes: Uint8Array, row0: number, n: number): void {
    const nb = this.blocksPerRow;
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const ls = (r: number, b: number): number =>
      Math.log(Math.abs(f16ToF32(dv.getUint16((r * nb + b) * BLOCK_BYTES, true))) + 1e-12);
    for (let r = 0; r < n; r++) {
      let s = 0;
      for (let b = 1; b < nb - 1; b++) s += ls(r, b);
      this.interior[row0 + r] = s / (nb - 2);
      this.first[row0 + r] = ls(r, 0);
      this.last[row0 + r] = ls(r, nb - 1);
    }
  }

  result(): ScaleAlignment {
    const n = this.rows;
    const own = this.interior.subarray(1, n - 1);
    return {
      rows: n,
      lastOwn: corr(this.last.subarray(1, n - 1), own),
      lastNext: corr(this.last.subarray(1, n - 1), this.interior.subarray(2)),
      firstOwn: corr(this.first.subarray(1, n - 1), own),
      firstPrev: corr(this.first.subarray(1, n - 1), this.interior.subarray(0, n - 2)),
    };
  }
}

/** The margin a neighbour's correlation must beat the own row's by: ≥ 0.2 and 5 noise units (1/√rows). */
export function misalignmentCut(rows: number): number {
  return Math.max(0.2, 5 / Math.sqrt(rows));
}

/** "next" / "previous" when the scales fit the neighbouring row better, else undefined. */
export function misaligned(a: ScaleAlignment): "next" | "previous" | undefined {
  const cut = misalignmentCut(a.rows);
  if (a.lastNext - a.lastOwn > cut) return "next";
  if (a.firstPrev - a.firstOwn > cut) return "previous";
  return undefined;
}
