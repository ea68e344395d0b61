import type { Tokenizer } from "../tokenizer/index.js";
import type { PromptLogprob, TokenOut } from "../engine/scheduler.js";

// Log-probabilities in the shapes clients expect: vLLM's prompt_logprobs, OpenAI's legacy completion object and chat's.

/** vLLM's prompt_logprobs: per prompt position null or {"<id>": {logprob, rank, decoded_token}} (the token and the top-k). */
export function vllmPromptLogprobs(
  tok: Tokenizer,
  lp: readonly (PromptLogprob | null)[],
): (Record<string, { logprob: number; rank: number; decoded_token: string }> | null)[] {
  return lp.map((e) => {
    if (e === null) return null;
    const out: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
    out[String(e.token)] = { logprob: e.logprob, rank: e.rank, decoded_token: tok.decode([e.token]) };
    e.top.forEach(([id, l], i) => {
      if (!(String(id) in out)) out[String(id)] = { logprob: l, rank: i + 1, decoded_token: tok.decode([id]) };
    });
    return out;
  });
}

export interface LegacyLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

/** OpenAI legacy completion logprobs for a run of tokens starting at text offset `offset`. */
export function legacyLogprobs(
  tok: Tokenizer,
  entries: readonly { id: number; logprob: number | null; top: readonly (readonly [number, number])[] | null }[],
  offset: number,
): LegacyLogprobs {
  const out: LegacyLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = offset;
  for (const e of entries) {
    const s = tok.decode([e.id]);
    out.tokens.push(s);
    out.token_logprobs.push(e.logprob);
    out.top_logprobs.push(e.top === null ? null : Object.fromEntries(e.top.map(([id, l]) => [tok.decode([id]), l])));
    out.text_offset.push(at);
    at += tok.decode([e.id], { skipSpecial: true }).length; // control tokens are not in the text
  }
  return out;
}

export function promptEntries(
  c: { readonly prompt: readonly number[]; readonly promptLp?: readonly (PromptLogprob | null)[] },
  k: number,
): { id: number; logprob: number | null; top: [number, number][] | null }[] {
  return c.prompt.map((id, i) => {
    const e = c.promptLp?.[i];
    return e === undefined || e === null
      ? { id, logprob: null, top: null }
      : { id, logprob: e.logprob, top: e.top.slice(0, k) };
  });
}

export function genEntries(tokens: readonly TokenOut[]): { id: number; logprob: number; top: [number, number][] }[] {
  return tokens.map((t) => ({ id: t.id, logprob: t.logprob, top: t.top ?? [] }));
}

interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export function chatLogprob(tok: Tokenizer, t: TokenOut, k: number): ChatLogprob {
  const one = (id: number): { token: string; bytes: number[] } => ({
    token: tok.decode([id]),
    bytes: [...tok.tokenBytes(id)],
  });
  return {
    ...one(t.id),
    logprob: t.logprob,
    top_logprobs: (t.top ?? []).slice(0, k).map(([id, l]) => ({ ...one(id), logprob: l })),
  };
}
