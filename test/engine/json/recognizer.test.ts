// The JSON recognizer on its own (schema ANY): valid documents are viable at every split point and complete only at
// the end; invalid texts die at the first byte that breaks them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsonState, MAX_WHITESPACE, MAX_DEPTH } from "../../../src/engine/json/recognizer.js";
import { ANY, ANY_OBJECT } from "../../../src/engine/json/schema.js";

const start = (): JsonState => JsonState.start(ANY);
const enc = new TextEncoder();

const VALID = [
  '{"a": [1, 2.5, -0.5e+10, 0, -0, 1E3, 12e-2], "b": {"c": null, "d": true, "e": false}}',
  '"esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00"',
  '"unicode: é ü 中文 😀"',
  "[]",
  "{}",
  ' [ { } , [ ] , "" ] ',
  "-0.5e+10",
  "0",
  "null",
  '[[[["deep"]]]]',
];

test("every split point of a valid document is a viable prefix, complete only at the end", () => {
  for (const doc of VALID) {
    const bytes = enc.encode(doc.trimEnd());
    for (let i = 0; i <= bytes.length; i++) {
      const head = start().feed(bytes.subarray(0, i));
      assert.ok(head !== null, `${JSON.stringify(doc)} died at byte ${i}`);
      const whole = head.feed(bytes.subarray(i));
      assert.ok(whole?.complete, `${JSON.stringify(doc)} split at ${i}`);
      // a value is whole only at its end (a number's shorter prefixes are whole numbers too: not checked here)
      if (!/^-?\d/.test(doc) && i < bytes.length) assert.equal(head.complete, false, `${doc} complete at ${i}`);
    }
  }
});

test("invalid texts are refused", () => {
  const INVALID = [
    "{a:1}",
    "[1,]",
    "[,1]",
    "01",
    "-",
    "1.",
    "1e",
    ".5",
    "+1",
    '"\\x"',
    '"\\u12G4"',
    "tru",
    "nul l",
    '{"a" 1}',
    '{"a":1,}',
    "[1 2]",
    "}",
    '"a\nb"',
    "1 2",
    "{} {}",
  ];
  for (const text of INVALID) {
    const s = start().feedText(text);
    assert.ok(s === null || !s.complete, `accepted ${JSON.stringify(text)}`);
  }
  assert.equal(start().feedText("{a"), null);
  assert.equal(start().feedText("[1,]"), null);
  assert.equal(start().feedText("01"), null);
  assert.equal(start().feed(Uint8Array.of(0x22, 0xff)), null, "a byte that is never UTF-8");
  assert.equal(start().feed(Uint8Array.of(0x22, 0xc3, 0x41)), null, "a lead byte without its continuation");
});

test("numbers: prefixes of -0.5e+10 are viable, the whole is complete, and it may be cut only where a number ends", () => {
  const prefixes = ["-", "-0", "-0.", "-0.5", "-0.5e", "-0.5e+", "-0.5e+1", "-0.5e+10"];
  const completes = [false, true, false, true, false, false, true, true];
  prefixes.forEach((p, i) => assert.equal(start().feedText(p)!.complete, completes[i], p));
});

test("a partial UTF-8 character inside a string is viable, finished by the next token", () => {
  const e = enc.encode('"é"');
  const mid = start().feed(e.subarray(0, 2));
  assert.ok(mid !== null && !mid.complete);
  assert.ok(mid.feed(e.subarray(2))!.complete);
});

test("whitespace is bounded so a model cannot loop on spaces", () => {
  assert.ok(start().feedText(" ".repeat(MAX_WHITESPACE) + "1") !== null);
  assert.equal(start().feedText(" ".repeat(MAX_WHITESPACE + 1)), null);
  assert.equal(start().feedText("[" + " ".repeat(MAX_WHITESPACE + 1)), null);
  assert.equal(start().feedText("{}" + " "), null, "nothing after the value: the end-of-generation token ends it");
});

test("nesting is bounded", () => {
  assert.ok(start().feedText("[".repeat(MAX_DEPTH)) !== null);
  assert.equal(start().feedText("[".repeat(MAX_DEPTH + 1)), null);
});

test("json_object mode: the top value must be an object", () => {
  assert.equal(JsonState.start(ANY_OBJECT).feedText("[1]"), null);
  assert.equal(JsonState.start(ANY_OBJECT).feedText('"x"'), null);
  assert.ok(JsonState.start(ANY_OBJECT).feedText('{"k": [1, {"z": null}]}')!.complete);
});
