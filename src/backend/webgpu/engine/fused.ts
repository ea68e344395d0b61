/**
 * `FusedGpuModel`: the fused WebGPU pipeline (GpuModel: every layer of a step in one recorded, replayed pass) behind
 * the engine's synchronous forward(tokens, cache, opts), so `generate` — and `latent run --backend webgpu` — drive it
 * like any model, and behind the scheduler's forwardBatch (`latent serve`). The device, the weights and the latent
 * caches live in a worker thread that loads the model from its file itself (the caller keeps only the config); each
 * call blocks until the worker has the step's logits. A sequence's position is its store's length, which a step
 * advances as the CPU forward pass does. Two ways to hold the latents: a GPU cache slot per running sequence (`run`,
 * any store), or — with `pages` — GPU caches that mirror a paged CPU pool page for page (`serve`): a token's rows are
 * found through its store's page ids, so pages shared by prefix caching share their GPU latents too (the CPU pages
 * themselves stay empty).
 *
 * Greedy decoding can also stay on the GPU (`decodeGreedy`): a run of steps chained on the device, each step's argmax
 * fed to the next without a round trip, and only the chosen ids and their logprobs (computed on the GPU) read back.
 */
import type { ModelConfig } from "../../../model/config.js";
import type { LatentStore } from "../../../model/cache.js";
import type { GreedyChainModel, GreedyChunk, GreedyPick, PickDraw } from "../../../engine/device-picks.js";
import type { SequenceChunk } from "../../../model/deepseek2.js";
import type { StepToken, WarmShapes } from "../graph/gpu-model.js";
import { LatentError } from "../../../util/errors.js";
import { BlockingWorker, newChannel, type BlockingChannel } from "../core/blocking-worker.js";
import type { GpuActivations } from "../core/runtime.js";
import { NoGpuError } from "../core/device.js";
import { DEVICE_DRAW_TOPK_MAX } from "../../../engine/sampler.js";
import { sampleTopKFits } from "../kernels/sample/sample.js";

/** Refuses a PickDraw the GPU cannot make as the host Sampler would (`filtered`: whether its filters apply here). */
function checkDraw(d: PickDraw, filtered: boolean, what: string): void {
  const k = d.topK ?? 0;
  const p = d.topP ?? 1;
  const m = d.minP ?? 0;
  if (
    !(Number.isFinite(d.temperature) && d.temperature >= 0 && Number.isInteger(d.key) && d.key >= 0 && d.key < 2 ** 32)
  )
    throw new LatentError(`${what} needs a temperature ≥ 0 and a 32-bit key`);
  if (
    !(
      Number.isInteger(k) &&
      k >= 0 &&
      k <= (filtered ? DEVICE_DRAW_TOPK_MAX : 0) &&
      p > 0 &&
      p <= 1 &&
      m >= 0 &&
      m < 1 &&
      (filtered || (p >= 1 && m <= 0))
    )
  ) {
    throw new LatentError(
      `${what}: top-k ${k}, top-p ${p}, min-p ${m} are not drawn on this GPU (${filtered ? `top-k 0..${DEVICE_DRAW_TOPK_MAX} with any top-p in (0, 1] and min-p in [0, 1)` : "a temperature alone"})`,
    );
  }
}

export type FusedRequest =
  | { op: "device" }
  | {
      op: "load";
      path: string;
      slots: number;
      context: number;
      maxTokens: number;
      pages: FusedOptions["pages"];
      gpuMemory: number | undefined;
      warm: WarmShapes | undefined;
      allowNonFinite: boolean;
    }
  | { op: "logits"; buffer: SharedArrayBuffer }
  | { op: "step"; tokens: StepToken[] }
  /**
   * a step with each logits row's greedy choice, or with `draws` each row's token drawn at its temperature
   * (GpuModel.stepPicks): ids (u32) then logprobs per row, then the rows when `logits`
   */
  | { op: "picks"; tokens: StepToken[]; logits: boolean; draws?: PickDraw[] }
  /**
   * chained greedy decode steps of a batch (GpuModel.decodeGreedy): the chosen ids [steps × batch] as u32 at the start
   * of the shared logits, then their logprobs [steps × batch] as f32
   */
  | { op: "greedy"; tokens: StepToken[]; steps: number; draws?: PickDraw[] }
  /** the runtime's counts (GpuHostStats) as JSON */
  | { op: "stats" }
  | { op: "close" };

