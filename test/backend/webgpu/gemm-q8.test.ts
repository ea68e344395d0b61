// The register-tiled kernel on int8 dot products (gemm-q8.wgsl.ts, activations "q8") against the CPU reference on
// fresh random inputs, through the shared cases of matmul-cases.ts with their q8 form: x moved off the rounding
// boundaries and the reference fed x as quantized (d·round(x/d) per 32 values), so every mismatch beyond f32 rounding
// is the kernel's: the weights' integer forms (K-quants with mins, Q6_K's half scales, offsets of Q4_0/Q5_0, the IQ4
// tables), the quantization of x, odd rows, partial tiles, strides, acc, SwiGLU, dual gate·up, per-head batches,
// pieces and expert lists. On lavapipe the kernel runs only when asked for (tune.gemm = 2 here).
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { type GpuMatrix, matvecKernel } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { gemmShape } from "../../../src/backend/webgpu/kernels/matmul/select.js";
import { gpuOrSkip, LONG_SWEEPS, Rng, sweepSkip } from "./helpers.js";
import { checkExpertLists, checkHeadsAndPieces, checkPlainProducts } from "./matmul-cases.js";
import { checkFusedQ8 } from "./q8-pipeline.js";

const { rt, skip } = await gpuOrSkip();
const Q8 = /register-tiled product on int8 dot products/;
const F32 = /register-tiled product: /;

type Case = readonly [number, number, number, number];
// [type, cols, rows, tokens]: every integer form (the suite: the K-quant with mins, Q6_K's two scales, an offset type,
// Q8_0's signed bytes, an IQ4 table); 70 tokens cross a 64-token tile
const PLAIN: readonly Case[] = [
  [GGMLType.Q4_K, 256, 67, 70],
  [GGMLType.Q6_K, 512, 33, 9],
  [GGMLType.Q5_0, 96, 19, 5],
  [GGMLType.Q8_0, 64, 21, 6],
  [GGMLType.IQ4_XS, 256, 19, 9],
  [GGMLType.Q4_0, 64, 9, 5],
  [GGMLType.Q4_1, 64, 9, 5],
  [GGMLType.Q5_1, 64, 9, 5],
  [GGMLType.Q5_K, 256, 9, 5],
  [GGMLType.IQ4_NL, 64, 9, 5],
];
const LISTS: readonly Case[] = [
  [GGMLType.Q4_K, 256, 67, 144],
  [GGMLType.Q6_K, 256, 40, 210],
  [GGMLType.Q5_0, 96, 19, 66],
];

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}): GpuRuntime {
  return new GpuRuntime(rt!.info, { checkWrites: true, ...opts, activations: "q8", tune: { gemm: 2, ...tune } });
}
const mat = (type: number, cols: number, rows: number, items = 1): GpuMatrix =>
  ({ type, cols, rows, items }) as unknown as GpuMatrix;

