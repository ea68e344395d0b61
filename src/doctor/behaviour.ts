/**
 * Behaviour checks of `latent doctor`: next-token entropy and top-1 probability on probe texts, flat log-probs,
 * degenerate loops in greedy output, per-layer activation norms and fp16 headroom (the largest activations, and the
 * absorbed query q_abs = W_UKᵀ·q_nope that an fp16 MLA decode kernel must hold).
 *
 * Random-weight test models legitimately produce near-flat distributions and loops, so these are reported as notes;
 * only non-finite values and flat distributions on *every* probe of a large-vocabulary model are raised.
 *
 * Evidence that can fail on a trained model: calibration on a built-in text (perplexity.ts: NLL against entropy)
 * and the SwiGLU structure seen through that text's activations (ffn-checks.ts); the balanced norms of MLA's paired
 * projections (attn-pairing.ts).
 */
import type { DeepSeek2 } from "../model/deepseek2.js";
import { LatentCache } from "../model/cache.js";
import { logSoftmaxRow } from "../engine/evaluate.js";
import { tracedRun, type Prompt } from "./paths.js";
import { FP16_MAX, type Findings } from "./report.js";
import { calibration, judgeCalibration, type CalibrationResult, type FfnInputs } from "./perplexity.js";
import { checkFfn, PAIRING_SIGNAL, type FfnReport } from "./ffn-checks.js";
import { checkAttnPairing, type AttnPairingLayer } from "./attn-pairing.js";
import { checkDownPairing, type DownPairingLayer } from "./down-pairing.js";

export interface ProbeResult {
  readonly label: string;
  readonly tokens: number;
  /** next-token entropy after the last token, nats */
  readonly entropy: number;
  /** entropy / ln(n_vocab) */
  readonly entropyRatio: number;
  readonly top1: number;
  readonly top1Prob: number;
}

export interface LayerNorms {
  readonly layer: number;
  /** RMS of the residual stream after the layer */
  readonly residual: number;
  readonly attn: number;
  readonly ffn: number;
  /** largest |value| at any stage of the layer */
  readonly absMax: number;
  /** largest |q_abs| (the absorbed query) of the layer */
  readonly qAbsMax: number;
}

export interface GreedyResult {
  readonly prompt: string;
  readonly generated: number[];
  /** a repeating cycle at the end of the output */
  readonly loop: { period: number; repeats: number } | undefined;
}

export interface BehaviourReport {
  readonly probes: readonly ProbeResult[];
  readonly greedy: GreedyResult | undefined;
  readonly norms: readonly LayerNorms[];
  /** NLL and entropy on the built-in calibration text (absent without a tokenizer) */
  readonly calibration?: CalibrationResult;
  /** gate/up pairing per MoE layer; pre-activation lean per layer (empty without a tokenizer) */
  readonly ffn?: FfnReport;
  /** per layer: log-norm correlation of W_q nope rows with W_UK rows, and of W_UV rows with W_o columns */
  readonly attentionPairing?: readonly AttnPairingLayer[];
  /** per MoE layer: up-row / down-column pairing between (sampled) experts */
  readonly downPairing?: readonly DownPairingLayer[];
}

function rms(a: Float64Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * a[i];
  return Math.sqrt(s / Math.max(1, a.length));
}

function absMax(a: Float64Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const v = Math.abs(a[i]);
    if (!(v <= m)) m = v;
  }
  return m;
}

/** The shortest cycle (period ≤ 8) that repeats at least 3 times at the end of `ids`. */
export function detectLoop(ids: readonly number[]): { period: number; repeats: number } | undefined {
  for (let p = 1; p <= 8; p++) {
    let reps = 1;
    for (let start = ids.length - 2 * p; start >= 0; start -= p) {
      let same = true;
      for (let i = 0; i < p; i++) if (ids[start + i] !== ids[start + p + i]) same = false;
      if (!same) break;
      reps++;
    }
    if (reps >= 3 && reps * p >= 6) return { period: p, repeats: reps };
  }
  return undefined;
}

/** Greedy continuation on the prefill + cached decode path. */
export function greedy(model: DeepSeek2, prompt: readonly number[], n: number): number[] {
  const cache = new LatentCache(model.config);
  let logits = model.forward(prompt, cache, { path: "prefill", logits: "last" });
  const out: number[] = [];
  for (let i = 0; i < n && cache.length < model.config.contextLength; i++) {
    let best = 0;
    for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
    out.push(best);
    logits = model.forward([best], cache, { path: "decode", logits: "last" });
  }
  return out;
}

export interface BehaviourOptions {
  readonly greedyTokens?: number;
  readonly chunk?: number;
  /** the calibration text (perplexity.ts) as the model's tokens; without it calibration and the gate/up lean are skipped */
  readonly calibrationTokens?: readonly number[];
}

