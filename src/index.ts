/**
 * latent as a library: load an MLA MoE GGUF (DeepSeek-V2/V3 `deepseek2`, GLM `glm-dsa`) from a path, a URL, a
 * `File`/`Blob` or bytes; tokenize; generate with streaming; get logits. Runs in Node and in a browser (this module
 * and everything it imports are browser-safe: no `node:*` module is imported, and a path is opened through a dynamic
 * import that bundlers leave alone).
 *
 * ```ts
 * import { load } from "latent";
 * const m = await load("https://example.org/model.gguf");
 * for await (const ev of m.stream("And it came to pass", { maxTokens: 32, temperature: 0 })) out.append(ev.text);
 * const gpu = await m.webgpu({ context: 1024 });   // the same, on WebGPU (navigator.gpu, or Dawn in Node)
 * for await (const ev of gpu.stream("And it came to pass", { maxTokens: 32 })) out.append(ev.text);
 * ```
 */
import type { MatKernels } from "./model/kernels.js";
import { DEFAULT_PREFILL_CHUNK, evaluateAll, logSoftmaxRow } from "./engine/evaluate.js";
import {
  generateTokens,
  generateTokensAsync,
  type AsyncGenerateModel,
  type GenerateOptions,
  type GenerateResult,
  type TokenEvent,
} from "./engine/generate.js";
import { requestGpuDevice } from "./backend/webgpu/core/device.js";
import { GpuModel } from "./backend/webgpu/graph/gpu-model.js";
import { GpuRuntime } from "./backend/webgpu/core/runtime.js";
import { GGUFFile, type FetchProgress, type LoadOptions as FetchOptions } from "./gguf/gguf-file.js";
import { summarizeModel, formatSummary, type InspectSummary } from "./gguf/summary.js";
import {
  MemorySource,
  blobSource,
  httpSource,
  type AsyncByteSource,
  type ByteSource,
  type HttpSourceOptions,
} from "./gguf/source.js";
import type { ConfigOptions, ModelConfig } from "./model/config.js";
import type { DeepSeek2 } from "./model/deepseek2.js";
import { loadModelFrom } from "./model/from-file.js";
import type { AttentionPath } from "./model/mla.js";
import { Tokenizer, type ChatMessage } from "./tokenizer/index.js";
import { UsageError } from "./util/errors.js";
import { yieldToEventLoop } from "./util/yield.js";

export { GGUFFile, type FetchProgress } from "./gguf/gguf-file.js";
export {
  MemorySource,
  PrefetchedSource,
  ShortReadError,
  NotFetchedError,
  blobSource,
  httpSource,
  memoryAsyncSource,
} from "./gguf/source.js";
export type { ByteSource, AsyncByteSource, HttpSourceOptions } from "./gguf/source.js";
export { summarizeModel, formatSummary, type InspectSummary } from "./gguf/summary.js";
export { Tokenizer, type ChatMessage } from "./tokenizer/index.js";
export type {
  GenerateOptions,
  GenerateResult,
  TokenEvent,
  FinishReason,
  GenerateTimings,
  GeneratePath,
  DecodeMode,
} from "./engine/generate.js";
export type { GreedyChainModel, GreedyChunk, PickDraw } from "./engine/device-picks.js";
export type { ModelConfig } from "./model/config.js";
export type { AttentionPath } from "./model/mla.js";
export type { MatKernels } from "./model/kernels.js";
export { plainKernels } from "./model/kernels.js";
export { loadModelFrom } from "./model/from-file.js";
export { LatentError, GGUFError, UsageError, ModelConfigError, QuantTypeError } from "./util/errors.js";

/** A path (Node), an http(s) URL, a `File`/`Blob` (or several: the shards of a split model), bytes, or sources. */
export type ModelInput =
  | string
  | URL
  | Blob
  | readonly Blob[]
  | Uint8Array
  | ArrayBuffer
  | ByteSource
  | AsyncByteSource
  | readonly AsyncByteSource[];

