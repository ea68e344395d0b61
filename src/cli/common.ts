import { existsSync } from "node:fs";
import cliProgress from "cli-progress";
import { UsageError } from "../util/errors.js";
import { printable } from "../util/printable.js";
import { formatBinaryBytes, parseByteSize } from "../util/byte-size.js";
import { parseCommand, type Parser } from "./options.js";
import { loadModel, type BackendChoice, type LoadedModel } from "../runtime/load.js";
import type { ExpertStore } from "../model/expert-store.js";
import { CPU_ACTIVATIONS, type CpuActivations } from "../backend/cpu/fast.js";
import { GPU_ACTIVATIONS, type GpuActivations } from "../backend/webgpu/index.js";

/** Where a command writes: stdout/stderr, or a capture in tests. */
export interface CliIO {
  out(text: string): void;
  err(text: string): void;
  /** show progress bars (stderr is a terminal) */
  readonly tty: boolean;
}

export const processIO: CliIO = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
  get tty(): boolean {
    return process.stderr.isTTY === true;
  },
};

/** A "loading … MB" progress bar on stderr when it is a terminal (else a no-op): feed it (bytes done, bytes total). */
export function loadBar(io: CliIO): { update(done: number, total: number): void; stop(): void } {
  const bar = io.tty
    ? new cliProgress.SingleBar(
        { stream: process.stderr, format: "loading [{bar}] {percentage}% | {value}/{total} MB", hideCursor: true },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  let last = 0;
  return {
    update(done, total) {
      if (bar === undefined || total <= 0) return;
      const now = Date.now();
      if (last === 0) bar.start(Math.max(1, Math.ceil(total / 1e6)), 0);
      if (now - last > 100 || done === total) {
        bar.update(Math.round(done / 1e6));
        last = now;
      }
    },
    stop: () => bar?.stop(),
  };
}

/**
 * Load a model for a command, with a progress bar on stderr when it is a terminal. A model larger than `maxMemory`
 * (default: what the machine can spare) streams its routed experts from disk, said in one line on stderr.
 */
export function loadForCli(
  path: string,
  io: CliIO,
  backend?: BackendChoice,
  threads?: number,
  allowNonFinite = false,
  maxMemory?: number,
  cpuActivations?: CpuActivations,
  gpuActivations?: GpuActivations,
): LoadedModel {
  if (!existsSync(path)) throw new UsageError(`model file not found: ${path}`);
  const bar = loadBar(io);
  try {
    return loadModel(path, (done, total) => bar.update(done, total), {
      ...(backend === undefined ? {} : { backend }),
      ...(threads === undefined ? {} : { threads }),
      ...(cpuActivations === undefined ? {} : { cpuActivations }),
      ...(gpuActivations === undefined ? {} : { gpuActivations }),
      ...(allowNonFinite ? { onNonFinite: nonFiniteWarning(io) } : {}),
      ...(maxMemory === undefined ? {} : { maxMemory }),
      onNote: (line) => io.err(`${line}\n`),
    });
  } finally {
    bar.stop();
  }
}

/** `--allow-nonfinite`: each tensor holding NaN/±Inf is loaded anyway, with one warning line on stderr. */
export function nonFiniteWarning(io: CliIO): (message: string) => void {
  return (message) => io.err(`warning: ${printable(message)}\n`);
}

/** `--backend` value of run/logits. */
export function backendOption(v: string | undefined, dflt: BackendChoice): BackendChoice {
  const b = v ?? dflt;
  if (b !== "cpu" && b !== "reference" && b !== "webgpu" && b !== "auto")
    throw new UsageError(`--backend must be cpu, reference, webgpu or auto, got "${b}"`);
  return b;
}

/** A progress bar over positions, on stderr when it is a terminal (else a no-op). */
export function positionsBar(
  io: CliIO,
  label: string,
  unit = "tokens",
): { update(done: number, total: number): void; stop(): void } {
  if (!io.tty) return { update: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} [{bar}] {value}/{total} ${unit}`,
      hideCursor: true,
      clearOnComplete: true,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  return {
    update(done, total) {
      if (!started) bar.start(total, 0);
      started = true;
      bar.update(done);
    },
    stop() {
      if (started) bar.stop();
    },
  };
}

export function intOption(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isInteger(n) || n < min)
    throw new UsageError(`--${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

/** The options of a command that loads a model with a choice of kernels (run, logits, chat). */
export interface BackendFlags {
  backend?: string;
  threads?: string;
  cpuActivations?: string;
  gpuActivations?: string;
  allowNonfinite?: boolean;
  maxMemory?: string;
}

export const MAX_MEMORY_OPTION = [
  "--max-memory <SIZE>",
  "memory budget for the weights, like 16G or 512M (default: what the machine can spare); a larger model keeps attention, dense and shared weights resident and reads its routed experts from disk on demand through a cache filling the rest (cpu and reference backends)",
] as const;

/** " | experts streamed: H hits, M read (B GiB), E evicted" for a run's summary line ("" when none are streamed). */
export function expertLine(store: ExpertStore | undefined): string {
  if (store === undefined) return "";
  const s = store.stats;
  return ` | experts streamed (cache ${store.capacity}): ${s.hits} hits, ${s.misses} read (${formatBinaryBytes(s.bytesRead)} in ${(s.readMs / 1000).toFixed(1)} s), ${s.evictions} evicted`;
}

/** `--cpu-activations` (run, logits, chat, serve, bench cpu): how the cpu backend's integer dots quantize activations. */
export const CPU_ACTIVATIONS_OPTION = [
  "--cpu-activations <MODE>",
  "activations of the cpu backend's integer dots: exact (default: 14/16-bit, log-probs within ~1e-4 of the reference on F32 weights) or q8 (opt-in: products of Q4_K weights, and decode products of Q5_0 and Q6_K weights, with 8-bit activations through WebAssembly relaxed SIMD, faster than exact WebAssembly and less exact; where the native AVX-512 kernels run, exact is faster and q8 falls back to it; docs/cpu-backend.md)",
] as const;

/** `flag MODE` checked against its modes (undefined when absent). */
function modeOption<M extends string>(flag: string, v: string | undefined, modes: readonly M[]): M | undefined {
  if (v === undefined) return undefined;
  if (!(modes as readonly string[]).includes(v))
    throw new UsageError(`${flag} must be ${modes.join(" or ")}, got "${v}"`);
  return v as M;
}

/** Refuses a GPU-only option (`flag`, which `what`) with a backend that has no GPU. */
function requireGpuBackend(flag: string, what: string, backend: string): void {
  if (backend !== "webgpu" && backend !== "auto")
    throw new UsageError(`${flag} ${what}: it needs --backend webgpu or auto, not ${backend}`);
}

/** `--cpu-activations MODE` (undefined when absent). */
export function cpuActivationsOption(v: string | undefined): CpuActivations | undefined {
  return modeOption("--cpu-activations", v, CPU_ACTIVATIONS);
}

/** `--gpu-activations` (run, logits, chat, serve): how the GPU's matrix-matrix products take their activations. */
export const GPU_ACTIVATIONS_OPTION = [
  "--gpu-activations <MODE>",
  "with --backend webgpu|auto: activations of the GPU's matrix products for prompts and batched decode: exact (default, f32); int15 (opt-in: two int8 pieces per value, 15 bits per 32 values — the CPU backend keeps 14–16 — in the row-tiled products: batched decode steps from about 22 sequences, prompt chunks of 32–127 tokens; batch-64 decode about 1.2× faster, log-probs within about 2e-3); or q8 (opt-in: int8 per 32 values, as llama.cpp quantizes them, in prompt chunks and batched decode from 5 sequences; prefill about 1.6× and batch-64 decode about 1.5× faster, log-probs less exact; docs/webgpu.md)",
] as const;

/** `--gpu-activations MODE` (undefined when absent), refused with a backend that has no GPU. */
export function gpuActivationsOption(v: string | undefined, backend: string): GpuActivations | undefined {
  const mode = modeOption("--gpu-activations", v, GPU_ACTIVATIONS);
  if (mode !== undefined) requireGpuBackend("--gpu-activations", "applies to the GPU", backend);
  return mode;
}

/** `--max-memory SIZE` in bytes (undefined when absent). */
export function maxMemoryOption(v: string | undefined): number | undefined {
  return v === undefined ? undefined : parseByteSize(v, "--max-memory");
}

/** --backend, --threads, --max-memory and --allow-nonfinite, with the default named in --backend's help. */
export function backendOptions(parser: Parser, backendDefault: string): Parser {
  return parser
    .option(
      "--backend <B>",
      `matrix kernels: reference (plain JS), cpu (WebAssembly SIMD on worker threads), webgpu (GPU through WebGPU), auto (webgpu on a hardware GPU adapter, else cpu); default ${backendDefault}`,
    )
    .option("--threads <N>", "threads of the cpu backend, the caller's included (default: available parallelism)")
    .option(...CPU_ACTIVATIONS_OPTION)
    .option(...GPU_ACTIVATIONS_OPTION)
    .option(...MAX_MEMORY_OPTION)
    .option(...ALLOW_NONFINITE_OPTION);
}

/** `--gpu-memory` (run, serve): the fused GPU pipeline's memory budget, routed experts past it streamed from host memory. */
export const GPU_MEMORY_OPTION = [
  "--gpu-memory <BYTES>",
  "with --backend webgpu|auto: GPU memory for the model (e.g. 24G, 512M); everything but the routed experts stays on the GPU, the experts that do not fit stay in host memory and are uploaded on demand into a GPU expert cache (docs/webgpu.md)",
] as const;

/** --gpu-memory's bytes, refused with any backend but webgpu and auto. */
export function gpuMemoryOption(value: string | undefined, backend: string): number | undefined {
  if (value === undefined) return undefined;
  requireGpuBackend("--gpu-memory", "is a budget for the GPU", backend);
  return parseByteSize(value, "--gpu-memory");
}

export const ALLOW_NONFINITE_OPTION = [
  "--allow-nonfinite",
  "load weights that hold NaN/±Inf (each such tensor is named on stderr) instead of refusing the file; its outputs will be garbage wherever those weights are used",
] as const;

/**
 * The shared front of a model command: parse `argv` with `parser`, print its help and return undefined for -h/--help,
 * require exactly one positional (the model path). Bad arguments → UsageError.
 */
export function parseModelArgs<T>(
  argv: readonly string[],
  parser: Parser,
  io: CliIO,
): { values: T; model: string } | undefined {
  const parsed = parseCommand<T>(parser, argv, io);
  if (parsed === undefined) return undefined;
  if (parsed.args.length !== 1)
    throw new UsageError(
      `expected one model path, got ${parsed.args.length}\nRun \`${parser.name()} --help\` for its options.`,
    );
  return { values: parsed.opts, model: parsed.args[0] };
}
