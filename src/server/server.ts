import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { shownName } from "../util/printable.js";
import type { AddressInfo } from "node:net";
import { basename } from "node:path";
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import { loadModel } from "../runtime/load.js";
import type { GGUFFile } from "../gguf/file.js";
import type { ModelConfig } from "../model/config.js";
import { Tokenizer, type ChatMessage } from "../tokenizer/index.js";
import { PagePool, DEFAULT_PAGE_SIZE } from "../engine/paged-cache.js";
import {
  DEFAULT_MAX_QUEUE,
  QueueFullError,
  Scheduler,
  type BatchModel,
  type PromptLogprob,
  type Sequence,
  type SequenceRequest,
  type SequenceResult,
  type TokenOut,
} from "../engine/scheduler.js";
import { LatentError, UsageError } from "../util/errors.js";
import { ApiError, SseWriter, badParam, parseJsonObject, sendError, shownValue, sendJson } from "./http.js";
import {
  BodyBudget,
  ClientGoneError,
  DEFAULT_LIMITS,
  mustClose,
  readBody,
  retryHeaders,
  type ServerLimits,
} from "./limits.js";
import { guardConnections } from "./connections.js";
import { PromptEncoder } from "./prompt.js";
import {
  chatLogprob,
  genEntries,
  legacyLogprobs,
  promptEntries,
  vllmPromptLogprobs,
  type LegacyLogprobs,
} from "./logprobs.js";
import { ServerMetrics } from "./metrics.js";
import { refuseUnsupportedFields } from "./fields.js";
import {
  chatChoice,
  ChatDeltaStream,
  messagesForTemplate,
  planChatOutput,
  type ChatOutputPlan,
  type ReasoningFormat,
} from "./chat-output.js";
import { chatTemplateKwargsField } from "./template-kwargs.js";
import { corsHeaders, parseCorsOrigins, preflightHeaders } from "./cors.js";
import { lineLogger, requestIdOf, type RequestTokens, type ServerLogger } from "./access-log.js";
import { listenError } from "./listen.js";
import { responseFormatField } from "./response-format.js";
import { JsonConstraint } from "../engine/json/constraint.js";
import type { SchemaNode } from "../engine/json/schema.js";
import {
  MAX_LOGPROBS,
  messagesField,
  modelField,
  optBool,
  optInt,
  promptField,
  requireNoSuffix,
  samplingFields,
  type SamplingFields,
} from "./schema.js";

/** What the server runs: the file (metadata: tokenizer, name), the config and a batched forward pass. */
export interface ServedModel {
  readonly file: Pick<GGUFFile, "metadata">;
  readonly config: ModelConfig;
  readonly model: BatchModel;
}

/** Limits (src/server/limits.ts) may be given one by one; each defaults to DEFAULT_LIMITS. */
export interface ServerOptions extends Partial<ServerLimits> {
  /** GGUF to load (or pass `loaded`) */
  readonly modelPath?: string;
  /** an already loaded model (tests share one between servers), or the fused GPU pipeline (FusedGpuModel) */
  readonly loaded?: ServedModel;
  /** the model id clients name; default the file name without .gguf */
  readonly modelId?: string;
  /** more ids the model answers to (after modelId, which /v1/models lists first) */
  readonly aliases?: readonly string[];
  /** default 127.0.0.1 */
  readonly host?: string;
  /** default 8080; 0 picks a free port */
  readonly port?: number;
  /** browser origins allowed to call the server: `*` or a comma list of origins (CORS); default none (no CORS headers) */
  readonly cors?: string;
  /** require `Authorization: Bearer KEY` on /v1/*, /tokenize and /detokenize */
  readonly apiKey?: string;
  /** most sequences in the running batch (default 16) */
  readonly maxBatch?: number;
  /** KV cache capacity in positions, all sequences together (default 8192, at most maxBatch × context) */
  readonly kvCacheTokens?: number;
  /** positions per KV page (default 16) */
  readonly pageSize?: number;
  /** most prompt tokens a sequence prefills per step (default 128) */
  readonly prefillChunk?: number;
  /** most tokens per forward pass (default 256) */
  readonly tokenBudget?: number;
  /** most greedy decode steps chained on the model's device (fused WebGPU pipeline) in one go; 0: off (default 8) */
  readonly chainSteps?: number;
  /** most sequences waiting; beyond, 429 with Retry-After (default 256) */
  readonly maxQueue?: number;
  /** context length per sequence (default and at most the model's) */
  readonly contextLength?: number;
  /** share KV pages of identical prompt prefixes (default true) */
  readonly prefixCaching?: boolean;
  /** one line per event worth logging (startup, errors); default none */
  readonly log?: (line: string) => void;
  /** events and one access line per request (replaces `log`) */
  readonly logger?: ServerLogger;
  /** also log every forward pass (sequences, tokens, decodes, ms; chained steps as one line per chain) */
  readonly logSteps?: boolean;
  /** chat answers: `deepseek` (default) splits `<think>` reasoning into reasoning_content; `none` leaves it in content */
  readonly reasoningFormat?: ReasoningFormat;
}

export interface ServerStats {
  readonly waiting: number;
  readonly running: number;
  /** sequences held because their stream's client is not reading */
  readonly held: number;
  readonly steps: number;
  readonly preemptions: number;
  readonly pagesInUse: number;
  readonly pagesCached: number;
  readonly pagesFree: number;
  readonly totalPages: number;
  readonly prefixHits: number;
  readonly activeRequests: number;
}

