/// <reference types="@webgpu/types" />
/**
 * WebGPU benchmark of the fused pipeline on a GGUF model: copy bandwidth (the roofline), prefill tok/s for a
 * 512-token prompt, decode tok/s at batch 1 / 8 / 64, fraction of the bandwidth roofline, dispatches and host
 * encoding time per step. `node --import tsx bench/webgpu-model.ts MODEL.gguf [--json OUT.json] [--decode-context N]`
 * (compiled with the whole tree, `npx tsc -p tsconfig.json --outDir dist-all`: dist-all/bench/webgpu-model.js) (each
 * slot holds N tokens before its decode steps, default 16), or through `npm run bench -- webgpu` with
 * LATENT_BENCH_MODEL set. `--gpu-memory 20G`: the routed experts that do not fit stream through the expert cache
 * (GpuModelOptions.gpuMemory); each phase then also reports the cache's hit rate and the bytes uploaded per token.
 * `--activations q8`: the opt-in 8-bit activations of the register-tiled products (RuntimeOptions.activations).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { loadModel } from "../src/runtime/load.js";
import { preset, withOverrides, type SynthConfig } from "../src/synth/presets.js";
import { evaluateAll, logSoftmaxRow } from "../src/engine/evaluate.js";
import { WebGPUKernels } from "../src/backend/webgpu/engine/kernels.js";
import { synthesize } from "../src/synth/synthesize.js";
import { requestGpuDevice } from "../src/backend/webgpu/core/device.js";
import { GpuModel, type StepToken } from "../src/backend/webgpu/graph/gpu-model.js";
import { GpuRuntime, type GpuActivations, type RuntimeOptions } from "../src/backend/webgpu/core/runtime.js";
import { parseTuning, type KernelTuning } from "../src/backend/webgpu/core/tuning.js";
import type { ExpertCacheStats } from "../src/backend/webgpu/graph/expert-cache.js";
import { expertBytes } from "../src/backend/webgpu/graph/expert-cache.js";
import { parseByteSize } from "../src/util/byte-size.js";

export interface WebGpuBenchResult {
  readonly name: string;
  readonly value: number;
  readonly unit: string;
  readonly extra?: Readonly<Record<string, number | string>>;
}

/** Y = X as vec4u words (the copy bandwidth, and the kernel micro-benchmark's clock warm-up). */
export const COPY_WGSL = /* wgsl */ `
struct P { n: u32, gx: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<storage, read> X: array<vec4u>;
@group(0) @binding(1) var<storage, read_write> Y: array<vec4u>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x + g.y * p.gx * 256u;
  if (i < p.n) { Y[i] = X[i]; }
}`;

/**
 * Device copy bandwidth (read + write bytes per second): the best of `rounds` timed rounds of 20 copies, after ~150 ms
 * of copies that bring an idle GPU's clocks up (the kernel bench found small kernels 2–5× slower on an idle GPU), and
 * the first round alone (what rounds ≤ 17 reported, after three warm-up copies). The roofline takes the best: the
 * hardware's limit, not a round that caught the clocks low.
 */
