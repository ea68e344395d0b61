// Parity of the WebGPU non-matrix kernels (and the attention / MoE / DSA compositions) with the CPU reference,
// on fresh random inputs of several shapes, with --check-writes on.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { layerNorm as cpuLayerNorm, rmsNorm as cpuRmsNorm, silu, softmaxInPlace } from "../../../src/tensor/ops.js";
import { plainKernels } from "../../../src/model/kernels.js";
import { GGMLType } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import type { ModelConfig } from "../../../src/model/config.js";
import { Rope } from "../../../src/model/rope.js";
import {
  attendAbsorbed,
  attendPrefill,
  type KeySelection,
  type LatentRows,
  type Projections,
} from "../../../src/model/mla.js";
import { moe, route } from "../../../src/model/moe.js";
import { Indexer } from "../../../src/model/dsa.js";
import type { AttentionWeights, MoEWeights } from "../../../src/model/weights.js";
import { GpuMatrix, matmul, matmulGather, matmulT } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import {
  addNorm,
  copyRows,
  layerNorm,
  rmsNorm,
  rope,
  RopeTable,
  ropeTo,
  softmax,
  swiglu,
} from "../../../src/backend/webgpu/kernels/rows/rows.js";
import { attention, attentionScratch, kvCacheWrite } from "../../../src/backend/webgpu/kernels/attention/attention.js";
import { dsaScores, dsaSelect, dsaTopK } from "../../../src/backend/webgpu/kernels/dsa/dsa.js";
import { moeCombine, moeRoute } from "../../../src/backend/webgpu/kernels/moe/moe.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { f32, gpuOrSkip, record, relErr, Rng, u32 } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 2e-5;

test("rmsNorm / layerNorm (in place and out of place)", { skip }, async () => {
  const rng = new Rng(1);
  for (const [n, dim] of [
    [1, 7],
    [3, 64],
    [5, 300],
  ] as const) {
    const x = rng.f64(n * dim);
    const g = rng.f32(dim);
    const b = rng.f32(dim);
    const want = new Float64Array(n * dim);
    const wantL = new Float64Array(n * dim);
    for (let t = 0; t < n; t++) {
      cpuRmsNorm(x, t * dim, g, 1e-6, want, t * dim);
      cpuLayerNorm(x, t * dim, g, b, 1e-5, wantL, t * dim);
    }
    const xb = f32(rt!, x);
    const yb = rt!.buffer(n * dim * 4);
    rmsNorm(rt!, xb, f32(rt!, g), yb, { n, dim }, 1e-6);
    assert.ok(record("rmsNorm", relErr(await rt!.readF32(yb), want)) < TOL);
    rmsNorm(rt!, xb, f32(rt!, g), undefined, { n, dim }, 1e-6);
    assert.ok(relErr(await rt!.readF32(xb), want) < TOL);
    const xl = f32(rt!, x);
    layerNorm(rt!, xl, f32(rt!, g), f32(rt!, b), undefined, { n, dim }, 1e-5);
    assert.ok(record("layerNorm", relErr(await rt!.readF32(xl), wantL)) < TOL);
  }
  // strided rows with offsets: aligned to 4 (the vec4 kernel) and not (the scalar one)
  for (const [xOff, xStride, yOff, yStride] of [
    [4, 68, 8, 72],
    [2, 67, 1, 65],
  ] as const) {
    const n = 3;
    const dim = 64;
    const x = rng.f64(xOff + n * xStride);
    const g = rng.f32(dim);
    const y0 = rng.f64(yOff + n * yStride);
    const want = Float64Array.from(y0);
    for (let t = 0; t < n; t++) cpuRmsNorm(x, xOff + t * xStride, g, 1e-6, want, yOff + t * yStride);
    const yb = f32(rt!, y0);
    rmsNorm(rt!, f32(rt!, x), f32(rt!, g), yb, { n, dim, xOff, xStride, yOff, yStride }, 1e-6);
    assert.ok(record("rmsNorm strided", relErr(await rt!.readF32(yb), want)) < TOL, `offsets ${xOff}/${yOff}`);
  }
});

test("interleaved YaRN rope matches Rope.apply", { skip }, async () => {
  const rng = new Rng(2);
  const cases = [
    new Rope(64, 10000, { factor: 40, originalContext: 4096, betaFast: 32, betaSlow: 1, mscaleAllDim: 0.707 }, 1.1),
    new Rope(6, 500, undefined, 1),
    new Rope(16, 10000, { factor: 4, originalContext: 64, betaFast: 32, betaSlow: 1, mscaleAllDim: undefined }, 1),
  ];
  for (const r of cases) {
    const n = 4;
    const heads = 3;
    const stride = heads * (r.dims + 5);
    const x = rng.f64(n * stride);
    const pos = [0, 17, 300, 4095];
    const want = Float64Array.from(x);
    for (let t = 0; t < n; t++)
      for (let h = 0; h < heads; h++) r.apply(want, t * stride + h * (r.dims + 5) + 5, pos[t]);
    const table = new RopeTable(rt!, r).ensure(4096);
    const xb = f32(rt!, x);
    rope(rt!, table, r.dims, xb, u32(rt!, pos), { n, heads, xOff: 5, tokStride: stride, headStride: r.dims + 5 });
    assert.ok(record("rope", relErr(await rt!.readF32(xb), want)) < TOL);
  }
});

