// The register-tiled matrix-matrix kernel (gemm.wgsl.ts: prompt chunks, expert lists of many pairs an expert) against
// the CPU reference on fresh random inputs, through the shared cases of matmul-cases.ts: block and K-quant types
// (IQ4_XS through its unit decoder), odd rows, token counts below, at and past a tile (partial tiles), strided and
// offset x/y, accumulation and SwiGLU, the dual gate·up form, the per-head batch form, weights in pieces, and expert
// lists with uneven pair counts. On lavapipe the kernel runs only when asked for (tune.gemm = 2 here).
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { type GpuMatrix, matvecKernel } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { gemmShape } from "../../../src/backend/webgpu/kernels/matmul/select.js";
import { gpuOrSkip, LONG_SWEEPS, Rng, sweepSkip } from "./helpers.js";
import { checkExpertLists, checkHeadsAndPieces, checkPlainProducts } from "./matmul-cases.js";

const { rt, skip } = await gpuOrSkip();
const GEMM = /register-tiled product/;

// [tuning, workgroup memory the shapes may use, run in the suite]: the default tiles (Q4_K); 16-token tiles of two rows
// a thread, the other decoders; 16 KB (a GPU offering the WebGPU minimum), where single plain tiles take steps of 16
// columns and expert lists' dual tiles fewer rows a thread; the pipelined steps; then the long sweeps' other tiles.
const tunings: readonly (readonly [KernelTuning, number | undefined, boolean])[] = [
  [{}, undefined, true],
  [{ gemmTokens: 16 }, undefined, true],
  [{}, 16384, true],
  [{ gemmPipe: 1, gemmTokens: 16 }, undefined, true],
  [{ gemmTokens: 16, gemmRows: 1 }, undefined, false],
  [{ gemmTokens: 32, gemmRows: 2 }, undefined, false],
  [{ gemmTokens: 64, gemmRows: 8 }, undefined, false],
  [{ gemmStep: 32 }, undefined, false],
];

type Case = readonly [number, number, number, number];

// Cases [type, cols, rows, tokens] of the plain products and [type, cols, rows, row bytes] of the expert lists. In
// the suite the production tiles take Q4_K, the 16-token tiles every other decoder family (lavapipe's LLVM takes 10–30
// s for each kernel; Q8_0 runs in the per-head and pieces cases), the other configurations Q4_K: they change the
// kernel's frame, not its decoders. The long sweeps take every type everywhere.
const PLAIN: readonly Case[] = [
  [GGMLType.Q4_K, 256, 67, 70],
  [GGMLType.Q5_0, 96, 67, 5],
  [GGMLType.IQ4_XS, 256, 19, 9],
  [GGMLType.Q6_K, 512, 130, 9],
  [GGMLType.Q8_0, 64, 33, 70],
  [GGMLType.F16, 64, 21, 6],
];
const LISTS: readonly Case[] = [
  [GGMLType.Q4_K, 256, 67, 144],
  [GGMLType.Q6_K, 256, 40, 210],
  [GGMLType.Q5_0, 96, 19, 66],
];
const others = (tune: KernelTuning, workgroupBytes?: number): boolean =>
  tune.gemmTokens === 16 && tune.gemmPipe === undefined && tune.gemmRows === undefined && workgroupBytes === undefined;
function planCases(tune: KernelTuning, workgroupBytes?: number): readonly Case[] {
  return LONG_SWEEPS ? PLAIN : others(tune, workgroupBytes) ? PLAIN.slice(1, 4) : PLAIN.slice(0, 1);
}
function listCases(tune: KernelTuning, workgroupBytes?: number): readonly Case[] {
  return LONG_SWEEPS ? LISTS : others(tune, workgroupBytes) ? LISTS.slice(1) : LISTS.slice(0, 1);
}

function runtime(tune: KernelTuning, opts: RuntimeOptions = {}, workgroupBytes?: number): GpuRuntime {
  const info =
    workgroupBytes === undefined
      ? rt!.info
      : { ...rt!.info, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: workgroupBytes } };
  return new GpuRuntime(info, { checkWrites: true, ...opts, tune: { gemm: 2, ...tune } });
}

// (the shape reads only the matrix's type and dimensions)
const mat = (type: number, cols: number, rows: number, items = 1): GpuMatrix =>
  ({ type, cols, rows, items }) as unknown as GpuMatrix;

