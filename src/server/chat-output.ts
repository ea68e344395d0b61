/**
 * How a chat request's generated text becomes its answer: `<think>` reasoning split into `reasoning_content`
 * (reasoning.ts, unless `--reasoning-format none`), then tool calls parsed out of the content (tool-calls.ts) when the
 * request has tools. One plan per request; chatChoice() answers the whole text, ChatDeltaStream the streamed pieces,
 * and the two agree: the deltas of any cut of a text add up to chatChoice's message.
 */
import type { ChatMessage } from "../tokenizer/index.js";
import { badParam, shownValue } from "./http.js";
import {
  promptOpensReasoning,
  ReasoningStream,
  splitReasoning,
  THINK_CLOSE,
  type ReasoningDelta,
  type ReasoningOptions,
} from "./reasoning.js";
import { parseToolCalls, toolCallFormatOf, ToolCallStream, type ToolCall, type ToolCallFormat } from "./tool-calls.js";

/** `--reasoning-format`: deepseek splits `<think>` reasoning into reasoning_content (llama-server's default); none leaves the raw text in content. */
export type ReasoningFormat = "deepseek" | "none";
export const REASONING_FORMATS: readonly ReasoningFormat[] = ["deepseek", "none"];

export interface ChatOutputPlan {
  /** how to split reasoning; undefined: the text is all content */
  readonly reasoning: ReasoningOptions | undefined;
  /** the format of tool calls to parse; undefined: the request has no tools (or tool_choice "none") */
  readonly toolFormat: ToolCallFormat | undefined;
  readonly tools: readonly unknown[] | undefined;
  /** false (parallel_tool_calls: false): only the first call is returned */
  readonly parallelToolCalls: boolean;
  /**
   * generation must write control tokens' text: `<think>` and the tool-call markers are control tokens in many GGUFs
   * (llama.cpp's converter marks `<｜…｜>` and `<|…|>` tokens so), and without their text neither can be found — nor
   * would `none` be the raw text (llama-server keeps them as "preserved tokens" for the same reason)
   */
  readonly controlTokenText: boolean;
}

export interface ChatOutputRequest {
  readonly reasoningFormat: ReasoningFormat;
  /** the model's chat template text */
  readonly template: string | undefined;
  /** the end of the rendered prompt (where generation starts inside `<think>` or not) */
  readonly promptTail: string;
  /** the request's tools, when they are to be used (not tool_choice "none") */
  readonly tools: readonly unknown[] | undefined;
  readonly parallelToolCalls?: boolean;
}

/** The plan for one request; 400 on 'tools' when the model's template writes tool calls in no format parsed here. */
export function planChatOutput(r: ChatOutputRequest): ChatOutputPlan {
  const template = r.template ?? "";
  const thinks = template.includes(THINK_CLOSE);
  const reasoning =
    r.reasoningFormat === "deepseek" && thinks ? { startsInReasoning: promptOpensReasoning(r.promptTail) } : undefined;
  let toolFormat: ToolCallFormat | undefined;
  if (r.tools !== undefined && r.tools.length > 0) {
    toolFormat = toolCallFormatOf(template);
    if (toolFormat === undefined)
      throw badParam(
        "tools",
        "'tools' is not supported for this model: its chat template writes tool calls in none of the formats this server parses (DeepSeek-V3/R1/V3.1, GLM-4.5+, Kimi-K2); send tool_choice: \"none\" to have the tools ignored",
        "unsupported_parameter",
      );
  }
  return {
    reasoning,
    toolFormat,
    tools: toolFormat !== undefined ? r.tools : undefined,
    parallelToolCalls: r.parallelToolCalls ?? true,
    controlTokenText: thinks || toolFormat !== undefined,
  };
}

/**
 * The messages as the template reads them. Clients send a past call's `function.arguments` as a JSON string (OpenAI's
 * shape); GLM's templates iterate it (`tc.arguments.items()`), so for them it becomes the object (llama-server and vLLM
 * convert it as well). DeepSeek's and Kimi's templates write the string as it is.
 */
export function messagesForTemplate(
  messages: readonly ChatMessage[],
  template: string | undefined,
): readonly ChatMessage[] {
  if (toolCallFormatOf(template ?? "") !== "glm") return messages;
  return messages.map((m, i) => {
    const calls = m["tool_calls"];
    if (!Array.isArray(calls)) return m;
    return {
      ...m,
      tool_calls: calls.map((c: unknown, j) => {
        const fn = typeof c === "object" && c !== null ? (c as Record<string, unknown>)["function"] : undefined;
        const args = typeof fn === "object" && fn !== null ? (fn as Record<string, unknown>)["arguments"] : undefined;
        if (typeof args !== "string") return c;
        let parsed: unknown;
        try {
          parsed = JSON.parse(args);
        } catch {
          parsed = undefined;
        }
        if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
          throw badParam(
            "messages",
            `'messages[${i}].tool_calls[${j}].function.arguments' must be a JSON object (as a string), got ${shownValue(args, 40)}`,
          );
        return {
          ...(c as Record<string, unknown>),
          function: { ...(fn as Record<string, unknown>), arguments: parsed },
        };
      }),
    };
  });
}

