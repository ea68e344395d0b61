// The wide-load matrix-vector kernel (1–4 tokens) against the CPU reference on fresh random inputs: Q4_K, Q6_K, Q5_0
// and Q8_0, odd row counts, rows of whole and odd block counts (unaligned 22/34/210-byte blocks), n = 1..4, strided x/y,
// overwrite (checked for complete writes), acc, SwiGLU, per-head batches in pieces, pair-major gathered products in
// pieces; and when it is chosen.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../../src/gguf/types.js";
import { quantize, rowBytes } from "../../../src/quant/index.js";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { GpuDeviceInfo } from "../../../src/backend/webgpu/core/device.js";
import {
  expertListWords,
  expertLists,
  GpuMatrix,
  matmul,
  matmulGather,
  matmulGatherSwiGLU,
  matmulSwiGLU,
  matvecKernel,
} from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { matvecWideWGSL, wideRowsPerGroup } from "../../../src/backend/webgpu/kernels/matmul/wide.wgsl.js";
import { wideShape } from "../../../src/backend/webgpu/kernels/matmul/select.js";
import { f32, gpuOrSkip, relErr, Rng, sweepSkip, u32 } from "./helpers.js";

const { rt, skip: noGpu } = await gpuOrSkip();
const skip =
  noGpu !== false
    ? noGpu
    : rt!.info.subgroupSize === undefined
      ? "the adapter has no fixed subgroup size (the wide kernel needs one)"
      : false;
const TOL = 2e-5;
const WIDE = /wide matvec/;

function runtime(opts: RuntimeOptions = {}): GpuRuntime {
  return new GpuRuntime(rt!.info, { checkWrites: true, ...opts });
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

test("the wide kernel is chosen for 1–4 tokens of its types with aligned x, and not otherwise", { skip }, () => {
  const r = runtime();
  const rng = new Rng(3);
  for (const type of [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q5_0, GGMLType.Q8_0]) {
    const { g } = upload(r, rng, type, 256, 5);
    // x staged in workgroup memory where it fits, unless tuned off
    assert.match(matvecKernel(r, g, 1, false, true).code, /var<workgroup> XS/);
    assert.doesNotMatch(matvecKernel(runtime({ tune: { wideStage: 0 } }), g, 1, false, true).code, /var<workgroup> XS/);
    for (let n = 1; n <= 4; n++)
      assert.match(matvecKernel(r, g, n, false, true).code, WIDE, `${typeName(type)} n=${n}`);
    assert.match(matvecKernel(r, g, 1, true, true).code, WIDE);
    assert.doesNotMatch(matvecKernel(r, g, 5, false, true).code, WIDE);
    assert.doesNotMatch(matvecKernel(r, g, 2, false, false).code, WIDE);
    assert.doesNotMatch(matvecKernel(r, g, 4, "experts", true).code, WIDE);
    assert.doesNotMatch(matvecKernel(runtime({ tune: { wide: 0 } }), g, 1, false, true).code, WIDE);
    assert.doesNotMatch(matvecKernel(runtime({ tune: { wide: 0 } }), g, 1, true, true).code, WIDE);
    assert.doesNotMatch(matvecKernel(runtime({ matvec: "shared" }), g, 1, false, true).code, WIDE);
    const nosg: GpuDeviceInfo = { ...rt!.info, subgroupSize: undefined };
    assert.doesNotMatch(matvecKernel(new GpuRuntime(nosg), g, 1, false, true).code, WIDE);
    g.destroy();
  }
  const { g } = upload(r, rng, GGMLType.Q4_0, 256, 5);
  assert.doesNotMatch(matvecKernel(r, g, 1, false, true).code, WIDE);
  g.destroy();
});

test("two rows a run of chunks (pack) at subgroup size 32 where one row leaves many lanes idle: v2-lite's 1408- and 2816-column rows, not dual products", {
  skip,
}, () => {
  // (two rows a run only where the run fits one pass of the unrolled steps: wideUnroll 8, as measured in round 9; at
  // the default of one step a pass no v2-lite row packs)
  const h200info: GpuDeviceInfo = {
    ...rt!.info,
    subgroupSize: 32,
    limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 32768 },
  };
  const h200 = new GpuRuntime(h200info, { tune: { wideUnroll: 8 } });
  assert.equal(
    wideShape(
      new GpuRuntime(h200info, {}),
      { type: GGMLType.Q5_0, cols: 1408, rows: 2048, items: 1 } as unknown as GpuMatrix,
      1,
      true,
      true,
    )?.pack,
    1,
  );
  const mat = (type: number, cols: number, rows: number): GpuMatrix =>
    ({ type, cols, rows, items: 1 }) as unknown as GpuMatrix;
  const packOf = (m: GpuMatrix, gather: boolean, rt2 = h200): number | undefined =>
    wideShape(rt2, m, 1, gather, true)?.pack;
  assert.equal(packOf(mat(GGMLType.Q5_0, 1408, 2048), true), 2);
  assert.equal(packOf(mat(GGMLType.Q8_0, 1408, 2048), true), 2);
  assert.equal(packOf(mat(GGMLType.Q6_K, 2816, 2048), false), 2);
  assert.equal(packOf(mat(GGMLType.Q4_K, 2048, 3648), false), 1);
  assert.equal(packOf(mat(GGMLType.Q6_K, 2048, 102400), false), 1);
  assert.equal(
    packOf(mat(GGMLType.Q5_0, 1408, 2048), true, new GpuRuntime(h200.info, { tune: { widePack: 0, wideUnroll: 8 } })),
    1,
  );
  // the dual gate·up never packs; the kernel's rows per workgroup count both rows of a subgroup
  const q = mat(GGMLType.Q4_K, 256, 64);
  assert.equal(packOf(q, false), 2);
  const s = wideShape(h200, q, 1, false, true)!;
  assert.equal(wideRowsPerGroup(s), 2 * s.rows);
  assert.match(matvecWideWGSL(GGMLType.Q4_K, "plain", { ...s, pack: 1 }, true), /silu|exp/);
});