test("rope into another buffer (ropeTo) and the fused latent cache write (kvCacheWrite)", { skip }, async () => {
  const rng = new Rng(12);
  for (const [dims, L, n, heads] of [
    [64, 512, 3, 16],
    [6, 20, 1, 3],
    [16, 300, 5, 2],
  ] as const) {
    const r = new Rope(
      dims,
      10000,
      { factor: 40, originalContext: 4096, betaFast: 32, betaSlow: 1, mscaleAllDim: 0.707 },
      1.1,
    );
    const table = new RopeTable(rt!, r).ensure(512);
    const pos = Array.from({ length: n }, () => rng.int(0, 511));
    // ropeTo: per head [nope (7) | pe (dims)] → y rows [other (L) | pe (dims)] per head, x untouched
    const D = 7 + dims;
    const x = rng.f64(n * heads * D);
    const y0 = rng.f64(n * heads * (L + dims));
    const want = Float64Array.from(y0);
    for (let t = 0; t < n; t++) {
      for (let h = 0; h < heads; h++) {
        const v = Float64Array.from(x.subarray((t * heads + h) * D + 7, (t * heads + h + 1) * D));
        r.apply(v, 0, pos[t]);
        want.set(v, (t * heads + h) * (L + dims) + L);
      }
    }
    const xb = f32(rt!, x);
    const yb = f32(rt!, y0);
    ropeTo(rt!, table, dims, xb, u32(rt!, pos), yb, {
      n,
      heads,
      xOff: 7,
      tokStride: heads * D,
      headStride: D,
      yOff: L,
      yTok: heads * (L + dims),
      yHead: L + dims,
    });
    assert.ok(record("ropeTo", relErr(await rt!.readF32(yb), want)) < TOL);
    assert.ok(relErr(await rt!.readF32(xb), Float32Array.from(x)) === 0, "ropeTo changed its input");
    // kvCacheWrite: rows [c (L) | k_pe (dims)] → normalized c and roped k_pe at scattered cache rows
    const kv = rng.f64(n * (L + dims));
    const g = rng.f32(L);
    const rowsAt = Array.from({ length: n }, (_, t) => 2 * t + 1);
    const cap = 2 * n + 2;
    const wantC = new Float64Array(cap * L);
    const wantK = new Float64Array(cap * dims);
    const cb = rt!.buffer(cap * L * 4);
    const kb = rt!.buffer(cap * dims * 4);
    for (let t = 0; t < n; t++) {
      cpuRmsNorm(kv.subarray(t * (L + dims), t * (L + dims) + L), 0, g, 1e-6, wantC, rowsAt[t] * L);
      const v = Float64Array.from(kv.subarray(t * (L + dims) + L, (t + 1) * (L + dims)));
      r.apply(v, 0, pos[t]);
      wantK.set(v, rowsAt[t] * dims);
    }
    kvCacheWrite(rt!, f32(rt!, kv), f32(rt!, g), table, dims, u32(rt!, pos), u32(rt!, rowsAt), cb, kb, { n, L }, 1e-6);
    const gotC = await rt!.readF32(cb);
    const gotK = await rt!.readF32(kb);
    assert.ok(record("kvCacheWrite c", relErr(gotC, wantC)) < TOL, `c err ${relErr(gotC, wantC)}`);
    assert.ok(record("kvCacheWrite k_pe", relErr(gotK, wantK)) < TOL, `k_pe err ${relErr(gotK, wantK)}`);
    // the same write from rows [q-LoRA latent (qDim) | c | k_pe] with the latent's norm in the same dispatch: cache rows
    // unchanged, the latent normalized in place, c and k_pe untouched
    const qDim = [24, 7, 520][dims % 3];
    const S = qDim + L + dims;
    const rows3 = rng.f64(n * S);
    for (let t = 0; t < n; t++) rows3.set(kv.subarray(t * (L + dims), (t + 1) * (L + dims)), t * S + qDim);
    const qg = rng.f32(qDim);
    const wantQ = Float32Array.from(rows3);
    const normed = new Float64Array(qDim);
    for (let t = 0; t < n; t++) {
      cpuRmsNorm(rows3.subarray(t * S, t * S + qDim), 0, qg, 1e-6, normed, 0);
      wantQ.set(normed, t * S);
    }
    const qb = f32(rt!, rows3);
    const cb2 = rt!.buffer(cap * L * 4);
    const kb2 = rt!.buffer(cap * dims * 4);
    kvCacheWrite(
      rt!,
      qb,
      f32(rt!, g),
      table,
      dims,
      u32(rt!, pos),
      u32(rt!, rowsAt),
      cb2,
      kb2,
      { n, L, kvOff: qDim, stride: S, qNorm: { g: f32(rt!, qg), dim: qDim } },
      1e-6,
    );
    assert.ok(relErr(await rt!.readF32(cb2), gotC) < 1e-6);
    assert.ok(relErr(await rt!.readF32(kb2), gotK) < 1e-6);
    assert.ok(record("kvCacheWrite + q norm", relErr(await rt!.readF32(qb), wantQ)) < TOL);
    // …and from rows [queries (heads × [nope 7 | pe]) | c | k_pe] with the queries' pe roped into y in the same dispatch
    const Sq = heads * D + L + dims;
    const rowsQ = rng.f64(n * Sq);
    for (let t = 0; t < n; t++) {
      rowsQ.set(x.subarray(t * heads * D, (t + 1) * heads * D), t * Sq);
      rowsQ.set(kv.subarray(t * (L + dims), (t + 1) * (L + dims)), t * Sq + heads * D);
    }
    const yq = f32(rt!, y0);
    const cb3 = rt!.buffer(cap * L * 4);
    const kb3 = rt!.buffer(cap * dims * 4);
    kvCacheWrite(
      rt!,
      f32(rt!, rowsQ),
      f32(rt!, g),
      table,
      dims,
      u32(rt!, pos),
      u32(rt!, rowsAt),
      cb3,
      kb3,
      {
        n,
        L,
        kvOff: heads * D,
        stride: Sq,
        qRope: { y: yq, heads, qpOff: 7, qHead: D, yOff: L, yTok: heads * (L + dims), yHead: L + dims },
      },
      1e-6,
    );
    assert.ok(relErr(await rt!.readF32(cb3), gotC) < 1e-6);
    assert.ok(relErr(await rt!.readF32(kb3), gotK) < 1e-6);
    assert.ok(record("kvCacheWrite + q rope", relErr(await rt!.readF32(yq), want)) < TOL);
  }
});

