/**
 * GGUF tokenizer (`tokenizer.ggml.model = "gpt2"`, byte-level BPE), token-for-token equal to llama.cpp's.
 *
 * encode: split out special tokens (longest first) → pre-tokenizer (`tokenizer.ggml.pre`) → GPT-2 byte-level
 * characters → BPE merges by rank. decode: byte-level characters back to bytes → UTF-8.
 */
import type { Metadata } from "../gguf/metadata.js";
import { LatentError } from "../util/errors.js";
import { BpeModel } from "./bpe.js";
import { renderChatTemplate, renderChatTemplateAsync, type ChatMessage, type RenderChatOptions } from "./chat.js";
import { PreTokenizer } from "./pretokenize.js";
import { byteLevelOf, CHAR_TO_BYTE, codePoints } from "./unicode.js";

/** `tokenizer.ggml.token_type` values. */
export enum TokenType {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
}

/** (browser-safe stand-in for Buffer.byteLength) */
const UTF8_ENCODER = new TextEncoder();

/** llama.cpp `llama_token_attr` bits. */
const ATTR_UNKNOWN = 1 << 0;
const ATTR_UNUSED = 1 << 1;
const ATTR_NORMAL = 1 << 2;
const ATTR_CONTROL = 1 << 3;
const ATTR_USER_DEFINED = 1 << 4;
const ATTR_BYTE = 1 << 5;

function attrOfType(type: number): number {
  switch (type) {
    case TokenType.Unknown:
      return ATTR_UNKNOWN;
    case TokenType.Unused:
      return ATTR_UNUSED;
    case TokenType.Normal:
      return ATTR_NORMAL;
    case TokenType.Control:
      return ATTR_CONTROL;
    case TokenType.UserDefined:
      return ATTR_USER_DEFINED;
    case TokenType.Byte:
      return ATTR_BYTE;
    default:
      return 0;
  }
}

/**
 * Token texts llama.cpp treats as end-of-generation (and forces to CONTROL) whatever their type
 * (llama-vocab.cpp `special_eog_ids`), plus GLM's turn markers from the reference.
 */
const LLAMA_EOG_NAMES: readonly string[] = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "</s>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "[EOS]",
  "<|end_of_text|>",
  "<end_of_utterance>",
  "<eos>",
  "<turn|>",
  "<|tool_response>",
  "<｜end▁of▁sentence｜>",
  "[e~[",
];
const EXTRA_EOG_NAMES: readonly string[] = ["<|user|>", "<|observation|>"];

export interface EncodeOptions {
  /** add BOS/EOS as `tokenizer.ggml.add_bos_token` / `add_eos_token` say (default true) */
  readonly addSpecial?: boolean;
  /** recognise control / unknown token texts in the input (default false; user-defined tokens are always recognised, as in llama.cpp) */
  readonly parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** drop control and unknown tokens instead of writing their text (default false) */
  readonly skipSpecial?: boolean;
}

/** Incremental detokenizer: returns only complete UTF-8 characters, holding an incomplete trailing sequence. */
export interface StreamingDecoder {
  /** text completed by this token (may be "") */
  push(id: number): string;
  /** whatever is held back, with incomplete UTF-8 as U+FFFD; resets the decoder */
  flush(): string;
}

const WORD_CACHE_LIMIT = 1 << 16;
const WORD_CACHE_MAX_LEN = 256;

export class Tokenizer {
  readonly tokens: readonly string[];
  readonly tokenTypes: readonly number[];
  readonly pre: string;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly eotId: number | undefined;
  readonly eomId: number | undefined;
  readonly unknownId: number | undefined;
  readonly paddingId: number | undefined;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly chatTemplate: string | undefined;

  private readonly attrs: Uint8Array;
  private readonly textToToken = new Map<string, number>();
  private readonly bpe: BpeModel;
  private readonly preTokenizer: PreTokenizer;
  /** control / user-defined / unknown tokens, longest (UTF-8 bytes) first */
  private readonly specials: readonly number[];
  private readonly eog = new Set<number>();
  private readonly wordCache = new Map<string, readonly number[]>();
  private readonly pieceCache: (Uint8Array | undefined)[];
  private readonly utf8 = new TextEncoder();

