// The fused MoE router product + routing (wgsl-router.ts) on fresh random W and x: z against a float64 product, ids
// and weights against the CPU reference route() (on the float64 z, and on the kernel's own z, where NaN and exact
// ties are defined) and against moeRoute on that z (the same routing, bit for bit): 4..256 experts, 1..16 used, 1..4
// tokens, 36..7168 columns (x staged in several passes), softmax and sigmoid, bias, group-limited routing (V3 top-2 sum,
// V2 max), norm, scale, strided z, exact ties (equal rows of W), NaN logits (NaN in W and in x). Also: sharing a
// dispatch with a product (together), when the kernel applies, and WGSL validation at subgroup sizes 4..64.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../../../src/gguf/types.js";
import { rowBytes } from "../../../src/quant/index.js";
import type { GpuDeviceInfo } from "../../../src/backend/webgpu/device.js";
import { GpuMatrix, matmul } from "../../../src/backend/webgpu/matrix.js";
import { moeRoute } from "../../../src/backend/webgpu/ops.js";
import { moeRouter, routerFuseShape } from "../../../src/backend/webgpu/router.js";
import { GpuRuntime } from "../../../src/backend/webgpu/runtime.js";
import { routerShape, routerWGSL, routerWorkgroupBytes } from "../../../src/backend/webgpu/wgsl-router.js";
import { f32, gpuOrSkip, record, Rng, wgslProblems } from "./helpers.js";
import { maxRel, REL, referenceRoute, routeArgs, type RouteSpec } from "./route-helpers.js";

const { rt, skip } = await gpuOrSkip();
const sgSkip = skip !== false ? skip : rt!.info.subgroupSize === undefined ? "the adapter has no fixed subgroup size (the kernel needs one)" : false;
// the kernel is off by default (tune.routerFuse = 1 turns it on)
const fr = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { routerFuse: 1 } });
/** z against the float64 product, relative to Σ |w·x| of the row */
const Z_REL = 1e-5;

interface RouterCase extends RouteSpec {
  readonly label: string;
  /** columns (Hd) */
  readonly cols: number;
  /** W and x: normal draws; rows of W in equal pairs (exact ties); a NaN in one row of W and in token 0's x */
  readonly data?: "random" | "ties" | "nan";
}

interface Inputs {
  readonly w: Float32Array;
  readonly x: Float32Array;
  readonly bias: Float32Array | undefined;
}

function inputs(c: RouterCase, rng: Rng): Inputs {
  const w = rng.f32(c.E * c.cols, 1 / Math.sqrt(c.cols));
  const x = rng.f32(c.n * c.cols, 2);
  let bias = c.bias === true ? rng.f32(c.E, 0.1) : undefined;
  if (c.data === "ties") {
    for (let e = 1; e < c.E; e += 2) w.copyWithin(e * c.cols, (e - 1) * c.cols, e * c.cols);
    bias = bias?.map((v, e) => (e % 2 === 1 ? bias![e - 1]! : v));
  }
  if (c.data === "nan") {
    w[5 * c.cols + 3] = NaN;
    x[c.cols - 1] = NaN;
  }
  return { w, x, bias };
}

/** z[t·E + e] = Σ w·x in float64, and Σ |w·x| (the scale of its rounding) */
function product(c: RouterCase, inp: Inputs): { z: Float64Array; mag: Float64Array } {
  const z = new Float64Array(c.n * c.E);
  const mag = new Float64Array(c.n * c.E);
  for (let t = 0; t < c.n; t++) {
    for (let e = 0; e < c.E; e++) {
      let s = 0;
      let m = 0;
      for (let k = 0; k < c.cols; k++) {
        const v = inp.w[e * c.cols + k]! * inp.x[t * c.cols + k]!;
        s += v;
        m += Math.abs(v);
      }
      z[t * c.E + e] = s;
      mag[t * c.E + e] = m;
    }
  }
  return { z, mag };
}

interface Routed {
  readonly z: Float32Array;
  readonly ids: Uint32Array;
  readonly weights: Float32Array;
}

