/**
 * Balanced norms across MLA's paired projections. The score q_nope,h · k_nope,h is unchanged when dimension p of
 * head h is scaled by α in W_q and by 1/α in W_UK, and so is W_o · (W_UV c) for row r of W_UV and column r of W_o;
 * weight decay settles such pairs at balanced norms. So in a trained model the norm of W_q's nope row (h, p)
 * follows the norm of W_UK's row (h, p) (k_b's column p), and W_UV's row (h, r) follows W_o's column (h, r):
 * correlations of their log-norms 0.68–0.81 and 0.64–0.88 on the demo model, against |corr| ≤ 0.17 on random
 * weights. A k_b reshaped instead of transposed, written in the wrong head or element order, or taken from another
 * tensor breaks its pairing (demo, k_b reshaped: 0.01–0.25) while the other pair keeps it.
 *
 * A layer is judged only when one of its two pairs shows the signature (≥ SIGNAL); the other pair is broken below
 * BROKEN. Both pairs broken is judged only with independent evidence that the weights are trained. The file is flagged when at least half of the judged layers are broken, so that one odd layer of a real
 * model cannot raise an error.
 */
import type { DeepSeek2 } from "../model/deepseek2.js";
import type { QMatrix } from "../tensor/qmatrix.js";
import type { Findings } from "./report.js";
import { corr } from "./correlation.js";

export const SIGNAL = 0.5;
export const BROKEN = 0.35;

export interface AttnPairingLayer {
  readonly layer: number;
  /** corr of log‖W_q nope row (h,p)‖ and log‖W_UK row (h,p)‖ over heads and p */
  readonly qk: number;
  /** corr of log‖W_UV row (h,r)‖ and log‖W_o column (h,r)‖ */
  readonly vo: number;
  /** the heads compared (every head, or an even sample of 16 on many-head models) */
  readonly heads: readonly number[];
  /** per-head q·k pairing: [i][j] = corr over p of W_q's nope rows of heads[i] and W_UK's rows of heads[j] */
  readonly qkHeads: readonly (readonly number[])[];
  /** per-head v·o pairing: [i][j] = corr over r of W_UV's rows of heads[i] and W_o's columns of heads[j] */
  readonly voHeads: readonly (readonly number[])[];
}

function rowNormSq(m: QMatrix, r: number): number {
  const row = m.row(r);
  let s = 0;
  for (let i = 0; i < row.length; i++) s += row[i] * row[i];
  return s;
}

/** Squared norms of every column of m, estimated from at most `maxRows` evenly spaced rows. */
function colNormsSq(m: QMatrix, maxRows = Infinity): Float64Array {
  const out = new Float64Array(m.cols);
  const step = Math.max(1, Math.ceil(m.rows / maxRows));
  for (let r = 0; r < m.rows; r += step) {
    const row = m.row(r);
    for (let c = 0; c < m.cols; c++) out[c] += row[c] * row[c];
  }
  return out;
}

const log = (x: number): number => Math.log(x + 1e-30);

export function attnPairing(model: DeepSeek2): AttnPairingLayer[] {
  const c = model.config;
  const { nHead: H, qkNope: P, qkRope: R, vHead: V } = c;
  // ≤ 16 heads per layer keep the cost of 128-head models at 1/8 of a full read
  const heads = Array.from({ length: H }, (_, h) => h).filter((h) => h % Math.max(1, Math.ceil(H / 16)) === 0);
  const out: AttnPairingLayer[] = [];
  for (let il = 0; il < c.nLayer; il++) {
    const a = model.weights.layers[il].attn;
    const q = a.qB ?? a.q;
    if (q === undefined) continue;
    const oCols = colNormsSq(a.o, 512);
    // per head: log-norms of W_q's nope rows, W_UK's rows (k_b's columns), W_UV's rows, W_o's columns
    const qn = heads.map((h) => Array.from({ length: P }, (_, p) => log(rowNormSq(q, h * (P + R) + p))));
    const kn = heads.map((h) => Array.from(colNormsSq(a.kB[h]), log));
    const vn = heads.map((h) => Array.from({ length: V }, (_, r) => log(rowNormSq(a.vB[h], r))));
    const on = heads.map((h) => Array.from(oCols.subarray(h * V, (h + 1) * V), log));
    out.push({
      layer: il,
      qk: corr(qn.flat(), kn.flat()),
      vo: corr(vn.flat(), on.flat()),
      heads,
      qkHeads: qn.map((x) => kn.map((y) => corr(x, y))),
      voHeads: vn.map((x) => on.map((y) => corr(x, y))),
    });
  }
  return out;
}

