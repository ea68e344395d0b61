/**
 * The log-prob dialects the doctor speaks, each one request per probe that returns prompt and/or generated
 * log-probs with top alternatives:
 *   vllm         POST /v1/completions {prompt_logprobs, logprobs, return_tokens_as_token_ids}: choices[0].prompt_logprobs
 *                [null | {"<id>": {logprob, rank, decoded_token}}] + choices[0].logprobs for the generated tokens
 *   sglang       POST /generate {input_ids|text, sampling_params, return_logprob, logprob_start_len: 0, top_logprobs_num,
 *                return_text_in_logprobs}: meta_info.input_token_logprobs / input_top_logprobs / output_token_logprobs /
 *                output_top_logprobs as [logprob, token_id, text] tuples
 *   echo         POST /v1/completions {echo: true, logprobs}: OpenAI legacy logprobs {tokens, token_logprobs,
 *                top_logprobs} over prompt + generated tokens (vLLM, SGLang's OpenAI route, latent)
 *   llama-server POST /completion {n_predict, n_probs}: completion_probabilities [{id, token, logprob, bytes,
 *                top_logprobs: [{id, token, logprob, bytes}]}] — generated tokens only (llama-server has no echo)
 *   openai       POST /v1/completions {logprobs}: generated tokens only, legacy shape or llama-server's
 *                logprobs.content [{id, token, logprob, bytes, top_logprobs}]
 */
import { isRecord, num, describe, tryCall, type Call, type Reply } from "./http.js";

export type Dialect = "vllm" | "sglang" | "echo" | "llama-server" | "openai";
export const DIALECTS: readonly Dialect[] = ["vllm", "sglang", "echo", "llama-server", "openai"];

/** Scores of one position as the endpoint returned them. */
export interface Entry {
  readonly top: Map<number, number>;
  /** alternatives returned, mapped to ids or not */
  readonly returned: number;
  /** alternatives whose token text could not be mapped to one id (entries keyed by an ambiguous text also collapse) */
  readonly unmapped: number;
  readonly actual: number | undefined;
  readonly actualLogprob: number | undefined;
}

export interface ProbeReply {
  /** prompt entries: index i scores prompt token i given tokens[0..i−1] (index 0 is undefined); undefined if not given */
  readonly prompt: readonly (Entry | undefined)[] | undefined;
  /** generated ids (cut at the first one that cannot be mapped to an id) and the entry each was drawn from */
  readonly generated: readonly number[];
  readonly genEntries: readonly Entry[];
  /** generated tokens left out from the first whose text maps to no single id */
  readonly unmappedGenerated: number;
  /** the prompt tokens as the server reports it used them (echo, input logprobs), when it says */
  readonly promptTokens: readonly number[] | undefined;
  /** the prompt's token count as the server reports it (usage.prompt_tokens, meta_info.prompt_tokens, tokens_evaluated) */
  readonly promptCount: number | undefined;
}

export interface DialectContext {
  readonly call: Call;
  /** …/v1 */
  readonly base: string;
  readonly origin: string;
  readonly servedModel: string | undefined;
  readonly topK: number;
  readonly maxTokens: number;
  /** token text → id (undefined when unknown or ambiguous) */
  readonly byText: (text: string) => number | undefined;
}

/** "token_id:123" (vLLM return_tokens_as_token_ids), a numeric key (vLLM prompt_logprobs), else a token text. */
function idOf(key: string, ctx: DialectContext, numericKeys: boolean): number | undefined {
  const m = /^token_id:(\d+)$/.exec(key);
  if (m) return Number(m[1]);
  if (numericKeys && /^\d+$/.test(key)) return Number(key);
  return ctx.byText(key);
}

