// The tiled matrix-matrix kernel (products of ≥ 8 tokens, expert lists) against the CPU reference on fresh random
// inputs: partial row and token tiles, column counts that are not a multiple of the shared-memory step, strided and
// offset x/y, accumulation and SwiGLU, the per-head batch form, weights in pieces, and expert lists with uneven pair
// counts (experts with none, one with more pairs than a tile holds). Each case runs under a few tile shapes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/backend/cpu/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime, type KernelTuning, type RuntimeOptions } from "../../../src/backend/webgpu/runtime.js";
import { expertListWords, expertLists, GpuMatrix, matmul, matmulGather, matvecKernel, tiledShape } from "../../../src/backend/webgpu/matrix.js";
import { f32, gpuOrSkip, relErr, Rng, u32 } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 2e-5;
const TILED = /var<workgroup> ws:/;

/**
 * default shapes (16-row tiles for these small products); 64-row tiles; a narrow tile with more threads than it can use and a step that leaves a partial chunk of 1408
 * columns; a tall one with small steps; one with few threads (4 rows × 4 tokens each)
 */
const tunings: readonly KernelTuning[] = [{}, { tiledFill: 0 }, { tiledRows: 32, tiledTokens: 8, tiledK: 256, tiledThreads: 256 }, { tiledRows: 128, tiledTokens: 16, tiledK: 16 }, { tiledRows: 32, tiledTokens: 16, tiledK: 32, tiledThreads: 32 }];

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}): GpuRuntime {
  return new GpuRuntime(rt!.info, { checkWrites: true, ...opts, tune: { tiled: 1, ...tune } });
}

test("selection: with tune.tiled = 1, n ≥ 8 plain products and expert lists take the tiled kernel, n < 8 does not; off by default and with tiled = 0", { skip }, () => {
  const r = runtime({});
  const byDefault = new GpuRuntime(rt!.info, {});
  const off = runtime({ tiled: 0 });
  const g = GpuMatrix.upload(r, "w", GGMLType.Q4_K, 256, 67, quantize(GGMLType.Q4_K, new Rng(1).f32(256 * 67), 256));
  const e = GpuMatrix.upload(r, "e", GGMLType.Q4_K, 256, 19, quantize(GGMLType.Q4_K, new Rng(2).f32(256 * 19 * 4), 256), 4);
  assert.match(matvecKernel(r, g, 8, false, true).code, TILED);
  assert.match(matvecKernel(r, g, 512, false, true).code, TILED);
  assert.doesNotMatch(matvecKernel(r, g, 7, false, true).code, TILED);
  assert.doesNotMatch(matvecKernel(r, g, 64, false, false).code, TILED); // unaligned x: scalar kernels
  assert.match(matvecKernel(r, e, 24, "experts-list", true).code, TILED);
  assert.doesNotMatch(matvecKernel(r, e, 24, "experts", true).code, TILED);
  assert.doesNotMatch(matvecKernel(r, e, 24, true, true).code, TILED);
  assert.doesNotMatch(matvecKernel(off, g, 64, false, true).code, TILED);
  assert.doesNotMatch(matvecKernel(byDefault, g, 64, false, true).code, TILED);
  assert.doesNotMatch(matvecKernel(byDefault, e, 24, "experts-list", true).code, TILED);
  assert.doesNotMatch(matvecKernel(off, e, 24, "experts-list", true).code, TILED);
  // tiles: tokens rounded up to a power of two within 8..32, pairs per expert likewise; knobs override
  // row tiles shrink (to 16) while a plain product's grid has fewer than tiledFill workgroups
  assert.deepEqual(tiledShape(r, g, 9, "plain", 67), { rows: 16, tokens: 16, k: 64, threads: 64 });
  assert.deepEqual(tiledShape(r, g, 64, "plain", 2048), { rows: 16, tokens: 32, k: 64, threads: 64 });
  assert.deepEqual(tiledShape(r, g, 16, "plain", 2048 * 16), { rows: 64, tokens: 16, k: 64, threads: 64 });
  assert.deepEqual(tiledShape(r, g, 512, "plain", 2048), { rows: 64, tokens: 32, k: 64, threads: 128 });
  assert.deepEqual(tiledShape(runtime({ tiledFill: 0 }), g, 9, "plain", 67), { rows: 64, tokens: 16, k: 64, threads: 64 });
  assert.deepEqual(tiledShape(r, e, 24, "experts-list"), { rows: 64, tokens: 8, k: 64, threads: 64 });
  assert.deepEqual(tiledShape(runtime({ tiledRows: 32, tiledTokens: 64, tiledK: 32, tiledThreads: 256 }), g, 9, "plain"), { rows: 32, tokens: 64, k: 32, threads: 256 });
  assert.throws(() => tiledShape(runtime({ tiledRows: 48 }), g, 9, "plain"), /power of two/);
  g.destroy();
  e.destroy();
});

