/**
 * Known-fault matcher for endpoint mismatches: which simulated fault reproduces the endpoint's log-probs to within
 * the same-GGUF tolerance. Cheap explanations first (positions off by one, logits scaled by a fitted temperature),
 * then models over modified config/weights (NeoX RoPE, softmax gating, bias in the weights, k_b/v_b swapped, another
 * RoPE base — on a grid, then fitted —, one expert zeroed), on one short probe prefix, within a bounded number of
 * simulations and time.
 */
import { evaluateAll, logSoftmaxRow } from "../../engine/evaluate.js";
import { LatentCache } from "../../model/cache.js";
import type { DeepSeek2 } from "../../model/deepseek2.js";
import { withFaults, type Faults } from "../faults/faults.js";
import {
  compareAll,
  comparePosition,
  formatSummary,
  summarize,
  withinTolerance,
  type Scored,
  type Summary,
} from "./compare.js";
import { moeLayers, withExpertZeroed, withF32Weights, withKvBSwapped, withRopeBase } from "./variants.js";

export interface MatchInput {
  readonly clean: DeepSeek2;
  /** probe sequences (prompt + generated tokens) */
  readonly seqs: readonly (readonly number[])[];
  /** reference logits per probe sequence */
  readonly logits: readonly (readonly Float32Array[])[];
  /** reference log-softmax rows per probe sequence */
  readonly rows: readonly (readonly Float64Array[])[];
  readonly scored: readonly Scored[];
  /** stop simulating candidates after this long (default 30 s) or this many simulations (default 96) */
  readonly budgetMs?: number;
  readonly maxSimulations?: number;
}

export interface MatchResult {
  readonly causes: string[];
  /** candidates simulated, and whether the budget ran out first */
  readonly tried: number;
  readonly outOfBudget: boolean;
  /** temperature that best fits the endpoint's log-probs to logits × t */
  readonly fittedScale: number | undefined;
}

interface Candidate {
  readonly label: string;
  readonly build: () => DeepSeek2 | undefined;
  /** the RoPE base a RoPE candidate runs with (the best one is refined off the grid) */
  readonly ropeBase?: number;
  /** a zeroed-expert candidate (the long tail of the list, after the RoPE refinement) */
  readonly expert?: boolean;
}

/** Golden-section search of logits × t (log t in [−1.6, 1.6]) for the best mean KL. */
function fitScale(input: MatchInput): number | undefined {
  // an even sample of at most 96 positions keeps the 30 evaluations cheap
  const every = Math.max(1, Math.ceil(input.scored.length / 96));
  const pairs = input.scored
    .filter((_, i) => i % every === 0)
    .flatMap((s) => {
      const l = input.logits[s.seq]?.[s.pos];
      return l !== undefined ? [{ s, l }] : [];
    });
  if (pairs.length === 0) return undefined;
  const loss = (lt: number): number => {
    const t = Math.exp(lt);
    const p = pairs.flatMap(({ s, l }) => comparePosition(logSoftmaxRow(l.map((x) => x * t)), s) ?? []);
    return summarize(p).meanKL;
  };
  let a = -1.6;
  let b = 1.6;
  const g = (Math.sqrt(5) - 1) / 2;
  let c = b - g * (b - a);
  let d = a + g * (b - a);
  let fc = loss(c);
  let fd = loss(d);
  for (let i = 0; i < 28; i++) {
    if (fc < fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - g * (b - a);
      fc = loss(c);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + g * (b - a);
      fd = loss(d);
    }
  }
  return Math.exp((a + b) / 2);
}

