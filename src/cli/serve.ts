import type { Command } from "./command.js";
import { UsageError } from "../util/errors.js";
import { DEFAULT_PAGE_SIZE } from "../engine/paged-cache.js";
import { startServer } from "../server/server.js";
import { createLogger, parseLogLevel, type LogLevel, type ServerLogger } from "../server/access-log.js";
import { openLoadingGate, type LoadingGate } from "../server/loading-gate.js";
import { decideBackend } from "../runtime/backend-choice.js";
import { parseCorsOrigins } from "../server/cors.js";
import { REASONING_FORMATS, type ReasoningFormat } from "../server/chat-output.js";
import { DEFAULT_LIMITS, type ServerLimits } from "../server/limits.js";
import { existsSync } from "node:fs";
import { closeLoaded, loadModel, type BackendChoice, type LoadedModel } from "../runtime/load.js";
import type { GGUFFile } from "../gguf/file.js";
import type { ModelConfig } from "../model/config.js";
import type { FusedGpuModel } from "../backend/webgpu/index.js";
import type { CpuActivations } from "../backend/cpu/fast.js";
import type { GpuActivations } from "../backend/webgpu/index.js";
import { openFusedForCli, type FusedOpen } from "./fused.js";
import {
  ALLOW_NONFINITE_OPTION,
  type CliIO,
  CPU_ACTIVATIONS_OPTION,
  cpuActivationsOption,
  GPU_ACTIVATIONS_OPTION,
  gpuActivationsOption,
  GPU_MEMORY_OPTION,
  gpuMemoryOption,
  intOption,
  MAX_MEMORY_OPTION,
  maxMemoryOption,
  nonFiniteWarning,
  parseModelArgs,
  processIO,
} from "./common.js";
import { commandParser, repeatable, valuesByFlag, type Parser } from "./options.js";