async function copyBandwidth(rt: GpuRuntime, bytes: number, rounds = 5): Promise<{ best: number; first: number }> {
  const x = rt.buffer(bytes, "copy x");
  const y = rt.buffer(bytes, "copy y");
  const n = bytes / 16;
  const groups = Math.ceil(n / 256);
  const gx = Math.min(groups, 65535);
  const run = (reps: number): void => {
    for (let i = 0; i < reps; i++)
      rt.dispatch("copy", COPY_WGSL, [x, y], new Uint32Array([n, gx, 0, 0]), [gx, Math.ceil(groups / gx)]);
  };
  const timed = async (reps: number): Promise<number> => {
    const t0 = performance.now();
    run(reps);
    await rt.sync();
    return (2 * bytes * reps) / ((performance.now() - t0) / 1000);
  };
  run(3);
  await rt.sync();
  const first = await timed(20);
  const warm = performance.now();
  while (performance.now() - warm < 150) await timed(4);
  let best = first;
  // (a software adapter takes seconds a round: as many as fit in 2 s there)
  for (let r = 0; r < rounds && (r === 0 || performance.now() - warm < 2000); r++)
    best = Math.max(best, await timed(20));
  x.destroy();
  y.destroy();
  return { best, first };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Repetitions of each dispatch in `--kernels` (GpuRuntime.timeItems). */
const KERNEL_REPS = 100;

export async function runWebGpuBench(
  path: string,
  opts: {
    dawnFlags?: string[];
    batches?: number[];
    promptLen?: number;
    decodeSteps?: number;
    decodeContext?: number;
    log?: (s: string) => void;
    matvec?: RuntimeOptions["matvec"];
    profile?: boolean;
    tune?: KernelTuning;
    /** RuntimeOptions.activations ("q8": the opt-in 8-bit activations of the register-tiled products) */
    activations?: GpuActivations;
    kernels?: boolean;
    /** most tokens of a prompt per step (default 512) */
    ubatch?: number;
    /** GPU memory budget in bytes (GpuModelOptions.gpuMemory) */
    gpuMemory?: number;
  } = {},
): Promise<WebGpuBenchResult[]> {
  const log = opts.log ?? ((s: string) => console.log(s));
  const batches = opts.batches ?? [1, 8, 64];
  const promptLen = opts.promptLen ?? 512;
  const steps = opts.decodeSteps ?? 16;
  // tokens each slot holds before its decode steps (the keys its attention starts from)
  const ctx0 = opts.decodeContext ?? 16;
  const info = await requestGpuDevice(opts.dawnFlags !== undefined ? { dawnFlags: opts.dawnFlags } : {});
  const timing = opts.profile !== true && info.features.has("timestamp-query");
  const rt = new GpuRuntime(info, {
    ...(opts.matvec !== undefined ? { matvec: opts.matvec } : {}),
    profile: opts.profile === true,
    passTiming: timing,
    ...(opts.tune !== undefined ? { tune: opts.tune } : {}),
    ...(opts.activations !== undefined ? { activations: opts.activations } : {}),
  });
  /** GPU ms per step from the pass timestamps since the last reset (NaN without timestamp queries) */
  const gpuMs = (steps: number): number => {
    const p = rt.profile(true).find((e) => e.label === "(pass)");
    return timing && p !== undefined ? p.ms / steps : NaN;
  };
  const showProfile = (what: string, steps: number): void => {
    if (opts.profile !== true) return;
    const prof = rt.profile(true);
    const total = prof.reduce((a, p) => a + p.ms, 0);
    log(`GPU time per ${what} (profile mode, one pass per dispatch): ${(total / steps).toFixed(2)} ms`);
    for (const p of prof)
      log(
        `  ${((100 * p.ms) / total).toFixed(1).padStart(5)}%  ${(p.ms / steps).toFixed(3).padStart(8)} ms  ×${p.count / steps}  ${p.label}`,
      );
  };
  log(
    `adapter: ${info.adapterInfo}; binding limit ${info.limits.maxStorageBufferBindingSize}; subgroup size ${info.subgroupSize ?? "-"}; matvec kernel ${rt.matvec}`,
  );
  const copy = await copyBandwidth(rt, Math.min(1 << 30, info.limits.maxStorageBufferBindingSize & ~0xffff));
  const bw = copy.best;
  log(
    `copy bandwidth: ${(bw / 1e9).toFixed(0)} GB/s (the best of 5 rounds after warming up; the first round ${(copy.first / 1e9).toFixed(0)})`,
  );

  let t0 = performance.now();
  const { model, config: c } = loadModel(path);
  log(`loaded ${path} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const maxB = Math.max(...batches);
  const context = Math.max(promptLen, ctx0 + 2 * steps + 4) + 8;
  t0 = performance.now();
  // a prompt runs in steps of at most `ubatch` tokens (llama.cpp's -ub, 512 by default): one step of a long prompt
  // would need step buffers (logits, attention scratch) past the device's binding limit
  const ubatch = opts.ubatch ?? 512;
  const g = new GpuModel(rt, model, {
    slots: Math.max(maxB, 1),
    context,
    maxTokens: Math.max(Math.min(promptLen, ubatch), maxB),
    ...(opts.gpuMemory !== undefined ? { gpuMemory: opts.gpuMemory } : {}),
  });
  await rt.sync();
  log(
    `uploaded ${(g.weightBytes / 1e9).toFixed(2)} GB of weights in ${((performance.now() - t0) / 1000).toFixed(1)} s; ${(g.gpuBytes / 1e9).toFixed(2)} GB of GPU buffers in all`,
  );
  const cache = g.expertCache;
  if (cache !== undefined) {
    const moeLayers = g.layers.filter((l) => l.router !== undefined);
    const streamed = moeLayers.filter((l) => l.experts === undefined).length;
    log(
      `--gpu-memory ${opts.gpuMemory} bytes: ${streamed} of ${moeLayers.length} MoE layers streamed through an expert cache of ${(cache.bytes / 1e9).toFixed(2)} GB (slots by expert type: ${[...cache.slotCounts()].map(([k, v]) => `${v} × ${k}`).join(", ")}), the other MoE layers resident`,
    );
  } else if (opts.gpuMemory !== undefined)
    log(`--gpu-memory ${opts.gpuMemory} bytes: everything fits, no expert cache`);
  // the cache's counts since the last call, as a hit rate and bytes uploaded per token
  let last: ExpertCacheStats = { lookups: 0, hits: 0, uploads: 0, uploadedBytes: 0 };
  const cacheSince = (tokens: number): { text: string; extra: Record<string, number> } => {
    if (cache === undefined) return { text: "", extra: {} };
    const st = cache.stats;
    const d = {
      lookups: st.lookups - last.lookups,
      hits: st.hits - last.hits,
      uploads: st.uploads - last.uploads,
      uploadedBytes: st.uploadedBytes - last.uploadedBytes,
    };
    last = { ...st };
    const hitRate = d.lookups > 0 ? d.hits / d.lookups : Number.NaN;
    return {
      text: `; expert cache: ${(hitRate * 100).toFixed(1)}% hits, ${(d.uploadedBytes / tokens / 1e6).toFixed(2)} MB uploaded a token`,
      extra: { cache_hit_rate: hitRate, uploaded_bytes_per_token: d.uploadedBytes / tokens },
    };
  };

  // active weight bytes per token: everything but the embedding table, with only nExpertUsed routed experts per MoE
  // layer (the experts counted from the file: streamed ones are not in g.layers)
  let expertOne = 0;
  for (const lw of model.weights.layers)
    if (lw.moe !== undefined) expertOne += lw.moe.experts.reduce((b, e) => b + expertBytes(e), 0) / c.nExpert;
  let residentExperts = cache?.bytes ?? 0;
  for (const l of g.layers)
    if (l.experts !== undefined) residentExperts += l.experts.gate.bytes + l.experts.up.bytes + l.experts.down.bytes;
  // the embedding is read one row per token
  const embd = model.weights.output === model.weights.tokenEmbd ? 0 : model.weights.tokenEmbd.data.byteLength;
  const dense = g.weightBytes - residentExperts - embd;
  const activePerToken = dense + c.nExpertUsed * expertOne;
  const bytesPerStep = (B: number): number =>
    dense + expertOne * c.nExpert * (1 - (1 - c.nExpertUsed / c.nExpert) ** B);
  log(
    `active weight bytes per token: ${(activePerToken / 1e9).toFixed(3)} GB (non-expert ${(dense / 1e9).toFixed(3)} GB + ${c.nExpertUsed} experts × ${(expertOne / 1e6).toFixed(1)} MB)`,
  );

  const results: WebGpuBenchResult[] = [
    { name: "copy bandwidth", value: bw / 1e9, unit: "GB/s", extra: { first_round_gb_s: copy.first / 1e9 } },
  ];
  const tok = (i: number): number => (i * 7919 + 13) % c.nVocab;

  // prefill: one step of promptLen tokens, after a warm-up run of the same prompt (with an 8-token warm-up the first
  // timed run compiled the prompt's pipelines, and the GPU time, a mean over the runs, exceeded their median wall time)
  const prompt = Array.from({ length: promptLen }, (_, i) => tok(i));
  await g.prefill(0, prompt);
  cacheSince(1);
  const pre: number[] = [];
  rt.profile(true);
  for (let r = 0; r < 3; r++) {
    const t = performance.now();
    await g.prefill(0, prompt);
    pre.push((performance.now() - t) / 1000);
  }
  showProfile(`prefill of ${promptLen}`, 3);
  const preGpu = gpuMs(3);
  const preS = median(pre);
  const preCache = cacheSince(3 * promptLen);
  results.push({
    name: `prefill ${promptLen} tokens`,
    value: promptLen / preS,
    unit: "tok/s",
    extra: { seconds: preS, gpu_ms: preGpu, ...preCache.extra },
  });
  log(
    `prefill ${promptLen}: ${(promptLen / preS).toFixed(0)} tok/s (${(preS * 1000).toFixed(1)} ms; GPU ${preGpu.toFixed(1)} ms${preCache.text})`,
  );

  for (const B of batches) {
    // every slot holds a short prompt; then `steps` decode steps of B tokens
    for (let s = 0; s < B; s++)
      await g.prefill(
        s,
        Array.from({ length: ctx0 }, (_, i) => tok(s + i)),
      );
    let pos = ctx0;
    const stepTokens = (): StepToken[] =>
      Array.from({ length: B }, (_, s) => ({ token: tok(pos * 31 + s), slot: s, pos, logits: true }));
    await g.step(stepTokens()); // warm-up
    pos++;
    cacheSince(1);
    rt.profile(true);
    const times: number[] = [];
    const enc: number[] = [];
    let dispatches = 0;
    for (let i = 0; i < steps; i++) {
      const d0 = rt.stats.dispatches;
      const t = performance.now();
      const e0 = rt.stats.encodeMs;
      // (with streamed experts a step waits for its routed ids layer by layer: timed as a whole)
      const rows = cache === undefined ? g.encode(stepTokens()) : -1;
      const e1 = rt.stats.encodeMs;
      const tEnc = performance.now() - t;
      if (rows >= 0) await g.readLogits(rows);
      else await g.step(stepTokens());
      times.push((performance.now() - t) / 1000);
      enc.push(rows >= 0 ? Math.max(tEnc, e1 - e0) : rt.stats.encodeMs - e0);
      dispatches = rt.stats.dispatches - d0;
      pos++;
    }
    showProfile(`decode step of batch ${B}`, steps);
    const gpuStep = gpuMs(steps);
    const s = median(times);
    const tps = B / s;
    const roofTps = (bw / bytesPerStep(B)) * B;
    const frac = tps / roofTps;
    const stepCache = cacheSince(steps * B);
    results.push({
      name: `decode batch ${B}`,
      value: tps,
      unit: "tok/s",
      extra: {
        step_ms: s * 1000,
        roofline_tok_s: roofTps,
        roofline_fraction: frac,
        dispatches_per_step: dispatches,
        encode_ms_per_step: median(enc),
        gpu_ms_per_step: gpuStep,
        weight_bytes_per_step: bytesPerStep(B),
        ...stepCache.extra,
      },
    });
    log(
      `decode batch ${B}${ctx0 !== 16 ? ` from ${ctx0} keys` : ""}: ${tps.toFixed(1)} tok/s (step ${(s * 1000).toFixed(2)} ms; roofline ${roofTps.toFixed(0)} tok/s → ${(frac * 100).toFixed(1)}%; ${dispatches} dispatches/step; host encoding ${median(enc).toFixed(2)} ms/step; GPU ${gpuStep.toFixed(2)} ms/step; replayed steps ${g.replayStats.replayed}${stepCache.text})`,
    );
    // the same decode with greedy sampling on the GPU: steps chained there (argmax → next ids), the host encoding step
    // s+1 while the GPU runs step s, and the chosen tokens read back once at the end
    await g.decodeGreedy(
      Array.from({ length: B }, (_, s) => ({ token: tok(s), slot: s, pos })),
      2,
    ); // warm-up: records the greedy step
    pos += 2;
    cacheSince(1);
    gpuMs(1);
    rt.passSpan();
    const encG = rt.stats.encodeMs;
    const subG = rt.stats.submitMs;
    const tg = performance.now();
    await g.decodeGreedy(
      Array.from({ length: B }, (_, s) => ({ token: tok(pos * 31 + s), slot: s, pos })),
      steps,
    );
    const greedyS = (performance.now() - tg) / 1000 / steps;
    const greedyEnc = (rt.stats.encodeMs - encG) / steps;
    const greedySubmit = (rt.stats.submitMs - subG) / steps;
    pos += steps;
    const greedyGpu = gpuMs(steps);
    // from the first step's start on the GPU to the last one's end: the GPU's idle time between the steps' passes
    const greedySpan = rt.passSpan() / steps;
    const greedyCache = cacheSince(steps * B);
    // two rooflines: the step's (the weights a step of B tokens reads, each once: the expected distinct experts), and the
    // issue's per-token one (active weight bytes per token ÷ copy bandwidth, the same at every batch; equal at batch 1)
    const perTokenTps = bw / activePerToken;
    results.push({
      name: `decode batch ${B}, greedy on the GPU (chained)`,
      value: B / greedyS,
      unit: "tok/s",
      extra: {
        step_ms: greedyS * 1000,
        roofline_fraction: B / greedyS / roofTps,
        roofline_fraction_per_token: B / greedyS / perTokenTps,
        encode_ms_per_step: greedyEnc,
        submit_ms_per_step: greedySubmit,
        gpu_ms_per_step: greedyGpu,
        gpu_span_ms_per_step: greedySpan,
        ...greedyCache.extra,
      },
    });
    log(
      `decode batch ${B}, greedy on the GPU, chained: ${(B / greedyS).toFixed(1)} tok/s (step ${(greedyS * 1000).toFixed(2)} ms → ${((B / greedyS / roofTps) * 100).toFixed(1)}% of the roofline${B > 1 ? `, ${((B / greedyS / perTokenTps) * 100).toFixed(1)}% of the per-token roofline (${perTokenTps.toFixed(0)} tok/s)` : ""}; host encoding ${greedyEnc.toFixed(2)} ms/step + submission ${greedySubmit.toFixed(2)} ms/step; GPU ${greedyGpu.toFixed(2)} ms/step, ${greedySpan.toFixed(2)} from the first step's start to the last one's end${greedyCache.text})`,
    );
    if (opts.kernels === true && g.lastRecording !== undefined) {
      // every dispatch of the chained step alone (100 times back to back, pass timestamps), summed by kernel label;
      // Dawn's timestamps come in 65.5 µs steps on a large GPU, so 100 repetitions resolve 0.66 µs (20 gave 3.3)
      const items = await rt.timeItems(g.lastRecording, KERNEL_REPS);
      const by = new Map<string, { us: number; count: number; chars: number }>();
      for (const it of items) {
        const e = by.get(it.label) ?? { us: 0, count: 0, chars: it.codeChars };
        e.us += it.us;
        e.count++;
        by.set(it.label, e);
      }
      const total = items.reduce((a, it) => a + it.us, 0);
      log(
        `  kernels of the chained batch-${B} step, each alone (µs per step; sum ${(total / 1000).toFixed(2)} ms vs ${greedyGpu.toFixed(2)} ms in the step; each kernel's WGSL in thousands of characters):`,
      );
      for (const [label, e] of [...by].sort((a, b) => b[1].us - a[1].us))
        log(
          `  ${e.us.toFixed(1).padStart(9)} µs  ×${e.count}  ${(e.us / e.count).toFixed(2)} µs each  ${(e.chars / 1000).toFixed(1).padStart(5)} k  ${label}`,
        );
    }
  }
  rt.device.destroy();
  return results;
}

