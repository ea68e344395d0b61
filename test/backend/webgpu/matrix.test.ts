import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import {
  getRows,
  GpuMatrix,
  matmul,
  matmulGather,
  matmulT,
} from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { GPU_TYPES } from "../../../src/backend/webgpu/kernels/quant.wgsl.js";
import { f32, gpuOrSkip, record, relErr, Rng, u32 } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 2e-5;

function randomMatrix(rng: Rng, type: number, cols: number, rows: number): QMatrix {
  const data = quantize(type, rng.f32(cols * rows), cols);
  return new QMatrix("w", type, cols, rows, data);
}

function colsFor(type: number, rng: Rng): number[] {
  const block =
    type === GGMLType.F32 || type === GGMLType.F16 || type === GGMLType.BF16
      ? 1
      : [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.IQ4_XS].includes(type)
        ? 256
        : 32;
  return block === 1 ? [40, 96 + rng.int(0, 3), 7] : block === 256 ? [256, 512] : [32, 96];
}

for (const type of GPU_TYPES) {
  test(`matmul / matmulT ${typeName(type)} match the CPU reference on random inputs`, { skip }, async () => {
    const rng = new Rng(100 + type);
    for (const cols of colsFor(type, rng)) {
      for (const [rows, n] of [
        [5, 1],
        [33, 3],
        [70, 11],
      ] as const) {
        const w = randomMatrix(rng, type, cols, rows);
        const g = GpuMatrix.upload(rt!, "w", type, cols, rows, w.data);
        const x = rng.f64(n * cols);
        const want = new Float64Array(n * rows);
        w.matmul(x, n, cols, want, rows);
        const xb = f32(rt!, x);
        const yb = rt!.buffer(n * rows * 4);
        matmul(rt!, g, xb, yb, { n, xStride: cols, yStride: rows });
        const got = await rt!.readF32(yb);
        assert.ok(
          record(`matmul ${typeName(type)}`, relErr(got, want)) < TOL,
          `matmul ${typeName(type)} ${rows}x${cols} n=${n}: err ${relErr(got, want)}`,
        );

        const xt = rng.f64(n * rows);
        const wantT = new Float64Array(n * cols);
        w.matmulT(xt, n, rows, wantT, cols);
        const xtb = f32(rt!, xt);
        const ytb = rt!.buffer(n * cols * 4);
        matmulT(rt!, g, xtb, ytb, { n, xStride: rows, yStride: cols });
        const gotT = await rt!.readF32(ytb);
        assert.ok(
          record(`matmulT ${typeName(type)}`, relErr(gotT, wantT)) < TOL,
          `matmulT ${typeName(type)} ${rows}x${cols} n=${n}: err ${relErr(gotT, wantT)}`,
        );
        g.destroy();
      }
    }
  });
}

test("matrices past the binding limit are bound in pieces (rows, items)", { skip }, async () => {
  const small = new GpuRuntime(rt!.info, { checkWrites: true, maxBindingBytes: 1024 });
  const rng = new Rng(7);
  for (const type of [GGMLType.Q4_K, GGMLType.Q8_0, GGMLType.F16]) {
    const cols = 256;
    const rows = 37;
    const w = randomMatrix(rng, type, cols, rows);
    const g = GpuMatrix.upload(small, "w", type, cols, rows, w.data);
    assert.ok(g.pieces.length > 1, `${typeName(type)} split into ${g.pieces.length} pieces`);
    const n = 3;
    const x = rng.f64(n * cols);
    const want = new Float64Array(n * rows);
    w.matmul(x, n, cols, want, rows);
    const yb = small.buffer(n * rows * 4);
    matmul(small, g, f32(small, x), yb, { n, xStride: cols, yStride: rows });
    assert.ok(relErr(await small.readF32(yb), want) < TOL);
    const xt = rng.f64(n * rows);
    const wantT = new Float64Array(n * cols);
    w.matmulT(xt, n, rows, wantT, cols);
    const ytb = small.buffer(n * cols * 4);
    matmulT(small, g, f32(small, xt), ytb, { n, xStride: rows, yStride: cols });
    assert.ok(relErr(await small.readF32(ytb), wantT) < TOL);
  }
  // stacked experts split by items, gathered products
  const E = 6;
  const rows = 8;
  const cols = 64;
  const all = randomMatrix(rng, GGMLType.Q8_0, cols, rows * E);
  const g = GpuMatrix.upload(small, "exps", GGMLType.Q8_0, cols, rows, all.data, E);
  assert.ok(g.pieces.length > 1);
  const nTok = 3;
  const K = 2;
  const ids = [4, 1, 0, 5, 2, 4];
  const x = rng.f64(nTok * cols);
  const yb = small.buffer(nTok * K * rows * 4);
  matmulGather(small, g, f32(small, x), yb, u32(small, ids), { pairs: nTok * K, xDiv: K, xBatch: cols, yBatch: rows });
  const got = await small.readF32(yb);
  for (let b = 0; b < nTok * K; b++) {
    const want = new Float64Array(rows);
    all.slice(ids[b] * rows, rows).matmul(x.subarray(Math.floor(b / K) * cols), 1, cols, want, rows);
    assert.ok(relErr(got.subarray(b * rows, (b + 1) * rows), want) < TOL, `pair ${b}`);
  }
});

