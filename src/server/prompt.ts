import { randomUUID } from "node:crypto";
import { TokenType, type ChatMessage, type RenderChatOptions, type Tokenizer } from "../tokenizer/index.js";
import { ApiError } from "./http.js";

/** Texts shorter than this (UTF-16 units) are tokenized in one go; longer ones in slices of about this size. */
const SLICE_CHARS = 8 * 1024;

/**
 * Places where a text can be cut without changing its tokenization: after a newline before a non-space, or between
 * a letter and a space that starts a word. Every pre-tokenizer we load (GPT-2's and its descendants: llama-bpe,
 * deepseek, qwen2, glm4, …) ends a piece there: no piece continues from a newline into a non-space, and a space
 * before letters begins the next piece, never ends the previous letter run.
 */
const SAFE_CUT = /(?<=\n)(?=\S)|(?<=\p{L})(?= \p{L})/gu;

/** The server's view of the tokenizer: prompt-size bounds and tokenizing that yields to the event loop. */
export class PromptEncoder {
  /** most UTF-8 bytes of input one token can cover: a prompt of b bytes has at least b / maxTokenBytes tokens */
  readonly maxTokenBytes: number;
  /** control and unknown token texts, as the tokenizer would parse them */
  private readonly controlTexts: readonly string[];
  /** slicing is exact only when no special text could straddle a cut */
  private readonly canSlice: boolean;
  private readonly utf8 = new TextEncoder();