  constructor(init: {
    tokens: readonly string[];
    tokenTypes?: readonly number[];
    merges: readonly string[];
    pre: string;
    bosId?: number;
    eosId?: number;
    eotId?: number;
    eomId?: number;
    unknownId?: number;
    paddingId?: number;
    addBos?: boolean;
    addEos?: boolean;
    chatTemplate?: string;
  }) {
    const n = init.tokens.length;
    if (n === 0) throw new LatentError("tokenizer: tokenizer.ggml.tokens is empty");
    if (init.tokenTypes !== undefined && init.tokenTypes.length < n) {
      throw new LatentError(
        `tokenizer: tokenizer.ggml.token_type has ${init.tokenTypes.length} entries for ${n} tokens`,
      );
    }
    this.tokens = init.tokens.map((t, i) => (t === "" ? `[EMPTY_${i}]` : t)); // as llama.cpp
    this.tokenTypes = init.tokenTypes ?? new Array<number>(n).fill(TokenType.Normal);
    this.pre = init.pre;
    this.preTokenizer = PreTokenizer.forPre(init.pre);
    const checkId = (name: string, id: number | undefined): number | undefined => {
      if (id === undefined) return undefined;
      if (!Number.isInteger(id) || id < 0 || id >= n)
        throw new LatentError(`tokenizer: ${name} = ${id} is outside the vocabulary (${n} tokens)`);
      return id;
    };
    this.bosId = checkId("bos_token_id", init.bosId);
    this.eosId = checkId("eos_token_id", init.eosId);
    this.eotId = checkId("eot_token_id", init.eotId);
    this.eomId = checkId("eom_token_id", init.eomId);
    this.unknownId = checkId("unknown_token_id", init.unknownId);
    this.paddingId = checkId("padding_token_id", init.paddingId);
    this.addBos = init.addBos ?? false;
    this.addEos = init.addEos ?? false;
    this.chatTemplate = init.chatTemplate;

    this.attrs = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      this.attrs[i] = attrOfType(this.tokenTypes[i]);
      this.textToToken.set(this.tokens[i], i);
    }
    for (const id of [this.eosId, this.eotId, this.eomId]) if (id !== undefined) this.eog.add(id);
    for (const name of LLAMA_EOG_NAMES) {
      const id = this.textToToken.get(name);
      if (id === undefined) continue;
      this.eog.add(id);
      this.attrs[id] |= ATTR_CONTROL;
    }
    for (const name of EXTRA_EOG_NAMES) {
      const id = this.textToToken.get(name);
      if (id !== undefined) this.eog.add(id);
    }

