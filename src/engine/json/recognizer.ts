import { ANY, ANY_OBJECT, MAX_VALUE_DEPTH, type SchemaNode } from "./schema.js";

/**
 * A byte-level pushdown recognizer of JSON text that matches a compiled schema (schema.ts). It reads UTF-8 bytes, not
 * characters, because a token may end inside a multi-byte character. A prefix is viable while at least one parse
 * (a stack of frames) survives; anyOf and numbers/literals that may end or go on make several parses, which are kept
 * side by side (at most MAX_PARSES). Stacks are immutable linked lists, so testing a token's bytes from the current
 * state allocates only the frames it changes and never disturbs the state.
 */

/**
 * Most whitespace bytes in one gap between tokens: a model must not spend its tokens on spaces (a small model left
 * 16 a gap wrote little else); compact JSON with ", " or a newline between tokens still fits.
 */
export const MAX_WHITESPACE = 2;
/** Longest number, in bytes. */
export const MAX_NUMBER_BYTES = 32;
/** Deepest nesting of objects and arrays in the generated value (the schema compiler refuses schemas that need more). */
export const MAX_DEPTH = MAX_VALUE_DEPTH;
/** Most parses kept side by side; extra ones are dropped (what remains still only accepts valid text). */
export const MAX_PARSES = 64;

type ObjectNode = SchemaNode & { k: "object" };
type ArrayNode = SchemaNode & { k: "array" };

/** Object states: 0 after '{', 1 after a key (':' next), 2 in a value, 3 after a value, 4 after ',', 5 in a key. */
type Frame =
  | { readonly t: "root"; readonly done: boolean }
  | { readonly t: "value"; readonly node: SchemaNode; readonly ws: number }
  | {
      readonly t: "lit";
      readonly texts: readonly Uint8Array[];
      readonly names: readonly string[];
      readonly pos: number;
    }
  | {
      readonly t: "str";
      readonly min: number;
      readonly max: number;
      readonly len: number;
      readonly esc: boolean;
      readonly hex: number;
      readonly utf8: number;
    }
  | { readonly t: "num"; readonly integer: boolean; readonly st: number; readonly n: number }
  | {
      readonly t: "obj";
      readonly node: ObjectNode;
      readonly st: number;
      readonly seen: readonly string[];
      readonly key: string;
      readonly ws: number;
    }
  | { readonly t: "arr"; readonly node: ArrayNode; readonly st: number; readonly count: number; readonly ws: number };

interface Stack {
  readonly f: Frame;
  readonly below: Stack | null;
  readonly depth: number;
}

const push = (below: Stack | null, f: Frame): Stack => ({
  f,
  below,
  depth: below === null ? 0 : below.depth + (f.t === "obj" || f.t === "arr" ? 1 : 0),
});
const replace = (s: Stack, f: Frame): Stack => ({ f, below: s.below, depth: s.depth });

const isWs = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number): boolean => b >= 0x30 && b <= 0x39;
const isHex = (b: number): boolean => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
const QUOTE = 0x22;
const utf8 = new TextEncoder();

/** Number states that end a complete number. */
const NUMBER_ENDS = new Set([2, 3, 5, 8]);

/** Whether `s`'s top frame may end here (a number or literal that could also go on). */
function canEnd(f: Frame): boolean {
  if (f.t === "num") return NUMBER_ENDS.has(f.st);
  if (f.t === "lit") return f.texts.some((t) => t.length === f.pos);
  return false;
}

/** The stack after its top frame finished, `name` being the key a key frame matched. */
function pop(s: Stack, name: string): Stack | null {
  const below = s.below!;
  const p = below.f;
  if (p.t === "root") return replace(below, { t: "root", done: true });
  if (p.t === "obj") {
    if (p.st === 5) return replace(below, { ...p, st: 1, key: name, ws: 0 });
    return replace(below, { ...p, st: 3, seen: p.node.props === null ? p.seen : [...p.seen, p.key], ws: 0 });
  }
  if (p.t === "arr") return replace(below, { ...p, st: 1, count: p.count + 1, ws: 0 });
  return null;
}

