/**
 * Tool calls parsed out of generated text, in the formats the models' own chat templates write them (the same formats
 * vLLM's deepseek_v3 / deepseek_v31 / glm45 / kimi_k2 tool parsers and llama.cpp's common/chat.cpp read):
 *
 * - DeepSeek-V3 / R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`
 * - DeepSeek-V3.1+:   `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`
 * - GLM-4.5 / 4.6 / 4.7 / 5: `<tool_call>NAME\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n…</tool_call>` (4.7+ without the
 *   newlines); a value is text when the tool's schema says string, else JSON when it parses (the template writes
 *   non-strings with tojson), else text
 * - Kimi-K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>`
 *
 * All or nothing: text that starts a tool-call section but does not hold well-formed calls with JSON-object arguments
 * stays content, whole, with no calls (vLLM does the same) — a client sees what the model wrote rather than a guess.
 */
import { randomUUID } from "node:crypto";
import { partialTagAtEnd } from "./reasoning.js";

export type ToolCallFormat = "deepseek" | "glm" | "kimi";

export interface ToolCall {
  readonly id: string;
  readonly type: "function";
  readonly function: { readonly name: string; readonly arguments: string };
}

export interface ToolCallSplit {
  /** the text outside the tool-call section */
  readonly content: string;
  /** empty when the text holds no (well-formed) calls */
  readonly toolCalls: ToolCall[];
}

export interface ToolCallOptions {
  /** the request's `tools`: GLM's argument values are typed by the function's JSON schema */
  readonly tools?: readonly unknown[];
  /** call ids (default `call_` + random hex); Kimi's calls carry their own */
  readonly newId?: () => string;
}

const DS = {
  sectionBegin: ["<｜tool▁calls▁begin｜>"],
  sectionEnd: "<｜tool▁calls▁end｜>",
  callBegin: "<｜tool▁call▁begin｜>",
  callEnd: "<｜tool▁call▁end｜>",
  sep: "<｜tool▁sep｜>",
};
const KIMI = {
  // the singular spelling is in some Kimi-K2 tokenizers' vocabularies and vLLM accepts it
  sectionBegin: ["<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"],
  sectionEnd: ["<|tool_calls_section_end|>", "<|tool_call_section_end|>"],
  callBegin: "<|tool_call_begin|>",
  callEnd: "<|tool_call_end|>",
  sep: "<|tool_call_argument_begin|>",
};
const GLM = { callBegin: "<tool_call>", callEnd: "</tool_call>" };

/** The texts that open a tool-call section in a format (a streamed answer holds its content back from there). */
export const TOOL_SECTION_STARTS: Readonly<Record<ToolCallFormat, readonly string[]>> = {
  deepseek: DS.sectionBegin,
  glm: [GLM.callBegin],
  kimi: KIMI.sectionBegin,
};

/** The format a chat template writes tool calls in, from the markers its text holds; undefined: none known. */
export function toolCallFormatOf(template: string): ToolCallFormat | undefined {
  if (template.includes(DS.callBegin)) return "deepseek";
  if (template.includes(KIMI.callBegin)) return "kimi";
  if (template.includes(GLM.callBegin) && template.includes("<arg_key>")) return "glm";
  return undefined;
}

const defaultId = (): string => `call_${randomUUID().replace(/-/g, "").slice(0, 24)}`;

/** Split generated text into content and tool calls (all or nothing: see the module comment). */
export function parseToolCalls(text: string, format: ToolCallFormat, opts: ToolCallOptions = {}): ToolCallSplit {
  const newId = opts.newId ?? defaultId;
  const none: ToolCallSplit = { content: text, toolCalls: [] };
  const start = firstOf(text, TOOL_SECTION_STARTS[format]);
  if (start === undefined) return none;
  const before = text.slice(0, start.at);
  let parsed: { calls: ToolCall[]; after: string } | undefined;
  try {
    if (format === "glm") parsed = glmSection(text.slice(start.at), opts.tools, newId);
    else {
      const m = format === "deepseek" ? { ...DS, sectionEnd: [DS.sectionEnd] } : KIMI;
      const body = text.slice(start.at + start.marker.length);
      const end = firstOf(body, m.sectionEnd);
      // no section end: generation stopped at the end of the last call (or EOS), which is still a complete call
      const calls = callsOf(end === undefined ? body : body.slice(0, end.at), m.callBegin, m.callEnd, (call) =>
        format === "deepseek" ? deepseekCall(call, m.sep, newId) : kimiCall(call, m.sep),
      );
      parsed =
        calls === undefined
          ? undefined
          : { calls, after: end === undefined ? "" : body.slice(end.at + end.marker.length) };
    }
  } catch {
    parsed = undefined; // JSON that does not parse, or a call not as the format writes it
  }
  if (parsed === undefined || parsed.calls.length === 0) return none;
  return { content: before + parsed.after, toolCalls: parsed.calls };
}

function firstOf(text: string, markers: readonly string[]): { at: number; marker: string } | undefined {
  let best: { at: number; marker: string } | undefined;
  for (const marker of markers) {
    const at = text.indexOf(marker);
    if (at >= 0 && (best === undefined || at < best.at)) best = { at, marker };
  }
  return best;
}

