/**
 * Code point classification as llama.cpp's `unicode.cpp` sees it, and the GPT-2 byte ↔ unicode map.
 *
 * llama.cpp classifies code points with its own tables (general category → one flag; a fixed whitespace set).
 * We derive the category from V8's Unicode property escapes (same Unicode general categories; the Unicode
 * version may differ by a release for newly assigned code points) and copy the whitespace set verbatim.
 */

export const FLAG_UNDEFINED = 0x0001;
export const FLAG_NUMBER = 0x0002;
export const FLAG_LETTER = 0x0004;
export const FLAG_SEPARATOR = 0x0008;
export const FLAG_MARK = 0x0010;
export const FLAG_PUNCTUATION = 0x0020;
export const FLAG_SYMBOL = 0x0040;
export const FLAG_CONTROL = 0x0080;
export const FLAG_WHITESPACE = 0x0100;

const COMPUTED = 0x8000;
const MAX_CODEPOINT = 0x110000;

/** llama.cpp `unicode_set_whitespace` (the Unicode White_Space property). */
const WHITESPACE = new Set<number>([
  0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
  0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
]);

const CATEGORY_RE = /^(?:(\p{L})|(\p{N})|(\p{P})|(\p{M})|(\p{S})|(\p{Z})|(\p{Cn}))$/u;

let flagCache: Uint16Array | undefined;

/** llama.cpp `unicode_cpt_flags_from_cpt(cp).as_uint()`: one category flag plus FLAG_WHITESPACE. Never 0 for a code point. */
export function cpFlags(cp: number): number {
  if (cp < 0 || cp >= MAX_CODEPOINT) return FLAG_UNDEFINED;
  const cache = (flagCache ??= new Uint16Array(MAX_CODEPOINT));
  const cached = cache[cp];
  if (cached !== 0) return cached & ~COMPUTED;
  let flags: number;
  if (cp >= 0xd800 && cp <= 0xdfff) {
    flags = FLAG_CONTROL; // Cs
  } else {
    const m = CATEGORY_RE.exec(String.fromCodePoint(cp));
    if (m === null)
      flags = FLAG_CONTROL; // Cc, Cf, Co
    else if (m[1] !== undefined) flags = FLAG_LETTER;
    else if (m[2] !== undefined) flags = FLAG_NUMBER;
    else if (m[3] !== undefined) flags = FLAG_PUNCTUATION;
    else if (m[4] !== undefined) flags = FLAG_MARK;
    else if (m[5] !== undefined) flags = FLAG_SYMBOL;
    else if (m[6] !== undefined) flags = FLAG_SEPARATOR;
    else flags = FLAG_UNDEFINED;
  }
  if (WHITESPACE.has(cp)) flags |= FLAG_WHITESPACE;
  cache[cp] = flags | COMPUTED;
  return flags;
}

export function isLetter(cp: number): boolean {
  return (cpFlags(cp) & FLAG_LETTER) !== 0;
}

export function isNumber(cp: number): boolean {
  return (cpFlags(cp) & FLAG_NUMBER) !== 0;
}

export function isWhitespace(cp: number): boolean {
  return WHITESPACE.has(cp);
}

/** llama.cpp `unicode_cpt_is_han`. */
export function isHan(cp: number): boolean {
  return (
    (cp >= 0x4e00 && cp <= 0x9fff) ||
    (cp >= 0x3400 && cp <= 0x4dbf) ||
    (cp >= 0x20000 && cp <= 0x2a6df) ||
    (cp >= 0x2a700 && cp <= 0x2b73f) ||
    (cp >= 0x2b740 && cp <= 0x2b81f) ||
    (cp >= 0x2b820 && cp <= 0x2ceaf) ||
    (cp >= 0x2ceb0 && cp <= 0x2ebef) ||
    (cp >= 0xf900 && cp <= 0xfaff) ||
    (cp >= 0x2f800 && cp <= 0x2fa1f)
  );
}

/** ASCII-only lower-casing is all the contraction rules need (no non-ASCII code point lower-cases to s/t/m/d/r/v/e/l). */
export function asciiLower(cp: number): number {
  return cp >= 0x41 && cp <= 0x5a ? cp + 32 : cp;
}

/**
 * llama.cpp's "collapsed" code for a code point: ASCII stays itself; any other code point becomes one byte standing
 * for its class (0x0B whitespace, 0xD1 number, 0xD2 letter, 0xD3 punctuation, 0xD4 mark, 0xD5 symbol, 0xD0 other).
 */
export function collapsedCode(cp: number): number {
  if (cp < 128) return cp;
  const f = cpFlags(cp);
  if (f & FLAG_WHITESPACE) return 0x0b;
  switch (f & 0xff) {
    case FLAG_NUMBER:
      return 0xd1;
    case FLAG_LETTER:
      return 0xd2;
    case FLAG_PUNCTUATION:
      return 0xd3;
    case FLAG_MARK:
      return 0xd4;
    case FLAG_SYMBOL:
      return 0xd5;
    default:
      return 0xd0;
  }
}

/** Code points of a JS string; lone surrogates become U+FFFD (what the UTF-8 encoding handed to llama.cpp holds). */
export function codePoints(text: string): Uint32Array {
  const out = new Uint32Array(text.length);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        out[n++] = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
        continue;
      }
    }
    out[n++] = c >= 0xd800 && c <= 0xdfff ? 0xfffd : c;
  }
  return out.subarray(0, n);
}

// ---- GPT-2 byte-level map ----

function buildByteToChar(): string[] {
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const map = new Array<string>(256);
  for (const b of bs) map[b] = String.fromCharCode(b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (map[b] === undefined) map[b] = String.fromCharCode(256 + n++);
  }
  return map;
}

/** byte → its GPT-2 byte-level character (every one is a single UTF-16 unit, U+0021..U+0143). */
export const BYTE_TO_CHAR: readonly string[] = buildByteToChar();

/** char code of a byte-level character → byte, -1 where the char is not one of the 256. */
export const CHAR_TO_BYTE: Int16Array = (() => {
  const t = new Int16Array(0x144).fill(-1);
  BYTE_TO_CHAR.forEach((ch, b) => {
    t[ch.charCodeAt(0)] = b;
  });
  return t;
})();

/** UTF-8 bytes of code points [start, end) written as GPT-2 byte-level characters. */
export function byteLevelOf(cps: Uint32Array, start: number, end: number): string {
  let s = "";
  for (let i = start; i < end; i++) {
    const cp = cps[i];
    if (cp < 0x80) {
      s += BYTE_TO_CHAR[cp];
    } else if (cp < 0x800) {
      s += BYTE_TO_CHAR[0xc0 | (cp >> 6)] + BYTE_TO_CHAR[0x80 | (cp & 0x3f)];
    } else if (cp < 0x10000) {
      s += BYTE_TO_CHAR[0xe0 | (cp >> 12)] + BYTE_TO_CHAR[0x80 | ((cp >> 6) & 0x3f)] + BYTE_TO_CHAR[0x80 | (cp & 0x3f)];
    } else {
      s +=
        BYTE_TO_CHAR[0xf0 | (cp >> 18)] +
        BYTE_TO_CHAR[0x80 | ((cp >> 12) & 0x3f)] +
        BYTE_TO_CHAR[0x80 | ((cp >> 6) & 0x3f)] +
        BYTE_TO_CHAR[0x80 | (cp & 0x3f)];
    }
  }
  return s;
}
