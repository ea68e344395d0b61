// Work the wide kernel does beside its product (WideFusion, matrix.ts FusionArgs) against the CPU reference on fresh
// random inputs: the product of RMSNorm(x)·g, of RMSNorm(x + Σ_k w_k·ye_k)·g (the MoE combine into the residual), the
// combine added to an accumulated y, the dual gate·up products (plain and pair-major) of a normalized x, and the
// routing of logits scaled by 1/rms(h) (moeRoute with a RouteNorm); n = 1..3, odd row counts, several types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import {
  fusable,
  GpuMatrix,
  matmul,
  matmulGatherSwiGLU,
  matmulSwiGLU,
  matvecKernel,
} from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { moeRoute, routeNormShape, type RouteArgs } from "../../../src/backend/webgpu/kernels/moe/moe.js";
import { f32, gpuOrSkip, relErr, Rng } from "./helpers.js";

const { rt, skip: noGpu } = await gpuOrSkip();
const skip =
  noGpu !== false
    ? noGpu
    : rt!.info.subgroupSize === undefined
      ? "the adapter has no fixed subgroup size (the wide kernel needs one)"
      : false;
const TOL = 2e-5;
const EPS = 1e-6;

function runtime(): GpuRuntime {
  return new GpuRuntime(rt!.info, { checkWrites: true });
}

function upload(
  r: GpuRuntime,
  rng: Rng,
  type: number,
  cols: number,
  rows: number,
  items = 1,
): { w: QMatrix; g: GpuMatrix } {
  const w = new QMatrix("w", type, cols, rows * items, quantize(type, rng.f32(cols * rows * items), cols));
  return { w, g: GpuMatrix.upload(r, "w", type, cols, rows, w.data, items) };
}

/** Per token: RMSNorm(x_t + Σ_k rw[t·K+k]·ye[t·K+k])·g, in float64. */
function normed(
  x: Float64Array,
  n: number,
  cols: number,
  g: Float64Array,
  combine?: { ye: Float64Array; rw: Float64Array; K: number },
): Float64Array {
  const out = new Float64Array(n * cols);
  for (let t = 0; t < n; t++) {
    const v = Float64Array.from(x.subarray(t * cols, (t + 1) * cols));
    if (combine !== undefined)
      for (let k = 0; k < combine.K; k++)
        for (let j = 0; j < cols; j++)
          v[j] += combine.rw[t * combine.K + k] * combine.ye[(t * combine.K + k) * cols + j];
    const inv = 1 / Math.sqrt(v.reduce((s, a) => s + a * a, 0) / cols + EPS);
    for (let j = 0; j < cols; j++) out[t * cols + j] = v[j] * inv * g[j];
  }
  return out;
}

const silu = (v: number): number => v / (1 + Math.exp(-v));

test("fusable: the wide kernel with x staged, one piece; fused work elsewhere is an error, not a silent unfused product", {
  skip,
}, () => {
  const r = runtime();
  const rng = new Rng(5);
  const { g } = upload(r, rng, GGMLType.Q8_0, 64, 9);
  assert.ok(fusable(r, g, 1, false));
  assert.ok(!fusable(r, g, 5, false), "5 tokens: not the wide kernel");
  assert.ok(!fusable(new GpuRuntime(rt!.info, { tune: { wideStage: 0 } }), g, 1, false), "x not staged");
  const { g: q40 } = upload(r, rng, GGMLType.Q4_0, 64, 9);
  assert.ok(!fusable(r, q40, 1, false), "Q4_0: not a wide type");
  const x = f32(r, rng.f64(64));
  const y = r.buffer(9 * 4);
  const gb = f32(r, rng.f64(64));
  assert.throws(
    () => matmul(r, q40, x, y, { n: 1, xStride: 64, yStride: 9, fuse: { norm: { g: gb, eps: EPS } } }),
    /fused work/,
  );
  assert.match(matvecKernel(r, g, 1, false, true, 9, { norm: { eps: EPS, combine: 2 } }).code, /inverseSqrt/);
  g.destroy();
  q40.destroy();
});

