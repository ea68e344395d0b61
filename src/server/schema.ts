import { ApiError, badParam, shownValue } from "./http.js";
import type { ChatMessage } from "../tokenizer/index.js";

/** Most alternatives per position for logprobs / top_logprobs / prompt_logprobs. */
export const MAX_LOGPROBS = 20;
export const MAX_N = 16;
export const MAX_STOPS = 16;
/** Most entries of logit_bias: each is applied to every sampled row of the request, so the work per row stays bounded. */
export const MAX_LOGIT_BIAS = 1024;

type Body = Record<string, unknown>;

const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

function present(body: Body, key: string): boolean {
  return body[key] !== undefined && body[key] !== null;
}

export function optNumber(body: Body, key: string, check?: (v: number) => boolean, range?: string): number | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  if (typeof v !== "number" || !Number.isFinite(v))
    throw badParam(key, `'${key}' must be a number, got ${typeName(v)}`);
  if (check !== undefined && !check(v)) throw badParam(key, `'${key}' must be ${range}, got ${v}`);
  return v;
}

export function optInt(body: Body, key: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  if (typeof v !== "number" || !Number.isSafeInteger(v))
    throw badParam(key, `'${key}' must be an integer, got ${typeName(v) === "number" ? String(v) : typeName(v)}`);
  if (v < min || v > max)
    throw badParam(
      key,
      `'${key}' must be ${max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `between ${min} and ${max}`}, got ${v}`,
    );
  return v;
}

export function optBool(body: Body, key: string): boolean | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  if (typeof v !== "boolean") throw badParam(key, `'${key}' must be a boolean, got ${typeName(v)}`);
  return v;
}

export function optString(body: Body, key: string): string | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  if (typeof v !== "string") throw badParam(key, `'${key}' must be a string, got ${typeName(v)}`);
  return v;
}

/** The `model` field: required string. */
export function modelField(body: Body): string {
  const m = body["model"];
  if (m === undefined || m === null) throw badParam("model", "'model' is required");
  if (typeof m !== "string") throw badParam("model", `'model' must be a string, got ${typeName(m)}`);
  return m;
}

export interface SamplingFields {
  readonly maxTokens: number | undefined;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
  readonly minP: number;
  readonly seed: number | undefined;
  readonly stop: string[];
  readonly n: number;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly ignoreEos: boolean;
  /** token id → bias (-100 bans) */
  readonly logitBias: ReadonlyMap<number, number>;
  readonly presencePenalty: number;
  readonly frequencyPenalty: number;
  readonly repetitionPenalty: number;
}

