/// <reference types="@webgpu/types" />
/**
 * Kernel micro-benchmark: each matrix product of a v2-lite decode step (its real shapes and GGUF types, random
 * blocks), its routing (and V3's), decode attention and the argmax dispatched `reps` times back to back in one pass,
 * timed by the pass's GPU timestamps. Per dispatch this is the kernel plus the barrier between dependent dispatches,
 * as in a real step; an empty kernel gives that fixed cost.
 * `node --import tsx bench/webgpu-kernel-bench.ts [--tokens 1,64] [--reps 200] [--tunes "a=1;wide=0"] [--big]` (--big: also
 * large plain products of each wide-kernel type, for their steady throughput; --dawn "toggles" as webgpu-model.ts). The decode attention cases (16, 48,
 * 200, 512 and 4096 keys) are one or two dispatches (split keys, then their combine), timed together: `--tokens 1,4 --tunes
 * "attn=0;attn=1"` compares them with the previous kernels. At one token, the attention path as a step runs it (three dispatches)
 * at 16/48/200 keys, and with `--tunes "attnFuse=1"` also as the fused dispatch (attention/fused.ts). `--cold`: each dispatch after a copy that evicts L2 (the copy's own time
 * subtracted), so that weights come from memory as in a step rather than from L2 as in back-to-back repeats.
 */
import { pathToFileURL } from "node:url";
import { GGMLType, typeName } from "../src/gguf/types.js";
import { rowBytes } from "../src/quant/index.js";
import { requestGpuDevice, type GpuDeviceInfo } from "../src/backend/webgpu/core/device.js";
import {
  expertListWords,
  expertLists,
  GpuMatrix,
  matmul,
  matmulGather,
  matmulGatherSwiGLU,
  matmulSwiGLU,
} from "../src/backend/webgpu/kernels/matmul/matrix.js";
import { COPY_WGSL } from "./webgpu-model.js";
import {
  argmaxRows,
  argmaxScratchWords,
  drawWords,
  sampleNucleusWords,
  sampleRows,
  sampleScratchWords,
  sampleTopKWords,
} from "../src/backend/webgpu/kernels/sample/sample.js";
import {
  attention,
  attentionScratch,
  kvCacheWrite,
  type AttentionArgs,
} from "../src/backend/webgpu/kernels/attention/attention.js";
import { moeRoute } from "../src/backend/webgpu/kernels/moe/moe.js";
import { attentionFused } from "../src/backend/webgpu/kernels/attention/fused.js";
import { attnFusedShape } from "../src/backend/webgpu/kernels/attention/select.js";
import { GpuRuntime } from "../src/backend/webgpu/core/runtime.js";
import { parseTuning } from "../src/backend/webgpu/core/tuning.js";

const EMPTY_WGSL = /* wgsl */ `
struct P { n: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read_write> Y: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) {
  if (g.x == 0u) { Y[0] = Y[0] + p.n; }
}`;

/** Reads X (vec4 words, 16 a thread) and writes nothing unless they XOR to a value random blocks never give: an L2 flush without dirty lines. */
const FLUSH_WGSL = /* wgsl */ `
struct P { n: u32, gx: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read> X: array<vec4u>;
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(256) fn main(@builtin(workgroup_id) w: vec3u, @builtin(local_invocation_index) t: u32) {
  let base = (w.x + w.y * p.gx) * 4096u + t;
  var acc = vec4u(0u);
  for (var i = 0u; i < 16u; i++) { if (base + i * 256u < p.n) { acc ^= X[base + i * 256u]; } }
  if (all(acc == vec4u(0x9e3779b9u))) { Y[0] = acc.x; }
}`;

export interface KernelCase {
  readonly name: string;
  /** weight bytes one dispatch reads (the selected experts only) */
  readonly bytes: number;
  readonly run: (rt: GpuRuntime) => void;
}

export interface KernelTiming {
  readonly name: string;
  readonly tune: string;
  readonly usPerDispatch: number;
  readonly gbPerS: number;
}

function randomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = s & 0xff;
  }
  // f16 fields holding NaN/Inf would not change the timing, but keep every value finite: clear each 16-bit word's top exponent bit
  for (let i = 1; i < n; i += 2) out[i] = out[i] & 0xbf;
  return out;
}

