/**
 * Endpoint checks of `latent doctor --endpoint`: /health, /v1/models, tokenization parity via /tokenize, and a
 * teacher-forced comparison of the endpoint's log-probs with latent's reference on the same GGUF —
 * vLLM-style `prompt_logprobs`, else OpenAI completions `echo` + `logprobs`, else greedy generation + top logprobs.
 * Per position: KL on the endpoint's top-k (both distributions renormalized over that set), top-1 agreement and the
 * log-prob of the actual next token. A mismatch is tested against an off-by-one alignment and known faults.
 */
import type { DeepSeek2 } from "../model/deepseek2.js";
import { evaluateAll, logSoftmaxRow } from "../engine/evaluate.js";
import { withFaults } from "../model/faults.js";
import type { Tokenizer } from "../tokenizer/index.js";
import { candidateFaults } from "./paths.js";
import type { Findings } from "./report.js";

export type LogprobMode = "prompt_logprobs" | "echo" | "greedy" | "none";

/** One position the endpoint scored: the context is tokens[0..pos], `next` the token that follows. */
export interface EndpointPosition {
  readonly pos: number;
  readonly next: number | undefined;
  readonly kl: number;
  readonly top1Match: boolean;
  readonly refLogprob: number | undefined;
  readonly endpointLogprob: number | undefined;
  readonly k: number;
}

export interface EndpointReport {
  readonly base: string;
  readonly reachable: boolean;
  readonly health: { readonly url: string; readonly status: number } | undefined;
  readonly models: readonly string[] | undefined;
  readonly servedModel: string | undefined;
  readonly tokenization: { readonly checked: number; readonly mismatches: number } | undefined;
  readonly mode: LogprobMode;
  readonly tokens: readonly number[];
  readonly positions: readonly EndpointPosition[];
  readonly meanKL: number;
  readonly maxKL: number;
  readonly top1Agreement: number;
  readonly meanAbsLogprobDiff: number;
  readonly verdict: "match" | "close" | "mismatch" | "unknown";
}

export interface EndpointOptions {
  readonly base: string;
  readonly apiKey?: string | undefined;
  readonly model: DeepSeek2;
  readonly tokenizer: Tokenizer | undefined;
  readonly findings: Findings;
  readonly fetch?: typeof fetch | undefined;
  /** prompt token ids (default: a probe text, or fixed ids without a tokenizer) */
  readonly tokens?: readonly number[];
  /** top-k log-probs to ask for (default 5) */
  readonly topK?: number;
  readonly servedModel?: string;
}

/** Endpoint log-probs at one position: id → logprob (its top-k, plus the actual token when given). */
type Scored = { pos: number; top: Map<number, number>; next: number | undefined; nextLogprob: number | undefined };

const PROBE = "The quick brown fox jumps over the lazy dog. One, two, three, four, five, six, seven.";

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function num(x: unknown): number | undefined {
  return typeof x === "number" ? x : undefined;
}

/** "token_id:123" (vLLM return_tokens_as_token_ids), a plain id key (vLLM prompt_logprobs dicts), else a token text. */
function tokenKey(key: string, byText: (t: string) => number | undefined, numericIds: boolean): number | undefined {
  const m = /^token_id:(\d+)$/.exec(key);
  if (m) return Number(m[1]);
  if (numericIds && /^\d+$/.test(key)) return Number(key);
  return byText(key);
}

