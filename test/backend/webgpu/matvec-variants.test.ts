// The matrix-vector kernels in each variant (coalesced, subgroup reduction, workgroup-memory reduction) against the CPU reference on fresh random inputs: odd row counts (partial row groups), n = 1 and
// n > 1 (partial token tiles of 2, 8 and 16), strided x/y, accumulation, and gathered expert products.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { GpuDeviceInfo } from "../../../src/backend/webgpu/core/device.js";
import {
  expertListWords,
  expertLists,
  GpuMatrix,
  matmul,
  matmulGather,
  matvecKernel,
} from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { f32, gpuOrSkip, relErr, Rng, u32 } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 2e-5;
const sgOk = rt?.info.subgroupSize !== undefined;
type Variant = "coalesced" | "coalesced-nosg" | "coalesced-tuned" | "shared" | "subgroup";
const variants: Variant[] = [
  "coalesced",
  "coalesced-nosg",
  "coalesced-tuned",
  "shared",
  ...(sgOk ? (["subgroup"] as const) : []),
];

/** A runtime for a variant; coalesced-nosg is the coalesced kernel as a device without a fixed subgroup size gets it. */
function runtime(variant: Variant, opts: Omit<RuntimeOptions, "matvec">): GpuRuntime {
  if (variant === "coalesced-nosg") {
    const info: GpuDeviceInfo = { ...rt!.info, subgroupSize: undefined };
    return new GpuRuntime(info, { ...opts, matvec: "coalesced" });
  }
  // small expert tiles (several per expert), more threads per row, expert-major from half as many pairs as experts,
  // one-token products capped at 512 threads (down to one subgroup per row), and the coalesced kernel also for the
  // 1–4-token products the wide kernel takes by default
  if (variant === "coalesced-tuned")
    return new GpuRuntime(rt!.info, {
      ...opts,
      matvec: "coalesced",
      tune: { expertTn: 2, expertTpr: 64, expertsFrom: 0.5, fillThreads: 512, wide: 0 },
    });
  return new GpuRuntime(rt!.info, { ...opts, matvec: variant });
}

test("the coalesced kernel is the default and is chosen for aligned x (vec4 reads), not for unaligned", {
  skip,
}, () => {
  const r = new GpuRuntime(rt!.info);
  assert.equal(r.matvec, "coalesced");
  const g = GpuMatrix.upload(r, "w", GGMLType.Q8_0, 64, 3, quantize(GGMLType.Q8_0, new Rng(1).f32(64 * 3), 64));
  // (1–4 tokens of Q8_0 take the wide kernel: wide.test.ts)
  assert.match(matvecKernel(r, g, 5, false, true).code, /deq4/);
  assert.doesNotMatch(matvecKernel(r, g, 5, false, false).code, /deq4/);
  assert.match(matvecKernel(r, g, 40, "experts", true).code, /deq4/);
  g.destroy();
});