/** Keys an object may still take (null: any key). */
function keysLeft(f: Frame & { t: "obj" }): string[] | null {
  if (f.node.props === null) return null;
  return [...f.node.props.keys()].filter((k) => !f.seen.includes(k));
}

function requiredMet(f: Frame & { t: "obj" }): boolean {
  for (const r of f.node.required) if (!f.seen.includes(r)) return false;
  return true;
}

/** A frame that starts at a key's opening quote, fed that quote. */
function startKey(s: Stack, f: Frame & { t: "obj" }, out: Stack[]): void {
  const obj = replace(s, { ...f, st: 5, ws: 0 });
  const keys = keysLeft(f);
  if (keys === null) out.push(push(obj, { t: "str", min: 0, max: Infinity, len: 0, esc: false, hex: 0, utf8: 0 }));
  else if (keys.length > 0) {
    const texts = keys.map((k) => utf8.encode(JSON.stringify(k)));
    out.push(push(obj, { t: "lit", texts, names: keys, pos: 1 }));
  }
}

const ANY_ARRAY: SchemaNode = { k: "array", items: ANY, minItems: 0, maxItems: Infinity };
const ANY_STRING: SchemaNode = { k: "string", minLength: 0, maxLength: Infinity };
const ANY_NUMBER: SchemaNode = { k: "number", integer: false };
const ANY_LITERAL: SchemaNode = { k: "literal", texts: ["true", "false", "null"] };

/** A literal node's texts as UTF-8, encoded once per node (values start at every token tried from a value position). */
const literalCache = new WeakMap<SchemaNode, Uint8Array[]>();
function literalBytes(node: SchemaNode & { k: "literal" }): Uint8Array[] {
  let bytes = literalCache.get(node);
  if (bytes === undefined) literalCache.set(node, (bytes = node.texts.map((t) => utf8.encode(t))));
  return bytes;
}

/** Starts `node`'s value at byte `b` (not whitespace) on top of `below`, pushing the resulting stacks. */
function startValue(below: Stack | null, node: SchemaNode, b: number, out: Stack[]): void {
  switch (node.k) {
    case "ref":
      return startValue(below, node.target!, b, out);
    case "union":
      for (const alt of node.of) startValue(below, alt, b, out);
      return;
    case "any":
      if (b === 0x7b) return startValue(below, ANY_OBJECT, b, out);
      if (b === 0x5b) return startValue(below, ANY_ARRAY, b, out);
      if (b === QUOTE) return startValue(below, ANY_STRING, b, out);
      if (b === 0x2d || isDigit(b)) return startValue(below, ANY_NUMBER, b, out);
      return startValue(below, ANY_LITERAL, b, out);
    case "object":
      if (b === 0x7b && (below?.depth ?? 0) < MAX_DEPTH)
        out.push(push(below, { t: "obj", node, st: 0, seen: [], key: "", ws: 0 }));
      return;
    case "array":
      if (b === 0x5b && (below?.depth ?? 0) < MAX_DEPTH)
        out.push(push(below, { t: "arr", node, st: 0, count: 0, ws: 0 }));
      return;
    case "string":
      if (b === QUOTE)
        out.push(
          push(below, { t: "str", min: node.minLength, max: node.maxLength, len: 0, esc: false, hex: 0, utf8: 0 }),
        );
      return;
    case "number":
      if (b === 0x2d) out.push(push(below, { t: "num", integer: node.integer, st: 1, n: 1 }));
      else if (isDigit(b)) out.push(push(below, { t: "num", integer: node.integer, st: b === 0x30 ? 2 : 3, n: 1 }));
      return;
    case "literal": {
      const texts = literalBytes(node).filter((t) => t[0] === b);
      if (texts.length === 0) return;
      const lit = { t: "lit", texts, names: texts.map(() => ""), pos: 1 } as const;
      const s = push(below, lit);
      // a one-byte literal (an enum of digits) may be complete already
      if (texts.every((t) => t.length === 1)) {
        const done = pop(s, "");
        if (done !== null) out.push(done);
      } else out.push(s);
    }
  }
}