export interface FusedInit {
  readonly channel: BlockingChannel;
  readonly logits: SharedArrayBuffer;
  /** Float64 [bytes loaded, bytes in all] while the worker loads the weights, then [kernels compiled, kernels to compile] */
  readonly progress: SharedArrayBuffer;
  readonly checkWrites: boolean;
  readonly activations: GpuActivations;
}

/** The fused pipeline's GPU steps so far, their dispatches, and the host time spent encoding and submitting them (ms). */
export interface GpuHostStats {
  readonly steps: number;
  readonly dispatches: number;
  readonly encodeMs: number;
  readonly submitMs: number;
  /** with streamed experts (gpuMemory): the expert cache's counts (graph/expert-cache.ts ExpertCacheStats) */
  readonly expertCache?: {
    readonly lookups: number;
    readonly hits: number;
    readonly uploads: number;
    readonly uploadedBytes: number;
  };
}

export interface FusedOptions {
  /** sequences with a GPU cache slot at once (default 1) */
  readonly slots?: number;
  /** positions of each GPU latent cache slot (a sequence's whole length) */
  readonly context: number;
  /** most tokens in one step (prefill chunk) */
  readonly maxTokens: number;
  /**
   * Mirror a paged CPU pool on the GPU (the server's PagePool: same page size and count): every sequence's store must
   * then have pages(); the GPU caches are addressed through its page ids, so sequences sharing pages (prefix caching)
   * share their latents, and no GPU slot is needed.
   */
  readonly pages?: { readonly pageSize: number; readonly numPages: number };
  /**
   * GPU memory budget in bytes (`--gpu-memory`; GpuModelOptions.gpuMemory): routed experts that do not fit stream from
   * host memory through a GPU expert cache
   */
  readonly gpuMemory?: number;
  readonly checkWrites?: boolean;
  /** RuntimeOptions.activations: "exact" (default), or the opt-in "int15" / "q8" (integer activations in some products) */
  readonly activations?: GpuActivations;
  /**
   * Step shapes whose GPU kernels load() compiles (GpuModel.warm), so that no step waits for the compiler: those the
   * command will run (a prompt's prefill chunks; decode batches up to the server's largest)
   */
  readonly warm?: WarmShapes;
  /** load weights holding NaN/±Inf with a warning on stderr each, instead of refusing the file (--allow-nonfinite) */
  readonly allowNonFinite?: boolean;
  /** ms to wait for one answer (loading a large model counts as one; default 10 min) */
  readonly timeoutMs?: number;
}

/** What FusedGpuModel.load compiled ahead (GpuModel.warm). */
export interface WarmStats {
  readonly kernels: number;
  readonly compileMs: number;
}

/** Why a model cannot take the fused pipeline (undefined: it can). */
export function fusedUnsupported(config: ModelConfig): string | undefined {
  if (config.arch !== "deepseek2" && config.arch !== "glm-dsa")
    return `${config.arch} models are not wired into the fused pipeline`;
  return undefined;
}

export class FusedGpuModel implements GreedyChainModel {
  readonly config: ModelConfig;
  /** the adapter's name */
  readonly adapter: string;
  /** how the tiled products (prompt chunks, batched decode) take their activations (FusedOptions.activations) */
  readonly activations: GpuActivations;
  /** forwardBatchPicks draws rows' tokens at a temperature on the GPU too (sample.wgsl.ts) */
  readonly picksDraw = true;
  /**
   * and with the host Sampler's filters (top-k 0..DEVICE_DRAW_TOPK_MAX with any top-p and min-p), where a row fits the
   * top-k kernels (sampleTopKFits)
   */
  readonly picksDrawFiltered: boolean;
  /** decodeGreedy chains draws (PickDraws, a key a step) as well as greedy steps */
  readonly chainsDraws = true;
  private readonly worker: BlockingWorker<FusedRequest>;
  private logits: Float32Array;
  /** GPU cache slot of each running sequence, in order of last use (the least recent is reused first) */
  private readonly slots = new Map<LatentStore, number>();
  private loaded = false;
  /** GPU steps run (forwardBatch's, and each chained greedy step) */
  gpuSteps = 0;
  /** rows whose token forwardBatchPicks or decodeGreedyBatch drew at a temperature on the GPU */
  drawnRows = 0;
  /** what load() compiled ahead: kernels, and the ms that took (after the weights were on the GPU) */
  warmStats: WarmStats = { kernels: 0, compileMs: 0 };
  /** [done, total, phase (0: bytes loaded, 1: kernels compiled)] */
  private readonly progress = new Float64Array(new SharedArrayBuffer(24));

