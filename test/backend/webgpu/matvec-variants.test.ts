// The round-2 matrix-vector kernel in each variant (subgroup reduction, workgroup-memory reduction, and the first
// round's kernel) against the CPU reference on fresh random inputs: odd row counts (partial row groups), n = 1 and
// n > 1 (partial token tiles of 2, 8 and 16), strided x/y, accumulation, and gathered expert products.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/backend/cpu/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime } from "../../../src/backend/webgpu/runtime.js";
import { GpuMatrix, matmul, matmulGather } from "../../../src/backend/webgpu/matrix.js";
import { f32, gpuOrSkip, relErr, Rng, u32 } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 2e-5;
const sgOk = rt?.info.subgroupSize !== undefined;
const variants: ("shared" | "legacy" | "subgroup")[] = ["shared", "legacy", ...(sgOk ? (["subgroup"] as const) : [])];

for (const variant of variants) {
  test(`matvec (${variant}) matches the CPU reference: odd shapes, n = 1 and n > 1, strides, accumulation`, { skip }, async () => {
    const r = new GpuRuntime(rt!.info, { checkWrites: true, matvec: variant });
    const rng = new Rng(variant.length * 31 + 5);
    const cases: [number, number, number][] = [
      [GGMLType.Q4_K, 512, 1],
      [GGMLType.Q6_K, 256, 5],
      [GGMLType.Q8_0, 96, 20],
      [GGMLType.F16, 37, 3],
    ];
    for (const [type, cols, n] of cases) {
      const rows = 13 + rng.int(0, 60);
      const w = new QMatrix("w", type, cols, rows, quantize(type, rng.f32(cols * rows), cols));
      const g = GpuMatrix.upload(r, "w", type, cols, rows, w.data);
      const xStride = cols + 3;
      const yStride = rows + 2;
      const x = rng.f64(n * xStride);
      const y0 = rng.f64(n * yStride);
      const want = Float64Array.from(y0);
      const tmp = new Float64Array(n * yStride);
      w.matmul(x, n, xStride, tmp, yStride);
      for (let t = 0; t < n; t++) for (let i = 0; i < rows; i++) want[t * yStride + i]! += tmp[t * yStride + i]!;
      const yb = f32(r, y0);
      matmul(r, g, f32(r, x), yb, { n, xStride, yStride, acc: true });
      const got = await r.readF32(yb);
      assert.ok(relErr(got, want) < TOL, `${variant} ${typeName(type)} ${rows}x${cols} n=${n}: err ${relErr(got, want)}`);
      // overwrite (checked for complete writes)
      const yb2 = r.buffer(n * yStride * 4);
      matmul(r, g, f32(r, x), yb2, { n, xStride, yStride });
      const got2 = await r.readF32(yb2);
      for (let t = 0; t < n; t++) {
        const a = got2.subarray(t * yStride, t * yStride + rows);
        const b = tmp.subarray(t * yStride, t * yStride + rows);
        assert.ok(relErr(a, b) < TOL, `${variant} ${typeName(type)} overwrite t=${t}: err ${relErr(a, b)}`);
      }
      g.destroy();
    }
  });

  for (const [mode, nTok, E, maxBinding] of [["pairs", 3, 5, undefined], ["experts", 3, 5, undefined], ["experts", 300, 4, undefined], ["experts", 37, 6, 2 * 19 * 144]] as const) test(`gathered expert products (${variant}, ${mode}, ${nTok} tokens, ${E} experts${maxBinding !== undefined ? ", in pieces" : ""})`, { skip }, async () => {
    const r = new GpuRuntime(rt!.info, { checkWrites: true, matvec: variant, ...(maxBinding !== undefined ? { maxBindingBytes: maxBinding } : {}) });
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
      all.slice(ids[b]! * rows, rows).matmul(x.subarray(Math.floor(b / K) * cols), 1, cols, want, rows);
      assert.ok(relErr(got.subarray(b * rows, (b + 1) * rows), want) < TOL, `${variant} pair ${b}: err ${relErr(got.subarray(b * rows, (b + 1) * rows), want)} ids ${ids[b]} got ${got[b * rows]} want ${want[0]}`);
    }
    g.destroy();
  });
}

test("profile mode: GPU time per kernel label (timestamp queries), results unchanged", { skip: skip || (rt !== undefined && !rt.info.features.has("timestamp-query") ? "no timestamp-query" : false) }, async () => {
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
