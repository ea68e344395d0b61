// x quantized once by a pass of its own for the integer products (xq8.wgsl.ts, activations "q8", tune q8X): the pass
// against a CPU q8_1 on fresh random rows (offsets, strides, an all-zero unit, wide magnitudes), and every tiled
// integer product reading its buffer bit for bit equal to the same kernel quantizing x itself (the two run the same
// statements), with the pass dispatched once a product — and not inside together(), where the kernel must quantize.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import {
  expertListWords,
  expertLists,
  GpuMatrix,
  matmul,
  matmulGather,
  matmulGatherSwiGLU,
  matmulSwiGLU,
} from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { QUANTIZE_X_Q8_WGSL, XQ8_VEC4S, XQ8_WG } from "../../../src/backend/webgpu/kernels/matmul/xq8.wgsl.js";
import { f32, gpuOrSkip, Rng, u32 } from "./helpers.js";
import { snapQ8 } from "./matmul-cases.js";

const { rt, skip } = await gpuOrSkip();

test("the quantizing pass: q8_1 per 32 values of each row (q exact off the rounding boundaries, d and d·Σq to f32)", {
  skip,
}, async () => {
  const rng = new Rng(9101);
  for (const [rows, cols] of [
    [1, 32],
    [7, 96],
    [70, 2048],
  ] as const) {
    const off = 12;
    const stride = cols + 8;
    const x = rng.f64(off + rows * stride);
    for (let i = 0; i < x.length; i++) x[i] *= 10 ** rng.int(-3, 4);
    x.fill(0, off, off + 32); // an all-zero unit: d = 0, q = 0
    snapQ8(x, off, rows, stride, cols);
    const units = cols / 32;
    const q = rt!.buffer(rows * units * XQ8_VEC4S * 16);
    const groups = Math.ceil((rows * units) / XQ8_WG);
    rt!.dispatch(
      "quantize x q8",
      QUANTIZE_X_Q8_WGSL,
      [f32(rt!, x), q],
      new Uint32Array([rows, units, off, stride, groups, 0, 0, 0]),
      [groups, 1, 1],
      [{ buffer: q, offset: 0, size: q.size }],
    );
    const words = new Uint32Array((await rt!.readF32(q)).buffer);
    const asF32 = new Float32Array(words.buffer);
    for (let r = 0; r < rows; r++)
      for (let u = 0; u < units; u++) {
        const at = off + r * stride + 32 * u;
        let amax = 0;
        for (let k = 0; k < 32; k++) amax = Math.max(amax, Math.abs(Math.fround(x[at + k])));
        const d = Math.fround(amax / 127);
        const o = (r * units + u) * XQ8_VEC4S * 4;
        const label = `${rows}x${cols} row ${r} unit ${u}`;
        let sum = 0;
        for (let k = 0; k < 32; k++) {
          const want = d === 0 ? 0 : Math.round(Math.fround(x[at + k]) / d) + 0; // (+0: no −0)
          const got = (words[o + (k >> 2)] << (24 - 8 * (k & 3))) >> 24;
          assert.equal(got, want, `${label} value ${k}`);
          sum += want;
        }
        assert.ok(Math.abs(asF32[o + 8] - d) <= 2e-7 * d, `${label}: d ${asF32[o + 8]} against ${d}`);
        assert.ok(Math.abs(asF32[o + 9] - d * sum) <= 1e-6 * Math.abs(d * sum) + 1e-30, `${label}: d·Σq`);
        assert.equal(words[o + 10], 0);
        assert.equal(words[o + 11], 0);
      }
  }
});

interface Run {
  readonly out: Float32Array;
  readonly dispatches: number;
}

/** Runtimes with activations q8 and `tune`: x quantized by the pass (q8X = 1) and by the kernels (q8X = 0). */
function runtimes(tune: KernelTuning): { pass: GpuRuntime; kernel: GpuRuntime } {
  const make = (q8X: number): GpuRuntime =>
    new GpuRuntime(rt!.info, { checkWrites: true, activations: "q8", tune: { ...tune, q8X } });
  return { pass: make(1), kernel: make(0) };
}

/**
 * `product` with x quantized by the pass, by the kernel, and with the pass asked for inside together() (where the
 * kernel must quantize): the three results and their dispatch counts.
 */
async function bothWays(
  rts: { pass: GpuRuntime; kernel: GpuRuntime },
  product: (r: GpuRuntime) => { run: () => void; y: GPUBuffer },
): Promise<{ pass: Run; kernel: Run; together: Run }> {
  const once = async (r: GpuRuntime, together: boolean): Promise<Run> => {
    const { run, y } = product(r);
    const before = r.stats.dispatches;
    if (together) r.together(run);
    else run();
    const dispatches = r.stats.dispatches - before;
    return { out: await r.readF32(y), dispatches };
  };
  return {
    pass: await once(rts.pass, false),
    kernel: await once(rts.kernel, false),
    together: await once(rts.pass, true),
  };
}