test("half a subgroup a row by default at subgroup size 32 where a row's chunks leave many lanes idle: v2-lite's 1408-column down rows and 2816-column Q6_K rows, not its 2048-column ones", {
  skip,
}, () => {
  const h200info: GpuDeviceInfo = {
    ...rt!.info,
    subgroupSize: 32,
    limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: 32768 },
  };
  const mat = (type: number, cols: number, rows: number): GpuMatrix =>
    ({ type, cols, rows, items: 1 }) as unknown as GpuMatrix;
  const halfOf = (m: GpuMatrix, gather: boolean, tune = {}): boolean =>
    wideShape(new GpuRuntime(h200info, { tune }), m, 1, gather, true)?.half === true;
  assert.equal(halfOf(mat(GGMLType.Q5_0, 1408, 2048), true), true);
  assert.equal(halfOf(mat(GGMLType.Q8_0, 1408, 2048), true), true);
  assert.equal(halfOf(mat(GGMLType.Q6_K, 2816, 2048), false), true);
  assert.equal(halfOf(mat(GGMLType.Q4_K, 2048, 1408), true), false);
  assert.equal(halfOf(mat(GGMLType.Q6_K, 2048, 102400), false), false);
  assert.equal(halfOf(mat(GGMLType.Q5_0, 1408, 2048), true, { wideHalf: 0 }), false);
  assert.equal(halfOf(mat(GGMLType.Q4_K, 2048, 1408), true, { wideHalf: 2 }), true);
  // rows per workgroup count both halves
  const s = wideShape(new GpuRuntime(h200info, {}), mat(GGMLType.Q5_0, 1408, 2048), 1, true, true)!;
  assert.equal(wideRowsPerGroup(s), 2 * s.rows);
});