for (const tune of tunings) {
  test(`tiled plain products ${JSON.stringify(tune)}: types, odd rows, n = 8 / 9 / 33, strides, acc, SwiGLU`, { skip }, async () => {
    const r = runtime(tune);
    const rng = new Rng(11 + JSON.stringify(tune).length);
    const cases: [number, number, number, number][] = [
      [GGMLType.Q4_K, 2048, 67, 9],
      [GGMLType.Q6_K, 512, 130, 33],
      [GGMLType.Q5_0, 1408, 67, 8],
      [GGMLType.Q8_0, 1408, 130, 9],
      [GGMLType.F32, 260, 67, 33],
      [GGMLType.Q5_K, 256, 13, 8],
      [GGMLType.IQ4_XS, 256, 70, 9],
    ];
    for (const [type, cols, rows, n] of cases) {
      const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
      const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
      assert.match(matvecKernel(r, g, n, false, true).code, TILED);
      const xStride = cols + 4;
      const xOff = 8;
      const yStride = rows + 3;
      const yOff = 5;
      const x = rng.f64(xOff + n * xStride);
      const y0 = rng.f64(yOff + n * yStride);
      const prod = new Float64Array(n * yStride);
      w.matmul(x.subarray(xOff), n, xStride, prod, yStride);
      const inRow = (i: number): boolean => i >= yOff && (i - yOff) % yStride < rows && i < yOff + n * yStride;
      const label = `${typeName(type)} ${rows}x${cols} n=${n}`;
      // overwrite (checked for complete writes), add, SwiGLU with y holding the gate values
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
      const wantAcc = Float64Array.from(y0, (v, i) => (inRow(i) ? v + prod[i - yOff]! : v));
      assert.ok(relErr(await r.readF32(yAcc), wantAcc) < TOL, `${label} acc`);
      const yGlu = f32(r, y0);
      matmul(r, g, f32(r, x), yGlu, { n, xStride, yStride, xOff, yOff, glu: true });
      const wantGlu = Float64Array.from(y0, (v, i) => (inRow(i) ? (v / (1 + Math.exp(-v))) * prod[i - yOff]! : v));
      assert.ok(relErr(await r.readF32(yGlu), wantGlu) < TOL, `${label} glu: err ${relErr(await r.readF32(yGlu), wantGlu)}`);
      g.destroy();
    }
  });

  test(`tiled per-head batch form and row pieces ${JSON.stringify(tune)}`, { skip }, async () => {
    const rng = new Rng(23 + JSON.stringify(tune).length);
    const type = GGMLType.Q8_0;
    const cols = 128;
    const rows = 67;
    const H = 3;
    const n = 9;
    const rb = 136; // Q8_0 row bytes at 128 columns
    // heads: whole heads per piece (2 per binding); plain: row pieces of 30 rows
    for (const [maxBindingBytes, label] of [[undefined, "one piece"], [2 * rows * rb + 255, "heads in pieces"]] as const) {
      const r = runtime(tune, maxBindingBytes !== undefined ? { maxBindingBytes } : {});
      const all = new QMatrix("h", type, cols, rows * H, quantize(type, rng.f32(cols * rows * H), cols));
      const g = GpuMatrix.upload(r, "h", type, cols, rows, all.data, H);
      const xStride = cols * H;
      const yStride = rows * H + 1;
      const x = rng.f64(n * xStride);
      const want = new Float64Array(n * yStride);
      const tmp = new Float64Array(n * rows);
      for (let h = 0; h < H; h++) {
        const xh = Float64Array.from({ length: n * cols }, (_, i) => x[Math.floor(i / cols) * xStride + h * cols + (i % cols)]!);
        all.slice(h * rows, rows).matmul(xh, n, cols, tmp, rows);
        for (let t = 0; t < n; t++) for (let i = 0; i < rows; i++) want[t * yStride + h * rows + i] = tmp[t * rows + i]!;
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
    const r = runtime(tune, { maxBindingBytes: 30 * rb + 255 });
    const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
    const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
    assert.ok(g.pieces.length > 1);
    const x = rng.f64(n * cols);
    const want = new Float64Array(n * rows);
    w.matmul(x, n, cols, want, rows);
    const yb = r.buffer(want.length * 4);
    matmul(r, g, f32(r, x), yb, { n, xStride: cols, yStride: rows });
    assert.ok(relErr(await r.readF32(yb), want) < TOL, `row pieces: err ${relErr(await r.readF32(yb), want)}`);
    g.destroy();
  });

  test(`tiled expert lists ${JSON.stringify(tune)}: uneven pairs per expert, empty experts, pieces, acc, SwiGLU`, { skip }, async () => {
    const rng = new Rng(41 + JSON.stringify(tune).length);
    const E = 6;
    const K = 2;
    // pairs per expert: none for two experts, one for one, more than any tile (45) for another
    const counts = [0, 1, 45, 7, 0, 13];
    const pairs = counts.reduce((a, b) => a + b, 0);
    const nTok = pairs / K;
    const ids = counts.flatMap((c, e) => Array.from({ length: c }, () => e));
    for (let i = ids.length - 1; i > 0; i--) {
      const j = rng.int(0, i + 1);
      [ids[i], ids[j]] = [ids[j]!, ids[i]!];
    }
    for (const [type, cols, rows, rb] of [[GGMLType.Q4_K, 256, 67, 144], [GGMLType.Q5_0, 1408, 19, 968]] as const) {
      for (const maxBindingBytes of [undefined, 2 * rows * rb + 255]) {
        const r = runtime(tune, maxBindingBytes !== undefined ? { maxBindingBytes } : {});
        const all = new QMatrix("e", type, cols, rows * E, quantize(type, rng.f32(cols * rows * E), cols));
        const g = GpuMatrix.upload(r, "e", type, cols, rows, all.data, E);
        assert.equal(g.pieces.length > 1, maxBindingBytes !== undefined);
        const xBatch = cols + 4;
        const xOff = 4;
        const yBatch = rows; // the launcher checks one contiguous span of outputs
        const yOff = 3;
        const x = rng.f64(xOff + nTok * xBatch);
        const prod = new Float64Array(pairs * rows);
        for (let b = 0; b < pairs; b++) all.slice(ids[b]! * rows, rows).matmul(x.subarray(xOff + Math.floor(b / K) * xBatch), 1, cols, prod.subarray(b * rows), rows);
        const idsB = u32(r, ids);
        const lists = r.buffer(expertListWords(pairs, E) * 4);
        expertLists(r, idsB, lists, { pairs, E });
        const args = { pairs, xDiv: K, xBatch, xOff, yBatch, yOff, mode: "experts" as const, lists };
        const y0 = rng.f64(yOff + pairs * yBatch);
        const inRow = (i: number): boolean => i >= yOff && (i - yOff) % yBatch < rows && i < yOff + pairs * yBatch;
        const at = (i: number): number => prod[Math.floor((i - yOff) / yBatch) * rows + ((i - yOff) % yBatch)]!;
        const label = `${typeName(type)} ${rows}x${cols}${maxBindingBytes !== undefined ? " pieces" : ""}`;
        const yb = r.buffer(y0.length * 4);
        matmulGather(r, g, f32(r, x), yb, idsB, args);
        const got = await r.readF32(yb);
        for (let b = 0; b < pairs; b++) {
          const a = got.subarray(yOff + b * yBatch, yOff + b * yBatch + rows);
          assert.ok(relErr(a, prod.subarray(b * rows, (b + 1) * rows)) < TOL, `${label} pair ${b} (expert ${ids[b]}): err ${relErr(a, prod.subarray(b * rows, (b + 1) * rows))}`);
        }
        const yAcc = f32(r, y0);
        matmulGather(r, g, f32(r, x), yAcc, idsB, { ...args, acc: true });
        const wantAcc = Float64Array.from(y0, (v, i) => (inRow(i) ? v + at(i) : v));
        assert.ok(relErr(await r.readF32(yAcc), wantAcc) < TOL, `${label} acc`);
        const yGlu = f32(r, y0);
        matmulGather(r, g, f32(r, x), yGlu, idsB, { ...args, glu: true });
        const wantGlu = Float64Array.from(y0, (v, i) => (inRow(i) ? (v / (1 + Math.exp(-v))) * at(i) : v));
        assert.ok(relErr(await r.readF32(yGlu), wantGlu) < TOL, `${label} glu`);
        g.destroy();
      }
    }
  });
}