/** The products of one v2-lite layer (and the output head) and its routing at `n` tokens per step; K experts of E per token. */
export function v2LiteCases(rt: GpuRuntime, n: number, big = false): KernelCase[] {
  const Hd = 2048;
  const E = 64;
  const K = 6;
  const Fe = 1408;
  const Fs = 2816;
  let seed = 1;
  const mat = (name: string, type: number, cols: number, rows: number, items = 1): GpuMatrix =>
    GpuMatrix.upload(rt, name, type, cols, rows, randomBytes(rowBytes(type, cols) * rows * items, seed++), items);
  const f32 = (floats: number): GPUBuffer => rt.upload(new Float32Array(floats).map((_, i) => Math.sin(i) * 0.5));
  const x = f32(n * Math.max(Hd, Fs, K * Fe));
  const y = f32(n * Math.max(102400, K * Hd, 3648));
  const g = f32(n * K * Fe);
  const pairs = n * K;
  const ids = new Uint32Array(pairs);
  for (let t = 0; t < n; t++) for (let k = 0; k < K; k++) ids[t * K + k] = (t * 7 + k * 11) % E;
  const idsBuf = rt.upload(ids);
  const lists = rt.buffer(expertListWords(pairs, E) * 4, "lists");
  const useLists = pairs >= 0.25 * E;
  if (useLists) expertLists(rt, idsBuf, lists, { pairs, E });
  const cases: KernelCase[] = [];
  const plain = (name: string, type: number, cols: number, rows: number): void => {
    const m = mat(name, type, cols, rows);
    cases.push({
      name: `${name} ${typeName(type)} ${cols}→${rows}`,
      bytes: m.bytes,
      run: (r) => matmul(r, m, x, y, { n, xStride: cols, yStride: rows }),
    });
  };
  plain("A0 (q | kv_a)", GGMLType.Q4_K, Hd, 3072 + 576);
  plain("o", GGMLType.Q4_K, Hd, Hd);
  plain("router", GGMLType.F32, Hd, E);
  // routing as v2-lite's, and as V3's (256 experts in 8 groups, sigmoid + bias): tune route=0 for the workgroup kernel
  const logits = f32(n * 256);
  const routeBias = f32(256);
  const routeIds = rt.buffer(n * 8 * 4, "route ids");
  const routeWts = rt.buffer(n * 8 * 4, "route weights");
  const v2Route = { n, E, K, nGroup: 1, nGroupUsed: 1, softmax: true, groupMax: false, norm: false, scale: 1 };
  const v3Route = {
    n,
    E: 256,
    K: 8,
    nGroup: 8,
    nGroupUsed: 4,
    softmax: false,
    groupMax: false,
    norm: true,
    scale: 2.5,
  };
  cases.push({
    name: `moeRoute ${E} experts, ${K} used, softmax`,
    bytes: n * E * 4,
    run: (r) => moeRoute(r, logits, undefined, routeIds, routeWts, v2Route),
  });
  cases.push({
    name: "moeRoute 256 experts, 8 used, 8 groups keep 4, sigmoid + bias",
    bytes: n * 256 * 4,
    run: (r) => moeRoute(r, logits, routeBias, routeIds, routeWts, v3Route),
  });
  const sg = mat("shared gate", GGMLType.Q4_K, Hd, Fs);
  const su = mat("shared up", GGMLType.Q4_K, Hd, Fs);
  cases.push({
    name: `shared gate+up Q4_K ${Hd}→2×${Fs}`,
    bytes: sg.bytes + su.bytes,
    run: (r) => matmulSwiGLU(r, sg, su, x, g, { n, xStride: Hd, yStride: Fs }),
  });
  plain("shared down", GGMLType.Q6_K, Fs, Hd);
  plain("shared down", GGMLType.Q4_K, Fs, Hd);
  const eg = mat("exps gate", GGMLType.Q4_K, Hd, Fe, E);
  const eu = mat("exps up", GGMLType.Q4_K, Hd, Fe, E);
  const touched = new Set(ids).size;
  const gArgs = { pairs, xDiv: K, xBatch: Hd, yBatch: Fe, ...(useLists ? { lists } : {}) };
  cases.push({
    name: `routed gate+up Q4_K ${Hd}→2×${Fe}, ${pairs} pairs`,
    bytes: (eg.bytes + eu.bytes) * (touched / E),
    run: (r) => matmulGatherSwiGLU(r, eg, eu, x, g, idsBuf, gArgs),
  });
  for (const type of [GGMLType.Q5_0, GGMLType.Q8_0]) {
    const ed = mat("exps down", type, Fe, Hd, E);
    cases.push({
      name: `routed down ${typeName(type)} ${Fe}→${Hd}, ${pairs} pairs`,
      bytes: ed.bytes * (touched / E),
      run: (r) =>
        matmulGather(r, ed, g, y, idsBuf, { pairs, xDiv: 1, xBatch: Fe, yBatch: Hd, ...(useLists ? { lists } : {}) }),
    });
  }
  plain("output", GGMLType.Q6_K, Hd, 102400);
  // large plain products of each wide-kernel type: their steady throughput, apart from the launch and ramp of small ones
  if (big)
    for (const [type, cols] of [
      [GGMLType.Q4_K, Hd],
      [GGMLType.Q6_K, Fs],
      [GGMLType.Q5_0, Fe],
      [GGMLType.Q8_0, Fe],
    ] as const)
      plain("large", type, cols, 32768);
  // absorbed decode attention (16 heads, latent 512 + rope 64) over the latent cache; query i of the step sees the
  // positions up to its own (causal), the longest `keys`
  const H = 16;
  const C = 512;
  const R = 64;
  const maxCtx = 4096;
  const cache = f32((maxCtx + n) * C);
  const kpe = f32((maxCtx + n) * R);
  const qAbs = f32(n * H * (C + R));
  const lo = rt.buffer(n * H * C * 4, "attention out");
  const scratch = rt.buffer(attentionScratch(n, H, C, maxCtx) * 4, "attention scratch");
  const sel = rt.upload(new Uint32Array(4));
  // 48 and 200 keys: the chunked kernel at the bench's usual context and near the end of its one chunk
  for (const keys of [16, 48, 200, 512, maxCtx]) {
    const meta = rt.upload(
      Uint32Array.from({ length: 4 * n }, (_, k) => (k % 4 === 1 ? Math.max(1, keys - n + 1 + Math.floor(k / 4)) : 0)),
    );
    const args: AttentionArgs = {
      nq: n,
      heads: H,
      d1: C,
      d2: R,
      dv: C,
      scale: 0.07,
      maxKeys: keys,
      q: { off: 0, stride: H * (C + R), head: C + R, q2Off: C },
      k1: { off: 0, stride: C, head: 0 },
      k2: { off: 0, stride: R },
      v: { off: 0, stride: C, head: 0 },
      o: { off: 0, stride: H * C, head: C },
    };
    cases.push({
      name: `attention ${H} heads, ${keys} keys (${C}+${R})`,
      bytes: keys * (C + R) * 4,
      run: (r) => attention(r, { q: qAbs, k1: cache, k2: kpe, v: cache, meta, sel, o: lo, part: scratch }, args),
    });
  }
  // one token: the step's attention path as the decode step runs it (cache write ∥ W_UK absorb, attention, W_UV: three
  // dependent dispatches), and — with the tuning attnFuse=1 — as the one fused dispatch (attention/fused.ts)
  if (n === 1) {
    const P = 128;
    const V = 128;
    const D = P + R;
    const S0 = H * D + C + R;
    const kB = mat("attn_k_b", GGMLType.Q5_0, P, C, H);
    const vB = mat("attn_v_b", GGMLType.Q4_K, C, V, H);
    const a0 = f32(S0);
    const gC = f32(C);
    const table = f32((maxCtx + 1) * R);
    const heads = rt.buffer(H * V * 4, "attention heads out");
    for (const keys of [16, 48, 200]) {
      const pos = rt.upload(new Uint32Array([keys - 1]));
      const meta = rt.upload(new Uint32Array([0, keys, 0, 0]));
      const args: AttentionArgs = {
        nq: 1,
        heads: H,
        d1: C,
        d2: R,
        dv: C,
        scale: 0.07,
        maxKeys: keys,
        q: { off: 0, stride: H * (C + R), head: C + R, q2Off: C },
        k1: { off: 0, stride: C, head: 0 },
        k2: { off: 0, stride: R },
        v: { off: 0, stride: C, head: 0 },
        o: { off: 0, stride: H * C, head: C },
      };
      const qRope = { y: qAbs, heads: H, qpOff: P, qHead: D, yOff: C, yTok: H * (C + R), yHead: C + R };
      cases.push({
        name: `attention path, 3 dispatches (cache write ∥ W_UK, attention, W_UV), ${keys} keys`,
        bytes: kB.bytes + vB.bytes + keys * (C + R) * 4,
        run: (r) => {
          r.together(() => {
            kvCacheWrite(
              r,
              a0,
              gC,
              table,
              R,
              pos,
              pos,
              cache,
              kpe,
              { n: 1, L: C, kvOff: H * D, stride: S0, qRope },
              1e-6,
            );
            matmul(r, kB, a0, qAbs, {
              n: 1,
              xStride: S0,
              yStride: H * (C + R),
              batch: { count: H, xBatch: D, yBatch: C + R },
            });
          });
          attention(r, { q: qAbs, k1: cache, k2: kpe, v: cache, meta, sel, o: lo, part: scratch }, args);
          matmul(r, vB, lo, heads, { n: 1, xStride: H * C, yStride: H * V, batch: { count: H, xBatch: C, yBatch: V } });
        },
      });
      const shape = attnFusedShape(rt, kB, vB, { heads: H, P, R, L: C, V, maxKeys: keys });
      if (shape !== undefined)
        cases.push({
          name: `attention path fused (attnFuse), ${keys} keys`,
          bytes: kB.bytes + vB.bytes + keys * (C + R) * 4,
          run: (r) =>
            attentionFused(
              r,
              shape,
              { a0, kB, vB, g: gC, table, pos, rowIdx: pos, cacheC: cache, cacheK: kpe, meta, sel, o: heads },
              { scale: 0.07, eps: 1e-6, pageSize: 0, kvOff: H * D },
            ),
        });
    }
  }
  const chosen = rt.buffer(4 * n, "argmax ids");
  const part = rt.buffer(4 * argmaxScratchWords(n, 102400), "argmax slices");
  cases.push({
    name: `argmax of ${n} row(s) of 102400`,
    bytes: n * 102400 * 4,
    run: (r) => argmaxRows(r, y, chosen, part, { n, width: 102400 }),
  });
  // the draws of sampled rows (sample.wgsl.ts, nucleus.wgsl.ts) at latent run's defaults and an OpenAI-style top-p
  const lps = rt.buffer(4 * n, "sample logprobs");
  const sPart = rt.buffer(4 * sampleScratchWords(n, 102400), "sample slices");
  const cand = rt.buffer(4 * sampleTopKWords(n, 102400), "top-k candidates");
  const nuc = rt.buffer(4 * sampleNucleusWords(n), "nucleus scratch");
  for (const [label, d] of [
    ["temperature 0.8", { temperature: 0.8 }],
    ["top-k 40, top-p 0.95, min-p 0.05", { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 }],
    ["top-p 0.95, min-p 0.05 (no top-k)", { temperature: 0.8, topP: 0.95, minP: 0.05 }],
    ["top-p 0.9 (no top-k)", { temperature: 1, topP: 0.9 }],
  ] as const) {
    const dr = rt.upload(drawWords(Array.from({ length: n }, (_, t) => ({ ...d, key: 12345 + t }))), "draws");
    const topK = "topK" in d;
    const nucleus = !topK && "topP" in d;
    cases.push({
      name: `draw of ${n} row(s) of 102400, ${label}`,
      bytes: n * 102400 * 4,
      run: (r) =>
        sampleRows(r, y, dr, chosen, lps, sPart, {
          n,
          width: 102400,
          ...(topK ? { cand } : {}),
          ...(nucleus ? { nucleus: nuc } : {}),
        }),
    });
  }
  return cases;
}