// (type, cols): whole super-blocks for the K-quants (they cannot hold 1408 columns: 5.5 super-blocks), and for Q5_0 /
// Q8_0 1408 (44 blocks) and 96 (3 blocks: every other row starts 2 bytes past a word)
const SHAPES: [number, number][] = [
  [GGMLType.Q4_K, 256],
  [GGMLType.Q4_K, 2048],
  [GGMLType.Q6_K, 256],
  [GGMLType.Q6_K, 2048],
  [GGMLType.Q5_0, 96],
  [GGMLType.Q5_0, 1408],
  [GGMLType.Q5_0, 2048],
  [GGMLType.Q8_0, 96],
  [GGMLType.Q8_0, 1408],
  [GGMLType.Q8_0, 2048],
];

for (const tune of [
  {},
  { wideRows: 3, wideUnroll: 1 },
  { wideRows: 2, wideSgRows: 3 },
  { wideStage: 0 },
  { widePack: 1 },
  { widePipe: 1 },
  { widePipe: 1, wideUnroll: 2, widePack: 1 },
  { widePipe: 1, wideStage: 0, wideSgRows: 2 },
  { wideHalf: 2 },
  { wideHalf: 2, wideSgRows: 2, wideUnroll: 2 },
]) {
  test(`wide matmul matches the CPU reference (tune ${JSON.stringify(tune)}): n = 1..4, strides, overwrite, acc, SwiGLU`, {
    skip: sweepSkip(skip, Object.keys(tune).length === 0),
  }, async () => {
    const r = runtime({ tune });
    const rng = new Rng(11 + Object.keys(tune).length);
    let k = 0;
    for (const [type, cols] of SHAPES) {
      for (let n = 1; n <= 4; n++) {
        // the other tunings run a subset: fewer pipelines to compile on a CPU adapter (the pipelined ones on rows of
        // several passes)
        if (
          "wideHalf" in tune
            ? n === 2 || n === 4
            : "widePipe" in tune
              ? cols < 1408 || n % 2 === 0
              : Object.keys(tune).length > 0 && (cols > 1408 || n % 2 === 0)
        )
          continue;
        const rows = k++ % 2 === 0 ? 67 : 131;
        const { w, g } = upload(r, rng, type, cols, rows);
        assert.match(matvecKernel(r, g, n, false, true).code, WIDE);
        // (half rows wherever rows are not packed two a run)
        if ("wideHalf" in tune)
          assert.equal(
            /let lo = subgroupAdd/.test(matvecKernel(r, g, n, false, true).code),
            wideShape(r, g, n, false, true)!.pack === 1,
            `${typeName(type)} ${cols}: half rows`,
          );
        const xOff = 4;
        const xStride = cols + 8;
        const yOff = 1;
        const yStride = rows + 3;
        const x = rng.f64(xOff + n * xStride);
        const y0 = rng.f64(yOff + n * yStride);
        const prod = new Float64Array(n * yStride);
        w.matmul(x.subarray(xOff), n, xStride, prod, yStride);
        const inY = (i: number): boolean => i >= yOff && (i - yOff) % yStride < rows && i - yOff < n * yStride;
        const label = `${typeName(type)} ${rows}x${cols} n=${n}`;
        // overwrite: every output written (checkWrites), nothing else touched
        const yb = f32(r, y0);
        matmul(r, g, f32(r, x), yb, { n, xStride, yStride, xOff, yOff });
        const got = await r.readF32(yb);
        const want = Float64Array.from(y0, (v, i) => (inY(i) ? prod[i - yOff] : v));
        assert.ok(relErr(got, want) < TOL, `${label}: err ${relErr(got, want)}`);
        const ybA = f32(r, y0);
        matmul(r, g, f32(r, x), ybA, { n, xStride, yStride, xOff, yOff, acc: true });
        const gotA = await r.readF32(ybA);
        const wantA = Float64Array.from(y0, (v, i) => (inY(i) ? v + prod[i - yOff] : v));
        assert.ok(relErr(gotA, wantA) < TOL, `${label} acc: err ${relErr(gotA, wantA)}`);
        const ybG = f32(r, y0);
        matmul(r, g, f32(r, x), ybG, { n, xStride, yStride, xOff, yOff, glu: true });
        const gotG = await r.readF32(ybG);
        const wantG = Float64Array.from(y0, (v, i) => (inY(i) ? (v / (1 + Math.exp(-v))) * prod[i - yOff] : v));
        assert.ok(relErr(gotG, wantG) < TOL, `${label} glu: err ${relErr(gotG, wantG)}`);
        g.destroy();
      }
    }
  });
}

