import { parseArgs } from "node:util";
import { existsSync } from "node:fs";
import cliProgress from "cli-progress";
import type { Command } from "./command.js";
import { UsageError } from "../util/errors.js";
import { closeLoaded, loadModel, type BackendChoice, type LoadedModel } from "../model/load.js";
import { Tokenizer, type ChatMessage } from "../tokenizer/index.js";
import { generate, type GeneratePath } from "../engine/generate.js";
import { DEFAULT_PREFILL_CHUNK } from "../engine/evaluate.js";

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

/** Load a model for a command, with a progress bar on stderr when it is a terminal. */
export function loadForCli(path: string, io: CliIO, backend?: BackendChoice, threads?: number): LoadedModel {
  if (!existsSync(path)) throw new UsageError(`model file not found: ${path}`);
  const bar = io.tty
    ? new cliProgress.SingleBar({ stream: process.stderr, format: "loading [{bar}] {percentage}% | {value}/{total} MB", hideCursor: true }, cliProgress.Presets.shades_classic)
    : undefined;
  let last = 0;
  try {
    return loadModel(path, (done, total) => {
      if (bar === undefined) return;
      const now = Date.now();
      if (last === 0) bar.start(Math.max(1, Math.ceil(total / 1e6)), 0);
      if (now - last > 100 || done === total) {
        bar.update(Math.round(done / 1e6));
        last = now;
      }
    }, { ...(backend === undefined ? {} : { backend }), ...(threads === undefined ? {} : { threads }) });
  } finally {
    bar?.stop();
  }
}

/** `--backend` value of run/logits. */
export function backendOption(v: string | undefined, dflt: BackendChoice): BackendChoice {
  const b = v ?? dflt;
  if (b !== "cpu" && b !== "reference" && b !== "webgpu" && b !== "auto") throw new UsageError(`--backend must be cpu, reference, webgpu or auto, got "${b}"`);
  return b;
}

export const BACKEND_HELP = `  --backend B            matrix kernels: reference (plain JS), cpu (WebAssembly SIMD on worker threads),
                         webgpu (GPU through WebGPU), auto (webgpu on a hardware GPU adapter, else cpu)
  --threads N            threads of the cpu backend, the caller's included (default: available parallelism)`;

