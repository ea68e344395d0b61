/// <reference types="@webgpu/types" />
/** Helpers every family's launcher shares: the output ranges a dispatch declares for --check-writes, 1-D grids. */
import type { OutRange } from "../core/runtime.js";

/** The byte ranges of n rows of `width` floats at off + t·stride. */
export function rows(buffer: GPUBuffer, off: number, n: number, stride: number, width: number): OutRange[] {
  if (n === 0 || width === 0) return [];
  if (stride === width || n === 1) return [{ buffer, offset: off * 4, size: ((n - 1) * stride + width) * 4 }];
  return Array.from({ length: n }, (_, t) => ({ buffer, offset: (off + t * stride) * 4, size: width * 4 }));
}

export function grid1(n: number, wg: number): { gx: number; gy: number } {
  const groups = Math.max(1, Math.ceil(n / wg));
  const gx = Math.min(groups, 65535);
  return { gx, gy: Math.ceil(groups / gx) };
}
