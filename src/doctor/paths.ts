/**
 * Path checks of `latent doctor`: the same prompts through the reference (definition, float64), prefill (chunks over
 * the latent cache, attn_k_b/attn_v_b decompression) and decode (absorbed MQA) paths — of the model under test, and
 * against a clean reference when the implementation under test is another one. Per-layer, per-stage hidden-state
 * divergence (from the forward pass's trace taps) names the first layer and sub-step where paths part; final KL and
 * top-1 agreement measure what it does to the output. A divergence is then matched against known faults
 * (src/doctor/faults/) simulated on the clean reference, to name the cause.
 */
import type { DeepSeek2, TraceStage } from "../model/deepseek2.js";
import type { AttentionPath } from "../model/mla.js";
import { LatentCache } from "../model/cache.js";
import { logSoftmaxRow } from "../engine/evaluate.js";
import { withFaults, type Faults } from "./faults/faults.js";
import type { Findings } from "./report.js";

export interface Prompt {
  readonly label: string;
  readonly tokens: readonly number[];
}

/** Trace of one run: per (layer, stage) all rows of the sequence, in the order the forward pass visits them. */
export interface RunTrace {
  readonly stages: Map<string, { layer: number; stage: TraceStage; width: number; rows: Float64Array }>;
  readonly logits: Float32Array[];
}

const key = (layer: number, stage: TraceStage): string => `${layer}:${stage}`;

/** Run `tokens` on one path with trace taps, rows concatenated across chunks / decode steps. */
export function tracedRun(model: DeepSeek2, tokens: readonly number[], path: AttentionPath, chunk: number): RunTrace {
  const parts = new Map<string, { layer: number; stage: TraceStage; width: number; rows: Float64Array[] }>();
  const trace = (layer: number, stage: TraceStage, rows: Float64Array, width: number): void => {
    const k = key(layer, stage);
    let p = parts.get(k);
    if (p === undefined) parts.set(k, (p = { layer, stage, width, rows: [] }));
    p.rows.push(Float64Array.from(rows));
  };
  const V = model.config.nVocab;
  const logits: Float32Array[] = [];
  const take = (l: Float32Array): void => {
    for (let i = 0; i < l.length / V; i++) logits.push(l.slice(i * V, (i + 1) * V));
  };
  if (path === "reference") take(model.forward(tokens, undefined, { path, logits: "all", trace }));
  else {
    const cache = new LatentCache(model.config);
    const step = path === "decode" ? 1 : chunk;
    for (let i = 0; i < tokens.length; i += step)
      take(model.forward(tokens.slice(i, i + step), cache, { path, logits: "all", trace }));
  }
  const stages: RunTrace["stages"] = new Map();
  for (const [k, p] of parts) {
    const n = p.rows.reduce((a, r) => a + r.length, 0);
    const rows = new Float64Array(n);
    let at = 0;
    for (const r of p.rows) {
      rows.set(r, at);
      at += r.length;
    }
    stages.set(k, { layer: p.layer, stage: p.stage, width: p.width, rows });
  }
  return { stages, logits };
}

/** max |a − b| / RMS(a) (Infinity when b has a non-finite value a does not). */
export function relDiff(a: Float64Array | Float32Array, b: Float64Array | Float32Array): number {
  if (a.length !== b.length) return Infinity;
  let ss = 0;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (!Number.isFinite(y) && Number.isFinite(x)) return Infinity;
    ss += x * x;
    const d = Math.abs(x - y);
    if (d > m) m = d;
  }
  const rms = Math.sqrt(ss / Math.max(1, a.length));
  return m / Math.max(rms, 1e-30);
}

function allZero(a: Float64Array): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== 0) return false;
  return true;
}

function hasNonFinite(a: Float64Array | Float32Array): boolean {
  for (let i = 0; i < a.length; i++) if (!Number.isFinite(a[i])) return true;
  return false;
}

/** KL(p‖q) of two logits rows, nats; Infinity when q is not finite. */
export function klLogits(p: ArrayLike<number>, q: ArrayLike<number>): number {
  for (let i = 0; i < q.length; i++) if (!Number.isFinite(q[i])) return Infinity;
  const lp = logSoftmaxRow(p);
  const lq = logSoftmaxRow(q);
  let kl = 0;
  for (let i = 0; i < lp.length; i++) {
    const pi = Math.exp(lp[i]);
    if (pi > 0) kl += pi * (lp[i] - lq[i]);
  }
  return Math.max(0, kl);
}

function argmax(a: ArrayLike<number>): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[b]) b = i;
  return b;
}

export interface Divergence {
  readonly layer: number;
  readonly stage: TraceStage | "q_nope" | "q_pe" | "logits";
  readonly relDiff: number;
  /** what the stage's values look like on the path under test */
  readonly symptom: "differs" | "all-zero" | "non-finite";
  /** stages of the same layer that still agree */
  readonly agreeing: string[];
  /** stages of the same layer that differ */
  readonly differing: string[];
}

