/**
 * Fault injection for `latent doctor` (docs/doctor.md "Fault injection"): a model over the same weights that computes
 * what a known broken implementation would — the "implementation under test" the doctor compares with the clean
 * reference, and the candidates its matchers simulate to name a cause. Built from outside the model: a config change
 * (softmax gating), weight views (k_b/v_b swapped), another Rope (NeoX), and a subclass overriding the model's
 * `attend` and `route` stages. File faults (test/helpers/file-faults.ts) rewrite a GGUF with a known defect instead.
 */
import type { ModelConfig } from "../../model/config.js";
import type { DeepSeek2 } from "../../model/deepseek2.js";
import type { KeySelection, LatentRows, Projections, AttentionPath } from "../../model/mla.js";
import type { MatKernels } from "../../model/kernels.js";
import type { Route } from "../../model/moe.js";
import type { Rope } from "../../model/rope.js";
import type { LayerWeights, ModelWeights } from "../../model/weights.js";
import { NeoxRope } from "./neox-rope.js";
import { attendAbsorbedF16Query, routeBiasInWeights } from "./stages.js";
import { splitKvBSwapped } from "../endpoint/variants.js";

export interface Faults {
  /** prefill/decode use W_UV where W_UK belongs and W_UK where W_UV belongs (k_b/v_b swapped; needs P = V) */
  readonly swapKvB?: boolean;
  /** NeoX (half-split) rope pairing instead of the interleaved pairs these models are trained with */
  readonly neoxRope?: boolean;
  /** softmax router gating instead of the file's sigmoid */
  readonly softmaxGating?: boolean;
  /** e_score_correction_bias added to the expert weights instead of only steering the selection */
  readonly biasInWeights?: boolean;
  /** this path's attention output buffer is never written (stays zero) */
  readonly attnOutUnwritten?: AttentionPath;
  /** the absorbed query q_abs = W_UKᵀ q_nope is stored as fp16 (values beyond ±65504 become ±Infinity) */
  readonly fp16AbsorbedQuery?: boolean;
}

export type FaultName = keyof Faults;

type ModelClass = new (config: ModelConfig, weights: ModelWeights, rope?: Rope) => DeepSeek2;

/** The model's own class (DeepSeek2, GlmDsa, …) with the attention and routing stages the faults replace. */
function faultyClass(Base: ModelClass, faults: Faults): ModelClass {
  return class FaultyModel extends Base {
    protected override attend(
      path: AttentionPath,
      lw: LayerWeights,
      pr: Projections,
      n: number,
      pos0: number,
      lat: LatentRows,
      sel: KeySelection | undefined,
      k: MatKernels,
    ): Float64Array {
      if (faults.attnOutUnwritten === path) return new Float64Array(n * this.config.nHead * this.config.vHead);
      if (faults.fp16AbsorbedQuery === true && path === "decode")
        return attendAbsorbedF16Query(lw.attn, this.config, pr, n, pos0, lat, sel, k);
      return super.attend(path, lw, pr, n, pos0, lat, sel, k);
    }

    protected override route(z: Float64Array, n: number, bias: Float32Array | undefined): Route[] {
      if (faults.biasInWeights === true) return routeBiasInWeights(z, n, this.config, bias);
      return super.route(z, n, bias);
    }
  };
}

/** A model over the same weights (and kernels) that carries `faults`; `{}` gives a clean second implementation. */
export function withFaults<M extends DeepSeek2>(model: M, faults: Faults): M {
  const config: ModelConfig = faults.softmaxGating === true ? { ...model.config, gating: "softmax" } : model.config;
  const weights = faults.swapKvB === true ? splitKvBSwapped(model.weights, config) : model.weights;
  const rope = faults.neoxRope === true ? NeoxRope.forConfig(config) : undefined;
  const Faulty = faultyClass(model.constructor as ModelClass, faults);
  const m = new Faulty(config, weights, rope) as M;
  m.kernels = model.kernels;
  return m;
}
