import type { ModelConfig } from "../model/config.js";
import type { DeepSeek2 } from "../model/deepseek2.js";
import type { AttentionPath } from "../model/mla.js";
import type { Tokenizer } from "../tokenizer/index.js";
import { LatentError, NonFiniteError, UsageError } from "../util/errors.js";
import { DEFAULT_PREFILL_CHUNK } from "./evaluate.js";
import { LatentCache } from "../model/cache.js";
import { createSampler, Sampler, type SampleResult, type SamplerOptions } from "./sampler.js";
import { yieldToEventLoop } from "../util/yield.js";
import {
  CHAIN_FIRST_STEPS,
  deviceChoice,
  type DevicePicks,
  type GreedyChainModel,
  type GreedyChunk,
  type PickDraw,
} from "./device-picks.js";
import { GeneratedText, type StopOptions } from "./text-stream.js";

/**
 * How the prompt and the generated tokens are run:
 * - "prefill": the prompt in chunks over a latent cache, then one absorbed decode step per token (default);
 * - "decode": the prompt one token at a time over the cache too (slow; checks the decode path alone);
 * - "reference": no cache, the whole sequence recomputed for every new token (O(n²), for checking only).
 */
export type GeneratePath = "prefill" | "decode" | "reference";

/**
 * What generation needs of a model: its config and a forward pass (a DeepSeek2/GlmDsa, or a wrapper in tests), and
 * optionally chained greedy decoding on the model's own device (the fused GPU pipeline, FusedGpuModel).
 */
export type GenerateModel = Pick<DeepSeek2, "config" | "forward"> & Partial<GreedyChainModel>;

/**
 * A model whose forward pass is asynchronous and keeps the one sequence's latent cache itself (a GPU session in a
 * browser, where nothing may block): the same loop drives it through generateTokensAsync.
 */
export interface AsyncGenerateModel extends DevicePicks {
  readonly config: ModelConfig;
  /**
   * Run `tokens` at positions pos, pos + 1, … (the cache holds the positions before pos; any after are overwritten)
   * and return the logits of the last one.
   */
  forward(tokens: readonly number[], pos: number): Promise<Float32Array>;
  /** GreedyChainModel.decodeGreedy over the model's own cache: step 0 feeds `token` at `pos` */
  decodeGreedy?(token: number, pos: number, steps: number, draws?: readonly PickDraw[]): Promise<GreedyChunk>;
}

/**
 * How the tokens after the first were chosen: "greedy-chained" — greedy steps chained on the model's device in chunks
 * (GreedyChainModel; the host reads back only the chosen ids and their logprobs), "draws-chained" — the same with each
 * step's token drawn on the device (the sampler's temperature and filters, a key a step from its seeded generator),
 * "host-sampling" — the logits of every step read back and sampled on the host.
 */
export type DecodeMode = "greedy-chained" | "draws-chained" | "host-sampling";

/** Most steps in one chained chunk of generate's (chunks start at CHAIN_FIRST_STEPS and double). */
export const CHAIN_MAX_STEPS = 32;

/** What generation needs of a tokenizer: end-of-generation ids and streaming detokenization. */
export type GenerateTokenizer = Pick<Tokenizer, "isEndOfGeneration" | "createDecoder">;

/** Anything that picks a token from a logits row (a Sampler). */
export interface TokenSampler {
  sample(logits: Float32Array): SampleResult;
}

export interface GenerateOptions extends SamplerOptions, StopOptions {
  /** most tokens to generate (default: until the context is full or a stop condition) */
  readonly maxTokens?: number;
  readonly path?: GeneratePath;
  /** prefill chunk length (default DEFAULT_PREFILL_CHUNK) */
  readonly chunk?: number;
  /** use this sampler instead of one built from the sampler options */
  readonly sampler?: TokenSampler;
  /** called once per generated token (not for the end-of-generation token that stops it) */
  readonly onToken?: (event: TokenEvent) => void;
  /** prompt positions done / total, after every prefill chunk */
  readonly onPrefill?: (done: number, total: number) => void;
  /** checked between tokens: when aborted, generation ends with finishReason "abort" */
  readonly signal?: AbortSignal;
  /**
   * Let a GreedyChainModel decode in chained chunks when sampling is greedy — the sampler is a Sampler (built from
   * these options, or given as `sampler`) with Sampler.isGreedy() (temperature 0) and no top alternatives (`logprobs`
   * 0) — on a cached path; default true. false: always sample on the host. The tokens are the same either way, their
   * logprobs too up to the device's rounding (the fused GPU pipeline sums in float32: within 1e-4); but a NaN logit,
   * which the host sampler rejects with a UsageError, is simply never chosen on the device.
   */
  readonly chainedGreedy?: boolean;
}