  /** Start the worker and its device (no weights yet: see load). NoGpuError when there is no adapter. */
  constructor(
    config: ModelConfig,
    private readonly opts: FusedOptions,
  ) {
    const why = fusedUnsupported(config);
    if (why !== undefined) throw new LatentError(why);
    this.config = { ...config, contextLength: Math.min(config.contextLength, opts.context) };
    this.activations = opts.activations ?? "exact";
    this.picksDrawFiltered = sampleTopKFits(config.nVocab);
    const logits = new SharedArrayBuffer(config.nVocab * 4);
    this.logits = new Float32Array(logits);
    const init: Omit<FusedInit, "channel"> = {
      logits,
      progress: this.progress.buffer as SharedArrayBuffer,
      checkWrites: opts.checkWrites === true,
      activations: this.activations,
    };
    this.worker = new BlockingWorker<FusedRequest>(
      "fused-worker",
      newChannel(),
      init,
      opts.timeoutMs ?? 600_000,
      import.meta.url,
    );
    try {
      this.adapter = this.worker.call({ op: "device" });
    } catch (e) {
      this.worker.terminate();
      throw e instanceof LatentError ? new NoGpuError(e.message) : e;
    }
  }

  /**
   * Load the model's weights from `path` in the worker, upload them and compile the kernels of `warm`'s step shapes
   * (blocks until done). `onProgress` gets the bytes loaded, then (phase "compile") the kernels compiled.
   */
  load(path: string, onProgress?: (done: number, total: number, phase: "load" | "compile") => void): WarmStats {
    const phase = (): "load" | "compile" => (this.progress[2] === 1 ? "compile" : "load");
    const tick =
      onProgress === undefined ? undefined : (): void => onProgress(this.progress[0], this.progress[1], phase());
    const answer = this.worker.call(
      {
        op: "load",
        path,
        slots: this.opts.slots ?? 1,
        context: this.config.contextLength,
        maxTokens: this.opts.maxTokens,
        pages: this.opts.pages,
        gpuMemory: this.opts.gpuMemory,
        warm: this.opts.warm,
        allowNonFinite: this.opts.allowNonFinite === true,
      },
      tick,
    );
    tick?.();
    this.loaded = true;
    this.warmStats = JSON.parse(answer) as WarmStats;
    return this.warmStats;
  }

  /** The engine's forward pass for one sequence (generate). */
  forward(
    tokens: readonly number[],
    cache: LatentStore | undefined,
    opts: { readonly path: string; readonly logits: "all" | "last" },
  ): Float32Array {
    return this.forwardBatch([{ tokens, cache, path: opts.path as SequenceChunk["path"], logits: opts.logits }])[0];
  }

  /**
   * The scheduler's batched forward pass: every chunk's tokens in as few GPU steps as maxTokens allows (decodes and
   * prompt chunks of different sequences together); returns each chunk's logits rows ("all": one per token, "last":
   * one, "none": none) and advances each store by its chunk. One chunk per sequence.
   */
  forwardBatch(seqs: readonly SequenceChunk[]): Float32Array[] {
    return this.forwardBatchPicks(
      seqs,
      seqs.map(() => false),
    ) as Float32Array[];
  }