test("selection: by default at 32-wide subgroups from 128 tokens and from 24 pairs an expert; never with tune.gemm = 0, nor on CPU adapters unless asked", {
  skip,
}, () => {
  const at = (subgroupSize: number, tune: KernelTuning = {}): GpuRuntime =>
    new GpuRuntime(
      { ...rt!.info, subgroupSize, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 32768 } },
      { tune },
    );
  const h200 = at(32);
  const a0 = mat(GGMLType.Q4_K, 2048, 3648);
  const gate = mat(GGMLType.Q4_K, 2048, 1408, 64);
  const odd = mat(GGMLType.Q4_K, 2056, 64);
  const describe = (r: GpuRuntime, m: GpuMatrix, n: number, mode: "plain" | "experts-list", dual = false): string => {
    const s = gemmShape(r, m, n, mode, true, dual);
    return s === undefined ? "none" : `${s.rows}x${s.tokens}, ${s.tm}x${s.tn} a thread, steps of ${s.ks}`;
  };
  assert.equal(describe(h200, a0, 512, "plain"), "64x64, 4x4 a thread, steps of 32");
  const dense = mat(GGMLType.Q4_K, 2048, 10944);
  assert.equal(describe(h200, dense, 128, "plain"), "64x64, 4x4 a thread, steps of 32");
  assert.equal(describe(h200, dense, 127, "plain"), "none");
  assert.equal(describe(h200, a0, 128, "plain"), "none"); // 57 × 2 tiles: fewer than GEMM_MIN_GROUPS
  // expert lists: tiles sized to an expert's average pairs (v2-lite prefill 512: 48; GLM-5's 256 experts: 16)
  // (dual products and expert lists in steps of 16 columns)
  assert.equal(describe(h200, gate, 512 * 6, "experts-list", true), "64x64, 4x4 a thread, steps of 16");
  assert.equal(describe(h200, gate, 32 * 64, "experts-list", true), "128x32, 4x4 a thread, steps of 16");
  assert.equal(describe(h200, gate, 32 * 64, "experts-list"), "128x32, 4x4 a thread, steps of 16");
  assert.equal(describe(h200, a0, 512, "plain", true), "64x64, 4x4 a thread, steps of 16");
  assert.equal(describe(at(32, { gemmStep: 32 }), gate, 32 * 64, "experts-list"), "128x32, 4x4 a thread, steps of 32");
  assert.equal(describe(h200, gate, 24 * 64, "experts-list", true), "128x32, 4x4 a thread, steps of 16");
  assert.equal(describe(h200, gate, 23 * 64, "experts-list", true), "none");
  // from any count with tune.gemm = 2 (16-token tiles: GLM-5's 256 experts at a 512-token prefill)
  assert.equal(describe(at(32, { gemm: 2 }), gate, 16 * 64, "experts-list", true), "128x16, 2x4 a thread, steps of 16");
  assert.equal(describe(at(8), a0, 512, "plain"), "none");
  assert.equal(describe(at(32, { gemm: 0 }), a0, 512, "plain"), "none");
  assert.equal(describe(at(8, { gemm: 1 }), a0, 512, "plain"), "64x64, 4x4 a thread, steps of 32");
  assert.equal(describe(h200, odd, 512, "plain"), "none"); // columns not a multiple of 32
  // a small product (v2-lite's router: 64 rows, 8 tiles of 512 tokens) stays on the row-tiled kernel
  const router = mat(GGMLType.Q4_K, 2048, 64);
  assert.equal(describe(h200, router, 512, "plain"), "none");
  assert.equal(gemmShape(h200, router, 512, "plain", true, false, 64 * 16)?.rows, 64); // 16 heads' rows: 128 tiles
  assert.equal(describe(at(32, { gemm: 2 }), router, 512, "plain"), "64x64, 4x4 a thread, steps of 32");
  assert.equal(gemmShape(h200, a0, 512, "plain", false), undefined); // x not aligned
  // a tile that does not fit the workgroup memory takes steps of 16 columns, then fewer rows a thread (16 KB: the
  // single 64 × 64 tile needs 16.6 KB in steps of 32)
  const small = new GpuRuntime(
    { ...rt!.info, subgroupSize: 32, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 16384 } },
    {},
  );
  assert.equal(describe(small, a0, 512, "plain"), "64x64, 4x4 a thread, steps of 16");
  assert.equal(describe(small, gate, 32 * 64, "experts-list", true), "64x32, 2x4 a thread, steps of 16");
  assert.throws(() => gemmShape(at(32, { gemmTokens: 24 }), a0, 512, "plain", true), /gemmTokens/);
  assert.throws(() => gemmShape(at(32, { gemmRows: 3 }), a0, 512, "plain", true), /gemmRows/);
  // the launcher takes it where it applies
  assert.match(matvecKernel(h200, a0 as GpuMatrix, 512, false, true).code, GEMM);
  assert.doesNotMatch(matvecKernel(h200, a0 as GpuMatrix, 64, false, true).code, GEMM);
  assert.equal(gemmShape(at(32, { gemmStep: 16 }), a0, 512, "plain", true)?.ks, 16);
  assert.throws(() => gemmShape(at(32, { gemmStep: 8 }), a0, 512, "plain", true), /gemmStep/);
});

for (const [tune, workgroupBytes, inSuite] of tunings) {
  const name = `${JSON.stringify(tune)}${workgroupBytes !== undefined ? ` in ${workgroupBytes} B` : ""}`;
  test(`register-tiled plain products ${name}: types, odd rows, n = 5 / 9 / 70, strides, acc, SwiGLU, dual gate·up`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    const cases = planCases(tune, workgroupBytes);
    await checkPlainProducts(runtime(tune, {}, workgroupBytes), new Rng(101 + name.length), cases, {
      kernel: GEMM,
      dual: true,
    });
  });

  test(`register-tiled per-head batch form and row pieces ${name}`, {
    skip: sweepSkip(skip, inSuite && others(tune, workgroupBytes)),
  }, async () => {
    await checkHeadsAndPieces((opts) => runtime(tune, opts, workgroupBytes), new Rng(123 + name.length));
  });

  test(`register-tiled expert lists ${name}: uneven pairs per expert, empty experts, pieces, acc, SwiGLU, dual gate·up`, {
    skip: sweepSkip(skip, inSuite),
  }, async () => {
    const types = listCases(tune, workgroupBytes);
    await checkExpertLists((opts) => runtime(tune, opts, workgroupBytes), new Rng(141 + name.length), types, {
      kernel: GEMM,
      dual: true,
    });
  });
}