export interface RunningServer {
  /** http://host:port */
  readonly url: string;
  readonly port: number;
  readonly modelId: string;
  /** every id the model answers to, modelId first */
  readonly modelIds: readonly string[];
  readonly http: Server;
  readonly scheduler: Scheduler;
  readonly pool: PagePool;
  readonly metrics: ServerMetrics;
  stats(): ServerStats;
  /** Stop taking requests (503), finish the running ones, then close every connection. */
  close(): Promise<void>;
}

const ENDPOINTS = new Set([
  "/v1/completions",
  "/v1/chat/completions",
  "/v1/models",
  "/tokenize",
  "/detokenize",
  "/health",
  "/metrics",
]);

/** Load the model (unless given), build the page pool and scheduler, and listen. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const loaded = options.loaded ?? (options.modelPath !== undefined ? loadModel(options.modelPath) : undefined);
  if (loaded === undefined) throw new UsageError("startServer needs modelPath or loaded");
  const { config, model } = loaded;
  const tokenizer = Tokenizer.fromMetadata(loaded.file.metadata);
  const modelId =
    options.modelId ??
    (options.modelPath !== undefined
      ? basename(options.modelPath).replace(/\.gguf$/i, "")
      : (loaded.file.metadata.string("general.name") ?? "latent"));
  const modelIds = [...new Set([modelId, ...(options.aliases ?? [])])];
  const ctx = Math.min(options.contextLength ?? config.contextLength, config.contextLength);
  const maxBatch = options.maxBatch ?? 16;
  const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
  const kvTokens = options.kvCacheTokens ?? Math.min(8192, maxBatch * ctx);
  if (!Number.isInteger(kvTokens) || kvTokens < pageSize)
    throw new UsageError(`the KV cache needs at least one page (${pageSize} positions), got ${kvTokens}`);
  const pool = new PagePool(config, { pageSize, numPages: Math.ceil(kvTokens / pageSize) });
  let metrics: ServerMetrics | undefined;
  const logger = options.logger ?? lineLogger(options.log);
  const log = (line: string): void => logger.event("info", line);
  const logError = (line: string): void => logger.event("error", line);
  // connections and requests seen: the scheduler lets the event loop take in a burst of them before its next step
  let ioEvents = 0;
  const scheduler = new Scheduler(model, tokenizer, pool, {
    maxBatch,
    ...(options.tokenBudget !== undefined ? { tokenBudget: options.tokenBudget } : {}),
    ...(options.prefillChunk !== undefined ? { prefillChunk: options.prefillChunk } : {}),
    ...(options.chainSteps !== undefined ? { chainSteps: options.chainSteps } : {}),
    maxQueue: options.maxQueue ?? DEFAULT_MAX_QUEUE,
    contextLength: ctx,
    prefixCaching: options.prefixCaching ?? true,
    ioActivity: () => ioEvents,
    onStep: (s) => {
      metrics?.stepTokens.observe(s.tokens);
      metrics?.stepSeconds.observe(s.ms / 1000);
      if (options.logSteps !== true) return;
      if (s.chainStep !== undefined && s.chainStep > 0) return; // one line per chain
      logger.event(
        "info",
        s.chained !== undefined
          ? `step: chain of ${s.chained} greedy steps × ${s.sequences} sequences, ${(s.ms * s.chained).toFixed(1)} ms`
          : `step: ${s.sequences} sequences, ${s.tokens} tokens (${s.decodes} decoding), ${s.ms.toFixed(1)} ms`,
      );
    },
  });
  metrics = new ServerMetrics(scheduler, pool);
  const m = metrics;
  const limits: ServerLimits = { ...DEFAULT_LIMITS, ...definedOnly(options) };
  const bodyBudget = new BodyBudget(limits.maxBufferedBodyBytes);
  const cors = options.cors !== undefined ? parseCorsOrigins(options.cors) : undefined;
  const keyHash = options.apiKey !== undefined ? createHash("sha256").update(options.apiKey).digest() : undefined;
  const created = Math.floor(Date.now() / 1000);
  const active = new Set<Promise<void>>();

  const api: Api = {
    limits,
    jobs: new Set(),
    tokenizer,
    prompts: new PromptEncoder(tokenizer, ctx),
    scheduler,
    metrics: m,
    modelId,
    modelIds,
    ctx,
    created,
    log,
    nVocab: config.nVocab,
    reasoningFormat: options.reasoningFormat ?? "deepseek",
  };

  const served: Served = {
    api,
    limits,
    metrics: m,
    logger,
    cors,
    keyHash,
    bodyBudget,
    contextLength: config.contextLength,
    draining: false,
  };
  const handle = (req: IncomingMessage, res: ServerResponse): Promise<void> => handleRequest(served, req, res);

  // Node checks header deadlines on this interval; a short deadline needs a short interval
  const http = createServer(
    { requestTimeout: 0, connectionsCheckingInterval: Math.max(100, Math.min(30_000, limits.headersTimeoutMs / 4)) },
    (req, res) => {
      ioEvents++;
      if (guard.isRefused(req.socket)) {
        res.destroy();
        return;
      }
      const p = handle(req, res).catch((e: unknown) => {
        logError(`unhandled: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
        try {
          sendError(res, new ApiError(500, "internal error"));
        } catch {
          res.destroy();
        }
      });
      active.add(p);
      void p.finally(() => active.delete(p));
    },
  );
  http.on("connection", () => ioEvents++);
  const guard = guardConnections(http, {
    maxConnections: limits.maxConnections,
    retryAfterSeconds: limits.retryAfterSeconds,
    counted: (status) => m.requests.inc({ endpoint: "other", status: String(status) }),
  });
  // A forward step blocks the event loop (seconds on a big model): an idle keep-alive socket whose timer fires during
  // a step is closed while the client's next request sits unread in it (ECONNRESET on the client). Keep idle
  // connections well beyond any step; drain closes them.
  http.keepAliveTimeout = 65_000;
  http.headersTimeout = limits.headersTimeoutMs;
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    const refused = (e: Error): void => reject(listenError(e, host, options.port ?? 8080));
    http.once("error", refused);
    http.listen(options.port ?? 8080, host, () => {
      http.off("error", refused);
      resolve();
    });
  });
  http.on("error", (e) => log(`http server error: ${e.message}`));
  const port = (http.address() as AddressInfo).port;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  log(
    `latent serve: model "${modelIds.join('", "')}" (${config.arch}, ${config.nLayer} layers, context ${ctx}), KV ${pool.numPages} pages × ${pageSize} positions (${(pool.bytes() / 2 ** 20).toFixed(1)} MiB), max batch ${maxBatch}, listening on ${url}`,
  );

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    modelId,
    modelIds,
    http,
    scheduler,
    pool,
    metrics: m,
    stats: () => ({ ...scheduler.stats(), ...pool.stats(), activeRequests: active.size }),
    close: () =>
      (closing ??= (async () => {
        served.draining = true;
        const closed = new Promise<void>((resolve) => http.close(() => resolve()));
        const finished = (async () => {
          await scheduler.idle();
          while (active.size > 0) await Promise.allSettled([...active]);
        })();
        let deadline: NodeJS.Timeout | undefined;
        const late = await Promise.race([
          finished.then(() => false),
          new Promise<boolean>((r) => (deadline = setTimeout(() => r(true), limits.drainTimeoutMs))),
        ]);
        clearTimeout(deadline);
        if (late) {
          log(
            `drain: ${api.jobs.size} requests still running after ${limits.drainTimeoutMs / 1000} s; cancelling them`,
          );
          for (const job of api.jobs)
            cancelJob(
              api,
              job,
              new ApiError(
                503,
                `the server is shutting down (drain deadline of ${limits.drainTimeoutMs / 1000} s)`,
                "server_error",
                null,
                "shutting_down",
              ),
            );
          await finished;
        }
        http.closeIdleConnections();
        const force = setTimeout(() => http.closeAllConnections(), 2000);
        await closed;
        clearTimeout(force);
        m.loopDelay.disable();
      })()),
  };
}

/** What the request handler reads: the server's parts, and whether it is draining. */
interface Served {
  readonly api: Api;
  readonly limits: ServerLimits;
  readonly metrics: ServerMetrics;
  readonly logger: ServerLogger;
  readonly cors: ReturnType<typeof parseCorsOrigins> | undefined;
  readonly keyHash: Buffer | undefined;
  readonly bodyBudget: BodyBudget;
  /** the model's own context length (the model card's) */
  readonly contextLength: number;
  draining: boolean;
}

