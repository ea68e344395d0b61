/**
 * Pre-tokenizers: split text (as code points) into the pieces that BPE then works on, exactly as llama.cpp's
 * `unicode_regex_split` does for the `tokenizer.ggml.pre` types of the MLA model families.
 *
 * llama.cpp applies a list of regexes in order. Each one isolates its matches; the gaps stay as pieces of their own,
 * and the next regex runs inside every piece separately. How llama.cpp runs one regex decides the result, so we
 * reproduce its mechanics, not just the regex text:
 * - a regex that uses `\p{N}`, `\p{L}`, `\p{P}`, `\p{M}` or `\p{S}` runs on the "collapsed" text, where every non-ASCII
 *   code point is replaced by one byte naming its class (see `collapsedCode`), and each `\p{X}` becomes
 *   `[<class byte><ASCII members>]`;
 * - any other regex runs on the code points, with non-ASCII whitespace replaced by U+000B;
 * - in both cases `\s` is std::regex's ASCII `[\t\n\v\f\r ]` (JS's `\s` would also take U+FEFF);
 * - the llama3-style regex (used by `glm4` / `chatglm-bpe`) and Kimi-K2's are not run as regexes at all by
 *   llama.cpp but by hand-written splitters (`unicode_regex_split_custom_llama3` / `_kimi_k2`), ported below.
 */
import { LatentError } from "../util/errors.js";
import {
  asciiLower,
  codePoints,
  collapsedCode,
  cpFlags,
  FLAG_LETTER,
  FLAG_NUMBER,
  FLAG_WHITESPACE,
  isHan,
} from "./unicode.js";

/**
 * The regex lists of the reference (mla-models.md §9), checked code point for code point against llama.cpp's
 * llama-vocab.cpp. The reference's copy of the deepseek-llm letter class went through NFC normalization: six
 * characters (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) became their canonical equivalents, which makes
 * `ῐ-ΐ` an out-of-order range. They, and every astral character, are written as `\u{…}` escapes here so that no
 * editor can normalize them again.
 *
 * Other `tokenizer.ggml.pre` values (`default`, `qwen2`, `llama-bpe`, …) are refused with a LatentError rather than
 * approximated: a wrong pre-tokenizer silently yields different ids from the ones the model was trained on.
 */
export const PRE_TOKENIZER_REGEXES: Readonly<Record<string, readonly string[]>> = {
  "deepseek-llm": [
    String.raw`[\r\n]`,
    String.raw`\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1F7D}ᾀ-ᾴᾶ-ᾼ\u{1FBE}ῂ-ῄῆ-ῌῐ-\u{1FD3}ῖ-\u{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+`,
    String.raw`\s?[!-/:-~！-／：-～‘-‟　-。]+`,
    String.raw`\s+$`,
    String.raw`[一-龥ࠀ-一가-퟿]+`,
    String.raw`\p{N}+`,
  ],
  "deepseek-v3": [
    String.raw`\p{N}{1,3}`,
    String.raw`[一-龥぀-ゟ゠-ヿ]+`,
    String.raw`[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` +
      "`" +
      String.raw`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  ],
  glm4: [
    String.raw`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  ],
  // llama.cpp: a trigger pattern; the whole Kimi-K2 regex is implemented by its custom splitter
  "kimi-k2": [String.raw`\p{Han}+`],
};

/** `tokenizer.ggml.pre` values we implement, and the regex list each one uses. */
export const PRE_TOKENIZER_ALIASES: Readonly<Record<string, string>> = {
  "deepseek-llm": "deepseek-llm",
  "deepseek-v3": "deepseek-v3",
  glm4: "glm4",
  "chatglm-bpe": "glm4",
  "kimi-k2": "kimi-k2",
};

const LLAMA3_REGEX = PRE_TOKENIZER_REGEXES["glm4"][0];
const KIMI_K2_TRIGGER = String.raw`\p{Han}+`;

type Step =
  | { readonly kind: "regex"; readonly re: RegExp; readonly collapsed: boolean; readonly source: string }
  | { readonly kind: "llama3" }
  | { readonly kind: "kimi-k2" };