/**
 * `trained`: independent evidence that the weights are trained (calibration NLL or the SwiGLU pairing); with it, a
 * file where both pairs are broken in most layers (k_b and v_b swapped, kv_b heads reordered) is flagged too.
 */
/** Off-diagonal pairing this much stronger than a head's own marks the head as paired with another head. */
export const HEAD_MARGIN = 0.3;

/** Items i (heads, experts) whose best partner j ≠ i pairs at ≥ SIGNAL and beats i's own pairing by ≥ HEAD_MARGIN: [id i, id j]. */
export function misassigned(heads: readonly number[], m: readonly (readonly number[])[]): [number, number][] {
  const out: [number, number][] = [];
  m.forEach((row, i) => {
    let best = i;
    row.forEach((v, j) => {
      if (v > row[best]) best = j;
    });
    if (best !== i && row[best] >= SIGNAL && row[best] - row[i] >= HEAD_MARGIN) out.push([heads[i], heads[best]]);
  });
  return out;
}

/**
 * `trained`: independent evidence that the weights are trained (calibration NLL or the SwiGLU pairing); with it, a
 * file where both pairs are broken in most layers (k_b and v_b swapped, kv_b heads reordered) is flagged too.
 *
 * Three signatures: a pair broken in at least half the judged layers (a conversion that broke every layer); a pair
 * broken in a few layers while most layers keep it (one layer's tensors swapped or misshaped); and, per layer, heads
 * that pair with another head's rows (heads reordered — a permutation moves at least two heads).
 */