/** Every stack that `s` becomes on reading byte `b`, pushed onto `out`. */
function step(s: Stack, b: number, out: Stack[]): void {
  const f = s.f;
  if (canEnd(f)) {
    const popped = pop(s, f.t === "lit" ? (f.names[f.texts.findIndex((t) => t.length === f.pos)] ?? "") : "");
    if (popped !== null) step(popped, b, out);
  }
  switch (f.t) {
    case "root":
      if (f.done) return; // nothing after the value, not even whitespace: the end is the end-of-generation token
      if (isWs(b)) return; // the value starts at once (a value frame on top handles leading whitespace)
      return;
    case "value":
      if (isWs(b)) {
        if (f.ws < MAX_WHITESPACE) out.push(replace(s, { ...f, ws: f.ws + 1 }));
        return;
      }
      return startValue(s.below, f.node, b, out);
    case "lit": {
      const keep: Uint8Array[] = [];
      const names: string[] = [];
      f.texts.forEach((t, i) => {
        if (t.length > f.pos && t[f.pos] === b) {
          keep.push(t);
          names.push(f.names[i]);
        }
      });
      if (keep.length === 0) return;
      const pos = f.pos + 1;
      const next = replace(s, { t: "lit", texts: keep, names, pos });
      // finished and nothing longer matches: hand the result up now
      if (keep.every((t) => t.length === pos)) {
        const done = pop(next, names[0]);
        if (done !== null) out.push(done);
      } else out.push(next);
      return;
    }
    case "str": {
      if (f.utf8 > 0) {
        if (b >= 0x80 && b <= 0xbf) out.push(replace(s, { ...f, utf8: f.utf8 - 1 }));
        return;
      }
      if (f.hex > 0) {
        if (isHex(b)) out.push(replace(s, { ...f, hex: f.hex - 1 }));
        return;
      }
      if (f.esc) {
        if (b === 0x75) out.push(replace(s, { ...f, esc: false, hex: 4 }));
        else if ('"\\/bfnrt'.includes(String.fromCharCode(b))) out.push(replace(s, { ...f, esc: false }));
        return;
      }
      if (b === QUOTE) {
        if (f.len >= f.min) {
          const done = pop(s, "");
          if (done !== null) out.push(done);
        }
        return;
      }
      if (b < 0x20 || f.len >= f.max) return;
      const len = f.len + 1;
      if (b === 0x5c) out.push(replace(s, { ...f, len, esc: true }));
      else if (b < 0x80) out.push(replace(s, { ...f, len }));
      else if (b >= 0xc2 && b <= 0xdf) out.push(replace(s, { ...f, len, utf8: 1 }));
      else if (b >= 0xe0 && b <= 0xef) out.push(replace(s, { ...f, len, utf8: 2 }));
      else if (b >= 0xf0 && b <= 0xf4) out.push(replace(s, { ...f, len, utf8: 3 }));
      return;
    }
    case "num": {
      if (f.n >= MAX_NUMBER_BYTES) return;
      const st = numberStep(f.st, b, f.integer);
      if (st >= 0) out.push(replace(s, { ...f, st, n: f.n + 1 }));
      return;
    }
    case "obj": {
      if (isWs(b)) {
        if (f.ws < MAX_WHITESPACE && f.st !== 2 && f.st !== 5) out.push(replace(s, { ...f, ws: f.ws + 1 }));
        return;
      }
      if (f.st === 0 || f.st === 4) {
        if (b === QUOTE) startKey(s, f, out);
        else if (b === 0x7d && f.st === 0 && requiredMet(f)) {
          const done = pop(s, "");
          if (done !== null) out.push(done);
        }
      } else if (f.st === 1) {
        if (b === 0x3a) {
          const valueNode = f.node.props?.get(f.key) ?? f.node.extra ?? ANY;
          out.push(push(replace(s, { ...f, st: 2, ws: 0 }), { t: "value", node: valueNode, ws: 0 }));
        }
      } else if (f.st === 3) {
        if (b === 0x2c) {
          const left = keysLeft(f);
          if (left === null || left.length > 0) out.push(replace(s, { ...f, st: 4, ws: 0 }));
        } else if (b === 0x7d && requiredMet(f)) {
          const done = pop(s, "");
          if (done !== null) out.push(done);
        }
      }
      return;
    }
    case "arr": {
      if (isWs(b)) {
        if (f.ws < MAX_WHITESPACE) out.push(replace(s, { ...f, ws: f.ws + 1 }));
        return;
      }
      const { minItems, maxItems, items } = f.node;
      if (b === 0x5d && (f.st === 0 || f.st === 1) && f.count >= minItems) {
        const done = pop(s, "");
        if (done !== null) out.push(done);
        return;
      }
      if (f.st === 1) {
        if (b === 0x2c && f.count < maxItems) out.push(replace(s, { ...f, st: 2, ws: 0 }));
        return;
      }
      // a value starts (st 0 or 2)
      if (f.count < maxItems) startValue(replace(s, { ...f, st: 3, ws: 0 }), items, b, out);
    }
  }
}