test("addNorm: the weighted expert outputs added to the residual, then RMSNorm (one kernel) = moeCombine then rmsNorm", {
  skip,
}, async () => {
  const rng = new Rng(77);
  for (const [n, K, dim] of [
    [1, 6, 2048],
    [3, 2, 37],
    [9, 1, 300],
    [2, 17, 64],
    [4, 16, 44],
  ] as const) {
    const ye = rng.f64(n * K * dim);
    const wts = rng.f32(n * K);
    const h = rng.f64(n * dim);
    const g = rng.f32(dim);
    const wantH = Float64Array.from(h);
    for (let t = 0; t < n; t++)
      for (let k = 0; k < K; k++)
        for (let i = 0; i < dim; i++) wantH[t * dim + i] += wts[t * K + k] * ye[(t * K + k) * dim + i];
    const wantY = new Float64Array(n * dim);
    for (let t = 0; t < n; t++) cpuRmsNorm(wantH.subarray(t * dim, (t + 1) * dim), 0, g, 1e-6, wantY, t * dim);
    const hb = f32(rt!, h);
    const yb = rt!.buffer(n * dim * 4);
    addNorm(rt!, f32(rt!, ye), f32(rt!, wts), hb, f32(rt!, g), yb, { n, K, dim }, 1e-6);
    assert.ok(record("addNorm h", relErr(await rt!.readF32(hb), wantH)) < TOL);
    assert.ok(record("addNorm y", relErr(await rt!.readF32(yb), wantY)) < TOL);
  }
});

test("swiglu, residual add, softmax and log-softmax", { skip }, async () => {
  const rng = new Rng(3);
  for (const [n, w] of [
    [1, 5],
    [4, 100],
    [2, 1000],
  ] as const) {
    const g = rng.f64(n * w, 3);
    const u = rng.f64(n * w);
    const gb = f32(rt!, g);
    swiglu(rt!, gb, f32(rt!, u), { n, width: w });
    assert.ok(
      record(
        "swiglu",
        relErr(
          await rt!.readF32(gb),
          g.map((v, i) => silu(v) * u[i]),
        ),
      ) < TOL,
    );
    const y = rng.f64(n * w);
    const yb = f32(rt!, y);
    copyRows(rt!, f32(rt!, u), yb, { n, width: w }, true);
    assert.ok(
      relErr(
        await rt!.readF32(yb),
        y.map((v, i) => v + u[i]),
      ) < TOL,
    );
    const sm = Float64Array.from(g);
    const lsm = new Float64Array(n * w);
    for (let t = 0; t < n; t++) {
      softmaxInPlace(sm, t * w, w);
      for (let i = 0; i < w; i++) lsm[t * w + i] = Math.log(sm[t * w + i]);
    }
    const sb = f32(rt!, g);
    softmax(rt!, sb, n, w);
    assert.ok(record("softmax", relErr(await rt!.readF32(sb), sm)) < TOL);
    const lb = f32(rt!, g);
    softmax(rt!, lb, n, w, true);
    assert.ok(record("logSoftmax", relErr(await rt!.readF32(lb), lsm)) < 1e-4);
  }
});

interface Shape {
  H: number;
  P: number;
  R: number;
  V: number;
  L: number;
}

function mlaSetup(
  rng: Rng,
  s: Shape,
  type: number,
): { cfg: ModelConfig; w: AttentionWeights; kB: QMatrix; vB: QMatrix } {
  const { H, P, R, V, L } = s;
  const kB = new QMatrix("kb", type, P, L * H, quantize(type, rng.f32(P * L * H, 0.3), P));
  const vB = new QMatrix("vb", type, L, V * H, quantize(type, rng.f32(L * V * H, 0.3), L));
  const cfg = {
    nHead: H,
    qkNope: P,
    qkRope: R,
    vHead: V,
    kvLoraRank: L,
    kqScale: 1 / Math.sqrt(P + R),
  } as unknown as ModelConfig;
  const w = {
    kB: Array.from({ length: H }, (_, h) => kB.slice(h * L, L)),
    vB: Array.from({ length: H }, (_, h) => vB.slice(h * V, V)),
  } as unknown as AttentionWeights;
  return { cfg, w, kB, vB };
}

/** META for n queries at pos0.. over one sequence (row base 0, causal key counts). */
function causalMeta(n: number, pos0: number): number[] {
  return Array.from({ length: n }, (_, i) => [0, pos0 + i + 1, 0, 0]).flat();
}