/** Alternatives in any of the shapes: {key: logprob | {logprob}}, [{id|token_id, token, logprob}], [[logprob, id, text]]. */
function alternatives(
  x: unknown,
  ctx: DialectContext,
  numericKeys: boolean,
): { top: Map<number, number>; returned: number; unmapped: number } {
  const top = new Map<number, number>();
  let returned = 0;
  if (isRecord(x)) {
    for (const [key, v] of Object.entries(x)) {
      returned++;
      const id = idOf(key, ctx, numericKeys);
      const lp = isRecord(v) ? num(v.logprob) : num(v);
      if (id !== undefined && lp !== undefined) top.set(id, lp);
    }
  } else if (Array.isArray(x)) {
    for (const e of x) {
      returned++;
      if (Array.isArray(e)) {
        const lp = num(e[0]);
        const id = num(e[1]);
        if (id !== undefined && lp !== undefined) top.set(id, lp);
      } else if (isRecord(e)) {
        const id =
          num(e.id) ?? num(e.token_id) ?? (typeof e.token === "string" ? idOf(e.token, ctx, false) : undefined);
        const lp = num(e.logprob);
        if (id !== undefined && lp !== undefined) top.set(id, lp);
      }
    }
  }
  return { top, returned, unmapped: returned - top.size };
}

function tokenId(t: unknown, ctx: DialectContext): number | undefined {
  return typeof t === "number" ? t : typeof t === "string" ? idOf(t, ctx, false) : undefined;
}

/** OpenAI legacy {tokens, token_logprobs, top_logprobs} or llama-server's {content: [...]}, from index `from`. */
function completionLogprobs(
  lp: unknown,
  ctx: DialectContext,
  from = 0,
): { ids: (number | undefined)[]; entries: Entry[] } | undefined {
  if (!isRecord(lp)) return undefined;
  if (Array.isArray(lp.content)) return contentEntries(lp.content.slice(from), ctx);
  if (!Array.isArray(lp.tokens) || !Array.isArray(lp.top_logprobs)) return undefined;
  const ids: (number | undefined)[] = [];
  const entries: Entry[] = [];
  for (let i = from; i < lp.tokens.length; i++) {
    const id = tokenId(lp.tokens[i], ctx);
    const alt = alternatives(lp.top_logprobs[i], ctx, false);
    const given = Array.isArray(lp.token_logprobs) ? num(lp.token_logprobs[i]) : undefined;
    ids.push(id);
    entries.push({ ...alt, actual: id, actualLogprob: given });
  }
  return { ids, entries };
}

function contentEntries(
  content: readonly unknown[],
  ctx: DialectContext,
): { ids: (number | undefined)[]; entries: Entry[] } {
  const ids: (number | undefined)[] = [];
  const entries: Entry[] = [];
  for (const e of content) {
    if (isRecord(e) && Array.isArray(e.probs)) {
      // llama-server before its OpenAI-style logprobs: {content, probs: [{tok_str, prob}]}
      const alt = alternatives(
        Object.fromEntries(
          e.probs.flatMap((p) =>
            isRecord(p) && typeof p.tok_str === "string" && typeof p.prob === "number"
              ? [[p.tok_str, Math.log(p.prob)]]
              : [],
          ),
        ),
        ctx,
        false,
      );
      const id = typeof e.content === "string" ? ctx.byText(e.content) : undefined;
      ids.push(id);
      entries.push({
        ...alt,
        returned: e.probs.length,
        unmapped: e.probs.length - alt.top.size,
        actual: id,
        actualLogprob: id !== undefined ? alt.top.get(id) : undefined,
      });
      continue;
    }
    const id = isRecord(e) ? (num(e.id) ?? tokenId(e.token, ctx)) : undefined;
    const alt = alternatives(isRecord(e) ? e.top_logprobs : undefined, ctx, false);
    ids.push(id);
    entries.push({ ...alt, actual: id, actualLogprob: isRecord(e) ? num(e.logprob) : undefined });
  }
  return { ids, entries };
}

/** Generated ids up to the first unmappable one, with their entries. */
function generatedOf(g: { ids: (number | undefined)[]; entries: Entry[] } | undefined): {
  generated: number[];
  genEntries: Entry[];
  unmappedGenerated: number;
} {
  if (g === undefined) return { generated: [], genEntries: [], unmappedGenerated: 0 };
  const cut = g.ids.indexOf(undefined);
  const n = cut === -1 ? g.ids.length : cut;
  return {
    generated: g.ids.slice(0, n) as number[],
    genEntries: g.entries.slice(0, n),
    unmappedGenerated: g.ids.length - n,
  };
}

