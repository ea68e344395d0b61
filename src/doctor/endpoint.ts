/**
 * Endpoint checks of `latent doctor --endpoint` (docs/doctor.md "Endpoint"): /health, /v1/models, tokenization
 * parity (/tokenize, else the text path), then probes of three lengths — one token, a sentence, and a prompt longer
 * than a prefill chunk — each with greedy generation of 16 tokens and top log-probs, in the first dialect that
 * works (vLLM prompt_logprobs, SGLang /generate, echo, llama-server /completion, plain logprobs). Prompt and
 * generated positions are teacher-forced through latent's reference on the same GGUF and compared position by
 * position on the actual token's log-prob and the full distribution (./endpoint/compare.ts). Prefill (prompt
 * positions and the first generated token) and decode (the tokens after it) are judged apart, so a broken decode
 * path is named as such; a mismatch goes to the known-fault matcher (./endpoint/matcher.ts).
 */
import type { ModelConfig } from "../model/config.js";
import type { DeepSeek2 } from "../model/deepseek2.js";
import { evaluateAll, logSoftmaxRow } from "../engine/evaluate.js";
import type { Tokenizer } from "../tokenizer/index.js";
import type { Findings } from "./report.js";
import {
  compareAll,
  EXACT,
  formatSummary,
  summarize,
  TOLERANCE,
  withinTolerance,
  type EndpointPosition,
  type Scored,
  type Summary,
} from "./endpoint/compare.js";
import { DIALECTS, probe, type Dialect, type DialectContext, type ProbeReply } from "./endpoint/dialects.js";
import { isRecord, makeCall, tryCall } from "./endpoint/http.js";
import { type MatchInput, matchDecodeFaults, matchFaults } from "./endpoint/matcher.js";
import { checkTokenization, type TokenizationReport } from "./endpoint/tokenization.js";
import { withF32Weights } from "./endpoint/variants.js";

export type { EndpointPosition } from "./endpoint/compare.js";
export type { Dialect } from "./endpoint/dialects.js";

/** prompt_logprobs (vLLM), echo (OpenAI legacy), input_logprobs (SGLang /generate), greedy (generated tokens only) */
export type LogprobMode = "prompt_logprobs" | "echo" | "input_logprobs" | "greedy" | "none";

export interface EndpointProbe {
  readonly label: string;
  readonly promptTokens: number;
  readonly generated: readonly number[];
  /** the dialect this probe was answered in (a probe can fall back from the endpoint's main one) */
  readonly dialect?: Dialect;
}

export interface EndpointReport {
  readonly base: string;
  readonly reachable: boolean;
  readonly health: { readonly url: string; readonly status: number } | undefined;
  readonly models: readonly string[] | undefined;
  readonly servedModel: string | undefined;
  readonly tokenization: TokenizationReport | undefined;
  readonly mode: LogprobMode;
  /** the short probe: prompt + generated tokens */
  readonly tokens: readonly number[];
  readonly positions: readonly EndpointPosition[];
  readonly meanKL: number;
  readonly maxKL: number;
  readonly top1Agreement: number;
  readonly meanAbsLogprobDiff: number;
  /** match: float32-exact; close: within the same-GGUF tolerance (low-precision kernels); mismatch: beyond it */
  readonly verdict: "match" | "close" | "mismatch" | "unknown";
  /** the request shape that worked, and why the ones before it did not */
  readonly dialect?: Dialect;
  readonly attempts?: readonly { readonly dialect: Dialect; readonly error: string }[];
  readonly probes?: readonly EndpointProbe[];
  /** prompt positions and the first generated token (prefill) / the tokens generated after it (decode) */
  readonly prefill?: Summary;
  readonly decode?: Summary;
  readonly tolerance?: { readonly meanKL: number; readonly meanGap: number };
}

/**
 * A reference that computes logits without holding the model (`doctor --low-memory`: layers streamed from disk). It
 * cannot simulate faults, so a mismatch is reported without the known-fault matcher's diagnosis.
 */
export interface StreamedReference {
  readonly config: ModelConfig;
  /** next-token logits after every position of each sequence (positions from 0), all in one pass */
  logitsOf(seqs: readonly (readonly number[])[]): Float32Array[][];
}