test("head-batched products and gathered products over items", { skip }, async () => {
  const rng = new Rng(11);
  for (const type of [GGMLType.Q8_0, GGMLType.F32, GGMLType.Q4_0]) {
    const H = 3;
    const P = 32;
    const L = 64;
    const n = 2;
    const w = randomMatrix(rng, type, P, L * H); // per head L rows of P
    const g = GpuMatrix.upload(rt!, "kb", type, P, L, w.data, H);
    const D = P + 8;
    const q = rng.f64(n * H * D);
    const yb = rt!.buffer(n * H * L * 4);
    matmul(rt!, g, f32(rt!, q), yb, { n, xStride: H * D, yStride: H * L, batch: { count: H, xBatch: D, yBatch: L } });
    const got = await rt!.readF32(yb);
    const want = new Float64Array(n * H * L);
    for (let h = 0; h < H; h++) {
      const out = new Float64Array(n * L);
      w.slice(h * L, L).matmul(q.subarray(h * D), n, H * D, out, L);
      for (let t = 0; t < n; t++) want.set(out.subarray(t * L, (t + 1) * L), t * H * L + h * L);
    }
    assert.ok(record("matmul heads", relErr(got, want)) < TOL);
    // transposed per head: k_nope[t][h][p] = Σ_l kB[h][l][p]·c[t][l]
    const c = rng.f64(n * L);
    const kb = rt!.buffer(n * H * P * 4);
    matmulT(rt!, g, f32(rt!, c), kb, { n, xStride: L, yStride: H * P, batch: { count: H, xBatch: 0, yBatch: P } });
    const gotT = await rt!.readF32(kb);
    const wantT = new Float64Array(n * H * P);
    for (let h = 0; h < H; h++) {
      const out = new Float64Array(n * P);
      w.slice(h * L, L).matmulT(c, n, L, out, P);
      for (let t = 0; t < n; t++) wantT.set(out.subarray(t * P, (t + 1) * P), t * H * P + h * P);
    }
    assert.ok(record("matmulT heads", relErr(gotT, wantT)) < TOL);
  }
});

test("getRows dequantizes rows by id", { skip }, async () => {
  const rng = new Rng(3);
  for (const type of [GGMLType.Q6_K, GGMLType.F32, GGMLType.IQ4_XS]) {
    const w = randomMatrix(rng, type, 256, 20);
    const g = GpuMatrix.upload(rt!, "emb", type, 256, 20, w.data);
    const ids = [3, 19, 0, 3];
    const yb = rt!.buffer(ids.length * 256 * 4);
    getRows(rt!, g, u32(rt!, ids), yb, ids.length);
    const got = await rt!.readF32(yb);
    ids.forEach((id, t) => assert.deepEqual(Array.from(got.subarray(t * 256, (t + 1) * 256)), Array.from(w.row(id))));
  }
});