export interface PathComparison {
  readonly prompt: string;
  readonly tokens: number;
  readonly path: string;
  readonly maxKL: number;
  readonly meanKL: number;
  readonly top1Agreement: number;
  readonly firstDivergence: Divergence | undefined;
}

/** Split the q stage into its un-rotated (nope) and rotated (rope) parts, so a rope fault is told from a projection fault. */
function qParts(rows: Float64Array, H: number, P: number, R: number): { nope: Float64Array; rope: Float64Array } {
  const D = P + R;
  const n = rows.length / (H * D);
  const nope = new Float64Array(n * H * P);
  const rope = new Float64Array(n * H * R);
  for (let t = 0; t < n * H; t++) {
    nope.set(rows.subarray(t * D, t * D + P), t * P);
    rope.set(rows.subarray(t * D + P, (t + 1) * D), t * R);
  }
  return { nope, rope };
}

export function compareRuns(base: RunTrace, test: RunTrace, model: DeepSeek2, tol: number): Divergence | undefined {
  const c = model.config;
  const diffs: { layer: number; stage: string; rel: number; symptom: Divergence["symptom"] }[] = [];
  for (const [k, a] of base.stages) {
    const b = test.stages.get(k);
    if (b === undefined) continue;
    if (a.stage === "q") {
      const pa = qParts(a.rows, c.nHead, c.qkNope, c.qkRope);
      const pb = qParts(b.rows, c.nHead, c.qkNope, c.qkRope);
      diffs.push({ layer: a.layer, stage: "q_nope", rel: relDiff(pa.nope, pb.nope), symptom: "differs" });
      diffs.push({ layer: a.layer, stage: "q_pe", rel: relDiff(pa.rope, pb.rope), symptom: "differs" });
      continue;
    }
    const rel = relDiff(a.rows, b.rows);
    const symptom =
      hasNonFinite(b.rows) && !hasNonFinite(a.rows)
        ? "non-finite"
        : allZero(b.rows) && !allZero(a.rows)
          ? "all-zero"
          : "differs";
    diffs.push({ layer: a.layer, stage: a.stage, rel, symptom });
  }
  const first = diffs.find((d) => !(d.rel <= tol));
  if (first === undefined) {
    const lrel = Math.max(...base.logits.map((r, i) => relDiff(r, test.logits[i])));
    return lrel <= tol
      ? undefined
      : { layer: c.nLayer, stage: "logits", relDiff: lrel, symptom: "differs", agreeing: [], differing: ["logits"] };
  }
  const same = diffs.filter((d) => d.layer === first.layer);
  return {
    layer: first.layer,
    stage: first.stage as Divergence["stage"],
    relDiff: first.rel,
    symptom: first.symptom,
    agreeing: same.filter((d) => d.rel <= tol).map((d) => d.stage),
    differing: same.filter((d) => !(d.rel <= tol)).map((d) => d.stage),
  };
}

/** A sentence naming the likely cause of a first divergence. */
export function explainDivergence(d: Divergence, path: string, model: DeepSeek2): string {
  const c = model.config;
  const isMoe = d.layer >= c.nLeadingDense && c.nExpert > 0 && d.layer < c.nLayer;
  const differing = new Set(d.differing);
  if (d.symptom === "all-zero")
    return `the ${d.stage} values are all zero on the ${path} path: that output buffer is never written (or never read back)`;
  if (d.symptom === "non-finite") {
    return d.stage === "attn_out"
      ? `the attention output turns Inf/NaN on the ${path} path while the reference stays finite: an overflow inside attention (an fp16 absorbed query q_abs = W_UKᵀ·q_nope or fp16 scores overflow first)`
      : `${d.stage} turns Inf/NaN on the ${path} path: an overflow (fp16/bf16 activations?)`;
  }
  if ((differing.has("q_pe") || differing.has("k_pe")) && !differing.has("q_nope") && !differing.has("latent")) {
    return "the rotated parts (q_pe, k_pe) differ while the un-rotated ones (q_nope, latent) agree: RoPE — pairing (these models use interleaved pairs, not NeoX halves), frequencies/YaRN or positions";
  }
  switch (d.stage) {
    case "embed":
      return "the token embeddings differ: embedding lookup or token_embd dequantization";
    case "attn_norm":
    case "ffn_norm":
      return `${d.stage} differs with its input equal: RMSNorm (eps or weight)`;
    case "q_nope":
      return "the query projection differs (attn_q_a/attn_q_b or attn_q, q_a_norm): projection kernel or dequantization";
    case "latent":
      return "the compressed latent differs: attn_kv_a_mqa projection or kv_a_norm";
    case "attn_out":
      return `q, latent and k_pe agree but the attention output differs on the ${path} path: the attention kernel itself — scores/softmax scale, masking, or how W_UK (attn_k_b) and W_UV (attn_v_b) are applied${c.qkNope === c.vHead ? " (k_b and v_b swapped fits: same shapes here)" : ""}`;
    case "o_proj":
      return "attention output agrees but W_o·o differs: the attn_output projection";
    case "router":
      return "router logits differ with ffn_norm equal: the ffn_gate_inp projection";
    case "ffn_out":
      return isMoe
        ? "router logits agree but the MoE output differs: expert selection or weighting — gating function (softmax vs sigmoid), the correction bias (selection only, never in the weights), normalization or routed scaling — or the expert FFNs"
        : "the dense FFN output differs: ffn_gate/ffn_up/ffn_down kernels";
    case "residual":
      return "both sub-layer outputs agree but the residual differs: the residual add";
    case "output_norm":
      return "the final norm differs: output_norm";
    case "logits":
      return "every hidden state agrees but the logits differ: the output head (output.weight) or the logits buffer";
    default:
      return `${d.stage} differs`;
  }
}