// The sums decoder (Q4_K: offsets removed through staged Σx, typeCode's `sums`) carries 16 times a value's unit beside
// it; x of one sign (Σx as large as it gets against Σ q·x) is its worst case. Both decoders, same inputs; Q8_0 has no
// sums decoder (the tuning changes nothing there).
test("wide sums decoding (Q4_K) matches the CPU reference like the per-value decoding, x of one sign included", {
  skip,
}, async () => {
  const rng = new Rng(29);
  for (const [type, cols] of [
    [GGMLType.Q4_K, 2048],
    [GGMLType.Q4_K, 256],
    [GGMLType.Q8_0, 1408],
    [GGMLType.Q8_0, 96],
  ] as const) {
    for (const n of [1, 3]) {
      for (const shift of [0, 4]) {
        const rows = 45;
        const errs: number[] = [];
        for (const wideSums of [1, 0]) {
          const r = runtime({ tune: { wideSums } });
          const { w, g } = upload(r, new Rng(7 + cols + n), type, cols, rows);
          // (sums only where x is staged: at 1408–2048 columns one token's x fits, not three)
          const code = matvecKernel(r, g, n, false, true).code;
          assert.equal(
            /var<workgroup> XSS/.test(code),
            wideSums === 1 && type === GGMLType.Q4_K && /var<workgroup> XS:/.test(code),
          );
          if (n === 1) assert.match(code, /var<workgroup> XS:/);
          const x = Float64Array.from(rng.f64(n * cols), (v) => v + shift);
          const want = new Float64Array(n * rows);
          w.matmul(x, n, cols, want, rows);
          const yb = f32(r, new Float64Array(n * rows));
          matmul(r, g, f32(r, x), yb, { n, xStride: cols, yStride: rows });
          errs.push(relErr(await r.readF32(yb), want));
          g.destroy();
        }
        const label = `${typeName(type)} ${cols} n=${n} x+${shift}`;
        assert.ok(errs[0] < TOL, `${label}: sums err ${errs[0]} (per value ${errs[1]})`);
        assert.ok(errs[1] < TOL, `${label}: per-value err ${errs[1]}`);
      }
    }
  }
});

test("wide matmul over heads (batch), with the heads in several pieces", { skip }, async () => {
  const rng = new Rng(21);
  for (const [type, cols, n] of [
    [GGMLType.Q4_K, 256, 2],
    [GGMLType.Q5_0, 96, 3],
    [GGMLType.Q6_K, 256, 1],
    [GGMLType.Q8_0, 128, 4],
  ] as const) {
    const H = 5;
    const rows = 67;
    // two heads per piece
    const r = runtime({ maxBindingBytes: Math.ceil((2 * rows * rowBytes(type, cols)) / 256) * 256 });
    const { w, g } = upload(r, rng, type, cols, rows, H);
    assert.ok(g.pieces.length > 1, `${typeName(type)}: ${g.pieces.length} piece(s)`);
    assert.match(matvecKernel(r, g, n, false, true).code, WIDE);
    const count = H - 1; // the last head is left out
    const xStride = H * cols + 4;
    const yStride = H * rows + 1;
    const x = rng.f64(n * xStride);
    const yb = r.buffer(n * yStride * 4);
    matmul(r, g, f32(r, x), yb, { n, xStride, yStride, batch: { count, xBatch: cols, yBatch: rows } });
    const got = await r.readF32(yb);
    for (let h = 0; h < count; h++) {
      const want = new Float64Array(n * yStride);
      w.slice(h * rows, rows).matmul(x.subarray(h * cols), n, xStride, want, yStride);
      for (let t = 0; t < n; t++) {
        const a = got.subarray(t * yStride + h * rows, t * yStride + (h + 1) * rows);
        const b = want.subarray(t * yStride, t * yStride + rows);
        assert.ok(relErr(a, b) < TOL, `${typeName(type)} head ${h} t=${t}: err ${relErr(a, b)}`);
      }
    }
    g.destroy();
  }
});

