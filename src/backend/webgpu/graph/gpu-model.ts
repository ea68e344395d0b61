/// <reference types="@webgpu/types" />
/**
 * The fused WebGPU forward pass of a DeepSeek-V2/V3 (`deepseek2`) model: weights resident in their GGUF layout,
 * per-layer latent caches for `slots` sequences on the GPU, every dispatch of every layer recorded once per step shape
 * and replayed (submitted in pieces so the GPU starts early; one read-back of the logits). A step is any set of tokens
 * with their (slot, position):
 * a decode batch (one token per sequence) or a prefill chunk of one sequence. Attention is the absorbed MLA form for
 * both (queries score against the latent cache directly), split over key chunks for long contexts.
 */
import type { ModelConfig } from "../../../model/config.js";
import type { DeepSeek2 } from "../../../model/deepseek2.js";
import { LatentError } from "../../../util/errors.js";
import type { PickDraw } from "../../../engine/device-picks.js";
import { expertListWords, getRows, GpuMatrix, matmul, reserveXq8 } from "../kernels/matmul/matrix.js";
import { rmsNorm, RopeTable } from "../kernels/rows/rows.js";
import {
  argmaxRows,
  argmaxScratchWords,
  DRAW_WORDS,
  drawWords,
  sampleNucleusWords,
  sampleRows,
  sampleScratchWords,
  sampleTopKFits,
  sampleTopKWords,
} from "../kernels/sample/sample.js";
import { attentionScratch } from "../kernels/attention/attention.js";
import { moeCombine } from "../kernels/moe/moe.js";
import { attnFusedPartWords } from "../kernels/attention/fused.js";
import type { GpuRuntime, Recording } from "../core/runtime.js";
import { ATTN_CHUNK } from "../kernels/attention/attention.wgsl.js";
import { encodeAttention } from "./attention-block.js";
import { encodeDenseFFN } from "./dense-block.js";
import { encodeMoE } from "./moe-block.js";
import { a0Stride, StepEncoding } from "./step-encoding.js";
import { layerWeightBytes, upload, uploadLayer, type GpuFFN, type GpuLayer } from "./weights.js";
import { placeExperts, type ExpertCache } from "./expert-cache.js";

export { FUSE_MAX_TOKENS } from "./select.js";

export interface GpuModelOptions {
  /** sequences with their own latent cache */
  readonly slots: number;
  /** positions per sequence */
  readonly context: number;
  /** most tokens in one step */
  readonly maxTokens: number;
  /**
   * Paged latent caches: one pool of numPages pages of pageSize positions per layer, shared by all sequences (each
   * step token names its sequence's page ids), instead of a contiguous `context` rows per slot. Sequences may share
   * pages (prefix caching). `context` still bounds a sequence's positions.
   */
  readonly pages?: { readonly pageSize: number; readonly numPages: number };
  /**
   * GPU memory budget in bytes (`--gpu-memory`): everything but the routed experts stays on the GPU; whole layers'
   * experts as they fit, the rest streamed from host memory through an expert cache (graph/expert-cache.ts,
   * planExperts). Refused, naming both numbers, where it cannot hold the rest and one step's experts per layer.
   */
  readonly gpuMemory?: number;
  /**
   * The expert cache set directly instead of from a budget (tests, benchmarks): `slots` per pool, the layers in
   * `residentLayers` (default none) keeping their experts on the GPU, every other MoE layer streamed.
   */
  readonly expertCache?: { readonly slots: number; readonly residentLayers?: readonly number[] };
}

/** Step shapes for GpuModel.warm. */
export interface WarmShapes {
  /** decode steps of 1..decode tokens, logits for every token */
  readonly decode?: number;
  /** with their greedy argmax (decodeGreedy) */
  readonly greedy?: boolean;
  /** and the kernels that draw rows' tokens at a temperature (stepPicks with draws) */
  readonly draws?: boolean;
  /** prefill steps of these token counts, logits for the last token */
  readonly prefill?: readonly number[];
}

/** What a layer's kernels depend on: its matrices' types and shapes (and how they are split into bindings), and which parts it has. */
function shapeOf(v: unknown): string {
  if (v === undefined) return "-";
  if (v instanceof GpuMatrix) return `${v.type}:${v.cols}x${v.rows}x${v.items}/${v.pieces.length}`;
  if (typeof v === "function") return "f";
  if (typeof v === "object" && v !== null && !("usage" in v))
    return `{${Object.entries(v)
      .map(([k, x]) => `${k}=${shapeOf(x)}`)
      .join(",")}}`;
  return "b"; // a buffer
}

