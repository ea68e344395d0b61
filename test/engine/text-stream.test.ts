// The text stream that generate and the scheduler share: stop strings found across token boundaries, text that may
// start a stop string held back, incomplete UTF-8 held by the decoder, and what is held back released at the end.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { StreamingDecoder } from "../../src/tokenizer/index.js";
import { GeneratedText, TextStream } from "../../src/engine/text-stream.js";

/**
 * A byte-level streaming decoder as the tokenizer's (TextDecoder in stream mode: an incomplete UTF-8 sequence waits
 * for its next bytes; flush turns what is left into U+FFFD): token i is `pieces[i]`'s bytes.
 */
function decoder(pieces: readonly (string | readonly number[])[]): StreamingDecoder {
  let dec = new TextDecoder("utf-8");
  const bytes = pieces.map((p) => (typeof p === "string" ? new TextEncoder().encode(p) : Uint8Array.from(p)));
  return {
    push: (id) => dec.decode(bytes[id], { stream: true }),
    flush: () => {
      const rest = dec.decode();
      dec = new TextDecoder("utf-8");
      return rest;
    },
  };
}

/** Push tokens 0..n−1 of `pieces`; the pieces released and the stop string hit (the stream stops there, as its callers do). */
function run(
  pieces: readonly (string | readonly number[])[],
  stops: readonly string[],
): { out: string[]; hit?: string; stream: TextStream } {
  const stream = new TextStream(decoder(pieces), stops);
  const out: string[] = [];
  for (let id = 0; id < pieces.length; id++) {
    const r = stream.push(id);
    out.push(r.piece);
    if (r.hit !== undefined) return { out, hit: r.hit, stream };
  }
  return { out, stream };
}

test("without stop strings every token releases its text at once; nothing is left at the end", () => {
  const { out, hit, stream } = run(["Hel", "lo", ", world"], []);
  assert.deepEqual(out, ["Hel", "lo", ", world"]);
  assert.equal(hit, undefined);
  assert.equal(stream.end(false), "");
  assert.equal(stream.text, "Hello, world");
});

test("a stop string split across tokens: its start is held back, then the text is cut before it", () => {
  const { out, hit, stream } = run(["Hel", "lo ST", "O", "P and more", "never pushed"], ["STOP"]);
  assert.deepEqual(out, ["Hel", "lo ", "", ""]);
  assert.equal(hit, "STOP");
  assert.equal(stream.text, "Hello ");
  // after a stop string nothing held back belongs to the text
  assert.equal(stream.end(true), "");
  assert.equal(stream.text, "Hello ");
});

test("held-back text that turns out not to start a stop string is released with the next token", () => {
  const { out, hit, stream } = run(["ab", "S", "T", "x", "y"], ["STOP"]);
  assert.deepEqual(out, ["ab", "", "", "STx", "y"]);
  assert.equal(hit, undefined);
  assert.equal(stream.end(false), "");
  assert.equal(stream.text, "abSTxy");
});

test("the earliest of several stop strings wins, even one ending inside the token that completes a later one", () => {
  const { out, hit, stream } = run(["x <", "/a> </b>"], ["</b>", "</a>", ""]);
  assert.deepEqual(out, ["x ", ""]);
  assert.equal(hit, "</a>");
  assert.equal(stream.text, "x ");
});

test("a stop string wholly inside one token, with text after it, cuts there", () => {
  const { out, hit } = run(["one\n\ntwo"], ["\n\n"]);
  assert.deepEqual(out, ["one"]);
  assert.equal(hit, "\n\n");
});

test("a multi-byte character split across tokens comes out whole with the token that completes it", () => {
  // "é" = C3 A9, "€" = E2 82 AC
  const { out, stream } = run([[0x63, 0x61, 0x66, 0xc3], [0xa9, 0x20, 0xe2], [0x82], [0xac]], []);
  assert.deepEqual(out, ["caf", "é ", "", "€"]);
  assert.equal(stream.end(false), "");
  assert.equal(stream.text, "café €");
});

test("a stop string with a multi-byte character split across tokens is found once the character is complete", () => {
  const { out, hit, stream } = run([[0x6e, 0x61, 0xc3], [0xaf, 0x76, 0x65], [0x21]], ["ïve"]);
  assert.deepEqual(out, ["na", ""]);
  assert.equal(hit, "ïve");
  assert.equal(stream.text, "na");
});

test("the end releases what was held back: a partial stop-string match, and an incomplete UTF-8 tail as U+FFFD", () => {
  const partial = run(["done ", "ST"], ["STOP"]);
  assert.deepEqual(partial.out, ["done ", ""]);
  assert.equal(partial.stream.end(false), "ST");
  assert.equal(partial.stream.text, "done ST");

  const cut = run(["ok", [0xe2, 0x82]], []);
  assert.deepEqual(cut.out, ["ok", ""]);
  assert.equal(cut.stream.end(false), "\uFFFD");
  assert.equal(cut.stream.text, "ok\uFFFD");

  // both at once: the stop-string prefix is held by the stream, the broken character by the decoder
  const both = run(["a<", "/", [0xc3]], ["</end>"]);
  assert.deepEqual(both.out, ["a", "", ""]);
  assert.equal(both.stream.end(false), "</\uFFFD");
  // the events plus the tail are the whole text
  assert.equal(both.out.join("") + "</\uFFFD", both.stream.text);
});

test("a request's generated text: end-of-generation ids and its stop ids end it unless ignoreEog; control tokens' text only with special", () => {
  const asked: (boolean | undefined)[] = [];
  const tokenizer = {
    isEndOfGeneration: (id: number) => id === 2,
    createDecoder: (o?: { skipSpecial?: boolean }) => (asked.push(o?.skipSpecial), decoder(["a", "b", "<eos>", "d"])),
  };
  const plain = new GeneratedText(tokenizer, { stopTokens: [3] });
  assert.deepEqual(
    [0, 1, 2, 3].map((id) => plain.endsBefore(id)),
    [false, false, true, true],
  );
  const ignoring = new GeneratedText(tokenizer, { stopTokens: [3], ignoreEog: true });
  assert.deepEqual(
    [0, 1, 2, 3].map((id) => ignoring.endsBefore(id)),
    [false, false, false, false],
  );
  new GeneratedText(tokenizer, { special: true });
  assert.deepEqual(asked, [true, true, false]);
  // and it is the text stream, stop strings included
  const withStop = new GeneratedText(tokenizer, { stop: ["b"] });
  assert.deepEqual([withStop.push(0), withStop.push(1)], [{ piece: "a" }, { piece: "", hit: "b" }]);
});