function firstChoice(json: unknown): Record<string, unknown> | undefined {
  return isRecord(json) && Array.isArray(json.choices) && isRecord(json.choices[0]) ? json.choices[0] : undefined;
}

function usagePrompt(json: unknown): number | undefined {
  return isRecord(json) && isRecord(json.usage) ? num(json.usage.prompt_tokens) : undefined;
}

export type Prompt = { readonly ids: readonly number[] } | { readonly text: string };

/** POST an OpenAI-route body; a server that rejects vLLM's return_tokens_as_token_ids (400/422) gets it again without. */
async function postCompletion(ctx: DialectContext, body: Record<string, unknown>): Promise<Reply> {
  const r = await tryCall(ctx.call, `${ctx.base}/completions`, body);
  if ((r.status !== 400 && r.status !== 422) || body.return_tokens_as_token_ids === undefined) return r;
  const { return_tokens_as_token_ids: _, ...rest } = body;
  const again = await tryCall(ctx.call, `${ctx.base}/completions`, rest);
  return again.status === 200 ? again : r;
}

/** One probe in one dialect: the parsed reply, or why it is not usable. */
export async function probe(d: Dialect, ctx: DialectContext, prompt: Prompt): Promise<ProbeReply | string> {
  const p = "ids" in prompt ? prompt.ids : prompt.text;
  const n = "ids" in prompt ? prompt.ids.length : undefined;
  const K = ctx.topK;
  const oa = { model: ctx.servedModel, prompt: p, temperature: 0, max_tokens: ctx.maxTokens };
  if (d === "vllm") {
    const r = await postCompletion(ctx, { ...oa, prompt_logprobs: K, logprobs: K, return_tokens_as_token_ids: true });
    const c = firstChoice(r.json);
    if (r.status !== 200 || c === undefined) return describe(r);
    if (!Array.isArray(c.prompt_logprobs)) return "no choices[0].prompt_logprobs";
    const ids = "ids" in prompt ? prompt.ids : undefined;
    const entries = c.prompt_logprobs.map((e, i): Entry | undefined => {
      if (i === 0 || e === null) return undefined;
      const { top, returned, unmapped } = alternatives(e, ctx, true);
      const actual = ids?.[i];
      // vLLM adds the actual token to the top-k: one extra entry when it is not among them
      const extra = actual !== undefined && top.has(actual) && returned > K ? 1 : 0;
      return {
        top,
        returned: returned - extra,
        unmapped,
        actual,
        actualLogprob: actual !== undefined ? top.get(actual) : undefined,
      };
    });
    if (n !== undefined && entries.length !== n)
      return `prompt_logprobs has ${entries.length} entries for ${n} prompt tokens`;
    return {
      prompt: entries,
      ...generatedOf(completionLogprobs(c.logprobs, ctx)),
      promptTokens: undefined,
      promptCount: usagePrompt(r.json) ?? entries.length,
    };
  }
  if (d === "sglang") {
    const r = await tryCall(ctx.call, `${ctx.origin}/generate`, {
      ...("ids" in prompt ? { input_ids: prompt.ids } : { text: prompt.text }),
      sampling_params: { max_new_tokens: ctx.maxTokens, temperature: 0 },
      return_logprob: true,
      logprob_start_len: 0,
      top_logprobs_num: K,
      return_text_in_logprobs: true,
    });
    const o = Array.isArray(r.json) ? r.json[0] : r.json;
    const meta = isRecord(o) && isRecord(o.meta_info) ? o.meta_info : undefined;
    if (r.status !== 200 || meta === undefined) return describe(r);
    const inTok = meta.input_token_logprobs;
    const inTop = meta.input_top_logprobs;
    if (!Array.isArray(inTok) || !Array.isArray(inTop)) return "no meta_info.input_token_logprobs / input_top_logprobs";
    // some versions leave out the first prompt token (it has no log-prob): realign to the prompt
    if (n !== undefined && inTok.length === n - 1 && inTop.length === n - 1) {
      inTok.unshift([null, "ids" in prompt ? prompt.ids[0] : null, null]);
      inTop.unshift(null);
    }
    const promptTokens = inTok.map((t) => (Array.isArray(t) ? num(t[1]) : undefined));
    if (promptTokens.some((t) => t === undefined)) return "input_token_logprobs without token ids";
    const entries = inTok.map((t, i): Entry | undefined => {
      if (i === 0 || !Array.isArray(t)) return undefined;
      return { ...alternatives(inTop[i], ctx, false), actual: num(t[1]), actualLogprob: num(t[0]) };
    });
    if (n !== undefined && entries.length !== n)
      return `input_token_logprobs has ${entries.length} entries for ${n} prompt tokens`;
    const outTok = Array.isArray(meta.output_token_logprobs) ? meta.output_token_logprobs : [];
    const outTop = Array.isArray(meta.output_top_logprobs) ? meta.output_top_logprobs : [];
    const ids = outTok.map((t) => (Array.isArray(t) ? num(t[1]) : undefined));
    const gen = outTok.map(
      (t, i): Entry => ({
        ...alternatives(outTop[i], ctx, false),
        actual: ids[i],
        actualLogprob: Array.isArray(t) ? num(t[0]) : undefined,
      }),
    );
    return {
      prompt: entries,
      ...generatedOf({ ids, entries: gen }),
      promptTokens: promptTokens as number[],
      promptCount: num(meta.prompt_tokens),
    };
  }
  if (d === "echo") {
    const r = await postCompletion(ctx, { ...oa, echo: true, logprobs: K, return_tokens_as_token_ids: true });
    const c = firstChoice(r.json);
    if (r.status !== 200 || c === undefined) return describe(r);
    const lp = c.logprobs;
    if (!isRecord(lp) || !Array.isArray(lp.tokens) || !Array.isArray(lp.top_logprobs))
      return "no echoed logprobs {tokens, top_logprobs}";
    const count = n ?? usagePrompt(r.json);
    if (count === undefined) return "echo without usage.prompt_tokens: the prompt's length is unknown";
    if (lp.tokens.length < count) return `echo returned ${lp.tokens.length} tokens for a ${count}-token prompt`;
    const all = completionLogprobs(lp, ctx)!;
    const entries = all.entries.slice(0, count).map((e, i) => (i === 0 ? undefined : e));
    const promptTokens = all.ids.slice(0, count);
    const rest = { ids: all.ids.slice(count), entries: all.entries.slice(count) };
    return {
      prompt: entries,
      ...generatedOf(rest),
      promptTokens: promptTokens.every((x) => x !== undefined) ? (promptTokens as number[]) : undefined,
      promptCount: usagePrompt(r.json),
    };
  }
  if (d === "llama-server") {
    const r = await tryCall(ctx.call, `${ctx.origin}/completion`, {
      prompt: p,
      n_predict: ctx.maxTokens,
      n_probs: K,
      temperature: 0,
      cache_prompt: false,
    });
    if (r.status !== 200 || !isRecord(r.json)) return describe(r);
    const cp = r.json.completion_probabilities;
    if (!Array.isArray(cp)) return "no completion_probabilities";
    return {
      prompt: undefined,
      ...generatedOf(contentEntries(cp, ctx)),
      promptTokens: undefined,
      promptCount: num(r.json.tokens_evaluated),
    };
  }
  const r = await tryCall(ctx.call, `${ctx.base}/completions`, { ...oa, logprobs: K });
  const c = firstChoice(r.json);
  if (r.status !== 200 || c === undefined) return describe(r);
  const g = completionLogprobs(c.logprobs, ctx);
  if (g === undefined) return "no choices[0].logprobs";
  return { prompt: undefined, ...generatedOf(g), promptTokens: undefined, promptCount: usagePrompt(r.json) };
}