/** How encode() runs a step (see encode). */
export interface EncodeOptions {
  readonly greedy?: boolean;
  readonly picks?: boolean;
  readonly draws?: readonly PickDraw[];
  readonly idsOnGpu?: boolean;
  readonly submitEvery?: number;
}

/** A step's inputs as written (GpuModel.prepare): what its encoding depends on. */
interface PreparedStep {
  readonly n: number;
  readonly maxKeys: number;
  readonly rows: readonly number[];
  /** the step shape's key among the recordings */
  readonly key: string;
  readonly picks: boolean;
  readonly draws: readonly PickDraw[] | undefined;
  readonly topK: boolean;
  readonly nucleus: boolean;
}

export interface StepToken {
  readonly token: number;
  readonly slot: number;
  readonly pos: number;
  /** produce logits for this token */
  readonly logits: boolean;
  /** with paged caches: the page ids of the token's sequence (page k holds positions k·pageSize …); slot is unused */
  readonly pages?: readonly number[];
}

export class GpuModel {
  readonly layers: GpuLayer[] = [];
  /** weight bytes on the GPU (an expert cache's pools included) */
  readonly weightBytes: number;
  /** bytes of every GPU buffer the model made: weights, latent caches, step buffers, expert cache */
  readonly gpuBytes: number;
  private readonly c: ModelConfig;
  private readonly embd: GpuMatrix;
  private readonly output: GpuMatrix;
  private readonly outputNorm: GPUBuffer;
  private readonly ropeTable: RopeTable;
  private readonly b: Record<string, GPUBuffer> = {};
  private readonly widthFF: number;
  /** where the page tables start in SEL */
  private readonly ptBase: number;
  /** recorded steps by shape (tokens, key chunks, logit rows): a step of a known shape is replayed, not re-encoded */
  private readonly recordings = new Map<string, Recording>();
  /** steps encoded from scratch (and recorded) / replayed from a recording */
  readonly replayStats = { recorded: 0, replayed: 0 };
  /** the recording of the last encoded step (replayed or just made), for GpuRuntime.timeItems */
  lastRecording: Recording | undefined;
  /** what decodeGreedy chose: the tokens [steps × batch] (u32), then their logprobs [steps × batch] (f32) */
  private history: GPUBuffer | undefined;
  /** the routed experts streamed from host memory (GpuModelOptions.gpuMemory / expertCache), else undefined */
  readonly expertCache: ExpertCache | undefined;
  /** each streamed layer's index and the pool its expert products read */
  private readonly streamed = new Map<GpuLayer, { readonly il: number; readonly ffn: GpuFFN }>();
  /** recorded segments of streamed steps by shape: each up to a streamed layer's routing (its index), then the rest */
  private readonly segmentRecordings = new Map<string, { rec: Recording; layer: number | undefined }[]>();

