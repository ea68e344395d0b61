// The row-tiled kernel on int8 dot products (rowtile-q8.wgsl.ts, activations "q8") against the CPU reference on fresh
// random inputs, through the shared cases of matmul-cases.ts with their q8 form (x moved off the rounding boundaries,
// the reference fed x as quantized, f32 tolerance): integer forms with mins, Q6_K's half scales, Q8_0's signed bytes,
// an offset type and an IQ4 table; odd rows, partial tiles, strides, acc, SwiGLU, dual gate·up, per-head batches,
// pieces and expert lists with uneven pairs; one thread a row and several (partial sums met in workgroup memory).
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { type GpuMatrix, matvecKernel } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { rowTileShape } from "../../../src/backend/webgpu/kernels/matmul/select.js";
import { matmulRowsQ8WGSL } from "../../../src/backend/webgpu/kernels/matmul/rowtile-q8.wgsl.js";
import { gpuOrSkip, LONG_SWEEPS, Rng, sweepSkip } from "./helpers.js";
import { checkExpertLists, checkHeadsAndPieces, checkPlainProducts, X16_LEVELS } from "./matmul-cases.js";
import { checkFusedQ8 } from "./q8-pipeline.js";

const { rt, skip } = await gpuOrSkip();
const Q8 = /row-tiled product on int8 dot products/;
const F32 = /row-tiled product: /;

type Case = readonly [number, number, number, number];
// [type, cols, rows, tokens]: the row-tiled kernel's types (the K-quant with mins, Q6_K's two scales, Q5_0's offset,
// Q8_0's signed bytes); 33 tokens cross tiles of 8 and 16; 1408 columns make steps of 128
const PLAIN: readonly Case[] = [
  [GGMLType.Q4_K, 512, 67, 33],
  [GGMLType.Q6_K, 256, 33, 9],
  [GGMLType.Q5_0, 96, 19, 5],
  [GGMLType.Q8_0, 128, 21, 6],
  [GGMLType.Q5_0, 1408, 9, 17],
  [GGMLType.Q4_K, 256, 5, 7],
];
// [type, cols, rows, row bytes]
const LISTS: readonly Case[] = [
  [GGMLType.Q4_K, 256, 67, 144],
  [GGMLType.Q5_0, 96, 19, 66],
  [GGMLType.Q6_K, 256, 40, 210],
];

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}): GpuRuntime {
  return new GpuRuntime(rt!.info, {
    checkWrites: true,
    ...opts,
    activations: "q8",
    tune: { gemm: 0, rowTile: 1, ...tune },
  });
}
const mat = (type: number, cols: number, rows: number, items = 1): GpuMatrix =>
  ({ type, cols, rows, items }) as unknown as GpuMatrix;

test("q8 row-tiled selection: under activations q8 the row-tiled shapes of types with an integer form, unless rowTileQ8 = 0", {
  skip,
}, () => {
  const at = (activations: "exact" | "q8", tune: KernelTuning = {}): GpuRuntime =>
    new GpuRuntime(
      { ...rt!.info, subgroupSize: 32, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 32768 } },
      { tune, activations },
    );
  const gate = mat(GGMLType.Q4_K, 2048, 1408, 64);
  const down = mat(GGMLType.Q5_0, 1408, 2048, 64);
  const describe = (r: GpuRuntime, m: GpuMatrix, n: number, mode: "plain" | "experts-list", dual = false): string => {
    const s = rowTileShape(r, m, n, mode, true, m.rows, dual);
    return s === undefined ? "none" : `${s.q8 === true ? "q8 " : ""}${s.tokens} tokens, ${s.ksplit} a row, ks ${s.ks}`;
  };
  // batch 64 of v2-lite: the f32 kernel's shapes, on int8 dots
  assert.equal(describe(at("q8"), gate, 64 * 6, "experts-list", true), "q8 8 tokens, 4 a row, ks 256");
  assert.equal(describe(at("exact"), gate, 64 * 6, "experts-list", true), "8 tokens, 4 a row, ks 256");
  assert.equal(describe(at("q8"), down, 64 * 6, "experts-list"), "q8 8 tokens, 2 a row, ks 128");
  assert.equal(describe(at("q8"), mat(GGMLType.Q4_K, 2048, 3648), 64, "plain"), "q8 16 tokens, 8 a row, ks 512");
  assert.equal(describe(at("q8", { rowTileQ8: 0 }), gate, 64 * 6, "experts-list", true), "8 tokens, 4 a row, ks 256");
  // F16 has no integer form and no row-tiled kernel; a shape whose slices would split a 32-column unit is refused
  assert.equal(describe(at("q8"), mat(GGMLType.F16, 2048, 1408, 64), 64 * 6, "experts-list", true), "none");
  assert.throws(
    () => matmulRowsQ8WGSL(GGMLType.Q4_K, "plain", { rows: 32, ksplit: 16, tokens: 8, ks: 256, cols: 2048 }),
    /bad shape/,
  );
  assert.match(matvecKernel(at("q8"), mat(GGMLType.Q4_K, 2048, 3648), 64, false, true).code, Q8);
  assert.match(matvecKernel(at("exact"), mat(GGMLType.Q4_K, 2048, 3648), 64, false, true).code, F32);
});