test("wide pair-major gathered products: one piece and several, overwrite and SwiGLU", { skip }, async () => {
  const rng = new Rng(31);
  for (const [type, cols, rows] of [
    [GGMLType.Q4_K, 2048, 67],
    [GGMLType.Q5_0, 1408, 131],
    [GGMLType.Q6_K, 256, 67],
    [GGMLType.Q8_0, 1408, 67],
  ] as const) {
    const E = 6;
    const K = 2;
    const nTok = 3;
    // (widePack = 1: two rows a subgroup, which CPU adapters' narrow subgroups do not choose by themselves)
    for (const [maxBindingBytes, tune] of [
      [undefined, {}],
      [Math.ceil((2 * rows * rowBytes(type, cols)) / 256) * 256, {}],
      [undefined, { widePack: 1 }],
    ] as const) {
      const r = runtime({ ...(maxBindingBytes !== undefined ? { maxBindingBytes } : {}), tune });
      const { w, g } = upload(r, rng, type, cols, rows, E);
      if (maxBindingBytes !== undefined) assert.ok(g.pieces.length > 1);
      assert.match(matvecKernel(r, g, 1, true, true).code, WIDE);
      const x = rng.f64(nTok * cols);
      const ids = Array.from({ length: nTok }, () => {
        const a = rng.int(0, E - 1);
        return [a, (a + 1 + rng.int(0, E - 2)) % E];
      }).flat();
      const pairs = nTok * K;
      const yb = r.buffer(pairs * rows * 4);
      const idsB = u32(r, ids);
      matmulGather(r, g, f32(r, x), yb, idsB, { pairs, xDiv: K, xBatch: cols, yBatch: rows, mode: "pairs" });
      const got = await r.readF32(yb);
      const want = new Float64Array(pairs * rows);
      for (let b = 0; b < pairs; b++)
        w.slice(ids[b] * rows, rows).matmul(
          x.subarray(Math.floor(b / K) * cols),
          1,
          cols,
          want.subarray(b * rows),
          rows,
        );
      const label = `${typeName(type)} ${rows}x${cols} in ${g.pieces.length} piece(s), tune ${JSON.stringify(tune)}`;
      assert.ok(relErr(got, want) < TOL, `${label}: err ${relErr(got, want)}`);
      const g0 = rng.f64(pairs * rows);
      const ybG = f32(r, g0);
      matmulGather(r, g, f32(r, x), ybG, idsB, {
        pairs,
        xDiv: K,
        xBatch: cols,
        yBatch: rows,
        mode: "pairs",
        glu: true,
      });
      const gotG = await r.readF32(ybG);
      const wantG = Float64Array.from(g0, (v, i) => (v / (1 + Math.exp(-v))) * want[i]);
      assert.ok(relErr(gotG, wantG) < TOL, `${label} glu: err ${relErr(gotG, wantG)}`);
      g.destroy();
    }
  }
});

const silu = (v: number): number => v / (1 + Math.exp(-v));

