/**
 * CPU backend speed, side by side with llama.cpp (node-llama-cpp, same GGUF, same thread count, run in a child
 * process after latent's run): prefill of a 512-token prompt in one batch, then 128 single-token decode steps.
 * Also measures memory bandwidth (a copy loop, 1 and `threads` threads) and the fraction of it that decode reaches.
 *
 *   npm run bench -- cpu --backend cpu --threads 2 [--model F.gguf] [--prompt 512] [--decode 128] [--repeat N] [--no-llama]
 *     [--cpu-activations exact|q8]
 *
 * --threads takes a list too: `--threads 1,2,all` runs everything below once per thread count (in that order; "all"
 * is os.availableParallelism(), duplicates dropped), each with its own model load and result lines.
 *
 * --repeat N interleaves N latent runs with N llama.cpp runs (latent's model stays loaded) and reports each side's best
 * and median, the median of the per-round ratios, and which rounds llama.cpp's decode collapsed in (its spin-waiting
 * threads on a loaded machine: median step over 2× its fastest step, or under half its best round's speed), with the
 * decode ratio over the other rounds.
 *
 * Without --model it synthesizes `latent synth --preset v2-lite --layers 8 --type Q4_K_M` once into the temp dir.
 * Not a test: run via bench/run.ts.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { QMatrix } from "../src/tensor/qmatrix.js";
import { CPU_ACTIVATIONS, type CpuActivations } from "../src/backend/cpu/fast.js";
import { LatentCache } from "../src/model/cache.js";
import { argmax } from "../src/engine/sampler.js";
import { loadModel } from "../src/runtime/load.js";
import { preset, withOverrides } from "../src/synth/presets.js";
import { planTensors, synthesize } from "../src/synth/synthesize.js";
import { GGUFFile } from "../src/gguf/file.js";
import type { ModelWeights } from "../src/model/weights.js";
import type { BenchResult } from "./run.js";
import { arg, flag } from "./args.js";

function benchModel(): string {
  const given = arg("model");
  if (given !== undefined) return given;
  const path = join(tmpdir(), "latent-bench-v2-lite-8L-Q4_K_M.gguf");
  const config = withOverrides(preset("v2-lite", "deepseek2"), { n_layer: 8 });
  const problem = existsSync(path)
    ? reusableModelProblem(path, planTensors(config, { type: "Q4_K_M" }).length)
    : "not there";
  if (problem !== undefined) {
    console.error(`synthesizing ${path} (v2-lite, 8 layers, Q4_K_M; ${problem})…`);
    // (written under a temporary name and renamed when complete: an interrupted run leaves no half file here)
    synthesize(config, { out: path, seed: 1, type: "Q4_K_M" });
  }
  return path;
}

/**
 * Why a model file left by an earlier run cannot be reused (undefined when it can): it must parse as GGUF and hold the
 * tensors the synthesis writes. A truncated file or one from another preset is re-synthesized, not trusted.
 */
export function reusableModelProblem(path: string, expectedTensors: number): string | undefined {
  let file: GGUFFile;
  try {
    file = GGUFFile.open(path);
  } catch (e) {
    return `the existing file does not parse as GGUF: ${(e as Error).message}`;
  }
  try {
    const n = file.tensors.size;
    return n === expectedTensors ? undefined : `the existing file holds ${n} tensors, not ${expectedTensors}`;
  } finally {
    file.close();
  }
}

/** GB/s of a copy loop (bytes read + written) over 256 MiB buffers, on `threads` threads. */
function copyBandwidth(threads: number): number {
  const bytes = 256 << 20;
  const src = new Float64Array(new SharedArrayBuffer(bytes));
  const dst = new Float64Array(new SharedArrayBuffer(bytes));
  for (let i = 0; i < src.length; i += 512) src[i] = i;
  const reps = 6;
  if (threads <= 1) {
    dst.set(src);
    const t0 = performance.now();
    for (let r = 0; r < reps; r++) dst.set(src);
    return (2 * bytes * reps) / ((performance.now() - t0) / 1000) / 1e9;
  }
  const code = `
    const { workerData: { src, dst, lo, hi, reps, ctl } } = require("node:worker_threads");
    const a = new Float64Array(src, lo * 8, hi - lo), b = new Float64Array(dst, lo * 8, hi - lo), c = new Int32Array(ctl);
    b.set(a); Atomics.add(c, 0, 1); Atomics.notify(c, 0); Atomics.wait(c, 1, 0);
    for (let r = 0; r < reps; r++) b.set(a);
    Atomics.add(c, 2, 1); Atomics.notify(c, 2);`;
  const ctl = new Int32Array(new SharedArrayBuffer(16));
  const n = src.length;
  const workers = Array.from(
    { length: threads },
    (_, i) =>
      new Worker(code, {
        eval: true,
        workerData: {
          src: src.buffer,
          dst: dst.buffer,
          lo: Math.floor((n * i) / threads),
          hi: Math.floor((n * (i + 1)) / threads),
          reps,
          ctl: ctl.buffer,
        },
      }),
  );
  while (Atomics.load(ctl, 0) < threads) Atomics.wait(ctl, 0, Atomics.load(ctl, 0), 10);
  const t0 = performance.now();
  Atomics.store(ctl, 1, 1);
  Atomics.notify(ctl, 1);
  while (Atomics.load(ctl, 2) < threads) Atomics.wait(ctl, 2, Atomics.load(ctl, 2), 10);
  const s = (performance.now() - t0) / 1000;
  void Promise.all(workers.map((w) => w.terminate()));
  return (2 * bytes * reps) / s / 1e9;
}

