/**
 * Strings from a file (architecture, tensor and key names, metadata values) are printed through `printable` so that a
 * hostile file cannot break a one-line error into two, move the cursor, or send terminal escape sequences (a window
 * title, a hyperlink). C0 and C1 control characters, DEL, and the bidirectional-override and isolate marks (which
 * reorder what the reader sees) are written as escapes; everything else, other scripts and emoji included, is kept.
 */

const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const UNSAFE_BUT_NEWLINE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function escapeChar(ch: string): string {
  const code = ch.charCodeAt(0);
  switch (ch) {
    case "\n":
      return "\\n";
    case "\r":
      return "\\r";
    case "\t":
      return "\\t";
  }
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** `s` with every control character escaped (`\n`, `\x1b`, `\u202e`): safe to print as (part of) one line. */
export function printable(s: string): string {
  return s.replace(UNSAFE, escapeChar);
}

/** As `printable`, but line breaks are kept: for text whose lines we composed (a usage message with its help). */
export function printableLines(s: string): string {
  return s.replace(UNSAFE_BUT_NEWLINE, escapeChar);
}

/** A name a client or file chose, for an error message: `printable`, and cut to `max` characters. */
export function shownName(s: string, max = 64): string {
  return printable(s.length > max ? `${s.slice(0, max)}…` : s);
}