test("q8 selection: the integer kernel for types with an integer form under activations q8 only; steps divide the row and fit", {
  skip,
}, () => {
  const at = (activations: "exact" | "q8", tune: KernelTuning = {}, bytes = 49152): GpuRuntime =>
    new GpuRuntime(
      { ...rt!.info, subgroupSize: 32, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: bytes } },
      { tune, activations },
    );
  const a0 = mat(GGMLType.Q4_K, 2048, 3648);
  const down = mat(GGMLType.Q5_0, 1408, 2048, 64);
  const f16 = mat(GGMLType.F16, 2048, 3648);
  const describe = (r: GpuRuntime, m: GpuMatrix, n: number, mode: "plain" | "experts-list", dual = false): string => {
    const s = gemmShape(r, m, n, mode, true, dual);
    return s === undefined ? "none" : `${s.q8 === true ? "q8 " : ""}${s.rows}x${s.tokens} steps of ${s.ks}`;
  };
  assert.equal(describe(at("exact"), a0, 512, "plain"), "64x64 steps of 32");
  assert.equal(describe(at("q8"), a0, 512, "plain"), "q8 64x64 steps of 128");
  assert.equal(describe(at("q8"), a0, 512, "plain", true), "q8 64x64 steps of 128");
  assert.equal(describe(at("q8"), down, 512 * 6, "experts-list"), "q8 64x64 steps of 128"); // 1408 = 11 · 128
  assert.equal(describe(at("q8"), mat(GGMLType.Q8_0, 96, 4096), 512, "plain"), "q8 64x64 steps of 32");
  assert.equal(describe(at("q8"), f16, 512, "plain"), "64x64 steps of 32"); // no integer form: the f32 kernel
  // less workgroup memory: narrower steps, then fewer rows a thread
  assert.equal(describe(at("q8", {}, 16384), a0, 512, "plain", true), "q8 64x64 steps of 32");
  assert.equal(describe(at("q8", { gemmQ8Step: 64 }), a0, 512, "plain"), "q8 64x64 steps of 64");
  // expert lists from 12 pairs an expert under q8 (24 in exact mode; gemmExpertsFrom sets it): 16-token tiles of 2 rows
  // a thread, steps that fit
  const gate = mat(GGMLType.Q4_K, 2048, 1408, 64);
  assert.equal(describe(at("q8"), gate, 12 * 64, "experts-list", true), "q8 128x16 steps of 64");
  assert.equal(describe(at("q8"), gate, 11 * 64, "experts-list", true), "none");
  assert.equal(describe(at("exact"), gate, 12 * 64, "experts-list", true), "none");
  assert.equal(describe(at("q8", { gemmExpertsFrom: 8 }), gate, 8 * 64, "experts-list", true), "q8 128x16 steps of 64");
  assert.throws(() => gemmShape(at("q8", { gemmQ8Step: 16 }), a0, 512, "plain", true), /gemmQ8Step/);
  // an output head (≥ 65536 rows) from 32 tokens under q8 (32-token tiles up to 32 tokens); other plain products and
  // exact mode from 128; gemmHeadFrom = 0 turns the rule off
  const head = mat(GGMLType.Q6_K, 2048, 102400);
  assert.equal(describe(at("q8"), head, 64, "plain"), "q8 64x64 steps of 128");
  assert.equal(describe(at("q8"), head, 32, "plain"), "q8 128x32 steps of 128");
  assert.equal(describe(at("q8"), head, 31, "plain"), "none");
  assert.equal(describe(at("q8"), mat(GGMLType.Q6_K, 2048, 65535), 64, "plain"), "none");
  assert.equal(describe(at("q8"), a0, 127, "plain"), "none");
  assert.equal(describe(at("exact"), head, 64, "plain"), "none");
  assert.equal(describe(at("q8", { gemmHeadFrom: 0 }), head, 64, "plain"), "none");
  assert.equal(describe(at("q8", { gemmHeadFrom: 48 }), head, 48, "plain"), "q8 64x64 steps of 128");
  // pipelined steps: the q8 kernel's on GPUs (32-wide subgroups) by default, not the f32 kernel's; gemmPipe sets both
  assert.equal(gemmShape(at("q8"), a0, 512, "plain", true)?.pipe, true);
  assert.equal(gemmShape(at("exact"), a0, 512, "plain", true)?.pipe, undefined);
  assert.equal(gemmShape(at("q8", { gemmPipe: 0 }), a0, 512, "plain", true)?.pipe, undefined);
  assert.equal(gemmShape(at("exact", { gemmPipe: 1 }), a0, 512, "plain", true)?.pipe, true);
  assert.match(matvecKernel(at("q8"), a0, 512, false, true).code, Q8);
  assert.match(matvecKernel(at("q8"), f16, 512, false, true).code, F32);
  assert.throws(
    () => new GpuRuntime(rt!.info, { activations: "q4" as "q8" }),
    /activations must be exact, int15 or q8/,
  );
});

// [tuning, in the suite]: the default steps (the widest that divides the row); pipelined steps (the next step's staging
// in registers); steps of 32 (every unit its own step)
const tunings: readonly (readonly [KernelTuning, boolean])[] = [
  [{}, true],
  [{ gemmPipe: 1 }, true],
  [{ gemmQ8Step: 32, gemmTokens: 16 }, false],
];

for (const [tune, inSuite] of tunings) {
  const name = JSON.stringify(tune);
  test(`q8 register-tiled plain products ${name}: every integer form, odd rows, n = 5 … 70, strides, acc, SwiGLU, dual`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    const cases = LONG_SWEEPS ? PLAIN : PLAIN.slice(0, 5);
    await checkPlainProducts(runtime(tune), new Rng(301 + name.length), cases, {
      kernel: Q8,
      dual: true,
      q8: true,
      xq8: true,
    });
  });

  test(`q8 register-tiled per-head batch form and row pieces ${name}`, { skip: sweepSkip(skip, inSuite) }, async () => {
    await checkHeadsAndPieces((opts) => runtime(tune, opts), new Rng(323 + name.length), true);
  });

  test(`q8 register-tiled expert lists ${name}: uneven pairs, empty experts, pieces, acc, SwiGLU, dual`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    const types = LONG_SWEEPS ? LISTS : LISTS.slice(0, 1);
    await checkExpertLists((opts) => runtime(tune, opts), new Rng(341 + name.length), types, {
      kernel: Q8,
      dual: true,
      q8: true,
      xq8: true,
    });
  });
}

// The fused pipeline with activations q8 (every product the register-tiled kernel can take on it: gemm = 2, expert
// lists from a quarter pair an expert) on a Q4_K_M model: q8-pipeline.ts.
test("fused pipeline, activations q8 on the register-tiled kernel: near the reference (KL < 0.005 a row), not equal to the exact pipeline", {
  skip,
}, async () => {
  await checkFusedQ8(rt!, Q8, { gemm: 2, expertsFrom: 0.25, rowTile: 1 });
});
