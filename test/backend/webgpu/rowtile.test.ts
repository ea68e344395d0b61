// The row-tiled matrix-matrix kernel (wgsl-rowtile.ts: expert lists, plain products of ≥ 32 tokens) against the CPU
// reference on fresh random inputs: Q4_K, Q6_K, Q5_0, Q8_0; partial row and token tiles, steps of 128 and 256 columns,
// strided and offset x/y, accumulation and SwiGLU, the dual gate·up form, the per-head batch form, weights in pieces,
// and expert lists with uneven pair counts (experts with none, one with more pairs than a tile). Each case runs under
// two shapes: default (threads per row by the product's size: one chunk a thread on lavapipe) and tiles of 4 tokens
// at 4 threads per row (two chunks a thread per step of Q4_K). Kept small: lavapipe's LLVM needs seconds to minutes
// for larger tiles.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/backend/cpu/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime, type KernelTuning, type RuntimeOptions } from "../../../src/backend/webgpu/runtime.js";
import { expertListWords, expertLists, expertsFrom, GpuMatrix, matmul, matmulGather, matmulGatherSwiGLU, matmulSwiGLU, matvecKernel } from "../../../src/backend/webgpu/matrix.js";
import { rowTileShape } from "../../../src/backend/webgpu/wgsl-rowtile.js";
import { f32, gpuOrSkip, relErr, Rng, u32 } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 2e-5;
const ROWS = /row-tiled product/;

const tunings: readonly KernelTuning[] = [{}, { rowTileTokens: 4, rowTileSplit: 4 }];

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}): GpuRuntime {
  return new GpuRuntime(rt!.info, { checkWrites: true, ...opts, tune: { rowTile: 1, ...tune } });
}

test("selection: expert lists and plain products of ≥ 32 tokens of its types take the row-tiled kernel by default; with tune.rowTile = 1 from 5 tokens, with 0 never", { skip }, () => {
  const r = runtime({});
  const byDefault = new GpuRuntime(rt!.info, {});
  const off = new GpuRuntime(rt!.info, { tune: { rowTile: 0 } });
  const g = GpuMatrix.upload(r, "w", GGMLType.Q4_K, 256, 67, quantize(GGMLType.Q4_K, new Rng(1).f32(256 * 67), 256));
  const e = GpuMatrix.upload(r, "e", GGMLType.Q5_0, 1408, 19, quantize(GGMLType.Q5_0, new Rng(2).f32(1408 * 19 * 4), 1408), 4);
  const f = GpuMatrix.upload(r, "f", GGMLType.F32, 64, 8, quantize(GGMLType.F32, new Rng(3).f32(64 * 8), 64));
  assert.match(matvecKernel(r, g, 5, false, true).code, ROWS);
  assert.match(matvecKernel(r, g, 512, false, true).code, ROWS);
  assert.doesNotMatch(matvecKernel(r, g, 4, false, true).code, ROWS);
  assert.doesNotMatch(matvecKernel(r, g, 64, false, false).code, ROWS); // unaligned x
  assert.doesNotMatch(matvecKernel(r, f, 64, false, true).code, ROWS); // not its type
  assert.match(matvecKernel(r, e, 24, "experts-list", true).code, ROWS);
  assert.doesNotMatch(matvecKernel(r, e, 24, "experts", true).code, ROWS);
  assert.doesNotMatch(matvecKernel(r, e, 24, true, true).code, ROWS);
  assert.match(matvecKernel(byDefault, g, 32, false, true).code, ROWS);
  assert.doesNotMatch(matvecKernel(byDefault, g, 31, false, true).code, ROWS);
  assert.match(matvecKernel(byDefault, e, 24, "experts-list", true).code, ROWS);
  assert.doesNotMatch(matvecKernel(off, g, 64, false, true).code, ROWS);
  assert.doesNotMatch(matvecKernel(off, e, 24, "experts-list", true).code, ROWS);
  // another matvec variant asked for keeps its kernels
  assert.doesNotMatch(matvecKernel(new GpuRuntime(rt!.info, { matvec: "subgroup" }), g, 64, false, true).code, ROWS);
  // an explicit tune.tiled = 1 keeps the tiled kernel
  assert.doesNotMatch(matvecKernel(new GpuRuntime(rt!.info, { tune: { tiled: 1 } }), g, 64, false, true).code, ROWS);
  // expert-major from two pairs per expert on average where it reads the experts
  assert.equal(expertsFrom(r, e), 2);
  // steps: 256 columns where they divide the row, else 128 (1408 = 11 × 128); tiles by tokens or pairs per expert
  assert.equal(rowTileShape(r, g, 9, "plain", true)!.ks, 256);
  assert.equal(rowTileShape(r, e, 24, "experts-list", true)!.ks, 128);
  assert.equal(rowTileShape(r, e, 24, "experts-list", true)!.tokens, 8);
  assert.equal(rowTileShape(r, g, 9, "plain", true)!.tokens, (rt!.info.subgroupSize ?? 32) >= 32 ? 16 : 8);
  assert.throws(() => rowTileShape(runtime({ rowTileTokens: 6 }), g, 9, "plain", true), /multiple of 4/);
  assert.throws(() => rowTileShape(runtime({ rowTileSplit: 3 }), g, 9, "plain", true), /rowTileSplit/);
  // a tuned split is a least, within the step's chunks: 8 threads per row where a step has 4 chunks (Q5_0, 128
  // columns) gives 4; 1 gives at most 4 chunks a thread
  assert.equal(rowTileShape(runtime({ rowTileSplit: 8 }), e, 24, "experts-list", true)!.ksplit, 4);
  assert.equal(rowTileShape(runtime({ rowTileSplit: 1 }), g, 9, "plain", true)!.ksplit, 2);
  assert.equal(rowTileShape(runtime({ rowTileSplit: 1 }), g, 9, "plain", true, 67, true)!.ksplit, 4);
  g.destroy();
  e.destroy();
  f.destroy();
});

