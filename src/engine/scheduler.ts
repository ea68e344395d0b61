import type { ModelConfig } from "../model/config.js";
import type { SequenceChunk } from "../model/deepseek2.js";
import { LatentError, NonFiniteError, UsageError } from "../util/errors.js";
import {
  CHAIN_FIRST_STEPS,
  deviceChoice,
  type BatchDevicePicks,
  type GreedyChunk,
  type GreedyPick,
  type PickDraw,
} from "./device-picks.js";
import { logSoftmax, topLogprobs } from "./logprobs.js";
import { PagedSequence, type PagePool } from "./paged-cache.js";
import { createSampler, type SampleResult, type Sampler, type SamplerOptions } from "./sampler.js";
import { GeneratedText, type StopOptions, type TextTokenizer } from "./text-stream.js";

/**
 * What the scheduler needs of a model: its config and a batched forward pass, and optionally the device's own choice of
 * tokens (BatchDevicePicks: picks in host steps, chained greedy or drawn steps).
 */
export interface BatchModel extends BatchDevicePicks {
  readonly config: ModelConfig;
  forwardBatch(seqs: readonly SequenceChunk[]): Float32Array[];
}

/** Sequences that may wait for a batch slot: a burst of a few hundred requests is queued, not refused. */
export const DEFAULT_MAX_QUEUE = 256;

/** What it needs of a tokenizer: end-of-generation ids and streaming detokenization. */
export type SchedulerTokenizer = TextTokenizer;

export interface SchedulerOptions {
  /** most sequences running at once (decoding or prefilling); default 16 */
  readonly maxBatch?: number;
  /** most tokens per forward pass, decodes included; default 256 */
  readonly tokenBudget?: number;
  /** most prompt tokens one sequence prefills per step; default 128 */
  readonly prefillChunk?: number;
  /** most sequences waiting for a slot; submit throws QueueFullError beyond; default DEFAULT_MAX_QUEUE */
  readonly maxQueue?: number;
  /** positions a sequence may reach (≤ the model's context length); default the model's */
  readonly contextLength?: number;
  /** share full pages of identical prompt prefixes; default true */
  readonly prefixCaching?: boolean;
  /**
   * Most greedy decode steps chained on the model's device in one go (BatchModel.decodeGreedyBatch) when every
   * running sequence decodes greedily without top logprobs — or, on a model that chains draws, samples as the device
   * draws (Sampler.drawsOnDevice) — and nobody waits to be admitted; chains start at 4 steps and double while the
   * batch stays chainable. 0: never chain. Default 8.
   */
  readonly chainSteps?: number;
  /** after every step (for metrics); a chain of K steps reports K steps, each with 1/K of the chain's time */
  readonly onStep?: (info: StepInfo) => void;
  /**
   * A count of the I/O events the caller has seen (a server: connections and requests). Before a step, the scheduler
   * yields to the event loop again while it changes (up to IO_SETTLE_TURNS times): Node accepts one connection per
   * loop iteration, and a step blocks the loop, so without this a burst of N requests is admitted one per step over
   * N steps — each a slow host-sampled step, with no chain until the whole burst is in.
   */
  readonly ioActivity?: () => number;
}

/** Most extra event-loop turns before a step while I/O keeps arriving (each is short when nothing blocks the loop). */
const IO_SETTLE_TURNS = 256;

export interface StepInfo {
  readonly sequences: number;
  readonly tokens: number;
  readonly decodes: number;
  readonly ms: number;
  /** the length of the chain this step was part of (greedy steps chained on the device); absent for a host step */
  readonly chained?: number;
  /** which step of its chain this is (0 first) */
  readonly chainStep?: number;
}

export interface SequenceRequest extends StopOptions {
  /** prompt token ids (used as given) */
  readonly prompt: readonly number[];
  /** most tokens to generate; 0: only run the prompt (echo, prompt logprobs) */
  readonly maxTokens: number;
  readonly sampling?: SamplerOptions;
  /** log-probabilities of the prompt tokens with this many top alternatives each (0: only the token's own) */
  readonly promptLogprobs?: number;
}