/** Known faults that could explain a divergence on a model of this shape. */
export function candidateFaults(model: DeepSeek2, path: AttentionPath): { label: string; faults: Faults }[] {
  const c = model.config;
  const out: { label: string; faults: Faults }[] = [
    { label: "NeoX (half-split) RoPE instead of interleaved", faults: { neoxRope: true } },
  ];
  const hasMoe = c.nExpert > 0 && c.nLeadingDense < c.nLayer;
  if (hasMoe && c.gating === "sigmoid")
    out.push({ label: "softmax router gating instead of sigmoid", faults: { softmaxGating: true } });
  if (hasMoe && model.weights.layers.some((l) => l.moe?.bias !== undefined))
    out.push({ label: "correction bias (exp_probs_b) added to the expert weights", faults: { biasInWeights: true } });
  if (path !== "reference" && c.qkNope === c.vHead)
    out.push({ label: "attn_k_b and attn_v_b swapped", faults: { swapKvB: true } });
  out.push({ label: `attention output of the ${path} path never written`, faults: { attnOutUnwritten: path } });
  if (path === "decode")
    out.push({ label: "absorbed query held in fp16 (overflow)", faults: { fp16AbsorbedQuery: true } });
  return out;
}

/** Logits of a path on the clean model with each candidate fault; the candidates that reproduce `observed`. */
export function matchFaults(
  clean: DeepSeek2,
  tokens: readonly number[],
  path: AttentionPath,
  chunk: number,
  observed: readonly ArrayLike<number>[],
  compare: (a: readonly ArrayLike<number>[], b: readonly ArrayLike<number>[]) => boolean,
): string[] {
  const hits: string[] = [];
  for (const cand of candidateFaults(clean, path)) {
    const m = withFaults(clean, cand.faults);
    let got: Float32Array[];
    try {
      got = tracedRun(m, tokens, path, chunk).logits;
    } catch {
      continue;
    }
    if (compare(got, observed)) hits.push(cand.label);
  }
  return hits;
}

/** Same logits to within float noise (NaN/Inf must sit at the same places). */
export function sameLogits(a: readonly ArrayLike<number>[], b: readonly ArrayLike<number>[]): boolean {
  if (a.length !== b.length) return false;
  for (let r = 0; r < a.length; r++) {
    const x = a[r];
    const y = b[r];
    if (x.length !== y.length) return false;
    let scale = 1;
    for (let i = 0; i < x.length; i++) if (Number.isFinite(x[i])) scale = Math.max(scale, Math.abs(x[i]));
    for (let i = 0; i < x.length; i++) {
      const u = x[i];
      const v = y[i];
      if (Number.isFinite(u) !== Number.isFinite(v)) return false;
      if (Number.isFinite(u) && Math.abs(u - v) > 1e-5 * scale) return false;
    }
  }
  return true;
}

export interface PathCheckOptions {
  readonly prompts: readonly Prompt[];
  /** prefill chunk (default 8: the long prompt spans several chunks) */
  readonly chunk?: number;
  /** relative tolerance per stage (max |Δ| / RMS), default 1e-3 */
  readonly tolerance?: number;
  /** KL tolerance in nats, default 1e-4 */
  readonly klTolerance?: number;
  /** the clean reference when `test` is another implementation (default: test itself) */
  readonly clean?: DeepSeek2;
  /** match divergences against known faults (default true) */
  readonly explain?: boolean;
  /** told before each comparison run ("paths 2/9: prefill on the long prompt (12 tokens)") */
  readonly onRun?: (message: string) => void;
}