function router(r: GpuRuntime, c: RouterCase, w: Float32Array): GpuMatrix {
  return GpuMatrix.upload(r, "router", GGMLType.F32, c.cols, c.E, new Uint8Array(w.buffer, w.byteOffset, w.byteLength));
}

async function fused(r: GpuRuntime, c: RouterCase, inp: Inputs): Promise<Routed> {
  const m = router(r, c, inp.w);
  const a = routeArgs(c);
  const shape = routerFuseShape(r, m, a, inp.bias !== undefined);
  assert.ok(shape !== undefined, "the fused kernel applies");
  const zLen = (c.zOff ?? 0) + c.n * (c.zStride ?? c.E);
  const [z, ids, wts] = [r.buffer(zLen * 4), r.buffer(c.n * c.K * 4), r.buffer(c.n * c.K * 4)];
  moeRouter(r, shape, m, f32(r, inp.x), z, inp.bias && f32(r, inp.bias), ids, wts, a);
  const all = await r.readF32(z, 0, zLen);
  const zs = Float32Array.from({ length: c.n * c.E }, (_, i) => all[(c.zOff ?? 0) + Math.floor(i / c.E) * (c.zStride ?? c.E) + (i % c.E)]!);
  return { z: zs, ids: new Uint32Array(await r.read(ids, 0, c.n * c.K * 4)), weights: await r.readF32(wts, 0, c.n * c.K) };
}

/** moeRoute (the subgroup routing kernel) on the fused kernel's z */
async function routeOf(r: GpuRuntime, c: RouterCase, z: Float32Array, bias: Float32Array | undefined): Promise<Routed> {
  const [ids, wts] = [r.buffer(c.n * c.K * 4), r.buffer(c.n * c.K * 4)];
  moeRoute(r, f32(r, z), bias && f32(r, bias), ids, wts, { ...routeArgs(c), zOff: 0, zStride: c.E });
  return { z, ids: new Uint32Array(await r.read(ids, 0, c.n * c.K * 4)), weights: await r.readF32(wts, 0, c.n * c.K) };
}

const CASES: RouterCase[] = [
  { label: "4 experts, 1 used, softmax", E: 4, K: 1, n: 1, cols: 36, gating: "softmax" },
  { label: "6 experts, 2 used, sigmoid + bias, norm, scale", E: 6, K: 2, n: 3, cols: 260, gating: "sigmoid", bias: true, norm: true, scale: 2.5 },
  { label: "72 experts, 6 used, softmax, norm, strided z", E: 72, K: 6, n: 4, cols: 260, gating: "softmax", norm: true, zOff: 3, zStride: 80 },
  { label: "64 experts, 6 used, softmax (V2-Lite)", E: 64, K: 6, n: 2, cols: 2048, gating: "softmax" },
  { label: "64 experts, 16 used, softmax, norm", E: 64, K: 16, n: 1, cols: 36, gating: "softmax", norm: true, scale: 1.5 },
  { label: "256 experts, 8 used, 8 groups keep 4, sigmoid + bias, norm (V3)", E: 256, K: 8, n: 2, cols: 260, gating: "sigmoid", bias: true, nGroup: 8, nGroupUsed: 4, norm: true, scale: 2.5 },
  { label: "160 experts, 6 used, 8 groups keep 3 by max, softmax (V2)", E: 160, K: 6, n: 3, cols: 36, gating: "softmax", nGroup: 8, nGroupUsed: 3, groupMax: true, scale: 16 },
  { label: "16 experts, 4 used, sigmoid, 7168 columns (x staged in passes)", E: 16, K: 4, n: 2, cols: 7168, gating: "sigmoid", norm: true },
  { label: "64 experts, 6 used, softmax, exact ties", E: 64, K: 6, n: 4, cols: 36, gating: "softmax", norm: true, data: "ties" },
  { label: "256 experts, 8 used, 8 groups keep 4, sigmoid + bias, exact ties", E: 256, K: 8, n: 2, cols: 36, gating: "sigmoid", bias: true, nGroup: 8, nGroupUsed: 4, norm: true, scale: 2.5, data: "ties" },
  { label: "64 experts, 6 used, softmax, NaN in W and x", E: 64, K: 6, n: 3, cols: 36, gating: "softmax", data: "nan" },
  { label: "64 experts, 8 used, sigmoid + bias, NaN in W and x", E: 64, K: 8, n: 3, cols: 36, gating: "sigmoid", bias: true, norm: true, data: "nan" },
];

