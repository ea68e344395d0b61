import type { Command } from "./command.js";
import { ModelConfigError, UsageError } from "../util/errors.js";
import { closeLoaded } from "../runtime/load.js";
import {
  backendOption,
  backendOptions,
  cpuActivationsOption,
  gpuActivationsOption,
  GPU_MEMORY_OPTION,
  gpuMemoryOption,
  intOption,
  expertLine,
  loadForCli,
  maxMemoryOption,
  parseModelArgs,
  positionsBar,
  processIO,
  type BackendFlags,
  type CliIO,
} from "./common.js";
import { commandParser, repeatable, type Parser } from "./options.js";

export { backendOption, intOption, loadForCli, positionsBar, processIO, type CliIO } from "./common.js";
import { Tokenizer, type ChatMessage } from "../tokenizer/index.js";
import { generate, type DecodeMode, type GenerateModel, type GeneratePath } from "../engine/generate.js";
import type { BackendChoice } from "../runtime/load.js";
import type { CpuActivations } from "../backend/cpu/fast.js";
import type { GpuActivations } from "../backend/webgpu/index.js";
import { openFusedForCli } from "./fused.js";
import type { ExpertStore } from "../model/expert-store.js";
import type { GpuHostStats, WarmStats } from "../backend/webgpu/index.js";
import { Sampler } from "../engine/sampler.js";
import { DEFAULT_PREFILL_CHUNK } from "../engine/evaluate.js";