export interface PathReport {
  readonly chunk: number;
  readonly prompts: readonly { label: string; tokens: number }[];
  readonly comparisons: readonly PathComparison[];
}

export function checkPaths(test: DeepSeek2, findings: Findings, opts: PathCheckOptions): PathReport {
  const clean = opts.clean ?? test;
  const chunk = opts.chunk ?? 8;
  const tol = opts.tolerance ?? 1e-3;
  const klTol = opts.klTolerance ?? 1e-4;
  const comparisons: PathComparison[] = [];
  const reported = new Set<string>();
  const candidates: { label: string; model: DeepSeek2; path: AttentionPath }[] = [];
  if (clean !== test) candidates.push({ label: "reference (under test)", model: test, path: "reference" });
  candidates.push({ label: "prefill", model: test, path: "prefill" }, { label: "decode", model: test, path: "decode" });

  const runs = opts.prompts.length * candidates.length;
  for (const p of opts.prompts) {
    const base = tracedRun(clean, p.tokens, "reference", chunk);
    for (const cand of candidates) {
      opts.onRun?.(
        `paths ${comparisons.length + 1}/${runs}: ${cand.label} on the ${p.label} prompt (${p.tokens.length} tokens)`,
      );
      const run = tracedRun(cand.model, p.tokens, cand.path, chunk);
      const kls = base.logits.map((r, i) => klLogits(r, run.logits[i]));
      const agree = base.logits.filter((r, i) => argmax(r) === argmax(run.logits[i])).length;
      const div = compareRuns(base, run, clean, tol);
      const maxKL = Math.max(...kls);
      const cmp: PathComparison = {
        prompt: p.label,
        tokens: p.tokens.length,
        path: cand.label,
        maxKL,
        meanKL: kls.reduce((a, b) => a + b, 0) / kls.length,
        top1Agreement: agree / base.logits.length,
        firstDivergence: div,
      };
      comparisons.push(cmp);
      const bad = div !== undefined || !(maxKL <= klTol);
      if (!bad || reported.has(cand.label)) continue;
      reported.add(cand.label);
      const where =
        div === undefined
          ? "in the final logits only"
          : div.stage === "logits"
            ? "at the logits"
            : `first at layer ${div.layer}, ${div.stage} (relative difference ${div.relDiff.toExponential(2)})`;
      let message = `the ${cand.label} path departs from the reference on the ${p.label} prompt (${p.tokens.length} tokens) ${where}; final KL max ${fmtKL(maxKL)}, top-1 agreement ${(cmp.top1Agreement * 100).toFixed(0)}%`;
      if (div !== undefined) message += `. Likely cause: ${explainDivergence(div, cand.path, clean)}`;
      let matches: string[] = [];
      if (opts.explain !== false) {
        matches = matchFaults(clean, p.tokens, cand.path, chunk, run.logits, sameLogits);
        if (matches.length > 0) message += `. Reproduced exactly by simulating: ${matches.join("; ")}`;
      }
      findings.add("paths", "error", "path-divergence", message, {
        path: cand.label,
        prompt: p.label,
        divergence: div,
        maxKL,
        top1Agreement: cmp.top1Agreement,
        matchingFaults: matches,
      });
    }
  }
  return { chunk, prompts: opts.prompts.map((p) => ({ label: p.label, tokens: p.tokens.length })), comparisons };
}

function fmtKL(x: number): string {
  return Number.isFinite(x) ? x.toExponential(2) : String(x);
}

/** Default prompts: 1 token, a short one, one longer than the prefill chunk (ids from text when a tokenizer is given). */
export function defaultPrompts(nVocab: number, chunk: number, encode?: (text: string) => number[]): Prompt[] {
  const ids = (n: number, seed: number): number[] => {
    let s = seed;
    return Array.from({ length: n }, () => {
      s = (s * 1103515245 + 12345) % 2147483648;
      return s % nVocab;
    });
  };
  const fromText = (text: string, n: number, seed: number): number[] => {
    const t = encode?.(text).filter((x) => x < nVocab) ?? [];
    return t.length >= Math.min(n, 2) ? t.slice(0, Math.max(n, t.length)) : ids(n, seed);
  };
  const long = 2 * chunk + 3;
  return [
    { label: "1-token", tokens: fromText("The", 1, 7).slice(0, 1) },
    { label: "short", tokens: fromText("The capital of France is", 6, 11).slice(0, 8) },
    {
      label: `long (> chunk ${chunk})`,
      tokens: ensureLength(
        fromText(
          "In the beginning there were numbers: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve.",
          long,
          13,
        ),
        long,
        ids(long, 17),
      ),
    },
  ];
}

function ensureLength(t: number[], n: number, pad: number[]): number[] {
  return t.length >= n ? t.slice(0, n) : [...t, ...pad.slice(0, n - t.length)];
}