  constructor(
    readonly rt: GpuRuntime,
    model: DeepSeek2,
    readonly opts: GpuModelOptions,
  ) {
    const c = (this.c = model.config);
    const w = model.weights;
    const { slots, context } = opts;
    const { kvLoraRank: L, qkRope: R } = c;
    if (opts.pages !== undefined && !(opts.pages.pageSize >= 1 && opts.pages.numPages >= 1))
      throw new LatentError(`paged caches need pageSize ≥ 1 and numPages ≥ 1`);
    // latent rows per layer: a page pool, or a contiguous `context` rows per slot
    const cacheRows = opts.pages !== undefined ? opts.pages.pageSize * opts.pages.numPages : slots * context;
    if (opts.gpuMemory !== undefined && opts.expertCache !== undefined)
      throw new LatentError("a GPU memory budget or an expert cache's slots, not both");
    const bytesBefore = rt.bufferBytes;
    // with a budget or a cache the routed experts are placed last, once the rest's bytes are known
    const placeLater = opts.gpuMemory !== undefined || opts.expertCache !== undefined;
    this.embd = upload(rt, w.tokenEmbd);
    this.output = w.output === w.tokenEmbd ? this.embd : upload(rt, w.output);
    this.outputNorm = rt.upload(w.outputNorm, "output_norm");
    w.layers.forEach((lw, il) => this.layers.push(uploadLayer(rt, c, lw, il, cacheRows, !placeLater)));
    this.ropeTable = new RopeTable(rt, model.rope);
    this.ropeTable.ensure(context);

    const N = opts.maxTokens;
    const { nEmbd: Hd, nHead: H, qkNope: P, vHead: V, nExpertUsed: K, nExpert: E } = c;
    const D = P + R;
    this.widthFF = Math.max(c.nFF, K * c.nFFExp);
    const buf = (name: string, floats: number): void => {
      // kernels bind these whole: past the binding limit the device would refuse every step that uses one
      if (floats * 4 > rt.info.limits.maxStorageBufferBindingSize)
        throw new LatentError(
          `the step buffer "${name}" needs ${floats * 4} bytes for ${N} tokens per step and ${context} positions, past the device's maxStorageBufferBindingSize (${rt.info.limits.maxStorageBufferBindingSize}): take fewer tokens per step (a smaller prefill chunk or batch) or a shorter context`,
        );
      this.b[name] = rt.buffer(Math.max(1, floats) * 4, name);
    };
    buf("ids", N);
    buf("pos", N);
    buf("rowIdx", N);
    buf("meta", 4 * N);
    const ix = c.indexer;
    // SEL: the DSA selections [N × top_k], then (paged caches) the step's page tables, up to one per token
    this.ptBase = ix === undefined ? 0 : N * ix.topK;
    buf("sel", this.ptBase + (opts.pages !== undefined ? N * Math.ceil(context / opts.pages.pageSize) : 0));
    if (ix !== undefined) {
      buf("metaBase", 4 * N);
      buf("kI", N * ix.headDim);
      buf("qI", N * ix.nHead * ix.headDim);
      buf("wI", N * ix.nHead);
      buf("scores", N * Math.ceil(context / ATTN_CHUNK) * ATTN_CHUNK);
    }
    buf("h", N * Hd);
    // the residual's other buffer (tune.sharedEarly: a MoE layer's shared down product writes h + its product there)
    buf("hAlt", N * Hd);
    // one weight of 1 per token: a residual read through a product's combine (FusionArgs.addCombine with K = 1)
    buf("ones", N);
    rt.write(this.b.ones!, 0, new Float32Array(N).fill(1));
    buf("x", N * Hd);
    // A0: per token [q (no q-LoRA) or the q-LoRA latent | c (L) | k_pe (R)], what the first products of a layer write
    buf("a0", N * a0Stride(c));
    buf("q", N * H * D);
    buf("qAbs", N * H * (L + R));
    buf("lo", N * H * L);
    buf("o", N * H * V);
    // the split-key scratch for the most keys a query attends: top_k where every layer selects (DSA), else the context
    const attended =
      ix !== undefined && this.layers.every((l) => l.indexer !== undefined) ? Math.min(context, ix.topK) : context;
    buf("part", attentionScratch(N, H, L, attended));
    // the one-token fused attention's key ranges past one chunk of keys (attnFusedPartWords at its most splits, 16)
    buf("attnPart", attnFusedPartWords({ heads: H, split: 16, L }));
    buf("g", N * this.widthFF);
    // the shared experts' own intermediate: their products run in the same dispatches as the routed experts' (on G)
    buf("gs", N * Math.max(0, ...this.layers.map((l) => l.shared?.gate.rows ?? 0)));
    // (an expert cache's pool of more slots than E gathers pair by pair above 256: encodeMoE)
    buf("elist", expertListWords(N * Math.max(1, K), Math.max(1, E, placeLater ? 256 : 0)));
    buf("ye", N * Math.max(1, K) * Hd);
    buf("z", N * Math.max(1, E));
    buf("rids", N * Math.max(1, K));
    buf("rw", N * Math.max(1, K));
    buf("hn", N * Hd);
    buf("logits", N * c.nVocab);
    buf("amax", Math.max(argmaxScratchWords(N, c.nVocab), sampleScratchWords(N, c.nVocab)));
    // a greedy step's chosen tokens' logprobs (next to the ids it writes)
    buf("lp", N);
    // a sampling step's draw per logits row (stepPicks with draws): DRAW_WORDS each
    buf("draw", DRAW_WORDS * N);
    // the top-k draws' candidates (sampleRows with cand), where a row fits those kernels
    // and the top-p / min-p draws' scratch (sampleRows with nucleus: zeroed when made, zeroed again after each use)
    if (sampleTopKFits(c.nVocab)) {
      buf("cand", sampleTopKWords(N, c.nVocab));
      buf("nuc", sampleNucleusWords(N));
    }
    // the integer products' x quantized by a pass of its own: as large as the largest x of a step (xq8.wgsl.ts)
    reserveXq8(rt, N * Math.max(this.widthFF, Hd, H * V, a0Stride(c)));
    this.expertCache = placeLater
      ? placeExperts(rt, c, model.weights.layers, this.layers, opts, rt.bufferBytes - bytesBefore)
      : undefined;
    for (const [il, l] of this.layers.entries())
      if (this.expertCache?.streams(il) === true) this.streamed.set(l, { il, ffn: this.expertCache.ffnOf(il) });
    this.gpuBytes = rt.bufferBytes - bytesBefore;
    let bytes = this.embd.bytes + (this.output === this.embd ? 0 : this.output.bytes) + (this.expertCache?.bytes ?? 0);
    for (const l of this.layers) bytes += layerWeightBytes(l);
    this.weightBytes = bytes;
  }