  /**
   * forwardBatch, except that a chunk with `picks[i]` (logits "last") gets its last row's choice, computed on the GPU,
   * instead of the row: `true` the greedy one — argmax (ties to the lowest id, NaN never chosen) — or a PickDraw a token
   * drawn at its temperature from its key (sample.wgsl.ts), each with its logprob (NaN for a row with NaN or +Infinity,
   * or all −Infinity). A step whose rows are all picks reads no logits back.
   */
  forwardBatchPicks(
    seqs: readonly SequenceChunk[],
    picks: readonly (boolean | PickDraw)[],
  ): (Float32Array | GreedyPick)[] {
    if (!this.loaded) throw new LatentError("FusedGpuModel: load() the weights first");
    if (picks.length !== seqs.length)
      throw new LatentError(`forwardBatchPicks: ${picks.length} picks for ${seqs.length} chunks`);
    const picked = picks.map((p) => p !== false);
    picks.forEach((p, i) => {
      if (p !== false && seqs[i].logits !== "last")
        throw new LatentError(`forwardBatchPicks: chunk ${i} asks for a pick without logits "last"`);
      if (typeof p === "object") checkDraw(p, this.picksDrawFiltered, `forwardBatchPicks: chunk ${i}'s draw`);
    });
    const V = this.config.nVocab;
    const plan = seqs.map((s) => {
      if (s.cache === undefined || s.path === "reference")
        throw new LatentError("the fused WebGPU pipeline runs the cached prefill/decode paths, not the reference path");
      const pos0 = s.cache.length;
      if (pos0 + s.tokens.length > this.config.contextLength) {
        throw new LatentError(
          `context full: ${pos0 + s.tokens.length} positions exceed the GPU cache's ${this.config.contextLength}`,
        );
      }
      return { s, pos0 };
    });
    if (new Set(seqs.map((s) => s.cache)).size !== seqs.length)
      throw new LatentError("forwardBatch: two chunks of one sequence in one batch");
    const paged = this.opts.pages !== undefined;
    const pagesOf = plan.map(({ s }) => {
      if (!paged) return undefined;
      const pages = s.cache!.pages?.();
      if (pages === undefined)
        throw new LatentError("the GPU caches mirror a page pool: every sequence's store must be paged");
      return pages;
    });
    const slotOf = plan.map(({ s, pos0 }) => (paged ? 0 : this.slotFor(s.cache!, pos0, seqs)));
    const stepOf = (i: number, from: number, to: number): StepToken[] => {
      const { s, pos0 } = plan[i];
      const out: StepToken[] = [];
      const pages = pagesOf[i];
      for (let j = from; j < to; j++) {
        const want = s.logits === "all" || (s.logits === "last" && j === s.tokens.length - 1);
        out.push({
          token: s.tokens[j],
          slot: slotOf[i],
          pos: pos0 + j,
          logits: want,
          ...(pages !== undefined ? { pages } : {}),
        });
      }
      return out;
    };
    // every chunk's tokens in GPU steps of at most maxTokens tokens: the one-token chunks (decodes) first, then the
    // longer ones (prompt chunks), a chunk that does not fit split over the next steps in order. Prompt chunks of
    // different sequences share a step with the decodes: a step reads the weights once for all its tokens, so a
    // server's 32 prompt chunks of ~35 tokens had cost 32 steps of much the same time as one.
    const order = [...plan.keys()].sort(
      (x, y) => Number(seqs[x].tokens.length > 1) - Number(seqs[y].tokens.length > 1),
    );
    const steps: { i: number; from: number; to: number }[][] = [[]];
    let room = this.opts.maxTokens;
    for (const i of order) {
      const n = seqs[i].tokens.length;
      for (let from = 0; from < n; ) {
        if (room === 0) {
          steps.push([]);
          room = this.opts.maxTokens;
        }
        const to = Math.min(n, from + room);
        steps[steps.length - 1].push({ i, from, to });
        room -= to - from;
        from = to;
      }
    }
    const parts: Float32Array[][] = seqs.map(() => []);
    const chosen: (GreedyPick | undefined)[] = seqs.map(() => undefined);
    for (const pieces of steps) {
      if (pieces.length === 0) continue;
      const tokens = pieces.map(({ i, from, to }) => stepOf(i, from, to));
      const rowsOf = tokens.map((t) => t.filter((x) => x.logits).length);
      const picking = pieces.some(({ i }, k) => picked[i] && rowsOf[k] > 0);
      const reading = pieces.some(({ i }, k) => !picked[i] && rowsOf[k] > 0);
      // a draw for every logits row of the step where any of them is drawn at a temperature (the others greedy)
      const drawing = pieces.some(({ i }, k) => typeof picks[i] === "object" && rowsOf[k] > 0);
      const draws = drawing
        ? pieces.flatMap(({ i }, k) =>
            Array.from(
              { length: rowsOf[k] },
              (): PickDraw => (typeof picks[i] === "object" ? (picks[i] as PickDraw) : { temperature: 0, key: 0 }),
            ),
          )
        : undefined;
      this.drawnRows += pieces.filter(({ i }, k) => typeof picks[i] === "object" && rowsOf[k] > 0).length;
      const r = picking
        ? this.stepPicks(tokens.flat(), reading, draws)
        : { logits: this.step(tokens.flat()), ids: undefined, logprobs: undefined };
      let row = 0;
      pieces.forEach(({ i }, k) => {
        const rows = rowsOf[k];
        if (picked[i]) {
          if (rows > 0) chosen[i] = { token: r.ids![row + rows - 1], logprob: r.logprobs![row + rows - 1] };
        } else parts[i].push(r.logits.subarray(row * V, (row + rows) * V));
        row += rows;
      });
    }
    const out = parts.map((p, i): Float32Array | GreedyPick => {
      if (picked[i]) {
        if (chosen[i] === undefined)
          throw new LatentError(`forwardBatchPicks: chunk ${i} produced no row to pick from`);
        return chosen[i];
      }
      if (p.length === 1) return p[0];
      const all = new Float32Array(p.reduce((x, q) => x + q.length, 0));
      let off = 0;
      for (const q of p) {
        all.set(q, off);
        off += q.length;
      }
      return all;
    });
    for (const { s } of plan) s.cache!.advance(s.tokens.length);
    return out;
  }

