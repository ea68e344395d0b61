import type { MatKernels } from "./kernels.js";
import type { LatentStore } from "./cache.js";
import type { ModelConfig } from "./config.js";
import { DeepSeek2 } from "./deepseek2.js";
import { Indexer } from "./dsa.js";
import type { Rope } from "./rope.js";
import type { KeySelection, Projections } from "./mla-types.js";
import type { LayerWeights, ModelWeights } from "./weights.js";

/**
 * GLM-5 (GGUF `glm-dsa`): DeepSeek-V2-style MLA + MoE with DeepSeek sparse attention — a lightning indexer picks
 * the top_k keys every query attends to. The MTP (nextn) layer stored after the main stack is not run.
 */
export class GlmDsa extends DeepSeek2 {
  private readonly indexers: (Indexer | undefined)[];

  constructor(config: ModelConfig, weights: ModelWeights, rope?: Rope) {
    super(config, weights, rope);
    this.indexers = weights.layers.map((lw) =>
      lw.attn.indexer && config.indexer ? new Indexer(lw.attn.indexer, config.indexer, config, this.rope) : undefined,
    );
  }

  protected override indexerKeys(
    il: number,
    _lw: LayerWeights,
    x: Float64Array,
    n: number,
    pos0: number,
    k: MatKernels,
  ): Float64Array | undefined {
    return this.indexers[il]?.keys(x, n, pos0, k);
  }

  protected override selectKeys(
    il: number,
    _lw: LayerWeights,
    x: Float64Array,
    pr: Projections,
    n: number,
    pos0: number,
    cache: LatentStore | undefined,
    k: MatKernels,
  ): KeySelection | undefined {
    const indexer = this.indexers[il];
    if (indexer === undefined || pr.qr === undefined) return undefined;
    const keys = cache === undefined ? { k: indexer.keys(x, n, pos0, k), length: n } : cache.indexerKeys(il, pos0 + n);
    return indexer.select(x, pr.qr, n, pos0, keys, k);
  }
}
