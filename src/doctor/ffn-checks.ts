/**
 * Structural signals of trained SwiGLU weights that a file fault breaks while every compute path still agrees:
 *
 * - gate/up pairing: hidden unit j of an expert is silu(g_j·x)·(u_j·x); training aligns g_j with u_j, so the mean
 *   |cos(g_j, u_j)| of a trained expert is well above that of unrelated vectors (≈ √(2/(π·C)) in C dimensions;
 *   demo model: 0.10–0.14 against 0.05–0.07 across experts). An expert whose gate pairs with another expert's up
 *   had its slice swapped inside one stacked tensor.
 * - gate vs up: trained gate pre-activations g·x lean negative (silu mostly off; demo: mean/sd −0.24 … −0.38 in
 *   every MoE layer), up pre-activations do not (|mean/sd| < 0.03). When up leans negative and gate does not, the
 *   two tensors' names are exchanged (silu applied to the wrong one).
 *
 * Random-weight models carry neither signal; a layer without the signal is not judged.
 */
import type { DeepSeek2 } from "../model/deepseek2.js";
import type { SwiGLU } from "../model/weights.js";
import type { FfnInputs } from "./perplexity.js";
import type { Findings } from "./report.js";

/** Median pairing must exceed the unrelated-vector level by this factor before experts are judged. */
export const PAIRING_SIGNAL = 1.5;
/** An expert is mispaired below baseline + this fraction of (median − baseline). */
export const PAIRING_CUT = 0.4;
/** up leaning negative by more than this (mean/sd) … */
export const UP_SHIFT = -0.15;
/** … and gate leaning less negative than up by more than this: names exchanged. */
export const SHIFT_MARGIN = 0.15;

export interface PairingLayer {
  readonly layer: number;
  readonly median: number;
  readonly baseline: number;
  /** experts whose gate and up do not pair: [expert, best partner or −1, its score] */
  readonly mispaired: readonly (readonly [number, number, number])[];
}

export interface ShiftLayer {
  readonly layer: number;
  readonly part: "dense" | "shared" | "experts";
  /** mean/sd of the gate and up pre-activations on the calibration text */
  readonly gate: number;
  readonly up: number;
}

export interface FfnReport {
  readonly pairing: readonly PairingLayer[];
  readonly shifts: readonly ShiftLayer[];
}

function sampleRows(rows: number, n: number): number[] {
  const k = Math.min(rows, n);
  return Array.from({ length: k }, (_, i) => Math.floor((i * rows) / k));
}

function rowsOf(m: SwiGLU["gate"], idx: readonly number[]): Float32Array[] {
  return idx.map((r) => m.row(r).slice());
}

function meanAbsCos(a: readonly Float32Array[], b: readonly Float32Array[]): number {
  let s = 0;
  for (let j = 0; j < a.length; j++) {
    const x = a[j];
    const y = b[j];
    let d = 0;
    let nx = 0;
    let ny = 0;
    for (let i = 0; i < x.length; i++) {
      d += x[i] * y[i];
      nx += x[i] * x[i];
      ny += y[i] * y[i];
    }
    s += nx > 0 && ny > 0 ? Math.abs(d) / Math.sqrt(nx * ny) : 0;
  }
  return s / Math.max(1, a.length);
}

