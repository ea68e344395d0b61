/**
 * TEST-ONLY fault injection for `latent doctor` (docs/doctor.md "Fault injection").
 *
 * A fault set lives on a model's config (`ModelConfig.faults`); production code never sets it, and every hook in the
 * model files is an optional-property check, free when off. `withFaults(model, faults)` builds a second model over the
 * same weights that carries the faults — the "implementation under test" the doctor compares with the clean reference.
 * File faults (test/helpers/file-faults.ts) rewrite a GGUF with a known defect.
 */
import { f16ToF32, f32ToF16 } from "../quant/f16.js";
import type { AttentionPath } from "./mla.js";
import type { DeepSeek2 } from "./deepseek2.js";

export interface Faults {
  /** prefill/decode use W_UV where W_UK belongs and W_UK where W_UV belongs (k_b/v_b swapped; needs P = V) */
  readonly swapKvB?: boolean;
  /** NeoX (half-split) rope pairing instead of the interleaved pairs these models are trained with */
  readonly neoxRope?: boolean;
  /** softmax router gating instead of the file's sigmoid (applied through the config's `gating`) */
  readonly softmaxGating?: boolean;
  /** e_score_correction_bias added to the expert weights instead of only steering the selection */
  readonly biasInWeights?: boolean;
  /** this path's attention output buffer is never written (stays zero) */
  readonly attnOutUnwritten?: AttentionPath;
  /** the absorbed query q_abs = W_UKᵀ q_nope is stored as fp16 (values beyond ±65504 become ±Infinity) */
  readonly fp16AbsorbedQuery?: boolean;
}

export type FaultName = keyof Faults;

/** A model over the same weights whose config carries `faults` (and softmax gating when asked). */
export function withFaults<M extends DeepSeek2>(model: M, faults: Faults): M {
  const config = { ...model.config, faults, ...(faults.softmaxGating === true ? { gating: "softmax" as const } : {}) };
  const Ctor = model.constructor as new (c: typeof config, w: M["weights"]) => M;
  const m = new Ctor(config, model.weights);
  m.kernels = model.kernels;
  return m;
}

/** NeoX rotation of x[off .. off+dims): pairs (x[i], x[i+dims/2]) instead of (x[2i], x[2i+1]). */
export function neoxRotate(x: Float64Array, off: number, pos: number, theta: Float64Array, mscale: number): void {
  const half = theta.length;
  for (let i = 0; i < half; i++) {
    const a = pos * theta[i]!;
    const cos = Math.cos(a) * mscale;
    const sin = Math.sin(a) * mscale;
    const x0 = x[off + i]!;
    const x1 = x[off + half + i]!;
    x[off + i] = x0 * cos - x1 * sin;
    x[off + half + i] = x0 * sin + x1 * cos;
  }
}

/** Round every value through fp16 in place (overflow → ±Infinity, as a half-precision buffer would). */
export function roundToF16(x: Float64Array): void {
  for (let i = 0; i < x.length; i++) x[i] = f16ToF32(f32ToF16(x[i]!));
}
