import { badParam, shownValue, type ApiError } from "./http.js";
import { shownName } from "../util/printable.js";

/**
 * Which request fields the server acts on, which it ignores on purpose, and the rest: a field outside these lists, or
 * one set to a value the server does not implement, gets a 400 naming it — a client must never get a 200 that silently
 * dropped what it asked for (docs/server.md, "Request fields", is the table of this policy).
 */

type Body = Record<string, unknown>;

/** Fields both endpoints implement (sampling, stops, streaming; top_k, min_p, ignore_eos, prompt_logprobs and repetition_penalty are vLLM's). */
const SHARED = [
  "model",
  "max_tokens",
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "n",
  "stream",
  "stream_options",
  "logprobs",
  "prompt_logprobs",
  "ignore_eos",
  "logit_bias",
  "presence_penalty",
  "frequency_penalty",
  "repetition_penalty",
];

const COMPLETION = new Set([...SHARED, "prompt", "echo", "best_of", "suffix"]);
const CHAT = new Set([
  ...SHARED,
  "messages",
  "max_completion_tokens",
  "top_logprobs",
  "response_format",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "functions",
  "function_call",
  "modalities",
  "store",
  "chat_template_kwargs",
]);

/** Fields accepted and not acted on, with why that loses the client nothing. */
export const IGNORED_BY_DESIGN: ReadonlyMap<string, string> = new Map([
  ["user", "an end-user id for the provider's abuse monitoring; nothing here monitors"],
  ["metadata", "tags for stored completions; nothing is stored"],
  ["service_tier", "a billing/latency tier; there is one tier"],
  ["safety_identifier", "an end-user id for abuse monitoring; nothing here monitors"],
  ["prompt_cache_key", "a routing hint for OpenAI's prompt cache; prefix caching here is automatic"],
]);

/** Fields OpenAI defines whose behaviour the server does not have: refused when set. */
const NOT_IMPLEMENTED: ReadonlyMap<string, string> = new Map([
  ["audio", "audio output is not supported"],
  ["prediction", "predicted outputs are not supported"],
  ["reasoning_effort", "reasoning effort cannot be controlled on this model"],
  ["verbosity", "verbosity cannot be controlled on this model"],
  ["web_search_options", "web search is not supported"],
]);

const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

/** 400 for the first field of `body` the endpoint does not implement (absent or null fields are not looked at). */
export function refuseUnsupportedFields(body: Body, kind: "completion" | "chat"): void {
  const known = kind === "chat" ? CHAT : COMPLETION;
  for (const [key, value] of Object.entries(body)) {
    if (value === undefined || value === null) continue;
    if (IGNORED_BY_DESIGN.has(key)) continue;
    const why = NOT_IMPLEMENTED.get(key);
    if (why !== undefined) throw unsupported(key, `'${key}' is not supported by this server: ${why}`);
    if (!known.has(key)) {
      const other = kind === "chat" ? COMPLETION : CHAT;
      throw unsupported(
        shownName(key),
        other.has(key)
          ? `'${key}' is not a field of ${kind === "chat" ? "/v1/chat/completions" : "/v1/completions"}`
          : `unknown field '${shownName(key)}': this server does not implement it`,
      );
    }
  }
  if (kind === "chat") refuseChatValues(body);
}

function refuseChatValues(body: Body): void {
  // response_format's values: response-format.ts, where the JSON schema is compiled
  // tool calls are parsed out of the text the model writes (src/server/tool-calls.ts); nothing constrains it to call
  // one, so "required" and a named function cannot be kept
  const choice = body["tool_choice"];
  if (choice !== undefined && choice !== null && choice !== "none" && choice !== "auto")
    throw unsupported(
      "tool_choice",
      `'tool_choice' ${shownValue(choice)} is not supported by this server (only "auto" and "none"): no constrained decoding forces a call`,
    );
  const tools = body["tools"];
  if (tools !== undefined && tools !== null) {
    if (!Array.isArray(tools)) throw badParam("tools", `'tools' must be an array, got ${typeName(tools)}`);
    tools.forEach((t, i) => {
      const fn = typeof t === "object" && t !== null && !Array.isArray(t) ? (t as Body)["function"] : undefined;
      const name = typeof fn === "object" && fn !== null && !Array.isArray(fn) ? (fn as Body)["name"] : undefined;
      if ((t as Body | null)?.["type"] !== "function" || typeof name !== "string" || name === "")
        throw badParam("tools", `'tools[${i}]' must be {"type": "function", "function": {"name": …}}`);
    });
  }
  const fns = body["functions"];
  if (Array.isArray(fns) ? fns.length > 0 : fns !== undefined && fns !== null)
    throw unsupported("functions", "'functions' is not supported by this server: it does not parse function calls");
  const fnCall = body["function_call"];
  if (fnCall !== undefined && fnCall !== null && fnCall !== "none")
    throw unsupported(
      "function_call",
      `'function_call' ${shownValue(fnCall)} is not supported by this server (only "none")`,
    );
  const modalities = body["modalities"];
  if (
    modalities !== undefined &&
    modalities !== null &&
    !(Array.isArray(modalities) && modalities.every((m) => m === "text"))
  ) {
    throw unsupported(
      "modalities",
      `'modalities' ${shownValue(modalities)} is not supported by this server (only ["text"])`,
    );
  }
  const store = body["store"];
  if (store !== undefined && store !== null && store !== false)
    throw unsupported("store", "'store': true is not supported by this server: completions are not stored");
  const parallel = body["parallel_tool_calls"];
  if (parallel !== undefined && parallel !== null && typeof parallel !== "boolean")
    throw badParam("parallel_tool_calls", `'parallel_tool_calls' must be a boolean, got ${typeName(parallel)}`);
}

function unsupported(param: string, message: string): ApiError {
  return badParam(param, message, "unsupported_parameter");
}