/** Weight bytes one decode step reads: everything but the embedding, with nUsed of nExpert routed experts per layer. */
function decodeBytes(w: ModelWeights, nUsed: number): number {
  const b = (m: QMatrix | undefined): number => m?.data.length ?? 0;
  let s = b(w.output);
  for (const l of w.layers) {
    const a = l.attn;
    s +=
      b(a.q) +
      b(a.qA) +
      b(a.qB) +
      b(a.kvA) +
      b(a.o) +
      a.kB.reduce((x, m) => x + b(m), 0) +
      a.vB.reduce((x, m) => x + b(m), 0);
    if (l.dense) s += b(l.dense.gate) + b(l.dense.up) + b(l.dense.down);
    if (l.moe) {
      s += b(l.moe.router);
      if (l.moe.shared) s += b(l.moe.shared.gate) + b(l.moe.shared.up) + b(l.moe.shared.down);
      const e = l.moe.experts[0];
      s += nUsed * (b(e.gate) + b(e.up) + b(e.down));
    }
  }
  return s;
}

interface Timing {
  prefill_s: number;
  decode_s: number;
}

/** llama-timing.mjs's decode step times (ms) */
interface Steps {
  step_ms_min?: number;
  step_ms_median?: number;
}

/** latent's model loaded once; each call of `time()` is one timed prefill + decode run on a fresh cache. */
function latentRunner(
  path: string,
  threads: number,
  backend: "cpu" | "reference",
  nPrompt: number,
  nDecode: number,
  activations: CpuActivations | undefined,
): { time: () => Timing; bytes: number; close: () => void } {
  const {
    model,
    config,
    backend: be,
  } = loadModel(path, undefined, {
    backend,
    threads,
    ...(activations === undefined ? {} : { cpuActivations: activations }),
  });
  let s = 12345;
  const tokens = Array.from({ length: nPrompt }, () => {
    s = (s * 1103515245 + 12345) >>> 0;
    return 10 + (s % (config.nVocab - 10));
  });
  // the engine's greedy pick (a plain loop: Array.prototype.reduce over 102 400 logits took 1.3–1.6 ms a step)
  const run = (prompt: number[], steps: number): Timing => {
    const cache = new LatentCache(config, prompt.length + steps);
    const t0 = performance.now();
    let next = argmax(model.forward(prompt, cache, { path: "prefill", logits: "last" }));
    const t1 = performance.now();
    for (let i = 0; i < steps; i++) next = argmax(model.forward([next], cache, { path: "decode", logits: "last" }));
    const t2 = performance.now();
    return { prefill_s: (t1 - t0) / 1000, decode_s: (t2 - t1) / 1000 };
  };
  run(tokens.slice(0, 16), 4); // warm-up (JIT)
  return {
    time: () => run(tokens, nDecode),
    bytes: decodeBytes(model.weights, config.nExpertUsed),
    close: () => be?.close(),
  };
}

function median(xs: readonly number[]): number {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 === 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

function llamaTiming(
  path: string,
  threads: number,
  nPrompt: number,
  nDecode: number,
): (Timing & Steps & { cpu_backend: string }) | string {
  const script = fileURLToPath(new URL("./llama-timing.mjs", import.meta.url));
  try {
    const out = execFileSync(
      process.execPath,
      [script, path, "--threads", String(threads), "--prompt", String(nPrompt), "--decode", String(nDecode)],
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 24 },
    );
    const line = out.trim().split("\n").pop()!;
    return JSON.parse(line) as Timing & Steps & { cpu_backend: string };
  } catch (e) {
    return `llama.cpp timing failed: ${(e as Error).message.split("\n")[0]}`;
  }
}

