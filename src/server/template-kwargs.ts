/**
 * `chat_template_kwargs` (vLLM's and llama-server's field): extra variables for the chat template, such as
 * `enable_thinking: false` (GLM-4.5+, Qwen3) or `thinking: true` (DeepSeek-V3.1+). They reach the template renderer
 * as-is (src/tokenizer/chat.ts `variables`), so they are checked here: plain JSON (it crosses to the renderer's worker
 * thread, and a template may iterate it), bounded in size and depth, under names a template can read that do not
 * replace what the server itself sets.
 */
import { badParam, shownValue } from "./http.js";
import { shownName } from "../util/printable.js";

/** Variables the server sets for every render, and the renderer's own globals: a request may not replace them. */
export const RESERVED_TEMPLATE_VARIABLES: ReadonlySet<string> = new Set([
  "messages",
  "tools",
  "add_generation_prompt",
  "bos_token",
  "eos_token",
  // src/tokenizer/chat.ts renderInThread's globals (they win over variables, so a kwarg of that name would be lost)
  "range",
  "raise_exception",
  "strftime_now",
  "true",
  "false",
  "none",
  "True",
  "False",
  "None",
]);

/** Most characters of the kwargs as JSON: template switches are a few bytes; this bounds what a render copies. */
export const MAX_TEMPLATE_KWARGS_CHARS = 64 * 1024;
/** Deepest nesting of objects and arrays (a template never needs more; deep values cost stack in the renderer). */
export const MAX_TEMPLATE_KWARGS_DEPTH = 16;

const PARAM = "chat_template_kwargs";
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

/** The request's template variables (undefined when absent or null); 400 naming the field when they are not usable. */
export function chatTemplateKwargsField(body: Record<string, unknown>): Record<string, unknown> | undefined {
  const v = body[PARAM];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v))
    throw badParam(PARAM, `'${PARAM}' must be an object of template variables, got ${typeName(v)}`);
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(v as Record<string, unknown>)) {
    if (!IDENTIFIER.test(name))
      throw badParam(
        PARAM,
        `'${PARAM}' key ${shownValue(name)} is not a template variable name (letters, digits and _, not starting with a digit)`,
      );
    // "__proto__" and kin: not template variables, and a hazard in every object they are copied into
    if (name.startsWith("__"))
      throw badParam(PARAM, `'${PARAM}' key ${shownValue(name)}: names starting with __ are reserved`);
    if (RESERVED_TEMPLATE_VARIABLES.has(name))
      throw badParam(PARAM, `'${PARAM}.${name}' is set by the server and cannot be given`);
    checkJson(value, `${PARAM}.${name}`, 1);
    Object.defineProperty(out, name, { value, enumerable: true, writable: true, configurable: true });
  }
  const size = JSON.stringify(out).length;
  if (size > MAX_TEMPLATE_KWARGS_CHARS)
    throw badParam(PARAM, `'${PARAM}' is ${size} characters as JSON, more than ${MAX_TEMPLATE_KWARGS_CHARS}`);
  return out;
}

/** A request body is parsed JSON, so only numbers need checking (finite); the depth is bounded here. */
function checkJson(value: unknown, where: string, depth: number): void {
  if (value === null || typeof value === "string" || typeof value === "boolean") return;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw badParam(PARAM, `'${shownName(where)}' must be a finite number`);
    return;
  }
  if (typeof value !== "object")
    throw badParam(PARAM, `'${shownName(where)}' must be a JSON value, got ${typeName(value)}`);
  if (depth > MAX_TEMPLATE_KWARGS_DEPTH)
    throw badParam(PARAM, `'${shownName(where)}' is nested more than ${MAX_TEMPLATE_KWARGS_DEPTH} levels deep`);
  if (Array.isArray(value)) value.forEach((x, i) => checkJson(x, `${where}[${i}]`, depth + 1));
  else for (const [k, x] of Object.entries(value as Record<string, unknown>)) checkJson(x, `${where}.${k}`, depth + 1);
}