function serveParser(): Parser {
  return commandParser(
    "serve",
    "MODEL.gguf [options]",
    'An OpenAI-compatible HTTP server (docs/server.md): POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize; GET /v1/models, /health, /metrics. Continuous batching over a paged latent KV cache with prefix caching. SIGTERM/SIGINT: stop taking requests, finish the running ones, exit. The port is taken before the model loads (a busy one fails at once); until the model is ready /health answers 503 {"status":"loading","progress":…} and the API 503.',
  )
    .option("--host <HOST>", "address to listen on (default 127.0.0.1)")
    .option("--port <N>", "port (default 8080; 0 = any free port, printed on stderr)")
    .option("--api-key <KEY>", 'require "Authorization: Bearer KEY" (also from LATENT_API_KEY)')
    .option(
      "--cors <ORIGINS>",
      "let browser pages from these origins call the server: '*' or a comma list such as http://localhost:3000,https://app.example (default: off, no CORS headers)",
    )
    .option(
      "--alias <NAME>",
      "model id clients send (default the file name without .gguf); repeat it, or give a comma list, for several ids: /v1/models lists them all, any of them is accepted",
      repeatable,
    )
    .option("--max-batch <N>", "most sequences running at once (default 16)")
    .option("--kv-cache-tokens <N>", "KV cache positions shared by all sequences (default 8192)")
    .option("--page-size <N>", `positions per KV page (default ${DEFAULT_PAGE_SIZE})`)
    .option("--ctx-size <N>", "context length per sequence (default the model's)")
    .option("--prefill-chunk <N>", "most prompt tokens one sequence prefills per step (default 128)")
    .option("--token-budget <N>", "most tokens per forward pass (default 256)")
    .option("--max-queue <N>", "most waiting sequences before 429 with Retry-After (default 256)")
    .option(
      "--chain-steps <N>",
      "most greedy decode steps chained on the GPU between host round trips (fused webgpu pipeline; only while every running request is greedy without top logprobs and none waits; default 8, 0 = off)",
    )
    .option(
      "--max-connections <N>",
      `open connections; past it a new one gets 503 and is closed (default ${DEFAULT_LIMITS.maxConnections})`,
    )
    .option(
      "--max-body-bytes <N>",
      `one request body (413 beyond, answered once the body is read; default ${DEFAULT_LIMITS.maxBodyBytes})`,
    )
    .option(
      "--max-inflight-body-bytes <N>",
      `request bodies being received, all together (503 beyond; default ${DEFAULT_LIMITS.maxBufferedBodyBytes})`,
    )
    .option(
      "--headers-timeout <S>",
      `seconds for a request's headers to arrive (default ${DEFAULT_LIMITS.headersTimeoutMs / 1000})`,
    )
    .option(
      "--body-timeout <S>",
      `seconds for a request's body to arrive (408 beyond; default ${DEFAULT_LIMITS.bodyTimeoutMs / 1000})`,
    )
    .option(
      "--request-timeout <S>",
      `seconds a generation request may take, queue included (504 beyond; default ${DEFAULT_LIMITS.requestTimeoutMs / 1000}, 0 = none)`,
    )
    .option(
      "--drain-timeout <S>",
      `on SIGTERM, seconds to let running requests finish before cancelling them (default ${DEFAULT_LIMITS.drainTimeoutMs / 1000})`,
    )
    .option(
      "--max-stream-buffer <N>",
      `bytes a streaming client may leave unread before it is dropped (default ${DEFAULT_LIMITS.maxStreamBufferBytes})`,
    )
    .option(
      "--stream-stall-timeout <S>",
      `seconds a streaming client may read nothing while the server holds its output (its sequences paused, keeping their KV pages) before it is dropped (default ${DEFAULT_LIMITS.streamStallTimeoutMs / 1000}, 0 = never)`,
    )
    .option(
      "--default-max-tokens <N>",
      `chat max_tokens when the request sets none (default ${DEFAULT_LIMITS.defaultChatMaxTokens}; never past the context)`,
    )
    .option(
      "--retry-after <S>",
      `Retry-After seconds sent with 429 and 503 (default ${DEFAULT_LIMITS.retryAfterSeconds})`,
    )
    .option("--no-prefix-cache", "do not share KV pages between equal prompt prefixes")
    .option(
      "--reasoning-format <F>",
      "chat answers of thinking models: deepseek (default: <think> reasoning in reasoning_content, the answer in content) or none (the raw text, tags included, in content)",
    )
    .option(
      "--log-format <F>",
      "text (default: one line per event and per request) or json (JSON lines: level, time, msg and the request's fields)",
    )
    .option(
      "--log-level <L>",
      "debug, info (default), warn, error or silent; each request is logged at info (5xx at error; /health and /metrics polls at debug)",
    )
    .option("--quiet", "only warnings and errors (--log-level warn)")
    .option("--log-steps", "log every forward pass (sequences, tokens, decoding, ms) and every chain of greedy steps")
    .option(
      "--backend <B>",
      "cpu (WebAssembly SIMD kernels on worker threads), reference (plain JS kernels), webgpu (needs the optional package: npm install webgpu) or auto (default: webgpu on a hardware GPU adapter, else cpu; startup says which and why). On a GPU a deepseek2/glm-dsa model runs the fused pipeline (every layer of a step in one replayed pass, the KV pages mirrored on the GPU, prefix caching included; --ctx-size default 4096)",
    )
    .option("--threads <N>", "threads of the cpu backend (default: all cores)")
    .option(...CPU_ACTIVATIONS_OPTION)
    .option(...GPU_ACTIVATIONS_OPTION)
    .option(...GPU_MEMORY_OPTION)
    .option(...MAX_MEMORY_OPTION)
    .option(...ALLOW_NONFINITE_OPTION);
}