export interface TokenEvent {
  readonly id: number;
  /**
   * Text this token releases: "" while it ends in an incomplete UTF-8 sequence or could be the start of a stop
   * string; the held-back text comes with a later token (or in the final flush, see GenerateResult.text).
   */
  readonly text: string;
  /**
   * log-probability of the token under the model's unmodified distribution (for a token chosen by chained greedy
   * decoding, computed by the model's device: the host never sees its logits)
   */
  readonly logprob: number;
  /** top alternatives [id, logprob], when the `logprobs` option asked for them */
  readonly top?: readonly [number, number][];
  /** 0-based index among the generated tokens */
  readonly index: number;
}

export type FinishReason = "stop" | "length" | "abort";

export interface GenerateTimings {
  /** wall time of the prompt's forward pass(es) */
  readonly prefillMs: number;
  /** wall time of everything after it: decode steps and sampling */
  readonly decodeMs: number;
  /**
   * forward passes after the prompt's (one per generated token but the last); with chained greedy decoding, every
   * step of every chunk, including those computed past a stop
   */
  readonly decodeSteps: number;
  /** decode steps whose token was used (emitted, or the stop token): decodeSteps less those chained past a stop */
  readonly usedSteps: number;
  readonly promptTokensPerSecond: number;
  /** decode speed: the decode steps whose token was used (not those chained past a stop) / decodeMs (0 without any) */
  readonly tokensPerSecond: number;
}

export interface GenerateResult {
  /** generated ids, without the end-of-generation token that stopped generation */
  readonly tokens: number[];
  readonly logprobs: number[];
  /** top alternatives per generated token, when asked for */
  readonly top?: (readonly [number, number][])[];
  /**
   * the whole generated text (stop string excluded). The events' texts concatenated are a prefix of it; the rest is
   * what was still held back at the end (an incomplete UTF-8 tail, a partial stop-string match).
   */
  readonly text: string;
  /** "stop": an end-of-generation token or stop string; "length": maxTokens or the context length */
  readonly finishReason: FinishReason;
  /** what stopped it, for finishReason "stop" */
  readonly stoppedBy?: { readonly token: number } | { readonly string: string };
  readonly promptTokens: number;
  /** how the tokens after the first were chosen */
  readonly decode: DecodeMode;
  readonly timings: GenerateTimings;
}

/** What the generation loop asks of the driver that runs it on a model, between tokens. */
type LoopStep =
  | { readonly kind: "token"; readonly event: TokenEvent }
  /** the last position's logits after `tokens` at positions pos, pos + 1, … (path "reference": the whole sequence, no cache) */
  | { readonly kind: "forward"; readonly tokens: readonly number[]; readonly pos: number; readonly path: AttentionPath }
  /** decodeGreedy: `steps` steps chained on the model's device, step 0 feeding `token` at `pos` */
  | {
      readonly kind: "chain";
      readonly token: number;
      readonly pos: number;
      readonly steps: number;
      readonly draws?: readonly PickDraw[];
    };

/** The driver's answer: logits for "forward", the chain's choices for "chain", nothing for "token". */
type LoopInput = Float32Array | GreedyChunk | undefined;

/** What the loop needs to know of the model's device: the draws it takes, and whether it chains steps at all. */
interface LoopDevice {
  readonly picks: DevicePicks;
  readonly chains: boolean;
}