export interface LoadProgress {
  /** "fetch": bytes of the GGUF being read (header, then tensor ranges); "weights": tensors being decoded */
  readonly phase: "fetch" | "weights";
  readonly done: number;
  readonly total: number;
}

export interface LoadOptions extends ConfigOptions {
  readonly onProgress?: (p: LoadProgress) => void;
  /** matrix kernels (default: the plain reference kernels, pure TypeScript) */
  readonly kernels?: MatKernels;
  /** for URLs: fetch, headers, abort signal */
  readonly http?: HttpSourceOptions;
  /** request sizes and the like when fetching from a URL or a Blob */
  readonly fetch?: Omit<FetchOptions, "onFetch">;
}

function isAsyncSource(x: unknown): x is AsyncByteSource {
  return (
    typeof x === "object" && x !== null && "read" in x && "size" in x && !("byteLength" in x) && !(x instanceof Blob)
  );
}

const isNode = (): boolean =>
  typeof (globalThis as { process?: { versions?: { node?: unknown } } }).process?.versions?.node === "string";

/** The Node-only module that opens paths (file.ts), as far as this module needs it. */
interface NodeFileModule {
  readonly GGUFFile: { open(path: string): GGUFFile };
}

/** A URL-like string: absolute http(s)/blob/data URL, or (in a browser) anything, resolved against the page. */
function asUrl(s: string): string | undefined {
  if (/^(https?|blob|data):/i.test(s)) return s;
  if (!isNode()) return s;
  return undefined;
}

/** Open `input` as a GGUFFile: lazily (a Node path, bytes) or fetched by range ahead of time (URL, Blob). */
export async function openGGUF(
  input: ModelInput,
  opts: Pick<LoadOptions, "onProgress" | "http" | "fetch"> = {},
): Promise<GGUFFile> {
  const onFetch = (p: FetchProgress): void => opts.onProgress?.({ phase: "fetch", done: p.bytes, total: p.total });
  const fetchAll = (sources: readonly AsyncByteSource[]): Promise<GGUFFile> =>
    GGUFFile.load(sources, { ...(opts.fetch ?? {}), onFetch });
  if (typeof input === "string" || input instanceof URL) {
    const s = input instanceof URL ? input.href : input;
    const url = asUrl(s);
    if (url !== undefined) return fetchAll([await httpSource(url, opts.http)]);
    // A path on disk (Node): file.ts is imported by a computed specifier so that no bundler pulls node:fs in.
    const path = s.startsWith("file:") ? decodeURIComponent(new URL(s).pathname) : s;
    const spec = "./gguf/file.js";
    const mod = (await import(/* @vite-ignore */ spec)) as NodeFileModule;
    return mod.GGUFFile.open(path);
  }
  if (input instanceof Uint8Array) return GGUFFile.fromSources([new MemorySource(input)]);
  if (input instanceof ArrayBuffer) return GGUFFile.fromSources([new MemorySource(new Uint8Array(input))]);
  if (input instanceof Blob) return fetchAll([blobSource(input)]);
  if (Array.isArray(input)) {
    const list = input as readonly (Blob | AsyncByteSource)[];
    return fetchAll(list.map((x) => (x instanceof Blob ? blobSource(x) : x)));
  }
  if (isAsyncSource(input)) {
    const probe = input as AsyncByteSource | ByteSource;
    // a ByteSource's read returns bytes, an AsyncByteSource's a promise: tell them apart by a zero-length read
    const r = probe.read(0, 0);
    if (r instanceof Promise) return fetchAll([probe as AsyncByteSource]);
    return GGUFFile.fromSources([probe as ByteSource]);
  }
  throw new UsageError("load: unsupported input (expected a path, URL, File/Blob, bytes or a byte source)");
}

/** Load a model: open the GGUF, build the tokenizer, load the weights. */
export async function load(input: ModelInput, opts: LoadOptions = {}): Promise<LatentModel> {
  const file = await openGGUF(input, opts);
  return LatentModel.fromFile(file, opts);
}