  /**
   * `steps` greedy decode steps of one sequence chained on the GPU (the engine's GreedyChainModel): step s feeds the
   * token chosen by step s − 1 (step 0: `token`) at position cache.length + s and chooses the next by argmax (ties to
   * the lowest id, NaN never chosen: the sampler's greedy). Returns the `steps` chosen ids with their logprobs
   * (log_softmax of each step's logits at its id, computed on the GPU) and advances the store by `steps`, exactly as
   * that many forward([token]) calls would: the store then holds every input fed, and the last id returned is the
   * next input, not yet in the cache.
   */
  decodeGreedy(token: number, cache: LatentStore, steps: number, draws?: readonly PickDraw[]): GreedyChunk {
    return this.decodeGreedyBatch([{ token, cache }], steps, draws)[0];
  }

  /**
   * `decodeGreedy` for a batch (the scheduler's chained decode): every sequence runs `steps` greedy steps from its
   * `token`, all of them in one decode step per position, exactly as `steps` forwardBatch calls of one-token decode
   * chunks, each sampled greedily, would; each store advances by `steps` (paged stores: their pages for all `steps`
   * positions reserved beforehand). With `draws` (steps × sequences, step-major), each step's token is drawn as
   * forwardBatchPicks draws it instead of taken greedily.
   */
  decodeGreedyBatch(
    seqs: readonly { readonly token: number; readonly cache: LatentStore }[],
    steps: number,
    draws?: readonly PickDraw[],
  ): GreedyChunk[] {
    if (!this.loaded) throw new LatentError("FusedGpuModel: load() the weights first");
    if (!Number.isInteger(steps) || steps < 1) throw new LatentError(`decodeGreedy takes steps ≥ 1, got ${steps}`);
    if (draws !== undefined && draws.length !== steps * seqs.length)
      throw new LatentError(`decodeGreedy: ${draws.length} draws for ${steps} steps of ${seqs.length} sequence(s)`);
    draws?.forEach((d, i) => checkDraw(d, this.picksDrawFiltered, `decodeGreedy: draw ${i}`));
    const paged = this.opts.pages !== undefined;
    const starts = seqs.map(({ token, cache }): StepToken => {
      if (!Number.isInteger(token) || token < 0 || token >= this.config.nVocab)
        throw new LatentError(`token ${token} is outside the vocabulary (0..${this.config.nVocab - 1})`);
      const pos = cache.length;
      if (pos + steps > this.config.contextLength)
        throw new LatentError(
          `context full: ${pos + steps} positions exceed the GPU cache's ${this.config.contextLength}`,
        );
      if (!paged) return { token, slot: this.slotFor(cache, pos, seqs), pos, logits: true };
      const pages = cache.pages?.();
      if (pages === undefined)
        throw new LatentError("the GPU caches mirror a page pool: every sequence's store must be paged");
      if (pages.length * this.opts.pages!.pageSize < pos + steps)
        throw new LatentError(
          `decodeGreedy: ${steps} steps from position ${pos} need pages reserved up to ${pos + steps}`,
        );
      return { token, slot: 0, pos, logits: true, pages };
    });
    const out: GreedyChunk[] = [];
    // the GPU's step buffers hold maxTokens rows: larger batches chain in groups
    for (let at = 0; at < starts.length; at += this.opts.maxTokens) {
      const group = starts.slice(at, at + this.opts.maxTokens);
      const B = group.length;
      this.ensureShared(2 * steps * B * 4);
      const groupDraws =
        draws === undefined
          ? undefined
          : Array.from({ length: steps }, (_, s) => draws.slice(s * seqs.length + at, s * seqs.length + at + B)).flat();
      this.worker.call({
        op: "greedy",
        tokens: group,
        steps,
        ...(groupDraws !== undefined ? { draws: groupDraws } : {}),
      });
      this.drawnRows += groupDraws?.filter((d) => d.temperature > 0).length ?? 0;
      this.gpuSteps += steps;
      const ids = new Uint32Array(this.logits.buffer, 0, steps * B);
      const lps = this.logits.subarray(steps * B, 2 * steps * B);
      for (let b = 0; b < B; b++) {
        const tokens: number[] = [];
        const logprobs: number[] = [];
        for (let s = 0; s < steps; s++) {
          tokens.push(ids[s * B + b]);
          logprobs.push(lps[s * B + b]);
        }
        out.push({ tokens, logprobs });
      }
    }
    for (const { cache } of seqs) cache.advance(steps);
    return out;
  }

