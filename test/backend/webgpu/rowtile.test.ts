// The row-tiled matrix-matrix kernel (rowtile.wgsl.ts: expert lists, plain products of ≥ 32 tokens) against the CPU
// reference on fresh random inputs: Q4_K, Q6_K, Q5_0, Q8_0; partial row and token tiles, steps of 128 and 256 columns,
// strided and offset x/y, accumulation and SwiGLU, the dual gate·up form, the per-head batch form, weights in pieces,
// and expert lists with uneven pair counts (experts with none, one with more pairs than a tile). Each case runs under
// two shapes: default (threads per row by the product's size: one chunk a thread on lavapipe) and tiles of 4 tokens
// at 4 threads per row (two chunks a thread per step of Q4_K). Kept small: lavapipe's LLVM needs seconds to minutes
// for larger tiles.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { GpuMatrix, matvecKernel } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { expertsFrom, rowTileShape } from "../../../src/backend/webgpu/kernels/matmul/select.js";
import { gpuOrSkip, Rng, sweepSkip } from "./helpers.js";
import { checkExpertLists, checkHeadsAndPieces, checkPlainProducts } from "./matmul-cases.js";

const { rt, skip } = await gpuOrSkip();
const ROWS = /row-tiled product/;

const tunings: readonly KernelTuning[] = [
  {},
  { rowTileTokens: 4, rowTileSplit: 4, rowTileHeader: 1 },
  { rowTilePipe: 1 },
  { rowTilePipe: 1, rowTileTokens: 4, rowTileSplit: 2, rowTileHeader: 1 },
];

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}): GpuRuntime {
  return new GpuRuntime(rt!.info, { checkWrites: true, ...opts, tune: { rowTile: 1, ...tune } });
}

test("selection: expert lists and plain products of ≥ 32 tokens of its types take the row-tiled kernel by default; with tune.rowTile = 1 from 5 tokens, with 0 never", {
  skip,
}, () => {
  const r = runtime({});
  const byDefault = new GpuRuntime(rt!.info, {});
  const off = new GpuRuntime(rt!.info, { tune: { rowTile: 0 } });
  const g = GpuMatrix.upload(r, "w", GGMLType.Q4_K, 256, 67, quantize(GGMLType.Q4_K, new Rng(1).f32(256 * 67), 256));
  const e = GpuMatrix.upload(
    r,
    "e",
    GGMLType.Q5_0,
    1408,
    19,
    quantize(GGMLType.Q5_0, new Rng(2).f32(1408 * 19 * 4), 1408),
    4,
  );
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

test("default shapes at subgroup size 32 (the H200's), as measured there: v2-lite's products at batch 32, 64 and a 512-token prefill", {
  skip,
}, () => {
  const h200 = new GpuRuntime(
    { ...rt!.info, subgroupSize: 32, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 32768 } },
    {},
  );
  // (the shape reads only the matrix's type and dimensions)
  const mat = (type: number, cols: number, rows: number, items = 1): GpuMatrix =>
    ({ type, cols, rows, items }) as unknown as GpuMatrix;
  const gate = mat(GGMLType.Q4_K, 2048, 1408, 64);
  const a0 = mat(GGMLType.Q4_K, 2048, 3648);
  const down = mat(GGMLType.Q5_0, 1408, 2048, 64);
  const shape = (m: GpuMatrix, n: number, mode: "plain" | "experts-list", dual = false): string => {
    const s = rowTileShape(h200, m, n, mode, true, m.rows, dual);
    return s === undefined
      ? "none"
      : `${s.tokens} tokens, ${s.ksplit} threads a row${s.pipe === true ? ", pipelined" : ""}`;
  };
  // the dual routed gate·up: 2 chunks × 2 matrices a thread in tiles of 4 or 8 pairs (batch 32, 64), 1 × 2 in tiles of 16 (prefill)
  assert.equal(shape(gate, 32 * 6, "experts-list", true), "4 tokens, 4 threads a row, pipelined");
  assert.equal(shape(gate, 64 * 6, "experts-list", true), "8 tokens, 4 threads a row, pipelined");
  assert.equal(shape(gate, 512 * 6, "experts-list", true), "16 tokens, 8 threads a row, pipelined");
  assert.equal(shape(down, 64 * 6, "experts-list"), "8 tokens, 2 threads a row, pipelined");
  assert.equal(shape(a0, 64, "plain"), "16 tokens, 8 threads a row, pipelined");
  assert.equal(shape(a0, 512, "plain"), "16 tokens, 4 threads a row, pipelined");
  assert.equal(shape(a0, 16, "plain"), "none");
  // pipelined steps by default at 32-wide subgroups only; tune.rowTilePipe decides either way
  const at = (subgroupSize: number, tune = {}): boolean | undefined =>
    rowTileShape(new GpuRuntime({ ...rt!.info, subgroupSize }, { tune }), a0, 64, "plain", true)?.pipe;
  assert.equal(at(8), undefined);
  assert.equal(at(8, { rowTilePipe: 1 }), true);
  assert.equal(at(32, { rowTilePipe: 0 }), undefined);
});

for (const tune of tunings) {
  test(`row-tiled plain products ${JSON.stringify(tune)}: types, odd rows, n = 5 / 9 / 33, strides, acc, SwiGLU, dual gate·up`, {
    skip: sweepSkip(skip, Object.keys(tune).length === 0),
  }, async () => {
    const cases = [
      [GGMLType.Q4_K, 2048, 67, 9],
      [GGMLType.Q6_K, 512, 130, 33],
      [GGMLType.Q5_0, 1408, 67, 5],
      [GGMLType.Q8_0, 1408, 130, 9],
      [GGMLType.Q8_0, 96, 33, 6],
    ] as const;
    await checkPlainProducts(runtime(tune), new Rng(11 + JSON.stringify(tune).length), cases, {
      kernel: ROWS,
      dual: true,
    });
  });

  test(`row-tiled per-head batch form and row pieces ${JSON.stringify(tune)}`, {
    skip: sweepSkip(skip, Object.keys(tune).length === 0),
  }, async () => {
    await checkHeadsAndPieces((opts) => runtime(tune, opts), new Rng(23 + JSON.stringify(tune).length));
  });

  test(`row-tiled expert lists ${JSON.stringify(tune)}: uneven pairs per expert, empty experts, pieces, acc, SwiGLU, dual gate·up`, {
    skip: sweepSkip(skip, Object.keys(tune).length === 0),
  }, async () => {
    const types = [
      [GGMLType.Q4_K, 256, 67, 144],
      [GGMLType.Q5_0, 1408, 19, 968],
      [GGMLType.Q6_K, 512, 40, 420],
    ] as const;
    await checkExpertLists((opts) => runtime(tune, opts), new Rng(41 + JSON.stringify(tune).length), types, {
      kernel: ROWS,
      dual: true,
    });
  });
}