export interface StreamOptions extends GenerateOptions {
  /** the prompt is text to tokenize as is (default), or chat messages rendered with the model's chat template */
  readonly addSpecial?: boolean;
}

/** One path's logits against the reference path, for the doctor's path check. */
export interface PathCheckRow {
  readonly path: AttentionPath;
  readonly ms: number;
  /** max |Δ logit| over all positions */
  readonly maxAbsDiff: number;
  /** max over positions of KL(reference ‖ path), nats */
  readonly maxKl: number;
  /** positions whose argmax agrees with the reference */
  readonly top1Agree: number;
}

export interface PathCheck {
  readonly tokens: number;
  readonly referenceMs: number;
  readonly rows: readonly PathCheckRow[];
  /** the doctor's bar: every path within tolerance */
  readonly ok: boolean;
  readonly tolerance: number;
}

/** A loaded model with its tokenizer. */
export class LatentModel {
  private constructor(
    readonly file: GGUFFile,
    readonly config: ModelConfig,
    readonly model: DeepSeek2,
    readonly tokenizer: Tokenizer,
  ) {}

  /** A model from an already open GGUFFile. */
  static fromFile(file: GGUFFile, opts: LoadOptions = {}): LatentModel {
    const tokenizer = Tokenizer.fromMetadata(file.metadata);
    const { config, model } = loadModelFrom(
      file,
      (done, total) => opts.onProgress?.({ phase: "weights", done, total }),
      { ...opts },
    );
    return new LatentModel(file, config, model, tokenizer);
  }

  /** What `latent inspect` shows, as JSON (`latent-inspect/1`) and as text. */
  summary(): InspectSummary {
    return summarizeModel(this.file);
  }
  summaryText(): string {
    return formatSummary(this.summary());
  }

  /** Text → token ids (BOS added as the model's metadata asks, unless addSpecial is false). */
  tokenize(text: string, opts: { addSpecial?: boolean; parseSpecial?: boolean } = {}): number[] {
    return this.tokenizer.encode(text, opts);
  }
  /** Token ids → text. */
  detokenize(ids: readonly number[]): string {
    return this.tokenizer.decode(ids);
  }
  /** The text of one token, for display (control tokens as their names). */
  tokenText(id: number): string {
    return new TextDecoder().decode(this.tokenizer.tokenBytes(id));
  }
  /** Chat messages → prompt ids through the model's chat template; undefined when it has none. */
  chatTokens(messages: readonly ChatMessage[]): number[] | undefined {
    if (this.file.metadata.raw("tokenizer.chat_template") === undefined) return undefined;
    return this.tokenizer.encodeChat(messages);
  }

  /** A prompt as token ids: text tokenized, chat messages through the chat template, ids as given. */
  promptIds(prompt: string | readonly number[] | readonly ChatMessage[], addSpecial?: boolean): number[] {
    if (typeof prompt === "string") return this.tokenize(prompt, { addSpecial });
    if (prompt.length > 0 && typeof prompt[0] === "object") {
      const ids = this.chatTokens(prompt as readonly ChatMessage[]);
      if (ids === undefined) throw new UsageError("the model has no chat template: pass text instead of messages");
      return ids;
    }
    return [...(prompt as readonly number[])];
  }

  /**
   * Stream generated tokens: one TokenEvent per token (its text, logprob and — with `logprobs: n` — the top
   * alternatives); returns the GenerateResult. Yields to the event loop between tokens, so a page stays responsive
   * and an AbortSignal (`signal`) can stop it.
   */
  async *stream(
    prompt: string | readonly number[] | readonly ChatMessage[],
    opts: StreamOptions = {},
  ): AsyncGenerator<TokenEvent, GenerateResult, void> {
    const ids = this.promptIds(prompt, opts.addSpecial);
    const gen = generateTokens(this.model, this.tokenizer, ids, opts);
    for (;;) {
      const r = gen.next();
      if (r.done === true) return r.value;
      yield r.value;
      await yieldToEventLoop();
    }
  }