test("default shapes at subgroup size 32 (the H200's), as measured there: v2-lite's products at batch 32, 64 and a 512-token prefill", { skip }, () => {
  const h200 = new GpuRuntime({ ...rt!.info, subgroupSize: 32, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 32768 } }, {});
  // (the shape reads only the matrix's type and dimensions)
  const mat = (type: number, cols: number, rows: number, items = 1): GpuMatrix => ({ type, cols, rows, items }) as unknown as GpuMatrix;
  const gate = mat(GGMLType.Q4_K, 2048, 1408, 64);
  const a0 = mat(GGMLType.Q4_K, 2048, 3648);
  const down = mat(GGMLType.Q5_0, 1408, 2048, 64);
  const shape = (m: GpuMatrix, n: number, mode: "plain" | "experts-list", dual = false): string => {
    const s = rowTileShape(h200, m, n, mode, true, m.rows, dual);
    return s === undefined ? "none" : `${s.tokens} tokens, ${s.ksplit} threads a row`;
  };
  // the dual routed gate·up: 2 chunks × 2 matrices a thread in tiles of 4 or 8 pairs (batch 32, 64), 1 × 2 in tiles of 16 (prefill)
  assert.equal(shape(gate, 32 * 6, "experts-list", true), "4 tokens, 4 threads a row");
  assert.equal(shape(gate, 64 * 6, "experts-list", true), "8 tokens, 4 threads a row");
  assert.equal(shape(gate, 512 * 6, "experts-list", true), "16 tokens, 8 threads a row");
  assert.equal(shape(down, 64 * 6, "experts-list"), "8 tokens, 2 threads a row");
  assert.equal(shape(a0, 64, "plain"), "16 tokens, 8 threads a row");
  assert.equal(shape(a0, 512, "plain"), "16 tokens, 4 threads a row");
  assert.equal(shape(a0, 16, "plain"), "none");
});