export interface PromptLogprob {
  readonly token: number;
  readonly logprob: number;
  /** 1-based rank of the token in the distribution */
  readonly rank: number;
  readonly top: [number, number][];
}

export interface TokenOut {
  readonly id: number;
  /** text released by this token (held back while a stop string may start or UTF-8 is incomplete) */
  readonly text: string;
  readonly logprob: number;
  readonly top?: [number, number][];
  readonly index: number;
}

export type SequenceFinish = "stop" | "length" | "abort" | "error";

export interface SequenceResult {
  readonly tokens: readonly number[];
  readonly text: string;
  /** text not released in token events (the held-back tail); text = concatenated events + tail */
  readonly tail: string;
  readonly finishReason: SequenceFinish;
  readonly promptTokens: number;
  /** positions taken from the prefix cache (first admission) */
  readonly cachedTokens: number;
  readonly error?: Error;
}

export interface SequenceEvents {
  /** the prompt's log-probabilities, position 0 first (null: nothing predicts the first token) */
  onPromptLogprobs?(entries: (PromptLogprob | null)[]): void;
  onToken?(token: TokenOut): void;
  onFinish(result: SequenceResult): void;
}

export class QueueFullError extends LatentError {}

let nextId = 1;

/** A submitted sequence; `cancel` it through the scheduler. */
export class Sequence {
  readonly id = nextId++;
  readonly tokens: number[];
  readonly promptLen: number;
  generated = 0;
  cache: PagedSequence | undefined;
  state: "waiting" | "running" | "done" = "waiting";
  /**
   * Held by its sink (a stream whose client stopped reading): it is given no new work — no decode, no prefill, no
   * admission — but keeps its pages, its batch slot and its place in arrival order until `Scheduler.release`.
   */
  held = false;
  cachedTokens = -1;
  /** ended on a stop string: the held-back text is dropped, not flushed */
  stoppedByString = false;
  readonly sampler: Sampler;
  readonly text: GeneratedText;
  promptLp: (PromptLogprob | null)[] | undefined;
  constructor(
    readonly arrival: number,
    readonly req: SequenceRequest,
    readonly events: SequenceEvents,
    tokenizer: TextTokenizer,
  ) {
    this.tokens = [...req.prompt];
    this.promptLen = req.prompt.length;
    this.sampler = createSampler(req.sampling ?? {});
    this.text = new GeneratedText(tokenizer, req);
    if (req.promptLogprobs !== undefined) this.promptLp = [null];
  }
  /** prompt log-probabilities still to collect: every prompt row's logits are needed */
  get wantsAll(): boolean {
    return this.promptLp !== undefined && this.promptLp.length < this.promptLen;
  }
}

export interface SchedulerStats {
  readonly waiting: number;
  readonly running: number;
  /** sequences held by their sinks (counted in waiting or running as well) */
  readonly held: number;
  readonly steps: number;
  readonly preemptions: number;
}

/**
 * Continuous batching over a paged latent cache. Each step makes one batch: a decode token for every running
 * sequence that is generating, then prompt chunks (≤ prefillChunk each, ≤ tokenBudget in all) of the sequences still
 * prefilling, then newly admitted ones (first come, first served, while fewer than maxBatch run and pages last). When
 * pages run out the latest-arrived running sequence is preempted: its pages go back (full ones stay in the prefix
 * cache) and it is recomputed from its prompt + generated tokens when readmitted. A held sequence (`hold`: its sink
 * cannot take more) sits out every step until `release`, keeping its pages and slot unless a queued one needs them.
 * The forward pass is synchronous; `start` runs steps with setImmediate between them so I/O is served between steps.
 */
export class Scheduler {
  readonly maxBatch: number;
  readonly tokenBudget: number;
  readonly prefillChunk: number;
  readonly maxQueue: number;
  readonly contextLength: number;
  readonly prefixCaching: boolean;
  readonly chainSteps: number;
  /** the length of the next chain (before the caps of its members' max tokens and the context) */
  private chainNext: number;
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private arrivals = 0;
  private steps = 0;
  private preemptions = 0;
  private scheduled = false;
  private idleWaiters: (() => void)[] = [];