  /** Generate to the end; `onToken` sees every token as it comes. */
  async generate(
    prompt: string | readonly number[] | readonly ChatMessage[],
    opts: StreamOptions = {},
  ): Promise<GenerateResult> {
    const it = this.stream(prompt, opts);
    for (;;) {
      const r = await it.next();
      if (r.done === true) return r.value;
      opts.onToken?.(r.value);
    }
  }

  /** Next-token logits after every position of `tokens` (row i: given tokens[0..i]), on one attention path. */
  logitsAll(tokens: readonly number[], path: AttentionPath = "prefill", chunk = DEFAULT_PREFILL_CHUNK): Float32Array[] {
    return evaluateAll(this.model, tokens, { path, chunk }).map((r) => Float32Array.from(r));
  }
  /** Next-token logits after the last token. */
  logits(tokens: readonly number[], path: AttentionPath = "prefill"): Float32Array {
    const rows = this.logitsAll(tokens, path);
    return rows[rows.length - 1];
  }

  /**
   * The doctor's path check for this model: the same tokens through the reference path (whole sequence, no cache),
   * prefill (chunks over the latent cache) and decode (one absorbed step per token); logits compared.
   */
  pathCheck(tokens: readonly number[], opts: { chunk?: number; tolerance?: number } = {}): PathCheck {
    const chunk = opts.chunk ?? Math.max(1, Math.ceil(tokens.length / 2));
    const tol = opts.tolerance ?? 1e-3;
    let t = performance.now();
    const ref = evaluateAll(this.model, tokens, { path: "reference" });
    const referenceMs = performance.now() - t;
    const rows: PathCheckRow[] = [];
    for (const path of ["prefill", "decode"] as const) {
      t = performance.now();
      const got = evaluateAll(this.model, tokens, { path, chunk });
      const ms = performance.now() - t;
      let maxAbs = 0;
      let maxKl = 0;
      let agree = 0;
      for (let i = 0; i < ref.length; i++) {
        const a = ref[i];
        const b = got[i];
        let ia = 0;
        let ib = 0;
        for (let j = 0; j < a.length; j++) {
          maxAbs = Math.max(maxAbs, Math.abs(a[j] - b[j]));
          if (a[j] > a[ia]) ia = j;
          if (b[j] > b[ib]) ib = j;
        }
        if (ia === ib) agree++;
        const la = logSoftmaxRow(a);
        const lb = logSoftmaxRow(b);
        let kl = 0;
        for (let j = 0; j < la.length; j++) kl += Math.exp(la[j]) * (la[j] - lb[j]);
        maxKl = Math.max(maxKl, kl);
      }
      rows.push({ path, ms, maxAbsDiff: maxAbs, maxKl: Math.max(0, maxKl), top1Agree: agree });
    }
    return {
      tokens: tokens.length,
      referenceMs,
      rows,
      ok: rows.every((r) => r.maxAbsDiff <= tol && r.top1Agree === tokens.length),
      tolerance: tol,
    };
  }

  /** The model on WebGPU (navigator.gpu in a browser, Dawn in Node): see WebGpuSession. */
  webgpu(opts: WebGpuOptions = {}): Promise<WebGpuSession> {
    return WebGpuSession.create(this, opts);
  }

  close(): void {
    this.file.close();
  }
}

export interface WebGpuOptions {
  /** positions the session's sequence may reach (default: the model's context length, at most 4096) */
  readonly context?: number;
  /**
   * GPU memory budget in bytes (`--gpu-memory`): everything but the routed experts stays on the GPU, the experts that
   * do not fit stay in host memory and pass through a GPU expert cache (docs/webgpu.md)
   */
  readonly gpuMemory?: number;
}

/** Most tokens in one GPU step: a longer prefill chunk runs as several steps. */
const WEBGPU_STEP_TOKENS = 64;

/**
 * A loaded model on a WebGPU device of its own: the fused forward pass (weights resident in their GGUF blocks, one
 * sequence's latent cache on the GPU, one submission a step), generating through the engine's loop (the same sampler,
 * stop conditions and streaming text as LatentModel.stream). Greedy requests chain their steps on the GPU; sampled
 * ones read each step's logits back and sample on the host, so that a seed gives the same text as on the CPU.
 */