function numOption(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got "${v}"`);
  return n;
}

/** The options of `latent run`, as commander names them. */
interface RunFlags extends BackendFlags {
  prompt?: string;
  nPredict?: string;
  temp?: string;
  topK?: string;
  topP?: string;
  minP?: string;
  seed?: string;
  chat?: boolean;
  system?: string;
  stop?: string[];
  ignoreEos?: boolean;
  path?: string;
  chunk?: string;
  gpuMemory?: string;
  logprobs?: string;
  json?: boolean;
  echo: boolean;
}

/** Sampling options shared by `run` and `chat`. */
export function samplingOptions(parser: Parser): Parser {
  return parser
    .option("--temp <T>", "temperature, 0 = greedy (default 0.8)")
    .option("--top-k <K>", "0 = off (default 40)")
    .option("--top-p <P>", "1 = off (default 0.95)")
    .option("--min-p <M>", "0 = off (default 0.05)")
    .option("--seed <S>", "sampling seed (default random; printed with --json)");
}

function runParser(): Parser {
  const parser = commandParser(
    "run",
    'MODEL.gguf -p "text" [options]',
    "Generate text; it streams to stdout (after the prompt, unless --no-echo) as tokens arrive, timings go to stderr.",
  )
    .option(
      "-p, --prompt <TEXT>",
      "the prompt (special-token texts in it are recognised; BOS added per the model, never twice)",
    )
    .option("-n, --n-predict <N>", "most tokens to generate (default 128; -1 = until the context is full)");
  samplingOptions(parser)
    .option("--chat", "render the model's chat template around the prompt as a user message")
    .option("--system <TEXT>", "system message (with --chat)")
    .option("--stop <TEXT>", "stop when the text contains TEXT (repeatable)", repeatable)
    .option("--ignore-eos", "do not stop at end-of-generation tokens")
    .option("--no-echo", "do not print the prompt before the generated text")
    .option(
      "--path <prefill|decode|reference>",
      "prefill (default): prompt in chunks, then cached decode steps; reference recomputes the whole sequence for every token (slow, for checking)",
    )
    .option("--chunk <N>", `prefill chunk length (default ${DEFAULT_PREFILL_CHUNK})`);
  backendOptions(parser, "cpu")
    .option(...GPU_MEMORY_OPTION)
    .option(
      "--logprobs <N>",
      "with --json: top-N alternatives per token (default 0). Greedy (--temp 0) on the fused GPU pipeline chains the decode steps on the GPU and reads back only the chosen ids and their logprobs (computed on the GPU); so does sampling with a --top-k of 0 or 1..64 and any --top-p and --min-p (the defaults too), each token drawn on the GPU; the top-N alternatives need every step's logits: --logprobs ≥ 1 samples on the host",
    )
    .option("--json", "print one JSON object at the end instead of streaming");
  return parser;
}

/** The sampler settings of --temp, --top-k, --top-p, --min-p and --seed (a random seed when none is given). */
export function samplingFromFlags(values: {
  temp?: string;
  topK?: string;
  topP?: string;
  minP?: string;
  seed?: string;
}): { temperature: number; topK: number; topP: number; minP: number; seed: number } {
  const seedArg = values.seed;
  if (seedArg !== undefined && !/^\d+$/.test(seedArg))
    throw new UsageError(`--seed must be an integer ≥ 0, got "${seedArg}"`);
  const seed = seedArg !== undefined ? Number(seedArg) : Math.floor(Math.random() * 2 ** 32);
  if (!Number.isSafeInteger(seed)) throw new UsageError(`--seed must be a safe integer, got "${seedArg}"`);
  return {
    temperature: numOption("temp", values.temp) ?? 0.8,
    topK: intOption("top-k", values.topK, 0) ?? 40,
    topP: numOption("top-p", values.topP) ?? 0.95,
    minP: numOption("min-p", values.minP) ?? 0.05,
    seed,
  };
}

export const runCommand: Command = {
  name: "run",
  summary: "generate text from a prompt (streams to stdout)",
  run: (argv) => runMain(argv, processIO),
};

export async function runMain(argv: string[], io: CliIO): Promise<void> {
  const parsed = parseModelArgs<RunFlags>(argv, runParser(), io);
  if (parsed === undefined) return;
  const { values, model: modelPath } = parsed;
  if (values.prompt === undefined) throw new UsageError("-p/--prompt is required");
  const path = values.path ?? "prefill";
  if (path !== "prefill" && path !== "decode" && path !== "reference")
    throw new UsageError(`--path must be prefill, decode or reference, got "${path}"`);
  if (values.system !== undefined && values.chat !== true) throw new UsageError("--system needs --chat");
  const nArg = values.nPredict;
  if (nArg !== undefined && nArg !== "-1" && !/^\d+$/.test(nArg.trim()))
    throw new UsageError(`--n-predict must be an integer ≥ 0 (or -1), got "${nArg}"`);
  const nPredict = nArg === undefined ? 128 : Number(nArg);
  const chunk = intOption("chunk", values.chunk, 1);
  const sampling = { ...samplingFromFlags(values), logprobs: intOption("logprobs", values.logprobs, 0) ?? 0 };
  const seed = sampling.seed;
  const json = values.json === true;
  const backend = backendOption(values.backend, "cpu");
  const threads = intOption("threads", values.threads, 1);
  const cpuActivations = cpuActivationsOption(values.cpuActivations);
  const gpuActivations = gpuActivationsOption(values.gpuActivations, backend);
  const gpuMemory = gpuMemoryOption(values.gpuMemory, backend);
  const maxMemory = maxMemoryOption(values.maxMemory);

  const t0 = performance.now();
  // (the fused pipeline compiles the kernels of GPU draws ahead where this sampler may draw there)
  const sampler = new Sampler(sampling);
  const runner = openRunner(
    modelPath,
    io,
    backend,
    { threads, activations: cpuActivations },
    gpuActivations,
    maxMemory,
    path,
    values,
    nPredict,
    chunk,
    sampler.drawsOnDevice(true),
    gpuMemory,
  );
  // opening the model: reading its file, and on the fused GPU pipeline starting the device and uploading the weights
  const loadMs = performance.now() - t0;
  const { tokenizer, prompt, model } = runner;
  const outside = prompt.find((t) => t >= model.config.nVocab);
  if (outside !== undefined) {
    // the file's tokenizer and its output matrix disagree: a bad file, not a bad prompt
    runner.close();
    throw new ModelConfigError(
      `the tokenizer gave id ${outside}, outside the model's ${model.config.nVocab} logits (tokenizer.ggml.tokens is longer than the vocabulary)`,
    );
  }

  const bar = json ? undefined : positionsBar(io, "prompt");
  let host: GpuHostStats | undefined;
  let streamed = 0;
  // the prompt as given, printed once: when the first token arrives (the prefill bar on stderr is gone by then), or at
  // the end when nothing was generated
  let echoed = json || !values.echo;
  const echo = (): void => {
    if (!echoed) io.out(values.prompt!);
    echoed = true;
  };
  const result = await generate(model, tokenizer, prompt, {
    sampler,
    maxTokens: nPredict < 0 ? Infinity : nPredict,
    path: path as GeneratePath,
    ...(chunk !== undefined ? { chunk } : {}),
    stop: values.stop ?? [],
    ignoreEog: values.ignoreEos === true,
    onPrefill: (done, total) => bar?.update(done, total),
    onToken: (ev) => {
      if (ev.index === 0) {
        bar?.stop();
        echo();
      }
      if (json || ev.text === "") return;
      io.out(ev.text);
      streamed += ev.text.length;
    },
  }).finally(() => {
    // (the fused pipeline's counts before its worker closes)
    host = runner.hostStats?.();
    runner.close();
  });
  bar?.stop();
  const t = result.timings;
  const decode = decodeName(result.decode);
  if (json) {
    const obj = {
      format: "latent-run/1",
      model: modelPath,
      path,
      backend: runner.backend,
      decode,
      seed,
      prompt_tokens: prompt,
      tokens: result.tokens,
      text: result.text,
      finish_reason: result.finishReason,
      ...(result.stoppedBy !== undefined ? { stopped_by: result.stoppedBy } : {}),
      logprobs: result.tokens.map((id, i) => ({
        id,
        token: tokenizer.decode([id]),
        // null: not a number (JSON has none; generation refuses a step whose logits hold NaN, so this is a safeguard)
        logprob: Number.isNaN(result.logprobs[i]) ? null : result.logprobs[i],
        ...(result.top !== undefined ? { top: result.top[i].map(([tid, lp]) => [tid, lp]) } : {}),
      })),
      timings: {
        load_ms: loadMs,
        ...(runner.warm !== undefined
          ? { gpu_kernels_compiled: runner.warm.kernels, compile_ms: runner.warm.compileMs }
          : {}),
        ...(host !== undefined
          ? {
              gpu_steps: host.steps,
              gpu_dispatches: host.dispatches,
              gpu_host_encode_ms: host.encodeMs,
              gpu_host_submit_ms: host.submitMs,
              ...(host.expertCache !== undefined
                ? {
                    gpu_expert_lookups: host.expertCache.lookups,
                    gpu_expert_hits: host.expertCache.hits,
                    gpu_expert_uploads: host.expertCache.uploads,
                    gpu_expert_uploaded_bytes: host.expertCache.uploadedBytes,
                  }
                : {}),
            }
          : {}),
        prompt_tokens: result.promptTokens,
        prefill_ms: t.prefillMs,
        prompt_tokens_per_second: t.promptTokensPerSecond,
        generated_tokens: result.tokens.length,
        decode_steps: t.decodeSteps,
        decode_ms: t.decodeMs,
        tokens_per_second: t.tokensPerSecond,
      },
      ...(runner.experts !== undefined
        ? { expert_cache: { capacity: runner.experts.capacity, ...runner.experts.stats } }
        : {}),
    };
    io.out(JSON.stringify(obj) + "\n");
    return;
  }
  echo();
  io.out(result.text.slice(streamed) + "\n");
  io.err(
    `loaded in ${loadMs.toFixed(1)} ms${runner.warm !== undefined ? ` (${runner.warm.kernels} GPU kernels compiled in ${runner.warm.compileMs.toFixed(1)} ms)` : ""} | prompt: ${result.promptTokens} tokens in ${t.prefillMs.toFixed(1)} ms (${t.promptTokensPerSecond.toFixed(2)} tokens/s) | ` +
      `generated: ${result.tokens.length} tokens, ${t.decodeSteps} decode steps in ${t.decodeMs.toFixed(1)} ms (${t.tokensPerSecond.toFixed(2)} tokens/s) | ` +
      `finish: ${result.finishReason} | path ${path} | backend ${runner.backend} | decode ${decode} | seed ${seed}${expertLine(runner.experts)}\n`,
  );
}