export function checkAttnPairing(model: DeepSeek2, f: Findings, trained = false): AttnPairingLayer[] {
  const layers = attnPairing(model);
  const legacy = model.weights.generation === "legacy";
  const judged = layers.filter((l) => Math.max(l.qk, l.vo) >= SIGNAL);
  // "most layers keep the pair": at least two thirds of the layers, and at least three
  const mostPair = (side: "qk" | "vo"): boolean =>
    layers.length >= 3 && layers.filter((l) => l[side] >= SIGNAL).length * 3 >= layers.length * 2;
  const kBroken = judged.filter((l) => l.vo >= SIGNAL && l.qk < BROKEN);
  const vBroken = judged.filter((l) => l.qk >= SIGNAL && l.vo < BROKEN);
  const report = (broken: AttnPairingLayer[], what: "k" | "v"): void => {
    const most = mostPair(what === "k" ? "qk" : "vo");
    if (judged.length === 0 || broken.length === 0 || (broken.length * 2 < judged.length && !most)) return;
    const list = broken.map((l) => `${l.layer} (${(what === "k" ? l.qk : l.vo).toFixed(2)})`).join(", ");
    const tensor = legacy
      ? `attn_kv_b's ${what === "k" ? "key" : "value"} rows`
      : what === "k"
        ? "attn_k_b"
        : "attn_v_b";
    const pair =
      what === "k" ? "W_q's nope rows and W_UK's rows (k_b's columns)" : "W_UV's rows and attn_output's columns";
    const other = what === "k" ? "W_UV/attn_output" : "W_q/W_UK";
    f.add(
      "tensors",
      "error",
      what === "k" ? "k-b-unpaired" : "v-b-unpaired",
      `${tensor} does not match the rest of the attention: in ${broken.length} of ${judged.length} layers the log-norms of ${pair} no longer correlate (layer (corr): ${list}; cut ${BROKEN}) while ${other} pair at ≥ ${SIGNAL}, as trained weights do${most && broken.length * 2 < judged.length ? " and as this pair does in the other layers" : ""}. ${what === "k" ? "k_b reshaped instead of transposed, or its heads/elements reordered" : "v_b reshaped or its heads/elements reordered"} at conversion`,
      {
        layers: broken.map((l) => l.layer),
        judged: judged.length,
        signal: SIGNAL,
        broken: BROKEN,
        pairing: layers.map(({ layer, qk, vo }) => ({ layer, qk, vo })),
      },
    );
  };
  report(kBroken, "k");
  report(vBroken, "v");
  const both = layers.filter((l) => l.qk < BROKEN && l.vo < BROKEN);
  const mostBoth = mostPair("qk") && mostPair("vo");
  if (
    both.length > 0 &&
    ((trained && both.length * 2 >= layers.length && judged.length * 2 < layers.length) || mostBoth)
  ) {
    const tensor = legacy ? "attn_kv_b" : "attn_k_b/attn_v_b";
    const where = mostBoth ? ` while the other layers pair at ≥ ${SIGNAL}` : "";
    f.add(
      "tensors",
      "error",
      "attention-unpaired",
      `${mostBoth ? "" : "the model's other weights are trained, but "}in ${both.length} of ${layers.length} layers neither W_q/W_UK nor W_UV/attn_output pair as trained weights do (layer (q·k, v·o): ${both.map((l) => `${l.layer} (${l.qk.toFixed(2)}, ${l.vo.toFixed(2)})`).join(", ")}; cut ${BROKEN})${where}: ${tensor} ${legacy ? "rows are in the wrong head order" : "are swapped, or in the wrong head order"} in ${both.length === 1 ? "that layer" : "those layers"}`,
      {
        layers: both.map((l) => l.layer),
        broken: BROKEN,
        pairing: layers.map(({ layer, qk, vo }) => ({ layer, qk, vo })),
      },
    );
  }
  // Heads reordered: judged only where heads pair at all (the median head's best partner, itself or another, pairs at
  // ≥ SIGNAL: trained weights; random ones stay near 0).
  const best = layers.flatMap((l) => [...l.qkHeads, ...l.voHeads].map((r) => Math.max(...r))).sort((a, b) => a - b);
  const medianBest = best.length > 0 ? best[Math.floor(best.length / 2)] : 0;
  if (medianBest >= SIGNAL) {
    for (const l of layers) {
      const k = misassigned(l.heads, l.qkHeads);
      const v = misassigned(l.heads, l.voHeads);
      if (k.length < 2 && v.length < 2) continue;
      const map = (x: [number, number][]): string => x.map(([i, j]) => `${i}→${j}`).join(", ");
      const sides = [
        k.length >= 2 ? `W_q's head → the W_UK head its rows pair with: ${map(k)}` : "",
        v.length >= 2 ? `W_UV's head → the attn_output head its columns pair with: ${map(v)}` : "",
      ].filter((x) => x !== "");
      const tensor = legacy
        ? "attn_kv_b"
        : k.length >= 2 && v.length >= 2
          ? "attn_k_b and attn_v_b"
          : k.length >= 2
            ? "attn_k_b"
            : "attn_v_b";
      f.add(
        "tensors",
        "error",
        "attention-heads-reordered",
        `layer ${l.layer}: ${tensor} heads are in the wrong order — ${sides.join("; ")} (heads of this file pair at ${medianBest.toFixed(2)} (median); another head's rows beat the head's own by ≥ ${HEAD_MARGIN}). A converter wrote the heads of ${legacy ? "kv_b_proj" : "kv_b_proj's split"} in another order`,
        { layer: l.layer, kHeads: k, vHeads: v, medianBestPairing: medianBest },
      );
    }
  }
  return layers;
}
