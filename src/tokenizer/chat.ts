/**
 * Chat templates (`tokenizer.chat_template`, Jinja) rendered with @huggingface/jinja under a budget: a template comes
 * from the file, so `range(999999999)` (which the library would build as one array, a V8 fatal error) is refused, the
 * output is capped, and — in Node, where `chat-thread.ts` installs a worker-thread runner — the render runs in a
 * thread with a memory limit that is stopped after `timeMs`. This module is browser-safe (no Node-only imports): in a
 * browser the render runs in the caller's thread (the engine's Web Worker) with the range and output caps only.
 */
import { Environment, Interpreter, Template } from "@huggingface/jinja";
import { LatentError } from "../util/errors.js";

export interface ChatMessage {
  readonly role: string;
  readonly content: string | null;
  /** anything else a template reads (tool_calls, reasoning_content, name, …) */
  readonly [key: string]: unknown;
}

/** What one render may spend. */
export interface ChatTemplateLimits {
  /** wall time of one render, in ms (enforced where a runner with a thread is installed: Node) */
  readonly timeMs: number;
  /** characters of output */
  readonly outputChars: number;
  /** elements one `range()` call may produce */
  readonly rangeLength: number;
}

export const DEFAULT_CHAT_TEMPLATE_LIMITS: ChatTemplateLimits = {
  timeMs: 2000,
  outputChars: 1 << 22,
  rangeLength: 1 << 20,
};

export interface RenderChatOptions {
  /** end with the assistant turn header (default true) */
  readonly addGenerationPrompt?: boolean;
  /** `bos_token` variable (Tokenizer.renderChat fills in the model's BOS text) */
  readonly bosToken?: string;
  /** `eos_token` variable */
  readonly eosToken?: string;
  /** `tools` variable, when the template supports tool calling */
  readonly tools?: readonly unknown[];
  /** further template variables (e.g. `enable_thinking`, `thinking`) */
  readonly variables?: Readonly<Record<string, unknown>>;
  /** budget of this render (default DEFAULT_CHAT_TEMPLATE_LIMITS, field by field) */
  readonly limits?: Partial<ChatTemplateLimits>;
}

/** A chat template over its budget (time, output, a range too long, memory). */
export class ChatTemplateBudgetError extends LatentError {}

/** Renders a template with variables under limits; throws LatentError. */
export type ChatTemplateRunner = (
  template: string,
  vars: Record<string, unknown>,
  limits: ChatTemplateLimits,
) => string;

const compiled = new Map<string, Template>();