type ValuedFlag =
  | "host"
  | "port"
  | "api-key"
  | "cors"
  | "max-batch"
  | "kv-cache-tokens"
  | "page-size"
  | "ctx-size"
  | "prefill-chunk"
  | "token-budget"
  | "max-queue"
  | "chain-steps"
  | LimitFlag
  | "reasoning-format"
  | "log-format"
  | "log-level"
  | "backend"
  | "threads"
  | "cpu-activations"
  | "gpu-activations"
  | "gpu-memory"
  | "max-memory";
/** The values of serve's options, by flag name as typed (the names the checks below and their messages use). */
type ServeFlags = Partial<Record<ValuedFlag, string>> & {
  alias?: string[];
  "no-prefix-cache"?: boolean;
  quiet?: boolean;
  "log-steps"?: boolean;
  "allow-nonfinite"?: boolean;
};

export const serveCommand: Command = {
  name: "serve",
  summary: "OpenAI-compatible HTTP server with continuous batching and a paged KV cache",
  run: (argv) => serveMain(argv, processIO),
};

export async function serveMain(argv: string[], io: CliIO): Promise<void> {
  const parser = serveParser();
  const parsed = parseModelArgs<unknown>(argv, parser, io);
  if (parsed === undefined) return;
  const modelPath = parsed.model;
  const values = valuesByFlag(parser) as ServeFlags;
  const backend = values.backend ?? "auto";
  if (backend !== "cpu" && backend !== "auto" && backend !== "reference" && backend !== "webgpu")
    throw new UsageError(`--backend must be cpu, reference, webgpu or auto, got "${backend}"`);
  const threads = intOption("threads", values.threads, 1);
  const cpuActivations = cpuActivationsOption(values["cpu-activations"]);
  const gpuMemory = gpuMemoryOption(values["gpu-memory"], backend);
  const gpuActivations = gpuActivationsOption(values["gpu-activations"], backend);
  const maxMemory = maxMemoryOption(values["max-memory"]);
  if (maxMemory !== undefined && backend === "webgpu")
    throw new UsageError("--max-memory (experts streamed from disk) needs the cpu or reference backend");
  const port = intOption("port", values.port, 0) ?? 8080;
  if (port > 65535) throw new UsageError(`--port must be at most 65535, got ${port}`);
  const apiKey = values["api-key"] ?? process.env["LATENT_API_KEY"];
  const path = modelPath;
  const limits = limitOptions(values);
  const cors = values.cors !== undefined ? parseCorsOrigins(values.cors) : undefined; // a bad list fails before the model loads
  const reasoningFormat = values["reasoning-format"] ?? "deepseek";
  if (!(REASONING_FORMATS as readonly string[]).includes(reasoningFormat))
    throw new UsageError(`--reasoning-format must be ${REASONING_FORMATS.join(" or ")}, got "${reasoningFormat}"`);
  const aliases = aliasOption(values.alias);
  const logger = loggerOption(values, io);
  // with JSON lines, what the loaders print (fallback notes, non-finite weights) becomes log lines too, and no bars
  const loadIO: CliIO =
    values["log-format"] === "json"
      ? {
          out: io.out,
          err: (text) =>
            text
              .split("\n")
              .filter((l) => l.trim() !== "")
              .forEach((l) => logger.event("warn", l)),
          tty: false,
        }
      : io;
  if (!existsSync(path)) throw new UsageError(`model file not found: ${path}`);
  const maxBatch = intOption("max-batch", values["max-batch"], 1);
  const ctxSize = intOption("ctx-size", values["ctx-size"], 1);
  const prefillChunk = intOption("prefill-chunk", values["prefill-chunk"], 1);
  const kvTokensArg = intOption("kv-cache-tokens", values["kv-cache-tokens"], 1);
  const pageSize = intOption("page-size", values["page-size"], 1) ?? DEFAULT_PAGE_SIZE;
  const tokenBudget = intOption("token-budget", values["token-budget"], 1);
  const maxQueue = intOption("max-queue", values["max-queue"], 0);
  const chainSteps = intOption("chain-steps", values["chain-steps"], 0);
  const host = values.host ?? "127.0.0.1";
  // the port first: a busy one fails now, not after the load; meanwhile /health says "loading"
  const gate = await openLoadingGate({
    host,
    port,
    retryAfterSeconds: limits.retryAfterSeconds ?? DEFAULT_LIMITS.retryAfterSeconds,
    ...(cors !== undefined ? { cors } : {}),
  });
  logger.event("info", `latent serve: loading ${path}; port ${gate.port} answers 503 until the model is ready`);
  let served: ServedLoad;
  try {
    served = loadForServe(
      path,
      backend,
      {
        maxBatch,
        ctxSize,
        prefillChunk,
        kvTokensArg,
        pageSize,
        threads,
        cpuActivations,
        gpuActivations,
        maxMemory,
        allowNonFinite: values["allow-nonfinite"] === true,
        gpuMemory,
      },
      gate,
      logger,
      loadIO,
    );
  } catch (e) {
    await gate.close();
    throw e;
  }
  const { loaded, fused } = served;
  await gate.close();
  const opt = <K extends string>(k: K, v: number | undefined): Partial<Record<K, number>> =>
    v === undefined ? {} : ({ [k]: v } as Record<K, number>);
  const server = await startServer({
    loaded,
    modelPath: path,
    ...(aliases.length > 0 ? { modelId: aliases[0], aliases: aliases.slice(1) } : {}),
    host,
    port: gate.port,
    ...(apiKey !== undefined && apiKey !== "" ? { apiKey } : {}),
    ...(values.cors !== undefined ? { cors: values.cors } : {}),
    ...opt("maxBatch", maxBatch),
    ...opt("kvCacheTokens", fused !== undefined ? fused.kvTokens : kvTokensArg),
    pageSize,
    ...opt("contextLength", fused !== undefined ? fused.config.contextLength : ctxSize),
    ...opt("prefillChunk", prefillChunk),
    ...opt("tokenBudget", tokenBudget),
    ...opt("maxQueue", maxQueue),
    ...opt("chainSteps", chainSteps),
    ...limits,
    prefixCaching: values["no-prefix-cache"] !== true,
    logSteps: values["log-steps"] === true,
    reasoningFormat: reasoningFormat as ReasoningFormat,
    logger,
  });
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) {
        logger.event("warn", `${signal} again: exiting now`);
        process.exit(1);
      }
      stopping = true;
      const s = server.stats();
      logger.event("info", `${signal}: draining (${s.running} running, ${s.waiting} waiting)`);
      void server.close().then(() => {
        if (fused !== undefined) void fused.model.close();
        else closeLoaded(loaded as LoadedModel);
        logger.event("info", "latent serve: stopped");
        resolve();
      });
    };
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));
  });
}

