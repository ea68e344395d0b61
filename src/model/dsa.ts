import type { MatProducts } from "../tensor/products.js";
import { layerNorm, topK, type Vec } from "../tensor/ops.js";
import type { IndexerConfig, ModelConfig } from "./config.js";
import type { KeySelection } from "./mla-types.js";
import type { Rope } from "./rope.js";
import type { IndexerWeights } from "./weights.js";

/** Indexer keys for positions [0, length): [length × D_idx], LayerNormed and roped. */
export interface IndexerKeys {
  readonly k: Vec | Float32Array;
  readonly length: number;
}

/**
 * DeepSeek sparse attention's lightning indexer (GLM-5 flavour: interleaved rope on the first R dims, [rope | nope]).
 * I(t,s) = Σ_j w_{t,j} · ReLU(q^I_{t,j} · k^I_s), w = weights_proj(x)/√(n_idx·D_idx); the top_k causal keys are kept
 * for every head. A query that sees ≤ top_k keys attends densely. Exact score ties go to the lower position.
 */
export class Indexer {
  constructor(
    private readonly w: IndexerWeights,
    private readonly cfg: IndexerConfig,
    private readonly model: ModelConfig,
    private readonly rope: Rope,
  ) {}

  /** k^I for n tokens x [n × Hd] at positions pos0.. → [n × D_idx] */
  keys(x: Float64Array, n: number, pos0: number, kern: MatProducts): Float64Array {
    const D = this.cfg.headDim;
    const k = new Float64Array(n * D);
    kern.matmul(this.w.k, x, n, this.model.nEmbd, k, D);
    for (let t = 0; t < n; t++) {
      // llama.cpp never reads an eps for this LayerNorm (0); the kit model cannot tell 0 from 1e-6.
      layerNorm(k, t * D, this.w.kNormW, this.w.kNormB, 0, k, t * D);
      this.rope.apply(k, t * D, pos0 + t);
    }
    return k;
  }

  /** Key selection for n queries (normed q-LoRA latents qr [n × Lq], inputs x [n × Hd]) against `keys`. */
  select(
    x: Float64Array,
    qr: Float64Array,
    n: number,
    pos0: number,
    keys: IndexerKeys,
    kern: MatProducts,
  ): KeySelection {
    const { nHead: Hi, headDim: D, topK: K } = this.cfg;
    const Lq = this.model.qLoraRank;
    const q = new Float64Array(n * Hi * D);
    kern.matmul(this.w.qB, qr, n, Lq, q, Hi * D);
    const wts = new Float64Array(n * Hi);
    kern.matmul(this.w.proj, x, n, this.model.nEmbd, wts, Hi);
    const wScale = 1 / Math.sqrt(Hi * D);
    const chosen: (number[] | undefined)[] = [];
    for (let i = 0; i < n; i++) {
      const pos = pos0 + i;
      for (let j = 0; j < Hi; j++) this.rope.apply(q, (i * Hi + j) * D, pos);
      if (pos + 1 <= K) {
        chosen.push(undefined);
        continue;
      }
      const scores = new Float64Array(pos + 1);
      for (let s = 0; s <= pos; s++) {
        let total = 0;
        for (let j = 0; j < Hi; j++) {
          let d = 0;
          const qo = (i * Hi + j) * D;
          for (let e = 0; e < D; e++) d += q[qo + e] * keys.k[s * D + e];
          if (d > 0) total += d * wts[i * Hi + j] * wScale;
        }
        scores[s] = total;
      }
      chosen.push(topK(scores, K).sort((a, b) => a - b));
    }
    return (i) => chosen[i];
  }
}
