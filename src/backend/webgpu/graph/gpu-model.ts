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
import {
  expertListWords,
  expertLists,
  expertsFrom,
  fusable,
  getRows,
  GpuMatrix,
  matmul,
  matmulGather,
  matmulGatherSwiGLU,
  matmulSwiGLUSteps,
  type CombineArgs,
  type FusionArgs,
} from "../kernels/matmul/matrix.js";
import { addNorm, copyU32, layerNorm, rmsNorm, rope, RopeTable, ropeTo, scatterRows } from "../kernels/rows/rows.js";
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
import { attention, attentionScratch, kvCacheWrite } from "../kernels/attention/attention.js";
import { dsaSelect } from "../kernels/dsa/dsa.js";
import { moeCombine, moeRoute, routeNormShape, type RouteArgs } from "../kernels/moe/moe.js";
import { attentionFused, attnFusedPartWords, attnFusedShape } from "../kernels/attention/fused.js";
import type { GpuRuntime, Recording } from "../core/runtime.js";
import { ATTN_CHUNK } from "../kernels/attention/attention.wgsl.js";
import { layerWeightBytes, upload, uploadLayer, type GpuFFN, type GpuLayer } from "./weights.js";

/** Steps of at most this many tokens run independent kernels in one dispatch (GpuRuntime.together); tune.fuseTokens overrides. */
export const FUSE_MAX_TOKENS = 4;

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
  /** weight bytes on the GPU */
  readonly weightBytes: number;
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
    let bytes = 0;
    this.embd = upload(rt, w.tokenEmbd);
    this.output = w.output === w.tokenEmbd ? this.embd : upload(rt, w.output);
    this.outputNorm = rt.upload(w.outputNorm, "output_norm");
    w.layers.forEach((lw, il) => {
      const layer = uploadLayer(rt, c, lw, il, cacheRows);
      bytes += layerWeightBytes(layer);
      this.layers.push(layer);
    });
    this.weightBytes = bytes + this.embd.bytes + (this.output === this.embd ? 0 : this.output.bytes);
    this.ropeTable = new RopeTable(rt, model.rope);
    this.ropeTable.ensure(context);

    const N = opts.maxTokens;
    const { nEmbd: Hd, nHead: H, qkNope: P, vHead: V, nExpertUsed: K, nExpert: E } = c;
    const D = P + R;
    this.widthFF = Math.max(c.nFF, K * c.nFFExp);
    const buf = (name: string, floats: number): void => {
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
    buf("a0", N * this.a0Stride());
    buf("q", N * H * D);
    buf("qAbs", N * H * (L + R));
    buf("lo", N * H * L);
    buf("o", N * H * V);
    buf("part", attentionScratch(N, H, L, context));
    // the one-token fused attention's key ranges past one chunk of keys (attnFusedPartWords at its most splits, 16)
    buf("attnPart", attnFusedPartWords({ heads: H, split: 16, L }));
    buf("g", N * this.widthFF);
    // the shared experts' own intermediate: their products run in the same dispatches as the routed experts' (on G)
    buf("gs", N * Math.max(0, ...this.layers.map((l) => l.shared?.gate.rows ?? 0)));
    buf("elist", expertListWords(N * Math.max(1, K), Math.max(1, E)));
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
  }

  /** Width of an A0 row: the first product's outputs (q or the q-LoRA latent) then kv_a's (c, k_pe). */
  private a0Stride(): number {
    const c = this.c;
    return (c.qLoraRank > 0 ? c.qLoraRank : c.nHead * (c.qkNope + c.qkRope)) + c.kvLoraRank + c.qkRope;
  }

  /**
   * Record one step (no submission). Returns the number of logit rows it will produce. With `greedy`, every token
   * must produce logits and the step ends with the argmax of each row written over the token ids (greedy sampling on
   * the GPU: the next step can run on them with `idsOnGpu` before the host has seen them), and its logprob
   * (log_softmax of the row at it, as the host sampler's) into the `lp` buffer. With `picks`, the same argmax and
   * logprob of each logits row, whichever tokens have them (stepPicks); with `draws` too (one per logits row), each
   * row's token is drawn at its temperature instead (0: greedy; sample.ts sampleRows).
   */
  encode(
    tokens: readonly StepToken[],
    opts: {
      readonly greedy?: boolean;
      readonly picks?: boolean;
      readonly draws?: readonly PickDraw[];
      readonly idsOnGpu?: boolean;
      readonly submitEvery?: number;
    } = {},
  ): number {
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
    const rec = this.recordings.get(key);
    if (rec !== undefined) {
      this.lastRecording = rec;
      rt.replay(rec, opts.submitEvery);
      this.replayStats.replayed++;
      return rows.length;
    }
    rt.beginRecording();
    this.encodeLayers(n, maxKeys, rows);
    if (draws !== undefined)
      sampleRows(rt, b.logits!, b.draw!, b.ids!, b.lp!, b.amax!, {
        n: rows.length,
        width: c.nVocab,
        ...(topK ? { cand: b.cand! } : {}),
        ...(nucleus ? { nucleus: b.nuc! } : {}),
      });
    else if (picks) argmaxRows(rt, b.logits!, b.ids!, b.amax!, { n: rows.length, width: c.nVocab, logprobs: b.lp! });
    const made = rt.endRecording();
    this.lastRecording = made;
    if (made !== undefined) {
      if (this.recordings.size >= 64) this.recordings.clear();
      this.recordings.set(key, made);
      this.replayStats.recorded++;
    }
    return rows.length;
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
      this.encodeResidual(n, maxKeys, rows, layers);
    } finally {
      if (this.b.h !== residual) [this.b.h, this.b.hAlt] = [this.b.hAlt, this.b.h];
    }
  }

  private encodeResidual(n: number, maxKeys: number, rows: readonly number[], layers: readonly GpuLayer[]): void {
    const { rt, c, b } = this;
    const {
      nEmbd: Hd,
      nHead: H,
      qkNope: P,
      qkRope: R,
      vHead: V,
      kvLoraRank: L,
      qLoraRank: Lq,
      nExpertUsed: K,
      nFFExp: Fe,
    } = c;
    const D = P + R;
    const ctx = this.opts.context;
    // independent kernels share one dispatch only in small steps, where per-dispatch costs dominate: on a large GPU
    // (v2-lite) combining cut batch 1 from 351 to 298 dispatches (GPU 3.81 → 3.59 ms per step) but made the 512-token
    // prefill slower (GPU 409 → 444 ms) and gained nothing at batch 64 (64.8 → 65.8 ms)
    const small = n <= (rt.tune.fuseTokens ?? FUSE_MAX_TOKENS);
    const together = (fn: () => void): void => (small && rt.tune.together !== 0 ? rt.together(fn) : fn());
    getRows(rt, this.embd, b.ids!, b.h!, n);
    const table = this.ropeTable.ensure(ctx);
    // a MoE layer's weighted expert outputs wait in YE until the next RMSNorm, which adds them to h first (one kernel)
    let combinePending = false;
    const normH = (g: GPUBuffer, y: GPUBuffer): void => {
      if (combinePending) addNorm(rt, b.ye!, b.rw!, b.h!, g, y, { n, K, dim: Hd }, c.rmsEps);
      else rmsNorm(rt, b.h!, g, y, { n, dim: Hd }, c.rmsEps);
      combinePending = false;
    };
    // small steps on the wide kernel (tune.normFuse, default 1): the FFN's RMSNorm inside the products that read it, and
    // the attention's RMSNorm (with the last MoE layer's combine into the residual) inside A0's staging of x, the combine
    // added to h by o: two dispatches fewer a layer. On a large GPU (v2-lite batch 1) the attention's side was slower while
    // the kernels were fully unrolled (3.31 against 3.13 ms with the FFN's alone); with one chunk step a pass
    // (shapes.ts, UNROLL) it is faster, in one call 2.75 / 2.75 / 2.76 against 2.83 / 2.83 / 2.84 ms with the FFN's
    // alone
    const fuseMode = small ? (rt.tune.normFuse ?? 1) : 0;
    const fuseAttn = fuseMode === 1 || fuseMode === 3;
    const fuseFFN = fuseMode === 1 || fuseMode === 2;
    const combineArgs: CombineArgs = { ye: b.ye!, rw: b.rw!, K };
    for (const l of layers) {
      const S0 = this.a0Stride();
      const F0 = S0 - L - R;
      const attnFused =
        fuseAttn &&
        b.metaBase === undefined &&
        l.qkvA !== undefined &&
        fusable(rt, l.qkvA, n, false) &&
        (!combinePending || fusable(rt, l.o, n, false));
      const oCombine = attnFused && combinePending;
      if (!attnFused) normH(l.attnNorm, b.x!);
      // A0 = [q or the q-LoRA latent (F0) | c | k_pe] per token: one product when the two matrices stack
      if (attnFused)
        matmul(rt, l.qkvA!, b.h!, b.a0!, {
          n,
          xStride: Hd,
          yStride: S0,
          fuse: { norm: { g: l.attnNorm, eps: c.rmsEps, ...(oCombine ? { combine: combineArgs } : {}) } },
        });
      else if (l.qkvA !== undefined) matmul(rt, l.qkvA, b.x!, b.a0!, { n, xStride: Hd, yStride: S0 });
      else {
        matmul(rt, (l.qA ?? l.q)!, b.x!, b.a0!, { n, xStride: Hd, yStride: S0 });
        matmul(rt, l.kvA!, b.x!, b.a0!, { n, xStride: Hd, yStride: S0, yOff: F0 });
      }
      // cache rows: RMSNorm(c)·g and rope(k_pe), written at (slot, pos); in the same dispatch, the q-LoRA latent's norm,
      // or (queries already in A0) q_pe roped straight into the absorbed queries [q_abs (L) | q_pe (R)] per head
      const lora = c.qLoraRank > 0;
      const qRope = { y: b.qAbs!, heads: H, qpOff: P, qHead: D, yOff: L, yTok: H * (L + R), yHead: L + R };
      const cacheWrite = (): void =>
        kvCacheWrite(
          rt,
          b.a0!,
          l.kvANorm,
          table,
          R,
          b.pos!,
          b.rowIdx!,
          l.cacheC,
          l.cacheK,
          { n, L, kvOff: F0, stride: S0, ...(lora ? { qNorm: { g: l.qANorm!, dim: Lq } } : { qRope }) },
          c.rmsEps,
        );
      // absorbed queries [q_abs (L) | q_pe (R)] per head: q_abs = W_UKᵀ q_nope (q_pe roped straight into place)
      const absorb = (q: GPUBuffer, qStride: number): void =>
        matmul(rt, l.kB, q, b.qAbs!, {
          n,
          xStride: qStride,
          yStride: H * (L + R),
          batch: { count: H, xBatch: D, yBatch: L + R },
        });
      // one token, no DSA: absorb, attention and W_UV as one dispatch, with the cache write too without q-LoRA; past one
      // chunk of keys as two, the keys split over the workgroups (tune.attnFuse, default on GPUs; attention/fused.ts)
      const fusedAttn =
        n === 1 && b.metaBase === undefined
          ? attnFusedShape(rt, l.kB, l.vB, { heads: H, P, R, L, V, maxKeys, lora })
          : undefined;
      const fusedArgs = { scale: c.kqScale, eps: c.rmsEps, pageSize: this.opts.pages?.pageSize ?? 0, kvOff: F0 };
      const fusedBufs = {
        kB: l.kB,
        vB: l.vB,
        g: l.kvANorm,
        table,
        pos: b.pos!,
        rowIdx: b.rowIdx!,
        cacheC: l.cacheC,
        cacheK: l.cacheK,
        meta: b.meta!,
        sel: b.sel!,
        o: b.o!,
        part: b.attnPart!,
      };
      if (fusedAttn !== undefined && !lora) {
        attentionFused(rt, fusedAttn, { a0: b.a0!, ...fusedBufs }, fusedArgs);
      } else if (lora) {
        // the queries from the normed latent into Q
        cacheWrite();
        matmul(rt, l.qB!, b.a0!, b.q!, { n, xStride: S0, yStride: H * D });
        if (b.metaBase !== undefined) this.selectKeys(l, n, maxKeys);
        if (fusedAttn !== undefined) attentionFused(rt, fusedAttn, { a0: b.q!, ...fusedBufs }, fusedArgs);
        else {
          absorb(b.q!, H * D);
          ropeTo(rt, table, R, b.q!, b.pos!, b.qAbs!, {
            n,
            heads: H,
            xOff: P,
            tokStride: H * D,
            headStride: D,
            yOff: L,
            yTok: H * (L + R),
            yHead: L + R,
          });
        }
      } else {
        // the queries already in A0: the cache write (and q_pe into columns [L, L+R) of QABS) and q_abs (columns [0, L))
        // read A0 and write apart
        together(() => {
          cacheWrite();
          absorb(b.a0!, S0);
        });
        if (b.metaBase !== undefined) this.selectKeys(l, n, maxKeys);
      }
      if (fusedAttn === undefined)
        attention(
          rt,
          { q: b.qAbs!, k1: l.cacheC, k2: l.cacheK, v: l.cacheC, meta: b.meta!, sel: b.sel!, o: b.lo!, part: b.part },
          {
            nq: n,
            heads: H,
            d1: L,
            d2: R,
            dv: L,
            scale: c.kqScale,
            maxKeys,
            q: { off: 0, stride: H * (L + R), head: L + R, q2Off: L },
            k1: { off: 0, stride: L, head: 0 },
            k2: { off: 0, stride: R },
            v: { off: 0, stride: L, head: 0 },
            o: { off: 0, stride: H * L, head: L },
            pageSize: this.opts.pages?.pageSize ?? 0,
          },
        );
      if (fusedAttn === undefined)
        matmul(rt, l.vB, b.lo!, b.o!, { n, xStride: H * L, yStride: H * V, batch: { count: H, xBatch: L, yBatch: V } });
      matmul(rt, l.o, b.o!, b.h!, {
        n,
        xStride: H * V,
        yStride: Hd,
        acc: true,
        ...(oCombine ? { fuse: { addCombine: combineArgs } } : {}),
      });
      if (oCombine) combinePending = false;

      const E = c.nExpert;
      const routing: RouteArgs = {
        n,
        E,
        K,
        nGroup: c.nGroup,
        nGroupUsed: c.nGroupUsed,
        softmax: c.gating === "softmax",
        groupMax: c.gating === "softmax" && c.groupScoring === "definition",
        norm: c.weightsNorm,
        scale: c.weightsScale,
      };
      const lists = l.experts !== undefined && n * K >= expertsFrom(rt, l.experts.gate) * E ? b.elist! : undefined;
      // small MoE steps on the wide kernel: the FFN's RMSNorm inside its readers instead of a dispatch of its own — the
      // shared and routed gate·up products normalize x as they stage it, the router reads h with ffn_norm folded into
      // its rows, and the routing scales its logits by 1/rms(h)
      const ffnFused =
        fuseFFN &&
        l.experts !== undefined &&
        l.routerNormed !== undefined &&
        lists === undefined &&
        routeNormShape(rt, routing, Hd) !== undefined &&
        fusable(rt, l.experts.gate, 1, true, l.experts.up) &&
        (l.shared === undefined || fusable(rt, l.shared.gate, n, false, l.shared.up));
      const ffnIn = ffnFused ? b.h! : b.x!;
      const ffnNorm = ffnFused ? { norm: { g: l.ffnNorm, eps: c.rmsEps } } : undefined;
      if (!ffnFused) normH(l.ffnNorm, b.x!);
      if (l.dense !== undefined) this.ffn(l.dense, n);
      if (l.experts !== undefined) {
        const shared = l.shared;
        // the router and the shared experts' gate·up (its first dispatch: the second reads it) both only read x
        const [sharedFirst, ...sharedRest] =
          shared !== undefined ? this.ffnGateUp(shared, n, b.gs!, ffnIn, ffnNorm) : [];
        together(() => {
          matmul(rt, ffnFused ? l.routerNormed!() : l.router!, ffnIn, b.z!, { n, xStride: Hd, yStride: E });
          sharedFirst?.();
        });
        for (const step of sharedRest) step();
        // (tune.sharedEarly, default) the shared down product beside the routing, into the residual's other buffer: h' =
        // h + W_down·g_s, so that the routing and the routed gate·up still read h; the routed down product then runs
        // alone. Both down products in one dispatch made each the other's tail: on a large GPU (v2-lite batch 1) GPU 2.58 →
        // 2.51 ms a step, and 2.36 once the routing kernel took 256 threads and so shared that dispatch (route.wgsl.ts)
        const early =
          small &&
          rt.tune.sharedEarly !== 0 &&
          shared !== undefined &&
          lists === undefined &&
          sharedRest.length === 0 &&
          fusable(rt, shared.down, n, false);
        together(() => {
          moeRoute(
            rt,
            b.z!,
            l.bias,
            b.rids!,
            b.rw!,
            routing,
            ffnFused ? { h: b.h!, dim: Hd, eps: c.rmsEps } : undefined,
          );
          if (early)
            matmul(rt, shared!.down, b.gs!, b.hAlt!, {
              n,
              xStride: shared!.gate.rows,
              yStride: Hd,
              fuse: { addCombine: { ye: b.h!, rw: b.ones!, K: 1 } },
            });
        });
        // expert-major products (pairs ≥ experts) read the pairs grouped by expert, built once for the three
        if (lists !== undefined) expertLists(rt, b.rids!, lists, { pairs: n * K, E });
        // g = silu(W_gate x)·(W_up x) per pair (one dual product at small batches, else gate then up with SwiGLU fused)
        matmulGatherSwiGLU(rt, l.experts.gate, l.experts.up, ffnIn, b.g!, b.rids!, {
          pairs: n * K,
          xDiv: K,
          xBatch: Hd,
          yBatch: Fe,
          lists,
          ...(ffnNorm !== undefined ? { fuse: ffnNorm } : {}),
        });
        // the routed experts' down products into YE (and, sharedEarly = 0, the shared experts' into h beside them)
        together(() => {
          matmulGather(rt, l.experts!.down, b.g!, b.ye!, b.rids!, {
            pairs: n * K,
            xDiv: 1,
            xBatch: Fe,
            yBatch: Hd,
            lists,
          });
          if (shared !== undefined && !early) this.ffnDown(shared, n, b.gs!);
        });
        if (early) [b.h, b.hAlt] = [b.hAlt, b.h];
        combinePending = true;
      }
    }
    // output rows
    if (rows.length === n) normH(this.outputNorm, b.hn!);
    else {
      if (combinePending) moeCombine(rt, b.ye!, b.rw!, b.h!, { n, K, width: Hd, acc: true });
      rows.forEach((r, j) =>
        rmsNorm(rt, b.h!, this.outputNorm, b.hn!, { n: 1, dim: Hd, xOff: r * Hd, yOff: j * Hd }, c.rmsEps),
      );
    }
    if (rows.length > 0) matmul(rt, this.output, b.hn!, b.logits!, { n: rows.length, xStride: Hd, yStride: c.nVocab });
  }

  /**
   * DSA: the step's indexer keys into the layer's key cache, then the top_k keys of every query (src/model/dsa.ts) into
   * SEL with META pointing the attention at them. The selection rewrites META, so each layer starts from a copy.
   */
  private selectKeys(l: GpuLayer, n: number, maxKeys: number): void {
    const { rt, c, b } = this;
    copyU32(rt, b.metaBase!, b.meta!, 4 * n);
    const ix = l.indexer;
    const cfg = c.indexer!;
    if (ix === undefined) return; // a layer without an indexer attends densely
    const { nHead: Hi, headDim: Di, topK } = cfg;
    const table = this.ropeTable.ensure(this.opts.context);
    // keys: LayerNorm (eps 0, as llama.cpp reads none) and rope on the first R dims, written at (slot, pos)
    matmul(rt, ix.k, b.x!, b.kI!, { n, xStride: c.nEmbd, yStride: Di });
    layerNorm(rt, b.kI!, ix.kNormW, ix.kNormB, undefined, { n, dim: Di }, 0);
    rope(rt, table, c.qkRope, b.kI!, b.pos!, { n, heads: 1, xOff: 0, tokStride: Di, headStride: Di });
    scatterRows(rt, b.kI!, b.rowIdx!, ix.cache, { n, width: Di });
    // queries from the normed q-LoRA latent, head weights from x
    matmul(rt, ix.qB, b.a0!, b.qI!, { n, xStride: this.a0Stride(), yStride: Hi * Di });
    rope(rt, table, c.qkRope, b.qI!, b.pos!, { n, heads: Hi, xOff: 0, tokStride: Hi * Di, headStride: Di });
    matmul(rt, ix.proj, b.x!, b.wI!, { n, xStride: c.nEmbd, yStride: Hi });
    // score rows as wide as the step's key chunks (fixed for a recorded step shape)
    const T = Math.max(1, Math.ceil(maxKeys / ATTN_CHUNK)) * ATTN_CHUNK;
    dsaSelect(
      rt,
      { q: b.qI!, w: b.wI!, keys: ix.cache, meta: b.meta!, scores: b.scores!, sel: b.sel! },
      { n, T, Hi, D: Di, topK, pageSize: this.opts.pages?.pageSize ?? 0 },
    );
  }

  /** h += down(silu(gate·x) ⊙ up·x) for n tokens. */
  private ffn(f: GpuFFN, n: number): void {
    for (const step of this.ffnGateUp(f, n, this.b.g!)) step();
    this.ffnDown(f, n, this.b.g!);
  }

  /** g = silu(gate·x) ⊙ up·x as its dependent steps (one dual product where the wide kernel applies); x: b.x unless given (with its fused norm). */
  private ffnGateUp(f: GpuFFN, n: number, g: GPUBuffer, x: GPUBuffer = this.b.x!, fuse?: FusionArgs): (() => void)[] {
    return matmulSwiGLUSteps(this.rt, f.gate, f.up, x, g, {
      n,
      xStride: this.c.nEmbd,
      yStride: f.gate.rows,
      ...(fuse !== undefined ? { fuse } : {}),
    });
  }

  /** h += down·g. */
  private ffnDown(f: GpuFFN, n: number, g: GPUBuffer): void {
    matmul(this.rt, f.down, g, this.b.h!, { n, xStride: f.gate.rows, yStride: this.c.nEmbd, acc: true });
  }

  /** Read back the logits of the last encoded step (submits it). */
  readLogits(rows: number): Promise<Float32Array> {
    return this.rt.readF32(this.b.logits!, 0, rows * this.c.nVocab);
  }

  /** Run one step and read back its logits rows [rows × n_vocab]. */
  async step(tokens: readonly StepToken[]): Promise<Float32Array> {
    const rows = this.encode(tokens);
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
      this.encode(tokens, {
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
      const kind = `${prev?.experts !== undefined}|${shapeOf(l)}`;
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
    const rows = this.encode(tokens, { picks: true, ...(draws !== undefined ? { draws } : {}) });
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