/** One HTTP request: CORS, the key, the route, the answer or an OpenAI-shaped error; counted and logged when it closes. */
async function handleRequest(s: Served, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = pathOf(req.url);
  const endpoint = ENDPOINTS.has(path) ? path : path.startsWith("/v1/models/") ? "/v1/models/{id}" : "other";
  const t0 = performance.now();
  const requestId = requestIdOf(req);
  res.setHeader("x-request-id", requestId);
  const tokens: RequestTokens = { promptTokens: undefined, completionTokens: 0, ttftMs: undefined };
  requestTokens.set(req, { tokens, t0 });
  // a response that never finished: the client went away first (nginx's 499); a stream logs here, at its end
  res.once("close", () => {
    const status = res.writableFinished ? res.statusCode : CLIENT_CLOSED;
    s.metrics.requests.inc({ endpoint, status: String(status) });
    const totalMs = performance.now() - t0;
    // the access line says it too (status 499); this one stays for embedders that take lines only
    if (status === CLIENT_CLOSED)
      s.logger.event(
        "debug",
        `${CLIENT_CLOSED} ${req.method ?? "?"} ${path}: the client closed the connection after ${(totalMs / 1000).toFixed(1)} s`,
      );
    s.logger.request({
      requestId,
      method: req.method ?? "?",
      path,
      status,
      promptTokens: tokens.promptTokens,
      completionTokens: tokens.promptTokens !== undefined ? tokens.completionTokens : undefined,
      ttftMs: tokens.ttftMs,
      totalMs,
    });
  });
  const readOnly = req.method === "GET" || req.method === "HEAD";
  if (s.cors !== undefined) {
    // a preflight carries no credentials: answered before the key check, for every path
    if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
      res.writeHead(204, preflightHeaders(s.cors, req));
      res.end();
      return;
    }
    // set before any writeHead: JSON answers, errors and event streams all carry them
    for (const [k, v] of Object.entries(corsHeaders(s.cors, req))) res.setHeader(k, v);
  }
  try {
    if (path === "/health") {
      if (!readOnly) throw methodNotAllowed(req.method);
      sendJson(
        res,
        s.draining ? 503 : 200,
        { status: s.draining ? "s.draining" : "ok" },
        s.draining ? retryHeaders(503, s.limits.retryAfterSeconds) : {},
      );
      return;
    }
    if (path === "/metrics") {
      if (!readOnly) throw methodNotAllowed(req.method);
      const text = await s.metrics.registry.metrics();
      res.writeHead(200, { "content-type": s.metrics.registry.contentType });
      res.end(text);
      return;
    }
    if (s.draining) throw new ApiError(503, "the server is shutting down", "server_error", null, "shutting_down");
    if (s.keyHash !== undefined && (path.startsWith("/v1/") || path === "/tokenize" || path === "/detokenize"))
      checkKey(req, s.keyHash);
    if (path === "/v1/models") {
      if (!readOnly) throw methodNotAllowed(req.method);
      sendJson(res, 200, { object: "list", data: s.api.modelIds.map((id) => modelCard(s.api, id, s.contextLength)) });
      return;
    }
    if (endpoint === "/v1/models/{id}") {
      if (!readOnly) throw methodNotAllowed(req.method);
      const id = decodeOrRaw(path.slice("/v1/models/".length));
      if (!s.api.modelIds.includes(id)) throw unknownModel(id, s.api.modelIds);
      sendJson(res, 200, modelCard(s.api, id, s.contextLength));
      return;
    }
    if (!ENDPOINTS.has(path))
      throw new ApiError(404, `no route ${req.method ?? "?"} ${path}`, "not_found_error", null, "unknown_url");
    if (req.method !== "POST") throw methodNotAllowed(req.method);
    const body = parseJsonObject(
      await readBody(req, { limit: s.limits.maxBodyBytes, budget: s.bodyBudget, timeoutMs: s.limits.bodyTimeoutMs }),
    );
    if (path === "/tokenize") return await tokenize(s.api, body, res);
    if (path === "/detokenize") return detokenize(s.api, body, res);
    if (path === "/v1/completions") return await completions(s.api, body, req, res);
    if (path === "/v1/chat/completions") return await chat(s.api, body, req, res);
  } catch (e) {
    if (e instanceof ClientGoneError) {
      res.destroy();
      return;
    }
    const err = toApiError(e);
    // an unexpected error with its stack; the server's own 5xx answers (generation failed, timeout) as one line; 503s
    // (shutting down, busy) are routine
    if (!(e instanceof ApiError) && err.status >= 500)
      s.logger.event(
        "error",
        `error ${req.method ?? "?"} ${path}: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`,
      );
    else if (err.status >= 500 && err.status !== 503)
      s.logger.event("error", `${err.status} ${req.method ?? "?"} ${path}: ${err.message}`);
    if (mustClose(err)) res.setHeader("connection", "close");
    sendError(res, err, retryHeaders(err.status, s.limits.retryAfterSeconds));
  }
}