// ---- regex translation (llama.cpp's collapse, in JS syntax) ----

const CATEGORY_CODE: Readonly<Record<string, number>> = {
  N: 0xd1,
  L: 0xd2,
  Lu: 0xd2,
  Ll: 0xd2,
  Lt: 0xd2,
  Lm: 0xd2,
  Lo: 0xd2,
  P: 0xd3,
  M: 0xd4,
  S: 0xd5,
};
const CATEGORY_ASCII: Readonly<Record<number, string>> = {
  209: "0-9",
  210: "A-Za-z",
  211: String.raw`!-#%-*,-\/:-;?-@\[-\]_\{\}`,
  212: "",
  213: String.raw`\$\+<->\^` + "\\`" + String.raw`\|~`,
};
const WS_CLASS_BODY = String.raw`\t\n\v\f\r `;
const CATEGORY_TEST = /\\p\{(?:N|L|P|M|S|Lu|Ll|Lt|Lm|Lo)\}/;

/** Translate one llama.cpp regex into the JS regex that behaves as llama.cpp runs it. */
export function translateRegex(source: string): { re: RegExp; collapsed: boolean } {
  const collapsed = CATEGORY_TEST.test(source);
  let out = "";
  let inside = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\") {
      const n = source[i + 1];
      if (n === "p" && source[i + 2] === "{") {
        const close = source.indexOf("}", i + 3);
        const name = close < 0 ? "" : source.slice(i + 3, close);
        const code = CATEGORY_CODE[name];
        if (code === undefined)
          throw new LatentError(`pre-tokenizer regex uses \\p{${name}}, which llama.cpp does not support: ${source}`);
        const body = String.fromCharCode(code) + CATEGORY_ASCII[code];
        out += inside ? body : `[${body}]`;
        i = close;
        continue;
      }
      if (n === "s") {
        out += inside ? WS_CLASS_BODY : `[${WS_CLASS_BODY}]`;
        i++;
        continue;
      }
      if (n === "S") {
        if (inside) throw new LatentError(`pre-tokenizer regex uses \\S inside a character class: ${source}`);
        out += `[^${WS_CLASS_BODY}]`;
        i++;
        continue;
      }
      out += c + (n ?? "");
      i++;
      continue;
    }
    if (c === "[" && !inside) inside = true;
    else if (c === "]" && inside) inside = false;
    out += c;
  }
  if (collapsed) {
    for (const ch of source) {
      if (ch.codePointAt(0)! >= 128)
        throw new LatentError(
          `pre-tokenizer regex mixes unicode categories and non-ASCII characters (llama.cpp refuses it too): ${source}`,
        );
    }
  }
  return { re: new RegExp(out, collapsed ? "g" : "gu"), collapsed };
}

// ---- splitting ----

interface SplitContext {
  readonly cps: Uint32Array;
  collapsed?: string;
  wide?: { text: string; cpToUnit: Int32Array | undefined; unitToCp: Int32Array | undefined };
}

function collapsedText(ctx: SplitContext): string {
  if (ctx.collapsed === undefined) {
    const codes = new Uint16Array(ctx.cps.length);
    for (let i = 0; i < ctx.cps.length; i++) codes[i] = collapsedCode(ctx.cps[i]);
    let s = "";
    for (let i = 0; i < codes.length; i += 8192) s += String.fromCharCode(...codes.subarray(i, i + 8192));
    ctx.collapsed = s;
  }
  return ctx.collapsed;
}