for (const [label, shape, n, pos0, type] of [
  ["small", { H: 2, P: 32, R: 8, V: 32, L: 64 }, 1, 5, GGMLType.Q8_0],
  ["odd", { H: 3, P: 32, R: 6, V: 64, L: 96 }, 3, 20, GGMLType.F16],
  ["long (split keys)", { H: 2, P: 32, R: 4, V: 32, L: 32 }, 2, 600, GGMLType.F32],
  ["v2-lite widths", { H: 3, P: 128, R: 64, V: 128, L: 512 }, 4, 270, GGMLType.Q8_0],
  ["odd widths, one query", { H: 5, P: 32, R: 10, V: 96, L: 160 }, 1, 30, GGMLType.Q4_0],
  ["four keys", { H: 2, P: 32, R: 8, V: 32, L: 64 }, 1, 3, GGMLType.Q8_0],
  [
    "a full chunk, columns not a multiple of the key groups' threads",
    { H: 2, P: 32, R: 6, V: 40, L: 72 },
    2,
    253,
    GGMLType.F32,
  ],
] as const)
  for (const variant of ["subgroup", "basic"] as const) {
    test(`MLA absorbed decode and prefill attention (${variant} kernel): ${label}`, { skip }, async () => {
      // basic: the kernel a device without a fixed subgroup size gets
      const r =
        variant === "subgroup" ? rt! : new GpuRuntime({ ...rt!.info, subgroupSize: undefined }, { checkWrites: true });
      const rng = new Rng(40 + n);
      const { H, P, R, V, L } = shape;
      const D = P + R;
      const { cfg, w, kB, vB } = mlaSetup(rng, shape, type);
      const T = pos0 + n;
      const lat: LatentRows = { c: rng.f64(T * L), kPe: rng.f64(T * R), length: T };
      const q = rng.f64(n * H * D);
      const pr: Projections = { q, c: new Float64Array(0), kPe: new Float64Array(0), qr: undefined };
      const wantDecode = attendAbsorbed(w, cfg, pr, n, pos0, lat, undefined, plainKernels);
      const wantPrefill = attendPrefill(w, cfg, pr, n, pos0, lat, undefined, plainKernels);

      const gkB = GpuMatrix.upload(r, "kb", type, P, L, kB.data, H);
      const gvB = GpuMatrix.upload(r, "vb", type, L, V, vB.data, H);
      const qb = f32(r, q);
      const cb = f32(r, lat.c);
      const kpe = f32(r, lat.kPe);
      const meta = u32(r, causalMeta(n, pos0));
      const sel = u32(r, [0]);
      const part = r.buffer(attentionScratch(n, H, Math.max(L, V), T) * 4);
      // decode: q_abs = W_UKᵀ q_nope per head → MQA over the latent → W_UV per head
      const qAbs = r.buffer(n * H * (L + R) * 4);
      matmul(r, gkB, qb, qAbs, {
        n,
        xStride: H * D,
        yStride: H * (L + R),
        batch: { count: H, xBatch: D, yBatch: L + R },
      });
      copyRows(r, qb, qAbs, { n: n * H, width: R, xOff: P, xStride: D, yOff: L, yStride: L + R });
      const lo = r.buffer(n * H * L * 4);
      attention(
        r,
        { q: qAbs, k1: cb, k2: kpe, v: cb, meta, sel, o: lo, part },
        {
          nq: n,
          heads: H,
          d1: L,
          d2: R,
          dv: L,
          scale: cfg.kqScale,
          maxKeys: T,
          q: { off: 0, stride: H * (L + R), head: L + R, q2Off: L },
          k1: { off: 0, stride: L, head: 0 },
          k2: { off: 0, stride: R },
          v: { off: 0, stride: L, head: 0 },
          o: { off: 0, stride: H * L, head: L },
        },
      );
      const ob = r.buffer(n * H * V * 4);
      matmul(r, gvB, lo, ob, { n, xStride: H * L, yStride: H * V, batch: { count: H, xBatch: L, yBatch: V } });
      assert.ok(
        record("attention decode", relErr(await r.readF32(ob), wantDecode)) < 1e-4,
        `decode err ${relErr(await r.readF32(ob), wantDecode)}`,
      );

      // prefill: k_nope = W_UK c, v = W_UV c for every position, then MHA
      const kn = r.buffer(T * H * P * 4);
      matmulT(r, gkB, cb, kn, { n: T, xStride: L, yStride: H * P, batch: { count: H, xBatch: 0, yBatch: P } });
      const vv = r.buffer(T * H * V * 4);
      matmul(r, gvB, cb, vv, { n: T, xStride: L, yStride: H * V, batch: { count: H, xBatch: 0, yBatch: V } });
      const op = r.buffer(n * H * V * 4);
      attention(
        r,
        { q: qb, k1: kn, k2: kpe, v: vv, meta, sel, o: op, part },
        {
          nq: n,
          heads: H,
          d1: P,
          d2: R,
          dv: V,
          scale: cfg.kqScale,
          maxKeys: T,
          q: { off: 0, stride: H * D, head: D, q2Off: P },
          k1: { off: 0, stride: H * P, head: P },
          k2: { off: 0, stride: R },
          v: { off: 0, stride: H * V, head: V },
          o: { off: 0, stride: H * V, head: V },
        },
      );
      assert.ok(record("attention prefill", relErr(await r.readF32(op), wantPrefill)) < 1e-4);

      // sparse (DSA-style) key selection: every query sees an explicit sorted subset
      const K = 4;
      const lists = Array.from({ length: n }, (_, i) => {
        const all = Array.from({ length: pos0 + i + 1 }, (_, j) => j);
        const pick: number[] = [];
        while (pick.length < K) {
          const j = all.splice(rng.int(0, all.length), 1)[0];
          pick.push(j);
        }
        return pick.sort((a, b) => a - b);
      });
      const selFn: KeySelection = (i) => lists[i];
      const wantSparse = attendAbsorbed(w, cfg, pr, n, pos0, lat, selFn, plainKernels);
      const metaS = u32(
        r,
        lists.flatMap((_, i) => [0, K, i * K, 1]),
      );
      const selB = u32(r, lists.flat());
      attention(
        r,
        { q: qAbs, k1: cb, k2: kpe, v: cb, meta: metaS, sel: selB, o: lo, part },
        {
          nq: n,
          heads: H,
          d1: L,
          d2: R,
          dv: L,
          scale: cfg.kqScale,
          maxKeys: K,
          q: { off: 0, stride: H * (L + R), head: L + R, q2Off: L },
          k1: { off: 0, stride: L, head: 0 },
          k2: { off: 0, stride: R },
          v: { off: 0, stride: L, head: 0 },
          o: { off: 0, stride: H * L, head: L },
        },
      );
      matmul(r, gvB, lo, ob, { n, xStride: H * L, yStride: H * V, batch: { count: H, xBatch: L, yBatch: V } });
      assert.ok(record("attention sparse", relErr(await r.readF32(ob), wantSparse)) < 1e-4);
    });
  }

