/**
 * Calibration on natural text: the mean negative log-likelihood (NLL) per token of a built-in public-domain sample
 * (Genesis 1:1–6, King James Version — text every English-trained model has seen, and the demo model's corpus)
 * against the model's mean predictive entropy H on the same positions.
 *
 * A healthy trained model is calibrated: NLL ≈ H. A trained model with a broken file is confidently wrong: its
 * NLL exceeds its entropy. A random-weight model also has NLL > H, but it predicts the text no better than chance
 * (NLL ≥ ln V), so the judgement applies only to models with NLL < TRAINED_NLL_RATIO · ln V. Thresholds measured
 * by tools/doctor-thresholds.ts (docs/doctor.md, "Behaviour").
 */
import type { DeepSeek2 } from "../model/deepseek2.js";
import { logSoftmaxRow } from "../engine/evaluate.js";
import type { Findings } from "./report.js";

export const CALIBRATION_TEXT =
  "In the beginning God created the heaven and the earth.\n" +
  "And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.\n" +
  "And God said, Let there be light: and there was light.\n" +
  "And God saw the light, that it was good: and God divided the light from the darkness.\n" +
  "And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day.\n" +
  "And God said, Let there be a firmament in the midst of the waters, and let it divide the waters from the waters.\n";

/** NLL below this fraction of ln V: the model has learned the text's language (random weights: ≥ 1.24 measured). */
export const TRAINED_NLL_RATIO = 0.85;
/** NLL − H above this (nats/token) in a trained model: confidently wrong (healthy ≤ 0.09, broken ≥ 0.85 measured). */
export const MAX_CALIBRATION_GAP = 0.3;
/**
 * NLL − H below this in a trained model: far less sure than it is right — logits scaled down (demo: healthy −0.07 as
 * F16, −0.22 as Q2_K; output.weight × 0.5: −2.73).
 */
export const MIN_CALIBRATION_GAP = -1.0;

export interface CalibrationResult {
  readonly tokens: number;
  /** mean NLL of the next token, nats */
  readonly nll: number;
  /** mean entropy of the predicted distribution, nats */
  readonly entropy: number;
  readonly logVocab: number;
  /** nll − entropy */
  readonly gap: number;
  /** whether the NLL shows a trained model (nll < TRAINED_NLL_RATIO · ln V) */
  readonly trained: boolean;
}

/** The FFN inputs (output of ffn_norm) per layer, rows of n_embd, as traced on the calibration text. */
export type FfnInputs = ReadonlyMap<number, Float64Array>;

/**
 * Score `tokens` by teacher forcing on the reference path. Also returns each layer's FFN input (the only activations
 * other checks need; tracing every stage would hold gigabytes on a large model).
 */
export function calibration(
  model: DeepSeek2,
  tokens: readonly number[],
): { result: CalibrationResult; ffnInputs: FfnInputs } {
  const parts = new Map<number, Float64Array[]>();
  const trace = (layer: number, stage: string, rows: Float64Array): void => {
    if (stage !== "ffn_norm") return;
    const list = parts.get(layer) ?? [];
    list.push(Float64Array.from(rows));
    parts.set(layer, list);
  };
  const V = model.config.nVocab;
  const logits = model.forward(tokens, undefined, { path: "reference", logits: "all", trace });
  const ffnInputs = new Map<number, Float64Array>();
  for (const [layer, list] of parts) {
    const out = new Float64Array(list.reduce((a, r) => a + r.length, 0));
    let at = 0;
    for (const r of list) {
      out.set(r, at);
      at += r.length;
    }
    ffnInputs.set(layer, out);
  }
  let nll = 0;
  let entropy = 0;
  const n = tokens.length - 1;
  for (let i = 0; i < n; i++) {
    const lp = logSoftmaxRow(logits.subarray(i * V, (i + 1) * V));
    nll -= lp[tokens[i + 1]];
    let h = 0;
    for (let j = 0; j < lp.length; j++) {
      const p = Math.exp(lp[j]);
      if (p > 0) h -= p * lp[j];
    }
    entropy += h;
  }
  const logVocab = Math.log(model.config.nVocab);
  const result = {
    tokens: tokens.length,
    nll: nll / n,
    entropy: entropy / n,
    logVocab,
    gap: (nll - entropy) / n,
    trained: nll / n < TRAINED_NLL_RATIO * logVocab,
  };
  return { result, ffnInputs };
}

export function judgeCalibration(r: CalibrationResult, f: Findings): void {
  const nums = `NLL ${r.nll.toFixed(3)} vs entropy ${r.entropy.toFixed(3)} nats/token over ${r.tokens - 1} tokens of Genesis 1 (KJV); ln V = ${r.logVocab.toFixed(2)}`;
  const evidence = {
    nll: r.nll,
    entropy: r.entropy,
    gap: r.gap,
    logVocab: r.logVocab,
    maxGap: MAX_CALIBRATION_GAP,
    trainedNllRatio: TRAINED_NLL_RATIO,
  };
  if (!Number.isFinite(r.nll) || !Number.isFinite(r.entropy)) {
    f.add(
      "behaviour",
      "error",
      "calibration-non-finite",
      `the log-probabilities of the calibration text are not finite (${nums})`,
      evidence,
    );
  } else if (r.trained && r.gap > MAX_CALIBRATION_GAP) {
    f.add(
      "behaviour",
      "error",
      "miscalibrated",
      `the model knows the language of its text (NLL < ${TRAINED_NLL_RATIO}·ln V) yet is confidently wrong: ${nums}, gap ${r.gap.toFixed(3)} > ${MAX_CALIBRATION_GAP}. A healthy trained model's NLL is close to its entropy; a file fault that scrambles attention or experts (k_b/v_b swapped, heads in the wrong order, experts mixed up) breaks that`,
      evidence,
    );
  } else if (r.trained && r.gap < MIN_CALIBRATION_GAP) {
    f.add(
      "behaviour",
      "error",
      "underconfident",
      `the model knows the language of its text (NLL < ${TRAINED_NLL_RATIO}·ln V) yet spreads its predictions far wider than its errors warrant: ${nums}, gap ${r.gap.toFixed(3)} < ${MIN_CALIBRATION_GAP}. Its logits are scaled down: the output head or the final norm scaled at conversion, or a wrong logit scale`,
      { ...evidence, minGap: MIN_CALIBRATION_GAP },
    );
  } else if (!r.trained) {
    f.add(
      "behaviour",
      "info",
      "calibration-untrained",
      `${nums}: no better than ${TRAINED_NLL_RATIO}·ln V, as for random weights; calibration is not judged`,
      evidence,
    );
  } else {
    f.add(
      "behaviour",
      "info",
      "calibration",
      `${nums}, gap ${r.gap.toFixed(3)} ≤ ${MAX_CALIBRATION_GAP}: calibrated`,
      evidence,
    );
  }
}