function wideText(ctx: SplitContext): NonNullable<SplitContext["wide"]> {
  if (ctx.wide === undefined) {
    const cps = ctx.cps;
    let astral = false;
    const parts: string[] = [];
    for (let i = 0; i < cps.length; i++) {
      let cp = cps[i];
      if (cp > 0x7f && cpFlags(cp) & FLAG_WHITESPACE) cp = 0x0b;
      if (cp > 0xffff) astral = true;
      parts.push(String.fromCodePoint(cp));
    }
    const text = parts.join("");
    let cpToUnit: Int32Array | undefined;
    let unitToCp: Int32Array | undefined;
    if (astral) {
      cpToUnit = new Int32Array(cps.length + 1);
      unitToCp = new Int32Array(text.length + 1);
      let u = 0;
      for (let i = 0; i < cps.length; i++) {
        cpToUnit[i] = u;
        unitToCp[u] = i;
        u += cps[i] > 0xffff ? 2 : 1;
        if (cps[i] > 0xffff) unitToCp[u - 1] = i;
      }
      cpToUnit[cps.length] = u;
      unitToCp[u] = cps.length;
    }
    ctx.wide = { text, cpToUnit, unitToCp };
  }
  return ctx.wide;
}

function splitRegex(step: Extract<Step, { kind: "regex" }>, ctx: SplitContext, offsets: readonly number[]): number[] {
  const out: number[] = [];
  const re = step.re;
  let start = 0;
  if (step.collapsed) {
    const text = collapsedText(ctx);
    for (const len of offsets) {
      const seg = text.slice(start, start + len);
      re.lastIndex = 0;
      let prev = 0;
      for (let m = re.exec(seg); m !== null; m = re.exec(seg)) {
        if (m[0].length === 0) {
          re.lastIndex++;
          continue;
        }
        if (m.index > prev) out.push(m.index - prev);
        out.push(m[0].length);
        prev = m.index + m[0].length;
      }
      if (prev < len) out.push(len - prev);
      start += len;
    }
    return out;
  }
  const wide = wideText(ctx);
  for (const len of offsets) {
    const u0 = wide.cpToUnit ? wide.cpToUnit[start] : start;
    const u1 = wide.cpToUnit ? wide.cpToUnit[start + len] : start + len;
    const seg = wide.text.slice(u0, u1);
    const toCp = (unit: number): number => (wide.unitToCp ? wide.unitToCp[u0 + unit] - start : unit);
    re.lastIndex = 0;
    let prev = 0;
    for (let m = re.exec(seg); m !== null; m = re.exec(seg)) {
      if (m[0].length === 0) {
        re.lastIndex += 1;
        continue;
      }
      const a = toCp(m.index);
      const b = toCp(m.index + m[0].length);
      if (a > prev) out.push(a - prev);
      out.push(b - a);
      prev = b;
    }
    if (prev < len) out.push(len - prev);
    start += len;
  }
  return out;
}

const OUT_OF_RANGE = 0xffffffff;