  constructor(
    readonly model: BatchModel,
    readonly tokenizer: SchedulerTokenizer,
    readonly pool: PagePool,
    private readonly opts: SchedulerOptions = {},
  ) {
    const int = (name: string, v: number, min: number): number => {
      if (!Number.isInteger(v) || v < min) throw new UsageError(`${name} must be an integer ≥ ${min}, got ${v}`);
      return v;
    };
    this.maxBatch = int("maxBatch", opts.maxBatch ?? 16, 1);
    this.tokenBudget = int("tokenBudget", opts.tokenBudget ?? 256, 1);
    this.prefillChunk = int("prefillChunk", opts.prefillChunk ?? 128, 1);
    this.maxQueue = int("maxQueue", opts.maxQueue ?? DEFAULT_MAX_QUEUE, 0);
    this.contextLength = Math.min(
      int("contextLength", opts.contextLength ?? model.config.contextLength, 1),
      model.config.contextLength,
    );
    this.prefixCaching = opts.prefixCaching ?? true;
    this.chainSteps = int("chainSteps", opts.chainSteps ?? 8, 0);
    this.chainNext = Math.min(CHAIN_FIRST_STEPS, this.chainSteps);
  }

  stats(): SchedulerStats {
    const held = this.running.filter((s) => s.held).length + this.waiting.filter((s) => s.held).length;
    return {
      waiting: this.waiting.length,
      running: this.running.length,
      held,
      steps: this.steps,
      preemptions: this.preemptions,
    };
  }

  /** Positions the pool holds in all. */
  get kvCapacity(): number {
    return this.pool.numPages * this.pool.pageSize;
  }