  /**
   * Record one step (no submission). Returns the number of logit rows it will produce. With `greedy`, every token
   * must produce logits and the step ends with the argmax of each row written over the token ids (greedy sampling on
   * the GPU: the next step can run on them with `idsOnGpu` before the host has seen them), and its logprob
   * (log_softmax of the row at it, as the host sampler's) into the `lp` buffer. With `picks`, the same argmax and
   * logprob of each logits row, whichever tokens have them (stepPicks); with `draws` too (one per logits row), each
   * row's token is drawn at its temperature instead (0: greedy; sample.ts sampleRows).
   */
  encode(tokens: readonly StepToken[], opts: EncodeOptions = {}): number {
    if (this.expertCache !== undefined)
      throw new LatentError("a step with streamed experts is run by step, stepPicks or decodeGreedy (encodeStreamed)");
    const { rt } = this;
    const p = this.prepare(tokens, opts);
    const rec = this.recordings.get(p.key);
    if (rec !== undefined) {
      this.lastRecording = rec;
      rt.replay(rec, opts.submitEvery);
      this.replayStats.replayed++;
      return p.rows.length;
    }
    rt.beginRecording();
    this.encodeLayers(p.n, p.maxKeys, p.rows);
    this.encodePicks(p);
    const made = rt.endRecording();
    this.lastRecording = made;
    if (made !== undefined) {
      if (this.recordings.size >= 64) this.recordings.clear();
      this.recordings.set(p.key, made);
      this.replayStats.recorded++;
    }
    return p.rows.length;
  }

  /**
   * encode() for a model with streamed experts: the step in segments, each ending at a streamed layer's routing,
   * after which the routed ids are read back and the expert cache fills its slots (graph/expert-cache.ts) before the
   * next segment runs. Segments are recorded per step shape and replayed as encode() replays whole steps.
   */
  private async encodeStreamed(tokens: readonly StepToken[], opts: EncodeOptions = {}): Promise<number> {
    const { rt, b } = this;
    const p = this.prepare(tokens, opts);
    this.lastRecording = undefined;
    const segments = this.segmentRecordings.get(p.key);
    if (segments !== undefined) {
      for (const seg of segments) {
        rt.replay(seg.rec, opts.submitEvery);
        if (seg.layer !== undefined) await this.fillExperts(seg.layer, p.n);
      }
      this.replayStats.replayed++;
      return p.rows.length;
    }
    const made: { rec: Recording | undefined; layer: number | undefined }[] = [];
    const residual = b.h;
    const steps = this.encodeResidual(p.n, p.maxKeys, p.rows, this.layers, true);
    try {
      for (;;) {
        rt.beginRecording();
        const next = steps.next();
        if (next.done === true) this.encodePicks(p);
        made.push({ rec: rt.endRecording(), layer: next.done === true ? undefined : next.value });
        if (next.done === true) break;
        await this.fillExperts(next.value, p.n);
      }
    } finally {
      rt.endRecording();
      if (b.h !== residual) [b.h, b.hAlt] = [b.hAlt, b.h];
    }
    if (made.every((m) => m.rec !== undefined)) {
      if (this.segmentRecordings.size >= 64) this.segmentRecordings.clear();
      this.segmentRecordings.set(p.key, made as { rec: Recording; layer: number | undefined }[]);
      this.replayStats.recorded++;
    }
    return p.rows.length;
  }