export function checkBehaviour(
  model: DeepSeek2,
  probes: readonly Prompt[],
  findings: Findings,
  opts: BehaviourOptions = {},
): BehaviourReport {
  const c = model.config;
  const logV = Math.log(c.nVocab);
  const results: ProbeResult[] = [];
  let norms: LayerNorms[] = [];
  probes.forEach((p, pi) => {
    const run = tracedRun(model, p.tokens, "reference", opts.chunk ?? 8);
    const last = run.logits[run.logits.length - 1];
    const lp = logSoftmaxRow(last);
    let h = 0;
    let top1 = 0;
    for (let i = 0; i < lp.length; i++) {
      const pr = Math.exp(lp[i]);
      if (pr > 0) h -= pr * lp[i];
      if (lp[i] > lp[top1]) top1 = i;
    }
    results.push({
      label: p.label,
      tokens: p.tokens.length,
      entropy: h,
      entropyRatio: h / logV,
      top1,
      top1Prob: Math.exp(lp[top1]),
    });
    if (!Number.isFinite(h))
      findings.add(
        "behaviour",
        "error",
        "non-finite-logits",
        `the reference logits on the "${p.label}" probe are not finite`,
      );
    if (pi === 0) {
      norms = [];
      for (let il = 0; il < c.nLayer; il++) {
        const get = (s: string): Float64Array => run.stages.get(`${il}:${s}`)?.rows ?? new Float64Array();
        let am = 0;
        for (const st of run.stages.values()) if (st.layer === il) am = Math.max(am, absMax(st.rows));
        norms.push({
          layer: il,
          residual: rms(get("residual")),
          attn: rms(get("o_proj")),
          ffn: rms(get("ffn_out")),
          absMax: am,
          qAbsMax: qAbsMax(model, il, get("q")),
        });
      }
    }
  });

  const flat = results.filter((r) => r.entropyRatio > 0.98);
  if (results.length > 0 && flat.length === results.length) {
    // A trained model is never this unsure on every probe; tiny test vocabularies (< 1000) are exempt.
    findings.add(
      "behaviour",
      c.nVocab >= 1000 ? "warning" : "info",
      "flat-logprobs",
      `next-token entropy is within 2% of ln(n_vocab) = ${logV.toFixed(2)} on every probe (${flat.map((r) => r.entropy.toFixed(2)).join(", ")} nats): the output distribution is flat — random or scrambled weights, or logits that do not depend on the input`,
      { entropies: results.map((r) => r.entropy) },
    );
  }

  const bad = norms.find((n) => !Number.isFinite(n.residual) || !Number.isFinite(n.absMax));
  if (bad !== undefined)
    findings.add(
      "behaviour",
      "error",
      "non-finite-activations",
      `activations turn non-finite at layer ${bad.layer} on the reference path`,
      { layer: bad.layer },
    );
  const over = norms.find((n) => n.absMax > FP16_MAX);
  if (over !== undefined)
    findings.add(
      "behaviour",
      "warning",
      "fp16-activation-overflow",
      `activations reach ${over.absMax.toExponential(2)} at layer ${over.layer}, beyond fp16 (±65504): run this model with bf16/f32 activations, never fp16`,
      { layer: over.layer, absMax: over.absMax },
    );
  const qOver = norms.find((n) => n.qAbsMax > FP16_MAX);
  if (qOver !== undefined)
    findings.add(
      "behaviour",
      "warning",
      "fp16-absorbed-query-overflow",
      `the absorbed query q_abs = W_UKᵀ·q_nope reaches ${qOver.qAbsMax.toExponential(2)} at layer ${qOver.layer}: an MLA decode kernel that holds it in fp16 overflows (Inf/NaN output — the vLLM fp16 GGUF gibberish)`,
      { layer: qOver.layer, qAbsMax: qOver.qAbsMax },
    );

  let greedyResult: GreedyResult | undefined;
  const n = opts.greedyTokens ?? 24;
  if (n > 0 && probes.length > 0) {
    const p = probes[probes.length - 1];
    const generated = greedy(model, p.tokens, n);
    const loop = detectLoop(generated);
    greedyResult = { prompt: p.label, generated, loop };
    if (loop !== undefined) {
      findings.add(
        "behaviour",
        "info",
        "greedy-loop",
        `greedy output after the "${p.label}" probe ends in a cycle of ${loop.period} token(s) repeated ${loop.repeats}× (expected of random-weight models; in a trained model a sign of wrong gating, rope or attention)`,
        { period: loop.period, repeats: loop.repeats, generated },
      );
    }
  }
  let cal: CalibrationResult | undefined;
  let ffnInputs: FfnInputs = new Map();
  const ct = opts.calibrationTokens;
  if (ct !== undefined && ct.length >= 16) {
    const r = calibration(model, ct);
    judgeCalibration(r.result, findings);
    cal = r.result;
    ffnInputs = r.ffnInputs;
  } else {
    findings.add(
      "behaviour",
      "info",
      "calibration-skipped",
      "no tokenizer that encodes the calibration text: calibration and the gate/up lean check are skipped",
    );
  }
  const ffn = checkFfn(model, ffnInputs, findings);
  const ffnTrained = ffn.pairing.some((l) => l.median > PAIRING_SIGNAL * l.baseline);
  const attentionPairing = checkAttnPairing(model, findings, cal?.trained === true || ffnTrained);
  const downPairing = checkDownPairing(model, findings);
  return {
    probes: results,
    greedy: greedyResult,
    norms,
    ...(cal !== undefined ? { calibration: cal } : {}),
    ffn,
    attentionPairing,
    downPairing,
  };
}

/** max |W_UK,hᵀ q_nope,h| over the traced queries of one layer (the absorbed decode query). */
function qAbsMax(model: DeepSeek2, il: number, q: Float64Array): number {
  const c = model.config;
  const D = c.qkNope + c.qkRope;
  const n = q.length / (c.nHead * D);
  const kB = model.weights.layers[il].attn.kB;
  const out = new Float64Array(c.kvLoraRank);
  let m = 0;
  for (let t = 0; t < n; t++) {
    for (let h = 0; h < c.nHead; h++) {
      const qo = (t * c.nHead + h) * D;
      kB[h].matvec(q, qo, out, 0);
      m = Math.max(m, absMax(out));
    }
  }
  return m;
}