function candidates(clean: DeepSeek2): Candidate[] {
  const c = clean.config;
  const f = (faults: Faults) => () => withFaults(clean, faults);
  const out: Candidate[] = [{ label: "NeoX (half-split) RoPE instead of interleaved", build: f({ neoxRope: true }) }];
  const hasMoe = c.nExpert > 0 && moeLayers(clean).length > 0;
  if (hasMoe && c.gating === "sigmoid")
    out.push({ label: "softmax router gating instead of sigmoid", build: f({ softmaxGating: true }) });
  if (hasMoe && clean.weights.layers.some((l) => l.moe?.bias !== undefined))
    out.push({ label: "correction bias (exp_probs_b) added to the expert weights", build: f({ biasInWeights: true }) });
  if (c.qkNope === c.vHead)
    out.push({
      label: "attn_k_b and attn_v_b swapped (W_UK used as W_UV and the reverse)",
      build: () => withKvBSwapped(clean),
    });
  const base = c.ropeBase;
  const bases = [...new Set([1e4, 5e4, 1e5, 5e5, 1e6, 1e7, base * 10, base / 10, base * 2, base / 2])].filter(
    (b) => Math.abs(b / base - 1) > 0.01,
  );
  for (const b of bases)
    out.push({
      label: `RoPE base ${b} instead of the file's ${base} (rope.freq_base)`,
      build: () => withRopeBase(clean, b),
      ropeBase: b,
    });
  if (hasMoe) {
    for (let e = 0; e < c.nExpert; e++)
      out.push({
        label: `expert ${e} zeroed in every MoE layer`,
        build: () => withExpertZeroed(clean, e),
        expert: true,
      });
    for (const il of moeLayers(clean))
      for (let e = 0; e < c.nExpert; e++)
        out.push({
          label: `expert ${e} of layer ${il} zeroed (missing or unloaded ffn_*_exps slice)`,
          build: () => withExpertZeroed(clean, e, il),
          expert: true,
        });
  }
  return out;
}

/** The probe and prefix to simulate on: the shortest prefix holding ≥ 12 scored positions that still disagree. */
function pickWindow(
  input: MatchInput,
  scored: readonly Scored[],
): { seq: number; len: number; scored: Scored[] } | undefined {
  let best: { seq: number; len: number; scored: Scored[] } | undefined;
  for (let seq = 0; seq < input.seqs.length; seq++) {
    const mine = scored.filter((s) => s.seq === seq).sort((a, b) => a.pos - b.pos);
    if (mine.length === 0) continue;
    const take = mine.slice(0, Math.min(mine.length, 12));
    const len = Math.min(input.seqs[seq].length, take[take.length - 1].pos + 1);
    if (withinTolerance(summarize(compareAll((s) => input.rows[s], take)))) continue;
    if (best === undefined || len < best.len) best = { seq, len, scored: take };
  }
  return best;
}

/** Causes that reproduce a mismatch of the endpoint's prompt (or all) positions. */
export function matchFaults(input: MatchInput): MatchResult {
  const causes: string[] = [];
  const rows = (s: number): readonly Float64Array[] => input.rows[s];
  const prompt = input.scored.filter((s) => s.group === "prompt");
  for (const shift of [-1, 1]) {
    const m = summarize(compareAll(rows, prompt, shift));
    if (withinTolerance(m))
      causes.push(
        `the log-probs match latent's position ${shift > 0 ? "i+1" : "i−1"} (${formatSummary(m)}): the endpoint's positions are off by one (prompt_logprobs alignment)`,
      );
  }
  const t = fitScale(input);
  if (t !== undefined && Math.abs(t - 1) > 0.01) {
    const scaled = input.logits.map((seq) => seq.map((l) => logSoftmaxRow(l.map((x) => x * t))));
    const m = summarize(compareAll((s) => scaled[s], input.scored));
    if (withinTolerance(m))
      causes.push(
        `the log-probs match latent's with the logits multiplied by ${t.toFixed(3)} (${formatSummary(m)}): a temperature or logit scale applied to the returned log-probs, or a scaled output norm / lm_head`,
      );
  }
  const window = pickWindow(input, input.scored);
  const t0 = performance.now();
  const budget = input.budgetMs ?? 30_000;
  const maxSimulations = input.maxSimulations ?? 96;
  let tried = 0;
  let outOfBudget = false;
  if (window !== undefined && causes.length === 0) {
    const tokens = input.seqs[window.seq].slice(0, window.len);
    const clean = withF32Weights(input.clean);
    const simulate = (m: DeepSeek2): Summary => {
      tried++;
      const sim = evaluateAll(m, tokens, { path: "reference" }).map((r) => logSoftmaxRow(r));
      return summarize(compareAll(() => sim, window.scored));
    };
    const affordable = (n: number): boolean => tried + n <= maxSimulations && performance.now() - t0 <= budget;
    const cleanKL = summarize(compareAll(rows, window.scored)).meanKL;
    let bestRope: { base: number; kl: number } | undefined;
    // a RoPE base off the grid: when the best grid base halves the clean disagreement, fit log(base) around it
    const refineRope = (): boolean => {
      if (bestRope === undefined || bestRope.kl >= cleanKL / 2 || !affordable(17)) return false;
      const fit = fitRopeBase(bestRope.base, (b) => simulate(withRopeBase(clean, b)).meanKL);
      const s = simulate(withRopeBase(clean, fit));
      if (!withinTolerance(s)) return false;
      causes.push(
        `the log-probs match latent with a simulated fault — RoPE base ≈ ${Number(fit.toPrecision(2))} (fitted) instead of the file's ${input.clean.config.ropeBase} (rope.freq_base) (${formatSummary(s)})`,
      );
      return true;
    };
    let refined = false;
    for (const cand of candidates(clean)) {
      if (cand.expert === true && !refined) {
        refined = true;
        if (refineRope()) break;
      }
      if (!affordable(1)) {
        outOfBudget = true;
        break;
      }
      let s: Summary;
      try {
        const m = cand.build();
        if (m === undefined) continue;
        s = simulate(m);
      } catch {
        continue;
      }
      if (cand.ropeBase !== undefined && (bestRope === undefined || s.meanKL < bestRope.kl))
        bestRope = { base: cand.ropeBase, kl: s.meanKL };
      if (withinTolerance(s)) {
        causes.push(`the log-probs match latent with a simulated fault — ${cand.label} (${formatSummary(s)})`);
        break;
      }
    }
    if (!refined && causes.length === 0 && !outOfBudget) refineRope();
  }
  return { causes, tried, outOfBudget, fittedScale: t };
}