// ---- logging and model-id options (--log-format, --log-level, --quiet, --alias) ----

function loggerOption(
  values: { readonly "log-format"?: string; readonly "log-level"?: string; readonly quiet?: boolean },
  io: CliIO,
): ServerLogger {
  const format = values["log-format"] ?? "text";
  if (format !== "text" && format !== "json")
    throw new UsageError(`--log-format must be text or json, got "${format}"`);
  let level: LogLevel = "info";
  if (values["log-level"] !== undefined) {
    const parsedLevel = parseLogLevel(values["log-level"]);
    if (parsedLevel === undefined)
      throw new UsageError(`--log-level must be debug, info, warn, error or silent, got "${values["log-level"]}"`);
    if (values.quiet === true) throw new UsageError("--quiet and --log-level cannot be given together");
    level = parsedLevel;
  } else if (values.quiet === true) level = "warn";
  return createLogger({ format, level, write: io.err });
}

/** --alias, repeated or as comma lists: the ids in order, without blanks or repeats. */
function aliasOption(values: readonly string[] | undefined): string[] {
  const ids = (values ?? []).flatMap((v) => v.split(",")).map((v) => v.trim());
  if (ids.some((id) => id === "")) throw new UsageError("--alias needs a model id (an empty one was given)");
  return [...new Set(ids)];
}