for (const [i, c] of CASES.entries()) {
  test(`fused router + routing vs float64 product, CPU reference and moeRoute: ${c.label}, n=${c.n}, ${c.cols} columns`, { skip: sgSkip }, async () => {
    const inp = inputs(c, new Rng(300 + i));
    const got = await fused(fr!, c, inp);
    const want = product(c, inp);
    for (let j = 0; j < c.n * c.E; j++) {
      const [g, w] = [got.z[j]!, want.z[j]!];
      if (Number.isNaN(w)) assert.ok(Number.isNaN(g), `z[${j}]: NaN expected, got ${g}`);
      else assert.ok(record("router: z vs float64", Math.abs(g - w) / (want.mag[j]! + 1e-30)) <= Z_REL, `z[${j}] ${g} vs ${w}`);
    }
    const same = await routeOf(fr!, c, got.z, inp.bias);
    assert.deepEqual(Array.from(got.ids), Array.from(same.ids), "ids: fused vs moeRoute on its z");
    assert.deepEqual(Array.from(got.weights), Array.from(same.weights), "weights: fused vs moeRoute on its z");
    for (let t = 0; t < c.n; t++) {
      const ids = Array.from(got.ids.subarray(t * c.K, (t + 1) * c.K));
      const weights = got.weights.subarray(t * c.K, (t + 1) * c.K);
      const ref = referenceRoute(c, got.z.subarray(t * c.E, (t + 1) * c.E), inp.bias);
      assert.deepEqual(ids, ref.route.experts, `token ${t} experts`);
      if (ref.nanPicks) assert.ok(weights.some((w) => Number.isNaN(w)), `token ${t}: NaN weights`);
      else assert.ok(record("router: weights vs CPU", maxRel(weights, ref.route.weights)) < REL, `token ${t} weights ${Array.from(weights)} vs ${ref.route.weights}`);
      // random data: the float64 z routes the same (no near ties at these seeds)
      if ((c.data ?? "random") === "random") assert.deepEqual(ids, referenceRoute(c, want.z.subarray(t * c.E, (t + 1) * c.E), inp.bias).route.experts, `token ${t} experts (float64 z)`);
    }
  });
}

test("the fused router kernel shares a dispatch with a 256-thread product (together)", { skip: sgSkip }, async () => {
  const c: RouterCase = { label: "", E: 64, K: 6, n: 2, cols: 260, gating: "softmax", norm: true };
  const inp = inputs(c, new Rng(9));
  const other = GpuMatrix.upload(fr!, "other", GGMLType.F32, c.cols, 48, new Uint8Array(new Rng(10).f32(48 * c.cols).buffer));
  const alone = await fused(fr!, c, inp);
  const m = router(fr!, c, inp.w);
  const a = routeArgs(c);
  const x = f32(fr!, inp.x);
  const [z, ids, wts, y] = [fr!.buffer(c.n * c.E * 4), fr!.buffer(c.n * c.K * 4), fr!.buffer(c.n * c.K * 4), fr!.buffer(c.n * 48 * 4)];
  const before = fr!.stats.dispatches;
  fr!.together(() => {
    moeRouter(fr!, routerFuseShape(fr!, m, a, false)!, m, x, z, undefined, ids, wts, a);
    matmul(fr!, other, x, y, { n: c.n, xStride: c.cols, yStride: 48 });
  });
  assert.equal(fr!.stats.dispatches - before, 1, "one combined dispatch");
  assert.deepEqual(Array.from(await fr!.readF32(z, 0, c.n * c.E)), Array.from(alone.z));
  assert.deepEqual(Array.from(new Uint32Array(await fr!.read(ids, 0, c.n * c.K * 4))), Array.from(alone.ids));
  assert.deepEqual(Array.from(await fr!.readF32(wts, 0, c.n * c.K)), Array.from(alone.weights));
});