/** µs per dispatch: from the pass timestamps, and from the wall clock around encoding, submission and completion */
async function timeCase(
  rt: GpuRuntime,
  c: KernelCase,
  reps: number,
  spin: () => Promise<void>,
): Promise<{ gpu: number; wall: number }> {
  // the GPU lowers its clocks while idle (host-side setup between cases), and small kernels slow down 2–3× then
  // the best of three timed runs: a run can still start before the clocks are up
  let best = { gpu: Infinity, wall: Infinity };
  for (let run = 0; run < 3; run++) {
    await spin();
    for (let i = 0; i < 3; i++) c.run(rt);
    await rt.sync();
    rt.profile(true);
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) c.run(rt);
    await rt.sync();
    const wall = ((performance.now() - t0) * 1000) / reps;
    const pass = rt.profile(true).find((e) => e.label === "(pass)");
    if (pass === undefined) throw new Error("no pass timing (the device has no timestamp-query)");
    if (pass.ms < best.gpu * 1e-3 * reps) best = { gpu: (pass.ms * 1000) / reps, wall };
  }
  return best;
}

export async function runKernelBench(opts: {
  tokens: number[];
  reps: number;
  tunes: string[];
  big?: boolean;
  cold?: boolean;
  log?: (s: string) => void;
  info?: GpuDeviceInfo;
}): Promise<KernelTiming[]> {
  const log = opts.log ?? ((s: string) => console.log(s));
  const info = opts.info ?? (await requestGpuDevice());
  const out: KernelTiming[] = [];
  for (const tuneText of opts.tunes) {
    const tune = parseTuning(tuneText);
    const rt = new GpuRuntime(info, { passTiming: true, tune });
    const sink = rt.buffer(16, "sink");
    // ~150 ms of copying before each timing, so that the GPU runs at the clocks of a busy decode loop
    const spinBytes = Math.min(256 << 20, info.limits.maxStorageBufferBindingSize & ~0xffff);
    const spinX = rt.buffer(spinBytes, "spin x");
    const spinY = rt.buffer(spinBytes, "spin y");
    const spinGroups = spinBytes / 16 / 256;
    const spin = async (): Promise<void> => {
      const t0 = performance.now();
      do {
        for (let i = 0; i < 50; i++)
          rt.dispatch(
            "spin",
            COPY_WGSL,
            [spinX, spinY],
            new Uint32Array([spinBytes / 16, Math.min(spinGroups, 65535), 0, 0]),
            [Math.min(spinGroups, 65535), Math.ceil(spinGroups / 65535)],
          );
        await rt.sync();
      } while (performance.now() - t0 < 150);
    };
    // --cold: before every dispatch of a case, a read of 2.5× a large GPU's 50 MB L2 evicts the weights the last one read,
    // as in a step, where each product reads its weights once; the case is then timed as (read + case) − read
    const flushBytes = Math.min(128 << 20, spinBytes);
    const flushGroups = Math.ceil(flushBytes / 16 / 16 / 256);
    const flush = (r: GpuRuntime): void =>
      r.dispatch(
        "flush",
        FLUSH_WGSL,
        [spinX, sink],
        new Uint32Array([flushBytes / 16, Math.min(flushGroups, 65535), 0, 0]),
        [Math.min(flushGroups, 65535), Math.ceil(flushGroups / 65535)],
      );
    const flushUs =
      opts.cold === true ? (await timeCase(rt, { name: "flush", bytes: 0, run: flush }, opts.reps, spin)).gpu : 0;
    if (opts.cold === true)
      log(`cold: a ${flushBytes >> 20} MB read before each dispatch, ${flushUs.toFixed(2)} µs alone, subtracted`);
    const empty: KernelCase = {
      name: "empty kernel (dependent)",
      bytes: 0,
      run: (r) => r.dispatch("empty", EMPTY_WGSL, [sink], new Uint32Array([1, 0, 0, 0]), [1]),
    };
    for (const n of opts.tokens) {
      // the empty kernel again at the end: its time there shows whether the clocks were already up at the start
      const measured = v2LiteCases(rt, n, opts.big === true);
      const cases = [empty, ...measured, { ...empty, name: "empty kernel (dependent), again" }];
      log(`\n${n} token(s) per step; tuning ${tuneText === "" ? "default" : tuneText}`);
      for (const c of cases) {
        const timed = await timeCase(
          rt,
          opts.cold === true ? { ...c, run: (r) => (flush(r), c.run(r)) } : c,
          opts.reps,
          spin,
        );
        const us = timed.gpu - flushUs;
        const wall = timed.wall - flushUs;
        const gbPerS = c.bytes / (us * 1e-6) / 1e9;
        out.push({ name: `${c.name} @${n}`, tune: tuneText, usPerDispatch: us, gbPerS });
        log(
          `  ${us.toFixed(2).padStart(8)} µs  ${c.bytes > 0 ? `${gbPerS.toFixed(0).padStart(5)} GB/s` : "          "}  (wall ${wall.toFixed(2)} µs)  ${c.name}`,
        );
      }
    }
  }
  return out;
}