/** Fields completions and chat share. */
export function samplingFields(body: Body, maxTokensKeys: readonly string[], nVocab: number): SamplingFields {
  let maxTokens: number | undefined;
  let maxTokensKey = "";
  for (const k of maxTokensKeys) {
    const v = optInt(body, k, 0);
    if (v === undefined) continue;
    // max_completion_tokens is chat's new name of max_tokens: both may be sent, but must agree
    if (maxTokens !== undefined && v !== maxTokens)
      throw badParam(k, `'${k}' (${v}) and '${maxTokensKey}' (${maxTokens}) differ; send one`);
    maxTokens = v;
    maxTokensKey = k;
  }
  const stopV = body["stop"];
  let stop: string[] = [];
  if (typeof stopV === "string") stop = [stopV];
  else if (Array.isArray(stopV)) {
    if (stopV.length > MAX_STOPS)
      throw badParam("stop", `'stop' may hold at most ${MAX_STOPS} strings, got ${stopV.length}`);
    stop = stopV.map((s, i) => {
      if (typeof s !== "string") throw badParam("stop", `'stop[${i}]' must be a string, got ${typeName(s)}`);
      return s;
    });
  } else if (stopV !== undefined && stopV !== null)
    throw badParam("stop", `'stop' must be a string or an array of strings, got ${typeName(stopV)}`);
  const streamOptions = body["stream_options"];
  let includeUsage = false;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (typeof streamOptions !== "object" || Array.isArray(streamOptions))
      throw badParam("stream_options", `'stream_options' must be an object, got ${typeName(streamOptions)}`);
    includeUsage = optBool(streamOptions as Body, "include_usage") ?? false;
    for (const k of Object.keys(streamOptions)) {
      // include_obfuscation pads OpenAI's chunks against length side channels; nothing here pads, so false is the truth
      if (k !== "include_usage" && k !== "include_obfuscation")
        throw badParam(
          "stream_options",
          `'stream_options.${k}' is not supported by this server`,
          "unsupported_parameter",
        );
    }
    if (!(optBool(body, "stream") ?? false))
      throw badParam("stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
  const presencePenalty = optNumber(body, "presence_penalty", (x) => x >= -2 && x <= 2, "between -2 and 2") ?? 0;
  const frequencyPenalty = optNumber(body, "frequency_penalty", (x) => x >= -2 && x <= 2, "between -2 and 2") ?? 0;
  const repetitionPenalty = optNumber(body, "repetition_penalty", (x) => x > 0, "> 0") ?? 1;
  const logitBias = logitBiasField(body, nVocab);
  const topK = optInt(body, "top_k", -1) ?? 0;
  return {
    maxTokens,
    temperature: optNumber(body, "temperature", (x) => x >= 0 && x <= 2, "between 0 and 2") ?? 1,
    topP: optNumber(body, "top_p", (x) => x > 0 && x <= 1, "in (0, 1]") ?? 1,
    topK: Math.max(topK, 0),
    minP: optNumber(body, "min_p", (x) => x >= 0 && x < 1, "in [0, 1)") ?? 0,
    seed: optInt(body, "seed", Number.MIN_SAFE_INTEGER),
    stop,
    n: optInt(body, "n", 1, MAX_N) ?? 1,
    stream: optBool(body, "stream") ?? false,
    includeUsage,
    ignoreEos: optBool(body, "ignore_eos") ?? false,
    logitBias,
    presencePenalty,
    frequencyPenalty,
    repetitionPenalty,
  };
}

/** `logit_bias`: {"<token id>": bias in [-100, 100]}, at most MAX_LOGIT_BIAS entries, ids in the vocabulary. */
function logitBiasField(body: Body, nVocab: number): Map<number, number> {
  const bias = new Map<number, number>();
  const v = body["logit_bias"];
  if (v === undefined || v === null) return bias;
  if (typeof v !== "object" || Array.isArray(v))
    throw badParam("logit_bias", `'logit_bias' must be an object mapping token ids to biases, got ${typeName(v)}`);
  const entries = Object.entries(v as Body);
  if (entries.length > MAX_LOGIT_BIAS)
    throw badParam("logit_bias", `'logit_bias' may hold at most ${MAX_LOGIT_BIAS} tokens, got ${entries.length}`);
  for (const [key, b] of entries) {
    const id = /^(0|[1-9][0-9]*)$/.test(key) ? Number(key) : NaN;
    if (!(Number.isSafeInteger(id) && id < nVocab))
      throw badParam("logit_bias", `'logit_bias' key ${shownValue(key)} is not a token id (0..${nVocab - 1})`);
    if (typeof b !== "number" || !Number.isFinite(b) || b < -100 || b > 100)
      throw badParam("logit_bias", `'logit_bias[${key}]' must be a number between -100 and 100, got ${shownValue(b)}`);
    bias.set(id, b);
  }
  return bias;
}

/** A completion prompt: one or more texts or token-id lists. */
export type PromptInput = { readonly text: string } | { readonly ids: number[] };

export function promptField(body: Body): PromptInput[] {
  const p = body["prompt"];
  const isIds = (a: unknown[]): boolean => a.length > 0 && a.every((x) => typeof x === "number");
  const ids = (a: unknown[], where: string): number[] =>
    a.map((x, i) => {
      if (typeof x !== "number" || !Number.isSafeInteger(x) || x < 0)
        throw badParam("prompt", `'${where}[${i}]' must be a token id (an integer ≥ 0), got ${shownValue(x)}`);
      return x;
    });
  if (p === undefined || p === null) throw badParam("prompt", "'prompt' is required");
  if (typeof p === "string") return [{ text: p }];
  if (!Array.isArray(p))
    throw badParam(
      "prompt",
      `'prompt' must be a string, an array of strings, an array of token ids or an array of token-id arrays, got ${typeName(p)}`,
    );
  if (p.length === 0) throw badParam("prompt", "'prompt' is empty");
  if (isIds(p)) return [{ ids: ids(p, "prompt") }];
  if (p.length > MAX_N) throw badParam("prompt", `'prompt' may hold at most ${MAX_N} prompts, got ${p.length}`);
  return p.map((x, i) => {
    if (typeof x === "string") return { text: x };
    if (Array.isArray(x)) {
      if (x.length === 0) throw badParam("prompt", `'prompt[${i}]' is empty`);
      return { ids: ids(x, `prompt[${i}]`) };
    }
    throw badParam("prompt", `'prompt[${i}]' must be a string or an array of token ids, got ${typeName(x)}`);
  });
}

/** Roles a chat template can place; another would be dropped by most templates without a word. */
export const CHAT_ROLES: ReadonlySet<string> = new Set([
  "system",
  "developer",
  "user",
  "assistant",
  "tool",
  "function",
]);

/** Chat messages, with content parts of type "text" joined into a string. */
export function messagesField(body: Body): ChatMessage[] {
  const m = body["messages"];
  if (m === undefined || m === null) throw badParam("messages", "'messages' is required");
  if (!Array.isArray(m)) throw badParam("messages", `'messages' must be an array, got ${typeName(m)}`);
  if (m.length === 0) throw badParam("messages", "'messages' is empty");
  return m.map((msg, i) => {
    if (typeof msg !== "object" || msg === null || Array.isArray(msg))
      throw badParam("messages", `'messages[${i}]' must be an object, got ${typeName(msg)}`);
    const o = msg as Body;
    const role = o["role"];
    if (typeof role !== "string" || role === "")
      throw badParam("messages", `'messages[${i}].role' must be a non-empty string`);
    if (!CHAT_ROLES.has(role))
      throw badParam(
        "messages",
        `'messages[${i}].role' is ${shownValue(role)}, not one of ${[...CHAT_ROLES].join(", ")}`,
        "invalid_role",
      );
    const c = o["content"];
    let content: string | null;
    if (c === undefined || c === null) content = null;
    else if (typeof c === "string") content = c;
    else if (Array.isArray(c)) {
      content = c
        .map((part, j) => {
          if (typeof part !== "object" || part === null)
            throw badParam("messages", `'messages[${i}].content[${j}]' must be an object`);
          const pt = part as Body;
          if (pt["type"] !== "text" || typeof pt["text"] !== "string")
            throw badParam("messages", `'messages[${i}].content[${j}]': only parts of type "text" are supported`);
          return pt["text"];
        })
        .join("");
    } else
      throw badParam(
        "messages",
        `'messages[${i}].content' must be a string, an array of text parts or null, got ${typeName(c)}`,
      );
    return { ...o, role, content };
  });
}

export function requireNoSuffix(body: Body): void {
  if (present(body, "suffix")) throw badParam("suffix", "'suffix' is not supported by this server");
  const bestOf = optInt(body, "best_of", 1);
  const n = typeof body["n"] === "number" ? body["n"] : 1;
  if (bestOf !== undefined && bestOf !== n && bestOf !== 1)
    throw badParam("best_of", "'best_of' is not supported by this server (only 1 or n)");
}

export { ApiError };