  /** Streamed layer `il`'s routed ids read back, their experts brought into the cache, the ids rewritten to slots. */
  private async fillExperts(il: number, n: number): Promise<void> {
    const words = n * this.c.nExpertUsed;
    const ids = new Uint32Array(await this.rt.read(this.b.rids!, 0, words * 4));
    this.rt.write(this.b.rids!, 0, await this.expertCache!.assign(il, ids));
  }

  /** encode() or encodeStreamed(), whichever this model's experts need. */
  private encodeAny(tokens: readonly StepToken[], opts: EncodeOptions = {}): Promise<number> | number {
    return this.expertCache !== undefined ? this.encodeStreamed(tokens, opts) : this.encode(tokens, opts);
  }

  /** The step's sampling kernels after its logits (greedy argmax, or draws). */
  private encodePicks(p: PreparedStep): void {
    const { rt, b, c } = this;
    if (p.draws !== undefined)
      sampleRows(rt, b.logits!, b.draw!, b.ids!, b.lp!, b.amax!, {
        n: p.rows.length,
        width: c.nVocab,
        ...(p.topK ? { cand: b.cand! } : {}),
        ...(p.nucleus ? { nucleus: b.nuc! } : {}),
      });
    else if (p.picks)
      argmaxRows(rt, b.logits!, b.ids!, b.amax!, { n: p.rows.length, width: c.nVocab, logprobs: b.lp! });
  }

  /**
   * Check a step's tokens and write its inputs (ids unless on the GPU, positions, cache rows, page tables, draws);
   * returns what its encoding depends on, and the shape's key among the recordings.
   */
  private prepare(tokens: readonly StepToken[], opts: EncodeOptions): PreparedStep {
    const { rt, c, b } = this;
    const n = tokens.length;
    if (n === 0 || n > this.opts.maxTokens)
      throw new LatentError(`a step takes 1..${this.opts.maxTokens} tokens, got ${n}`);
    const ctx = this.opts.context;
    let maxKeys = 0;
    const meta = new Uint32Array(4 * n);
    const rowIdx = new Uint32Array(n);
    const paged = this.opts.pages;
    const tables: number[] = [];
    const tableAt = new Map<readonly number[], number>();
    tokens.forEach((t, i) => {
      if (t.pos >= ctx) throw new LatentError(`position ${t.pos} outside the GPU cache (${ctx} positions)`);
      if (paged === undefined) {
        if (t.slot >= this.opts.slots)
          throw new LatentError(`slot ${t.slot} outside the GPU cache (${this.opts.slots} slots)`);
        meta[4 * i] = t.slot * ctx;
        rowIdx[i] = t.slot * ctx + t.pos;
      } else {
        const P = paged.pageSize;
        const page = t.pages?.[Math.floor(t.pos / P)];
        if (page === undefined || page >= paged.numPages)
          throw new LatentError(`position ${t.pos} has no page in the GPU page pool (${paged.numPages} pages)`);
        let at = tableAt.get(t.pages!);
        if (at === undefined) {
          at = this.ptBase + tables.length;
          tableAt.set(t.pages!, at);
          tables.push(...t.pages!.slice(0, Math.ceil(ctx / P)));
        }
        meta[4 * i] = at;
        rowIdx[i] = page * P + (t.pos % P);
      }
      meta[4 * i + 1] = t.pos + 1;
      maxKeys = Math.max(maxKeys, t.pos + 1);
    });
    // work still open in the encoder (the tail of a previous step) must be queued before this step's inputs are written
    rt.submit();
    if (opts.idsOnGpu !== true)
      rt.write(
        b.ids!,
        0,
        Uint32Array.from(tokens, (t) => t.token),
      );
    rt.write(
      b.pos!,
      0,
      Uint32Array.from(tokens, (t) => t.pos),
    );
    rt.write(b.rowIdx!, 0, rowIdx);
    rt.write(b.meta!, 0, meta);
    if (tables.length > 0) rt.write(b.sel!, this.ptBase * 4, Uint32Array.from(tables));
    if (b.metaBase !== undefined) rt.write(b.metaBase, 0, meta);
    // everything below depends only on this key (buffers are fixed; parameters depend on n, the key chunks, the rows)
    const rows = tokens.map((t, i) => (t.logits ? i : -1)).filter((i) => i >= 0);
    const greedy = opts.greedy === true;
    if (greedy && rows.length !== n) throw new LatentError("a greedy step needs logits for every token");
    const picks = greedy || (opts.picks === true && rows.length > 0);
    const draws = picks && !greedy ? opts.draws : undefined;
    if (draws !== undefined) {
      if (draws.length !== rows.length)
        throw new LatentError(`a step's draws: ${draws.length} for ${rows.length} logits rows`);
      rt.write(b.draw!, 0, drawWords(draws));
    }
    // filtered draws take the filtering kernels too (other rows pass through them unchanged): top-k's, and top-p's and
    // min-p's without top-k
    const topK = draws?.some((d) => (d.topK ?? 0) > 0) === true;
    const nucleus =
      draws?.some((d) => d.temperature > 0 && (d.topK ?? 0) === 0 && ((d.topP ?? 1) < 1 || (d.minP ?? 0) > 0)) === true;
    if ((topK || nucleus) && b.cand === undefined)
      throw new LatentError(
        `filtered draws on the GPU: a vocabulary of ${c.nVocab} ids is too large for their kernels (sampleTopKFits)`,
      );
    const filters = `${topK ? "-topk" : ""}${nucleus ? "-nucleus" : ""}`;
    const key = `${n}|${Math.ceil(maxKeys / ATTN_CHUNK)}|${rows.length === n ? "all" : rows.join(",")}${picks ? (draws !== undefined ? `|draws${filters}` : "|picks") : ""}`;
    return { n, maxKeys, rows, key, picks, draws, topK, nucleus };
  }