interface Api {
  readonly tokenizer: Tokenizer;
  readonly prompts: PromptEncoder;
  readonly scheduler: Scheduler;
  readonly metrics: ServerMetrics;
  readonly modelId: string;
  readonly modelIds: readonly string[];
  readonly ctx: number;
  readonly created: number;
  readonly nVocab: number;
  readonly log: (line: string) => void;
  readonly limits: ServerLimits;
  readonly reasoningFormat: ReasoningFormat;
  /** generation requests under way (close() cancels them past the drain deadline) */
  readonly jobs: Set<GenJob>;
}

function sseWriter(api: Api, res: ServerResponse): SseWriter {
  const { maxStreamBufferBytes: maxBuffered, streamStallTimeoutMs: stallTimeoutMs } = api.limits;
  return new SseWriter(res, { maxBuffered, stallTimeoutMs }, (reason, unsent) => {
    api.metrics.streamsDropped.inc({ reason });
    api.log(
      reason === "buffer"
        ? `stream dropped: the client left ${unsent} bytes unread (limit ${maxBuffered})`
        : `stream dropped: the client read nothing for ${stallTimeoutMs / 1000} s (${unsent} bytes unread)`,
    );
  });
}

/**
 * While the stream's client takes nothing, its sequences are held: they keep their pages and slots but get no new
 * tokens, so the server neither computes nor buffers output nobody reads; they resume when the socket drains.
 */
function holdWhileBlocked(api: Api, sse: SseWriter, job: GenJob): void {
  sse.onPressure((blocked) => {
    for (const c of job.choices) {
      if (blocked) api.scheduler.hold(c.seq);
      else api.scheduler.release(c.seq);
    }
  });
}

function modelCard(api: Api, id: string, nCtxTrain: number): Record<string, unknown> {
  return {
    id,
    object: "model",
    created: api.created,
    owned_by: "latent",
    meta: { n_ctx: api.ctx, n_ctx_train: nCtxTrain, n_vocab: api.nVocab },
  };
}

/** Status counted and logged for a request whose client closed the connection before the answer was sent. */
const CLIENT_CLOSED = 499;

function pathOf(url: string | undefined): string {
  let pathname: string;
  try {
    pathname = new URL(url ?? "/", "http://localhost").pathname;
  } catch {
    pathname = "/";
  }
  return pathname.replace(/\/+$/, "") || "/";
}

/** A percent-decoded path segment; a malformed escape is kept as sent (it then names nothing: 404). */
function decodeOrRaw(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The options' fields that are set (an explicit undefined must not override a default). */
function definedOnly(o: Partial<ServerLimits>): Partial<ServerLimits> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(DEFAULT_LIMITS) as (keyof ServerLimits)[]) {
    const v = o[k];
    if (v !== undefined) out[k] = v;
  }
  return out as Partial<ServerLimits>;
}

function methodNotAllowed(method: string | undefined): ApiError {
  return new ApiError(
    405,
    `method ${method ?? "?"} is not allowed here`,
    "invalid_request_error",
    null,
    "method_not_allowed",
  );
}