export interface EndpointOptions {
  readonly base: string;
  readonly apiKey?: string | undefined;
  /** latent's reference on the same GGUF: the loaded model, or a streamed pass over the file */
  readonly model: DeepSeek2 | StreamedReference;
  readonly tokenizer: Tokenizer | undefined;
  readonly findings: Findings;
  readonly fetch?: typeof fetch | undefined;
  /** probe prompts as token ids (default: one token, a sentence, and a prompt longer than a prefill chunk) */
  readonly prompts?: readonly (readonly number[])[];
  /** top-k log-probs to ask for (default 5) */
  readonly topK?: number;
  /** tokens generated per probe (default 16) */
  readonly maxTokens?: number;
  readonly servedModel?: string;
  /** time the known-fault matcher may take (default 30 s; it also stops after 96 simulations) */
  readonly matcherBudgetMs?: number;
}

const SHORT = "The quick brown fox jumps over the lazy dog. One, two, three, four, five, six, seven.";
const LONG = [
  "And it came to pass in those days, that there went out a decree that all the world should be taxed.",
  "The river ran past the old mill, where the miller kept his sacks of grain and counted them every evening by the light of a lamp.",
  "In the morning the children walked to the school on the hill, and the teacher wrote the lesson on the board: seven times eight is fifty-six.",
  "Then the king called his servants and said unto them, Go ye into the city, and bring me word of all that ye see and hear.",
  "The merchant sold cloth and oil, wine and wheat, and he wrote every sale in a book with a brass clasp.",
  "When the rain came the fields turned green, the wells were filled, and the people gave thanks for the harvest.",
].join(" ");
/** latent's prefill chunk: the long probe must span more than one */
const LONG_MIN_TOKENS = 280;

export function defaultEndpointPrompts(tok: Tokenizer | undefined, nVocab: number): number[][] {
  if (tok === undefined) {
    const ids = (n: number, a: number): number[] => Array.from({ length: n }, (_, i) => (i * a + 11) % nVocab);
    return [ids(1, 37), ids(20, 37), ids(LONG_MIN_TOKENS + 8, 53)];
  }
  const enc = (t: string): number[] => tok.encode(t).filter((x) => x < nVocab);
  const one = tok.addBos && tok.bosId !== undefined ? [tok.bosId] : enc("The").slice(0, 1);
  let long = enc(LONG);
  for (let text = LONG; long.length < LONG_MIN_TOKENS; ) long = enc((text += ` ${LONG}`));
  return [one, enc(SHORT), long];
}

const LABELS = ["one token", "a sentence", "longer than a prefill chunk"];

function modeOf(d: Dialect): LogprobMode {
  return d === "vllm" ? "prompt_logprobs" : d === "sglang" ? "input_logprobs" : d === "echo" ? "echo" : "greedy";
}

/** Scored positions of one probe: prompt entries, then the generated tokens' entries. */
function scoredOf(seq: number, prompt: readonly number[], r: ProbeReply): Scored[] {
  const out: Scored[] = [];
  r.prompt?.forEach((e, i) => {
    if (i === 0 || e === undefined) return;
    out.push({
      pos: i - 1,
      group: "prompt",
      step: undefined,
      seq,
      top: e.top,
      returned: e.returned,
      unmapped: e.unmapped,
      next: prompt[i],
      nextLogprob: e.actual === prompt[i] ? e.actualLogprob : e.top.get(prompt[i]),
    });
  });
  r.genEntries.forEach((e, j) => {
    out.push({
      pos: prompt.length - 1 + j,
      group: "generated",
      step: j,
      seq,
      top: e.top,
      returned: e.returned,
      unmapped: e.unmapped,
      next: r.generated[j],
      nextLogprob: e.actualLogprob ?? e.top.get(r.generated[j]),
    });
  });
  return out;
}