for (const tune of [{}, { wideSgRows: 3 }, { wideHalf: 2 }])
  test(`dual wide products (gate and up in one dispatch, SwiGLU written directly): plain n = 1..5 and pair-major, in pieces, with fallbacks (tune ${JSON.stringify(tune)})`, {
    skip: sweepSkip(skip, Object.keys(tune).length === 0),
  }, async () => {
    const rng = new Rng(57);
    for (const [type, cols, rows] of [
      [GGMLType.Q4_K, 2048, 67],
      [GGMLType.Q5_0, 1408, 131],
      [GGMLType.Q6_K, 256, 67],
      [GGMLType.Q8_0, 96, 13],
    ] as const) {
      const E = 5;
      for (const maxBindingBytes of [undefined, Math.ceil((2 * rows * rowBytes(type, cols)) / 256) * 256]) {
        const r = runtime({ tune, ...(maxBindingBytes !== undefined ? { maxBindingBytes } : {}) });
        const label = `${typeName(type)} ${rows}x${cols}${maxBindingBytes !== undefined ? " in pieces" : ""}`;
        // plain: E = 1 item; n = 5 takes the two-dispatch fallback
        const gate = upload(r, rng, type, cols, rows);
        const up = upload(r, rng, type, cols, rows);
        for (const n of [1, 3, 5]) {
          const x = rng.f64(n * cols);
          const yb = r.buffer(n * rows * 4);
          const d0 = r.stats.dispatches;
          matmulSwiGLU(r, gate.g, up.g, f32(r, x), yb, { n, xStride: cols, yStride: rows });
          const dispatches = r.stats.dispatches - d0;
          const wg = new Float64Array(n * rows);
          const wu = new Float64Array(n * rows);
          gate.w.matmul(x, n, cols, wg, rows);
          up.w.matmul(x, n, cols, wu, rows);
          const want = wg.map((g, i) => silu(g) * wu[i]);
          const got = await r.readF32(yb);
          assert.ok(relErr(got, want) < TOL, `${label} n=${n}: err ${relErr(got, want)}`);
          // one dispatch per piece when dual (1–4 tokens), two per piece otherwise
          assert.equal(
            dispatches,
            gate.g.pieces.length * (n <= 4 ? 1 : 2),
            `${label} n=${n}: ${dispatches} dispatches`,
          );
        }
        gate.g.destroy();
        up.g.destroy();
        // pair-major over E experts
        const eg = upload(r, rng, type, cols, rows, E);
        const eu = upload(r, rng, type, cols, rows, E);
        const nTok = 2;
        const K = 2;
        const pairs = nTok * K;
        const x = rng.f64(nTok * cols);
        const ids = [0, 3, 4, 1];
        const yb = r.buffer(pairs * rows * 4);
        matmulGatherSwiGLU(r, eg.g, eu.g, f32(r, x), yb, u32(r, ids), {
          pairs,
          xDiv: K,
          xBatch: cols,
          yBatch: rows,
          mode: "pairs",
        });
        const want = new Float64Array(pairs * rows);
        const wg = new Float64Array(rows);
        const wu = new Float64Array(rows);
        for (let b = 0; b < pairs; b++) {
          const xb = x.subarray(Math.floor(b / K) * cols);
          eg.w.slice(ids[b] * rows, rows).matmul(xb, 1, cols, wg, rows);
          eu.w.slice(ids[b] * rows, rows).matmul(xb, 1, cols, wu, rows);
          for (let i = 0; i < rows; i++) want[b * rows + i] = silu(wg[i]) * wu[i];
        }
        const got = await r.readF32(yb);
        assert.ok(relErr(got, want) < TOL, `${label} gathered: err ${relErr(got, want)}`);
        // expert-major (pairs ≥ experts/4 by default here): the two-dispatch fallback gives the same
        const yb2 = r.buffer(pairs * rows * 4);
        matmulGatherSwiGLU(r, eg.g, eu.g, f32(r, x), yb2, u32(r, ids), {
          pairs,
          xDiv: K,
          xBatch: cols,
          yBatch: rows,
          mode: "experts",
        });
        assert.ok(relErr(await r.readF32(yb2), want) < TOL, `${label} gathered, expert-major fallback`);
        eg.g.destroy();
        eu.g.destroy();
      }
    }
  });