function unknownModel(id: string, known: readonly string[]): ApiError {
  const ids = known.map((k) => `'${shownName(k)}'`).join(", ");
  return new ApiError(
    404,
    `The model '${shownName(id)}' does not exist; this server has ${ids}`,
    "invalid_request_error",
    "model",
    "model_not_found",
  );
}

/** A request's token counts for its access line: set by the generation endpoints, read when the response closes. */
const requestTokens = new WeakMap<IncomingMessage, { readonly tokens: RequestTokens; readonly t0: number }>();

function checkKey(req: IncomingMessage, keyHash: Buffer): void {
  const auth = req.headers["authorization"];
  const m = typeof auth === "string" ? /^Bearer\s+(.+)$/i.exec(auth.trim()) : null;
  const given = m !== null ? createHash("sha256").update(m[1]).digest() : undefined;
  if (given === undefined || !timingSafeEqual(given, keyHash)) {
    throw new ApiError(
      401,
      given === undefined ? "missing API key: send Authorization: Bearer <key>" : "incorrect API key provided",
      "invalid_request_error",
      null,
      "invalid_api_key",
    );
  }
}

function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof QueueFullError)
    return new ApiError(429, `${e.message}; retry later`, "rate_limit_error", null, "queue_full");
  if (e instanceof UsageError) return new ApiError(400, e.message);
  if (e instanceof LatentError) return new ApiError(400, e.message);
  return new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`);
}

async function tokenize(api: Api, body: Record<string, unknown>, res: ServerResponse): Promise<void> {
  const content = body["content"];
  if (typeof content !== "string") throw badParam("content", "'content' must be a string");
  const addSpecial = optBool(body, "add_special") ?? false;
  const parseSpecial = optBool(body, "parse_special") ?? true;
  const withPieces = optBool(body, "with_pieces") ?? false;
  const ids = await api.prompts.encode(content, { addSpecial, parseSpecial });
  if (!withPieces) return sendJson(res, 200, { tokens: ids });
  const dec = new TextDecoder("utf-8", { fatal: true });
  sendJson(res, 200, {
    tokens: ids.map((id) => {
      const bytes = api.tokenizer.tokenBytes(id);
      try {
        return { id, piece: dec.decode(bytes) };
      } catch {
        return { id, piece: [...bytes] };
      }
    }),
  });
}

function detokenize(api: Api, body: Record<string, unknown>, res: ServerResponse): void {
  const ids = tokenIds(api, body["tokens"], "tokens");
  sendJson(res, 200, { content: api.tokenizer.decode(ids) });
}

function tokenIds(api: Api, v: unknown, param: string): number[] {
  if (!Array.isArray(v)) throw badParam(param, `'${param}' must be an array of token ids`);
  return v.map((x, i) => {
    if (typeof x !== "number" || !Number.isInteger(x) || x < 0 || x >= api.nVocab)
      throw badParam(param, `'${param}[${i}]' = ${shownValue(x)} is not a token id (0..${api.nVocab - 1})`);
    return x;
  });
}

/** Check lengths against the context; returns max_tokens to use. */
function budget(api: Api, promptLen: number, asked: number | undefined, dflt: number | undefined): number {
  if (promptLen === 0) throw badParam("prompt", "the prompt has no tokens");
  const room = api.ctx - promptLen;
  if (room < 0)
    throw new ApiError(
      400,
      `This model's maximum context length is ${api.ctx} tokens. However, your prompt has ${promptLen} tokens.`,
      "invalid_request_error",
      "messages",
      "context_length_exceeded",
    );
  if (asked !== undefined && asked > room) {
    throw new ApiError(
      400,
      `This model's maximum context length is ${api.ctx} tokens. However, you requested ${promptLen + asked} tokens (${promptLen} in the prompt, ${asked} for the completion). Please reduce the prompt or max_tokens.`,
      "invalid_request_error",
      "max_tokens",
      "context_length_exceeded",
    );
  }
  if (promptLen > api.scheduler.kvCapacity)
    throw new ApiError(
      400,
      `the prompt has ${promptLen} tokens, more than the server's KV cache holds (${api.scheduler.kvCapacity})`,
      "invalid_request_error",
      "prompt",
      "context_length_exceeded",
    );
  return Math.min(asked ?? dflt ?? room, room);
}

interface Choice {
  readonly index: number;
  readonly seq: Sequence;
  readonly prompt: readonly number[];
  readonly tokens: TokenOut[];
  promptLp?: (PromptLogprob | null)[];
  result?: SequenceResult;
}

interface GenJob {
  readonly kind: "completion" | "chat";
  readonly id: string;
  readonly choices: Choice[];
  readonly prompts: readonly (readonly number[])[];
  /** why the server ended it early (request deadline, drain deadline): the answer, or the stream's last event */
  endedBy: ApiError | undefined;
}

function cancelJob(api: Api, job: GenJob, why?: ApiError): void {
  job.endedBy ??= why;
  for (const c of job.choices) api.scheduler.cancel(c.seq);
}