    const specials: { id: number; bytes: number }[] = [];
    for (let i = 0; i < n; i++) {
      if (this.attrs[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
        specials.push({ id: i, bytes: UTF8_ENCODER.encode(this.tokens[i]).length });
    }
    specials.sort((a, b) => b.bytes - a.bytes || a.id - b.id);
    this.specials = specials.map((s) => s.id);

    this.bpe = new BpeModel(n, init.merges, this.textToToken);
    this.pieceCache = new Array<Uint8Array | undefined>(n);
  }

  /** Build from GGUF metadata; a LatentError names what is missing or unsupported. */
  static fromMetadata(meta: Metadata): Tokenizer {
    const model = meta.string("tokenizer.ggml.model");
    if (model === undefined) throw new LatentError("tokenizer: the model has no tokenizer.ggml.model key");
    if (model !== "gpt2") {
      throw new LatentError(
        `tokenizer: tokenizer.ggml.model = "${model}" is not supported; latent implements "gpt2" (byte-level BPE), which all MLA model families use`,
      );
    }
    const tokens = meta.stringArray("tokenizer.ggml.tokens");
    if (tokens === undefined) throw new LatentError("tokenizer: missing tokenizer.ggml.tokens");
    const merges = meta.stringArray("tokenizer.ggml.merges");
    if (merges === undefined) throw new LatentError("tokenizer: missing tokenizer.ggml.merges (required for gpt2 BPE)");
    const pre = meta.string("tokenizer.ggml.pre") ?? "default";
    const id = (k: string): number | undefined => meta.integer(`tokenizer.ggml.${k}`);
    return new Tokenizer({
      tokens,
      tokenTypes: meta.numberArray("tokenizer.ggml.token_type"),
      merges,
      pre,
      bosId: id("bos_token_id"),
      eosId: id("eos_token_id"),
      eotId: id("eot_token_id"),
      eomId: id("eom_token_id"),
      unknownId: id("unknown_token_id"),
      paddingId: id("padding_token_id"),
      addBos: meta.bool("tokenizer.ggml.add_bos_token"),
      addEos: meta.bool("tokenizer.ggml.add_eos_token"),
      chatTemplate: meta.string("tokenizer.chat_template"),
    });
  }

  get vocabSize(): number {
    return this.tokens.length;
  }

  /** The raw vocabulary string of a token (byte-level characters for normal tokens). */
  tokenText(id: number): string {
    const t = this.tokens[id];
    if (t === undefined)
      throw new LatentError(`token id ${id} is outside the vocabulary (${this.tokens.length} tokens)`);
    return t;
  }

  /** Token id of an exact vocabulary string, if any. */
  tokenId(text: string): number | undefined {
    return this.textToToken.get(text);
  }

  isControl(id: number): boolean {
    return ((this.attrs[id] ?? 0) & (ATTR_CONTROL | ATTR_UNKNOWN)) !== 0;
  }

  /** eos, eot, eom, and the end-of-turn token names llama.cpp (and GLM) stop on. */
  isEndOfGeneration(id: number): boolean {
    return this.eog.has(id);
  }

  get endOfGenerationIds(): number[] {
    return [...this.eog].sort((a, b) => a - b);
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const addSpecial = opts.addSpecial ?? true;
    const parseSpecial = opts.parseSpecial ?? false;
    const out: number[] = [];
    if (addSpecial && this.addBos) {
      if (this.bosId === undefined)
        throw new LatentError("tokenizer: add_bos_token is true but the model has no bos_token_id");
      out.push(this.bosId);
    }
    if (text.length > 0) {
      for (const frag of this.partition(text, parseSpecial)) {
        if (typeof frag === "number") out.push(frag);
        else this.encodeText(frag, out);
      }
    }
    if (addSpecial && this.addEos) {
      if (this.eosId === undefined)
        throw new LatentError("tokenizer: add_eos_token is true but the model has no eos_token_id");
      out.push(this.eosId);
    }
    return out;
  }

  /** llama.cpp `tokenizer_st_partition`: each special token, longest first, splits every remaining text fragment. */
  private partition(text: string, parseSpecial: boolean): (string | number)[] {
    let frags: (string | number)[] = [text];
    for (const id of this.specials) {
      const attr = this.attrs[id];
      if (!parseSpecial && attr & (ATTR_CONTROL | ATTR_UNKNOWN)) continue;
      const st = this.tokens[id];
      let next: (string | number)[] | undefined;
      for (let f = 0; f < frags.length; f++) {
        const frag = frags[f];
        if (typeof frag === "number" || frag.indexOf(st) < 0) {
          next?.push(frag);
          continue;
        }
        next ??= frags.slice(0, f);
        let pos = 0;
        for (let m = frag.indexOf(st); m >= 0; m = frag.indexOf(st, pos)) {
          if (m > pos) next.push(frag.slice(pos, m));
          next.push(id);
          pos = m + st.length;
        }
        if (pos < frag.length) next.push(frag.slice(pos));
      }
      if (next !== undefined) frags = next;
    }
    return frags;
  }

  private encodeText(text: string, out: number[]): void {
    const cps = codePoints(text);
    let start = 0;
    for (const len of this.preTokenizer.split(cps)) {
      const word = byteLevelOf(cps, start, start + len);
      start += len;
      if (word.length > WORD_CACHE_MAX_LEN) {
        this.bpe.encodeWord(word, out);
        continue;
      }
      let ids = this.wordCache.get(word);
      if (ids === undefined) {
        const tmp: number[] = [];
        this.bpe.encodeWord(word, tmp);
        if (this.wordCache.size >= WORD_CACHE_LIMIT) this.wordCache.clear();
        this.wordCache.set(word, tmp);
        ids = tmp;
      }
      for (const id of ids) out.push(id);
    }
  }

  /** The bytes a token stands for (llama.cpp `token_to_piece`); empty for control tokens when skipSpecial. */
  tokenBytes(id: number, skipSpecial = false): Uint8Array {
    const attr = this.attrs[id];
    if (attr === undefined)
      throw new LatentError(`token id ${id} is outside the vocabulary (${this.tokens.length} tokens)`);
    if (skipSpecial && attr & (ATTR_CONTROL | ATTR_UNKNOWN)) return new Uint8Array(0);
    let piece = this.pieceCache[id];
    if (piece === undefined) {
      const text = this.tokens[id];
      if (attr & (ATTR_CONTROL | ATTR_UNKNOWN | ATTR_USER_DEFINED)) piece = this.utf8.encode(text);
      else if (attr & (ATTR_NORMAL | ATTR_BYTE)) piece = byteLevelDecode(text, this.utf8);
      else piece = new Uint8Array(0); // unused / undefined types: suppressed, as llama.cpp does
      this.pieceCache[id] = piece;
    }
    return piece;
  }

  decode(ids: readonly number[], opts: DecodeOptions = {}): string {
    const skip = opts.skipSpecial ?? false;
    const parts: Uint8Array[] = [];
    let total = 0;
    for (const id of ids) {
      const p = this.tokenBytes(id, skip);
      parts.push(p);
      total += p.length;
    }
    const buf = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      buf.set(p, o);
      o += p.length;
    }
    return new TextDecoder("utf-8").decode(buf);
  }