/** Golden-section search of log(base) within a factor 2.5 of `start` (16 evaluations). */
function fitRopeBase(start: number, loss: (base: number) => number): number {
  let a = Math.log(start / 2.5);
  let b = Math.log(start * 2.5);
  const g = (Math.sqrt(5) - 1) / 2;
  let c = b - g * (b - a);
  let d = a + g * (b - a);
  let fc = loss(Math.exp(c));
  let fd = loss(Math.exp(d));
  const steps = 14;
  for (let i = 0; i < steps; i++) {
    if (fc < fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - g * (b - a);
      fc = loss(Math.exp(c));
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + g * (b - a);
      fd = loss(Math.exp(d));
    }
  }
  return Math.exp((a + b) / 2);
}

/** Decode-path candidates: the prompt prefilled clean, the generated tokens decoded on a faulted decode path. */
export function matchDecodeFaults(input: MatchInput, promptLength: (seq: number) => number): string[] {
  const gen = input.scored.filter((s) => s.group === "generated");
  const seqs = [...new Set(gen.map((s) => s.seq))];
  const seq = seqs.sort((a, b) => input.seqs[a].length - input.seqs[b].length)[0];
  if (seq === undefined) return [];
  const tokens = input.seqs[seq];
  const n = promptLength(seq);
  const cands: { label: string; faults: Faults }[] = [
    { label: "the decode path's attention output is never written (zeros)", faults: { attnOutUnwritten: "decode" } },
    { label: "the absorbed query of the decode path held in fp16 (overflow)", faults: { fp16AbsorbedQuery: true } },
  ];
  const causes: string[] = [];
  for (const cand of cands) {
    try {
      const m = withFaults(input.clean, cand.faults);
      const cache = new LatentCache(m.config);
      const out: Float64Array[] = [];
      const take = (l: Float32Array): void => {
        const V = m.config.nVocab;
        for (let i = 0; i < l.length / V; i++) out.push(logSoftmaxRow(l.subarray(i * V, (i + 1) * V)));
      };
      take(m.forward(tokens.slice(0, n), cache, { path: "prefill", logits: "all" }));
      for (let i = n; i < tokens.length - 1; i++)
        take(m.forward([tokens[i]], cache, { path: "decode", logits: "all" }));
      const s = summarize(
        compareAll(
          () => out,
          gen.filter((g) => g.seq === seq),
        ),
      );
      if (withinTolerance(s)) causes.push(`${cand.label} (simulated: ${formatSummary(s)})`);
    } catch {}
  }
  return causes;
}
