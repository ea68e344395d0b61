// The integer matrix-vector kernel (vec-q8.wgsl.ts: plain products of 5–31 tokens under activations q8, or with x in
// two pieces) against the CPU reference on fresh random inputs, through the shared cases of matmul-cases.ts with their
// q8 form (x moved off the rounding boundaries, the reference fed x as quantized, f32 tolerance): Q4_K's unit pairs
// and mins, Q6_K's half scales, Q5_0's offset, Q8_0's signed bytes; odd rows (runs of two rows cut short), partial
// tiles, two tiles, strides, acc, SwiGLU, dual gate·up, per-head batches and row pieces; x from the quantizing pass
// (xq8.wgsl.ts) and x staged by each workgroup, bit for bit the same; the whole row staged with several rows a
// subgroup, and rows in steps of fewer columns.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuMatrix, matmul, matmulSwiGLU, matvecKernel } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { vecQ8Shape } from "../../../src/backend/webgpu/kernels/matmul/select.js";
import { matvecQ8WGSL } from "../../../src/backend/webgpu/kernels/matmul/vec-q8.wgsl.js";
import { f32, gpuOrSkip, LONG_SWEEPS, Rng, sweepSkip } from "./helpers.js";
import { checkHeadsAndPieces, checkPlainProducts, X16_LEVELS } from "./matmul-cases.js";
import { checkFusedQ8 } from "./q8-pipeline.js";

const { rt, skip } = await gpuOrSkip();
const VEC = /matrix-vector product on int8 dot products: /;
const VEC_X16 = /matrix-vector product on int8 dot products \(x in two pieces\)/;

type Case = readonly [number, number, number, number];
// [type, cols, rows, tokens]: 5 and 8 tokens bound the kernel's default range; odd rows; 192 columns leave the last of
// a lane's slots short on lavapipe's 8-wide subgroups (1408: Q5_0's routed-down rows, 44 units, in the long sweeps;
// lavapipe compiles these unrolled kernels slowly, so the suite keeps the small shapes)
const PLAIN: readonly Case[] = [
  [GGMLType.Q4_K, 512, 67, 8],
  [GGMLType.Q6_K, 256, 33, 5],
  [GGMLType.Q5_0, 192, 19, 7],
  [GGMLType.Q8_0, 128, 21, 6],
  ...(LONG_SWEEPS ? [[GGMLType.Q5_0, 1408, 19, 7] as const] : []),
];
// with tune.vecQ8 = 2 (up to 31 tokens): 13 in one tile, 17 and 31 in two
const TILES: readonly Case[] = [
  [GGMLType.Q4_K, 256, 5, 17],
  [GGMLType.Q8_0, 128, 21, 31],
  [GGMLType.Q5_0, 96, 19, 13],
];

const mat = (type: number, cols: number, rows: number, items = 1): GpuMatrix =>
  ({ type, cols, rows, items }) as unknown as GpuMatrix;

