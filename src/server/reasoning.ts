/**
 * Reasoning split for `<think>…</think>` models (DeepSeek-R1 / V3.1+, GLM-4.5+, Kimi-K2-thinking): generated text
 * becomes `reasoning_content` (inside the tags) and `content` (after them), as vLLM's `deepseek_r1` reasoning parser
 * and llama.cpp's `--reasoning-format deepseek` return them.
 *
 * Rules (vLLM deepseek_r1, llama.cpp common/chat.cpp):
 * - Where generation starts inside the reasoning — the prompt ends with an open `<think>`, as R1's and GLM-4.7's
 *   templates render the generation prompt — the text up to the first `</think>` is reasoning, even with no opening
 *   tag; a `<think>` the model repeats at the very start is dropped (R1 before 0528 wrote it itself).
 * - Otherwise a `<think>` at the start of the text (after whitespace only) opens the reasoning; a `<think>` later on
 *   is content: a model that answers without thinking may well write the tag in its answer.
 * - Reasoning never closed (generation stopped first) is all reasoning, as vLLM's deepseek_r1 parser returns it.
 * - Whitespace right after `</think>` is dropped (templates put "\n\n" there; llama.cpp drops it too); the rest of the
 *   text, later tags included, is content verbatim.
 *
 * One state machine serves streaming and whole texts (splitReasoning feeds it all at once), so a streamed answer is
 * exactly the non-streamed one cut into pieces, whatever the token boundaries — a tag split across tokens is held back
 * until it is known to be a tag or not.
 */

export const THINK_OPEN = "<think>";
export const THINK_CLOSE = "</think>";

/** A streamed piece: the fields present are the ones that grew. */
export interface ReasoningDelta {
  reasoning_content?: string;
  content?: string;
}

export interface ReasoningSplit {
  /** the text inside the reasoning; null when the text had none */
  readonly reasoning: string | null;
  readonly content: string;
}

export interface ReasoningOptions {
  /** the prompt left generation inside an open `<think>` (promptOpensReasoning) */
  readonly startsInReasoning: boolean;
}

/** Whether the rendered prompt ends inside the reasoning: its last non-space text is an opening `<think>`. */
export function promptOpensReasoning(prompt: string): boolean {
  return prompt.trimEnd().endsWith(THINK_OPEN);
}

type Phase = "start" | "reasoning" | "afterReasoning" | "content";

/** Length of the longest suffix of `text` that is a proper prefix of `tag` (the part that may be a tag still arriving). */
export function partialTagAtEnd(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) if (text.endsWith(tag.slice(0, n))) return n;
  return 0;
}

/** Incremental splitter: push() each decoded piece, finish() once at the end. */
export class ReasoningStream {
  private phase: Phase = "start";
  /** text received and not yet given out (a possible tag, or leading whitespace before one) */
  private held = "";
  private sawReasoning = false;

  constructor(private readonly opts: ReasoningOptions) {}

  push(text: string): ReasoningDelta {
    const out: ReasoningDelta = {};
    this.held += text;
    this.advance(out);
    return out;
  }

  /** The held-back rest: an unfinished tag is what it would have been had nothing followed (text). */
  finish(): ReasoningDelta {
    const out: ReasoningDelta = {};
    const rest = this.held;
    this.held = "";
    if (this.phase === "start") {
      if (this.opts.startsInReasoning) {
        this.sawReasoning = true;
        add(out, "reasoning_content", rest);
      } else add(out, "content", rest);
    } else if (this.phase === "reasoning") add(out, "reasoning_content", rest);
    else if (this.phase === "content") add(out, "content", rest);
    return out;
  }

  /** Whether a reasoning section was seen (reasoning_content is then a string, even if empty). */
  get hadReasoning(): boolean {
    return this.sawReasoning;
  }

  private advance(out: ReasoningDelta): void {
    for (;;) {
      switch (this.phase) {
        case "start": {
          const lead = this.held.trimStart();
          if (lead.startsWith(THINK_OPEN)) {
            this.held = lead.slice(THINK_OPEN.length);
            this.enterReasoning();
            continue;
          }
          if (THINK_OPEN.startsWith(lead)) return; // whitespace so far, or the start of a tag: wait for more
          if (this.opts.startsInReasoning) this.enterReasoning();
          else this.phase = "content";
          continue;
        }
        case "reasoning": {
          const end = this.held.indexOf(THINK_CLOSE);
          if (end >= 0) {
            add(out, "reasoning_content", this.held.slice(0, end));
            this.held = this.held.slice(end + THINK_CLOSE.length);
            this.phase = "afterReasoning";
            continue;
          }
          const keep = partialTagAtEnd(this.held, THINK_CLOSE);
          add(out, "reasoning_content", this.held.slice(0, this.held.length - keep));
          this.held = this.held.slice(this.held.length - keep);
          return;
        }
        case "afterReasoning": {
          this.held = this.held.trimStart();
          if (this.held === "") return;
          this.phase = "content";
          continue;
        }
        case "content":
          add(out, "content", this.held);
          this.held = "";
          return;
      }
    }
  }

  private enterReasoning(): void {
    this.phase = "reasoning";
    this.sawReasoning = true;
  }
}

function add(out: ReasoningDelta, key: keyof ReasoningDelta, text: string): void {
  if (text !== "") out[key] = (out[key] ?? "") + text;
}

/** The whole generated text split at once (exactly what the streamed deltas add up to). */
export function splitReasoning(text: string, opts: ReasoningOptions): ReasoningSplit {
  const stream = new ReasoningStream(opts);
  const a = stream.push(text);
  const b = stream.finish();
  const reasoning = (a.reasoning_content ?? "") + (b.reasoning_content ?? "");
  return { reasoning: stream.hadReasoning ? reasoning : null, content: (a.content ?? "") + (b.content ?? "") };
}