for (const variant of variants) {
  test(`matvec (${variant}) matches the CPU reference: odd shapes, n = 1 and n > 1, strides, accumulation`, {
    skip,
  }, async () => {
    const r = runtime(variant, { checkWrites: true });
    const rng = new Rng(variant.length * 31 + 5);
    // coalesced: x strides that are multiples of 4 (its vec4 path) for every type it decodes directly, one through the
    // generic unit decoder (IQ4_XS), widths from one vec4 step per thread to many, and one unaligned stride (fallback)
    const cases: [number, number, number, number][] = variant.startsWith("coalesced")
      ? [
          [GGMLType.Q4_K, 2048, 1, 4],
          [GGMLType.Q4_K, 512, 3, 4],
          [GGMLType.Q6_K, 768, 1, 8],
          [GGMLType.Q6_K, 256, 20, 4],
          [GGMLType.Q5_K, 512, 2, 4],
          [GGMLType.Q8_0, 96, 5, 4],
          [GGMLType.Q4_0, 160, 1, 4],
          [GGMLType.F32, 44, 3, 0],
          [GGMLType.F16, 36, 17, 4],
          [GGMLType.BF16, 64, 1, 4],
          [GGMLType.IQ4_NL, 128, 2, 4],
          [GGMLType.Q5_0, 1408, 1, 4],
          [GGMLType.Q5_0, 128, 6, 4],
          [GGMLType.Q5_1, 96, 3, 4],
          [GGMLType.Q4_1, 64, 2, 4],
          [GGMLType.IQ4_XS, 256, 2, 4],
          [GGMLType.Q8_0, 64, 3, 3],
        ]
      : [
          [GGMLType.Q4_K, 512, 1, 3],
          [GGMLType.Q6_K, 256, 5, 3],
          [GGMLType.Q8_0, 96, 20, 3],
          [GGMLType.F16, 37, 3, 3],
        ];
    for (const [type, cols, n, pad] of cases) {
      const rows = 13 + rng.int(0, 60);
      const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
      const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
      const xStride = cols + pad;
      const yStride = rows + 2;
      const x = rng.f64(n * xStride);
      const y0 = rng.f64(n * yStride);
      const want = Float64Array.from(y0);
      const tmp = new Float64Array(n * yStride);
      w.matmul(x, n, xStride, tmp, yStride);
      for (let t = 0; t < n; t++) for (let i = 0; i < rows; i++) want[t * yStride + i] += tmp[t * yStride + i];
      const yb = f32(r, y0);
      matmul(r, g, f32(r, x), yb, { n, xStride, yStride, acc: true });
      const got = await r.readF32(yb);
      assert.ok(
        relErr(got, want) < TOL,
        `${variant} ${typeName(type)} ${rows}x${cols} n=${n}: err ${relErr(got, want)}`,
      );
      // overwrite (checked for complete writes)
      const yb2 = r.buffer(n * yStride * 4);
      matmul(r, g, f32(r, x), yb2, { n, xStride, yStride });
      const got2 = await r.readF32(yb2);
      for (let t = 0; t < n; t++) {
        const a = got2.subarray(t * yStride, t * yStride + rows);
        const b = tmp.subarray(t * yStride, t * yStride + rows);
        assert.ok(relErr(a, b) < TOL, `${variant} ${typeName(type)} overwrite t=${t}: err ${relErr(a, b)}`);
      }
      // SwiGLU fused into the product: y = silu(y)·(W·x) with y holding gate values
      const yb3 = f32(r, y0);
      matmul(r, g, f32(r, x), yb3, { n, xStride, yStride, glu: true });
      const got3 = await r.readF32(yb3);
      const want3 = Float64Array.from(y0, (v, i) => (i % yStride < rows ? (v / (1 + Math.exp(-v))) * tmp[i] : v));
      assert.ok(relErr(got3, want3) < TOL, `${variant} ${typeName(type)} glu: err ${relErr(got3, want3)}`);
      g.destroy();
    }
  });

  for (const [mode, nTok, E, maxBinding] of [
    ["pairs", 3, 5, undefined],
    ["experts", 3, 5, undefined],
    ["experts", 300, 4, undefined],
    ["experts", 37, 6, 2 * 19 * 144],
    ["pairs", 4, 6, 2 * 19 * 144],
  ] as const)
    test(`gathered expert products (${variant}, ${mode}, ${nTok} tokens, ${E} experts${maxBinding !== undefined ? ", in pieces" : ""})`, {
      skip,
    }, async () => {
      const r = runtime(variant, {
        checkWrites: true,
        ...(maxBinding !== undefined ? { maxBindingBytes: maxBinding } : {}),
      });
      const rng = new Rng(77 + variant.length + nTok);
      const type = GGMLType.Q4_K;
      const cols = 256;
      const rows = 19;
      const K = 2;
      const all = new QMatrix("e", type, cols, rows * E, quantize(type, rng.f32(cols * rows * E), cols));
      const g = GpuMatrix.upload(r, "e", type, cols, rows, all.data, E);
      const x = rng.f64(nTok * cols);
      const yb = r.buffer(nTok * K * rows * 4);
      const ids = Array.from({ length: nTok }, () => {
        const a = rng.int(0, E - 1);
        return [a, (a + 1 + rng.int(0, E - 2)) % E]; // two distinct experts per token
      }).flat();
      matmulGather(r, g, f32(r, x), yb, u32(r, ids), { pairs: nTok * K, xDiv: K, xBatch: cols, yBatch: rows, mode });
      const got = await r.readF32(yb);
      for (let b = 0; b < nTok * K; b++) {
        const want = new Float64Array(rows);
        all.slice(ids[b] * rows, rows).matmul(x.subarray(Math.floor(b / K) * cols), 1, cols, want, rows);
        assert.ok(
          relErr(got.subarray(b * rows, (b + 1) * rows), want) < TOL,
          `${variant} pair ${b}: err ${relErr(got.subarray(b * rows, (b + 1) * rows), want)} ids ${ids[b]} got ${got[b * rows]} want ${want[0]}`,
        );
      }
      // expert lists built on the GPU (expert-major mode reads them instead of scanning), and the fused SwiGLU form
      const idsB = u32(r, ids);
      const lists = r.buffer(expertListWords(nTok * K, E) * 4);
      expertLists(r, idsB, lists, { pairs: nTok * K, E });
      const L = new Uint32Array(await r.read(lists));
      for (let e = 0; e < E; e++) {
        const mine = ids.map((v, b) => (v === e ? b : -1)).filter((b) => b >= 0);
        assert.equal(L[2 * e + 1], mine.length, `expert ${e} count`);
        assert.deepEqual(
          Array.from(L.subarray(2 * E + L[2 * e], 2 * E + L[2 * e] + mine.length)).sort((a, b) => a - b),
          mine,
          `expert ${e} list`,
        );
      }
      const g0 = rng.f64(nTok * K * rows);
      const yb2 = r.buffer(nTok * K * rows * 4);
      const yb3 = f32(r, g0);
      matmulGather(r, g, f32(r, x), yb2, idsB, { pairs: nTok * K, xDiv: K, xBatch: cols, yBatch: rows, mode, lists });
      matmulGather(r, g, f32(r, x), yb3, idsB, {
        pairs: nTok * K,
        xDiv: K,
        xBatch: cols,
        yBatch: rows,
        mode,
        lists,
        glu: true,
      });
      const got2 = await r.readF32(yb2);
      const got3 = await r.readF32(yb3);
      assert.ok(relErr(got2, got) < TOL, `${variant} with lists: err ${relErr(got2, got)}`);
      const want3 = Float64Array.from(g0, (v, i) => (v / (1 + Math.exp(-v))) * got[i]);
      assert.ok(relErr(got3, want3) < TOL, `${variant} glu: err ${relErr(got3, want3)}`);
      g.destroy();
    });
}