// ---- loading the model for the server ----

interface FusedLoad {
  readonly file: GGUFFile;
  readonly config: ModelConfig;
  readonly model: FusedGpuModel;
  readonly kvTokens: number;
}

interface ServedLoad {
  readonly loaded: LoadedModel | FusedLoad;
  readonly fused: FusedLoad | undefined;
}

interface LoadSizes {
  readonly maxBatch: number | undefined;
  readonly ctxSize: number | undefined;
  readonly prefillChunk: number | undefined;
  readonly kvTokensArg: number | undefined;
  readonly pageSize: number;
  readonly threads: number | undefined;
  /** --cpu-activations */
  readonly cpuActivations: CpuActivations | undefined;
  /** --gpu-activations */
  readonly gpuActivations: GpuActivations | undefined;
  /** --max-memory in bytes */
  readonly maxMemory: number | undefined;
  readonly allowNonFinite: boolean;
  readonly gpuMemory: number | undefined;
}

/** Decide the backend (said in the log), load the model with the gate's /health progress, log how long it took. */
function loadForServe(
  path: string,
  backend: BackendChoice,
  o: LoadSizes,
  gate: LoadingGate,
  logger: ServerLogger,
  io: CliIO,
): ServedLoad {
  const t0 = performance.now();
  // streamed experts run on the CPU kernels: with --max-memory, auto does not look for a GPU
  const decision =
    o.maxMemory !== undefined && backend === "auto"
      ? { backend: "cpu" as const, reason: "cpu: --max-memory streams experts on the cpu backend" }
      : decideBackend(backend);
  logger.event("info", `backend ${decision.reason}`);
  const gpu =
    decision.backend === "webgpu"
      ? openFused(
          path,
          backend === "auto" ? "auto" : "webgpu",
          {
            slots: o.maxBatch ?? 16,
            ctxSize: o.ctxSize,
            prefillChunk: o.prefillChunk ?? 128,
            kvTokens: o.kvTokensArg,
            pageSize: o.pageSize,
            allowNonFinite: o.allowNonFinite,
            gpuMemory: o.gpuMemory,
            gpuActivations: o.gpuActivations,
          },
          io,
          (f) => gate.setProgress(f),
        )
      : undefined;
  const open = gpu?.open;
  const fused =
    open?.fused !== undefined
      ? { file: open.file, config: open.config, model: open.fused, kvTokens: gpu!.kvTokens }
      : undefined;
  const loadWith = open !== undefined && open.fused === undefined ? open.backend : decision.backend;
  const loaded =
    fused ??
    loadModel(path, (done, total) => gate.setProgress(total > 0 ? done / total : 0), {
      backend: loadWith,
      ...(o.threads !== undefined ? { threads: o.threads } : {}),
      ...(o.cpuActivations !== undefined ? { cpuActivations: o.cpuActivations } : {}),
      ...(o.gpuActivations !== undefined ? { gpuActivations: o.gpuActivations } : {}),
      ...(o.maxMemory !== undefined ? { maxMemory: o.maxMemory } : {}),
      ...(o.allowNonFinite ? { onNonFinite: nonFiniteWarning(io) } : {}),
      onNote: (line) => logger.event("info", line),
    });
  gate.setProgress(1);
  const warmed = fused?.model.warmStats;
  const engine =
    fused !== undefined
      ? `fused WebGPU pipeline on ${fused.model.adapter}${fused.model.activations === "q8" ? ", 8-bit activations (--gpu-activations q8)" : fused.model.activations === "int15" ? ", 15-bit activations in the row-tiled products (--gpu-activations int15)" : ""}; ${warmed!.kernels} GPU kernels compiled in ${(warmed!.compileMs / 1000).toFixed(1)} s`
      : `kernels: ${(loaded as LoadedModel).model.kernels.name}`;
  logger.event("info", `loaded ${path} in ${((performance.now() - t0) / 1000).toFixed(1)} s (${engine})`);
  return { loaded, fused };
}