/** The calls of a section: begin…end pairs with only whitespace around them; undefined when anything else is there. */
function callsOf(
  section: string,
  begin: string,
  end: string,
  parse: (body: string) => ToolCall | undefined,
): ToolCall[] | undefined {
  const calls: ToolCall[] = [];
  let rest = section;
  for (;;) {
    rest = rest.trimStart();
    if (rest === "") return calls;
    if (!rest.startsWith(begin)) return undefined;
    const close = rest.indexOf(end);
    if (close < 0) return undefined; // cut off inside a call
    const call = parse(rest.slice(begin.length, close));
    if (call === undefined) return undefined;
    calls.push(call);
    rest = rest.slice(close + end.length);
  }
}

/** V3/R1 `function<sep>NAME\n```json\nARGS\n```` or V3.1 `NAME<sep>ARGS`. */
function deepseekCall(body: string, sep: string, newId: () => string): ToolCall | undefined {
  const at = body.indexOf(sep);
  if (at < 0) return undefined;
  const head = body.slice(0, at).trim();
  const tail = body.slice(at + sep.length);
  const fenced = /^([^\n]+)\n```(?:json)?[ \t]*\n([\s\S]*?)\n?```\s*$/.exec(tail);
  if (fenced !== null && (head === "function" || head === "")) return call(newId(), fenced[1].trim(), fenced[2]);
  return call(newId(), head, tail);
}

/** `functions.NAME:INDEX<argument_begin>ARGS`; the call's id is the model's own `functions.NAME:INDEX`. */
function kimiCall(body: string, sep: string): ToolCall | undefined {
  const at = body.indexOf(sep);
  if (at < 0) return undefined;
  const id = body.slice(0, at).trim();
  const m = /^(?:functions\.)?([^\s:]+):\d+$/.exec(id);
  if (m === null) return undefined;
  return call(id, m[1], body.slice(at + sep.length));
}

/** `<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>` calls, whitespace between them. */
function glmSection(
  section: string,
  tools: readonly unknown[] | undefined,
  newId: () => string,
): { calls: ToolCall[]; after: string } | undefined {
  // content after the calls is kept (GLM may write a sentence after them); the calls must come one after the other
  const lastEnd = section.lastIndexOf(GLM.callEnd);
  if (lastEnd < 0) return undefined;
  const calls = callsOf(section.slice(0, lastEnd + GLM.callEnd.length), GLM.callBegin, GLM.callEnd, (body) =>
    glmCall(body, tools, newId),
  );
  return calls === undefined ? undefined : { calls, after: section.slice(lastEnd + GLM.callEnd.length) };
}

function glmCall(body: string, tools: readonly unknown[] | undefined, newId: () => string): ToolCall | undefined {
  const firstKey = body.indexOf("<arg_key>");
  const name = (firstKey < 0 ? body : body.slice(0, firstKey)).trim();
  const args: Record<string, unknown> = {};
  const pair = /\s*<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>\s*/y;
  let at = firstKey < 0 ? body.length : firstKey;
  while (at < body.length) {
    pair.lastIndex = at;
    const m = pair.exec(body);
    if (m === null) return undefined;
    const key = m[1].trim();
    args[key] = glmValue(m[2], parameterType(tools, name, key));
    at = pair.lastIndex;
  }
  return call(newId(), name, JSON.stringify(args));
}

function glmValue(text: string, type: unknown): unknown {
  if (type === "string") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** `tools[i].function.parameters.properties[key].type` of the function named `name`, if the request gave one. */
function parameterType(tools: readonly unknown[] | undefined, name: string, key: string): unknown {
  for (const t of tools ?? []) {
    const fn = field(t, "function");
    if (field(fn, "name") !== name) continue;
    return field(field(field(fn, "parameters"), "properties"), key, "type");
  }
  return undefined;
}

function field(v: unknown, ...path: string[]): unknown {
  for (const k of path) {
    if (typeof v !== "object" || v === null || Array.isArray(v) || !Object.hasOwn(v, k)) return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

/** A call, when the name is a name and the arguments a JSON object (kept as the model wrote them). */
function call(id: string, name: string, args: string): ToolCall | undefined {
  if (!/^[^\s<>]+$/.test(name)) return undefined;
  const parsed: unknown = JSON.parse(args.trim() === "" ? "{}" : args);
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return undefined;
  return { id, type: "function", function: { name, arguments: args.trim() === "" ? "{}" : args.trim() } };
}

/**
 * Streamed content when the request has tools: text passes through until a tool-call section may be starting (a
 * possible marker at the end is held back, as the reasoning split holds a possible tag); from the section on, text is
 * held and parsed once generation ends. What push() and finish().content give out adds up to parseToolCalls' content.
 */
export class ToolCallStream {
  private held = "";
  private inSection = false;

  constructor(
    private readonly format: ToolCallFormat,
    private readonly opts: ToolCallOptions = {},
  ) {}

  /** The content that can be given out now. */
  push(text: string): string {
    this.held += text;
    if (this.inSection) return "";
    const start = firstOf(this.held, TOOL_SECTION_STARTS[this.format]);
    const cut =
      start !== undefined
        ? start.at
        : this.held.length - Math.max(...TOOL_SECTION_STARTS[this.format].map((m) => partialTagAtEnd(this.held, m)));
    this.inSection = start !== undefined;
    const out = this.held.slice(0, cut);
    this.held = this.held.slice(cut);
    return out;
  }

  /** The rest of the content, and the calls. */
  finish(): ToolCallSplit {
    const rest = this.held;
    this.held = "";
    return this.inSection ? parseToolCalls(rest, this.format, this.opts) : { content: rest, toolCalls: [] };
  }
}