  private encodeLayers(
    n: number,
    maxKeys: number,
    rows: readonly number[],
    layers: readonly GpuLayer[] = this.layers,
  ): void {
    // every encoding starts from the same residual buffer (getRows writes it; tune.sharedEarly swaps them per MoE layer)
    const residual = this.b.h;
    try {
      // no pauses: the generator runs through without yielding
      for (const _ of this.encodeResidual(n, maxKeys, rows, layers, false));
    } finally {
      if (this.b.h !== residual) [this.b.h, this.b.hAlt] = [this.b.hAlt, this.b.h];
    }
  }

  /**
   * The step's layers over the residual h (from the token embeddings), then the output rows' logits. With `pause`,
   * yields each streamed layer's index once its routing is encoded (encodeStreamed fills the expert cache there).
   */
  private *encodeResidual(
    n: number,
    maxKeys: number,
    rows: readonly number[],
    layers: readonly GpuLayer[],
    pause: boolean,
  ): Generator<number, void> {
    const { rt, c, b } = this;
    const Hd = c.nEmbd;
    const ctx = this.opts.context;
    getRows(rt, this.embd, b.ids!, b.h!, n);
    const table = this.ropeTable.ensure(ctx);
    const s = new StepEncoding(rt, c, b, n, maxKeys, table, this.opts.pages?.pageSize ?? 0);
    // as the reference model reads (src/model/deepseek2.ts): h += attention(attn_norm(h)); h += ffn(ffn_norm(h))
    for (const l of layers) {
      encodeAttention(s, l);
      const streamed = this.streamed.get(l);
      if (streamed !== undefined) for (const _ of encodeMoE(s, l, streamed.ffn, pause)) yield streamed.il;
      else if (l.experts !== undefined) for (const _ of encodeMoE(s, l, l.experts));
      else encodeDenseFFN(s, l);
    }
    // "output_norm" of the logits rows (the last MoE layer's combine added to h first), then the output product
    if (rows.length === n) s.normH(this.outputNorm, b.hn!);
    else {
      if (s.combinePending) moeCombine(rt, b.ye!, b.rw!, b.h!, { n, K: c.nExpertUsed, width: Hd, acc: true });
      rows.forEach((r, j) =>
        rmsNorm(rt, b.h!, this.outputNorm, b.hn!, { n: 1, dim: Hd, xOff: r * Hd, yOff: j * Hd }, c.rmsEps),
      );
    }
    if (rows.length > 0) matmul(rt, this.output, b.hn!, b.logits!, { n: rows.length, xStride: Hd, yStride: c.nVocab });
  }

  /** Read back the logits of the last encoded step (submits it). */
  readLogits(rows: number): Promise<Float32Array> {
    return this.rt.readF32(this.b.logits!, 0, rows * this.c.nVocab);
  }