for (const tune of tunings) {
  test(`row-tiled plain products ${JSON.stringify(tune)}: types, odd rows, n = 5 / 9 / 33, strides, acc, SwiGLU, dual gate·up`, { skip }, async () => {
    const rng = new Rng(11 + JSON.stringify(tune).length);
    const cases: [number, number, number, number][] = [
      [GGMLType.Q4_K, 2048, 67, 9],
      [GGMLType.Q6_K, 512, 130, 33],
      [GGMLType.Q5_0, 1408, 67, 5],
      [GGMLType.Q8_0, 1408, 130, 9],
      [GGMLType.Q8_0, 96, 33, 6],
    ];
    for (const [type, cols, rows, n] of cases) {
      const r = runtime(tune);
      const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
      const w2 = new QMatrix("w2", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
      const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
      const g2 = GpuMatrix.upload(r, "w2", type, cols, rows, w2.data);
      assert.match(matvecKernel(r, g, n, false, true).code, ROWS);
      const xStride = cols + 4;
      const xOff = 8;
      const yStride = rows + 3;
      const yOff = 5;
      const x = rng.f64(xOff + n * xStride);
      const y0 = rng.f64(yOff + n * yStride);
      const prod = new Float64Array(n * yStride);
      const prod2 = new Float64Array(n * yStride);
      w.matmul(x.subarray(xOff), n, xStride, prod, yStride);
      w2.matmul(x.subarray(xOff), n, xStride, prod2, yStride);
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
      const wantAcc = Float64Array.from(y0, (v, i) => (inRow(i) ? v + prod[i - yOff]! : v));
      assert.ok(relErr(await r.readF32(yAcc), wantAcc) < TOL, `${label} acc`);
      const yGlu = f32(r, y0);
      matmul(r, g, f32(r, x), yGlu, { n, xStride, yStride, xOff, yOff, glu: true });
      const wantGlu = Float64Array.from(y0, (v, i) => (inRow(i) ? (v / (1 + Math.exp(-v))) * prod[i - yOff]! : v));
      assert.ok(relErr(await r.readF32(yGlu), wantGlu) < TOL, `${label} glu`);
      // one dual dispatch: silu(W·x)·(W2·x)
      const before = r.stats.dispatches;
      const yDual = f32(r, y0);
      matmulSwiGLU(r, g, g2, f32(r, x), yDual, { n, xStride, yStride, xOff, yOff });
      assert.equal(r.stats.dispatches - before, 1, `${label} dual: one dispatch`);
      const wantDual = Float64Array.from(y0, (v, i) => (inRow(i) ? (prod[i - yOff]! / (1 + Math.exp(-prod[i - yOff]!))) * prod2[i - yOff]! : v));
      assert.ok(relErr(await r.readF32(yDual), wantDual) < TOL, `${label} dual: err ${relErr(await r.readF32(yDual), wantDual)}`);
      g.destroy();
      g2.destroy();
    }
  });

  test(`row-tiled per-head batch form and row pieces ${JSON.stringify(tune)}`, { skip }, async () => {
    const rng = new Rng(23 + JSON.stringify(tune).length);
    const type = GGMLType.Q8_0;
    const cols = 128;
    const rows = 67;
    const H = 3;
    const n = 9;
    const rb = 136; // Q8_0 row bytes at 128 columns
    for (const maxBindingBytes of [undefined, 2 * rows * rb + 255]) {
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
        assert.ok(relErr(a, b) < TOL, `heads${maxBindingBytes !== undefined ? " in pieces" : ""} t=${t}: err ${relErr(a, b)}`);
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

  test(`row-tiled expert lists ${JSON.stringify(tune)}: uneven pairs per expert, empty experts, pieces, acc, SwiGLU, dual gate·up`, { skip }, async () => {
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
    for (const [type, cols, rows, rb] of [[GGMLType.Q4_K, 256, 67, 144], [GGMLType.Q5_0, 1408, 19, 968], [GGMLType.Q6_K, 512, 40, 420]] as const) {
      for (const maxBindingBytes of [undefined, 2 * rows * rb + 255]) {
        const r = runtime(tune, maxBindingBytes !== undefined ? { maxBindingBytes } : {});
        const all = new QMatrix("e", type, cols, rows * E, quantize(type, rng.f32(cols * rows * E), cols));
        const all2 = new QMatrix("u", type, cols, rows * E, quantize(type, rng.f32(cols * rows * E), cols));
        const g = GpuMatrix.upload(r, "e", type, cols, rows, all.data, E);
        const g2 = GpuMatrix.upload(r, "u", type, cols, rows, all2.data, E);
        assert.equal(g.pieces.length > 1, maxBindingBytes !== undefined);
        const xBatch = cols + 4;
        const xOff = 4;
        const yBatch = rows; // the launcher checks one contiguous span of outputs
        const yOff = 3;
        const x = rng.f64(xOff + nTok * xBatch);
        const prod = new Float64Array(pairs * rows);
        const prod2 = new Float64Array(pairs * rows);
        for (let b = 0; b < pairs; b++) {
          all.slice(ids[b]! * rows, rows).matmul(x.subarray(xOff + Math.floor(b / K) * xBatch), 1, cols, prod.subarray(b * rows), rows);
          all2.slice(ids[b]! * rows, rows).matmul(x.subarray(xOff + Math.floor(b / K) * xBatch), 1, cols, prod2.subarray(b * rows), rows);
        }
        const idsB = u32(r, ids);
        const lists = r.buffer(expertListWords(pairs, E) * 4);
        expertLists(r, idsB, lists, { pairs, E });
        const args = { pairs, xDiv: K, xBatch, xOff, yBatch, yOff, mode: "experts" as const, lists };
        assert.match(matvecKernel(r, g, pairs, "experts-list", true).code, ROWS);
        const y0 = rng.f64(yOff + pairs * yBatch);
        const inRow = (i: number): boolean => i >= yOff && (i - yOff) % yBatch < rows && i < yOff + pairs * yBatch;
        const at = (p: Float64Array, i: number): number => p[Math.floor((i - yOff) / yBatch) * rows + ((i - yOff) % yBatch)]!;
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
        const wantAcc = Float64Array.from(y0, (v, i) => (inRow(i) ? v + at(prod, i) : v));
        assert.ok(relErr(await r.readF32(yAcc), wantAcc) < TOL, `${label} acc`);
        const yGlu = f32(r, y0);
        matmulGather(r, g, f32(r, x), yGlu, idsB, { ...args, glu: true });
        const wantGlu = Float64Array.from(y0, (v, i) => (inRow(i) ? (v / (1 + Math.exp(-v))) * at(prod, i) : v));
        assert.ok(relErr(await r.readF32(yGlu), wantGlu) < TOL, `${label} glu`);
        const before = r.stats.dispatches;
        const yDual = f32(r, y0);
        matmulGatherSwiGLU(r, g, g2, f32(r, x), yDual, idsB, args);
        assert.equal(r.stats.dispatches - before, g.pieces.length, `${label} dual: one dispatch per piece`);
        const wantDual = Float64Array.from(y0, (v, i) => (inRow(i) ? (at(prod, i) / (1 + Math.exp(-at(prod, i)))) * at(prod2, i) : v));
        assert.ok(relErr(await r.readF32(yDual), wantDual) < TOL, `${label} dual: err ${relErr(await r.readF32(yDual), wantDual)}`);
        g.destroy();
        g2.destroy();
      }
    }
  });
}