/**
 * The generation loop, the same for every model: it asks its driver for forward passes and chains (LoopStep) and
 * hands it the token events to pass on, so that a synchronous model (generateTokens) and an asynchronous one
 * (generateTokensAsync) run the same checks, choices, stop conditions and timings.
 */
function* generationLoop(
  cfg: ModelConfig,
  device: LoopDevice,
  tokenizer: GenerateTokenizer,
  promptTokens: readonly number[],
  opts: GenerateOptions,
): Generator<LoopStep, GenerateResult, LoopInput> {
  const path = opts.path ?? "prefill";
  if (path !== "prefill" && path !== "decode" && path !== "reference")
    throw new UsageError(`path must be prefill, decode or reference, got "${String(path)}"`);
  const maxTokens = opts.maxTokens ?? Infinity;
  if (!(maxTokens >= 0) || (maxTokens !== Infinity && !Number.isInteger(maxTokens)))
    throw new UsageError(`maxTokens must be an integer ≥ 0, got ${maxTokens}`);
  const chunk = opts.chunk ?? DEFAULT_PREFILL_CHUNK;
  if (!Number.isInteger(chunk) || chunk < 1) throw new UsageError(`chunk must be an integer ≥ 1, got ${chunk}`);
  if (promptTokens.length === 0) throw new UsageError("the prompt has no tokens");
  if (promptTokens.length > cfg.contextLength)
    throw new UsageError(
      `the prompt has ${promptTokens.length} tokens, more than the model's context length ${cfg.contextLength}`,
    );
  promptTokens.forEach((t, i) => {
    if (!Number.isInteger(t) || t < 0 || t >= cfg.nVocab)
      throw new UsageError(`prompt token ${t} at index ${i} is outside the vocabulary (0..${cfg.nVocab - 1})`);
  });
  // the repetition penalty counts the prompt's tokens as seen
  const sampler: TokenSampler = opts.sampler ?? createSampler({ promptTokens, ...opts });
  const chainable = opts.chainedGreedy !== false && path !== "reference" && sampler instanceof Sampler && device.chains;
  // greedy samplers, and those the model's device can draw for (a temperature, and top-k ≤ 64 with top-p / min-p where it filters)
  const choice = chainable ? deviceChoice(sampler, device.picks, "chain") : undefined;
  const decodeMode: DecodeMode =
    choice === undefined ? "host-sampling" : choice === "draw" ? "draws-chained" : "greedy-chained";
  const text = new GeneratedText(tokenizer, opts);

  const tokens: number[] = [];
  const logprobs: number[] = [];
  const tops: (readonly [number, number][])[] = [];
  let finishReason: FinishReason = "length";
  let stoppedBy: GenerateResult["stoppedBy"];

  const t0 = performance.now();
  const all = [...promptTokens];
  let logits: Float32Array;
  if (path === "reference") {
    logits = (yield { kind: "forward", tokens: all, pos: 0, path }) as Float32Array;
    opts.onPrefill?.(all.length, all.length);
  } else {
    const step = path === "decode" ? 1 : chunk;
    logits = new Float32Array(0);
    for (let i = 0; i < all.length; i += step) {
      logits = (yield { kind: "forward", tokens: all.slice(i, i + step), pos: i, path }) as Float32Array;
      opts.onPrefill?.(Math.min(i + step, all.length), all.length);
    }
  }
  const t1 = performance.now();
  let decodeSteps = 0;
  /** decode steps whose token was used (emitted or stopped on): the chained steps computed past a stop are not */
  let usedSteps = 0;
  /** ids (and their logprobs) chosen ahead by the last chained chunk, not yet emitted (ahead.tokens[aheadAt] is the next) */
  let ahead: GreedyChunk = { tokens: [], logprobs: [] };
  let aheadAt = 0;
  let chainSteps = CHAIN_FIRST_STEPS;

  while (tokens.length < maxTokens) {
    if (opts.signal?.aborted === true) {
      finishReason = "abort";
      break;
    }
    const fromDecode = tokens.length > 0;
    const chained = aheadAt < ahead.tokens.length;
    const r: SampleResult = chained
      ? { token: ahead.tokens[aheadAt], logprob: ahead.logprobs[aheadAt++] }
      : sampler.sample(logits);
    // the device marks a step whose logits the host sampler would have refused (NaN, +Infinity, all -Infinity)
    if (chained && Number.isNaN(r.logprob))
      throw new NonFiniteError(
        `the logits of decode step ${tokens.length} contain NaN or +Infinity, or are all -Infinity (chained greedy decoding on the model's device)`,
      );
    if (fromDecode) usedSteps++;
    if (text.endsBefore(r.token)) {
      finishReason = "stop";
      stoppedBy = { token: r.token };
      break;
    }
    tokens.push(r.token);
    logprobs.push(r.logprob);
    if (r.top !== undefined) tops.push(r.top);
    const { piece, hit } = text.push(r.token);
    yield {
      kind: "token",
      event: {
        id: r.token,
        text: piece,
        logprob: r.logprob,
        ...(r.top !== undefined ? { top: r.top } : {}),
        index: tokens.length - 1,
      },
    };
    if (hit !== undefined) {
      finishReason = "stop";
      stoppedBy = { string: hit };
      break;
    }
    // prompt + generated tokens may fill the context, no more
    if (tokens.length >= maxTokens || promptTokens.length + tokens.length >= cfg.contextLength) break;
    all.push(r.token);
    const pos = all.length - 1;
    if (choice !== undefined) {
      // r.token is in the cache already when the last chunk chose ids past it; otherwise the next chunk feeds it
      if (aheadAt >= ahead.tokens.length) {
        const allowed = Math.min(maxTokens, cfg.contextLength - promptTokens.length) - tokens.length;
        const steps = Math.min(chainSteps, allowed);
        // a draw's key a step, from the sampler's seeded generator: the same seed gives the same tokens
        const draws =
          choice === "draw" ? Array.from({ length: steps }, () => (sampler as Sampler).deviceDraw()) : undefined;
        ahead = (yield {
          kind: "chain",
          token: r.token,
          pos,
          steps,
          ...(draws !== undefined ? { draws } : {}),
        }) as GreedyChunk;
        aheadAt = 0;
        if (ahead.tokens.length !== steps || ahead.logprobs.length !== steps) {
          throw new LatentError(
            `decodeGreedy returned ${ahead.tokens.length} ids and ${ahead.logprobs.length} logprobs for ${steps} steps`,
          );
        }
        decodeSteps += steps;
        chainSteps = Math.min(CHAIN_MAX_STEPS, chainSteps * 2);
      }
      continue;
    }
    logits = (yield path === "reference"
      ? { kind: "forward", tokens: all, pos: 0, path }
      : { kind: "forward", tokens: [r.token], pos, path: "decode" }) as Float32Array;
    decodeSteps++;
  }
  // Unless a stop string cut the text, what was held back is part of it: an incomplete UTF-8 tail (as U+FFFD) and
  // a partial stop-string match. It comes in no event: streamers print result.text.slice(<length streamed>).
  text.end(stoppedBy !== undefined && "string" in stoppedBy);
  const t2 = performance.now();
  const prefillMs = t1 - t0;
  const decodeMs = t2 - t1;
  return {
    tokens,
    logprobs,
    ...(tops.length > 0 ? { top: tops } : {}),
    text: text.text,
    finishReason,
    ...(stoppedBy !== undefined ? { stoppedBy } : {}),
    promptTokens: promptTokens.length,
    decode: decodeMode,
    timings: {
      prefillMs,
      decodeMs,
      decodeSteps,
      usedSteps,
      promptTokensPerSecond: prefillMs > 0 ? (promptTokens.length * 1000) / prefillMs : 0,
      tokensPerSecond: usedSteps > 0 && decodeMs > 0 ? (usedSteps * 1000) / decodeMs : 0,
    },
  };
}

