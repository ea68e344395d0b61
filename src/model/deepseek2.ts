import { plainKernels, type MatKernels } from "./kernels.js";
import { rmsNorm } from "../tensor/ops.js";
import type { LatentStore } from "./cache.js";
import { LatentError } from "../util/errors.js";
import type { ModelConfig } from "./config.js";
import {
  ATTENTION,
  project,
  sliceProjections,
  type AttentionPath,
  type KeySelection,
  type LatentRows,
  type Projections,
} from "./mla.js";
import { mixExperts, routeTokens, routerLogitsOf, swiglu, type Route } from "./moe.js";
import { Rope } from "./rope.js";
import type { LayerWeights, ModelWeights } from "./weights.js";

export interface ForwardOptions {
  readonly path: AttentionPath;
  /** logits for every position of the chunk, or only the last one (generation) */
  readonly logits: "all" | "last";
  readonly trace?: Trace;
}

/** One sequence's part of a batch: its new tokens, its cache (undefined: reference path from position 0), its path. */
export interface SequenceChunk {
  readonly tokens: readonly number[];
  readonly cache: LatentStore | undefined;
  readonly path: AttentionPath;
  readonly logits: "all" | "last" | "none";
}

/** Intermediate values, for diagnosis: rows of `width` values, one per token of the batch. */
export type TraceStage =
  | "embed"
  | "attn_norm"
  | "q"
  | "latent"
  | "k_pe"
  | "attn_out"
  | "o_proj"
  | "ffn_norm"
  | "router"
  | "ffn_out"
  | "residual"
  | "output_norm";
export type Trace = (layer: number, stage: TraceStage, rows: Float64Array, width: number) => void;

/** Where each sequence of a batch lies: rows [starts[i], starts[i] + length) of the batch, and every row's position. */
interface BatchLayout {
  readonly seqs: readonly SequenceChunk[];
  readonly starts: readonly number[];
  readonly positions: readonly number[];
}

/**
 * DeepSeek-V2/V3 (GGUF `deepseek2`) forward pass over a batch of sequence chunks:
 *   h = embed(tokens)
 *   per layer: h = h + W_o · MLA(attn_norm(h));  h = h + FFN(ffn_norm(h))   (dense SwiGLU for the leading layers, else MoE)
 *   logits = output · output_norm(h)
 * Per-token work (norms, projections, FFN/MoE, output) runs over all tokens of the batch at once; attention runs per
 * sequence on its own cache and path. The reference path always uses the plain kernels.
 */
export class DeepSeek2 {
  /** matrix kernels of the prefill/decode paths (a fast backend may replace them) */
  kernels: MatKernels = plainKernels;

  constructor(
    readonly config: ModelConfig,
    readonly weights: ModelWeights,
    /** the rotary embedding of queries and keys (default: the config's interleaved YaRN rope) */
    readonly rope: Rope = Rope.forConfig(config),
  ) {}

  /** One sequence: `tokens` at positions cache.length.. (or, cache undefined, the whole sequence on the reference path). */
  forward(tokens: readonly number[], cache: LatentStore | undefined, opts: ForwardOptions): Float32Array {
    return this.forwardBatch([{ tokens, cache, path: opts.path, logits: opts.logits }], opts.trace)[0];
  }

  /** Logits [m × n_vocab] per sequence (m = chunk length, 1, or 0 as each asked). */
  forwardBatch(seqs: readonly SequenceChunk[], trace?: Trace): Float32Array[] {
    if (seqs.length === 0) return [];
    const k = seqs.every((s) => s.path === "reference")
      ? plainKernels
      : seqs.some((s) => s.path === "reference")
        ? undefined
        : this.kernels;
    if (k === undefined) throw new LatentError("the reference path cannot share a batch with other paths");
    const batch = this.layout(seqs);
    const n = batch.positions.length;
    const h = this.embed(seqs, n);
    trace?.(-1, "embed", h, this.config.nEmbd);
    this.weights.layers.forEach((lw, il) => {
      addInPlace(h, this.attention(il, lw, this.norm(h, n, lw.attn.norm, il, "attn_norm", trace), batch, k, trace));
      addInPlace(h, this.ffn(il, lw, this.norm(h, n, lw.ffnNorm, il, "ffn_norm", trace), n, k, trace));
      trace?.(il, "residual", h, this.config.nEmbd);
    });
    seqs.forEach((s) => s.cache?.advance(s.tokens.length));
    return this.logits(h, batch, k, trace);
  }