// [tuning, in the suite]: the default threads a row (one on lavapipe's narrow subgroups), and four threads a row in
// tiles of 4 tokens (partial sums met in workgroup memory; more tiles a product)
const tunings: readonly (readonly [KernelTuning, boolean])[] = [
  [{}, true],
  [{ rowTileTokens: 4, rowTileSplit: 4 }, true],
];

// x in two int8 pieces (tune.rowTileX16; any activations mode): 15 bits per 32 values
const X16 = /row-tiled product on int8 dot products \(x in two pieces\)/;
test("x in two pieces (rowTileX16 = 1): the integer kernel in exact mode too, on its types only", { skip }, () => {
  const at = (activations: "exact" | "q8", tune: KernelTuning): GpuRuntime =>
    new GpuRuntime({ ...rt!.info, subgroupSize: 32 }, { tune, activations });
  const gate = mat(GGMLType.Q4_K, 2048, 1408, 64);
  assert.equal(rowTileShape(at("exact", { rowTileX16: 1 }), gate, 64 * 6, "experts-list", true, 1408, true)?.pieces, 2);
  assert.equal(rowTileShape(at("q8", { rowTileX16: 1 }), gate, 64 * 6, "experts-list", true, 1408, true)?.pieces, 2);
  assert.equal(rowTileShape(at("exact", {}), gate, 64 * 6, "experts-list", true, 1408, true)?.q8, undefined);
  assert.match(matvecKernel(at("exact", { rowTileX16: 1 }), mat(GGMLType.Q4_K, 2048, 3648), 64, false, true).code, X16);
  // activations int15: the row-tiled products in two pieces; the small-batch and prompt products stay f32
  const int15 = new GpuRuntime({ ...rt!.info, subgroupSize: 32 }, { activations: "int15" });
  assert.equal(rowTileShape(int15, gate, 64 * 6, "experts-list", true, 1408, true)?.pieces, 2);
  assert.match(matvecKernel(int15, mat(GGMLType.Q4_K, 2048, 3648), 64, false, true).code, X16);
  assert.doesNotMatch(matvecKernel(int15, mat(GGMLType.Q4_K, 2048, 3648), 8, false, true).code, /int8 dot products/);
  assert.doesNotMatch(
    matvecKernel(int15, mat(GGMLType.Q4_K, 2048, 3648), 512, false, true).code,
    /int8 dot products|q8/,
  );
});

// The fused pipeline with activations int15: every product of ≥ 5 tokens and every expert list on the row-tiled kernel
// in two pieces, near the reference (KL < 1e-4 a row; the log-probs differ from the exact pipeline's)
test("fused pipeline, activations int15 on the row-tiled kernel: within KL 1e-4 of the reference, not equal to exact", {
  skip,
}, async () => {
  await checkFusedQ8(rt!, X16, { gemm: 0, expertsFrom: 0.25, rowTile: 1 }, "int15", 1e-4);
});

const x16Check = { kernel: X16, dual: true, q8: true, x16: true };
for (const [tune, inSuite] of [
  [{ rowTileX16: 1 }, true],
  [{ rowTileX16: 1, rowTileTokens: 4, rowTileSplit: 4 }, false],
] as const) {
  const name = JSON.stringify(tune);
  const check = x16Check;
  const exact = (opts: RuntimeOptions = {}): GpuRuntime =>
    new GpuRuntime(rt!.info, { checkWrites: true, ...opts, tune: { gemm: 0, rowTile: 1, ...tune } });
  test(`x in two pieces ${name}: plain products, per-head batches and pieces, expert lists`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    await checkPlainProducts(exact(), new Rng(461 + name.length), PLAIN.slice(0, 5), check);
    await checkHeadsAndPieces(exact, new Rng(463 + name.length), true, X16_LEVELS);
    await checkExpertLists(exact, new Rng(467 + name.length), LISTS.slice(0, 2), check);
  });
}

for (const [tune, inSuite] of tunings) {
  const name = JSON.stringify(tune);
  test(`q8 row-tiled plain products ${name}: integer forms, odd rows, n = 5 … 33, strides, acc, SwiGLU, dual`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    const cases = LONG_SWEEPS ? PLAIN : PLAIN.slice(0, 5);
    await checkPlainProducts(runtime(tune), new Rng(401 + name.length), cases, {
      kernel: Q8,
      dual: true,
      q8: true,
      xq8: true,
    });
  });

  test(`q8 row-tiled per-head batch form and row pieces ${name}`, { skip: sweepSkip(skip, inSuite) }, async () => {
    await checkHeadsAndPieces((opts) => runtime(tune, opts), new Rng(423 + name.length), true);
  });

  test(`q8 row-tiled expert lists ${name}: uneven pairs, empty experts, pieces, acc, SwiGLU, dual`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    const types = LONG_SWEEPS ? LISTS : LISTS.slice(0, 2);
    await checkExpertLists((opts) => runtime(tune, opts), new Rng(441 + name.length), types, {
      kernel: Q8,
      dual: true,
      q8: true,
      xq8: true,
    });
  });
}

// The fused pipeline with activations q8 and the register-tiled kernel off (as on lavapipe by default): every product of
// ≥ 5 tokens and every expert list from a quarter pair an expert on the row-tiled q8 kernel
test("fused pipeline, activations q8 on the row-tiled kernel: near the reference (KL < 0.005 a row), not equal to the exact pipeline", {
  skip,
}, async () => {
  await checkFusedQ8(rt!, Q8, { gemm: 0, expertsFrom: 0.25, rowTile: 1 });
});