  /** The GPU steps run so far and the host time the worker spent encoding and submitting them. */
  hostStats(): GpuHostStats {
    if (!this.loaded) throw new LatentError("FusedGpuModel: load() the weights first");
    const s = JSON.parse(this.worker.call({ op: "stats" })) as Omit<GpuHostStats, "steps">;
    return {
      steps: this.gpuSteps,
      dispatches: s.dispatches,
      encodeMs: s.encodeMs,
      submitMs: s.submitMs,
      ...(s.expertCache !== undefined ? { expertCache: s.expertCache } : {}),
    };
  }

  /** Grow the shared logits memory (and tell the worker) so that it holds at least `bytes`. */
  private ensureShared(bytes: number): void {
    if (bytes <= this.logits.byteLength) return;
    const buffer = new SharedArrayBuffer(bytes);
    this.logits = new Float32Array(buffer);
    this.worker.post({ op: "logits", buffer });
  }

  /** One GPU step with each logits row's greedy choice (or draw); copies of the ids, logprobs and (when `readLogits`) the rows. */
  private stepPicks(
    tokens: StepToken[],
    readLogits: boolean,
    draws?: PickDraw[],
  ): { logits: Float32Array; ids: Uint32Array; logprobs: Float32Array } {
    const rows = tokens.filter((t) => t.logits).length;
    const V = this.config.nVocab;
    this.ensureShared((2 * rows + (readLogits ? rows * V : 0)) * 4);
    this.worker.call({ op: "picks", tokens, logits: readLogits, ...(draws !== undefined ? { draws } : {}) });
    this.gpuSteps++;
    return {
      ids: new Uint32Array(this.logits.buffer, 0, rows).slice(),
      logprobs: this.logits.slice(rows, 2 * rows),
      logits: readLogits ? this.logits.slice(2 * rows, 2 * rows + rows * V) : new Float32Array(0),
    };
  }

  /** One GPU step; a copy of the logits rows of its tokens that asked for them. */
  private step(tokens: StepToken[]): Float32Array {
    const rows = tokens.filter((t) => t.logits).length;
    const V = this.config.nVocab;
    this.ensureShared(rows * V * 4);
    this.worker.call({ op: "step", tokens });
    this.gpuSteps++;
    return this.logits.slice(0, rows * V);
  }

  /** The GPU slot of a sequence: its own, or a free one (the least recently used when all are taken) for a new one. */
  private slotFor(
    store: LatentStore,
    pos0: number,
    batch: readonly { readonly cache?: LatentStore | undefined }[],
  ): number {
    const have = this.slots.get(store);
    if (have !== undefined) {
      this.slots.delete(store);
      this.slots.set(store, have); // most recent last
      return have;
    }
    if (pos0 !== 0)
      throw new LatentError(
        `the fused WebGPU pipeline has no latents for a sequence that starts at position ${pos0} (prefix caching must be off)`,
      );
    const n = this.opts.slots ?? 1;
    let slot: number;
    if (this.slots.size < n) {
      const used = new Set(this.slots.values());
      slot = [...Array(n).keys()].find((x) => !used.has(x))!;
    } else {
      const inBatch = new Set(batch.map((c) => c.cache));
      const victim = [...this.slots.keys()].find((k) => !inBatch.has(k));
      if (victim === undefined) throw new LatentError(`more than ${n} sequences in one step for ${n} GPU cache slots`);
      slot = this.slots.get(victim)!;
      this.slots.delete(victim);
    }
    this.slots.set(store, slot);
    return slot;
  }

  /** Drain the worker, release the device, end the thread. */
  close(): Promise<number> {
    return this.worker.close({ op: "close" });
  }
}