export async function checkEndpoint(o: EndpointOptions): Promise<EndpointReport> {
  const f = o.findings;
  const call = makeCall(o.fetch ?? fetch, o.apiKey);
  let base = o.base.replace(/\/+$/, "");
  if (!/\/v\d+$/.test(new URL(base).pathname)) base += "/v1";
  const origin = new URL(base).origin;
  const empty = {
    base,
    health: undefined,
    models: undefined,
    servedModel: undefined,
    tokenization: undefined,
    mode: "none" as const,
    tokens: [],
    positions: [],
    meanKL: NaN,
    maxKL: NaN,
    top1Agreement: NaN,
    meanAbsLogprobDiff: NaN,
    verdict: "unknown" as const,
  };

  const reach = await reachEndpoint(call, base, origin, f);
  if (reach === undefined) return { ...empty, reachable: false };
  const { health, models } = reach;
  const servedModel = o.servedModel ?? models?.[0];

  const c = o.model.config;
  const tok = o.tokenizer;
  const K = o.topK ?? 5;
  const byTextMap = new Map<string, number>();
  const byText = (t: string): number | undefined => {
    if (tok === undefined) return undefined;
    // texts that several ids decode to (byte pieces, duplicates) are ambiguous: left out rather than guessed
    if (byTextMap.size === 0)
      for (let id = 0; id < c.nVocab; id++) {
        const text = tok.decode([id]);
        byTextMap.set(text, byTextMap.has(text) ? -1 : id);
      }
    const id = byTextMap.get(t);
    return id === undefined || id < 0 ? undefined : id;
  };
  const ctx: DialectContext = { call, base, origin, servedModel, topK: K, maxTokens: o.maxTokens ?? 16, byText };
  const prompts = (o.prompts ?? defaultEndpointPrompts(tok, c.nVocab)).map((p) => [...p]);

  // Find the dialect on the sentence probe; a dialect that answers without log-probs is not one.
  const attempts: { dialect: Dialect; error: string }[] = [];
  const replies: (ProbeReply | undefined)[] = prompts.map(() => undefined);
  const first = Math.min(1, prompts.length - 1);
  let dialect: Dialect | undefined;
  for (const d of DIALECTS) {
    const r = await probe(d, ctx, { ids: prompts[first] });
    const usable = typeof r !== "string" && (r.prompt !== undefined || r.generated.length > 0);
    if (!usable) {
      attempts.push({ dialect: d, error: typeof r === "string" ? r : "no log-probs in the reply" });
      continue;
    }
    dialect = d;
    replies[first] = r;
    break;
  }

  const tokenization = tok !== undefined ? await checkTokenization(ctx, dialect, tok, f) : undefined;
  if (dialect === undefined) {
    f.add(
      "endpoint",
      "error",
      "no-logprobs",
      `${base} gave no usable log-probs in any dialect (${attempts.map((a) => `${a.dialect}: ${a.error}`).join("; ")}): the endpoint cannot be compared with the reference`,
      { attempts },
    );
    return { ...empty, reachable: true, health, models, servedModel, tokenization, attempts };
  }
  // The other probes in the same dialect; one that fails there (e.g. no prompt_logprobs for a 1-token prompt) falls
  // back to the dialects after it.
  const usedDialect: (Dialect | undefined)[] = prompts.map((_, i) => (i === first ? dialect : undefined));
  for (let i = 0; i < prompts.length; i++) {
    if (replies[i] !== undefined) continue;
    const errors: string[] = [];
    let unmappable = false;
    for (const d of DIALECTS.slice(DIALECTS.indexOf(dialect))) {
      const r = await probe(d, ctx, { ids: prompts[i] });
      if (typeof r !== "string" && (r.prompt !== undefined || r.generated.length > 0)) {
        replies[i] = r;
        usedDialect[i] = d;
        break;
      }
      if (typeof r !== "string" && r.unmappedGenerated > 0) unmappable = true;
      errors.push(`${d}: ${typeof r === "string" ? r : "no log-probs in the reply"}`);
    }
    if (replies[i] === undefined && unmappable)
      f.add(
        "endpoint",
        "info",
        "probe-unmappable",
        `the ${LABELS[i] ?? `#${i}`} probe's generated tokens have token texts that map to no single id (and the server gives no ids): not compared`,
      );
    else if (replies[i] === undefined)
      f.add(
        "endpoint",
        "warning",
        "probe-failed",
        `the ${LABELS[i] ?? `#${i}`} probe (${prompts[i].length} tokens) failed in every dialect from ${dialect} on: ${errors.join("; ")}`,
      );
  }

  // A reply with prompt log-probs but none for generated tokens: the generated ones from a plain greedy request.
  for (let i = 0; i < prompts.length; i++) {
    const r = replies[i];
    if (r === undefined || r.genEntries.length > 0 || r.unmappedGenerated > 0) continue;
    const g = await probe("openai", ctx, { ids: prompts[i] });
    if (typeof g !== "string" && g.generated.length > 0)
      replies[i] = { ...r, generated: g.generated, genEntries: g.genEntries };
  }
  if (!replies.some((r) => r !== undefined && r.genEntries.length > 1)) {
    // generated tokens given only as texts that map to no single id are latent's limit, not the server's
    const ambiguous = replies.some((r) => r !== undefined && r.unmappedGenerated > 0);
    f.add(
      "endpoint",
      ambiguous ? "info" : "warning",
      "decode-unchecked",
      `the endpoint returned no log-probs for generated tokens beyond the first${ambiguous ? " that map to token ids (ambiguous token texts, no ids)" : ""}: its decode path is not checked`,
    );
  }

  const seqs = prompts.map((p, i) => [...p, ...(replies[i]?.generated ?? [])]);
  const scored = replies.flatMap((r, i) => (r !== undefined ? scoredOf(i, prompts[i], r) : []));
  const { reference, logits } = referenceLogits(o.model, seqs, (i) => replies[i] !== undefined);
  const rows = logits.map((l) => l.map((r) => logSoftmaxRow(r)));
  const positions = compareAll((s) => rows[s], scored);
  const all = summarize(positions);
  // Prefill: the prompt positions; where the dialect gives none (generated log-probs only), the first generated token
  // of each probe, which comes from the last prefill row. Decode: the other generated tokens.
  const hasPrompt = positions.some((p) => p.group === "prompt");
  const isPrefill = (p: EndpointPosition): boolean => (hasPrompt ? p.group === "prompt" : p.step === 0);
  const prefill = summarize(positions.filter(isPrefill));
  const decode = summarize(positions.filter((p) => !isPrefill(p)));
  // every probe on its own too: a fault that shows only past a prefill chunk must not drown in the short probes
  const within = (keep: (p: EndpointPosition) => boolean): boolean => {
    const sel = positions.filter(keep);
    if (sel.length === 0) return true;
    return (
      withinTolerance(summarize(sel)) &&
      prompts.every((_, i) => {
        const mine = sel.filter((p) => p.seq === i);
        return mine.length < 8 || withinTolerance(summarize(mine));
      })
    );
  };
  const prefillOk = within(isPrefill);
  const decodeOk = within((p) => !isPrefill(p));
  const mode = modeOf(dialect);
  const probes = prompts.map(
    (p, i): EndpointProbe => ({
      label: LABELS[i] ?? `probe ${i}`,
      promptTokens: p.length,
      generated: replies[i]?.generated ?? [],
      ...(usedDialect[i] !== undefined ? { dialect: usedDialect[i] } : {}),
    }),
  );

  const notDistributions = checkDistributions(positions, rows, Math.min(K, c.nVocab), c.nVocab, f);

  const evidence = {
    dialect,
    mode,
    positions: positions.length,
    meanKL: all.meanKL,
    maxKL: all.maxKL,
    top1Agreement: all.top1,
    meanAbsLogprobDiff: all.meanGap,
    prefill,
    decode,
    tolerance: TOLERANCE,
  };
  const stats = `prefill ${prefill.n > 0 ? formatSummary(prefill) : "not scored"}; decode ${decode.n > 0 ? formatSummary(decode) : "not scored"} (${dialect} dialect, ${mode})`;
  const verdict = judge({
    f,
    positions,
    all,
    prefill,
    prefillOk,
    decodeOk,
    hasPrompt,
    notDistributions,
    stats,
    evidence,
    attempts,
    dialect,
    probes,
    prompts,
    scored,
    match:
      reference === undefined
        ? undefined
        : {
            clean: reference,
            seqs,
            logits,
            rows,
            scored,
            ...(o.matcherBudgetMs !== undefined ? { budgetMs: o.matcherBudgetMs } : {}),
          },
  });
  return {
    base,
    reachable: true,
    health,
    models,
    servedModel,
    tokenization,
    mode,
    tokens: seqs[first] ?? [],
    positions,
    meanKL: all.meanKL,
    maxKL: all.maxKL,
    top1Agreement: all.top1,
    meanAbsLogprobDiff: all.meanGap,
    verdict,
    dialect,
    attempts,
    probes,
    prefill,
    decode,
    tolerance: TOLERANCE,
  };
}