function moeConfig(over: Partial<Record<string, unknown>>): ModelConfig {
  return {
    nEmbd: 64,
    nExpert: 8,
    nExpertUsed: 2,
    nGroup: 1,
    nGroupUsed: 1,
    gating: "sigmoid",
    groupScoring: "definition",
    weightsNorm: true,
    weightsScale: 2.5,
    ...over,
  } as unknown as ModelConfig;
}

const MOE_CASES: [string, ModelConfig, boolean][] = [
  ["sigmoid + bias + norm", moeConfig({}), true],
  [
    "softmax, groups by max (V2)",
    moeConfig({ gating: "softmax", nGroup: 4, nGroupUsed: 2, nExpertUsed: 3, weightsNorm: false, weightsScale: 16 }),
    false,
  ],
  ["sigmoid, groups by top-2 sum (V3)", moeConfig({ nExpert: 16, nGroup: 4, nGroupUsed: 2, nExpertUsed: 4 }), true],
  [
    "softmax, llama.cpp group scoring",
    moeConfig({
      gating: "softmax",
      nGroup: 2,
      nGroupUsed: 1,
      groupScoring: "llama.cpp",
      weightsNorm: true,
      weightsScale: 1,
    }),
    false,
  ],
];

// routing alone at full widths: every expert of a 256-thread workgroup in use, many tokens, one token
for (const [label, c, withBias, n] of [
  [
    "64 experts, 6 used, softmax (V2-Lite)",
    moeConfig({ nExpert: 64, nExpertUsed: 6, gating: "softmax", weightsNorm: false, weightsScale: 1 }),
    false,
    37,
  ],
  [
    "256 experts, 8 used, 8 groups keep 4, sigmoid + bias (V3)",
    moeConfig({ nExpert: 256, nExpertUsed: 8, nGroup: 8, nGroupUsed: 4 }),
    true,
    3,
  ],
  [
    "160 experts, 6 used, 8 groups keep 3 by max, softmax (V2)",
    moeConfig({
      nExpert: 160,
      nExpertUsed: 6,
      gating: "softmax",
      nGroup: 8,
      nGroupUsed: 3,
      weightsNorm: false,
      weightsScale: 16,
    }),
    false,
    1,
  ],
  [
    "64 experts, 6 used, softmax, many exact ties (lower id first)",
    moeConfig({ nExpert: 64, nExpertUsed: 6, gating: "softmax", weightsNorm: true, weightsScale: 1 }),
    false,
    9,
  ],
] as const) {
  test(`MoE routing at full width: ${label}, n=${n}`, { skip }, async () => {
    const rng = new Rng(label.length + n);
    const { nExpert: E, nExpertUsed: K } = c;
    const bias = withBias ? rng.f32(E, 0.1) : undefined;
    const z = rng.f64(n * E);
    // three score levels only: the top-K is decided by ids among equal scores
    if (label.includes("ties")) z.forEach((v, i) => (z[i] = Math.round(v)));
    const ids = rt!.buffer(n * K * 4);
    const wts = rt!.buffer(n * K * 4);
    moeRoute(rt!, f32(rt!, z), bias && f32(rt!, bias), ids, wts, {
      n,
      E,
      K,
      nGroup: c.nGroup,
      nGroupUsed: c.nGroupUsed,
      softmax: c.gating === "softmax",
      groupMax: c.gating === "softmax" && c.groupScoring === "definition",
      norm: c.weightsNorm,
      scale: c.weightsScale,
    });
    const gotIds = new Uint32Array(await rt!.read(ids));
    const gotW = await rt!.readF32(wts);
    for (let t = 0; t < n; t++) {
      const r = route(z.subarray(t * E, (t + 1) * E), c, bias);
      assert.deepEqual(Array.from(gotIds.subarray(t * K, (t + 1) * K)), r.experts, `token ${t} experts`);
      assert.ok(record("moeRoute weights", relErr(gotW.subarray(t * K, (t + 1) * K), r.weights)) < TOL);
    }
  });
}