/**
 * Streaming generation: yields one TokenEvent per generated token and returns the GenerateResult. The caller drives
 * it (a server can yield to the event loop between tokens); `generate` is the plain callback form. `onToken` in the
 * options is ignored here.
 *
 * Only the last position's logits are computed: the prompt is prefilled (logits "last"), then each sampled token is
 * fed back one decode step at a time. Generation ends at an end-of-generation token, a stop string, maxTokens, or
 * when prompt + generated tokens reach the model's context length.
 *
 * Greedy sampling on a GreedyChainModel (see `chainedGreedy`): the first token still comes from the prompt's logits
 * through the sampler; the next ones are decoded on the model in chunks of CHAIN_FIRST_STEPS steps, doubling up to
 * CHAIN_MAX_STEPS, never more than maxTokens and the context still allow. Each chosen id then goes through the same
 * checks, events and stop conditions as a sampled one; ids computed past a stop are dropped.
 */
export function* generateTokens(
  model: GenerateModel,
  tokenizer: GenerateTokenizer,
  promptTokens: readonly number[],
  opts: GenerateOptions = {},
): Generator<TokenEvent, GenerateResult, void> {
  const loop = generationLoop(
    model.config,
    { picks: model, chains: model.decodeGreedy !== undefined },
    tokenizer,
    promptTokens,
    opts,
  );
  let cache: LatentCache | undefined;
  let input: LoopInput;
  for (;;) {
    const r = loop.next(input);
    if (r.done === true) return r.value;
    const step = r.value;
    input = undefined;
    if (step.kind === "token") yield step.event;
    else if (step.kind === "forward") {
      input =
        step.path === "reference"
          ? model.forward(step.tokens, undefined, { path: "reference", logits: "last" })
          : model.forward(step.tokens, (cache ??= new LatentCache(model.config)), { path: step.path, logits: "last" });
    } else
      input =
        step.draws !== undefined
          ? model.decodeGreedy!(step.token, cache!, step.steps, step.draws)
          : model.decodeGreedy!(step.token, cache!, step.steps);
  }
}