/**
 * `--threads` as thread counts: "2", or a comma-separated list such as "1,2,all" ("all": os.availableParallelism()),
 * deduplicated in the order given.
 */
export function threadCounts(spec: string, all: number): number[] {
  const counts: number[] = [];
  for (const part of spec.split(",")) {
    const p = part.trim();
    const t = p === "all" ? all : Number(p);
    if (!Number.isInteger(t) || t < 1)
      throw new Error(`--threads: "${p}" is not a thread count (a positive integer or "all")`);
    if (!counts.includes(t)) counts.push(t);
  }
  return counts;
}

export function run(): BenchResult[] {
  const path = benchModel();
  const out: BenchResult[] = [];
  const counts = threadCounts(arg("threads") ?? "2", availableParallelism());
  const bw1 = copyBandwidth(1);
  out.push({ name: "memory bandwidth, copy, 1 thread", value: bw1, unit: "GB/s" });
  for (const threads of counts) out.push(...runAt(path, threads, bw1, counts.length > 1));
  return out;
}

/** Everything below for one thread count (latent and llama.cpp both on `threads` threads). */
function runAt(path: string, threads: number, bw1: number, several: boolean): BenchResult[] {
  const backend = (arg("backend") ?? "cpu") as "cpu" | "reference";
  const nPrompt = Number(arg("prompt") ?? 512);
  const nDecode = Number(arg("decode") ?? 128);
  const given = arg("cpuActivations");
  if (given !== undefined && !(CPU_ACTIVATIONS as readonly string[]).includes(given))
    throw new Error(`--cpu-activations must be ${CPU_ACTIVATIONS.join(" or ")}, got "${given}"`);
  const activations = given as CpuActivations | undefined;
  const mode = activations === "q8" ? " q8" : "";
  const out: BenchResult[] = [];
  // with several thread counts, the lines that do not name theirs say it
  const tag = several ? `, ${threads} thread${threads > 1 ? "s" : ""}` : "";
  if (several) console.error(`— ${threads} thread${threads > 1 ? "s" : ""} —`);
  const bwT = threads > 1 ? copyBandwidth(threads) : bw1;
  const bw = Math.max(bw1, bwT);
  if (threads > 1) out.push({ name: `memory bandwidth, copy, ${threads} threads`, value: bwT, unit: "GB/s" });

  // --repeat N: N rounds of (latent run, llama.cpp run), interleaved so that both sides see the same machine load;
  // each round's ratios are printed and the headline figures are the medians
  const repeat = Math.max(1, Number(arg("repeat") ?? 1));
  const withLlama = !flag("no-llama");
  const load0 = loadavg()[0];
  const lr = latentRunner(path, threads, backend, nPrompt, nDecode, activations);
  const rounds: {
    lPre: number;
    lDec: number;
    cPre?: number;
    cDec?: number;
    steps?: Steps;
    load: number;
    backendName?: string;
  }[] = [];
  for (let r = 0; r < repeat; r++) {
    const lt = lr.time();
    const round: (typeof rounds)[number] = {
      lPre: nPrompt / lt.prefill_s,
      lDec: nDecode / lt.decode_s,
      load: loadavg()[0],
    };
    if (withLlama) {
      const ll = llamaTiming(path, threads, nPrompt, nDecode);
      if (typeof ll === "string") console.error(ll);
      else
        Object.assign(round, {
          cPre: nPrompt / ll.prefill_s,
          cDec: nDecode / ll.decode_s,
          steps: ll,
          backendName: ll.cpu_backend,
        });
    }
    rounds.push(round);
    if (repeat > 1) {
      const ratio =
        round.cPre === undefined
          ? ""
          : `, ratios prefill ${(round.lPre / round.cPre).toFixed(3)}× decode ${(round.lDec / round.cDec!).toFixed(3)}×` +
            ` (llama.cpp decode steps: fastest ${round.steps?.step_ms_min?.toFixed(1)} ms, median ${round.steps?.step_ms_median?.toFixed(1)} ms)`;
      console.error(
        `round ${r + 1}/${repeat} (load ${round.load.toFixed(2)}): latent prefill ${round.lPre.toFixed(1)} decode ${round.lDec.toFixed(2)} tok/s` +
          (round.cPre === undefined
            ? ""
            : `; llama.cpp prefill ${round.cPre.toFixed(1)} decode ${round.cDec!.toFixed(2)} tok/s${ratio}`),
      );
    }
  }
  lr.close();
  const med = repeat > 1 ? " (median)" : "";
  out.push({
    name: `load average (1 min) before latent / after the runs${tag}`,
    value: load0,
    unit: "",
    extra: { after: loadavg()[0] },
  });
  const best = (xs: readonly number[]): number => Math.max(...xs);
  const lPre = median(rounds.map((x) => x.lPre));
  const lDec = median(rounds.map((x) => x.lDec));
  out.push({
    name: `latent ${backend}${mode}×${threads} prefill ${nPrompt}${med}`,
    value: lPre,
    unit: "tok/s",
  });
  out.push({
    name: `latent ${backend}${mode}×${threads} decode ${nDecode}${med}`,
    value: lDec,
    unit: "tok/s",
    extra: { weight_bytes_per_token: lr.bytes },
  });
  if (repeat > 1) {
    out.push({
      name: `latent ${backend}${mode}×${threads} prefill ${nPrompt} (best)`,
      value: best(rounds.map((x) => x.lPre)),
      unit: "tok/s",
    });
    out.push({
      name: `latent ${backend}${mode}×${threads} decode ${nDecode} (best)`,
      value: best(rounds.map((x) => x.lDec)),
      unit: "tok/s",
    });
  }
  out.push({
    name: `latent decode weight traffic / copy bandwidth${tag}`,
    value: ((lr.bytes * lDec) / 1e9 / bw) * 100,
    unit: "%",
    extra: { gb_per_s: (lr.bytes * lDec) / 1e9 },
  });
  const paired = rounds.filter((x) => x.cPre !== undefined);
  if (paired.length === 0) return out;
  const cPre = median(paired.map((x) => x.cPre!));
  const cDec = median(paired.map((x) => x.cDec!));
  const cDecBest = best(paired.map((x) => x.cDec!));
  out.push({
    name: `llama.cpp (${paired[0].backendName})×${threads} prefill ${nPrompt}${med}`,
    value: cPre,
    unit: "tok/s",
  });
  out.push({
    name: `llama.cpp (${paired[0].backendName})×${threads} decode ${nDecode}${med}`,
    value: cDec,
    unit: "tok/s",
  });
  if (repeat > 1) {
    const name = `llama.cpp (${paired[0].backendName})×${threads}`;
    out.push({ name: `${name} prefill ${nPrompt} (best)`, value: best(paired.map((x) => x.cPre!)), unit: "tok/s" });
    out.push({ name: `${name} decode ${nDecode} (best)`, value: cDecBest, unit: "tok/s" });
  }
  out.push({
    name: `llama.cpp decode weight traffic / copy bandwidth${tag}`,
    value: ((lr.bytes * cDec) / 1e9 / bw) * 100,
    unit: "%",
  });
  out.push({
    name: `ratio latent/llama.cpp prefill (bar ≥ 0.7)${repeat > 1 ? ", median of rounds" : ""}${tag}`,
    value: median(paired.map((x) => x.lPre / x.cPre!)),
    unit: "×",
  });
  out.push({
    name: `ratio latent/llama.cpp decode (bar ≥ 1.0)${repeat > 1 ? ", median of rounds" : ""}${tag}`,
    value: median(paired.map((x) => x.lDec / x.cDec!)),
    unit: "×",
  });
  // llama.cpp's threads spin-wait between ops: on a loaded machine its decode can collapse (most steps far slower than
  // its fastest); such rounds say little about either side's decode
  const collapsed = paired.filter(
    (x) =>
      (x.steps?.step_ms_min !== undefined && x.steps.step_ms_median! > 2 * x.steps.step_ms_min) ||
      (paired.length > 1 && x.cDec! < 0.5 * cDecBest),
  );
  out.push({
    name: `rounds in which llama.cpp's decode collapsed${tag}`,
    value: collapsed.length,
    unit: `of ${paired.length}${collapsed.length > 0 ? ` (round ${collapsed.map((x) => paired.indexOf(x) + 1).join(", ")})` : ""}`,
  });
  const steady = paired.filter((x) => !collapsed.includes(x));
  if (collapsed.length > 0 && steady.length > 0)
    out.push({
      name: `ratio latent/llama.cpp decode, median of the rounds without a collapse${tag}`,
      value: median(steady.map((x) => x.lDec / x.cDec!)),
      unit: "×",
    });
  return out;
}