test("wide expert-list products with tune.wideLists = 1 (4 pairs a tile; uneven pairs per expert, empty experts, pieces; single and dual) and when they are chosen", {
  skip,
}, async () => {
  const rng = new Rng(71);
  for (const [type, cols, rows] of [
    [GGMLType.Q4_K, 256, 67],
    [GGMLType.Q5_0, 1408, 13],
    [GGMLType.Q6_K, 256, 35],
    [GGMLType.Q8_0, 96, 70],
  ] as const) {
    const E = 6;
    const K = 2;
    for (const maxBindingBytes of [undefined, Math.ceil((2 * rows * rowBytes(type, cols)) / 256) * 256]) {
      const r = runtime({ ...(maxBindingBytes !== undefined ? { maxBindingBytes } : {}), tune: { wideLists: 1 } });
      const label = `${typeName(type)} ${rows}x${cols}${maxBindingBytes !== undefined ? " in pieces" : ""}`;
      const eg = upload(r, rng, type, cols, rows, E);
      const eu = upload(r, rng, type, cols, rows, E);
      // 11 tokens × 2 slots over 6 experts: expert 2 gets none, expert 0 gets 9 (three tiles, the last partial)
      const nTok = 11;
      const ids: number[] = [];
      for (let t = 0; t < nTok; t++) ids.push(t < 9 ? 0 : 1, [1, 3, 4, 5][t % 4]);
      const pairs = nTok * K;
      assert.match(matvecKernel(r, eg.g, pairs, "experts-list", true).code, WIDE);
      assert.doesNotMatch(matvecKernel(runtime(), eg.g, pairs, "experts-list", true).code, WIDE); // off by default
      assert.doesNotMatch(matvecKernel(r, eg.g, 17 * E, "experts-list", true).code, WIDE); // long lists (prefill)
      const x = rng.f64(nTok * cols);
      const idsB = u32(r, ids);
      const lists = r.buffer(expertListWords(pairs, E) * 4);
      expertLists(r, idsB, lists, { pairs, E });
      const want = new Float64Array(pairs * rows);
      const wantU = new Float64Array(pairs * rows);
      for (let b = 0; b < pairs; b++) {
        const xb = x.subarray(Math.floor(b / K) * cols);
        eg.w.slice(ids[b] * rows, rows).matmul(xb, 1, cols, want.subarray(b * rows), rows);
        eu.w.slice(ids[b] * rows, rows).matmul(xb, 1, cols, wantU.subarray(b * rows), rows);
      }
      const xb = f32(r, x);
      const yb = r.buffer(pairs * rows * 4);
      matmulGather(r, eg.g, xb, yb, idsB, { pairs, xDiv: K, xBatch: cols, yBatch: rows, mode: "experts", lists });
      assert.ok(relErr(await r.readF32(yb), want) < TOL, `${label}: err ${relErr(await r.readF32(yb), want)}`);
      const yd = r.buffer(pairs * rows * 4);
      const d0 = r.stats.dispatches;
      matmulGatherSwiGLU(r, eg.g, eu.g, xb, yd, idsB, {
        pairs,
        xDiv: K,
        xBatch: cols,
        yBatch: rows,
        mode: "experts",
        lists,
      });
      assert.equal(r.stats.dispatches - d0, eg.g.pieces.length, `${label}: one dual dispatch per piece`);
      const wantD = want.map((g, i) => silu(g) * wantU[i]);
      assert.ok(relErr(await r.readF32(yd), wantD) < TOL, `${label} dual: err ${relErr(await r.readF32(yd), wantD)}`);
      eg.g.destroy();
      eu.g.destroy();
    }
  }
});