/** Submit n sequences per prompt; runs `events` hooks; resolves when all have finished. */
function launch(
  api: Api,
  req: IncomingMessage,
  res: ServerResponse,
  kind: GenJob["kind"],
  prompts: readonly (readonly number[])[],
  s: SamplingFields,
  extra: {
    readonly topLogprobs: number | undefined;
    readonly promptLogprobs: number | undefined;
    readonly maxTokens: number[];
    readonly special?: boolean;
    readonly json?: SchemaNode;
  },
  hooks: { onToken?(c: Choice, t: TokenOut): void; onPrompt?(c: Choice): void; onFinish?(c: Choice): void },
): { job: GenJob; done: Promise<void> } {
  const t0 = performance.now();
  const record = requestTokens.get(req);
  const total = prompts.length * s.n;
  const st = api.scheduler.stats();
  if (st.waiting + total > api.scheduler.maxQueue)
    throw new ApiError(
      429,
      `the queue is full (${st.waiting} waiting, limit ${api.scheduler.maxQueue}); retry later`,
      "rate_limit_error",
      null,
      "queue_full",
    );
  const job: GenJob = {
    kind,
    id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID().replace(/-/g, "")}`,
    choices: [],
    prompts,
    endedBy: undefined,
  };
  let remaining = total;
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  try {
    prompts.forEach((prompt, pi) => {
      for (let i = 0; i < s.n; i++) {
        const index = pi * s.n + i;
        const request: SequenceRequest = {
          prompt,
          maxTokens: extra.maxTokens[pi],
          sampling: {
            temperature: s.temperature,
            topK: s.topK,
            topP: s.topP,
            minP: s.minP,
            ...(s.seed !== undefined ? { seed: s.seed + index } : {}),
            logprobs: extra.topLogprobs ?? 0,
            logitBias: s.logitBias,
            presencePenalty: s.presencePenalty,
            frequencyPenalty: s.frequencyPenalty,
            repetitionPenalty: s.repetitionPenalty,
            ...(s.repetitionPenalty !== 1 ? { promptTokens: prompt } : {}),
            // a constraint holds its sequence's parse state: one per sequence
            ...(extra.json !== undefined ? { constraint: new JsonConstraint(api.tokenizer, extra.json) } : {}),
          },
          stop: s.stop,
          ignoreEog: s.ignoreEos,
          ...(extra.promptLogprobs !== undefined ? { promptLogprobs: extra.promptLogprobs } : {}),
          ...(extra.special === true ? { special: true } : {}),
        };
        let last = 0;
        let choice: Choice;
        const seq = api.scheduler.submit(request, {
          onPromptLogprobs: (e) => {
            choice.promptLp = e;
            hooks.onPrompt?.(choice);
          },
          onToken: (t) => {
            const now = performance.now();
            if (t.index === 0) api.metrics.ttft.observe((now - t0) / 1000);
            if (record !== undefined) {
              record.tokens.ttftMs ??= now - record.t0;
              record.tokens.completionTokens++;
            } else api.metrics.itl.observe((now - last) / 1000);
            last = now;
            api.metrics.generationTokens.inc();
            choice.tokens.push(t);
            hooks.onToken?.(choice, t);
          },
          onFinish: (r) => {
            choice.result = r;
            hooks.onFinish?.(choice);
            if (--remaining === 0) resolveDone();
          },
        });
        choice = { index, seq, prompt, tokens: [] };
        job.choices.push(choice);
      }
    });
  } catch (e) {
    cancelJob(api, job);
    throw e;
  }
  api.jobs.add(job);
  const limitS = api.limits.requestTimeoutMs / 1000;
  const deadline =
    api.limits.requestTimeoutMs > 0
      ? setTimeout(
          () =>
            cancelJob(
              api,
              job,
              new ApiError(
                504,
                `the request ran past the server's limit of ${limitS} s`,
                "server_error",
                null,
                "request_timeout",
              ),
            ),
          api.limits.requestTimeoutMs,
        )
      : undefined;
  void done.then(() => {
    clearTimeout(deadline);
    api.jobs.delete(job);
  });
  for (const p of prompts) api.metrics.promptTokens.inc(p.length);
  if (record !== undefined) record.tokens.promptTokens = prompts.reduce((a, p) => a + p.length, 0);
  // a client that goes away cancels its sequences: their pages go back at once
  res.on("close", () => {
    if (remaining > 0) cancelJob(api, job);
  });
  req.on("error", () => cancelJob(api, job));
  return { job, done };
}

/**
 * Wait for a job. Streamed: send the usage chunk (if asked; built after the job ends) and [DONE], then there is nothing
 * more to send (false). Unstreamed: false when the client is gone; a failed choice → 500; else true (send the body).
 */
async function finishJob(
  job: GenJob,
  done: Promise<unknown>,
  sse: SseWriter | undefined,
  usageChunk: Record<string, unknown> | undefined,
  res: ServerResponse,
): Promise<boolean> {
  await done;
  const endedBy = job.endedBy;
  if (sse !== undefined) {
    if (endedBy !== undefined) sse.send(endedBy.body());
    if (usageChunk !== undefined) sse.send({ ...usageChunk, usage: usage(job) });
    sse.done();
    return false;
  }
  if (res.destroyed) return false;
  if (endedBy !== undefined) throw endedBy;
  const failed = job.choices.find((c) => c.result?.finishReason === "error");
  if (failed !== undefined)
    throw new ApiError(500, `generation failed: ${failed.result?.error?.message ?? "unknown error"}`);
  return true;
}

function usage(job: GenJob): Record<string, unknown> {
  const prompt = job.prompts.reduce((a, p) => a + p.length, 0);
  const completion = job.choices.reduce((a, c) => a + (c.result?.tokens.length ?? c.tokens.length), 0);
  const cached = job.choices
    .filter((c) => c.index % Math.max(1, job.choices.length / job.prompts.length) === 0)
    .reduce((a, c) => a + (c.result?.cachedTokens ?? 0), 0);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
  };
}

function finishReason(r: SequenceResult): "stop" | "length" {
  return r.finishReason === "length" ? "length" : "stop";
}