function median(v: readonly number[]): number {
  const s = [...v].sort((a, b) => a - b);
  return s.length === 0
    ? NaN
    : s.length % 2 === 1
      ? s[(s.length - 1) / 2]
      : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function pairing(layer: number, experts: readonly SwiGLU[]): PairingLayer | undefined {
  if (experts.length < 2) return undefined;
  const C = experts[0].gate.cols;
  // ≤ ~4M values read per layer: 64 hidden units per expert on small models, fewer (≥ 8) on 384 × 7168 ones.
  const idx = sampleRows(experts[0].gate.rows, Math.max(8, Math.min(64, Math.floor(4e6 / (experts.length * C)))));
  const gates = experts.map((e) => rowsOf(e.gate, idx));
  const ups = experts.map((e) => rowsOf(e.up, idx));
  const diag = experts.map((_, e) => meanAbsCos(gates[e], ups[e]));
  const baseline = Math.sqrt(2 / (Math.PI * C));
  const med = median(diag);
  const out: PairingLayer = { layer, median: med, baseline, mispaired: [] };
  if (!(med > PAIRING_SIGNAL * baseline)) return out;
  const cut = baseline + PAIRING_CUT * (med - baseline);
  const mispaired: [number, number, number][] = [];
  diag.forEach((d, e) => {
    if (d >= cut) return;
    let best = -1;
    let bestScore = 0;
    ups.forEach((u, e2) => {
      if (e2 === e) return;
      const s = meanAbsCos(gates[e], u);
      if (s > bestScore) [best, bestScore] = [e2, s];
    });
    mispaired.push(bestScore >= cut ? [e, best, bestScore] : [e, -1, d]);
  });
  return { ...out, mispaired };
}

/** mean/sd of W·x over sampled rows of W and ≤ 64 evenly spaced traced tokens. */
function shift(m: SwiGLU["gate"], x: Float64Array, rowsSampled: readonly number[]): number {
  const C = m.cols;
  const T = Math.floor(x.length / C);
  const tokens = sampleRows(T, 64);
  let s = 0;
  let s2 = 0;
  let n = 0;
  for (const r of rowsSampled) {
    const w = m.row(r);
    for (const t of tokens) {
      let a = 0;
      for (let c = 0; c < C; c++) a += w[c] * x[t * C + c];
      s += a;
      s2 += a * a;
      n++;
    }
  }
  const mean = s / Math.max(1, n);
  const sd = Math.sqrt(Math.max(0, s2 / Math.max(1, n) - mean * mean));
  return sd > 0 ? mean / sd : 0;
}

function shiftOf(layer: number, part: ShiftLayer["part"], mats: readonly SwiGLU[], x: Float64Array): ShiftLayer {
  // At most 8 experts × 32 hidden units: the sign of the lean shows long before that.
  const chosen = mats.filter((_, i) => i % Math.max(1, Math.ceil(mats.length / 8)) === 0);
  const idx = sampleRows(mats[0].gate.rows, 32);
  const avg = (get: (s: SwiGLU) => SwiGLU["gate"]): number =>
    chosen.reduce((a, s) => a + shift(get(s), x, idx), 0) / chosen.length;
  return { layer, part, gate: avg((s) => s.gate), up: avg((s) => s.up) };
}

export function checkFfn(model: DeepSeek2, ffnInputs: FfnInputs, f: Findings): FfnReport {
  const c = model.config;
  const pairings: PairingLayer[] = [];
  const shifts: ShiftLayer[] = [];
  for (let il = 0; il < c.nLayer; il++) {
    const lw = model.weights.layers[il];
    const x = ffnInputs.get(il);
    if (lw.moe !== undefined) {
      const p = pairing(il, lw.moe.experts);
      if (p !== undefined) pairings.push(p);
      if (x !== undefined) {
        shifts.push(shiftOf(il, "experts", lw.moe.experts, x));
        if (lw.moe.shared !== undefined) shifts.push(shiftOf(il, "shared", [lw.moe.shared], x));
      }
    } else if (lw.dense !== undefined && x !== undefined) shifts.push(shiftOf(il, "dense", [lw.dense], x));
  }
  for (const p of pairings) {
    for (const [e, partner, score] of p.mispaired) {
      const where = `layer ${p.layer}, expert ${e}`;
      const level = `while this layer's experts pair at a median ${p.median.toFixed(3)} (unrelated vectors: ${p.baseline.toFixed(3)})`;
      const evidence = { layer: p.layer, expert: e, partner, score, median: p.median, baseline: p.baseline };
      if (partner >= 0) {
        f.add(
          "tensors",
          "error",
          "expert-mispaired",
          `${where}: the gate and up projections do not belong together — its gate rows pair with expert ${partner}'s up rows (mean |cos| ${score.toFixed(3)}) ${level}. Expert slices were swapped or misordered inside blk.${p.layer}.ffn_gate_exps / ffn_up_exps`,
          evidence,
        );
      } else {
        // No partner: a scrambled slice, or an expert training barely touched (rarely routed) — not proof of a fault.
        f.add(
          "tensors",
          "warning",
          "expert-unpaired",
          `${where}: its gate rows pair with no expert's up rows (mean |cos| ${score.toFixed(3)}) ${level}: a scrambled slice, or an expert that training rarely reached`,
          evidence,
        );
      }
    }
  }
  for (const s of shifts) {
    if (s.up < UP_SHIFT && s.gate > s.up + SHIFT_MARGIN) {
      const names =
        s.part === "experts"
          ? "ffn_gate_exps / ffn_up_exps"
          : s.part === "shared"
            ? "ffn_gate_shexp / ffn_up_shexp"
            : "ffn_gate / ffn_up";
      f.add(
        "tensors",
        "error",
        "gate-up-exchanged",
        `layer ${s.layer} (${s.part}): the up projection's pre-activations lean negative (mean/sd ${s.up.toFixed(3)}) and the gate's do not (${s.gate.toFixed(3)}) on the calibration text — trained SwiGLU gates lean negative, ups do not: blk.${s.layer}.${names} look exchanged (silu applied to the up projection)`,
        { layer: s.layer, part: s.part, gate: s.gate, up: s.up, upShift: UP_SHIFT, margin: SHIFT_MARGIN },
      );
    }
  }
  return { pairing: pairings, shifts };
}