/**
 * Host cost of encoding dispatches: `count` dispatches of trivial kernels binding `bindings` storage buffers each,
 * encoded the way a replayed step is (setPipeline when it changes, setBindGroup, dispatchWorkgroups), then finish()
 * and queue.submit() — where Dawn translates the pass for the driver. µs per dispatch for each part.
 */
export async function hostBench(info: GpuDeviceInfo, log: (s: string) => void = console.log): Promise<void> {
  const device = info.device;
  for (const bindings of [2, 4, 7]) {
    for (const pipelines of [1, 8]) {
      const code = (salt: number): string => `
@group(0) @binding(0) var<storage, read_write> Y: array<u32>;
${Array.from({ length: bindings - 1 }, (_, i) => `@group(0) @binding(${i + 1}) var<storage, read> X${i}: array<u32>;`).join("\n")}
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) {
  if (g.x == ${salt}u) { Y[0] = ${Array.from({ length: bindings - 1 }, (_, i) => `X${i}[0]`).join(" + ") || "0u"}; }
}`;
      const pipes = Array.from({ length: pipelines }, (_, i) =>
        device.createComputePipeline({
          layout: "auto",
          compute: { module: device.createShaderModule({ code: code(1000 + i) }), entryPoint: "main" },
        }),
      );
      const bufs = Array.from({ length: 16 }, () =>
        device.createBuffer({ size: 1 << 16, usage: GPUBufferUsage.STORAGE }),
      );
      const groups = pipes.map((pl, k) =>
        Array.from({ length: 8 }, (_, j) =>
          device.createBindGroup({
            layout: pl.getBindGroupLayout(0),
            entries: Array.from({ length: bindings }, (_, i) => ({
              binding: i,
              resource: { buffer: bufs[(i * 3 + j + k) % 16] },
            })),
          }),
        ),
      );
      const count = 400;
      const run = (): { js: number; finish: number; submit: number } => {
        const t0 = performance.now();
        const enc = device.createCommandEncoder();
        const pass = enc.beginComputePass();
        let last: GPUComputePipeline | undefined;
        for (let i = 0; i < count; i++) {
          const k = i % pipelines;
          if (pipes[k] !== last) pass.setPipeline((last = pipes[k]));
          pass.setBindGroup(0, groups[k][i % 8]);
          pass.dispatchWorkgroups(1);
        }
        pass.end();
        const t1 = performance.now();
        const cb = enc.finish();
        const t2 = performance.now();
        device.queue.submit([cb]);
        const t3 = performance.now();
        return { js: t1 - t0, finish: t2 - t1, submit: t3 - t2 };
      };
      for (let i = 0; i < 5; i++) run();
      await device.queue.onSubmittedWorkDone();
      const runs = Array.from({ length: 20 }, run);
      await device.queue.onSubmittedWorkDone();
      const med = (k: "js" | "finish" | "submit"): number =>
        (runs.map((r) => r[k]).sort((a, b) => a - b)[10] * 1000) / count;
      log(
        `host: ${bindings} bindings, ${pipelines} pipeline(s) alternating: encode ${med("js").toFixed(2)} + finish ${med("finish").toFixed(2)} + submit ${med("submit").toFixed(2)} µs per dispatch`,
      );
    }
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const args = process.argv.slice(2);
  const arg = (k: string): string | undefined => (args.includes(k) ? args[args.indexOf(k) + 1] : undefined);
  if (args.includes("--host")) {
    const dawn = arg("--dawn");
    await hostBench(await requestGpuDevice(dawn !== undefined ? { dawnFlags: dawn.split(" ") } : {}));
    process.exit(0);
  }
  const dawn = arg("--dawn");
  const info = await requestGpuDevice(dawn !== undefined ? { dawnFlags: dawn.split(" ") } : {});
  await runKernelBench({
    tokens: (arg("--tokens") ?? "1,64").split(",").map(Number),
    reps: Number(arg("--reps") ?? 200),
    tunes: (arg("--tunes") ?? "").split(";"),
    big: args.includes("--big"),
    cold: args.includes("--cold"),
    info,
  });
  process.exit(0);
}