  /** Checks each chunk against its path and the context, and lays the chunks out one after another. */
  private layout(seqs: readonly SequenceChunk[]): BatchLayout {
    const c = this.config;
    const starts: number[] = [];
    const positions: number[] = [];
    let n = 0;
    for (const s of seqs) {
      if (s.tokens.length === 0) throw new LatentError("forward needs at least one token per sequence");
      if (s.path === "decode" && s.tokens.length !== 1)
        throw new LatentError(`the decode path takes one token at a time, got ${s.tokens.length}`);
      if (s.cache === undefined && s.path !== "reference")
        throw new LatentError(`the ${s.path} path needs a latent cache`);
      const pos0 = s.cache?.length ?? 0;
      if (pos0 + s.tokens.length > c.contextLength)
        throw new LatentError(
          `context full: ${pos0 + s.tokens.length} positions exceed the context length ${c.contextLength}`,
        );
      starts.push(n);
      s.tokens.forEach((_, t) => positions.push(pos0 + t));
      n += s.tokens.length;
    }
    return { seqs, starts, positions };
  }

  /** The token embeddings of the batch, [n × Hd]. */
  private embed(seqs: readonly SequenceChunk[], n: number): Float64Array {
    const c = this.config;
    const h = new Float64Array(n * c.nEmbd);
    let row = 0;
    for (const s of seqs) {
      for (const tok of s.tokens) {
        if (!Number.isInteger(tok) || tok < 0 || tok >= c.nVocab)
          throw new LatentError(`token id ${tok} is outside the vocabulary (0..${c.nVocab - 1})`);
        h.set(this.weights.tokenEmbd.row(tok), row++ * c.nEmbd);
      }
    }
    return h;
  }