/** The reference's logits rows of each probe sequence that got a reply (others: none), and the model the fault
 * matcher simulates on (undefined for a streamed reference). */
function referenceLogits(
  model: DeepSeek2 | StreamedReference,
  seqs: readonly (readonly number[])[],
  replied: (i: number) => boolean,
): { reference: DeepSeek2 | undefined; logits: Float32Array[][] } {
  const wanted = seqs.map((s, i) => replied(i) && s.length > 0);
  if ("logitsOf" in model) {
    const some = seqs.filter((_, i) => wanted[i]);
    const got = some.length > 0 ? model.logitsOf(some) : [];
    let at = 0;
    return { reference: undefined, logits: seqs.map((_, i) => (wanted[i] ? got[at++] : [])) };
  }
  const reference = withF32Weights(model);
  return {
    reference,
    logits: seqs.map((s, i) => (wanted[i] ? evaluateAll(reference, s, { path: "reference" }) : [])),
  };
}

/** /health (at the origin, then under the API base) and /v1/models; undefined when the server cannot be reached. */
async function reachEndpoint(
  call: ReturnType<typeof makeCall>,
  base: string,
  origin: string,
  f: EndpointOptions["findings"],
): Promise<{ health: EndpointReport["health"]; models: string[] | undefined } | undefined> {
  let health: EndpointReport["health"];
  for (const url of [`${origin}/health`, `${base}/health`]) {
    try {
      const r = await call(url);
      health = { url, status: r.status };
      if (r.status === 200) break;
    } catch (e) {
      f.add("endpoint", "error", "unreachable", `cannot reach ${url}: ${(e as Error).message}`);
      return undefined;
    }
  }
  if (health?.status !== 200)
    f.add("endpoint", "warning", "health", `no healthy /health (status ${health?.status}) at ${origin}`, { health });

  let models: string[] | undefined;
  const mr = await tryCall(call, `${base}/models`);
  const data = isRecord(mr.json) && Array.isArray(mr.json.data) ? mr.json.data : undefined;
  models = data?.map((d) => (isRecord(d) && typeof d.id === "string" ? d.id : "?"));
  if (mr.status !== 200 || models === undefined) {
    f.add("endpoint", "warning", "models", `${base}/models answered ${mr.status} without a model list`);
    models = undefined;
  }
  return { health, models };
}

