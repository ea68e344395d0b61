/** Chat templates (`tokenizer.chat_template`, Jinja) rendered with @huggingface/jinja. */
import { Template } from "@huggingface/jinja";
import { LatentError } from "../util/errors.js";

export interface ChatMessage {
  readonly role: string;
  readonly content: string | null;
  /** anything else a template reads (tool_calls, reasoning_content, name, …) */
  readonly [key: string]: unknown;
}

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
}

const compiled = new Map<string, Template>();

export function renderChatTemplate(template: string, messages: readonly ChatMessage[], opts: RenderChatOptions = {}): string {
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
  const vars: Record<string, unknown> = {
    ...(opts.variables ?? {}),
    messages: messages.map((m) => ({ ...m })),
    add_generation_prompt: opts.addGenerationPrompt ?? true,
    bos_token: opts.bosToken ?? "",
    eos_token: opts.eosToken ?? "",
  };
  if (opts.tools !== undefined) vars["tools"] = opts.tools;
  try {
    return t.render(vars);
  } catch (e) {
    throw new LatentError(`chat template failed to render: ${e instanceof Error ? e.message : String(e)}`);
  }
}