/** Port of llama.cpp `unicode_regex_split_custom_llama3` (the llama3 / glm4 regex, with llama.cpp's whitespace set). */
function splitLlama3(cps: Uint32Array, offsets: readonly number[]): number[] {
  const out: number[] = [];
  let start = 0;
  for (const offset of offsets) {
    const ini = start;
    const end = start + offset;
    start = end;
    const cpt = (pos: number): number => (pos >= ini && pos < end ? cps[pos] : OUT_OF_RANGE);
    const flags = (pos: number): number => (pos >= ini && pos < end ? cpFlags(cps[pos]) : 0);
    let prevEnd = ini;
    const add = (e: number): number => {
      const len = e - prevEnd;
      if (len > 0) out.push(len);
      prevEnd = e;
      return len;
    };
    for (let pos = ini; pos < end; ) {
      const c = cpt(pos);
      const f = flags(pos);
      // (?i:'s|'t|'re|'ve|'m|'ll|'d)
      if (c === 0x27 && pos + 1 < end) {
        const n1 = asciiLower(cpt(pos + 1));
        if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) {
          pos += add(pos + 2);
          continue;
        }
        if (pos + 2 < end) {
          const n2 = asciiLower(cpt(pos + 2));
          if ((n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) || (n1 === 0x6c && n2 === 0x6c)) {
            pos += add(pos + 3);
            continue;
          }
        }
      }
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (!(c === 0x0d || c === 0x0a || f & FLAG_NUMBER)) {
        if (f & FLAG_LETTER || flags(pos + 1) & FLAG_LETTER) {
          pos++;
          while (flags(pos) & FLAG_LETTER) pos++;
          add(pos);
          continue;
        }
      }
      // \p{N}{1,3}
      if (f & FLAG_NUMBER) {
        let i0 = pos;
        while (flags(pos) & FLAG_NUMBER) {
          if (++pos - i0 >= 3) {
            add(pos);
            i0 = pos;
          }
        }
        add(pos);
        continue;
      }
      // <space>?[^\s\p{L}\p{N}]+[\r\n]*
      let f2 = c === 0x20 ? flags(pos + 1) : f;
      if (!(f2 & (FLAG_WHITESPACE | FLAG_LETTER | FLAG_NUMBER)) && f !== 0) {
        pos += c === 0x20 ? 1 : 0;
        while (!(f2 & (FLAG_WHITESPACE | FLAG_LETTER | FLAG_NUMBER)) && f2 !== 0) f2 = flags(++pos);
        let c2 = cpt(pos);
        while (c2 === 0x0d || c2 === 0x0a) c2 = cpt(++pos);
        add(pos);
        continue;
      }
      let nws = 0;
      let lastRN = 0;
      while (flags(pos + nws) & FLAG_WHITESPACE) {
        const c2 = cpt(pos + nws);
        if (c2 === 0x0d || c2 === 0x0a) lastRN = pos + nws + 1;
        nws++;
      }
      // \s*[\r\n]+
      if (lastRN > 0) {
        pos = lastRN;
        add(pos);
        continue;
      }
      // \s+(?!\S)
      if (nws > 1 && cpt(pos + nws) !== OUT_OF_RANGE) {
        pos += nws - 1;
        add(pos);
        continue;
      }
      // \s+
      if (nws > 0) {
        pos += nws;
        add(pos);
        continue;
      }
      add(++pos);
    }
  }
  return out;
}

/** Port of llama.cpp `unicode_regex_split_custom_kimi_k2`. */
function splitKimiK2(cps: Uint32Array, offsets: readonly number[]): number[] {
  const out: number[] = [];
  let start = 0;
  for (const offset of offsets) {
    const ini = start;
    const end = start + offset;
    start = end;
    const cpt = (pos: number): number => (pos >= ini && pos < end ? cps[pos] : OUT_OF_RANGE);
    const flags = (pos: number): number => (pos >= ini && pos < end ? cpFlags(cps[pos]) : 0);
    const letterNotHan = (pos: number): boolean => (flags(pos) & FLAG_LETTER) !== 0 && !isHan(cpt(pos));
    let prevEnd = ini;
    const add = (e: number): number => {
      const len = e - prevEnd;
      if (len > 0) out.push(len);
      prevEnd = e;
      return len;
    };
    for (let pos = ini; pos < end; ) {
      const c = cpt(pos);
      const f = flags(pos);
      // [\p{Han}]+
      if (isHan(c)) {
        while (isHan(cpt(pos))) pos++;
        add(pos);
        continue;
      }
      // letter words (Han excluded) with an optional leading char and optional contraction
      const leadable = !(c === 0x0d || c === 0x0a || f & FLAG_LETTER || f & FLAG_NUMBER);
      if (((f & FLAG_LETTER) !== 0 && !isHan(c)) || (leadable && letterNotHan(pos + 1))) {
        let hasLeading = false;
        if (leadable) {
          hasLeading = true;
          pos++;
        }
        let hasLetters = false;
        while (letterNotHan(pos)) {
          hasLetters = true;
          pos++;
        }
        if (hasLetters || (!hasLeading && letterNotHan(pos))) {
          if (!hasLetters) pos++;
          while (letterNotHan(pos)) pos++;
          if (cpt(pos) === 0x27 && pos + 1 < end) {
            const n1 = asciiLower(cpt(pos + 1));
            if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) {
              pos += 2;
            } else if (pos + 2 < end) {
              const n2 = asciiLower(cpt(pos + 2));
              if ((n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) || (n1 === 0x6c && n2 === 0x6c))
                pos += 3;
            }
          }
          add(pos);
          continue;
        } else if (hasLeading) {
          pos--;
        }
      }
      // \p{N}{1,3}
      if (f & FLAG_NUMBER) {
        let i0 = pos;
        while (flags(pos) & FLAG_NUMBER) {
          if (++pos - i0 >= 3) {
            add(pos);
            i0 = pos;
          }
        }
        add(pos);
        continue;
      }
      //  ?[^\s\p{L}\p{N}]+[\r\n]*
      let f2 = c === 0x20 ? flags(pos + 1) : f;
      if (!(f2 & (FLAG_WHITESPACE | FLAG_LETTER | FLAG_NUMBER)) && f2 !== 0) {
        pos += c === 0x20 ? 1 : 0;
        while (!(f2 & (FLAG_WHITESPACE | FLAG_LETTER | FLAG_NUMBER)) && f2 !== 0) f2 = flags(++pos);
        let c2 = cpt(pos);
        while (c2 === 0x0d || c2 === 0x0a) c2 = cpt(++pos);
        add(pos);
        continue;
      }
      let nws = 0;
      let lastRN = 0;
      while (flags(pos + nws) & FLAG_WHITESPACE) {
        const c2 = cpt(pos + nws);
        if (c2 === 0x0d || c2 === 0x0a) lastRN = pos + nws + 1;
        nws++;
      }
      if (lastRN > 0) {
        pos = lastRN;
        add(pos);
        continue;
      }
      if (nws > 1 && cpt(pos + nws) !== OUT_OF_RANGE) {
        pos += nws - 1;
        add(pos);
        continue;
      }
      if (nws > 0) {
        pos += nws;
        add(pos);
        continue;
      }
      add(++pos);
    }
  }
  return out;
}

