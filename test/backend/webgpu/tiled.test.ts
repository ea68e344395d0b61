// The tiled matrix-matrix kernel (products of ≥ 8 tokens, expert lists) against the CPU reference on fresh random
// inputs: partial row and token tiles, column counts that are not a multiple of the shared-memory step, strided and
// offset x/y, accumulation and SwiGLU, the per-head batch form, weights in pieces, and expert lists with uneven pair
// counts (experts with none, one with more pairs than a tile holds). Each case runs under a few tile shapes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime, type KernelTuning, type RuntimeOptions } from "../../../src/backend/webgpu/runtime.js";
import { GpuMatrix, matvecKernel, tiledShape } from "../../../src/backend/webgpu/matrix.js";
import { gpuOrSkip, Rng } from "./helpers.js";
import { checkExpertLists, checkHeadsAndPieces, checkPlainProducts } from "./matmul-cases.js";

const { rt, skip } = await gpuOrSkip();
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
    const cases = [
      [GGMLType.Q4_K, 2048, 67, 9],
      [GGMLType.Q6_K, 512, 130, 33],
      [GGMLType.Q5_0, 1408, 67, 8],
      [GGMLType.Q8_0, 1408, 130, 9],
      [GGMLType.F32, 260, 67, 33],
      [GGMLType.Q5_K, 256, 13, 8],
      [GGMLType.IQ4_XS, 256, 70, 9],
    ] as const;
    await checkPlainProducts(runtime(tune), new Rng(11 + JSON.stringify(tune).length), cases, { kernel: TILED });
  });

  test(`tiled per-head batch form and row pieces ${JSON.stringify(tune)}`, { skip }, async () => {
    await checkHeadsAndPieces((opts) => runtime(tune, opts), new Rng(23 + JSON.stringify(tune).length));
  });

  test(`tiled expert lists ${JSON.stringify(tune)}: uneven pairs per expert, empty experts, pieces, acc, SwiGLU`, { skip }, async () => {
    const types = [[GGMLType.Q4_K, 256, 67, 144], [GGMLType.Q5_0, 1408, 19, 968]] as const;
    await checkExpertLists((opts) => runtime(tune, opts), new Rng(41 + JSON.stringify(tune).length), types);
  });
}