  /** Run one step and read back its logits rows [rows × n_vocab]. */
  async step(tokens: readonly StepToken[]): Promise<Float32Array> {
    const rows = await this.encodeAny(tokens);
    if (rows === 0) {
      await this.rt.sync();
      return new Float32Array(0);
    }
    return this.rt.readF32(this.b.logits!, 0, rows * this.c.nVocab);
  }

  /**
   * `steps` greedy decode steps of a batch, chained on the GPU: each step's argmax is the next step's input without a
   * round trip to the host, so the host encodes step s+1 while the GPU runs step s. Sequence i starts from `token` at
   * `pos` (its cache holds the positions before). Returns the chosen tokens [steps × batch] and their logprobs
   * (log_softmax of the step's logits row at the token, computed on the GPU: the sampler's logprob) [steps × batch].
   * With `draws` [steps × batch] (step-major), each step's tokens are drawn as stepPicks draws them instead.
   */
  async decodeGreedy(
    seqs: readonly {
      readonly token: number;
      readonly slot: number;
      readonly pos: number;
      readonly pages?: readonly number[];
    }[],
    steps: number,
    draws?: readonly PickDraw[],
  ): Promise<{ tokens: Uint32Array; logprobs: Float32Array }> {
    const B = seqs.length;
    if (steps < 1) return { tokens: new Uint32Array(0), logprobs: new Float32Array(0) };
    if (draws !== undefined && draws.length !== steps * B)
      throw new LatentError(`decodeGreedy: ${draws.length} draws for ${steps} steps of ${B} sequence(s)`);
    const words = steps * B;
    if (this.history === undefined || this.history.size < 2 * words * 4) {
      this.history?.destroy();
      this.history = this.rt.buffer(2 * words * 4, "greedy history");
    }
    for (let s = 0; s < steps; s++) {
      const tokens = seqs.map((q) => ({
        token: q.token,
        slot: q.slot,
        pos: q.pos + s,
        logits: true,
        ...(q.pages !== undefined ? { pages: q.pages } : {}),
      }));
      // one submission per step: the GPU already overlaps with the host, which encodes step s+1 while step s runs (steps
      // grouped 4 a submission idled the GPU longer, at the start, and saved nothing after it: BENCHMARKS.md, WebGPU)
      // (with streamed experts each step waits for its routed ids layer by layer: chained, but not ahead of the GPU)
      await this.encodeAny(tokens, {
        ...(draws !== undefined ? { picks: true, draws: draws.slice(s * B, (s + 1) * B) } : { greedy: true }),
        idsOnGpu: s > 0,
        submitEvery: Infinity,
      });
      this.rt.copy(this.b.ids!, 0, this.history, s * B * 4, B * 4);
      this.rt.copy(this.b.lp!, 0, this.history, (words + s * B) * 4, B * 4);
    }
    const both = await this.rt.read(this.history, 0, 2 * words * 4);
    return { tokens: new Uint32Array(both, 0, words), logprobs: new Float32Array(both, words * 4, words) };
  }