/**
 * Whole-model parity on this machine's GPU (for a machine without the test runner): tiny random models, fused
 * pipeline (with --check-writes) and WebGPUKernels vs the CPU reference path; returns the worst |Δ logprob|.
 */
export async function parityCheck(dir: string, log: (s: string) => void = console.log): Promise<number> {
  const cases: [string, Partial<SynthConfig>, string][] = [
    ["tiny-v3", {}, "F32"],
    ["tiny-v3-q4km", {}, "Q4_K_M"],
    [
      "v2-groups-softmax",
      {
        n_layer: 3,
        n_dense: 1,
        gating: "softmax",
        w_norm: false,
        w_scale: 16,
        groups: 4,
        groups_used: 2,
        n_expert: 8,
        n_used: 3,
        n_shared: 2,
        exp_bias: false,
      },
      "Q8_0",
    ],
  ];
  // (the models are written there: made if missing, as `latent synth -o` does not)
  mkdirSync(dir, { recursive: true });
  const info = await requestGpuDevice();
  const rt = new GpuRuntime(info, { checkWrites: true });
  const kernels = new WebGPUKernels({ checkWrites: true });
  let worst = 0;
  for (const [label, over, type] of cases) {
    const out = synthesize(withOverrides(preset("tiny", "deepseek2"), { ...over, name: label }), {
      out: `${dir}/${label}.gguf`,
      seed: 3,
      type,
    })[0];
    const { model, config } = loadModel(out);
    const tokens = Array.from({ length: 36 }, (_, i) => (i * 37 + 5) % config.nVocab);
    const ref = evaluateAll(model, tokens, { path: "reference" }).map((r) => logSoftmaxRow(r));
    const maxErr = (rows: Float64Array[] | Float32Array[]): number =>
      Math.max(...ref.map((row, i) => Math.max(...row.map((v, j) => Math.abs(rows[i][j] - v)))));
    // chunks of 8 then 4 tokens (the coalesced kernel at 8 tokens, the wide one up to 4), then the whole prompt as one
    // step (the row-tiled kernel: products of ≥ 32 tokens)
    const g = new GpuModel(rt, model, { slots: 1, context: tokens.length, maxTokens: 8 });
    const e1 = maxErr((await g.prefill(0, tokens, 0, true)).map((r) => logSoftmaxRow(r)));
    const gWhole = new GpuModel(rt, model, { slots: 1, context: tokens.length, maxTokens: tokens.length });
    const e3 = maxErr((await gWhole.prefill(0, tokens, 0, true)).map((r) => logSoftmaxRow(r)));
    model.kernels = kernels;
    const e2 = maxErr(evaluateAll(model, tokens, { path: "prefill", chunk: 5 }).map((r) => logSoftmaxRow(r)));
    log(
      `parity ${label} (${type}): fused pipeline max |Δ logprob| ${e1.toExponential(2)} (8-token steps), ${e3.toExponential(2)} (one ${tokens.length}-token step); WebGPUKernels ${e2.toExponential(2)}`,
    );
    worst = Math.max(worst, e1, e2, e3);
  }
  await kernels.close();
  rt.device.destroy();
  return worst;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const args = process.argv.slice(2);
  let path = args.find((a, i) => !a.startsWith("--") && !args[i - 1]?.startsWith("--"));
  // --synth PRESET:TYPE:OUT[:LAYERS] — write the random-weight model first (on a machine the file cannot be carried to);
  // LAYERS as `latent synth --layers` (e.g. glm5:Q4_K_M:/tmp/g.gguf:4, a glm-dsa model that fits one GPU)
  const synth = args.includes("--synth") ? args[args.indexOf("--synth") + 1].split(":") : undefined;
  if (synth !== undefined) {
    const t = performance.now();
    const layers = synth[3] !== undefined ? Number(synth[3]) : undefined;
    if (layers !== undefined && !(Number.isInteger(layers) && layers >= 1))
      throw new Error(`--synth: layers must be a positive integer, got ${synth[3]}`);
    const base = preset(synth[0]);
    path = synthesize(layers !== undefined ? withOverrides(base, { n_layer: layers }) : base, {
      out: synth[2],
      seed: 0,
      type: synth[1],
    })[0];
    console.log(
      `synthesized ${synth[0]}${layers !== undefined ? ` (${layers} layers)` : ""} ${synth[1]} → ${path} in ${((performance.now() - t) / 1000).toFixed(1)} s`,
    );
  }
  const json = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
  const batches = args.includes("--batches") ? args[args.indexOf("--batches") + 1].split(",").map(Number) : undefined;
  if (args.includes("--parity")) {
    const worst = await parityCheck(args[args.indexOf("--parity") + 1]);
    console.log(`parity: worst ${worst.toExponential(2)} ${worst <= 1e-3 ? "PASS" : "FAIL"} (≤ 1e-3)`);
    if (path === undefined) process.exit(worst <= 1e-3 ? 0 : 1);
  }
  const num = (k: string): number | undefined => (args.includes(k) ? Number(args[args.indexOf(k) + 1]) : undefined);
  // --tune expertTn=8,expertTpr=32,expertsFrom=0.5,rowTile=0,rowTileTokens=8
  const tune = args.includes("--tune") ? parseTuning(args[args.indexOf("--tune") + 1]) : undefined;
  if (tune !== undefined) console.log(`tuning: ${JSON.stringify(tune)}`);
  const results = await runWebGpuBench(path!, {
    ...(args.includes("--dawn") ? { dawnFlags: args[args.indexOf("--dawn") + 1].split(" ") } : {}),
    ...(tune !== undefined ? { tune } : {}),
    ...(args.includes("--activations")
      ? { activations: args[args.indexOf("--activations") + 1] as GpuActivations }
      : {}),
    batches,
    promptLen: num("--prompt"),
    decodeSteps: num("--steps"),
    decodeContext: num("--decode-context"),
    ubatch: num("--ubatch"),
    profile: args.includes("--profile"),
    kernels: args.includes("--kernels"),
    ...(args.includes("--gpu-memory")
      ? { gpuMemory: parseByteSize(args[args.indexOf("--gpu-memory") + 1] ?? "", "--gpu-memory") }
      : {}),
    ...(args.includes("--matvec") ? { matvec: args[args.indexOf("--matvec") + 1] as RuntimeOptions["matvec"] } : {}),
  });
  console.log("\nresult | value | unit");
  for (const r of results)
    console.log(
      `${r.name} | ${r.value.toFixed(1)} | ${r.unit}${
        r.extra
          ? " | " +
            Object.entries(r.extra)
              .map(([k, v]) => `${k}=${typeof v === "number" ? v.toPrecision(4) : v}`)
              .join(" ")
          : ""
      }`,
    );
  if (json !== undefined)
    writeFileSync(json, JSON.stringify({ date: new Date().toISOString(), model: path, results }, null, 2) + "\n");
  process.exit(0);
}