test("integer matrix-vector selection: 5–31 tokens under activations q8 or x in two pieces, types with an integer form", {
  skip,
}, () => {
  const at = (activations: "exact" | "q8", tune: KernelTuning = {}, limit = 32768): GpuRuntime =>
    new GpuRuntime(
      { ...rt!.info, subgroupSize: 32, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: limit } },
      { tune, activations },
    );
  const qkv = mat(GGMLType.Q4_K, 2048, 3648);
  const describe = (r: GpuRuntime, m: GpuMatrix, n: number): string => {
    const s = vecQ8Shape(r, m, n, true);
    return s === undefined
      ? "none"
      : `${s.pieces === 2 ? "x16 " : ""}${s.tokens} tokens, ${s.sgs}×${s.rowsPerSg} rows by ${s.par}, ks ${s.ks}`;
  };
  assert.equal(describe(at("q8"), qkv, 8), "8 tokens, 8×1 rows by 1, ks 2048");
  assert.equal(describe(at("exact"), qkv, 8), "none");
  assert.equal(describe(at("exact", { rowTileX16: 1 }), qkv, 8), "x16 8 tokens, 8×1 rows by 1, ks 1024");
  // the vocabulary-sized head: more rows a subgroup; 31 tokens in two tiles of 16, steps of x that fit
  assert.equal(describe(at("q8"), mat(GGMLType.Q6_K, 2048, 102400), 8), "8 tokens, 8×16 rows by 1, ks 2048");
  assert.equal(describe(at("q8", { vecQ8: 2 }), qkv, 31), "16 tokens, 8×1 rows by 1, ks 1024");
  assert.equal(describe(at("q8"), mat(GGMLType.Q4_K, 12288, 6144), 8), "8 tokens, 8×1 rows by 1, ks 2048");
  assert.equal(describe(at("q8", { vecQ8Par: 1, vecQ8Rows: 4 }), qkv, 8), "8 tokens, 8×4 rows by 1, ks 2048");
  // x from the quantizing pass (where the launcher runs it): by default only where staging would go in steps, then
  // the whole row in one step
  const fromPass = (r: GpuRuntime, m: GpuMatrix, n: number): string => {
    const v = vecQ8Shape(r, m, n, true, m.rows, true);
    return v === undefined ? "none" : `${v.xq8 === true ? "pass" : "staged"}, ${v.sgs}×${v.rowsPerSg} rows, ks ${v.ks}`;
  };
  const down = mat(GGMLType.Q4_K, 12288, 6144);
  assert.equal(fromPass(at("q8"), down, 8), "pass, 8×2 rows, ks 12288");
  assert.equal(fromPass(at("q8"), qkv, 8), "staged, 8×1 rows, ks 2048");
  assert.equal(fromPass(at("q8", { vecQ8X: 2 }), qkv, 8), "pass, 8×1 rows, ks 2048");
  assert.equal(fromPass(at("q8", { vecQ8X: 0 }), down, 8), "staged, 8×1 rows, ks 2048");
  assert.equal(fromPass(at("q8", { q8X: 0 }), down, 8), "staged, 8×1 rows, ks 2048");
  assert.equal(fromPass(at("exact", { rowTileX16: 1 }), down, 8), "staged, 8×1 rows, ks 1024");
  assert.throws(() => vecQ8Shape(at("q8", { vecQ8X: 3 }), qkv, 8, true), /vecQ8X/);
  // outside its range, or off
  for (const n of [4, 9]) assert.equal(describe(at("q8"), qkv, n), "none");
  assert.equal(describe(at("q8", { vecQ8: 2 }), qkv, 32), "none");
  assert.equal(describe(at("q8", { vecQ8: 0 }), qkv, 8), "none");
  assert.equal(describe(at("q8"), mat(GGMLType.F16, 2048, 64), 8), "none");
  assert.throws(() => vecQ8Shape(at("q8", { vecQ8Par: 2, vecQ8Rows: 3 }), qkv, 8, true), /vecQ8Rows/);
  assert.throws(
    () => matvecQ8WGSL(GGMLType.Q4_K, { sg: 32, sgs: 8, rowsPerSg: 4, par: 2, tokens: 8, ks: 1024, cols: 2048 }),
    /bad shape/,
  );
  assert.match(matvecKernel(at("q8"), qkv, 8, false, true).code, VEC);
  assert.doesNotMatch(matvecKernel(at("exact"), qkv, 8, false, true).code, VEC);
});

// [tuning, cases, in the suite]: the defaults (x staged by each workgroup: the whole row fits on these small
// matrices), x from the quantizing pass (vecQ8X = 2), several rows a subgroup one at a time, tiles of up to 16 tokens
// (vecQ8 = 2), two rows loaded together, also with x from the pass
const tunings: readonly (readonly [KernelTuning, readonly Case[], boolean])[] = [
  [{}, PLAIN, true],
  [{ vecQ8X: 2 }, PLAIN.slice(0, 2), true],
  [{ vecQ8Par: 1, vecQ8Rows: 3 }, PLAIN.slice(0, 1), true],
  [{ vecQ8: 2 }, TILES, false],
  [{ vecQ8Par: 2, vecQ8Rows: 2 }, PLAIN, false],
  [{ vecQ8X: 2, vecQ8Par: 2, vecQ8Rows: 4 }, PLAIN, false],
];

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}, stageLimit?: number): GpuRuntime {
  const info =
    stageLimit === undefined
      ? rt!.info
      : { ...rt!.info, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: stageLimit } };
  return new GpuRuntime(info, { checkWrites: true, ...opts, activations: "q8", tune: { gemm: 0, ...tune } });
}

for (const [tune, cases, inSuite] of tunings) {
  const name = JSON.stringify(tune);
  test(`integer matrix-vector plain products ${name}: types, odd rows, n = ${cases.map((c) => c[3]).join(", ")}, strides, acc, SwiGLU, dual`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    await checkPlainProducts(runtime(tune), new Rng(601 + name.length), cases, {
      kernel: VEC,
      dual: true,
      q8: true,
      ...(tune.vecQ8X === 2 ? { xq8: true } : {}),
    });
  });
}

