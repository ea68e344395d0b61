/**
 * Faulty versions of single model stages, built from the reference stages (src/model/mla.ts, moe.ts): what a broken
 * implementation computes instead.
 */
import { f16ToF32, f32ToF16 } from "../../quant/f16.js";
import type { ModelConfig } from "../../model/config.js";
import {
  absorbQueries,
  latentAttention,
  projectValues,
  type KeySelection,
  type LatentRows,
  type Projections,
} from "../../model/mla.js";
import { expertWeights, gateProbabilities, selectExperts, type Route } from "../../model/moe.js";
import type { AttentionWeights } from "../../model/weights.js";
import type { MatProducts } from "../../tensor/products.js";

/** Round every value through fp16 in place (overflow → ±Infinity, as a half-precision buffer would). */
export function roundToF16(x: Float64Array): void {
  for (let i = 0; i < x.length; i++) x[i] = f16ToF32(f32ToF16(x[i]));
}

/** Absorbed decode attention (mla.ts attendAbsorbed, plain loops) with q_abs = W_UKᵀ q_nope held in fp16. */
export function attendAbsorbedF16Query(
  w: AttentionWeights,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  lat: LatentRows,
  sel: KeySelection | undefined,
  k: MatProducts,
): Float64Array {
  const qAbs = absorbQueries(w, cfg, pr, n, k);
  roundToF16(qAbs);
  return projectValues(w, cfg, latentAttention(cfg, pr, qAbs, n, pos0, lat, sel), n, k);
}

/** Routes of n tokens (moe.ts route) whose weights are p + correction bias instead of the unbiased p. */
export function routeBiasInWeights(
  z: Float64Array,
  n: number,
  c: ModelConfig,
  bias: Float32Array | undefined,
): Route[] {
  const E = c.nExpert;
  const routes: Route[] = [];
  for (let t = 0; t < n; t++) {
    const p = gateProbabilities(z.subarray(t * E, (t + 1) * E), c);
    const experts = selectExperts(p, c, bias);
    routes.push({
      experts,
      weights: expertWeights(
        experts.map((e) => p[e] + (bias?.[e] ?? 0)),
        c,
      ),
    });
  }
  return routes;
}