/** Are these log-probabilities at all? Findings for unnormalized, short and flat distributions; true when they are not
 * a model's distributions (nothing for the fault matcher to reproduce). */
function checkDistributions(
  positions: EndpointPosition[],
  rows: readonly (readonly Float64Array[])[],
  want: number,
  nVocab: number,
  f: EndpointOptions["findings"],
): boolean {
  let notDistributions = false;
  if (positions.length > 0) {
    const overfull = positions.filter((p) => p.returnedMass > 1.02);
    notDistributions = overfull.length > 0;
    if (overfull.length > 0)
      f.add(
        "endpoint",
        "error",
        "logprobs-not-normalized",
        `at ${overfull.length} of ${positions.length} positions the returned probabilities sum above 1 (up to ${Math.max(...overfull.map((p) => p.returnedMass)).toFixed(2)}): they are not normalized log-probabilities (raw logits, or a wrong temperature)`,
        { positions: overfull.length },
      );
    // (entries keyed by an ambiguous token text collapse in JSON: no evidence of a short answer)
    const short = positions.filter((p) => p.k < want && p.unmapped === 0);
    if (short.length > 0) {
      const most = short.length * 2 > positions.length;
      f.add(
        "endpoint",
        most ? "error" : "warning",
        "logprobs-incomplete",
        `at ${short.length} of ${positions.length} positions the endpoint returned fewer alternatives than the ${want} asked (as few as ${Math.min(...short.map((p) => p.k))})${most ? ": its distributions cannot be checked, only the actual tokens" : ""}`,
        { positions: short.length, asked: want },
      );
    }
    const flatAt = -Math.log(nVocab) + Math.log(4);
    const flat = positions.filter((p) => p.endpointTopLogprob <= flatAt);
    if (flat.length * 2 > positions.length) {
      notDistributions = true;
      const refTop = flat.map((p) => Math.max(...rows[p.seq][p.pos]));
      f.add(
        "endpoint",
        "error",
        "logprobs-flat",
        `at ${flat.length} of ${positions.length} positions the endpoint's most likely returned token has probability ≤ 4/${nVocab}: its distributions are nearly flat (entropy near log(vocab) = ${Math.log(nVocab).toFixed(2)} nats), where latent's reference puts ${Math.exp(refTop.reduce((a, b) => a + b, 0) / refTop.length).toFixed(3)} (geometric mean) on its top token`,
        { positions: flat.length },
      );
    }
  }

  return notDistributions;
}

