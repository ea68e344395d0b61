/**
 * Faulty versions of single model stages, built from the reference stages (src/model/mla.ts, moe.ts) and weight views:
 * what a broken implementation computes instead.
 */
import { f16ToF32, f32ToF16 } from "../../quant/f16.js";
import type { ModelConfig } from "../../model/config.js";
import { absorbQueries, latentAttention, projectValues, type KeySelection, type LatentRows, type Projections } from "../../model/mla.js";
import { expertWeights, gateProbabilities, selectExperts, type Route } from "../../model/moe.js";
import type { AttentionWeights, ModelWeights } from "../../model/weights.js";
import type { MatProducts } from "../../tensor/products.js";
import { transposed } from "../endpoint/variants.js";

/** Round every value through fp16 in place (overflow → ±Infinity, as a half-precision buffer would). */
export function roundToF16(x: Float64Array): void {
  for (let i = 0; i < x.length; i++) x[i] = f16ToF32(f32ToF16(x[i]!));
}

/** Absorbed decode attention (mla.ts attendAbsorbed, plain loops) with q_abs = W_UKᵀ q_nope held in fp16. */
export function attendAbsorbedF16Query(w: AttentionWeights, cfg: ModelConfig, pr: Projections, n: number, pos0: number, lat: LatentRows, sel: KeySelection | undefined, k: MatProducts): Float64Array {
  const qAbs = absorbQueries(w, cfg, pr, n, k);
  roundToF16(qAbs);
  return projectValues(w, cfg, latentAttention(cfg, pr, qAbs, n, pos0, lat, sel), n, k);
}

/** Routes of n tokens (moe.ts route) whose weights are p + correction bias instead of the unbiased p. */
export function routeBiasInWeights(z: Float64Array, n: number, c: ModelConfig, bias: Float32Array | undefined): Route[] {
  const E = c.nExpert;
  const routes: Route[] = [];
  for (let t = 0; t < n; t++) {
    const p = gateProbabilities(z.subarray(t * E, (t + 1) * E), c);
    const experts = selectExperts(p, c, bias);
    routes.push({ experts, weights: expertWeights(experts.map((e) => p[e]! + (bias?.[e] ?? 0)), c) });
  }
  return routes;
}

/**
 * The split attn_k_b / attn_v_b swapped — W_UV used where W_UK belongs and W_UK where W_UV belongs — while the joined
 * attn_kv_b the reference path decompresses with stays right (the prefill and decode paths read the split pair).
 * Each takes the other's transpose: kB[h] is L rows of P, vB[h] is V rows of L; needs P = V.
 */
export function withSplitKvBSwapped(weights: ModelWeights, config: ModelConfig): ModelWeights {
  if (config.qkNope !== config.vHead) throw new Error(`k_b and v_b cannot be swapped: qk_nope ${config.qkNope} ≠ v_head ${config.vHead}`);
  const layers = weights.layers.map((lw) => {
    const kB = lw.attn.vB.map((v) => transposed(v, `${v.name} as attn_k_b`));
    const vB = lw.attn.kB.map((k) => transposed(k, `${k.name} as attn_v_b`));
    return { ...lw, attn: { ...lw.attn, kB, vB } };
  });
  return { ...weights, layers };
}