for (const [label, c, withBias] of MOE_CASES) {
  test(`MoE routing and grouped expert products: ${label}`, { skip }, async () => {
    const rng = new Rng(label.length);
    const { nEmbd: Hd, nExpert: E, nExpertUsed: K } = c;
    const Fe = 32;
    const n = 5;
    const bias = withBias ? rng.f32(E, 0.1) : undefined;
    // routing alone
    const z = rng.f64(n * E);
    const ids = rt!.buffer(n * K * 4);
    const wts = rt!.buffer(n * K * 4);
    const args = {
      n,
      E,
      K,
      nGroup: c.nGroup,
      nGroupUsed: c.nGroupUsed,
      softmax: c.gating === "softmax",
      groupMax: c.gating === "softmax" && c.groupScoring === "definition",
      norm: c.weightsNorm,
      scale: c.weightsScale,
    };
    moeRoute(rt!, f32(rt!, z), bias && f32(rt!, bias), ids, wts, args);
    const gotIds = new Uint32Array(await rt!.read(ids));
    const gotW = await rt!.readF32(wts);
    for (let t = 0; t < n; t++) {
      const r = route(z.subarray(t * E, (t + 1) * E), c, bias);
      assert.deepEqual(Array.from(gotIds.subarray(t * K, (t + 1) * K)), r.experts, `token ${t} experts`);
      assert.ok(record("moeRoute weights", relErr(gotW.subarray(t * K, (t + 1) * K), r.weights)) < TOL);
    }
    // the whole routed FFN: router matmul → route → gathered gate/up → swiglu → gathered down → weighted combine
    const type = GGMLType.Q4_0;
    const mk = (cols: number, rows: number, name: string): QMatrix =>
      new QMatrix(name, type, cols, rows, quantize(type, rng.f32(cols * rows, 0.2), cols));
    const router = new QMatrix("router", GGMLType.F32, Hd, E, quantize(GGMLType.F32, rng.f32(Hd * E), Hd));
    const gate = mk(Hd, Fe * E, "gate");
    const up = mk(Hd, Fe * E, "up");
    const down = mk(Fe, Hd * E, "down");
    const w: MoEWeights = {
      router,
      bias,
      experts: Array.from({ length: E }, (_, e) => ({
        gate: gate.slice(e * Fe, Fe),
        up: up.slice(e * Fe, Fe),
        down: down.slice(e * Hd, Hd),
      })),
      shared: undefined,
    };
    const x = rng.f64(n * Hd);
    const want = new Float64Array(n * Hd);
    moe(w, c, x, n, want, plainKernels);

    const g = {
      router: GpuMatrix.upload(rt!, "router", GGMLType.F32, Hd, E, router.data),
      gate: GpuMatrix.upload(rt!, "gate", type, Hd, Fe, gate.data, E),
      up: GpuMatrix.upload(rt!, "up", type, Hd, Fe, up.data, E),
      down: GpuMatrix.upload(rt!, "down", type, Fe, Hd, down.data, E),
    };
    const xb = f32(rt!, x);
    const zb = rt!.buffer(n * E * 4);
    matmul(rt!, g.router, xb, zb, { n, xStride: Hd, yStride: E });
    moeRoute(rt!, zb, bias && f32(rt!, bias), ids, wts, args);
    const gb = rt!.buffer(n * K * Fe * 4);
    const ub = rt!.buffer(n * K * Fe * 4);
    matmulGather(rt!, g.gate, xb, gb, ids, { pairs: n * K, xDiv: K, xBatch: Hd, yBatch: Fe });
    matmulGather(rt!, g.up, xb, ub, ids, { pairs: n * K, xDiv: K, xBatch: Hd, yBatch: Fe });
    swiglu(rt!, gb, ub, { n: n * K, width: Fe });
    const ye = rt!.buffer(n * K * Hd * 4);
    matmulGather(rt!, g.down, gb, ye, ids, { pairs: n * K, xDiv: 1, xBatch: Fe, yBatch: Hd });
    const yb = rt!.buffer(n * Hd * 4);
    moeCombine(rt!, ye, wts, yb, { n, K, width: Hd, acc: false });
    assert.ok(record("moe ffn", relErr(await rt!.readF32(yb), want)) < 1e-4);
  });
}