function compile(template: string): Template {
  let t = compiled.get(template);
  if (t === undefined) {
    try {
      t = new Template(template);
    } catch (e) {
      throw new LatentError(`chat template does not parse: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (compiled.size > 16) compiled.clear();
    compiled.set(template, t);
  }
  return t;
}

/** Python's range(), refusing more than `max` elements before building any. */
function boundedRange(max: number): (start: number, stop?: number, step?: number) => number[] {
  return (start, stop, step = 1) => {
    const [a, b] = stop === undefined ? [0, start] : [start, stop];
    if (step === 0) throw new Error("range() step must not be zero");
    const n = Math.max(0, Math.ceil((b - a) / step));
    if (!Number.isFinite(n) || n > max)
      throw new ChatTemplateBudgetError(
        `chat template is over its budget: range(${a}, ${b}, ${step}) would have ${n} elements (at most ${max})`,
      );
    return Array.from({ length: n }, (_, i) => a + i * step);
  };
}

/** strftime_now of @huggingface/jinja (the tokens it supports), which its globals are replaced with here. */
function strftimeNow(format: string): string {
  const d = new Date();
  const pad2 = (n: number): string => (n < 10 ? "0" + n : String(n));
  return format.replace(/%[YmdbBHM%]/g, (t) => {
    switch (t) {
      case "%Y":
        return String(d.getFullYear());
      case "%m":
        return pad2(d.getMonth() + 1);
      case "%d":
        return pad2(d.getDate());
      case "%b":
        return new Intl.DateTimeFormat(undefined, { month: "short" }).format(d);
      case "%B":
        return new Intl.DateTimeFormat(undefined, { month: "long" }).format(d);
      case "%H":
        return pad2(d.getHours());
      case "%M":
        return pad2(d.getMinutes());
      default:
        return "%";
    }
  });
}

/**
 * Render in the calling thread with the range and output caps (no time limit: this is what a runner thread runs).
 * The globals are @huggingface/jinja's own (Template.render's setupGlobals), with `range` bounded.
 */
export function renderInThread(template: string, vars: Record<string, unknown>, limits: ChatTemplateLimits): string {
  const t = compile(template);
  const env = new Environment();
  const globals: Record<string, unknown> = {
    false: false,
    true: true,
    none: null,
    raise_exception: (msg: unknown) => {
      throw new Error(String(msg));
    },
    range: boundedRange(limits.rangeLength),
    strftime_now: strftimeNow,
    True: true,
    False: false,
    None: null,
  };
  let out: unknown;
  try {
    for (const [k, v] of Object.entries(globals)) env.set(k, v);
    for (const [k, v] of Object.entries(vars)) if (!(k in globals)) env.set(k, v);
    out = new Interpreter(env).run(t.parsed).value;
  } catch (e) {
    if (e instanceof LatentError) throw e;
    if (e instanceof RangeError) throw new ChatTemplateBudgetError(`chat template is over its budget: ${e.message}`);
    throw new LatentError(`chat template failed to render: ${e instanceof Error ? e.message : String(e)}`);
  }
  const text = typeof out === "string" ? out : String(out);
  if (text.length > limits.outputChars)
    throw new ChatTemplateBudgetError(
      `chat template is over its budget: ${text.length} characters of output (at most ${limits.outputChars})`,
    );
  return text;
}

/** As ChatTemplateRunner, without holding the caller's thread (a server's event loop) while the template renders. */
export type AsyncChatTemplateRunner = (
  template: string,
  vars: Record<string, unknown>,
  limits: ChatTemplateLimits,
) => Promise<string>;

let runner: ChatTemplateRunner = renderInThread;
let asyncRunner: AsyncChatTemplateRunner = (template, vars, limits) =>
  Promise.resolve().then(() => renderInThread(template, vars, limits));

/** Install how templates are rendered (Node: a worker thread with a time limit, see chat-thread.ts). */
export function setChatTemplateRunner(r: ChatTemplateRunner, a: AsyncChatTemplateRunner): void {
  runner = r;
  asyncRunner = a;
}

export function renderChatTemplate(
  template: string,
  messages: readonly ChatMessage[],
  opts: RenderChatOptions = {},
): string {
  compile(template); // a syntax error is reported here, without a trip to the runner's thread
  return runner(template, templateVars(messages, opts), limitsOf(opts));
}

/**
 * renderChatTemplate without blocking: in Node the caller's event loop runs on while the worker thread renders (for a
 * server: one hostile template does not hold up the other requests).
 */
export async function renderChatTemplateAsync(
  template: string,
  messages: readonly ChatMessage[],
  opts: RenderChatOptions = {},
): Promise<string> {
  compile(template);
  return asyncRunner(template, templateVars(messages, opts), limitsOf(opts));
}

function limitsOf(opts: RenderChatOptions): ChatTemplateLimits {
  return { ...DEFAULT_CHAT_TEMPLATE_LIMITS, ...(opts.limits ?? {}) };
}

function templateVars(messages: readonly ChatMessage[], opts: RenderChatOptions): Record<string, unknown> {
  const vars: Record<string, unknown> = {
    ...(opts.variables ?? {}),
    messages: messages.map((m) => ({ ...m })),
    add_generation_prompt: opts.addGenerationPrompt ?? true,
    bos_token: opts.bosToken ?? "",
    eos_token: opts.eosToken ?? "",
  };
  if (opts.tools !== undefined) vars["tools"] = opts.tools;
  return vars;
}