  /** A decoder for streamed generation: holds incomplete UTF-8 sequences until the next token completes them. */
  createDecoder(opts: DecodeOptions = {}): StreamingDecoder {
    const skip = opts.skipSpecial ?? false;
    let dec = new TextDecoder("utf-8");
    return {
      push: (id: number): string => dec.decode(this.tokenBytes(id, skip), { stream: true }),
      flush: (): string => {
        const rest = dec.decode();
        dec = new TextDecoder("utf-8");
        return rest;
      },
    };
  }

  /** Render `tokenizer.chat_template` (Jinja) for the messages, under its budget (src/tokenizer/chat.ts). */
  renderChat(messages: readonly ChatMessage[], opts: RenderChatOptions = {}): string {
    return renderChatTemplate(this.template(), messages, this.chatOptions(opts));
  }

  /** renderChat without blocking the caller's event loop while the template renders (Node: in a worker thread). */
  renderChatAsync(messages: readonly ChatMessage[], opts: RenderChatOptions = {}): Promise<string> {
    return renderChatTemplateAsync(this.template(), messages, this.chatOptions(opts));
  }

  private template(): string {
    if (this.chatTemplate === undefined || this.chatTemplate === "") {
      throw new LatentError(
        "tokenizer: the model has no tokenizer.chat_template; pass a template explicitly or send raw text",
      );
    }
    return this.chatTemplate;
  }

  private chatOptions(opts: RenderChatOptions): RenderChatOptions {
    return {
      ...opts,
      bosToken: opts.bosToken ?? (this.bosId !== undefined ? this.tokens[this.bosId] : ""),
      eosToken: opts.eosToken ?? (this.eosId !== undefined ? this.tokens[this.eosId] : ""),
    };
  }

  /**
   * Tokenize a rendered chat prompt: special tokens are parsed, and BOS is added automatically only when the
   * rendered text does not already start with the BOS text (templates usually emit it themselves: no double BOS).
   */
  encodePrompt(rendered: string): number[] {
    const bosText = this.bosId !== undefined ? this.tokens[this.bosId] : undefined;
    const addSpecial = !(bosText !== undefined && rendered.startsWith(bosText));
    return this.encode(rendered, { addSpecial, parseSpecial: true });
  }

  /** renderChat + encodePrompt. */
  encodeChat(messages: readonly ChatMessage[], opts: RenderChatOptions = {}): number[] {
    return this.encodePrompt(this.renderChat(messages, opts));
  }

  /** renderChatAsync + encodePrompt (for servers: the event loop runs on while the template renders). */
  async encodeChatAsync(messages: readonly ChatMessage[], opts: RenderChatOptions = {}): Promise<number[]> {
    return this.encodePrompt(await this.renderChatAsync(messages, opts));
  }
}

/** Byte-level characters → bytes; a character outside the 256 (never in a well-formed vocabulary) keeps its UTF-8. */
function byteLevelDecode(text: string, utf8: TextEncoder): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    const b = c < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[c] : -1;
    if (b >= 0) out.push(b);
    else for (const x of utf8.encode(ch)) out.push(x);
  }
  return Uint8Array.from(out);
}