for (const [type, cols] of [
  [GGMLType.Q8_0, 96],
  [GGMLType.Q4_K, 256],
  [GGMLType.Q5_0, 64],
  [GGMLType.Q6_K, 256],
] as const) {
  test(`${typeName(type)} ${cols} columns: the product of RMSNorm(x)·g and of RMSNorm(x + combine)·g; y += W·x + combine`, {
    skip,
  }, async () => {
    const r = runtime();
    const rng = new Rng(17 + cols + type);
    for (const n of [1, 3]) {
      const rows = n === 1 ? 67 : 45;
      const { w, g } = upload(r, rng, type, cols, rows);
      const K = 3;
      // x with an offset: its rms is not its spread
      const x = Float64Array.from(rng.f64(n * cols), (v) => v * 2 + 0.5);
      const gw = rng.f64(cols);
      const ye = rng.f64(n * K * cols);
      const rw = rng.f64(n * K);
      const combine = { ye, rw, K };
      const gpuCombine = { ye: f32(r, ye), rw: f32(r, rw), K };
      const label = `${typeName(type)} ${rows}x${cols} n=${n}`;
      for (const withCombine of [false, true]) {
        const want = new Float64Array(n * rows);
        w.matmul(normed(x, n, cols, gw, withCombine ? combine : undefined), n, cols, want, rows);
        const yb = r.buffer(n * rows * 4);
        matmul(r, g, f32(r, x), yb, {
          n,
          xStride: cols,
          yStride: rows,
          fuse: { norm: { g: f32(r, gw), eps: EPS, ...(withCombine ? { combine: gpuCombine } : {}) } },
        });
        const got = await r.readF32(yb);
        assert.ok(relErr(got, want) < TOL, `${label}${withCombine ? " combine" : ""}: err ${relErr(got, want)}`);
      }
      // y0 + W·x + Σ_k w_k·ye_k, the combine's rows as wide as y's (rows)
      const yeY = rng.f64(n * K * rows);
      const y0 = rng.f64(n * rows);
      const prod = new Float64Array(n * rows);
      w.matmul(x, n, cols, prod, rows);
      const wantA = Float64Array.from(y0, (v, i) => {
        const t = Math.floor(i / rows);
        let s = v + prod[i];
        for (let k = 0; k < K; k++) s += rw[t * K + k] * yeY[(t * K + k) * rows + (i % rows)];
        return s;
      });
      const ybA = f32(r, y0);
      matmul(r, g, f32(r, x), ybA, {
        n,
        xStride: cols,
        yStride: rows,
        acc: true,
        fuse: { addCombine: { ye: f32(r, yeY), rw: f32(r, rw), K } },
      });
      const gotA = await r.readF32(ybA);
      assert.ok(relErr(gotA, wantA) < TOL, `${label} addCombine: err ${relErr(gotA, wantA)}`);
      // without acc: W·x + Σ_k w_k·ye_k over whatever y held (every output written: checkWrites)
      const ybO = f32(r, y0);
      matmul(r, g, f32(r, x), ybO, {
        n,
        xStride: cols,
        yStride: rows,
        fuse: { addCombine: { ye: f32(r, yeY), rw: f32(r, rw), K } },
      });
      const gotO = await r.readF32(ybO);
      const wantO = Float64Array.from(wantA, (v, i) => v - y0[i]);
      assert.ok(relErr(gotO, wantO) < TOL, `${label} addCombine without acc: err ${relErr(gotO, wantO)}`);
      g.destroy();
    }
  });
}