type LimitFlag =
  | "max-connections"
  | "max-body-bytes"
  | "max-inflight-body-bytes"
  | "headers-timeout"
  | "body-timeout"
  | "request-timeout"
  | "drain-timeout"
  | "max-stream-buffer"
  | "stream-stall-timeout"
  | "default-max-tokens"
  | "retry-after";

/** The limit flags as startServer options (checked before the model loads; times in seconds become ms). */
function limitOptions(values: Partial<Record<LimitFlag, string>>): Partial<ServerLimits> {
  const out: { -readonly [K in keyof ServerLimits]?: number } = {};
  const set = (key: keyof ServerLimits, flag: LimitFlag, min: number, scale = 1): void => {
    const v = intOption(flag, values[flag], min);
    if (v !== undefined) out[key] = v * scale;
  };
  set("maxConnections", "max-connections", 1);
  set("maxBodyBytes", "max-body-bytes", 1);
  set("maxBufferedBodyBytes", "max-inflight-body-bytes", 1);
  set("headersTimeoutMs", "headers-timeout", 1, 1000);
  set("bodyTimeoutMs", "body-timeout", 1, 1000);
  set("requestTimeoutMs", "request-timeout", 0, 1000);
  set("drainTimeoutMs", "drain-timeout", 0, 1000);
  set("maxStreamBufferBytes", "max-stream-buffer", 1);
  set("streamStallTimeoutMs", "stream-stall-timeout", 0, 1000);
  set("defaultChatMaxTokens", "default-max-tokens", 1);
  set("retryAfterSeconds", "retry-after", 0);
  return out;
}

/** GPU cache positions per sequence of the fused pipeline without --ctx-size (the model's own may be 160k). */
const FUSED_DEFAULT_CTX = 4096;

/** The fused pipeline for `serve`: GPU caches that mirror the server's page pool (same page size and count). */
interface FusedServeOptions {
  readonly slots: number;
  readonly ctxSize: number | undefined;
  readonly prefillChunk: number;
  readonly kvTokens: number | undefined;
  readonly pageSize: number;
  readonly allowNonFinite: boolean;
  readonly gpuMemory: number | undefined;
  readonly gpuActivations: GpuActivations | undefined;
}

function openFused(
  path: string,
  backend: "webgpu" | "auto",
  o: FusedServeOptions,
  io: CliIO,
  onLoaded: (fraction: number) => void,
): { open: FusedOpen; kvTokens: number } {
  let kvTokens = 0;
  const open = openFusedForCli(
    path,
    backend,
    io,
    (config) => {
      const context = Math.min(config.contextLength, o.ctxSize ?? FUSED_DEFAULT_CTX);
      // the server's default pool size, computed alike
      kvTokens = o.kvTokens ?? Math.min(8192, o.slots * context);
      const maxTokens = Math.max(o.prefillChunk, o.slots);
      // every step the server can take: decode batches of 1..slots sequences (greedy ones chained on the GPU) and prompt
      // chunks of 1..prefillChunk tokens, so that no request waits for the compiler (new batch sizes come and go)
      const warm = {
        decode: o.slots,
        greedy: true,
        draws: true,
        prefill: Array.from({ length: o.prefillChunk }, (_, i) => i + 1),
      };
      return {
        slots: o.slots,
        context,
        maxTokens,
        warm,
        pages: { pageSize: o.pageSize, numPages: Math.ceil(kvTokens / o.pageSize) },
        allowNonFinite: o.allowNonFinite,
        ...(o.gpuMemory !== undefined ? { gpuMemory: o.gpuMemory } : {}),
        ...(o.gpuActivations !== undefined ? { activations: o.gpuActivations } : {}),
      };
    },
    onLoaded,
  );
  return { open, kvTokens };
}