/**
 * The run report's name for how tokens were chosen: "gpu-greedy-chained" (greedy steps chained on the GPU by the fused
 * pipeline, only the chosen ids and their logprobs read back), "gpu-draws-chained" (the same with each token drawn on
 * the GPU at the sampler's temperature, top-k, top-p and min-p) or "host-sampling" (every step's logits sampled on the
 * host).
 */
function decodeName(mode: DecodeMode): "gpu-greedy-chained" | "gpu-draws-chained" | "host-sampling" {
  return mode === "greedy-chained"
    ? "gpu-greedy-chained"
    : mode === "draws-chained"
      ? "gpu-draws-chained"
      : "host-sampling";
}

interface Runner {
  readonly tokenizer: Tokenizer;
  readonly prompt: number[];
  readonly model: GenerateModel;
  /** what runs the model: "fused-webgpu (ADAPTER)" ("fused-webgpu q8 (ADAPTER)" with --gpu-activations q8, "… int15 …" with int15), or the kernels' name */
  readonly backend: string;
  /** the GPU kernels compiled while loading (fused pipeline) */
  readonly warm?: WarmStats;
  /** the fused pipeline's steps and the host time spent encoding and submitting them, so far */
  hostStats?(): GpuHostStats;
  /** the routed experts' cache, when they are streamed from disk */
  readonly experts?: ExpertStore;
  close(): void;
}

