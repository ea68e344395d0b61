/**
 * Routed experts' up and down projections belong together. SwiGLU's output is down · (silu(gate·x) ⊙ (up·x)): scaling
 * up's row j by α and down's column j by 1/α leaves it unchanged, so weight decay settles each hidden unit's pair at
 * balanced norms, and the log-norm of up's row j follows that of down's column j within an expert: 0.57–0.80 on the
 * demo model, against ≤ 0.23 for another expert's down. A down slice taken from another expert (experts swapped or
 * misordered in ffn_down_exps alone) breaks its expert's pairing and pairs with the expert it came from — which the
 * gate/up pairing (ffn-checks.ts) cannot see, since gate and up still match.
 *
 * Cost is bounded on large models: ≤ 16 experts a layer (evenly spaced), ≤ 128 hidden units an expert, and down's
 * column norms estimated from ≤ 512 of its rows.
 */
import type { DeepSeek2 } from "../model/deepseek2.js";
import type { QMatrix } from "../tensor/qmatrix.js";
import { BROKEN, HEAD_MARGIN, SIGNAL, misassigned } from "./attn-pairing.js";
import type { Findings } from "./report.js";
import { corr } from "./correlation.js";

export interface DownPairingLayer {
  readonly layer: number;
  /** the experts compared */
  readonly experts: readonly number[];
  /** [i][j] = corr over hidden units of log‖up row‖ of experts[i] and log‖down column‖ of experts[j] */
  readonly pairing: readonly (readonly number[])[];
}

const spaced = (n: number, k: number): number[] =>
  Array.from({ length: Math.min(n, k) }, (_, i) => Math.floor((i * n) / Math.min(n, k)));

/** log‖row j‖² of `m` for the sampled rows. */
function rowLogNorms(m: QMatrix, rows: readonly number[]): Float64Array {
  return Float64Array.from(rows, (r) => {
    const row = m.row(r);
    let s = 0;
    for (let i = 0; i < row.length; i++) s += row[i] * row[i];
    return Math.log(s + 1e-30);
  });
}

/** log‖column j‖² of `m` for the sampled columns, from ≤ 512 evenly spaced rows. */
function colLogNorms(m: QMatrix, cols: readonly number[]): Float64Array {
  const out = new Float64Array(cols.length);
  for (const r of spaced(m.rows, 512)) {
    const row = m.row(r);
    cols.forEach((c, i) => (out[i] += row[c] * row[c]));
  }
  return out.map((x) => Math.log(x + 1e-30));
}

export function downPairing(model: DeepSeek2): DownPairingLayer[] {
  const out: DownPairingLayer[] = [];
  model.weights.layers.forEach((l, layer) => {
    const ex = l.moe?.experts;
    if (ex === undefined || ex.length < 2) return;
    const experts = spaced(ex.length, 16);
    const units = spaced(ex[0].up.rows, 128);
    const up = experts.map((e) => rowLogNorms(ex[e].up, units));
    const down = experts.map((e) => colLogNorms(ex[e].down, units));
    out.push({ layer, experts, pairing: up.map((u) => down.map((d) => corr(u, d))) });
  });
  return out;
}

/** Errors for down slices that pair with another expert's up (`expert-down-mispaired`), judged where experts pair at all. */
export function checkDownPairing(model: DeepSeek2, f: Findings): DownPairingLayer[] {
  const layers = downPairing(model);
  const best = layers.flatMap((l) => l.pairing.map((r) => Math.max(...r))).sort((a, b) => a - b);
  const medianBest = best.length > 0 ? best[Math.floor(best.length / 2)] : 0;
  if (medianBest < SIGNAL) return layers;
  for (const l of layers) {
    const wrong = misassigned(l.experts, l.pairing);
    // an expert whose down pairs with no compared expert (its partner was not sampled, or came from elsewhere)
    const lone = l.experts.filter((e, i) => l.pairing[i][i] < BROKEN && !wrong.some(([x]) => x === e));
    if (wrong.length === 0 && lone.length === 0) continue;
    const list = [
      ...wrong.map(([e, g]) => `expert ${e}'s up rows pair with expert ${g}'s down columns`),
      ...lone.map(
        (e) =>
          `expert ${e}'s up rows pair with no compared expert's down columns (own ${l.pairing[l.experts.indexOf(e)][l.experts.indexOf(e)].toFixed(2)} < ${BROKEN})`,
      ),
    ].join("; ");
    f.add(
      "tensors",
      "error",
      "expert-down-mispaired",
      `layer ${l.layer}: ${list} (experts of this file pair at ${medianBest.toFixed(2)} (median); the other expert's down beats the expert's own by ≥ ${HEAD_MARGIN}). Expert slices were swapped or misordered inside blk.${l.layer}.ffn_down_exps`,
      { layer: l.layer, pairs: wrong, unpaired: lone, medianBestPairing: medianBest },
    );
  }
  return layers;
}