test("the fused router kernel applies to F32 routers with a fixed subgroup size, tune.routerFuse = 1, moeRoute's limits", { skip }, () => {
  const fixed = (subgroupSize: number | undefined, routerFuse: number | null = 1): GpuRuntime => new GpuRuntime({ ...rt!.info, subgroupSize } as GpuDeviceInfo, routerFuse === null ? {} : { tune: { routerFuse } });
  const mat = (type: GGMLType, cols: number, rows: number): GpuMatrix => GpuMatrix.upload(fr!, "r", type, cols, rows, new Uint8Array(rowBytes(type, cols) * rows));
  const v3 = routeArgs({ E: 256, K: 8, n: 1, gating: "sigmoid", nGroup: 8, nGroupUsed: 4, norm: true, scale: 2.5 });
  const w = mat(GGMLType.F32, 2048, 256);
  for (const sg of [4, 8, 32, 64]) assert.ok(routerFuseShape(fixed(sg), w, v3, true) !== undefined, `subgroup size ${sg}`);
  assert.ok(routerFuseShape(fixed(32, 1), w, { ...v3, n: 4 }, false) !== undefined);
  assert.equal(routerFuseShape(fixed(32, 0), w, v3, true), undefined, "tune.routerFuse = 0");
  assert.equal(routerFuseShape(fixed(32, null), w, v3, true), undefined, "off by default");
  assert.equal(routerFuseShape(fixed(undefined), w, v3, true), undefined, "no fixed subgroup size");
  assert.equal(routerFuseShape(fixed(128), w, v3, true), undefined, "subgroup size 128");
  assert.equal(routerFuseShape(fixed(32), mat(GGMLType.Q8_0, 2048, 256), v3, true), undefined, "a Q8_0 router");
  assert.equal(routerFuseShape(fixed(32), mat(GGMLType.F32, 2048, 64), v3, true), undefined, "rows ≠ experts");
  assert.equal(routerFuseShape(fixed(32), mat(GGMLType.F32, 38, 256), v3, true), undefined, "columns not a multiple of 4");
  assert.equal(routerFuseShape(fixed(32), w, { ...v3, K: 17 }, true), undefined, "more than 16 used");
  const odd = mat(GGMLType.F32, 2048, 100);
  assert.equal(routerFuseShape(fixed(32), odd, { ...v3, E: 100 }, true), undefined, "groups that do not divide the experts");
  assert.ok(routerFuseShape(fixed(32), odd, { ...v3, E: 100, nGroup: 1, nGroupUsed: 1 }, true) !== undefined, "100 experts, no groups");
});

test("fused router shapes: x staged whole or in passes, within the workgroup memory it leaves to the kernel sharing its dispatch", () => {
  const v2lite = routerShape(32, 64, 1, 1, 2048, false, 32768)!;
  assert.equal(v2lite.chunk, 512);
  assert.deepEqual([v2lite.rowsPerSg, v2lite.unroll], [8, 2]);
  const v3 = routerShape(32, 256, 8, 4, 7168, true, 49152)!;
  assert.ok(v3.chunk < 7168 / 4 && routerWorkgroupBytes(v3) <= 24576, JSON.stringify(v3));
  assert.ok(routerWorkgroupBytes(routerShape(8, 256, 1, 1, 7168, false, 32768)!) <= 16384);
  assert.equal(routerShape(32, 64, 1, 1, 2048, false, 1024), undefined, "no room for x");
});

test("the fused router kernel passes WGSL validation (uniformity included) at subgroup sizes 4..64", { skip }, async () => {
  for (const sg of [4, 16, 32, 64]) {
    for (const [E, nGroup, nGroupUsed, cols, bias] of [[64, 1, 1, 2048, false], [256, 8, 4, 7168, true], [160, 8, 3, 36, false], [6, 1, 1, 260, true]] as const) {
      const shape = routerShape(sg, E, nGroup, nGroupUsed, cols, bias, rt!.info.limits.maxComputeWorkgroupStorageSize)!;
      assert.deepEqual(await wgslProblems(fr!, routerWGSL(shape)), [], `sg ${sg}, ${E} experts, ${nGroup} groups, ${cols} columns`);
    }
  }
});
