import type { Command } from "./command.js";
import { ModelConfigError, UsageError } from "../util/errors.js";
import { closeLoaded } from "../runtime/load.js";
import { ALLOW_NONFINITE_HELP, BACKEND_HELP, backendOption, intOption, loadForCli, parseModelCommand, positionsBar, processIO, type CliIO } from "./common.js";

export { backendOption, BACKEND_HELP, glueValues, intOption, loadForCli, positionsBar, processIO, valuedOptions, type CliIO } from "./common.js";
import { Tokenizer, type ChatMessage } from "../tokenizer/index.js";
import { generate, type DecodeMode, type GenerateModel, type GeneratePath } from "../engine/generate.js";
import type { BackendChoice } from "../runtime/load.js";
import { openFusedForCli } from "./fused.js";
import type { GpuHostStats, WarmStats } from "../backend/webgpu/index.js";
import { Sampler } from "../engine/sampler.js";
import { DEFAULT_PREFILL_CHUNK } from "../engine/evaluate.js";

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
  --logprobs N           with --json: top-N alternatives per token (default 0). Greedy (--temp 0) on the
                         fused GPU pipeline chains the decode steps on the GPU and reads back only the
                         chosen ids and their logprobs (computed on the GPU); so does sampling with a
                         --top-k of 0 or 1..64 and any --top-p and --min-p (the defaults too), each token
                         drawn on the GPU; the top-N alternatives need every step's logits: --logprobs ≥ 1
                         samples on the host
  --json                 print one JSON object at the end instead of streaming
${ALLOW_NONFINITE_HELP}`;

export const runCommand: Command = {
  name: "run",
  summary: "generate text from a prompt (streams to stdout)",
  run: (argv) => runMain(argv, processIO),
};

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
  "allow-nonfinite": { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

export async function runMain(argv: string[], io: CliIO): Promise<void> {
  const parsed = parseModelCommand(argv, RUN_OPTIONS, HELP, io);
  if (parsed === undefined) return;
  const { values, model: modelPath } = parsed;
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

  const t0 = performance.now();
  // (the fused pipeline compiles the kernels of GPU draws ahead where this sampler may draw there)
  const sampler = new Sampler(sampling);
  const runner = openRunner(modelPath, io, backend, threads, path, values, nPredict, chunk, sampler.drawsOnDevice(true));
  // opening the model: reading its file, and on the fused GPU pipeline starting the device and uploading the weights
  const loadMs = performance.now() - t0;
  const { tokenizer, prompt, model } = runner;
  const outside = prompt.find((t) => t >= model.config.nVocab);
  if (outside !== undefined) {
    // the file's tokenizer and its output matrix disagree: a bad file, not a bad prompt
    runner.close();
    throw new ModelConfigError(`the tokenizer gave id ${outside}, outside the model's ${model.config.nVocab} logits (tokenizer.ggml.tokens is longer than the vocabulary)`);
  }

  const bar = json ? undefined : positionsBar(io, "prompt");
  let host: GpuHostStats | undefined;
  let streamed = 0;
  const result = await generate(model, tokenizer, prompt, {
    sampler,
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
        logprob: Number.isNaN(result.logprobs[i]!) ? null : result.logprobs[i]!,
        ...(result.top !== undefined ? { top: result.top[i]!.map(([tid, lp]) => [tid, lp]) } : {}),
      })),
      timings: {
        load_ms: loadMs,
        ...(runner.warm !== undefined ? { gpu_kernels_compiled: runner.warm.kernels, compile_ms: runner.warm.compileMs } : {}),
        ...(host !== undefined ? { gpu_steps: host.steps, gpu_dispatches: host.dispatches, gpu_host_encode_ms: host.encodeMs, gpu_host_submit_ms: host.submitMs } : {}),
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
    `loaded in ${loadMs.toFixed(1)} ms${runner.warm !== undefined ? ` (${runner.warm.kernels} GPU kernels compiled in ${runner.warm.compileMs.toFixed(1)} ms)` : ""} | prompt: ${result.promptTokens} tokens in ${t.prefillMs.toFixed(1)} ms (${t.promptTokensPerSecond.toFixed(2)} tokens/s) | ` +
      `generated: ${result.tokens.length} tokens, ${t.decodeSteps} decode steps in ${t.decodeMs.toFixed(1)} ms (${t.tokensPerSecond.toFixed(2)} tokens/s) | ` +
      `finish: ${result.finishReason} | path ${path} | backend ${runner.backend} | decode ${decode} | seed ${seed}\n`,
  );
}

/**
 * The run report's name for how tokens were chosen: "gpu-greedy-chained" (greedy steps chained on the GPU by the fused
 * pipeline, only the chosen ids and their logprobs read back), "gpu-draws-chained" (the same with each token drawn on
 * the GPU at the sampler's temperature, top-k, top-p and min-p) or "host-sampling" (every step's logits sampled on the
 * host).
 */
function decodeName(mode: DecodeMode): "gpu-greedy-chained" | "gpu-draws-chained" | "host-sampling" {
  return mode === "greedy-chained" ? "gpu-greedy-chained" : mode === "draws-chained" ? "gpu-draws-chained" : "host-sampling";
}

interface Runner {
  readonly tokenizer: Tokenizer;
  readonly prompt: number[];
  readonly model: GenerateModel;
  /** what runs the model: "fused-webgpu (ADAPTER)", or the kernels' name */
  readonly backend: string;
  /** the GPU kernels compiled while loading (fused pipeline) */
  readonly warm?: WarmStats;
  /** the fused pipeline's steps and the host time spent encoding and submitting them, so far */
  hostStats?(): GpuHostStats;
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
function openRunner(modelPath: string, io: CliIO, requested: BackendChoice, threads: number | undefined, path: string, values: { prompt?: string; chat?: boolean; system?: string; "allow-nonfinite"?: boolean }, nPredict: number, chunk: number | undefined, draws: boolean): Runner {
  let backend = requested;
  if ((backend === "webgpu" || backend === "auto") && path !== "reference") {
    let prompt: number[] = [];
    let tokenizer: Tokenizer | undefined;
    const open = openFusedForCli(modelPath, backend, io, (config, file) => {
      tokenizer = Tokenizer.fromMetadata(file.metadata);
      prompt = promptIds(tokenizer, values);
      const context = Math.min(config.contextLength, nPredict < 0 ? Math.max(FUSED_OPEN_CONTEXT, prompt.length + 1) : prompt.length + nPredict + 1);
      const maxTokens = chunk ?? DEFAULT_PREFILL_CHUNK;
      // the steps this run takes: its prompt's prefill chunks (or one token at a time), then one-token decode steps
      const prefill = path === "decode" || prompt.length === 0 ? [] : [...new Set([Math.min(prompt.length, maxTokens), prompt.length % maxTokens || maxTokens])];
      return { context, maxTokens, warm: { decode: 1, greedy: true, ...(draws ? { draws } : {}), prefill } };
    });
    if (open.fused !== undefined) {
      const f = open.fused;
      return { tokenizer: tokenizer!, prompt, model: f, backend: `fused-webgpu (${f.adapter})`, warm: f.warmStats, hostStats: () => f.hostStats(), close: () => void f.close() };
    }
    backend = open.backend;
  }
  const loaded = loadForCli(modelPath, io, backend, threads, values["allow-nonfinite"] === true);
  const tokenizer = Tokenizer.fromMetadata(loaded.file.metadata);
  return { tokenizer, prompt: promptIds(tokenizer, values), model: loaded.model, backend: loaded.model.kernels.name, close: () => closeLoaded(loaded) };
}