/** A progress bar over positions, on stderr when it is a terminal (else a no-op). */
export function positionsBar(io: CliIO, label: string): { update(done: number, total: number): void; stop(): void } {
  if (!io.tty) return { update: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar({ stream: process.stderr, format: `${label} [{bar}] {value}/{total} tokens`, hideCursor: true, clearOnComplete: true }, cliProgress.Presets.shades_classic);
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
  if (v.trim() === "" || !Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

function numOption(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got "${v}"`);
  return n;
}

const HELP = `usage: latent run MODEL.gguf -p "text" [options]

Generate text; it streams to stdout as tokens arrive, timings go to stderr.

options:
  -p, --prompt TEXT      the prompt (special-token texts in it are recognised; BOS added per the model,
                         never twice)
  -n, --n-predict N      most tokens to generate (default 128; -1 = until the context is full)
  --temp T               temperature, 0 = greedy (default 0.8)
  --top-k K              0 = off (default 40)
  --top-p P              1 = off (default 0.95)
  --min-p M              0 = off (default 0.05)
  --seed S               sampling seed (default random; printed with --json)
  --chat                 render the model's chat template around the prompt as a user message
  --system TEXT          system message (with --chat)
  --stop TEXT            stop when the text contains TEXT (repeatable)
  --ignore-eos           do not stop at end-of-generation tokens
  --path prefill|decode|reference
                         prefill (default): prompt in chunks, then cached decode steps; reference
                         recomputes the whole sequence for every token (slow, for checking)
  --chunk N              prefill chunk length (default ${DEFAULT_PREFILL_CHUNK})
${BACKEND_HELP}
                         (default cpu; logits defaults to reference, which defines correctness)
  --logprobs N           with --json: top-N alternatives per token (default 0)
  --json                 print one JSON object at the end instead of streaming`;

export const runCommand: Command = {
  name: "run",
  summary: "generate text from a prompt (streams to stdout)",
  run: (argv) => runMain(argv, processIO),
};

/**
 * parseArgs refuses option values that start with "-" (`-n -1`, `-p "-x"`): for options that take a value, glue the
 * next argument to them (`--name=VALUE`) so it is always read as the value, as getopt does; range checks judge it.
 */
export function glueValues(argv: readonly string[], valued: Readonly<Record<string, string>>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--") {
      out.push(...argv.slice(i));
      break;
    }
    const long = valued[a];
    const next = argv[i + 1];
    if (long !== undefined && next !== undefined) {
      out.push(`--${long}=${next}`);
      i++;
    } else out.push(a);
  }
  return out;
}

/** "-x"/"--name" → "name" for every option whose type is "string". */
export function valuedOptions(options: Readonly<Record<string, { type: "string" | "boolean"; short?: string }>>): Record<string, string> {
  const m: Record<string, string> = {};
  for (const [name, o] of Object.entries(options)) {
    if (o.type !== "string") continue;
    m[`--${name}`] = name;
    if (o.short !== undefined) m[`-${o.short}`] = name;
  }
  return m;
}

const RUN_OPTIONS = {
  prompt: { type: "string", short: "p" },
  "n-predict": { type: "string", short: "n" },
  temp: { type: "string" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  "min-p": { type: "string" },
  seed: { type: "string" },
  chat: { type: "boolean" },
  system: { type: "string" },
  stop: { type: "string", multiple: true },
  "ignore-eos": { type: "boolean" },
  path: { type: "string" },
  chunk: { type: "string" },
  backend: { type: "string" },
  threads: { type: "string" },
  logprobs: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

export async function runMain(argv: string[], io: CliIO): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args: glueValues(argv, valuedOptions(RUN_OPTIONS)),
      options: RUN_OPTIONS,
      allowPositionals: true,
      strict: true,
    });
  } catch (e) {
    throw new UsageError(`${e instanceof Error ? e.message : String(e)}\n\n${HELP}`);
  }
  const { values, positionals } = parsed;
  if (values.help === true) {
    io.out(HELP + "\n");
    return;
  }
  if (positionals.length !== 1) throw new UsageError(`expected one model path, got ${positionals.length}\n\n${HELP}`);
  if (values.prompt === undefined) throw new UsageError("-p/--prompt is required");
  const path = values.path ?? "prefill";
  if (path !== "prefill" && path !== "decode" && path !== "reference") throw new UsageError(`--path must be prefill, decode or reference, got "${path}"`);
  if (values.system !== undefined && values.chat !== true) throw new UsageError("--system needs --chat");
  const nArg = values["n-predict"];
  if (nArg !== undefined && nArg !== "-1" && !/^\d+$/.test(nArg.trim())) throw new UsageError(`--n-predict must be an integer ≥ 0 (or -1), got "${nArg}"`);
  const nPredict = nArg === undefined ? 128 : Number(nArg);
  const chunk = intOption("chunk", values.chunk, 1);
  const seedArg = values.seed;
  if (seedArg !== undefined && !/^\d+$/.test(seedArg)) throw new UsageError(`--seed must be an integer ≥ 0, got "${seedArg}"`);
  const seed = seedArg !== undefined ? Number(seedArg) : Math.floor(Math.random() * 2 ** 32);
  if (!Number.isSafeInteger(seed)) throw new UsageError(`--seed must be a safe integer, got "${seedArg}"`);
  const sampling = {
    temperature: numOption("temp", values.temp) ?? 0.8,
    topK: intOption("top-k", values["top-k"], 0) ?? 40,
    topP: numOption("top-p", values["top-p"]) ?? 0.95,
    minP: numOption("min-p", values["min-p"]) ?? 0.05,
    seed,
    logprobs: intOption("logprobs", values.logprobs, 0) ?? 0,
  };
  const json = values.json === true;
  const backend = backendOption(values.backend, "cpu");
  const threads = intOption("threads", values.threads, 1);

  const modelPath = positionals[0]!;
  const loaded = loadForCli(modelPath, io, backend, threads);
  const { file, model } = loaded;
  const tokenizer = Tokenizer.fromMetadata(file.metadata);
  let prompt: number[];
  if (values.chat === true) {
    const messages: ChatMessage[] = [];
    if (values.system !== undefined) messages.push({ role: "system", content: values.system });
    messages.push({ role: "user", content: values.prompt });
    prompt = tokenizer.encodeChat(messages); // no BOS added when the rendered text starts with it
  } else {
    prompt = tokenizer.encodePrompt(values.prompt);
  }

  const bar = json ? undefined : positionsBar(io, "prompt");
  let streamed = 0;
  const result = await generate(model, tokenizer, prompt, {
    ...sampling,
    maxTokens: nPredict < 0 ? Infinity : nPredict,
    path: path as GeneratePath,
    ...(chunk !== undefined ? { chunk } : {}),
    stop: values.stop ?? [],
    ignoreEog: values["ignore-eos"] === true,
    onPrefill: (done, total) => bar?.update(done, total),
    onToken: (ev) => {
      if (ev.index === 0) bar?.stop();
      if (json || ev.text === "") return;
      io.out(ev.text);
      streamed += ev.text.length;
    },
  }).finally(() => closeLoaded(loaded));
  bar?.stop();
  const t = result.timings;
  if (json) {
    const obj = {
      format: "latent-run/1",
      model: modelPath,
      path,
      seed,
      prompt_tokens: prompt,
      tokens: result.tokens,
      text: result.text,
      finish_reason: result.finishReason,
      ...(result.stoppedBy !== undefined ? { stopped_by: result.stoppedBy } : {}),
      logprobs: result.tokens.map((id, i) => ({
        id,
        token: tokenizer.decode([id]),
        logprob: result.logprobs[i]!,
        ...(result.top !== undefined ? { top: result.top[i]!.map(([tid, lp]) => [tid, lp]) } : {}),
      })),
      timings: {
        prompt_tokens: result.promptTokens,
        prefill_ms: t.prefillMs,
        prompt_tokens_per_second: t.promptTokensPerSecond,
        generated_tokens: result.tokens.length,
        decode_steps: t.decodeSteps,
        decode_ms: t.decodeMs,
        tokens_per_second: t.tokensPerSecond,
      },
    };
    io.out(JSON.stringify(obj) + "\n");
    return;
  }
  io.out(result.text.slice(streamed) + "\n");
  io.err(
    `prompt: ${result.promptTokens} tokens in ${t.prefillMs.toFixed(1)} ms (${t.promptTokensPerSecond.toFixed(2)} tokens/s) | ` +
      `generated: ${result.tokens.length} tokens, ${t.decodeSteps} decode steps in ${t.decodeMs.toFixed(1)} ms (${t.tokensPerSecond.toFixed(2)} tokens/s) | ` +
      `finish: ${result.finishReason} | path ${path} | seed ${seed}\n`,
  );
}
