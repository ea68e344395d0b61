import { rmsNorm } from "../backend/cpu/ops.js";
import type { LatentCache } from "../engine/latent-cache.js";
import { LatentError } from "../util/errors.js";
import type { ModelConfig } from "./config.js";
import { ATTENTION, project, type AttentionPath, type KeySelection, type LatentRows, type Projections } from "./mla.js";
import { moe, swiglu } from "./moe.js";
import { Rope } from "./rope.js";
import type { LayerWeights, ModelWeights } from "./weights.js";

export interface ForwardOptions {
  readonly path: AttentionPath;
  /** logits for every position of the chunk, or only the last one (generation) */
  readonly logits: "all" | "last";
}

/**
 * DeepSeek-V2/V3 (GGUF `deepseek2`) forward pass, one chunk of tokens at a time:
 *   h = embed(tokens)
 *   per layer: h += W_o · MLA(attn_norm(h));  h += FFN(ffn_norm(h))   (dense SwiGLU for the leading layers, else MoE)
 *   logits = output · output_norm(h)
 */
export class DeepSeek2 {
  readonly rope: Rope;

  constructor(
    readonly config: ModelConfig,
    readonly weights: ModelWeights,
  ) {
    this.rope = Rope.forConfig(config);
  }

  /**
   * Run `tokens` at positions cache.length .. (appending their latents), or, with `cache` undefined (path
   * "reference" only), the whole sequence from position 0. Returns logits [m × n_vocab] as float32.
   */
  forward(tokens: readonly number[], cache: LatentCache | undefined, opts: ForwardOptions): Float32Array {
    const c = this.config;
    const n = tokens.length;
    if (n === 0) throw new LatentError("forward needs at least one token");
    if (opts.path === "decode" && n !== 1) throw new LatentError(`the decode path takes one token at a time, got ${n}`);
    if (cache === undefined && opts.path !== "reference") throw new LatentError(`the ${opts.path} path needs a latent cache`);
    const pos0 = cache?.length ?? 0;
    const Hd = c.nEmbd;
    const h = new Float64Array(n * Hd);
    tokens.forEach((tok, t) => {
      if (!Number.isInteger(tok) || tok < 0 || tok >= c.nVocab) throw new LatentError(`token id ${tok} at index ${t} is outside the vocabulary (0..${c.nVocab - 1})`);
      h.set(this.weights.tokenEmbd.row(tok), t * Hd);
    });

    const x = new Float64Array(n * Hd);
    const ffnOut = new Float64Array(n * Hd);
    this.weights.layers.forEach((lw, il) => {
      for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, lw.attn.norm, c.rmsEps, x, t * Hd);
      const attnOut = this.attention(il, lw, x, n, pos0, cache, opts.path);
      for (let i = 0; i < n * Hd; i++) h[i] += attnOut[i]!;

      for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, lw.ffnNorm, c.rmsEps, x, t * Hd);
      if (lw.dense !== undefined) swiglu(lw.dense, x, n, Hd, ffnOut, false);
      else moe(lw.moe!, c, x, n, ffnOut);
      for (let i = 0; i < n * Hd; i++) h[i] += ffnOut[i]!;
    });
    if (cache !== undefined) cache.length = pos0 + n;

    const first = opts.logits === "last" ? n - 1 : 0;
    const m = n - first;
    const hn = new Float64Array(m * Hd);
    for (let t = 0; t < m; t++) rmsNorm(h, (first + t) * Hd, this.weights.outputNorm, c.rmsEps, hn, t * Hd);
    const logits64 = new Float64Array(m * c.nVocab);
    this.weights.output.matmul(hn, m, Hd, logits64, c.nVocab);
    return Float32Array.from(logits64);
  }

  /** One layer's attention for the chunk (x = attn_norm output) → W_o · o, [n × Hd]. */
  private attention(il: number, lw: LayerWeights, x: Float64Array, n: number, pos0: number, cache: LatentCache | undefined, path: AttentionPath): Float64Array {
    const c = this.config;
    const pr = project(lw.attn, c, this.rope, x, n, pos0);
    let lat: LatentRows;
    if (cache === undefined) {
      lat = { c: pr.c, kPe: pr.kPe, length: n };
    } else {
      cache.append(il, pr.c, pr.kPe, this.indexerKeys(il, lw, x, n, pos0));
      lat = cache.latent(il, pos0 + n);
    }
    const sel = this.selectKeys(il, lw, x, pr, n, pos0, cache);
    const o = ATTENTION[path](lw.attn, c, pr, n, pos0, lat, sel);
    const out = new Float64Array(n * c.nEmbd);
    lw.attn.o.matmul(o, n, c.nHead * c.vHead, out, c.nEmbd);
    return out;
  }

  /** Hook for sparse attention: keys that each query may see (dense MLA: all causal keys). */
  protected selectKeys(_il: number, _lw: LayerWeights, _x: Float64Array, _pr: Projections, _n: number, _pos0: number, _cache: LatentCache | undefined): KeySelection | undefined {
    return undefined;
  }

  /** Hook: per-token keys an architecture caches beside the latent (DSA indexer keys). */
  protected indexerKeys(_il: number, _lw: LayerWeights, _x: Float64Array, _n: number, _pos0: number): Float64Array | undefined {
    return undefined;
  }
}