  constructor(
    readonly tokenizer: Tokenizer,
    readonly contextLength: number,
  ) {
    let longest = 4; // an unknown character stands for up to 4 bytes
    const control: string[] = [];
    let straddles = false;
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const type = tokenizer.tokenTypes[id];
      const special = tokenizer.isControl(id) || type === TokenType.UserDefined;
      const covered = special ? this.utf8.encode(tokenizer.tokenText(id)).length : tokenizer.tokenBytes(id).length;
      if (covered > longest) longest = covered;
      if (!special) continue;
      const text = tokenizer.tokenText(id);
      if (tokenizer.isControl(id) && text !== "") control.push(text);
      if (/\n|\p{L} \p{L}/u.test(text)) straddles = true;
    }
    this.maxTokenBytes = longest;
    this.controlTexts = control;
    this.canSlice = !straddles;
  }

  /** 400 context_length_exceeded, before tokenizing, for a text too long to fit the context whatever its tokens. */
  checkSize(text: string, param: string): void {
    // cheap pre-check on UTF-16 length: a UTF-16 unit is at least one UTF-8 byte
    if (text.length <= this.contextLength) return;
    const bytes = Buffer.byteLength(text, "utf8");
    const fewest = Math.ceil(bytes / this.maxTokenBytes);
    if (fewest > this.contextLength) {
      throw new ApiError(
        400,
        `This model's maximum context length is ${this.contextLength} tokens. However, your ${param} is ${bytes} bytes, at least ${fewest} tokens (a token covers at most ${this.maxTokenBytes} bytes).`,
        "invalid_request_error",
        param,
        "context_length_exceeded",
      );
    }
  }

  /** `tokenizer.encode`, in slices with a turn of the event loop between them when the text is long. */
  async encode(
    text: string,
    opts: { readonly addSpecial: boolean; readonly parseSpecial: boolean },
  ): Promise<number[]> {
    const tok = this.tokenizer;
    if (text.length <= SLICE_CHARS || !this.canSlice) return tok.encode(text, opts);
    const out: number[] = [];
    if (opts.addSpecial && tok.addBos && tok.bosId !== undefined) out.push(tok.bosId);
    for (const slice of slices(text)) {
      for (const id of tok.encode(slice, { addSpecial: false, parseSpecial: opts.parseSpecial })) out.push(id);
      await new Promise<void>((r) => setImmediate(r));
    }
    if (opts.addSpecial && tok.addEos && tok.eosId !== undefined) out.push(tok.eosId);
    return out;
  }

  /** A completion prompt's text: special-token texts parsed, BOS unless the text starts with it (encodePrompt). */
  encodePrompt(text: string, param = "prompt"): Promise<number[]> {
    this.checkSize(text, param);
    return this.encode(text, { addSpecial: !this.startsWithBos(text), parseSpecial: true });
  }

  /**
   * A chat prompt. The template's own markers are control tokens; a message's content is text, whatever it holds
   * (typed role markers are not parsed: llama-server and vLLM do the same). Contents holding control-token text
   * are rendered as placeholders, and tokenized apart without parsing specials.
   */
  async encodeChat(messages: readonly ChatMessage[], opts: RenderChatOptions): Promise<number[]> {
    const tok = this.tokenizer;
    const literal = messages.map(
      (m) => typeof m.content === "string" && this.controlTexts.some((t) => m.content!.includes(t)),
    );
    if (!literal.includes(true)) {
      const rendered = await tok.renderChatAsync(messages, opts);
      this.checkSize(rendered, "messages");
      return this.encode(rendered, { addSpecial: !this.startsWithBos(rendered), parseSpecial: true });
    }
    const nonce = randomUUID();
    const marker = (i: number): string => `\u{F0000}${nonce}:${i}\u{F0001}`;
    const withMarkers = messages.map((m, i) => (literal[i] ? { ...m, content: marker(i) } : m));
    const rendered = await tok.renderChatAsync(withMarkers, opts);
    this.checkSize(rendered, "messages");
    // cut the rendering at the markers: template text (specials parsed) and message contents (plain text)
    const parts: { text: string; literal: boolean }[] = [];
    let rest = rendered;
    const found = new Set<number>();
    const markerRe = new RegExp(`\u{F0000}${nonce}:(\\d+)\u{F0001}`, "u");
    for (let m = markerRe.exec(rest); m !== null; m = markerRe.exec(rest)) {
      const i = Number(m[1]);
      if (found.has(i)) throw contentAltered(i);
      found.add(i);
      parts.push({ text: rest.slice(0, m.index), literal: false }, { text: messages[i].content!, literal: true });
      rest = rest.slice(m.index + m[0].length);
    }
    parts.push({ text: rest, literal: false });
    literal.forEach((isLiteral, i) => {
      if (isLiteral && !found.has(i)) throw contentAltered(i);
    });
    const full = parts.map((p) => p.text).join("");
    this.checkSize(full, "messages");
    const out: number[] = [];
    const addSpecial = !this.startsWithBos(full);
    if (addSpecial && tok.addBos && tok.bosId !== undefined) out.push(tok.bosId);
    for (const p of parts) {
      if (p.text === "") continue;
      for (const id of await this.encode(p.text, { addSpecial: false, parseSpecial: !p.literal })) out.push(id);
    }
    if (addSpecial && tok.addEos && tok.eosId !== undefined) out.push(tok.eosId);
    return out;
  }

  private startsWithBos(text: string): boolean {
    const bos = this.tokenizer.bosId;
    return bos !== undefined && text.startsWith(this.tokenizer.tokenText(bos));
  }
}

function contentAltered(i: number): ApiError {
  return new ApiError(
    400,
    `'messages[${i}].content' holds special-token text, and the chat template does not place that content verbatim (exactly once), so it cannot be kept as plain text`,
    "invalid_request_error",
    "messages",
    "special_tokens_in_content",
  );
}

/** Cut a long text at safe places into slices of about SLICE_CHARS (a slice runs on to the next safe cut). */
function* slices(text: string): Generator<string> {
  let start = 0;
  while (text.length - start > SLICE_CHARS) {
    SAFE_CUT.lastIndex = start + SLICE_CHARS;
    const cut = SAFE_CUT.exec(text);
    if (cut === null) break;
    yield text.slice(start, cut.index);
    start = cut.index;
  }
  yield text.slice(start);
}