  /** RMSNorm of each of the n rows of h by `weight`, traced as `stage`. */
  private norm(
    h: Float64Array,
    n: number,
    weight: Float32Array,
    il: number,
    stage: TraceStage,
    trace: Trace | undefined,
  ): Float64Array {
    const Hd = this.config.nEmbd;
    const x = new Float64Array(n * Hd);
    for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, weight, this.config.rmsEps, x, t * Hd);
    trace?.(il, stage, x, Hd);
    return x;
  }

  /** Logits of the rows each sequence asked for: output · output_norm(h), split per sequence. */
  private logits(h: Float64Array, batch: BatchLayout, k: MatKernels, trace: Trace | undefined): Float32Array[] {
    const c = this.config;
    const Hd = c.nEmbd;
    const rows: number[] = [];
    const counts = batch.seqs.map((s, i) => {
      const len = s.tokens.length;
      const first = s.logits === "all" ? 0 : s.logits === "last" ? len - 1 : len;
      for (let t = first; t < len; t++) rows.push(batch.starts[i] + t);
      return len - first;
    });
    const m = rows.length;
    const hn = new Float64Array(m * Hd);
    rows.forEach((r, i) => rmsNorm(h, r * Hd, this.weights.outputNorm, c.rmsEps, hn, i * Hd));
    trace?.(c.nLayer, "output_norm", hn, Hd);
    const logits64 = new Float64Array(m * c.nVocab);
    if (m > 0) k.matmul(this.weights.output, hn, m, Hd, logits64, c.nVocab);
    const out: Float32Array[] = [];
    let at = 0;
    for (const cnt of counts) {
      out.push(Float32Array.from(logits64.subarray(at * c.nVocab, (at + cnt) * c.nVocab)));
      at += cnt;
    }
    return out;
  }

  /** One layer's attention for the batch (x = attn_norm output) → W_o · o, [n × Hd]. */
  private attention(
    il: number,
    lw: LayerWeights,
    x: Float64Array,
    batch: BatchLayout,
    k: MatKernels,
    trace: Trace | undefined,
  ): Float64Array {
    const c = this.config;
    const { seqs, starts, positions } = batch;
    const n = positions.length;
    const HV = c.nHead * c.vHead;
    const all = project(lw.attn, c, this.rope, x, n, positions, k);
    trace?.(il, "q", all.q, c.nHead * (c.qkNope + c.qkRope));
    trace?.(il, "latent", all.c, c.kvLoraRank);
    trace?.(il, "k_pe", all.kPe, c.qkRope);
    const o = new Float64Array(n * HV);
    seqs.forEach((s, si) => {
      const start = starts[si];
      const len = s.tokens.length;
      const pos0 = positions[start];
      const pr = sliceProjections(all, c, start, len);
      const xs = x.subarray(start * c.nEmbd, (start + len) * c.nEmbd);
      let lat: LatentRows;
      if (s.cache === undefined) {
        lat = { c: pr.c, kPe: pr.kPe, length: len };
      } else {
        s.cache.append(il, pr.c, pr.kPe, this.indexerKeys(il, lw, xs, len, pos0, k));
        lat = s.cache.latent(il, pos0 + len);
      }
      const sel = this.selectKeys(il, lw, xs, pr, len, pos0, s.cache, k);
      o.set(this.attend(s.path, lw, pr, len, pos0, lat, sel, k), start * HV);
    });
    trace?.(il, "attn_out", o, HV);
    const out = new Float64Array(n * c.nEmbd);
    k.matmul(lw.attn.o, o, n, HV, out, c.nEmbd);
    trace?.(il, "o_proj", out, c.nEmbd);
    return out;
  }

  /** One sequence's attention output o [n × H·V] on its path, from its projections and latent rows. */
  protected attend(
    path: AttentionPath,
    lw: LayerWeights,
    pr: Projections,
    n: number,
    pos0: number,
    lat: LatentRows,
    sel: KeySelection | undefined,
    k: MatKernels,
  ): Float64Array {
    return ATTENTION[path](lw.attn, this.config, pr, n, pos0, lat, sel, k);
  }

  /** One layer's FFN for the batch (x = ffn_norm output), [n × Hd]: dense SwiGLU for the leading layers, else MoE. */
  private ffn(
    il: number,
    lw: LayerWeights,
    x: Float64Array,
    n: number,
    k: MatKernels,
    trace: Trace | undefined,
  ): Float64Array {
    const c = this.config;
    const out = new Float64Array(n * c.nEmbd);
    if (lw.dense !== undefined) {
      swiglu(lw.dense, x, n, c.nEmbd, out, false, undefined, k);
    } else {
      const w = lw.moe!;
      const z = routerLogitsOf(w, c, x, n, k);
      trace?.(il, "router", z, c.nExpert);
      mixExperts(w, c, this.route(z, n, w.bias), x, n, out, k);
    }
    trace?.(il, "ffn_out", out, c.nEmbd);
    return out;
  }

  /** The experts and weights of n tokens from their router logits z [n × E] (the config's gating, moe.ts `route`). */
  protected route(z: Float64Array, n: number, bias: Float32Array | undefined): Route[] {
    return routeTokens(z, n, this.config, bias);
  }

  /** Hook for sparse attention: keys that each query may see (dense MLA: all causal keys). */
  protected selectKeys(
    _il: number,
    _lw: LayerWeights,
    _x: Float64Array,
    _pr: Projections,
    _n: number,
    _pos0: number,
    _cache: LatentStore | undefined,
    _k: MatKernels,
  ): KeySelection | undefined {
    return undefined;
  }

  /** Hook: per-token keys an architecture caches beside the latent (DSA indexer keys). */
  protected indexerKeys(
    _il: number,
    _lw: LayerWeights,
    _x: Float64Array,
    _n: number,
    _pos0: number,
    _k: MatKernels,
  ): Float64Array | undefined {
    return undefined;
  }
}

function addInPlace(h: Float64Array, delta: Float64Array): void {
  for (let i = 0; i < h.length; i++) h[i] += delta[i];
}