for (const [n, pos0, topK] of [
  [1, 30, 8],
  [3, 10, 4],
  [2, 2, 16],
] as const) {
  test(`DSA indexer keys and top-k selection (n=${n}, pos0=${pos0}, top_k=${topK})`, { skip }, async () => {
    const rng = new Rng(90 + n);
    const Hd = 64;
    const Lq = 32;
    const Hi = 4;
    const D = 32;
    const R = 8;
    const r = new Rope(R, 10000, undefined, 1);
    const mk = (cols: number, rows: number): QMatrix =>
      new QMatrix("m", GGMLType.F32, cols, rows, quantize(GGMLType.F32, rng.f32(cols * rows, 0.3), cols));
    const iw = { qB: mk(Lq, Hi * D), k: mk(Hd, D), kNormW: rng.f32(D), kNormB: rng.f32(D, 0.1), proj: mk(Hd, Hi) };
    const model = { nEmbd: Hd, qLoraRank: Lq } as unknown as ModelConfig;
    const ix = new Indexer(iw, { nHead: Hi, headDim: D, topK }, model, r);
    const T = pos0 + n;
    const xAll = rng.f64(T * Hd);
    const keys = ix.keys(xAll, T, 0, plainKernels);
    const x = xAll.subarray(pos0 * Hd);
    const qr = rng.f64(n * Lq);
    const want = ix.select(x, qr, n, pos0, { k: keys, length: T }, plainKernels);

    // keys on the GPU: matmul → LayerNorm (eps 0) → rope on the first R dims
    const table = new RopeTable(rt!, r).ensure(T);
    const gk = GpuMatrix.upload(rt!, "k", GGMLType.F32, Hd, D, iw.k.data);
    const kb = rt!.buffer(T * D * 4);
    matmul(rt!, gk, f32(rt!, xAll), kb, { n: T, xStride: Hd, yStride: D });
    layerNorm(rt!, kb, f32(rt!, iw.kNormW), f32(rt!, iw.kNormB), undefined, { n: T, dim: D }, 0);
    const posAll = u32(
      rt!,
      Array.from({ length: T }, (_, t) => t),
    );
    rope(rt!, table, R, kb, posAll, { n: T, heads: 1, xOff: 0, tokStride: D, headStride: D });
    assert.ok(record("dsa keys", relErr(await rt!.readF32(kb), keys)) < TOL);

    const qb = rt!.buffer(n * Hi * D * 4);
    matmul(rt!, GpuMatrix.upload(rt!, "qb", GGMLType.F32, Lq, Hi * D, iw.qB.data), f32(rt!, qr), qb, {
      n,
      xStride: Lq,
      yStride: Hi * D,
    });
    rope(
      rt!,
      table,
      R,
      qb,
      u32(
        rt!,
        Array.from({ length: n }, (_, i) => pos0 + i),
      ),
      { n, heads: Hi, xOff: 0, tokStride: Hi * D, headStride: D },
    );
    const wb = rt!.buffer(n * Hi * 4);
    matmul(rt!, GpuMatrix.upload(rt!, "proj", GGMLType.F32, Hd, Hi, iw.proj.data), f32(rt!, x), wb, {
      n,
      xStride: Hd,
      yStride: Hi,
    });
    const meta = u32(rt!, causalMeta(n, pos0));
    const sel = rt!.buffer(n * topK * 4);
    dsaSelect(rt!, { q: qb, w: wb, keys: kb, meta, scores: rt!.buffer(n * T * 4), sel }, { n, T, Hi, D, topK });
    const m = new Uint32Array(await rt!.read(meta));
    const s = new Uint32Array(await rt!.read(sel));
    for (let i = 0; i < n; i++) {
      const w = want(i, pos0 + i);
      if (w === undefined) {
        assert.equal(m[4 * i + 3], 0, `query ${i} stays dense`);
        assert.equal(m[4 * i + 1], pos0 + i + 1);
      } else {
        assert.equal(m[4 * i + 3], 1);
        assert.deepEqual(Array.from(s.subarray(m[4 * i + 2], m[4 * i + 2] + topK)), [...w], `query ${i} keys`);
      }
    }
  });
}

/** The DSA selection's reference on f32 scores: the K largest unmasked of row[0, nk), ties to the lowest position, ascending. */
function topKPositions(row: Float32Array, nk: number, K: number): number[] {
  const open = Array.from({ length: nk }, (_, s) => s).filter((s) => row[s] !== MASKED_SCORE);
  return open
    .sort((a, b) => row[b] - row[a] || a - b)
    .slice(0, K)
    .sort((a, b) => a - b);
}
const MASKED_SCORE = Math.fround(-3.4028234e38);

