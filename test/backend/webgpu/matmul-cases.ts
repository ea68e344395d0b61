// Shared cases of the matrix-matrix kernels' parity tests (rowtile.test.ts): plain products with
// strides, offsets, acc and SwiGLU; the per-head batch form and row pieces; expert lists with uneven pair counts. Each
// checks the GPU result against the CPU reference (QMatrix.matmul, float64) on fresh random inputs.
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import type { GpuRuntime, RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import {
  expertListWords,
  expertLists,
  GpuMatrix,
  matmul,
  matmulGather,
  matmulGatherSwiGLU,
  matmulSwiGLU,
  matvecKernel,
} from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { xq8Bytes } from "../../../src/backend/webgpu/kernels/matmul/xq8.wgsl.js";
import { f32, relErr, type Rng, u32 } from "./helpers.js";

export const MATMUL_TOL = 2e-5;
const TOL = MATMUL_TOL;

const silu = (v: number): number => v / (1 + Math.exp(-v));

export interface KernelCheck {
  /** the kernel every product of the cases must take (matched against its WGSL) */
  readonly kernel: RegExp;
  /** also gate·up as one dual product (matmulSwiGLU / matmulGatherSwiGLU: one dispatch per piece) */
  readonly dual?: boolean;
  /**
   * the kernel quantizes x to int8 per 32 values (activations "q8"): x is first moved off the rounding boundaries
   * (snapQ8) and the reference multiplies by x as quantized (q8Values), so the tolerance stays the f32 one
   */
  readonly q8?: boolean;
  /** with q8: x in two int8 pieces, 15 bits per 32 values (d = amax/16256; tune rowTileX16) */
  readonly x16?: boolean;
  /** with q8: x quantized first by a pass of its own (xq8.wgsl.ts, tune q8X): one dispatch more a product */
  readonly xq8?: boolean;
}

/** The largest integer x quantizes to per 32 values: 127 (one int8), 16256 (two int8 pieces: 127·128). */
export const X16_LEVELS = 16256;
const levelsOf = (check: Partial<KernelCheck>): number => (check.x16 === true ? X16_LEVELS : 127);

/** Rows of x as a q8 kernel reads them: `count` rows of `width` values from `off`, `stride` apart, to |q| ≤ `levels`. */
interface XRows {
  readonly off: number;
  readonly count: number;
  readonly stride: number;
  readonly width: number;
  readonly levels: number;
}

/** x as a q8 kernel sees and quantizes it: f32, d = amax/levels per 32 values, xq = round(x/d), nearest even. */
function q8Blocks(x: Float64Array, rows: XRows, each: (i: number, v: number, d: number) => void): void {
  for (let r = 0; r < rows.count; r++)
    for (let b = 0; b < rows.width; b += 32) {
      const at = rows.off + r * rows.stride + b;
      let amax = 0;
      for (let k = 0; k < 32; k++) amax = Math.max(amax, Math.abs(Math.fround(x[at + k])));
      const d = Math.fround(amax / rows.levels);
      const id = d > 0 ? Math.fround(1 / d) : 0;
      for (let k = 0; k < 32; k++) each(at + k, Math.fround(Math.fround(x[at + k]) * id), d);
    }
}

/**
 * Move every x value whose x/d lies within a window (1e-3 of a step at 127 levels, 2e-2 at 16256: the f32 error of
 * x·(1/d) grows with |x/d|) of a rounding boundary twice the window·d towards zero, so that the GPU's division (WGSL
 * allows 2.5 ULP) cannot round it the other way than q8Values; each block's largest value stays.
 */
export function snapQ8(x: Float64Array, off: number, count: number, stride: number, width: number, levels = 127): void {
  const w = levels > 127 ? 2e-2 : 1e-3;
  q8Blocks(x, { off, count, stride, width, levels }, (i, v, d) => {
    if (Math.abs((Math.abs(v) % 1) - 0.5) < w) x[i] -= Math.sign(x[i]) * 2 * w * d;
  });
}

const roundEven = (v: number): number => {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
};

/** A copy of x with its rows' values replaced by their q8 values d·xq (the other entries kept). */
export function q8Values(
  x: Float64Array,
  off: number,
  count: number,
  stride: number,
  width: number,
  levels = 127,
): Float64Array {
  const out = Float64Array.from(x);
  q8Blocks(x, { off, count, stride, width, levels }, (i, v, d) => {
    out[i] = d * roundEven(v);
  });
  return out;
}

/** Plain products [type, cols, rows, n]: overwrite (checked for complete writes), add, SwiGLU with y holding the gate values, and dual. */
export async function checkPlainProducts(
  r: GpuRuntime,
  rng: Rng,
  cases: readonly (readonly [number, number, number, number])[],
  check: KernelCheck,
): Promise<void> {
  for (const [type, cols, rows, n] of cases) {
    const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
    const w2 =
      check.dual === true ? new QMatrix("w2", type, cols, rows, quantize(type, rng.f32(cols * rows), cols)) : undefined;
    const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
    assert.match(matvecKernel(r, g, n, false, true).code, check.kernel);
    const xStride = cols + 4;
    const xOff = 8;
    const yStride = rows + 3;
    const yOff = 5;
    const x = rng.f64(xOff + n * xStride);
    if (check.q8 === true) snapQ8(x, xOff, n, xStride, cols, levelsOf(check));
    const xr = check.q8 === true ? q8Values(x, xOff, n, xStride, cols, levelsOf(check)) : x;
    const y0 = rng.f64(yOff + n * yStride);
    const prod = new Float64Array(n * yStride);
    w.matmul(xr.subarray(xOff), n, xStride, prod, yStride);
    const inRow = (i: number): boolean => i >= yOff && (i - yOff) % yStride < rows && i < yOff + n * yStride;
    const label = `${typeName(type)} ${rows}x${cols} n=${n}`;
    const yb = r.buffer(y0.length * 4);
    matmul(r, g, f32(r, x), yb, { n, xStride, yStride, xOff, yOff });
    const got = await r.readF32(yb);
    for (let t = 0; t < n; t++) {
      const a = got.subarray(yOff + t * yStride, yOff + t * yStride + rows);
      const b = prod.subarray(t * yStride, t * yStride + rows);
      assert.ok(relErr(a, b) < TOL, `${label} overwrite t=${t}: err ${relErr(a, b)}`);
    }
    const yAcc = f32(r, y0);
    matmul(r, g, f32(r, x), yAcc, { n, xStride, yStride, xOff, yOff, acc: true });
    const wantAcc = Float64Array.from(y0, (v, i) => (inRow(i) ? v + prod[i - yOff] : v));
    assert.ok(relErr(await r.readF32(yAcc), wantAcc) < TOL, `${label} acc`);
    const yGlu = f32(r, y0);
    matmul(r, g, f32(r, x), yGlu, { n, xStride, yStride, xOff, yOff, glu: true });
    const wantGlu = Float64Array.from(y0, (v, i) => (inRow(i) ? silu(v) * prod[i - yOff] : v));
    assert.ok(
      relErr(await r.readF32(yGlu), wantGlu) < TOL,
      `${label} glu: err ${relErr(await r.readF32(yGlu), wantGlu)}`,
    );
    if (w2 !== undefined) {
      // one dual dispatch: silu(W·x)·(W2·x)
      const g2 = GpuMatrix.upload(r, "w2", type, cols, rows, w2.data);
      const prod2 = new Float64Array(n * yStride);
      w2.matmul(xr.subarray(xOff), n, xStride, prod2, yStride);
      const before = r.stats.dispatches;
      const yDual = f32(r, y0);
      matmulSwiGLU(r, g, g2, f32(r, x), yDual, { n, xStride, yStride, xOff, yOff });
      const pass = check.xq8 === true ? 1 : 0;
      assert.equal(r.stats.dispatches - before, 1 + pass, `${label} dual: one dispatch (and x's quantizing pass)`);
      const wantDual = Float64Array.from(y0, (v, i) => (inRow(i) ? silu(prod[i - yOff]) * prod2[i - yOff] : v));
      assert.ok(
        relErr(await r.readF32(yDual), wantDual) < TOL,
        `${label} dual: err ${relErr(await r.readF32(yDual), wantDual)}`,
      );
      g2.destroy();
    }
    g.destroy();
  }
}

/** The per-head batch form (whole heads in one piece, and 2 heads per piece) and a plain matrix in row pieces (Q8_0). */
export async function checkHeadsAndPieces(
  runtime: (opts: RuntimeOptions) => GpuRuntime,
  rng: Rng,
  q8 = false,
  levels = 127,
): Promise<void> {
  const type = GGMLType.Q8_0;
  const cols = 128;
  const rows = 67;
  const H = 3;
  const n = 9;
  const rb = 136; // Q8_0 row bytes at 128 columns
  for (const [maxBindingBytes, label] of [
    [undefined, "one piece"],
    [2 * rows * rb + 255, "heads in pieces"],
  ] as const) {
    const r = runtime(maxBindingBytes !== undefined ? { maxBindingBytes } : {});
    const all = new QMatrix("h", type, cols, rows * H, quantize(type, rng.f32(cols * rows * H), cols));
    const g = GpuMatrix.upload(r, "h", type, cols, rows, all.data, H);
    const xStride = cols * H;
    const yStride = rows * H + 1;
    const x = rng.f64(n * xStride);
    if (q8) snapQ8(x, 0, n, xStride, xStride, levels);
    const xr = q8 ? q8Values(x, 0, n, xStride, xStride, levels) : x;
    const want = new Float64Array(n * yStride);
    const tmp = new Float64Array(n * rows);
    for (let h = 0; h < H; h++) {
      const xh = Float64Array.from(
        { length: n * cols },
        (_, i) => xr[Math.floor(i / cols) * xStride + h * cols + (i % cols)],
      );
      all.slice(h * rows, rows).matmul(xh, n, cols, tmp, rows);
      for (let t = 0; t < n; t++) for (let i = 0; i < rows; i++) want[t * yStride + h * rows + i] = tmp[t * rows + i];
    }
    const yb = r.buffer(want.length * 4);
    matmul(r, g, f32(r, x), yb, { n, xStride, yStride, batch: { count: H, xBatch: cols, yBatch: rows } });
    const got = await r.readF32(yb);
    for (let t = 0; t < n; t++) {
      const a = got.subarray(t * yStride, t * yStride + rows * H);
      const b = want.subarray(t * yStride, t * yStride + rows * H);
      assert.ok(relErr(a, b) < TOL, `${label} t=${t}: err ${relErr(a, b)}`);
    }
    g.destroy();
  }
  const r = runtime({ maxBindingBytes: 30 * rb + 255 });
  const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
  const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
  assert.ok(g.pieces.length > 1);
  const x = rng.f64(n * cols);
  if (q8) snapQ8(x, 0, n, cols, cols, levels);
  const want = new Float64Array(n * rows);
  w.matmul(q8 ? q8Values(x, 0, n, cols, cols, levels) : x, n, cols, want, rows);
  const yb = r.buffer(want.length * 4);
  matmul(r, g, f32(r, x), yb, { n, xStride: cols, yStride: rows });
  assert.ok(relErr(await r.readF32(yb), want) < TOL, `row pieces: err ${relErr(await r.readF32(yb), want)}`);
  g.destroy();
}

/**
 * Expert lists over 6 experts, 2 slots a token: none for two experts, one pair for one, more than any tile (45) for
 * another; each [type, cols, rows, row bytes] in one piece and with 2 experts a piece; overwrite, acc, glu (and dual).
 */
export async function checkExpertLists(
  runtime: (opts: RuntimeOptions) => GpuRuntime,
  rng: Rng,
  types: readonly (readonly [number, number, number, number])[],
  check: Partial<KernelCheck> = {},
): Promise<void> {
  const E = 6;
  const K = 2;
  const counts = [0, 1, 45, 7, 0, 13];
  const pairs = counts.reduce((a, b) => a + b, 0);
  const nTok = pairs / K;
  const ids = counts.flatMap((c, e) => Array.from({ length: c }, () => e));
  for (let i = ids.length - 1; i > 0; i--) {
    const j = rng.int(0, i + 1);
    [ids[i], ids[j]] = [ids[j], ids[i]];
  }
  for (const [type, cols, rows, rb] of types) {
    for (const maxBindingBytes of [undefined, 2 * rows * rb + 255]) {
      const r = runtime(maxBindingBytes !== undefined ? { maxBindingBytes } : {});
      const all = new QMatrix("e", type, cols, rows * E, quantize(type, rng.f32(cols * rows * E), cols));
      const all2 =
        check.dual === true
          ? new QMatrix("u", type, cols, rows * E, quantize(type, rng.f32(cols * rows * E), cols))
          : undefined;
      const g = GpuMatrix.upload(r, "e", type, cols, rows, all.data, E);
      assert.equal(g.pieces.length > 1, maxBindingBytes !== undefined);
      const xBatch = cols + 4;
      const xOff = 4;
      const yBatch = rows; // the launcher checks one contiguous span of outputs
      const yOff = 3;
      const x = rng.f64(xOff + nTok * xBatch);
      if (check.q8 === true) snapQ8(x, xOff, nTok, xBatch, cols, levelsOf(check));
      const xr = check.q8 === true ? q8Values(x, xOff, nTok, xBatch, cols, levelsOf(check)) : x;
      const product = (m: QMatrix): Float64Array => {
        const out = new Float64Array(pairs * rows);
        for (let b = 0; b < pairs; b++)
          m.slice(ids[b] * rows, rows).matmul(
            xr.subarray(xOff + Math.floor(b / K) * xBatch),
            1,
            cols,
            out.subarray(b * rows),
            rows,
          );
        return out;
      };
      const prod = product(all);
      const idsB = u32(r, ids);
      const lists = r.buffer(expertListWords(pairs, E) * 4);
      expertLists(r, idsB, lists, { pairs, E });
      const args = { pairs, xDiv: K, xBatch, xOff, yBatch, yOff, mode: "experts" as const, lists };
      if (check.kernel !== undefined) assert.match(matvecKernel(r, g, pairs, "experts-list", true).code, check.kernel);
      const y0 = rng.f64(yOff + pairs * yBatch);
      const inRow = (i: number): boolean => i >= yOff && (i - yOff) % yBatch < rows && i < yOff + pairs * yBatch;
      const at = (p: Float64Array, i: number): number =>
        p[Math.floor((i - yOff) / yBatch) * rows + ((i - yOff) % yBatch)];
      const label = `${typeName(type)} ${rows}x${cols}${maxBindingBytes !== undefined ? " pieces" : ""}`;
      const yb = r.buffer(y0.length * 4);
      matmulGather(r, g, f32(r, x), yb, idsB, args);
      const got = await r.readF32(yb);
      for (let b = 0; b < pairs; b++) {
        const a = got.subarray(yOff + b * yBatch, yOff + b * yBatch + rows);
        assert.ok(
          relErr(a, prod.subarray(b * rows, (b + 1) * rows)) < TOL,
          `${label} pair ${b} (expert ${ids[b]}): err ${relErr(a, prod.subarray(b * rows, (b + 1) * rows))}`,
        );
      }
      const yAcc = f32(r, y0);
      matmulGather(r, g, f32(r, x), yAcc, idsB, { ...args, acc: true });
      const wantAcc = Float64Array.from(y0, (v, i) => (inRow(i) ? v + at(prod, i) : v));
      assert.ok(relErr(await r.readF32(yAcc), wantAcc) < TOL, `${label} acc`);
      const yGlu = f32(r, y0);
      matmulGather(r, g, f32(r, x), yGlu, idsB, { ...args, glu: true });
      const wantGlu = Float64Array.from(y0, (v, i) => (inRow(i) ? silu(v) * at(prod, i) : v));
      assert.ok(relErr(await r.readF32(yGlu), wantGlu) < TOL, `${label} glu`);
      if (all2 !== undefined) {
        const g2 = GpuMatrix.upload(r, "u", type, cols, rows, all2.data, E);
        const prod2 = product(all2);
        const before = r.stats.dispatches;
        const yDual = f32(r, y0);
        matmulGatherSwiGLU(r, g, g2, f32(r, x), yDual, idsB, args);
        // (the pass's buffer past a small binding limit: the kernel quantizes x itself)
        const pass = check.xq8 === true && xq8Bytes(nTok, cols) <= r.maxBindingBytes ? 1 : 0;
        assert.equal(
          r.stats.dispatches - before,
          g.pieces.length + pass,
          `${label} dual: one dispatch per piece (and x's quantizing pass)`,
        );
        const wantDual = Float64Array.from(y0, (v, i) => (inRow(i) ? silu(at(prod, i)) * at(prod2, i) : v));
        assert.ok(
          relErr(await r.readF32(yDual), wantDual) < TOL,
          `${label} dual: err ${relErr(await r.readF32(yDual), wantDual)}`,
        );
        g2.destroy();
      }
      g.destroy();
    }
  }
}