interface Judged {
  f: EndpointOptions["findings"];
  positions: EndpointPosition[];
  all: Summary;
  prefill: Summary;
  prefillOk: boolean;
  decodeOk: boolean;
  hasPrompt: boolean;
  notDistributions: boolean;
  stats: string;
  evidence: Record<string, unknown>;
  attempts: { dialect: Dialect; error: string }[];
  dialect: Dialect;
  probes: EndpointProbe[];
  prompts: number[][];
  scored: Scored[];
  /** the reference's side, for the fault matcher (undefined: a streamed reference, no matcher) */
  match: MatchInput | undefined;
}

/** The verdict, with its finding: a match, a broken decode path (and its likely cause), or a mismatch (and its cause). */
function judge(j: Judged): EndpointReport["verdict"] {
  const {
    f,
    positions,
    all,
    prefill,
    prefillOk,
    decodeOk,
    hasPrompt,
    notDistributions,
    stats,
    evidence,
    attempts,
    dialect,
    probes,
    prompts,
    scored,
    match,
  } = j;
  let verdict: EndpointReport["verdict"];
  if (positions.length === 0) {
    verdict = "unknown";
    f.add(
      "endpoint",
      "error",
      "no-logprobs",
      `the ${dialect} replies held no log-probs that could be mapped to token ids: the endpoint cannot be compared with the reference`,
      { attempts },
    );
  } else if (prefillOk && decodeOk) {
    verdict = withinTolerance(all, EXACT) ? "match" : "close";
    f.add(
      "endpoint",
      "info",
      verdict === "match" ? "logprobs-match" : "logprobs-close",
      `the endpoint agrees with latent's reference ${verdict === "match" ? "to float32 precision" : "within the same-GGUF tolerance (bf16/f16-level kernel noise)"}: ${stats}`,
      evidence,
    );
  } else {
    verdict = "mismatch";
    if (prefillOk && prefill.n > 0) {
      const causes = match === undefined ? [] : matchDecodeFaults(match, (s) => prompts[s].length);
      f.add(
        "endpoint",
        "error",
        "decode-path-broken",
        `the server's decode path is broken, its prefill path is not: ${hasPrompt ? "the prompt positions agree with latent's reference, the generated tokens do not" : "the first generated token of each probe (from the prefill) agrees with latent's reference, the tokens generated after it do not"} — ${stats}.${causes.length > 0 ? ` Likely cause: ${causes.join("; ")}` : " Check the decode attention kernel (absorbed MLA: W_UK/W_UV, the latent cache, its output buffer)"}`,
        { ...evidence, causes },
      );
    } else {
      const focus = prefill.n > 0 ? scored.filter((s) => (hasPrompt ? s.group === "prompt" : s.step === 0)) : scored;
      // flat or unnormalized log-probs are no model's distribution: nothing for the matcher to reproduce
      const m =
        notDistributions || match === undefined
          ? { causes: [], tried: 0, outOfBudget: false, fittedScale: undefined }
          : matchFaults({ ...match, scored: focus });
      const worst = positions.reduce((a, b) => (b.kl > a.kl ? b : a), positions[0]);
      const noMatch =
        match === undefined
          ? "The known-fault matcher needs the model in memory (not run with --low-memory): check the deployment's model files, dtype (fp16 overflow?), MLA backend and name mapping"
          : `No known fault reproduces it${m.outOfBudget ? ` (the matcher stopped after ${m.tried} candidates)` : ""}: check the deployment's model files, dtype (fp16 overflow?), MLA backend and name mapping`;
      f.add(
        "endpoint",
        "error",
        "logprobs-mismatch",
        `the endpoint's log-probs disagree with latent's reference on the same GGUF beyond the same-weights tolerance (mean KL ≤ ${TOLERANCE.meanKL}, mean |Δ logprob| ≤ ${TOLERANCE.meanGap}): ${stats}; worst at position ${worst.pos} of the ${probes[worst.seq]?.label ?? ""} probe (KL ${worst.kl.toExponential(2)}). ${m.causes.length > 0 ? `Likely cause: ${m.causes.join("; ")}` : noMatch}`,
        { ...evidence, causes: m.causes, worst, fittedScale: m.fittedScale, matcherTried: m.tried },
      );
    }
  }
  return verdict;
}