test("profile mode: GPU time per kernel label (timestamp queries), results unchanged", {
  skip: skip || (rt !== undefined && !rt.info.features.has("timestamp-query") ? "no timestamp-query" : false),
}, async () => {
  const r = new GpuRuntime(rt!.info, { profile: true });
  const rng = new Rng(3);
  const type = GGMLType.Q8_0;
  const w = new QMatrix("w", type, 64, 21, quantize(type, rng.f32(64 * 21), 64));
  const g = GpuMatrix.upload(r, "blk.7.w", type, 64, 21, w.data);
  const x = rng.f64(2 * 64);
  const want = new Float64Array(2 * 21);
  w.matmul(x, 2, 64, want, 21);
  const yb = r.buffer(2 * 21 * 4);
  matmul(r, g, f32(r, x), yb, { n: 2, xStride: 64, yStride: 21 });
  matmul(r, g, f32(r, x), yb, { n: 2, xStride: 64, yStride: 21 });
  assert.ok(relErr(await r.readF32(yb), want) < TOL);
  const prof = r.profile(true);
  const e = prof.find((p) => p.label === "matmul blk.#.w");
  assert.ok(e !== undefined, JSON.stringify(prof));
  assert.equal(e.count, 2);
  assert.ok(e.ms >= 0 && Number.isFinite(e.ms));
  assert.equal(r.profile().length, 0);
});