/** The JSON number grammar, one byte at a time: the next state, or -1. States as listed at NUMBER_ENDS. */
function numberStep(st: number, b: number, integer: boolean): number {
  const digit = isDigit(b);
  const dot = b === 0x2e && !integer;
  const exp = (b === 0x65 || b === 0x45) && !integer;
  switch (st) {
    case 1:
      return b === 0x30 ? 2 : digit ? 3 : -1; // after '-'
    case 2:
      return dot ? 4 : exp ? 6 : -1; // after a leading 0
    case 3:
      return digit ? 3 : dot ? 4 : exp ? 6 : -1; // integer digits
    case 4:
      return digit ? 5 : -1; // after '.'
    case 5:
      return digit ? 5 : exp ? 6 : -1; // fraction digits
    case 6:
      return b === 0x2b || b === 0x2d ? 7 : digit ? 8 : -1; // after 'e'
    case 7:
      return digit ? 8 : -1; // after the exponent's sign
    case 8:
      return digit ? 8 : -1; // exponent digits
    default:
      return -1;
  }
}

/** Whether some parse in `stacks` is a complete value. */
function anyComplete(stacks: readonly Stack[]): boolean {
  for (const s of stacks) {
    if (s.f.t === "root" && s.f.done) return true;
    if (canEnd(s.f) && s.below?.f.t === "root") return true;
  }
  return false;
}

/** The set of parses a prefix leaves; immutable, so a token can be tried from it without copying. */
export class JsonState {
  private constructor(private readonly stacks: readonly Stack[]) {}

  /** The state before any byte: a value of `node` (with leading whitespace allowed). */
  static start(node: SchemaNode): JsonState {
    return new JsonState([push(push(null, { t: "root", done: false }), { t: "value", node, ws: 0 })]);
  }

  /** The state after `bytes`, or null when they make the prefix invalid. */
  feed(bytes: Uint8Array): JsonState | null {
    let cur: Stack[] = this.stacks as Stack[];
    for (const b of bytes) {
      const next: Stack[] = [];
      for (const s of cur) {
        step(s, b, next);
        if (next.length >= MAX_PARSES) break;
      }
      if (next.length === 0) return null;
      cur = next.length > MAX_PARSES ? next.slice(0, MAX_PARSES) : next;
    }
    return new JsonState(cur);
  }

  /** As feed, for text. */
  feedText(text: string): JsonState | null {
    return this.feed(utf8.encode(text));
  }

  /** Whether the text so far is a whole value matching the schema. */
  get complete(): boolean {
    return anyComplete(this.stacks);
  }

  /** Whether any byte at all may follow (false once a closed value ends the text). */
  get canContinue(): boolean {
    return this.stacks.some((s) => !(s.f.t === "root" && s.f.done));
  }
}