test("integer matrix-vector kernel in steps of 64 columns (x staged per step): plain, dual, per-head batches", {
  skip,
}, async () => {
  // a 1 KiB stage holds 8 tokens of 64 columns and their scales (8·64 + 8·2·8 bytes): every staged product goes in
  // steps; with x from the pass (the default where the launcher runs it) the whole row goes in one
  const r = runtime({ vecQ8X: 0 }, {}, 1024);
  const m = mat(GGMLType.Q4_K, 512, 67);
  assert.match(matvecKernel(r, m, 8, false, true).code, /8 step\(s\) of 64 columns/);
  await checkPlainProducts(r, new Rng(641), [[GGMLType.Q8_0, 192, 21, 7]], {
    kernel: VEC,
    dual: true,
    q8: true,
  });
  const pass = runtime({}, {}, 1024);
  assert.match(matvecKernel(pass, m, 8, false, true, m.rows, undefined, true).code, /1 step\(s\) of 512 columns/);
  assert.match(matvecKernel(pass, m, 8, false, true).code, /8 step\(s\) of 64 columns/);
  await checkPlainProducts(pass, new Rng(642), [[GGMLType.Q8_0, 192, 21, 7]], {
    kernel: VEC,
    dual: true,
    q8: true,
    xq8: true,
  });
  // (the shared per-head case has 9 tokens: vecQ8 = 2)
  await checkHeadsAndPieces((opts) => runtime({ vecQ8: 2, vecQ8X: 0 }, opts, 1024), new Rng(643), true);
});

test("integer matrix-vector kernel: x from the pass bit for bit as staged, one pass a product, none inside together()", {
  skip,
}, async () => {
  const rng = new Rng(661);
  for (const [type, cols, rows, n] of PLAIN.slice(0, 2)) {
    const xOff = 8;
    const xStride = cols + 4;
    const x = rng.f64(xOff + n * xStride);
    const wData = quantize(type, rng.f32(cols * rows), cols);
    const w2Data = quantize(type, rng.f32(cols * rows), cols);
    // [runtime's vecQ8X, inside together()] → the output and the dispatches
    const run = async (vecQ8X: number, together: boolean, dual: boolean): Promise<[Float32Array, number]> => {
      const r = runtime({ vecQ8X });
      const w = GpuMatrix.upload(r, "w", type, cols, rows, wData);
      const w2 = GpuMatrix.upload(r, "w2", type, cols, rows, w2Data);
      const y = r.buffer(n * rows * 4);
      const xb = f32(r, x);
      const args = { n, xStride, yStride: rows, xOff };
      const product = (): void => (dual ? matmulSwiGLU(r, w, w2, xb, y, args) : matmul(r, w, xb, y, args));
      const before = r.stats.dispatches;
      if (together) r.together(product);
      else product();
      const dispatches = r.stats.dispatches - before;
      const out = await r.readF32(y);
      w.destroy();
      w2.destroy();
      return [out, dispatches];
    };
    for (const dual of [false, true]) {
      const label = `${typeName(type)} ${rows}x${cols}, ${n} tokens${dual ? ", dual" : ""}`;
      const [staged, d0] = await run(0, false, dual);
      const [fromPass, d1] = await run(2, false, dual);
      const [inTogether, d2] = await run(2, true, dual);
      assert.deepEqual([d1, d0, d2], [2, 1, 1], `${label}: dispatches`);
      const bits = (a: Float32Array): Uint32Array => new Uint32Array(a.buffer, a.byteOffset, a.length);
      assert.deepEqual(bits(fromPass), bits(staged), `${label}: from the pass`);
      assert.deepEqual(bits(inTogether), bits(staged), `${label}: inside together()`);
    }
  }
});

test("integer matrix-vector per-head batch form and row pieces", { skip }, async () => {
  // (the shared case has 9 tokens: vecQ8 = 2)
  await checkHeadsAndPieces((opts) => runtime({ vecQ8: 2 }, opts), new Rng(647), true);
});

test("integer matrix-vector kernel with x in two pieces (rowTileX16 = 1, exact mode)", { skip }, async () => {
  const exact = (opts: RuntimeOptions = {}): GpuRuntime =>
    new GpuRuntime(rt!.info, { checkWrites: true, ...opts, tune: { gemm: 0, rowTileX16: 1, vecQ8: 2 } });
  const check = { kernel: VEC_X16, dual: true, q8: true, x16: true };
  await checkPlainProducts(exact(), new Rng(653), PLAIN.slice(0, 1), check);
  await checkHeadsAndPieces(exact, new Rng(659), true, X16_LEVELS);
});

// The fused pipeline with activations q8 (a 9-token prompt: its plain products on this kernel with vecQ8 = 2)
test("fused pipeline, activations q8, 5–31-token products on the integer matrix-vector kernel: near the reference", {
  skip,
}, async () => {
  await checkFusedQ8(rt!, VEC, { gemm: 0, rowTile: 0, vecQ8: 2 });
});