async function completions(
  api: Api,
  body: Record<string, unknown>,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  refuseUnsupportedFields(body, "completion");
  const modelName = modelField(body);
  const inputs = promptField(body);
  const s = samplingFields(body, ["max_tokens"], api.nVocab);
  requireNoSuffix(body);
  const logprobs = optInt(body, "logprobs", 0, MAX_LOGPROBS);
  const echo = optBool(body, "echo") ?? false;
  const promptLogprobs = optInt(body, "prompt_logprobs", 0, MAX_LOGPROBS);
  if (!api.modelIds.includes(modelName)) throw unknownModel(modelName, api.modelIds);
  const prompts: number[][] = [];
  for (const p of inputs) prompts.push("ids" in p ? p.ids : await api.prompts.encodePrompt(p.text));
  const maxTokens = prompts.map((p) => budget(api, p.length, s.maxTokens, 16));
  const promptTexts = prompts.map((p, i) => {
    const inp = inputs[i];
    return "text" in inp ? inp.text : api.tokenizer.decode(p);
  });
  const needPrompt =
    promptLogprobs !== undefined || (echo && logprobs !== undefined)
      ? Math.max(promptLogprobs ?? 0, echo ? (logprobs ?? 0) : 0)
      : undefined;
  const created = Math.floor(Date.now() / 1000);
  // with include_usage every chunk but the last carries usage: null, as OpenAI sends them
  const base = (job: GenJob): Record<string, unknown> => ({
    id: job.id,
    object: "text_completion",
    created,
    model: modelName,
    ...(s.stream && s.includeUsage ? { usage: null } : {}),
  });
  const sse = s.stream ? sseWriter(api, res) : undefined;
  const offsets = new Map<number, number>();
  let jobRef: GenJob | undefined;
  const echoChunk = (c: Choice): void => {
    const text = promptTexts[Math.floor(c.index / s.n)];
    offsets.set(c.index, text.length);
    const lp = logprobs !== undefined ? legacyLogprobs(api.tokenizer, promptEntries(c, logprobs), 0) : null;
    sse!.send({ ...base(jobRef!), choices: [{ index: c.index, text, logprobs: lp, finish_reason: null }] });
  };
  const { job, done } = launch(
    api,
    req,
    res,
    "completion",
    prompts,
    s,
    { topLogprobs: logprobs, promptLogprobs: needPrompt, maxTokens },
    sse === undefined
      ? {}
      : {
          onPrompt: (c) => {
            if (echo && logprobs !== undefined) echoChunk(c);
          },
          onToken: (c, t) => {
            if (t.text === "" && logprobs === undefined) return;
            const at = offsets.get(c.index) ?? 0;
            offsets.set(c.index, at + t.text.length);
            const lp = logprobs !== undefined ? legacyLogprobs(api.tokenizer, genEntries([t]), at) : null;
            sse.send({ ...base(job), choices: [{ index: c.index, text: t.text, logprobs: lp, finish_reason: null }] });
          },
          onFinish: (c) => {
            const r = c.result!;
            if (r.finishReason === "error") {
              sse.send(new ApiError(500, `generation failed: ${r.error?.message ?? "unknown error"}`).body());
              return;
            }
            if (r.finishReason === "abort") return;
            const choice: Record<string, unknown> = {
              index: c.index,
              text: r.tail,
              logprobs: null,
              finish_reason: finishReason(r),
            };
            if (promptLogprobs !== undefined && c.promptLp !== undefined)
              choice["prompt_logprobs"] = vllmPromptLogprobs(api.tokenizer, c.promptLp);
            sse.send({ ...base(job), choices: [choice] });
          },
        },
  );
  jobRef = job;
  if (sse !== undefined) {
    holdWhileBlocked(api, sse, job);
    sse.start();
    if (echo && logprobs === undefined) for (const c of job.choices) echoChunk(c);
  }
  if (!(await finishJob(job, done, sse, s.includeUsage ? { ...base(job), choices: [] } : undefined, res))) return;
  sendJson(res, 200, {
    ...base(job),
    choices: job.choices.map((c) => {
      const r = c.result!;
      const ptext = echo ? promptTexts[Math.floor(c.index / s.n)] : "";
      let lp: LegacyLogprobs | null = null;
      if (logprobs !== undefined) {
        const entries = [...(echo ? promptEntries(c, logprobs) : []), ...genEntries(c.tokens)];
        lp = legacyLogprobs(api.tokenizer, entries, 0);
      }
      return {
        index: c.index,
        text: ptext + r.text,
        logprobs: lp,
        finish_reason: finishReason(r),
        ...(promptLogprobs !== undefined && c.promptLp !== undefined
          ? { prompt_logprobs: vllmPromptLogprobs(api.tokenizer, c.promptLp) }
          : {}),
      };
    }),
    usage: usage(job),
  });
}