export async function checkEndpoint(o: EndpointOptions): Promise<EndpointReport> {
  const f = o.findings;
  const doFetch = o.fetch ?? fetch;
  let base = o.base.replace(/\/+$/, "");
  if (!/\/v\d+$/.test(new URL(base).pathname)) base += "/v1";
  const origin = new URL(base).origin;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (o.apiKey !== undefined) headers.authorization = `Bearer ${o.apiKey}`;
  const call = async (url: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
    const r = await doFetch(url, { method: body === undefined ? "GET" : "POST", headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}), signal: AbortSignal.timeout(120_000) });
    const text = await r.text();
    let json: unknown;
    try {
      json = text.length > 0 ? JSON.parse(text) : undefined;
    } catch {
      json = text;
    }
    return { status: r.status, json };
  };
  const empty = { base, health: undefined, models: undefined, servedModel: undefined, tokenization: undefined, mode: "none" as const, tokens: [], positions: [], meanKL: NaN, maxKL: NaN, top1Agreement: NaN, meanAbsLogprobDiff: NaN, verdict: "unknown" as const };

  // Health.
  let health: EndpointReport["health"];
  for (const url of [`${origin}/health`, `${base}/health`]) {
    try {
      const r = await call(url);
      health = { url, status: r.status };
      if (r.status === 200) break;
    } catch (e) {
      f.add("endpoint", "error", "unreachable", `cannot reach ${url}: ${(e as Error).message}`);
      return { ...empty, reachable: false };
    }
  }
  if (health?.status !== 200) f.add("endpoint", "warning", "health", `no healthy /health (status ${health?.status}) at ${origin}`, { health });

  // Models.
  let models: string[] | undefined;
  try {
    const r = await call(`${base}/models`);
    const data = isRecord(r.json) && Array.isArray(r.json.data) ? r.json.data : undefined;
    models = data?.map((d) => (isRecord(d) && typeof d.id === "string" ? d.id : "?"));
    if (r.status !== 200 || models === undefined) f.add("endpoint", "warning", "models", `${base}/models answered ${r.status} without a model list`);
  } catch (e) {
    f.add("endpoint", "warning", "models", `${base}/models failed: ${(e as Error).message}`);
  }
  const servedModel = o.servedModel ?? models?.[0];

  const c = o.model.config;
  const tok = o.tokenizer;
  // Tokenization parity.
  let tokenization: EndpointReport["tokenization"];
  if (tok !== undefined) {
    const texts = [PROBE, "Hello, world! 123 + 456 = 579", "  leading spaces\nand a newline"];
    let checked = 0;
    let mismatches = 0;
    for (const text of texts) {
      let got: number[] | undefined;
      for (const body of [{ model: servedModel, prompt: text }, { content: text, add_special: true }]) {
        try {
          const r = await call(`${origin}/tokenize`, body);
          const t = isRecord(r.json) && Array.isArray(r.json.tokens) ? r.json.tokens : undefined;
          if (r.status === 200 && t !== undefined) {
            got = t.map((x) => (typeof x === "number" ? x : isRecord(x) && typeof x.id === "number" ? x.id : -1));
            break;
          }
        } catch {
          got = undefined;
        }
      }
      if (got === undefined) break;
      checked++;
      const want = tok.encode(text);
      const same = got.length === want.length && got.every((x, i) => x === want[i]);
      if (!same) {
        mismatches++;
        const i = got.findIndex((x, j) => x !== want[j]);
        const bos = tok.bosId;
        const hint = got[0] === bos && want[0] !== bos ? " (the endpoint adds BOS, latent's tokenizer config does not)" : want[0] === bos && got[0] !== bos ? " (the endpoint omits the BOS that tokenizer.ggml.add_bos_token asks for)" : got[0] === bos && got[1] === bos ? " (BOS twice)" : "";
        f.add("endpoint", "error", "tokenization", `the endpoint tokenizes ${JSON.stringify(text.slice(0, 30))} differently${hint}: first difference at index ${i === -1 ? Math.min(got.length, want.length) : i} (endpoint ${JSON.stringify(got.slice(0, 12))}, latent ${JSON.stringify(want.slice(0, 12))})`, { text, endpoint: got, latent: want });
      }
    }
    tokenization = { checked, mismatches };
    if (checked === 0) f.add("endpoint", "info", "tokenize-unavailable", "the endpoint has no /tokenize: tokenization parity not checked (prompts are sent as token ids)");
  }

  // Teacher-forced log-probs.
  const K = o.topK ?? 5;
  const tokens = [...(o.tokens ?? (tok !== undefined ? tok.encode(PROBE).filter((x) => x < c.nVocab) : Array.from({ length: 16 }, (_, i) => (i * 37 + 11) % c.nVocab)))];
  const byTextMap = new Map<string, number>();
  const byText = (t: string): number | undefined => {
    if (tok === undefined) return undefined;
    // Texts that several ids decode to (byte pieces, duplicates) are ambiguous: left out rather than guessed.
    if (byTextMap.size === 0) for (let id = 0; id < c.nVocab; id++) {
      const text = tok.decode([id]);
      byTextMap.set(text, byTextMap.has(text) ? -1 : id);
    }
    const id = byTextMap.get(t);
    return id === undefined || id < 0 ? undefined : id;
  };
  const topMap = (x: unknown, numericIds = false): Map<number, number> => {
    const m = new Map<number, number>();
    if (isRecord(x)) {
      for (const [key, v] of Object.entries(x)) {
        const id = tokenKey(key, byText, numericIds);
        const lp = isRecord(v) ? num(v.logprob) : num(v);
        if (id !== undefined && lp !== undefined) m.set(id, lp);
      }
    } else if (Array.isArray(x)) {
      for (const e of x) if (isRecord(e)) {
        const id = typeof e.token_id === "number" ? e.token_id : typeof e.token === "string" ? tokenKey(e.token, byText, false) : undefined;
        const lp = num(e.logprob);
        if (id !== undefined && lp !== undefined) m.set(id, lp);
      }
    }
    return m;
  };
  const completion = async (extra: Record<string, unknown>): Promise<Record<string, unknown> | undefined> => {
    try {
      const r = await call(`${base}/completions`, { model: servedModel, prompt: tokens, temperature: 0, ...extra });
      if (r.status !== 200 || !isRecord(r.json) || !Array.isArray(r.json.choices) || !isRecord(r.json.choices[0])) return undefined;
      return r.json.choices[0];
    } catch {
      return undefined;
    }
  };

  let mode: LogprobMode = "none";
  let scored: Scored[] = [];
  let seq = tokens;
  const vllm = await completion({ max_tokens: 1, prompt_logprobs: K, logprobs: K, return_tokens_as_token_ids: true });
  if (vllm !== undefined && Array.isArray(vllm.prompt_logprobs)) {
    mode = "prompt_logprobs";
    // entry i scores token i given tokens[0..i-1]: our position i−1.
    vllm.prompt_logprobs.forEach((e, i) => {
      if (i === 0 || e === null) return;
      const top = topMap(e, true);
      const next = tokens[i];
      scored.push({ pos: i - 1, top, next, nextLogprob: next !== undefined ? top.get(next) : undefined });
    });
  } else {
    const echo = await completion({ max_tokens: 0, echo: true, logprobs: K, return_tokens_as_token_ids: true });
    const lp = echo !== undefined && isRecord(echo.logprobs) ? echo.logprobs : undefined;
    if (lp !== undefined && Array.isArray(lp.top_logprobs) && lp.top_logprobs.length >= tokens.length) {
      mode = "echo";
      lp.top_logprobs.slice(0, tokens.length).forEach((e, i) => {
        if (i === 0 || e === null) return;
        const top = topMap(e);
        const next = tokens[i];
        const given = Array.isArray(lp.token_logprobs) ? num(lp.token_logprobs[i]) : undefined;
        if (next !== undefined && given !== undefined) top.set(next, given);
        scored.push({ pos: i - 1, top, next, nextLogprob: given });
      });
    } else {
      const n = 8;
      const g = await completion({ max_tokens: n, logprobs: K, return_tokens_as_token_ids: true });
      const glp = g !== undefined && isRecord(g.logprobs) ? g.logprobs : undefined;
      if (glp !== undefined && Array.isArray(glp.top_logprobs) && Array.isArray(glp.tokens)) {
        mode = "greedy";
        const gen = glp.tokens.map((t) => (typeof t === "string" ? tokenKey(t, byText, false) : typeof t === "number" ? t : undefined));
        const known = gen.findIndex((x) => x === undefined);
        const ids = (known === -1 ? gen : gen.slice(0, known)) as number[];
        seq = [...tokens, ...ids];
        scored = glp.top_logprobs.slice(0, ids.length).map((e, j) => {
          const top = topMap(e);
          const given = Array.isArray(glp.token_logprobs) ? num(glp.token_logprobs[j]) : undefined;
          if (given !== undefined) top.set(ids[j]!, given);
          return { pos: tokens.length - 1 + j, top, next: ids[j], nextLogprob: given };
        });
      }
    }
  }
  if (mode === "none" || scored.length === 0) {
    f.add("endpoint", "error", "no-logprobs", `${base}/completions gave no usable log-probs (tried prompt_logprobs, echo + logprobs, greedy + logprobs): the endpoint cannot be compared with the reference`);
    return { ...empty, reachable: true, health, models, servedModel, tokenization, mode };
  }

  const ref = evaluateAll(o.model, seq, { path: "reference" }).map((r) => logSoftmaxRow(r));
  const positions = compare(ref, scored);
  const summary = summarize(positions);
  const verdict: EndpointReport["verdict"] = summary.meanKL <= 1e-3 && summary.top1 >= 0.95 ? "match" : summary.meanKL <= 0.05 && summary.top1 >= 0.8 ? "close" : "mismatch";
  const evidence = { mode, positions: positions.length, meanKL: summary.meanKL, maxKL: summary.maxKL, top1Agreement: summary.top1, meanAbsLogprobDiff: summary.dlp };
  const stats = `mean KL ${summary.meanKL.toExponential(2)} (max ${summary.maxKL.toExponential(2)}) on the top-${K}, top-1 agreement ${(summary.top1 * 100).toFixed(0)}%, mean |Δ logprob| of the actual token ${summary.dlp.toExponential(2)} over ${positions.length} positions (${mode})`;
  if (verdict === "match") f.add("endpoint", "info", "logprobs-match", `the endpoint agrees with latent's reference: ${stats}`, evidence);
  else if (verdict === "close") f.add("endpoint", "warning", "logprobs-close", `the endpoint is close to latent's reference but not equal (quantized activations or kernels?): ${stats}`, evidence);
  else {
    const causes: string[] = [];
    // Are these log-probabilities at all?
    const overfull = scored.filter((s) => [...s.top.values()].reduce((a, v) => a + Math.exp(v), 0) > 1.01).length;
    if (overfull > 0) causes.push(`at ${overfull} position(s) the returned top-${K} probabilities sum above 1: they are not normalized log-probabilities (raw logits, or a wrong temperature)`);
    // Off by one position?
    for (const shift of [-1, 1]) {
      const moved = scored.map((s) => ({ ...s, pos: s.pos + shift })).filter((s) => s.pos >= 0 && s.pos < ref.length);
      const m = summarize(compare(ref, moved));
      if (moved.length > 0 && m.meanKL <= 1e-3 && m.top1 >= 0.95) causes.push(`the log-probs match latent's position ${shift > 0 ? "i+1" : "i−1"} (mean KL ${m.meanKL.toExponential(2)}): the endpoint's positions are off by one (prompt_logprobs alignment)`);
    }
    // Known faults simulated on the reference.
    for (const cand of candidateFaults(o.model, "reference")) {
      let sim: Float64Array[];
      try {
        sim = evaluateAll(withFaults(o.model, cand.faults), seq, { path: "reference" }).map((r) => logSoftmaxRow(r));
      } catch {
        continue;
      }
      const m = summarize(compare(sim, scored));
      if (m.meanKL <= 1e-4 && m.top1 >= 0.95) causes.push(`the log-probs match latent with a simulated fault — ${cand.label} (mean KL ${m.meanKL.toExponential(2)})`);
    }
    const worst = positions.reduce((a, b) => (b.kl > a.kl ? b : a), positions[0]!);
    f.add("endpoint", "error", "logprobs-mismatch", `the endpoint's log-probs disagree with latent's reference on the same GGUF: ${stats}; worst at position ${worst.pos} (KL ${worst.kl.toExponential(2)}). ${causes.length > 0 ? `Likely cause: ${causes.join("; ")}` : "No known fault reproduces it: check the deployment's model files, dtype (fp16 overflow?), MLA backend and name mapping"}`, { ...evidence, causes, worst });
  }
  return { base, reachable: true, health, models, servedModel, tokenization, mode, tokens: seq, positions, meanKL: summary.meanKL, maxKL: summary.maxKL, top1Agreement: summary.top1, meanAbsLogprobDiff: summary.dlp, verdict };
}

