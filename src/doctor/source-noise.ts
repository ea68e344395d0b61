/**
 * How far a GGUF tensor may be from its source tensor and still be the same tensor: the quantization noise of its
 * type, rel = RMS(decoded − source) / RMS(source), and the gain α = <decoded, source> / <source, source>.
 *
 * Measured by scripts/measure-source-noise.ts (latent's reference encoders = ggml's without an importance matrix,
 * on the demo model's 76 tensors of ≥ 2 dimensions and on random Gaussian / Laplace / Student-t(3) 256×512 matrices); the
 * table keeps the worst tensor. docs/doctor.md ("Source comparison") has the full table.
 */
import { GGMLType, typeTraits } from "../gguf/types.js";

/** worst measured rel and |α − 1| per GGUF type */
const MEASURED: ReadonlyMap<number, { rel: number; gain: number }> = new Map([
  [GGMLType.F32, { rel: 0, gain: 0 }],
  [GGMLType.F16, { rel: 2.1e-4, gain: 2.4e-6 }],
  [GGMLType.BF16, { rel: 1.7e-3, gain: 3.3e-5 }],
  [GGMLType.Q8_0, { rel: 8.7e-3, gain: 2.5e-4 }],
  [GGMLType.Q6_K, { rel: 2.6e-2, gain: 4.5e-4 }],
  [GGMLType.Q5_K, { rel: 4.7e-2, gain: 1.5e-3 }],
  [GGMLType.Q5_1, { rel: 4.8e-2, gain: 1.4e-3 }],
  [GGMLType.Q5_0, { rel: 6.7e-2, gain: 2.2e-3 }],
  [GGMLType.Q4_K, { rel: 9.1e-2, gain: 3.3e-3 }],
  [GGMLType.Q4_1, { rel: 1.03e-1, gain: 2.2e-3 }],
  [GGMLType.Q4_0, { rel: 1.25e-1, gain: 5.8e-3 }],
  [GGMLType.IQ4_NL, { rel: 1.01e-1, gain: 3.8e-3 }],
  [GGMLType.IQ4_XS, { rel: 1.02e-1, gain: 5.5e-3 }],
  [GGMLType.Q3_K, { rel: 1.84e-1, gain: 8.4e-3 }],
  [GGMLType.Q2_K, { rel: 3.44e-1, gain: 2.2e-2 }],
]);

/** Source checkpoint dtypes (safetensors names); F8 measured with 128×128 block scales. */
const SOURCE_DTYPES: Readonly<Record<string, { rel: number; gain: number }>> = {
  F32: { rel: 0, gain: 0 },
  F16: { rel: 2.1e-4, gain: 2.4e-6 },
  BF16: { rel: 1.7e-3, gain: 3.3e-5 },
  F8_E4M3: { rel: 2.7e-2, gain: 2.8e-3 },
  F8_E5M2: { rel: 5.4e-2, gain: 5.6e-3 },
};

/** Safety margin over the worst measured noise. */
export const NOISE_MARGIN = 1.5;
/** The smallest gain error reported as "scaled": 1 %, or 3× the worst measured for the types involved. */
const MIN_GAIN_TOLERANCE = 0.01;

/**
 * Noise of a type that was not measured (imatrix-only IQ types, Q8_K, ternary, MXFP4): the measured types follow
 * rel ≈ 2^(1 − bits per weight) within ~10 % (Q8_0 8.5 bpw → 0.0055, Q4_K 4.5 → 0.088, Q2_K 2.625 → 0.32).
 */
function estimated(type: number): { rel: number; gain: number } {
  const t = typeTraits(type);
  if (t === undefined || t.blockSize === 0) return { rel: 0.5, gain: 0.05 };
  const bpw = (t.typeSize * 8) / t.blockSize;
  return { rel: Math.min(1, 2 ** (1 - bpw)), gain: Math.min(0.1, 0.05 * 2 ** (2 - bpw / 2)) };
}

/** A GGUF type's noise (measured, or estimated from its bits per weight). */
export function ggufNoise(type: number): { rel: number; gain: number; measured: boolean } {
  const m = MEASURED.get(type);
  return m !== undefined ? { ...m, measured: true } : { ...estimated(type), measured: false };
}

/** A source checkpoint dtype's noise (F32/F16/BF16/F8); undefined for dtypes latent cannot read. */
export function sourceDtypeNoise(dtype: string): { rel: number; gain: number } | undefined {
  return SOURCE_DTYPES[dtype];
}

export interface Tolerance {
  /** allowed rel = RMS(diff)/RMS(source) */
  readonly rel: number;
  /** allowed |α − 1| */
  readonly gain: number;
}

/** The tolerance of comparing two encodings of the same tensor: independent noises add in quadrature, times the margin. */
export function tolerance(a: { rel: number; gain: number }, b: { rel: number; gain: number }): Tolerance {
  return {
    rel: NOISE_MARGIN * Math.hypot(a.rel, b.rel) + 1e-5,
    gain: Math.max(MIN_GAIN_TOLERANCE, 3 * (a.gain + b.gain)),
  };
}