// Radix-select top-k on its own, on scores drawn from a small set of values (many exact ties, −0 beside +0) or
// continuous ones: nk = K + 1, nk ≫ K, K not a power of two, queries of different nk in one dispatch, some dense.
for (const [label, K, nks, values] of [
  ["nk = K + 1, ties", 5, [6], [-1, 0, -0, 0.5, 2]],
  ["K = 7, nk ≫ K, ties", 7, [300], [0, 1, 2, 3]],
  ["mixed nk, continuous", 16, [16, 17, 40, 1000, 3], undefined],
  ["K = 37, three values", 37, [38, 600, 2500], [-0.25, 0.125, 7]],
  [
    "K = 37, a grid of 41 values (the K-th among ties below larger ones)",
    37,
    [600, 41, 1500],
    Array.from({ length: 41 }, (_, v) => (v - 20) / 10),
  ],
  ["K = 100, every score equal", 100, [101, 777], [1.5]],
  ["decode shape: K = 2048, nk = 4096", 2048, [4096], undefined],
  ["K = 2048, nk = 4099, ties", 2048, [4099, 2049], [-3, -2, -1, 0, 1, 2, 3, 4]],
] as const) {
  test(`DSA top-k radix select (${label})`, { skip }, async () => {
    const rng = new Rng(700 + K + nks.length);
    const n = nks.length;
    const T = Math.max(...nks) + 5;
    const scores = new Float32Array(n * T);
    for (let i = 0; i < n; i++) {
      for (let s = 0; s < T; s++)
        scores[i * T + s] = values === undefined ? rng.normal() : values[rng.int(0, values.length)];
      // masked scores inside the row are never taken; past nk the kernel must not look (large values there)
      for (let s = 0; s < nks[i]; s += 1 + rng.int(0, 40)) scores[i * T + s] = MASKED_SCORE;
      for (let s = nks[i]; s < T; s++) scores[i * T + s] = 1e30;
    }
    const metaIn = nks.flatMap((nk, i) => [3 * i, nk, 0, 0]);
    const meta = u32(rt!, metaIn);
    const SENTINEL = 0xdeadbeef;
    // one row of sentinels past the last query's: nothing is written beyond a query's K entries
    const sel = u32(rt!, new Array<number>((n + 1) * K).fill(SENTINEL));
    dsaTopK(rt!, { scores: f32(rt!, scores), meta, sel }, { n, T, topK: K });
    const m = new Uint32Array(await rt!.read(meta));
    const got = new Uint32Array(await rt!.read(sel));
    for (let i = 0; i < n; i++) {
      const nk = nks[i];
      if (nk <= K) {
        assert.deepEqual(
          Array.from(m.subarray(4 * i, 4 * i + 4)),
          metaIn.slice(4 * i, 4 * i + 4),
          `query ${i} stays dense`,
        );
        assert.ok(
          got.subarray(i * K, (i + 1) * K).every((x) => x === SENTINEL),
          `query ${i} writes no selection`,
        );
        continue;
      }
      assert.deepEqual(Array.from(m.subarray(4 * i, 4 * i + 4)), [3 * i, K, i * K, 1], `query ${i} meta`);
      const want = topKPositions(scores.subarray(i * T), nk, K);
      assert.deepEqual(Array.from(got.subarray(i * K, i * K + want.length)), want, `query ${i} keys`);
    }
    assert.ok(
      got.subarray(n * K, (n + 1) * K).every((x) => x === SENTINEL),
      "no write past the last query's keys",
    );
  });
}

// The indexer scores on their own against f64 sums: heads not a multiple of the kernel's head groups, depth not a
// multiple of its chunk, key counts not multiples of its key block, queries of different nk, keys through page tables.
for (const [label, Hi, D, nks, pageSize] of [
  ["Hi = 4, D = 32, one query", 4, 32, [37], 0],
  ["GLM-5 widths (Hi = 32, D = 128), three queries", 32, 128, [300, 1, 65], 0],
  ["Hi = 5, D = 100", 5, 100, [70, 45], 0],
  ["Hi = 12, D = 40, paged keys", 12, 40, [50, 93], 16],
] as const) {
  for (const dsaScoresKnob of [1, 0])
    test(`DSA indexer scores (${label}; dsaScores = ${dsaScoresKnob})`, { skip }, async () => {
      const r = new GpuRuntime(rt!.info, { checkWrites: true, tune: { dsaScores: dsaScoresKnob } });
      const rng = new Rng(800 + Hi + D);
      const n = nks.length;
      const T = Math.max(...nks) + 7;
      const q = rng.f32(n * Hi * D);
      const w = rng.f32(n * Hi);
      // keys: rows of the cache; paged, query i's position u lives in row table_i[u / pageSize]·pageSize + u % pageSize
      const pagesPerQuery = pageSize > 0 ? Math.ceil(T / pageSize) : 0;
      const rows = pageSize > 0 ? n * pagesPerQuery * pageSize : T + 3 * n;
      const keys = rng.f32(rows * D);
      const pageOrder = Array.from({ length: n * pagesPerQuery }, (_, x) => x).sort(() => rng.next() - 0.5);
      const tables = pageSize > 0 ? pageOrder : [0];
      const base = (i: number): number => (pageSize > 0 ? i * pagesPerQuery : 3 * i);
      const row = (i: number, u: number): number =>
        pageSize > 0 ? tables[base(i) + Math.floor(u / pageSize)] * pageSize + (u % pageSize) : base(i) + u;
      const wScale = 1 / Math.sqrt(Hi * D);
      const want = new Float64Array(n * T);
      for (let i = 0; i < n; i++) {
        for (let s = 0; s < T; s++) {
          if (s >= nks[i]) {
            want[i * T + s] = MASKED_SCORE;
            continue;
          }
          let total = 0;
          for (let j = 0; j < Hi; j++) {
            let d = 0;
            for (let e = 0; e < D; e++) d += q[(i * Hi + j) * D + e] * keys[row(i, s) * D + e];
            if (d > 0) total += d * w[i * Hi + j] * wScale;
          }
          want[i * T + s] = total;
        }
      }
      const meta = u32(
        r,
        nks.flatMap((nk, i) => [base(i), nk, 0, 0]),
      );
      const scores = r.buffer(n * T * 4);
      dsaScores(
        r,
        { q: f32(r, q), w: f32(r, w), keys: f32(r, keys), meta, scores, sel: u32(r, tables) },
        { n, T, Hi, D, topK: 1, pageSize },
      );
      const got = await r.readF32(scores);
      const open = Array.from({ length: n * T }, (_, x) => x).filter((x) => want[x] !== MASKED_SCORE);
      for (let x = 0; x < n * T; x++)
        if (want[x] === MASKED_SCORE) assert.equal(got[x], MASKED_SCORE, `masked score at ${x}`);
      // the error relative to the largest unmasked score (the masked ones would hide any error)
      assert.ok(
        record(
          "dsa scores",
          relErr(
            open.map((x) => got[x]),
            open.map((x) => want[x]),
          ),
        ) < TOL,
        label,
      );
    });
}