function compare(ref: readonly Float64Array[], scored: readonly Scored[]): EndpointPosition[] {
  const out: EndpointPosition[] = [];
  for (const s of scored) {
    const lp = ref[s.pos];
    if (lp === undefined || s.top.size === 0) continue;
    const ids = [...s.top.keys()];
    let zp = 0;
    let zq = 0;
    for (const id of ids) {
      zp += Math.exp(lp[id]!);
      zq += Math.exp(s.top.get(id)!);
    }
    let kl = 0;
    for (const id of ids) {
      const p = Math.exp(lp[id]!) / zp;
      const q = Math.exp(s.top.get(id)!) / zq;
      if (p > 0) kl += p * Math.log(p / Math.max(q, 1e-300));
    }
    // top-1 within the ids the endpoint returned (ambiguous token texts may have been left out)
    let refTop = ids[0]!;
    for (const id of ids) if (lp[id]! > lp[refTop]!) refTop = id;
    let epTop = ids[0]!;
    for (const id of ids) if (s.top.get(id)! > s.top.get(epTop)!) epTop = id;
    out.push({ pos: s.pos, next: s.next, kl: Number.isFinite(kl) ? Math.max(0, kl) : Infinity, top1Match: refTop === epTop, refLogprob: s.next !== undefined ? lp[s.next] : undefined, endpointLogprob: s.nextLogprob, k: ids.length });
  }
  return out;
}

function summarize(p: readonly EndpointPosition[]): { meanKL: number; maxKL: number; top1: number; dlp: number } {
  if (p.length === 0) return { meanKL: NaN, maxKL: NaN, top1: NaN, dlp: NaN };
  const d = p.filter((x) => x.refLogprob !== undefined && x.endpointLogprob !== undefined).map((x) => Math.abs(x.refLogprob! - x.endpointLogprob!));
  return {
    meanKL: p.reduce((a, x) => a + x.kl, 0) / p.length,
    maxKL: Math.max(...p.map((x) => x.kl)),
    top1: p.filter((x) => x.top1Match).length / p.length,
    dlp: d.length > 0 ? d.reduce((a, b) => a + b, 0) / d.length : NaN,
  };
}