async function chat(api: Api, body: Record<string, unknown>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  refuseUnsupportedFields(body, "chat");
  const modelName = modelField(body);
  const messages: ChatMessage[] = messagesField(body);
  const s = samplingFields(body, ["max_completion_tokens", "max_tokens"], api.nVocab);
  const logprobs = optBool(body, "logprobs") ?? false;
  const topLogprobs = optInt(body, "top_logprobs", 0, MAX_LOGPROBS);
  if (topLogprobs !== undefined && !logprobs) throw badParam("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  const promptLogprobs = optInt(body, "prompt_logprobs", 0, MAX_LOGPROBS);
  const variables = chatTemplateKwargsField(body);
  const json = responseFormatField(body);
  // the constraint ends the output with the end-of-generation token once the value is whole; ignoring it would let
  // the sequence run on with nothing allowed
  if (json !== undefined && s.ignoreEos)
    throw badParam(
      "ignore_eos",
      "'ignore_eos' cannot be combined with a JSON 'response_format': the end-of-generation token ends the JSON value",
      "unsupported_parameter",
    );
  // tool_choice "none": the tools are neither shown to the model nor looked for in its answer
  const requestTools = Array.isArray(body["tools"]) ? (body["tools"] as unknown[]) : undefined; // fields.ts checked it
  const tools = body["tool_choice"] === "none" ? undefined : requestTools;
  if (!api.modelIds.includes(modelName)) throw unknownModel(modelName, api.modelIds);
  let prompt: number[];
  try {
    prompt = await api.prompts.encodeChat(messagesForTemplate(messages, api.tokenizer.chatTemplate), {
      addGenerationPrompt: true,
      ...(tools !== undefined && tools.length > 0 ? { tools } : {}),
      ...(variables !== undefined ? { variables } : {}),
    });
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw new ApiError(
      400,
      `cannot render the chat template: ${e instanceof Error ? e.message : String(e)}`,
      "invalid_request_error",
      "messages",
    );
  }
  const planned: ChatOutputPlan = planChatOutput({
    reasoningFormat: api.reasoningFormat,
    template: api.tokenizer.chatTemplate,
    // enough of the prompt's end to see an open <think> (it is the generation prompt's last text)
    promptTail: api.tokenizer.decode(prompt.slice(-8)),
    tools,
    parallelToolCalls: optBool(body, "parallel_tool_calls") ?? true,
  });
  // JSON output is all content: the constraint lets the model write no <think> and no tool-call markers, and a prompt
  // that opened <think> would otherwise file the JSON under reasoning_content
  const plan: ChatOutputPlan =
    json !== undefined ? { ...planned, reasoning: undefined, toolFormat: undefined, controlTokenText: false } : planned;
  const maxTokens = [budget(api, prompt.length, s.maxTokens, api.limits.defaultChatMaxTokens)];
  const k = topLogprobs ?? 0;
  const created = Math.floor(Date.now() / 1000);
  const base = (job: GenJob): Record<string, unknown> => ({
    id: job.id,
    object: "chat.completion.chunk",
    created,
    model: modelName,
    ...(s.includeUsage ? { usage: null } : {}),
  });
  const sse = s.stream ? sseWriter(api, res) : undefined;
  const streams = new Map<number, ChatDeltaStream>();
  const streamOf = (c: Choice): ChatDeltaStream => {
    let d = streams.get(c.index);
    if (d === undefined) streams.set(c.index, (d = new ChatDeltaStream(plan)));
    return d;
  };
  const { job, done } = launch(
    api,
    req,
    res,
    "chat",
    [prompt],
    s,
    {
      topLogprobs: logprobs ? Math.max(k, 0) : undefined,
      promptLogprobs,
      maxTokens,
      special: plan.controlTokenText,
      ...(json !== undefined ? { json } : {}),
    },
    sse === undefined
      ? {}
      : {
          onToken: (c, t) => {
            const delta = streamOf(c).push(t.text);
            const empty = Object.keys(delta).length === 0;
            if (empty && !logprobs) return;
            // a token whose text is held back (a possible tag) still has its logprob chunk, with the content it adds: none
            sse.send({
              ...base(job),
              choices: [
                {
                  index: c.index,
                  delta: empty ? { content: "" } : delta,
                  logprobs: logprobs ? { content: [chatLogprob(api.tokenizer, t, k)] } : null,
                  finish_reason: null,
                },
              ],
            });
          },
          onFinish: (c) => {
            const r = c.result!;
            if (r.finishReason === "error") {
              sse.send(new ApiError(500, `generation failed: ${r.error?.message ?? "unknown error"}`).body());
              return;
            }
            if (r.finishReason === "abort") return;
            const stream = streamOf(c);
            const tail = stream.push(r.tail);
            if (Object.keys(tail).length > 0)
              sse.send({
                ...base(job),
                choices: [{ index: c.index, delta: tail, logprobs: null, finish_reason: null }],
              });
            const rest = stream.finish();
            if (Object.keys(rest).length > 0)
              sse.send({
                ...base(job),
                choices: [{ index: c.index, delta: rest, logprobs: null, finish_reason: null }],
              });
            sse.send({
              ...base(job),
              choices: [
                { index: c.index, delta: {}, logprobs: null, finish_reason: stream.finishReason(finishReason(r)) },
              ],
            });
          },
        },
  );
  if (sse !== undefined) {
    holdWhileBlocked(api, sse, job);
    for (const c of job.choices)
      sse.send({
        ...base(job),
        choices: [{ index: c.index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
      });
  }
  if (!(await finishJob(job, done, sse, s.includeUsage ? { ...base(job), choices: [] } : undefined, res))) return;
  sendJson(res, 200, {
    id: job.id,
    object: "chat.completion",
    created,
    model: modelName,
    choices: job.choices.map((c) => ({
      index: c.index,
      ...chatChoice(c.result!.text, plan, finishReason(c.result!)),
      logprobs: logprobs ? { content: c.tokens.map((t) => chatLogprob(api.tokenizer, t, k)) } : null,
      ...(promptLogprobs !== undefined && c.promptLp !== undefined
        ? { prompt_logprobs: vllmPromptLogprobs(api.tokenizer, c.promptLp) }
        : {}),
    })),
    usage: usage(job),
  });
}