function promptIds(tokenizer: Tokenizer, values: { prompt?: string; chat?: boolean; system?: string }): number[] {
  if (values.chat !== true) return tokenizer.encodePrompt(values.prompt!);
  const messages: ChatMessage[] = [];
  if (values.system !== undefined) messages.push({ role: "system", content: values.system });
  messages.push({ role: "user", content: values.prompt! });
  return tokenizer.encodeChat(messages); // no BOS added when the rendered text starts with it
}

/** Positions the fused pipeline's GPU cache gets when generation may run until the context is full. */
const FUSED_OPEN_CONTEXT = 32768;

/**
 * The model to generate with. `--backend webgpu|auto` on the cached paths of a deepseek2/glm-dsa model takes the fused GPU
 * pipeline (every layer of a step in one replayed pass: FusedGpuModel); otherwise — and for auto without a hardware
 * adapter — the model is loaded with the backend's matrix kernels.
 */
function openRunner(
  modelPath: string,
  io: CliIO,
  requested: BackendChoice,
  cpu: { threads: number | undefined; activations: CpuActivations | undefined },
  gpuActivations: GpuActivations | undefined,
  maxMemory: number | undefined,
  path: string,
  values: { prompt?: string; chat?: boolean; system?: string; allowNonfinite?: boolean },
  nPredict: number,
  chunk: number | undefined,
  draws: boolean,
  gpuMemory: number | undefined,
): Runner {
  // (with --max-memory, auto means the cpu backend: streamed experts are for the CPU kernels only)
  let backend = requested === "auto" && maxMemory !== undefined ? "cpu" : requested;
  if ((backend === "webgpu" || backend === "auto") && path !== "reference" && maxMemory === undefined) {
    let prompt: number[] = [];
    let tokenizer: Tokenizer | undefined;
    const open = openFusedForCli(modelPath, backend, io, (config, file) => {
      tokenizer = Tokenizer.fromMetadata(file.metadata);
      prompt = promptIds(tokenizer, values);
      const context = Math.min(
        config.contextLength,
        nPredict < 0 ? Math.max(FUSED_OPEN_CONTEXT, prompt.length + 1) : prompt.length + nPredict + 1,
      );
      const maxTokens = chunk ?? DEFAULT_PREFILL_CHUNK;
      // the steps this run takes: its prompt's prefill chunks (or one token at a time), then one-token decode steps
      const prefill =
        path === "decode" || prompt.length === 0
          ? []
          : [...new Set([Math.min(prompt.length, maxTokens), prompt.length % maxTokens || maxTokens])];
      return {
        context,
        maxTokens,
        warm: { decode: 1, greedy: true, ...(draws ? { draws } : {}), prefill },
        allowNonFinite: values.allowNonfinite === true,
        ...(gpuMemory !== undefined ? { gpuMemory } : {}),
        ...(gpuActivations !== undefined ? { activations: gpuActivations } : {}),
      };
    });
    if (open.fused !== undefined) {
      const f = open.fused;
      return {
        tokenizer: tokenizer!,
        prompt,
        model: f,
        backend: `fused-webgpu${f.activations !== "exact" ? ` ${f.activations}` : ""} (${f.adapter})`,
        warm: f.warmStats,
        hostStats: () => f.hostStats(),
        close: () => void f.close(),
      };
    }
    backend = open.backend;
  }
  if (gpuMemory !== undefined)
    io.err("--gpu-memory applies to the fused GPU pipeline only; this run loads all its weights\n");
  const loaded = loadForCli(
    modelPath,
    io,
    backend,
    cpu.threads,
    values.allowNonfinite === true,
    maxMemory,
    cpu.activations,
    gpuActivations,
  );
  const tokenizer = Tokenizer.fromMetadata(loaded.file.metadata);
  return {
    tokenizer,
    prompt: promptIds(tokenizer, values),
    model: loaded.model,
    backend: loaded.model.kernels.name,
    ...(loaded.experts === undefined ? {} : { experts: loaded.experts }),
    close: () => closeLoaded(loaded),
  };
}
