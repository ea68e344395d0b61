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
import type { QMatrix } from "../backend/cpu/qmatrix.js";
import type { Findings } from "./report.js";

export const SIGNAL = 0.5;
export const BROKEN = 0.35;

export interface AttnPairingLayer {
  readonly layer: number;
  /** corr of log‖W_q nope row (h,p)‖ and log‖W_UK row (h,p)‖ over heads and p */
  readonly qk: number;
  /** corr of log‖W_UV row (h,r)‖ and log‖W_o column (h,r)‖ */
  readonly vo: number;
}

function corr(a: readonly number[], b: readonly number[]): number {
  const n = a.length;
  let ma = 0;
  let mb = 0;
  for (let i = 0; i < n; i++) {
    ma += a[i]!;
    mb += b[i]!;
  }
  ma /= n;
  mb /= n;
  let s = 0;
  let sa = 0;
  let sb = 0;
  for (let i = 0; i < n; i++) {
    s += (a[i]! - ma) * (b[i]! - mb);
    sa += (a[i]! - ma) ** 2;
    sb += (b[i]! - mb) ** 2;
  }
  return sa > 0 && sb > 0 ? s / Math.sqrt(sa * sb) : 0;
}

function rowNormSq(m: QMatrix, r: number): number {
  const row = m.row(r);
  let s = 0;
  for (let i = 0; i < row.length; i++) s += row[i]! * row[i]!;
  return s;
}

/** Squared norms of every column of m, estimated from at most `maxRows` evenly spaced rows. */
function colNormsSq(m: QMatrix, maxRows = Infinity): Float64Array {
  const out = new Float64Array(m.cols);
  const step = Math.max(1, Math.ceil(m.rows / maxRows));
  for (let r = 0; r < m.rows; r += step) {
    const row = m.row(r);
    for (let c = 0; c < m.cols; c++) out[c]! += row[c]! * row[c]!;
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
    const a = model.weights.layers[il]!.attn;
    const q = a.qB ?? a.q;
    if (q === undefined) continue;
    const qn: number[] = [];
    const kn: number[] = [];
    const vn: number[] = [];
    const on: number[] = [];
    const oCols = colNormsSq(a.o, 512);
    for (const h of heads) {
      const kCols = colNormsSq(a.kB[h]!);
      for (let p = 0; p < P; p++) {
        qn.push(log(rowNormSq(q, h * (P + R) + p)));
        kn.push(log(kCols[p]!));
      }
      for (let r = 0; r < V; r++) {
        vn.push(log(rowNormSq(a.vB[h]!, r)));
        on.push(log(oCols[h * V + r]!));
      }
    }
    out.push({ layer: il, qk: corr(qn, kn), vo: corr(vn, on) });
  }
  return out;
}

/**
 * `trained`: independent evidence that the weights are trained (calibration NLL or the SwiGLU pairing); with it, a
 * file where both pairs are broken in most layers (k_b and v_b swapped, kv_b heads reordered) is flagged too.
 */
export function checkAttnPairing(model: DeepSeek2, f: Findings, trained = false): AttnPairingLayer[] {
  const layers = attnPairing(model);
  const judged = layers.filter((l) => Math.max(l.qk, l.vo) >= SIGNAL);
  const kBroken = judged.filter((l) => l.vo >= SIGNAL && l.qk < BROKEN);
  const vBroken = judged.filter((l) => l.qk >= SIGNAL && l.vo < BROKEN);
  const legacy = model.weights.generation === "legacy";
  const report = (broken: AttnPairingLayer[], what: "k" | "v"): void => {
    if (judged.length === 0 || broken.length * 2 < judged.length) return;
    const list = broken.map((l) => `${l.layer} (${(what === "k" ? l.qk : l.vo).toFixed(2)})`).join(", ");
    const tensor = legacy ? `attn_kv_b's ${what === "k" ? "key" : "value"} rows` : what === "k" ? "attn_k_b" : "attn_v_b";
    const pair = what === "k" ? "W_q's nope rows and W_UK's rows (k_b's columns)" : "W_UV's rows and attn_output's columns";
    const other = what === "k" ? "W_UV/attn_output" : "W_q/W_UK";
    f.add("tensors", "error", what === "k" ? "k-b-unpaired" : "v-b-unpaired", `${tensor} does not match the rest of the attention: in ${broken.length} of ${judged.length} layers the log-norms of ${pair} no longer correlate (layer (corr): ${list}; cut ${BROKEN}) while ${other} pair at ≥ ${SIGNAL}, as trained weights do. ${what === "k" ? "k_b reshaped instead of transposed, or its heads/elements reordered" : "v_b reshaped or its heads/elements reordered"} at conversion`, { layers: broken.map((l) => l.layer), judged: judged.length, signal: SIGNAL, broken: BROKEN, pairing: layers });
  };
  report(kBroken, "k");
  report(vBroken, "v");
  const both = layers.filter((l) => l.qk < BROKEN && l.vo < BROKEN);
  if (trained && layers.length > 0 && both.length * 2 >= layers.length && judged.length * 2 < layers.length) {
    const tensor = legacy ? "attn_kv_b" : "attn_k_b/attn_v_b";
    f.add("tensors", "error", "attention-unpaired", `the model's other weights are trained, but in ${both.length} of ${layers.length} layers neither W_q/W_UK nor W_UV/attn_output pair as trained weights do (layer (q·k, v·o): ${both.map((l) => `${l.layer} (${l.qk.toFixed(2)}, ${l.vo.toFixed(2)})`).join(", ")}; cut ${BROKEN}): ${tensor} ${legacy ? "rows are in the wrong head order" : "are swapped, or in the wrong head order"}`, { layers: both.map((l) => l.layer), broken: BROKEN, pairing: layers });
  }
  return layers;
}
