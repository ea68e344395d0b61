// GpuRuntime.together: independent dispatches run as one combined kernel must give bit-identical results to the same
// dispatches one by one (fuse: false), fall back where they cannot share a dispatch, keep --check-writes working and
// record / replay like any other dispatch.
import { test } from "node:test";
import assert from "node:assert/strict";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType } from "../../../src/gguf/types.js";
import { quantize } from "../../../src/quant/index.js";
import { GpuRuntime, UnwrittenOutputError, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { GpuMatrix, matmul, matmulGather, matmulT } from "../../../src/backend/webgpu/kernels/matmul/matrix.js";
import { copyRows, rmsNorm, ropeTo } from "../../../src/backend/webgpu/kernels/rows/rows.js";
import { kvCacheWrite } from "../../../src/backend/webgpu/kernels/attention/attention.js";
import { GpuModel } from "../../../src/backend/webgpu/graph/gpu-model.js";
import { loadModel } from "../../../src/runtime/load.js";
import { CASES, synthModel } from "../../helpers/synth.js";
import { f32, gpuOrSkip, Rng, u32 } from "./helpers.js";

const { rt: base, skip } = await gpuOrSkip({});

/**
 * Every builtin the combined entry point rebuilds, written per invocation (13 words) for comparison; a module-scope
 * `n` next to a member `n` checks that renaming leaves member names alone.
 */
const BUILTINS_WGSL = /* wgsl */ `
const n = 13u;
struct P { n: u32, base: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<storage, read_write> O: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(4, 2, 2)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nw: vec3u, @builtin(global_invocation_id) g: vec3u,
        @builtin(local_invocation_id) l: vec3u, @builtin(local_invocation_index) li: u32) {
  let flat = (wid.x + nw.x * (wid.y + nw.y * wid.z)) * 16u + li;
  if (flat >= p.n) { return; }
  let o = p.base + flat * n;
  O[o] = wid.x; O[o + 1u] = wid.y; O[o + 2u] = wid.z;
  O[o + 3u] = nw.x; O[o + 4u] = nw.y; O[o + 5u] = nw.z;
  O[o + 6u] = g.x; O[o + 7u] = g.y; O[o + 8u] = g.z;
  O[o + 9u] = l.x; O[o + 10u] = l.y; O[o + 11u] = l.z;
  O[o + 12u] = li;
}`;

/** A 32-thread workgroup sum (barriers): Y[w] = Σ X[32w ..]. */
const SUM32_WGSL = /* wgsl */ `
struct P { n: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
var<workgroup> red: array<f32, 32>;
@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  red[li] = X[wid.x * 32u + li];
  workgroupBarrier();
  for (var s = 16u; s > 0u; s >>= 1u) { if (li < s) { red[li] += red[li + s]; } workgroupBarrier(); }
  if (li == 0u && wid.x < p.n) { Y[wid.x] = red[0]; }
}`;

/** One thread per workgroup: O[base + w] = w + 1 for its linear workgroup id w. */
const MARK_WGSL = /* wgsl */ `
struct P { base: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read_write> O: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let w = wid.x + wid.y * nw.x;
  O[p.base + w] = w + 1u;
}`;

/** Writes Y[0 .. n) with 1 (64 threads). */
const ONES_WGSL = /* wgsl */ `
struct P { n: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read_write> Y: array<f32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  if (g.x < p.n) { Y[g.x] = 1.0; }
}`;

function builtinsDump(rt: GpuRuntime, out: GPUBuffer, baseWord: number, groups: [number, number, number]): void {
  const invocations = groups[0] * groups[1] * groups[2] * 16;
  rt.dispatch("builtins", BUILTINS_WGSL, [out], new Uint32Array([invocations, baseWord, 0, 0]), groups, [
    { buffer: out, offset: baseWord * 4, size: invocations * 13 * 4 },
  ]);
}

function sum32(rt: GpuRuntime, x: GPUBuffer, y: GPUBuffer, groups: number): void {
  rt.dispatch(
    "sum32",
    SUM32_WGSL,
    [x, y],
    new Uint32Array([groups, 0, 0, 0]),
    [groups],
    [{ buffer: y, offset: 0, size: groups * 4 }],
  );
}

function matrix(rt: GpuRuntime, rng: Rng, type: number, cols: number, rows: number, items = 1): GpuMatrix {
  const data = quantize(type, rng.f32(cols * rows * items), cols);
  return GpuMatrix.upload(rt, "w", type, cols, rows, new QMatrix("w", type, cols, rows * items, data).data, items);
}

/** A buffer of random floats (outputs start from random values: a kernel that skips one shows). */
function noise(rt: GpuRuntime, rng: Rng, n: number): GPUBuffer {
  return f32(rt, rng.f64(n));
}

/** A gathered down product's inputs: 4 experts of [24 × 256] in `type`, 6 pairs (x in G, outputs in YE). */
function gatheredDown(
  rt: GpuRuntime,
  rng: Rng,
  type: number,
): { down: GpuMatrix; g: GPUBuffer; ye: GPUBuffer; ids: GPUBuffer } {
  return {
    down: matrix(rt, rng, type, 256, 24, 4),
    g: noise(rt, rng, 6 * 256),
    ye: noise(rt, rng, 6 * 24),
    ids: u32(rt, [1, 3, 0, 3, 2, 1]),
  };
}

interface Scenario {
  readonly name: string;
  /** dispatches of the block one by one */
  readonly dispatches: number;
  /** whether it can run as one dispatch */
  readonly combines: boolean;
  /** kernel tuning of the runtimes the scenario runs on */
  readonly tune?: KernelTuning;
  /** uploads the inputs; returns the block (dispatches inside together()) and the buffers to compare */
  build(rt: GpuRuntime, rng: Rng): { block: () => void; outputs: GPUBuffer[] };
}

const SCENARIOS: Scenario[] = [
  {
    name: "builtins of a 3D grid (16 threads) + workgroup sums (32 threads, barriers) + a 1D grid",
    dispatches: 3,
    combines: true,
    build(rt, rng) {
      const dump = rt.buffer(4 * 13 * 16 * (3 * 2 * 2 + 5));
      const x = noise(rt, rng, 32 * 7);
      const y = noise(rt, rng, 7);
      return {
        block: () => {
          builtinsDump(rt, dump, 0, [3, 2, 2]);
          sum32(rt, x, y, 7);
          builtinsDump(rt, dump, 13 * 16 * 12, [5, 1, 1]);
        },
        outputs: [dump, y],
      };
    },
  },
  {
    name: "batched matmul (3D grid) + rmsNorm (256 threads, barriers) + ropeTo (64 threads, 3D grid) + matmulT",
    dispatches: 4,
    combines: true,
    build(rt, rng) {
      const heads = 3;
      const kB = matrix(rt, rng, GGMLType.F32, 16, 12, heads);
      const q = noise(rt, rng, 2 * heads * 16);
      const qAbs = noise(rt, rng, 2 * heads * 12);
      const h = noise(rt, rng, 3 * 40);
      const g = noise(rt, rng, 40);
      const hn = noise(rt, rng, 3 * 40);
      const table = noise(rt, rng, 8 * 4 * 2);
      const pos = u32(rt, [3, 7]);
      const roped = noise(rt, rng, 2 * heads * 8);
      const wt = matrix(rt, rng, GGMLType.Q8_0, 32, 24);
      const xt = noise(rt, rng, 2 * 24);
      const yt = noise(rt, rng, 2 * 32);
      return {
        block: () => {
          matmul(rt, kB, q, qAbs, {
            n: 2,
            xStride: heads * 16,
            yStride: heads * 12,
            batch: { count: heads, xBatch: 16, yBatch: 12 },
          });
          rmsNorm(rt, h, g, hn, { n: 3, dim: 40 }, 1e-6);
          ropeTo(rt, table, 8, q, pos, roped, {
            n: 2,
            heads,
            xOff: 2,
            tokStride: heads * 16,
            headStride: 16,
            yOff: 0,
            yTok: heads * 8,
            yHead: 8,
          });
          matmulT(rt, wt, xt, yt, { n: 2, xStride: 24, yStride: 32 });
        },
        outputs: [qAbs, hn, roped, yt],
      };
    },
  },
  {
    name: "wide-load kernels: a gathered product per pair + an accumulating matmul",
    dispatches: 2,
    combines: true,
    build(rt, rng) {
      const { down, g, ye, ids } = gatheredDown(rt, rng, GGMLType.Q4_K);
      const shared = matrix(rt, rng, GGMLType.Q6_K, 256, 24);
      const gs = noise(rt, rng, 3 * 256);
      const h = noise(rt, rng, 3 * 24);
      return {
        block: () => {
          matmulGather(rt, down, g, ye, ids, { pairs: 6, xDiv: 1, xBatch: 256, yBatch: 24, mode: "pairs" });
          matmul(rt, shared, gs, h, { n: 3, xStride: 256, yStride: 24, acc: true });
        },
        outputs: [ye, h],
      };
    },
  },
  {
    name: "expert-major gathered product + an F32 matmul (one input buffer shared, read-only in both)",
    dispatches: 2,
    combines: true,
    build(rt, rng) {
      const { down, g, ye, ids } = gatheredDown(rt, rng, GGMLType.Q5_K);
      const router = matrix(rt, rng, GGMLType.F32, 256, 5);
      const z = noise(rt, rng, 2 * 5);
      return {
        block: () => {
          matmulGather(rt, down, g, ye, ids, { pairs: 6, xDiv: 1, xBatch: 256, yBatch: 24, mode: "experts" });
          matmul(rt, router, g, z, { n: 2, xStride: 256, yStride: 5 });
        },
        outputs: [ye, z],
      };
    },
  },
  {
    name: "falls back: kernels of different workgroup sizes that both need their whole workgroup (wide Q4_K at 128 threads + coalesced F32)",
    dispatches: 2,
    combines: false,
    tune: { wideRows: Math.max(1, 128 / (base?.info.subgroupSize ?? 32)) },
    build(rt, rng) {
      const a = matrix(rt, rng, GGMLType.Q4_K, 256, 8);
      const b = matrix(rt, rng, GGMLType.F32, 256, 8);
      const x = noise(rt, rng, 256);
      const ya = noise(rt, rng, 8);
      const yb = noise(rt, rng, 8);
      return {
        block: () => {
          matmul(rt, a, x, ya, { n: 1, xStride: 256, yStride: 8 });
          matmul(rt, b, x, yb, { n: 1, xStride: 256, yStride: 8 });
        },
        outputs: [ya, yb],
      };
    },
  },
  {
    name: "kvCacheWrite (q_pe roped into qAbs) + the absorbed-query product into qAbs (one writable buffer, bound once)",
    dispatches: 2,
    combines: true,
    build(rt, rng) {
      const [n, H, P, R, L] = [2, 3, 8, 4, 16];
      const D = P + R;
      const S0 = H * D + L + R;
      const a0 = noise(rt, rng, n * S0);
      const kvNorm = noise(rt, rng, L);
      const table = noise(rt, rng, 16 * (R / 2) * 2);
      const pos = u32(rt, [5, 9]);
      const rowIdx = u32(rt, [5, 16 + 9]);
      const cacheC = noise(rt, rng, 32 * L);
      const cacheK = noise(rt, rng, 32 * R);
      const qAbs = noise(rt, rng, n * H * (L + R));
      const kB = matrix(rt, rng, GGMLType.F32, P, L, H);
      return {
        block: () => {
          kvCacheWrite(
            rt,
            a0,
            kvNorm,
            table,
            R,
            pos,
            rowIdx,
            cacheC,
            cacheK,
            {
              n,
              L,
              kvOff: H * D,
              stride: S0,
              qRope: { y: qAbs, heads: H, qpOff: P, qHead: D, yOff: L, yTok: H * (L + R), yHead: L + R },
            },
            1e-6,
          );
          matmul(rt, kB, a0, qAbs, {
            n,
            xStride: S0,
            yStride: H * (L + R),
            batch: { count: H, xBatch: D, yBatch: L + R },
          });
        },
        outputs: [cacheC, cacheK, qAbs],
      };
    },
  },
  {
    name: "grids of 40000 + 30000 workgroups (more than one dimension holds: a 2D combined grid)",
    dispatches: 2,
    combines: true,
    build(rt) {
      const o = rt.buffer(70000 * 4);
      return {
        block: () => {
          rt.dispatch(
            "mark",
            MARK_WGSL,
            [o],
            new Uint32Array([0, 0, 0, 0]),
            [40000],
            [{ buffer: o, offset: 0, size: 40000 * 4 }],
          );
          rt.dispatch(
            "mark",
            MARK_WGSL,
            [o],
            new Uint32Array([40000, 0, 0, 0]),
            [200, 150],
            [{ buffer: o, offset: 40000 * 4, size: 30000 * 4 }],
          );
        },
        outputs: [o],
      };
    },
  },
  {
    name: "falls back: one buffer read-only in one kernel and writable in the other (disjoint rows)",
    dispatches: 2,
    combines: false,
    build(rt, rng) {
      const x = noise(rt, rng, 4 * 16);
      const g = noise(rt, rng, 16);
      const y = noise(rt, rng, 2 * 16);
      return {
        block: () => {
          copyRows(rt, x, y, { n: 2, width: 16 });
          rmsNorm(rt, x, g, undefined, { n: 2, dim: 16, xOff: 32, yOff: 32 }, 1e-6);
        },
        outputs: [x, y],
      };
    },
  },
  {
    name: "falls back: a barrier kernel with a smaller workgroup than the other",
    dispatches: 2,
    combines: false,
    build(rt, rng) {
      const x = noise(rt, rng, 32 * 3);
      const y = noise(rt, rng, 3);
      const z = noise(rt, rng, 100);
      return {
        block: () => {
          sum32(rt, x, y, 3);
          rt.dispatch("ones", ONES_WGSL, [z], new Uint32Array([100, 0, 0, 0]), [2]);
        },
        outputs: [y, z],
      };
    },
  },
];

async function runBoth(
  s: Scenario,
  opts: RuntimeOptions,
  seed: number,
): Promise<{ dispatched: number[]; bytes: Uint8Array[][] }> {
  const dispatched: number[] = [];
  const bytes: Uint8Array[][] = [];
  for (const fuse of [false, true]) {
    const rt = new GpuRuntime(base!.info, { ...opts, ...(s.tune !== undefined ? { tune: s.tune } : {}), fuse });
    rt.device.pushErrorScope("validation");
    const { block, outputs } = s.build(rt, new Rng(seed));
    const before = await Promise.all(outputs.map(async (b) => new Uint8Array(await rt.read(b))));
    const d0 = rt.stats.dispatches;
    rt.together(block);
    dispatched.push(rt.stats.dispatches - d0);
    const after = await Promise.all(outputs.map(async (b) => new Uint8Array(await rt.read(b))));
    assert.equal((await rt.device.popErrorScope())?.message, undefined);
    after.forEach((a, i) => assert.notDeepEqual(a, before[i], `output ${i} unchanged (fuse ${fuse})`));
    bytes.push(after);
  }
  return { dispatched, bytes };
}

for (const s of SCENARIOS) {
  for (const checkWrites of [false, true]) {
    test(`together: ${s.name}${checkWrites ? " (--check-writes)" : ""}`, { skip }, async () => {
      const { dispatched, bytes } = await runBoth(s, { checkWrites }, 7);
      assert.deepEqual(dispatched, [s.dispatches, s.combines ? 1 : s.dispatches]);
      bytes[0].forEach((want, i) => assert.deepEqual(bytes[1][i], want, `output ${i} differs combined vs one by one`));
    });
  }
}

test("together: the rebuilt builtins are the ones of a dispatch of its own", { skip }, async () => {
  const rt = new GpuRuntime(base!.info, {});
  rt.device.pushErrorScope("validation");
  const dump = rt.buffer(4 * 13 * 16 * 6);
  rt.together(() => {
    sum32(rt, noise(rt, new Rng(1), 32), rt.buffer(4), 1);
    builtinsDump(rt, dump, 0, [1, 3, 2]);
  });
  const got = new Uint32Array(await rt.read(dump));
  assert.equal((await rt.device.popErrorScope())?.message, undefined);
  for (let w = 0; w < 6; w++) {
    const wid = [0, w % 3, Math.floor(w / 3)];
    for (let li = 0; li < 16; li++) {
      const l = [li % 4, Math.floor(li / 4) % 2, Math.floor(li / 8)];
      const want = [...wid, 1, 3, 2, ...wid.map((v, d) => v * [4, 2, 2][d] + l[d]), ...l, li];
      assert.deepEqual(
        Array.from(got.subarray((w * 16 + li) * 13, (w * 16 + li + 1) * 13)),
        want,
        `workgroup ${w} thread ${li}`,
      );
    }
  }
});

test("together: --check-writes still reports an output left unwritten inside a combined dispatch", {
  skip,
}, async () => {
  const rt = new GpuRuntime(base!.info, { checkWrites: true });
  const y = rt.buffer(4 * 64);
  noise(rt, new Rng(3), 32); // a buffer written before the counted dispatch
  const d0 = rt.stats.dispatches;
  rt.together(() => {
    builtinsDump(rt, rt.buffer(4 * 13 * 16), 0, [1, 1, 1]);
    // declares 40 outputs, writes 39
    rt.dispatch("ones", ONES_WGSL, [y], new Uint32Array([39, 0, 0, 0]), [1], [{ buffer: y, offset: 0, size: 40 * 4 }]);
  });
  assert.equal(rt.stats.dispatches - d0, 1);
  await assert.rejects(
    rt.sync(),
    (e: unknown) => e instanceof UnwrittenOutputError && /ones \(together\) left 1 of 40/.test(e.message),
  );
});

test("together: a recorded step with combined dispatches replays to the same results", { skip }, async () => {
  const s = SCENARIOS[1];
  const rt = new GpuRuntime(base!.info, { submitEvery: 2 });
  rt.device.pushErrorScope("validation");
  const { block, outputs } = s.build(rt, new Rng(11));
  await rt.sync();
  const initial = await Promise.all(outputs.map((b) => rt.read(b)));
  const other = new GpuRuntime(base!.info, { fuse: false });
  const ref = s.build(other, new Rng(11));
  other.together(ref.block);
  const want = await Promise.all(ref.outputs.map(async (b) => new Uint8Array(await other.read(b))));

  rt.beginRecording();
  rt.together(() => {
    builtinsDump(rt, rt.buffer(4 * 13 * 16), 0, [1, 1, 1]);
    sum32(rt, noise(rt, new Rng(2), 32), rt.buffer(4), 1);
  });
  rt.together(block);
  const rec = rt.endRecording();
  assert.ok(rec !== undefined);
  assert.equal(rec.items.length, 2);
  for (const [i, b] of outputs.entries())
    assert.deepEqual(new Uint8Array(await rt.read(b)), want[i], `recorded run, output ${i}`);
  // back to the inputs' initial values, then the replay
  outputs.forEach((b, i) => rt.write(b, 0, new Uint8Array(initial[i])));
  rt.replay(rec);
  for (const [i, b] of outputs.entries())
    assert.deepEqual(new Uint8Array(await rt.read(b)), want[i], `replay, output ${i}`);
  assert.equal((await rt.device.popErrorScope())?.message, undefined);
});

test("together: off (fuse: false) and in profile mode the dispatches stay apart; nesting is refused", {
  skip,
}, async () => {
  const x = base!.upload(new Float32Array(64));
  const y = base!.buffer(64 * 4);
  for (const opts of [{ fuse: false }, ...(base!.info.features.has("timestamp-query") ? [{ profile: true }] : [])]) {
    const rt = new GpuRuntime(base!.info, opts);
    const d0 = rt.stats.dispatches;
    rt.together(() => {
      copyRows(rt, x, y, { n: 1, width: 32 });
      copyRows(rt, x, y, { n: 1, width: 32, xOff: 32, yOff: 32 });
    });
    assert.equal(rt.stats.dispatches - d0, 2, JSON.stringify(opts));
    await rt.sync();
  }
  const rt = new GpuRuntime(base!.info, {});
  assert.throws(() => rt.together(() => rt.together(() => undefined)), /does not nest/);
});

for (const c of [
  CASES.find((k) => k.label === "no-qlora-odd")!,
  { label: "tiny-v3-3-layers", base: "tiny", over: { n_layer: 3 } } as const,
]) {
  test(`together in the fused model (${c.label}): the same logits with combining on and off, fewer dispatches per step`, {
    skip,
  }, async () => {
    const m = synthModel(c, 5);
    try {
      const { model, config } = loadModel(m.path);
      const logits: Uint32Array[][] = [];
      const perStep: number[] = [];
      for (const fuse of [false, true]) {
        const rt = new GpuRuntime(base!.info, { fuse });
        rt.device.pushErrorScope("validation");
        const g = new GpuModel(rt, model, { slots: 2, context: 16, maxTokens: 4 });
        const got: Uint32Array[] = [];
        for (const row of await g.prefill(0, [3, 1, 4, 1, 5], 0, true))
          got.push(new Uint32Array(row.buffer, row.byteOffset, row.length).slice());
        await g.prefill(1, [2, 7], 0);
        for (let pos = 0; pos < 3; pos++) {
          const d0 = rt.stats.dispatches;
          const step = await g.step([
            { token: 6 + pos, slot: 0, pos: 5 + pos, logits: true },
            { token: 9 - pos, slot: 1, pos: 2 + pos, logits: true },
          ]);
          perStep.push(rt.stats.dispatches - d0);
          got.push(new Uint32Array(step.buffer, step.byteOffset, step.length).slice());
        }
        assert.equal((await rt.device.popErrorScope())?.message, undefined);
        assert.ok(g.replayStats.replayed >= 2, JSON.stringify(g.replayStats));
        logits.push(got);
      }
      logits[0].forEach((want, i) => assert.deepEqual(logits[1][i], want, `logits ${i} differ with combining on`));
      const moeLayers = model.weights.layers.filter((l) => l.moe?.shared !== undefined).length;
      const saved = 2 * moeLayers + (config.qLoraRank === 0 ? config.nLayer : 0);
      assert.ok(moeLayers > 0);
      console.log(`# ${c.label}: dispatches per decode step, combining off then on: ${perStep.join(", ")}`);
      assert.deepEqual(
        perStep.slice(3),
        perStep.slice(0, 3).map((d) => d - saved),
        `dispatches per decode step, off then on: ${perStep.join(", ")}`,
      );
    } finally {
      m.cleanup();
    }
  });
}