/**
 * generateTokens on an asynchronous model (its own cache, so no "reference" path): the same loop, awaiting each
 * forward pass and chain.
 */
export async function* generateTokensAsync(
  model: AsyncGenerateModel,
  tokenizer: GenerateTokenizer,
  promptTokens: readonly number[],
  opts: GenerateOptions = {},
): AsyncGenerator<TokenEvent, GenerateResult, void> {
  if (opts.path === "reference")
    throw new UsageError(
      "the reference path recomputes without a cache: a model that keeps its own cache runs prefill or decode",
    );
  const loop = generationLoop(
    model.config,
    { picks: model, chains: model.decodeGreedy !== undefined },
    tokenizer,
    promptTokens,
    opts,
  );
  let input: LoopInput;
  for (;;) {
    const r = loop.next(input);
    if (r.done === true) return r.value;
    const step = r.value;
    input = undefined;
    if (step.kind === "token") yield step.event;
    else if (step.kind === "forward") input = await model.forward(step.tokens, step.pos);
    else input = await model.decodeGreedy!(step.token, step.pos, step.steps, step.draws);
  }
}

/**
 * Generate from `promptTokens`, calling `opts.onToken` as tokens arrive; resolves to the whole result. Yields to the
 * event loop between tokens so output streams and `opts.signal` can abort.
 */
export async function generate(
  model: GenerateModel,
  tokenizer: GenerateTokenizer,
  promptTokens: readonly number[],
  opts: GenerateOptions = {},
): Promise<GenerateResult> {
  const it = generateTokens(model, tokenizer, promptTokens, opts);
  for (;;) {
    const r = it.next();
    if (r.done === true) return r.value;
    opts.onToken?.(r.value);
    await yieldToEventLoop();
  }
}

/** Synchronous form of `generate` (no yielding to the event loop). */
export function generateSync(
  model: GenerateModel,
  tokenizer: GenerateTokenizer,
  promptTokens: readonly number[],
  opts: GenerateOptions = {},
): GenerateResult {
  const it = generateTokens(model, tokenizer, promptTokens, opts);
  for (;;) {
    const r = it.next();
    if (r.done === true) return r.value;
    opts.onToken?.(r.value);
  }
}