function sameBits(a: Float32Array, b: Float32Array, label: string): void {
  assert.equal(a.length, b.length);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  const at = ua.findIndex((v, i) => v !== ub[i]);
  assert.equal(at, -1, `${label}: first difference at ${at} (${a[at]} against ${b[at]})`);
}

// [name, tuning that selects the kernel on any adapter (expert lists from a quarter pair an expert), weight types:
// the register-tiled kernel's K-quant with mins and Q6_K's two scales; the row-tiled kernel's Q4_K and Q5_0 forms]
const KERNELS: readonly (readonly [string, KernelTuning, readonly (readonly [number, number, number])[]])[] = [
  [
    "register-tiled",
    { gemm: 2, expertsFrom: 0.25 },
    [
      [GGMLType.Q4_K, 512, 67],
      [GGMLType.Q6_K, 256, 33],
    ],
  ],
  ["register-tiled, pipelined", { gemm: 2, expertsFrom: 0.25, gemmPipe: 1 }, [[GGMLType.Q4_K, 512, 67]]],
  [
    "row-tiled",
    { gemm: 0, rowTile: 1, expertsFrom: 0.25 },
    [
      [GGMLType.Q4_K, 512, 67],
      [GGMLType.Q5_0, 96, 19],
    ],
  ],
];

for (const [kernel, tune, types] of KERNELS) {
  test(`${kernel} integer products read x from the pass bit for bit as quantizing it themselves: plain, dual, lists`, {
    skip,
  }, async () => {
    const rng = new Rng(kernel.length * 977);
    const rts = runtimes(tune);
    // plain: 37 tokens (a partial tile) at an offset and stride; dual gate·up; lists of 3 experts, 2 a token
    for (const [type, cols, rows] of types) {
      const n = 37;
      const xStride = cols + 4;
      const x = rng.f64(8 + n * xStride);
      const wData = quantize(type, rng.f32(cols * rows), cols);
      const w2Data = quantize(type, rng.f32(cols * rows), cols);
      const label = `${kernel} ${type} ${rows}x${cols}`;
      const plain = await bothWays(rts, (r) => {
        const w = GpuMatrix.upload(r, "w", type, cols, rows, wData);
        const y = r.buffer(n * rows * 4);
        return { run: () => matmul(r, w, f32(r, x), y, { n, xStride, yStride: rows, xOff: 8 }), y };
      });
      sameBits(plain.pass.out, plain.kernel.out, `${label} plain`);
      sameBits(plain.together.out, plain.kernel.out, `${label} plain in together()`);
      assert.deepEqual([plain.pass.dispatches, plain.kernel.dispatches, plain.together.dispatches], [2, 1, 1]);
      const dual = await bothWays(rts, (r) => {
        const w = GpuMatrix.upload(r, "w", type, cols, rows, wData);
        const w2 = GpuMatrix.upload(r, "w2", type, cols, rows, w2Data);
        const y = r.buffer(n * rows * 4);
        return { run: () => matmulSwiGLU(r, w, w2, f32(r, x), y, { n, xStride, yStride: rows, xOff: 8 }), y };
      });
      sameBits(dual.pass.out, dual.kernel.out, `${label} dual`);
      sameBits(dual.together.out, dual.kernel.out, `${label} dual in together()`);
      assert.deepEqual([dual.pass.dispatches, dual.kernel.dispatches, dual.together.dispatches], [2, 1, 1]);
      // expert lists: 3 experts, 2 a token (x shared by a token's pairs), one expert unpicked
      const E = 3;
      const K = 2;
      const tokens = 29;
      const ids = Array.from({ length: tokens }, () => rng.int(0, 2)).flatMap((e) => [e, 1 - e]);
      const eData = quantize(type, rng.f32(cols * rows * E), cols);
      const e2Data = quantize(type, rng.f32(cols * rows * E), cols);
      for (const dualList of [false, true]) {
        const lists = await bothWays(rts, (r) => {
          const g = GpuMatrix.upload(r, "e", type, cols, rows, eData, E);
          const g2 = GpuMatrix.upload(r, "u", type, cols, rows, e2Data, E);
          const idsB = u32(r, ids);
          const lb = r.buffer(expertListWords(tokens * K, E) * 4);
          expertLists(r, idsB, lb, { pairs: tokens * K, E });
          const y = r.buffer(tokens * K * rows * 4);
          const args = {
            pairs: tokens * K,
            xDiv: K,
            xBatch: xStride,
            xOff: 8,
            yBatch: rows,
            mode: "experts" as const,
            lists: lb,
          };
          const xb = f32(r, x);
          return {
            run: () =>
              dualList ? matmulGatherSwiGLU(r, g, g2, xb, y, idsB, args) : matmulGather(r, g, xb, y, idsB, args),
            y,
          };
        });
        const what = `${label} lists${dualList ? " dual" : ""}`;
        sameBits(lists.pass.out, lists.kernel.out, what);
        sameBits(lists.together.out, lists.kernel.out, `${what} in together()`);
        assert.deepEqual([lists.pass.dispatches, lists.kernel.dispatches, lists.together.dispatches], [2, 1, 1], what);
      }
    }
  });
}