export interface ChatAnswerMessage {
  readonly role: "assistant";
  readonly content: string | null;
  readonly reasoning_content?: string;
  readonly tool_calls?: ToolCall[];
}

/** The finish reason the scheduler gives, and "tool_calls" when the answer is calls (vLLM's rule: calls win). */
export type ChatFinishReason = "stop" | "length" | "tool_calls";

/** A non-streamed choice's message and finish reason from the whole generated text. */
export function chatChoice(
  text: string,
  plan: ChatOutputPlan,
  finish: "stop" | "length",
): { message: ChatAnswerMessage; finish_reason: ChatFinishReason } {
  let content = text;
  let reasoning: string | null = null;
  if (plan.reasoning !== undefined) ({ reasoning, content } = splitReasoning(text, plan.reasoning));
  let calls: ToolCall[] = [];
  if (plan.toolFormat !== undefined) {
    const parsed = parseToolCalls(content, plan.toolFormat, toolOptions(plan));
    content = parsed.content;
    calls = plan.parallelToolCalls ? parsed.toolCalls : parsed.toolCalls.slice(0, 1);
  }
  return { message: answerMessage(content, reasoning, calls), finish_reason: calls.length > 0 ? "tool_calls" : finish };
}

function answerMessage(content: string, reasoning: string | null, calls: ToolCall[]): ChatAnswerMessage {
  return {
    role: "assistant",
    // OpenAI sends null content beside tool calls when the model wrote nothing else
    content: calls.length > 0 && content.trim() === "" ? null : content,
    ...(reasoning !== null ? { reasoning_content: reasoning } : {}),
    ...(calls.length > 0 ? { tool_calls: calls } : {}),
  };
}

function toolOptions(plan: ChatOutputPlan): { tools?: readonly unknown[] } {
  return plan.tools !== undefined ? { tools: plan.tools } : {};
}

/** A streamed tool call: OpenAI's delta entries carry their position in the list. */
export interface ToolCallDelta extends ToolCall {
  readonly index: number;
}

export interface ChatDelta {
  reasoning_content?: string;
  content?: string;
  tool_calls?: ToolCallDelta[];
}

/** One streamed choice: push() each generated piece, finish() once (the held-back rest and the tool calls, if any). */
export class ChatDeltaStream {
  private readonly reasoning: ReasoningStream | undefined;
  private readonly tools: ToolCallStream | undefined;
  private calls = 0;

  constructor(private readonly plan: ChatOutputPlan) {
    this.reasoning = plan.reasoning !== undefined ? new ReasoningStream(plan.reasoning) : undefined;
    this.tools = plan.toolFormat !== undefined ? new ToolCallStream(plan.toolFormat, toolOptions(plan)) : undefined;
  }

  /** The delta for a piece: empty ({}) when everything in it is held back. */
  push(text: string): ChatDelta {
    return this.gate(this.reasoning !== undefined ? this.reasoning.push(text) : text === "" ? {} : { content: text });
  }

  finish(): ChatDelta {
    const out = this.gate(this.reasoning?.finish() ?? {});
    if (this.tools === undefined) return out;
    const end = this.tools.finish();
    if (end.content !== "") out.content = (out.content ?? "") + end.content;
    const calls = this.plan.parallelToolCalls ? end.toolCalls : end.toolCalls.slice(0, 1);
    this.calls = calls.length;
    if (calls.length > 0) out.tool_calls = calls.map((c, index) => ({ index, ...c }));
    return out;
  }

  /** After finish(): the choice's finish reason. */
  finishReason(finish: "stop" | "length"): ChatFinishReason {
    return this.calls > 0 ? "tool_calls" : finish;
  }

  /** Content through the tool-call gate (content in a tool-call section is held until the end). */
  private gate(d: ReasoningDelta): ChatDelta {
    const out: ChatDelta = {};
    if (d.reasoning_content !== undefined) out.reasoning_content = d.reasoning_content;
    const content = d.content !== undefined && this.tools !== undefined ? this.tools.push(d.content) : d.content;
    if (content !== undefined && content !== "") out.content = content;
    return out;
  }
}