  /**
   * Compile, before the first step, the kernels of the step shapes `shapes` names. A step otherwise waits for the
   * driver's compiler for every kernel of a shape it is the first of: on a large GPU, `latent run`'s first prefill took
   * 1.6 s and its 255 decode steps 3.9 s, where warmed steps take 0.8 s. Nothing runs on the GPU: the shapes are
   * dry-encoded (GpuRuntime.collectPipelines), over one layer of each kind, and their kernels compiled at once
   * (GpuRuntime.precompile). Kernels depend on the key count only through one chunk, more, and the split past the
   * wide attention's rows, so each shape is encoded over its fewest keys, ATTN_CHUNK + 1 and the whole context. A
   * shape not named still runs, compiling what it needs. Returns how many kernels were compiled.
   */
  async warm(shapes: WarmShapes, onProgress?: (done: number, total: number) => void): Promise<number> {
    const { maxTokens, context } = this.opts;
    const layers = this.layerKinds();
    const keys = (least: number): number[] => [
      ...new Set([least, ATTN_CHUNK + 1, context].map((k) => Math.min(Math.max(k, least), context))),
    ];
    const codes = this.rt.collectPipelines(() => {
      for (let n = 1; n <= Math.min(shapes.decode ?? 0, maxTokens); n++) {
        const all = Array.from({ length: n }, (_, i) => i);
        for (const k of keys(1)) this.encodeLayers(n, k, all, layers);
        if (shapes.greedy === true)
          argmaxRows(this.rt, this.b.logits!, this.b.ids!, this.b.amax!, {
            n,
            width: this.c.nVocab,
            logprobs: this.b.lp!,
          });
        if (shapes.draws === true) {
          sampleRows(this.rt, this.b.logits!, this.b.draw!, this.b.ids!, this.b.lp!, this.b.amax!, {
            n,
            width: this.c.nVocab,
          });
          if (this.b.cand !== undefined)
            sampleRows(this.rt, this.b.logits!, this.b.draw!, this.b.ids!, this.b.lp!, this.b.amax!, {
              n,
              width: this.c.nVocab,
              cand: this.b.cand,
              nucleus: this.b.nuc!,
            });
        }
      }
      for (const n of new Set(shapes.prefill ?? [])) {
        if (!Number.isInteger(n) || n < 1 || n > maxTokens)
          throw new LatentError(`warm: a prefill step of ${n} tokens (1..${maxTokens})`);
        for (const k of keys(n)) this.encodeLayers(n, k, [n - 1], layers);
      }
    });
    await this.rt.precompile(codes, onProgress);
    return codes.length;
  }

  /**
   * Layers that between them use every kernel a step of this model uses: the first of each kind (its matrices' types
   * and shapes, and whether a MoE layer's combine is pending when it starts), each after the layer before it, and the
   * last layer (the output's norm depends on it). A layer whose kind was seen adds no kernel.
   */
  private layerKinds(): GpuLayer[] {
    const seen = new Set<string>();
    const out: GpuLayer[] = [];
    this.layers.forEach((l, i) => {
      const prev = this.layers[i - 1];
      const moe = (x: GpuLayer | undefined): boolean =>
        x !== undefined && (x.experts !== undefined || this.streamed.has(x));
      const kind = `${moe(prev)}|${this.streamed.has(l)}|${shapeOf(l)}`;
      if (seen.has(kind) && i < this.layers.length - 1) return;
      seen.add(kind);
      if (prev !== undefined && out[out.length - 1] !== prev) out.push(prev);
      out.push(l);
    });
    return out;
  }

  /**
   * Run one step; for each of its logits rows the greedy choice — argmax (ties to the lowest id, NaN never chosen) and
   * its logprob (NaN for a row with NaN or +Infinity, or all −Infinity) — computed on the GPU, and the rows themselves
   * only when `readLogits` (else empty): a server's greedy requests need no logits read back or sampled on the host.
   */
  async stepPicks(
    tokens: readonly StepToken[],
    readLogits: boolean,
    draws?: readonly PickDraw[],
  ): Promise<{ logits: Float32Array; ids: Uint32Array; logprobs: Float32Array }> {
    const rows = await this.encodeAny(tokens, { picks: true, ...(draws !== undefined ? { draws } : {}) });
    if (rows === 0) {
      await this.rt.sync();
      return { logits: new Float32Array(0), ids: new Uint32Array(0), logprobs: new Float32Array(0) };
    }
    const [ids, lps, logits] = await Promise.all([
      this.rt.read(this.b.ids!, 0, rows * 4),
      this.rt.read(this.b.lp!, 0, rows * 4),
      readLogits ? this.rt.readF32(this.b.logits!, 0, rows * this.c.nVocab) : Promise.resolve(new Float32Array(0)),
    ]);
    return { logits, ids: new Uint32Array(ids), logprobs: new Float32Array(lps) };
  }

  /** Prefill `tokens` of one sequence from position pos0 in chunks of maxTokens; the last token's logits. */
  async prefill(slot: number, tokens: readonly number[], pos0 = 0, allLogits = false): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (let at = 0; at < tokens.length; at += this.opts.maxTokens) {
      const chunk = tokens
        .slice(at, at + this.opts.maxTokens)
        .map((token, i) => ({ token, slot, pos: pos0 + at + i, logits: allLogits || at + i === tokens.length - 1 }));
      const logits = await this.step(chunk);
      for (let r = 0; r * this.c.nVocab < logits.length; r++)
        out.push(logits.subarray(r * this.c.nVocab, (r + 1) * this.c.nVocab));
    }
    return out;
  }
}