  /**
   * Queue a sequence. Throws UsageError for a request that can never run (empty or too long a prompt, ids outside
   * the vocabulary, bad sampling options) and QueueFullError when maxQueue sequences already wait.
   */
  submit(req: SequenceRequest, events: SequenceEvents): Sequence {
    const V = this.model.config.nVocab;
    if (req.prompt.length === 0) throw new UsageError("the prompt has no tokens");
    req.prompt.forEach((t, i) => {
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new UsageError(`prompt token ${t} at index ${i} is outside the vocabulary (0..${V - 1})`);
    });
    if (req.prompt.length > this.contextLength)
      throw new UsageError(
        `the prompt has ${req.prompt.length} tokens, more than the context length ${this.contextLength}`,
      );
    if (req.prompt.length > this.kvCapacity)
      throw new UsageError(
        `the prompt has ${req.prompt.length} tokens, more than the KV cache holds (${this.kvCapacity})`,
      );
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 0)
      throw new UsageError(`maxTokens must be an integer ≥ 0, got ${req.maxTokens}`);
    if (this.waiting.length >= this.maxQueue)
      throw new QueueFullError(`the queue is full (${this.maxQueue} requests waiting)`);
    const seq = new Sequence(this.arrivals++, req, events, this.tokenizer);
    this.waiting.push(seq);
    this.kick();
    return seq;
  }

  /** End a sequence now (client gone): its pages go back at once; onFinish gets "abort". */
  cancel(seq: Sequence): void {
    if (seq.state === "done") return;
    this.finish(seq, "abort");
    // the loop may be asleep with only held sequences left; the pages just freed may let a waiting one in
    this.kick();
  }

  /**
   * Stop giving a sequence new work while its sink cannot take more (a stream's socket reports backpressure). Tokens
   * already computed (the rest of a chain) are still delivered; it keeps its pages and slot. Idempotent.
   */
  hold(seq: Sequence): void {
    if (seq.state === "done") return;
    seq.held = true;
  }

  /** Its sink takes tokens again: schedule it from the next step on. */
  release(seq: Sequence): void {
    if (seq.state === "done" || !seq.held) return;
    seq.held = false;
    this.kick();
  }

  /** Resolves when nothing is waiting or running. */
  idle(): Promise<void> {
    if (this.waiting.length === 0 && this.running.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** I/O seen so far: the caller's events and the requests submitted */
  private activity(): number {
    return (this.opts.ioActivity?.() ?? 0) + this.arrivals;
  }

  private kick(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    let seen = this.activity();
    const settle = (turns: number): void => {
      const now = this.activity();
      if (now === seen || turns === 0) return this.run();
      seen = now;
      setImmediate(() => settle(turns - 1));
    };
    setImmediate(() => settle(IO_SETTLE_TURNS));
  }

  /** One step (after the event loop has served the I/O that was waiting), then the next kick. */
  private run(): void {
    this.scheduled = false;
    let worked = true;
    try {
      worked = this.step();
    } catch (e) {
      // a bug must not take the process down: fail what is running, keep serving
      const err = e instanceof Error ? e : new Error(String(e));
      for (const seq of [...this.running]) this.finish(seq, "error", err);
    }
    // Nothing could run while sequences are held: sleep instead of spinning; release, cancel and submit kick again.
    if (!worked && (this.running.some((s) => s.held) || this.waiting.some((s) => s.held))) return;
    if (this.waiting.length > 0 || this.running.length > 0) this.kick();
    else {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  private remove(list: Sequence[], seq: Sequence): boolean {
    const i = list.indexOf(seq);
    if (i < 0) return false;
    list.splice(i, 1);
    return true;
  }

  private finish(seq: Sequence, reason: SequenceFinish, error?: Error): void {
    if (seq.state === "done") return;
    this.remove(this.running, seq) || this.remove(this.waiting, seq);
    seq.state = "done";
    seq.cache?.free();
    seq.cache = undefined;
    const tail = seq.text.end(seq.stoppedByString);
    const result: SequenceResult = {
      tokens: seq.tokens.slice(seq.promptLen),
      text: seq.text.text,
      tail,
      finishReason: reason,
      promptTokens: seq.promptLen,
      cachedTokens: Math.max(0, seq.cachedTokens),
      ...(error !== undefined ? { error } : {}),
    };
    try {
      seq.events.onFinish(result);
    } catch {
      // a listener's failure must not stop the engine
    }
  }

  /** Give a running sequence's pages back and queue it for recompute, ahead of new arrivals. */
  private preempt(seq: Sequence): void {
    this.remove(this.running, seq);
    seq.cache?.free();
    seq.cache = undefined;
    seq.state = "waiting";
    this.preemptions++;
    let i = 0;
    while (i < this.waiting.length && this.waiting[i].arrival < seq.arrival) i++;
    this.waiting.splice(i, 0, seq);
  }

  /**
   * A held sequence keeps its slot and pages only while nobody queued needs them: then the latest-arrived one gives
   * them back (preempted: its tokens are kept and recomputed when it is readmitted after its release). False: none.
   */
  private preemptHeld(): boolean {
    for (let i = this.running.length - 1; i >= 0; i--) {
      const r = this.running[i];
      if (r.held) {
        this.preempt(r);
        return true;
      }
    }
    return false;
  }

  /** Reserve pages for `tokens`, preempting later arrivals outside the batch while short. */
  private reserve(seq: Sequence, tokens: readonly number[], inBatch: ReadonlySet<Sequence>): boolean {
    for (;;) {
      if (seq.cache!.reserve(tokens)) return true;
      let victim: Sequence | undefined;
      for (let i = this.running.length - 1; i >= 0; i--) {
        const r = this.running[i];
        if (r !== seq && !inBatch.has(r) && r.arrival > seq.arrival) {
          victim = r;
          break;
        }
      }
      if (victim === undefined) return false;
      this.preempt(victim);
    }
  }

  /** One batch through the model (or a chain of greedy decode steps). Returns false when there was nothing to do. */
  step(): boolean {
    if (this.chain()) return true;
    this.chainNext = Math.min(CHAIN_FIRST_STEPS, this.chainSteps);
    const chunks: SequenceChunk[] = [];
    const members: Sequence[] = [];
    const inBatch = new Set<Sequence>();
    let budget = this.tokenBudget;
    let decodes = 0;
    const add = (seq: Sequence, tokens: number[], path: "prefill" | "decode"): void => {
      const end = seq.cache!.length + tokens.length === seq.tokens.length;
      chunks.push({ tokens, cache: seq.cache!, path, logits: seq.wantsAll ? "all" : end ? "last" : "none" });
      members.push(seq);
      inBatch.add(seq);
      budget -= tokens.length;
    };
    const stuck = (seq: Sequence): void => {
      // it cannot get pages even with every later arrival preempted
      if (inBatch.size === 0 && this.running.length === 1) {
        this.finish(
          seq,
          seq.generated > 0 ? "length" : "error",
          seq.generated > 0 ? undefined : new LatentError("the KV cache cannot hold this sequence"),
        );
      } else this.preempt(seq);
    };

    // 1. decodes of running sequences, oldest first
    for (const seq of [...this.running]) {
      if (seq.state !== "running" || seq.held || inBatch.has(seq)) continue;
      const remaining = seq.tokens.length - seq.cache!.length;
      if (!(seq.generated > 0 && remaining === 1)) continue;
      const toks = [seq.tokens[seq.tokens.length - 1]];
      if (this.reserve(seq, toks, inBatch)) {
        add(seq, toks, "decode");
        decodes++;
      } else stuck(seq);
    }
    // 2. prompt chunks of running sequences
    for (const seq of [...this.running]) {
      if (budget <= 0) break;
      if (seq.state !== "running" || seq.held || inBatch.has(seq)) continue;
      const at = seq.cache!.length;
      const n = Math.min(seq.tokens.length - at, this.prefillChunk, budget);
      if (n <= 0) continue;
      const toks = seq.tokens.slice(at, at + n);
      if (this.reserve(seq, toks, inBatch)) add(seq, toks, "prefill");
      else stuck(seq);
    }
    // 3. admissions
    // (a held sequence, preempted while held, waits in the queue without blocking those behind it)
    for (;;) {
      const next = this.waiting.findIndex((s) => !s.held);
      if (!(budget > 0 && next >= 0)) break;
      if (this.running.length >= this.maxBatch) {
        // the preempted one goes back into the queue by arrival: look for the next one again
        if (this.preemptHeld()) continue;
        break;
      }
      const seq = this.waiting[next];
      const cache = new PagedSequence(this.pool);
      const canShare = this.prefixCaching && seq.promptLp === undefined;
      const adopted = canShare ? cache.adoptPrefix(seq.tokens, 1) : 0;
      if (seq.cachedTokens < 0) seq.cachedTokens = adopted;
      const n = Math.min(seq.tokens.length - adopted, this.prefillChunk, budget);
      const toks = seq.tokens.slice(adopted, adopted + n);
      if (!cache.reserve(toks)) {
        cache.free();
        if (this.preemptHeld()) continue;
        if (inBatch.size === 0 && this.running.length === 0) {
          this.waiting.splice(next, 1);
          seq.state = "running";
          this.finish(seq, "error", new LatentError("the KV cache cannot hold this sequence"));
          continue;
        }
        break;
      }
      this.waiting.splice(next, 1);
      this.pool.countPrefix(cache.prefixLookup.queried, cache.prefixLookup.hit);
      seq.cache = cache;
      seq.state = "running";
      let i = this.running.length;
      while (i > 0 && this.running[i - 1].arrival > seq.arrival) i--;
      this.running.splice(i, 0, seq);
      add(seq, toks, seq.generated > 0 && toks.length === 1 && cache.length > 0 ? "decode" : "prefill");
    }
    if (chunks.length === 0) return false;

    const t0 = performance.now();
    // sequences whose chunk ends their input: the choice made on the device when the model can make it (greedy, or a
    // draw the model takes)
    const picks =
      this.model.forwardBatchPicks !== undefined
        ? members.map((seq, i): boolean | PickDraw => {
            if (chunks[i].logits !== "last") return false;
            const choice = deviceChoice(seq.sampler, this.model, "pick");
            return choice === "draw" ? seq.sampler.deviceDraw() : choice === "greedy";
          })
        : undefined;
    let outs: (Float32Array | GreedyPick)[];
    try {
      outs = picks?.some((p) => p !== false)
        ? this.model.forwardBatchPicks!(chunks, picks)
        : this.model.forwardBatch(chunks);
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      for (const seq of members) this.finish(seq, "error", err);
      return true;
    }
    this.steps++;
    const V = this.model.config.nVocab;
    members.forEach((seq, i) => {
      if (seq.state !== "running") return;
      const out = outs[i];
      const chunk = chunks[i];
      const start = seq.cache!.length - chunk.tokens.length;
      try {
        if (!(out instanceof Float32Array)) {
          if (seq.cache!.length === seq.tokens.length) this.takePick(seq, out);
          return;
        }
        if (chunk.logits === "all" && seq.promptLp !== undefined) {
          for (let j = 0; j < chunk.tokens.length; j++) {
            const q = start + j; // row j predicts position q + 1
            if (q + 1 >= seq.promptLen || seq.promptLp.length !== q + 1) continue;
            const lp = logSoftmax(out.subarray(j * V, (j + 1) * V));
            const tok = seq.tokens[q + 1];
            const x = lp[tok];
            let rank = 1;
            for (let t = 0; t < V; t++) if (lp[t] > x) rank++;
            seq.promptLp.push({ token: tok, logprob: x, rank, top: topLogprobs(lp, seq.req.promptLogprobs ?? 0) });
          }
          if (seq.promptLp.length === seq.promptLen) seq.events.onPromptLogprobs?.(seq.promptLp);
        }
        if (seq.cache!.length === seq.tokens.length) {
          const rows = out.length / V;
          this.advance(seq, out.subarray((rows - 1) * V, rows * V));
        }
      } catch (e) {
        this.finish(seq, "error", e instanceof Error ? e : new Error(String(e)));
      }
    });
    this.opts.onStep?.({
      sequences: chunks.length,
      tokens: chunks.reduce((a, c) => a + c.tokens.length, 0),
      decodes,
      ms: performance.now() - t0,
    });
    return true;
  }

  /**
   * When every running sequence decodes one token greedily (no top logprobs, no prompt logprobs pending) — or, on a
   * model that chains draws, is drawn on the device (a PickDraw a token, keys from its seeded sampler in token order) —
   * and nobody could be admitted, run a chain of steps on the model's device and apply its tokens one step at a time,
   * as host-sampled steps would: the device's argmax is the greedy sampler's (ties to the lowest id), a sequence stops
   * where the host would (its later tokens are dropped; its cache, which ran past them, is freed with it), and a step
   * whose logits the sampler would refuse (NaN logprob) ends its sequence with an error. False: take a normal step.
   */
  private chain(): boolean {
    const model = this.model;
    // held sequences sit the chain out, as they sit out host steps
    const batch = this.running.filter((s) => !s.held);
    if (model.decodeGreedyBatch === undefined || this.chainSteps === 0 || batch.length === 0) return false;
    if (this.waiting.some((s) => !s.held) && this.running.length < this.maxBatch) return false;
    // a sequence drawn in chains must be drawn on the device in host steps too (picksDraw): the device's draws are not
    // the host sampler's, and its tokens must not depend on when chains run
    const drawsChain = model.picksDraw === true;
    // as long as the sequence furthest from its token limit wants (one nearer its limit rides along, its tokens past
    // the limit dropped: otherwise sequences that end a token apart would each cost a host step), and never past any
    // sequence's context
    let room = this.chainNext;
    let wanted = 0;
    for (const seq of batch) {
      const decoding = seq.state === "running" && seq.generated > 0 && seq.tokens.length - seq.cache!.length === 1;
      const choice = deviceChoice(seq.sampler, model, "chain");
      if (!decoding || seq.wantsAll || choice === undefined || (choice === "draw" && !drawsChain)) return false;
      room = Math.min(room, this.contextLength - seq.tokens.length);
      wanted = Math.max(wanted, seq.req.maxTokens - seq.generated);
    }
    const steps = Math.min(room, wanted);
    if (steps < 2) return false;
    let pages = 0;
    for (const seq of batch) pages += seq.cache!.pagesNeeded(steps);
    if (pages > this.pool.available) return false;
    for (const seq of batch) seq.cache!.reserveChain(seq.tokens[seq.tokens.length - 1], steps);

    const t0 = performance.now();
    let chosen: GreedyChunk[];
    try {
      // a draw for every sequence and step where any sequence is drawn (greedy ones at temperature 0), each sequence's
      // keys in its token order
      const draws = batch.some((seq) => !seq.sampler.isGreedy())
        ? Array.from({ length: steps }, () =>
            batch.map(
              (seq): PickDraw => (seq.sampler.isGreedy() ? { temperature: 0, key: 0 } : seq.sampler.deviceDraw()),
            ),
          ).flat()
        : undefined;
      const starts = batch.map((seq) => ({ token: seq.tokens[seq.tokens.length - 1], cache: seq.cache! }));
      chosen =
        draws !== undefined ? model.decodeGreedyBatch(starts, steps, draws) : model.decodeGreedyBatch(starts, steps);
      if (
        chosen.length !== batch.length ||
        chosen.some((c) => c.tokens.length !== steps || c.logprobs.length !== steps)
      ) {
        throw new LatentError(
          `decodeGreedyBatch returned ${chosen.map((c) => c.tokens.length).join(", ")} ids for ${batch.length} sequences × ${steps} steps`,
        );
      }
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      for (const seq of batch) this.finish(seq, "error", err);
      return true;
    }
    const ms = performance.now() - t0;
    this.steps += steps;
    this.chainNext = Math.min(this.chainSteps, steps * 2);
    for (let k = 0; k < steps; k++) {
      batch.forEach((seq, i) => {
        if (seq.state !== "running") return;
        const token = chosen[i].tokens[k];
        const logprob = chosen[i].logprobs[k];
        try {
          // the input of step k is now known: its page can be published for prefix caching, as a host step would
          if (k > 0) seq.cache!.record([chosen[i].tokens[k - 1]]);
          this.takePick(seq, { token, logprob });
        } catch (e) {
          this.finish(seq, "error", e instanceof Error ? e : new Error(String(e)));
        }
      });
      this.opts.onStep?.({
        sequences: batch.length,
        tokens: batch.length,
        decodes: batch.length,
        ms: ms / steps,
        chained: steps,
        chainStep: k,
      });
    }
    return true;
  }

  /**
   * The sequence has run all its tokens and the device chose the next one greedily (a chained step, or a host step's
   * pick): take it as advance() would, a NaN logprob standing for logits the host sampler refuses.
   */
  private takePick(seq: Sequence, pick: GreedyPick): void {
    if (seq.generated >= seq.req.maxTokens) return this.finish(seq, "length");
    if (Number.isNaN(pick.logprob))
      throw new NonFiniteError(
        `the logits of decode step ${seq.tokens.length} contain NaN or +Infinity, or are all -Infinity (the token chosen on the model's device)`,
      );
    this.accept(seq, pick);
  }

  /** The sequence has run all its tokens: sample the next one from the last row. */
  private advance(seq: Sequence, logits: Float32Array): void {
    if (seq.generated >= seq.req.maxTokens) return this.finish(seq, "length");
    this.accept(seq, seq.sampler.sample(logits));
  }

  /** Take a sampled token: stop on end-of-generation or a stop token, else emit it and stop on a string or a limit. */
  private accept(seq: Sequence, r: SampleResult): void {
    if (seq.text.endsBefore(r.token)) return this.finish(seq, "stop");
    seq.tokens.push(r.token);
    seq.generated++;
    const { piece, hit } = seq.text.push(r.token);
    seq.events.onToken?.({
      id: r.token,
      text: piece,
      logprob: r.logprob,
      ...(r.top !== undefined ? { top: r.top } : {}),
      index: seq.generated - 1,
    });
    if (seq.state !== "running") return; // cancelled from the listener
    if (hit !== undefined) {
      seq.stoppedByString = true;
      return this.finish(seq, "stop");
    }
    if (seq.generated >= seq.req.maxTokens || seq.tokens.length >= this.contextLength)
      return this.finish(seq, "length");
  }
}