/** A compiled pre-tokenizer: `split` returns the piece lengths (in code points) of the text. */
export class PreTokenizer {
  private readonly steps: readonly Step[];

  /**
   * @param regexes llama.cpp-style regex list; the llama3 regex and Kimi-K2's trigger pattern select the ported
   *   hand-written splitters, as in llama.cpp. `generic: true` runs even those as translated regexes (used by tests
   *   to cross-check the ports).
   */
  constructor(
    readonly name: string,
    readonly regexes: readonly string[],
    opts: { generic?: boolean } = {},
  ) {
    this.steps = regexes.map((source): Step => {
      if (!opts.generic && source === LLAMA3_REGEX) return { kind: "llama3" };
      if (source === KIMI_K2_TRIGGER) return { kind: "kimi-k2" };
      return { kind: "regex", source, ...translateRegex(source) };
    });
  }

  /** The pre-tokenizer of a `tokenizer.ggml.pre` value; a LatentError for the ones latent does not implement. */
  static forPre(pre: string): PreTokenizer {
    const key = PRE_TOKENIZER_ALIASES[pre];
    if (key === undefined) {
      throw new LatentError(
        `unsupported pre-tokenizer tokenizer.ggml.pre = "${pre}": latent implements ${Object.keys(PRE_TOKENIZER_ALIASES)
          .map((k) => `"${k}"`)
          .join(", ")} (the MLA model families); other values would silently tokenize differently from llama.cpp`,
      );
    }
    return new PreTokenizer(pre, PRE_TOKENIZER_REGEXES[key]);
  }

  /** Piece lengths in code points; they sum to cps.length. */
  split(cps: Uint32Array): number[] {
    if (cps.length === 0) return [];
    let offsets: number[] = [cps.length];
    const ctx: SplitContext = { cps };
    for (const step of this.steps) {
      if (step.kind === "llama3") offsets = splitLlama3(cps, offsets);
      else if (step.kind === "kimi-k2") offsets = splitKimiK2(cps, offsets);
      else offsets = splitRegex(step, ctx, offsets);
    }
    return offsets;
  }

  /** The pieces as strings (for tests and debugging). */
  splitText(text: string): string[] {
    const cps = codePoints(text);
    const out: string[] = [];
    let start = 0;
    for (const len of this.split(cps)) {
      out.push(String.fromCodePoint(...cps.subarray(start, start + len)));
      start += len;
    }
    return out;
  }
}