test("dual gate·up of RMSNorm(x)·g: plain (n = 1, 2) and pair-major gathered (3 tokens × 2 slots)", {
  skip,
}, async () => {
  const r = runtime();
  const rng = new Rng(41);
  for (const [type, cols] of [
    [GGMLType.Q8_0, 64],
    [GGMLType.Q4_K, 256],
  ] as const) {
    const gw = rng.f64(cols);
    for (const n of [1, 2]) {
      const rows = 37;
      const { w: wg, g: gg } = upload(r, rng, type, cols, rows);
      const { w: wu, g: gu } = upload(r, rng, type, cols, rows);
      assert.ok(fusable(r, gg, n, false, gu));
      const x = rng.f64(n * cols);
      const xn = normed(x, n, cols, gw);
      const a = new Float64Array(n * rows);
      const b = new Float64Array(n * rows);
      wg.matmul(xn, n, cols, a, rows);
      wu.matmul(xn, n, cols, b, rows);
      const want = Float64Array.from(a, (v, i) => silu(v) * b[i]);
      const yb = r.buffer(n * rows * 4);
      matmulSwiGLU(r, gg, gu, f32(r, x), yb, {
        n,
        xStride: cols,
        yStride: rows,
        fuse: { norm: { g: f32(r, gw), eps: EPS } },
      });
      const got = await r.readF32(yb);
      assert.ok(relErr(got, want) < TOL, `${typeName(type)} dual n=${n}: err ${relErr(got, want)}`);
      gg.destroy();
      gu.destroy();
    }
    // experts: 5 of them, 3 tokens choosing 2 each
    const E = 5;
    const K = 2;
    const nTok = 3;
    const rows = 21;
    const { w: wg, g: gg } = upload(r, rng, type, cols, rows, E);
    const { w: wu, g: gu } = upload(r, rng, type, cols, rows, E);
    assert.ok(fusable(r, gg, 1, true, gu));
    const ids = [4, 1, 0, 4, 2, 3];
    const x = rng.f64(nTok * cols);
    const xn = normed(x, nTok, cols, gw);
    const want = new Float64Array(nTok * K * rows);
    for (let p = 0; p < nTok * K; p++) {
      const e = ids[p];
      const a = new Float64Array(rows);
      const b = new Float64Array(rows);
      wg.slice(e * rows, rows).matmul(xn.subarray(Math.floor(p / K) * cols), 1, cols, a, rows);
      wu.slice(e * rows, rows).matmul(xn.subarray(Math.floor(p / K) * cols), 1, cols, b, rows);
      for (let i = 0; i < rows; i++) want[p * rows + i] = silu(a[i]) * b[i];
    }
    const yb = r.buffer(nTok * K * rows * 4);
    const idsBuf = r.upload(new Uint32Array(ids));
    matmulGatherSwiGLU(r, gg, gu, f32(r, x), yb, idsBuf, {
      pairs: nTok * K,
      xDiv: K,
      xBatch: cols,
      yBatch: rows,
      mode: "pairs",
      fuse: { norm: { g: f32(r, gw), eps: EPS } },
    });
    const got = await r.readF32(yb);
    assert.ok(relErr(got, want) < TOL, `${typeName(type)} gathered dual: err ${relErr(got, want)}`);
    gg.destroy();
    gu.destroy();
  }
});

test("moeRoute with a RouteNorm routes z'/rms(h) as moeRoute routes those logits (softmax and sigmoid + bias, groups)", {
  skip,
}, async () => {
  const r = runtime();
  const rng = new Rng(53);
  const dim = 48;
  for (const softmax of [true, false]) {
    const n = 3;
    const a: RouteArgs = {
      n,
      E: 16,
      K: 4,
      nGroup: softmax ? 1 : 4,
      nGroupUsed: softmax ? 1 : 2,
      softmax,
      groupMax: false,
      norm: !softmax,
      scale: 1.5,
    };
    assert.ok(routeNormShape(r, a, dim) !== undefined, "the subgroup routing kernel takes these arguments");
    const h = Float64Array.from(rng.f64(n * dim), (v) => v * 3);
    const zRaw = rng.f64(n * a.E, 4);
    const z = Float64Array.from(zRaw, (v, i) => {
      const t = Math.floor(i / a.E);
      const row = h.subarray(t * dim, (t + 1) * dim);
      return v / Math.sqrt(row.reduce((s, q) => s + q * q, 0) / dim + EPS);
    });
    const bias = softmax ? undefined : f32(r, rng.f64(a.E, 0.1));
    const route = async (zb: Float64Array, norm: boolean): Promise<{ ids: Uint32Array; w: Float32Array }> => {
      const ids = r.buffer(n * a.K * 4);
      const wts = r.buffer(n * a.K * 4);
      moeRoute(r, f32(r, zb), bias, ids, wts, a, norm ? { h: f32(r, h), dim, eps: EPS } : undefined);
      return { ids: new Uint32Array(await r.read(ids)), w: await r.readF32(wts) };
    };
    const want = await route(z, false);
    const got = await route(zRaw, true);
    assert.deepEqual([...got.ids], [...want.ids], `softmax=${softmax}: ids`);
    assert.ok(relErr(got.w, want.w) < 1e-5, `softmax=${softmax}: weights err ${relErr(got.w, want.w)}`);
  }
});