export class WebGpuSession {
  /** a stream is running: the session has one sequence's cache, so a second would overwrite it */
  private streaming = false;

  private constructor(
    /** the adapter's name */
    readonly adapter: string,
    /** positions the session holds */
    readonly context: number,
    /** the device's fixed subgroup size, which the subgroup kernels need (undefined: they are not used) */
    readonly subgroupSize: number | undefined,
    private readonly device: GPUDevice,
    private readonly gpu: GpuModel,
    private readonly m: LatentModel,
  ) {}

  static async create(m: LatentModel, opts: WebGpuOptions = {}): Promise<WebGpuSession> {
    const context = Math.min(opts.context ?? 4096, m.config.contextLength);
    if (!Number.isInteger(context) || context < 1)
      throw new UsageError(`context must be an integer ≥ 1, got ${opts.context}`);
    // the library's device: the adapter's limits, its optional features and, where it has one, its fixed subgroup size (the subgroup kernels need it)
    const info = await requestGpuDevice();
    if (opts.gpuMemory !== undefined && !(Number.isSafeInteger(opts.gpuMemory) && opts.gpuMemory > 0))
      throw new UsageError(`gpuMemory must be a whole number of bytes > 0, got ${opts.gpuMemory}`);
    let gpu: GpuModel;
    try {
      gpu = new GpuModel(new GpuRuntime(info), m.model, {
        slots: 1,
        context,
        maxTokens: WEBGPU_STEP_TOKENS,
        ...(opts.gpuMemory !== undefined ? { gpuMemory: opts.gpuMemory } : {}),
      });
    } catch (e) {
      // (a budget too small for the model, a weight type without a kernel: the device goes with the session)
      info.device.destroy();
      throw e;
    }
    return new WebGpuSession(info.adapterInfo, context, info.subgroupSize, info.device, gpu, m);
  }

  /** LatentModel.stream on the GPU, one at a time (the reference path, which keeps no cache, is not offered). */
  async *stream(
    prompt: string | readonly number[] | readonly ChatMessage[],
    opts: StreamOptions = {},
  ): AsyncGenerator<TokenEvent, GenerateResult, void> {
    if (this.streaming)
      throw new UsageError("this WebGPU session is generating already: it holds one sequence at a time");
    const gpu = this.gpu;
    const model: AsyncGenerateModel = {
      config: { ...this.m.config, contextLength: this.context },
      forward: async (tokens, pos) => (await gpu.prefill(0, tokens, pos, false)).at(-1)!,
      decodeGreedy: async (token, pos, steps) => {
        const chosen = await gpu.decodeGreedy([{ token, slot: 0, pos }], steps);
        return { tokens: [...chosen.tokens], logprobs: [...chosen.logprobs] };
      },
    };
    this.streaming = true;
    try {
      return yield* generateTokensAsync(model, this.m.tokenizer, this.m.promptIds(prompt, opts.addSpecial), opts);
    } finally {
      this.streaming = false;
    }
  }

  /** Generate to the end; `onToken` sees every token as it comes. */
  async generate(
    prompt: string | readonly number[] | readonly ChatMessage[],
    opts: StreamOptions = {},
  ): Promise<GenerateResult> {
    const it = this.stream(prompt, opts);
    for (;;) {
      const r = await it.next();
      if (r.done === true) return r.value;
      opts.onToken?.(r.value);
    }
  }

  /** Next-token logits after every position of `tokens` (prefill steps on the GPU). */
  async logitsAll(tokens: readonly number[]): Promise<Float32Array[]> {
    if (tokens.length > this.context)
      throw new UsageError(`${tokens.length} tokens, more than the session's context ${this.context}`);
    return (await this.gpu.prefill(0, tokens, 0, true)).map((r) => Float32Array.from(r));
  }

  /** Give the device back (the session is unusable after). */
  close(): void {
    this.device.destroy();
  }
}
