// The <think> split (src/server/reasoning.ts): whole texts in both start modes, and the streamed deltas for every way
// of cutting the text in two and three pieces adding up to the whole-text answer, with no tag text leaking into either.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  promptOpensReasoning,
  ReasoningStream,
  splitReasoning,
  type ReasoningOptions,
} from "../../src/server/reasoning.js";

const OPEN: ReasoningOptions = { startsInReasoning: true };
const CLOSED: ReasoningOptions = { startsInReasoning: false };

/** [options, generated text, expected reasoning, expected content] */
const CASES: [ReasoningOptions, string, string | null, string][] = [
  // R1: the prompt ends in "<think>\n", the model writes no opening tag
  [OPEN, "Let me think.\n</think>\n\nThe answer is 4.", "Let me think.\n", "The answer is 4."],
  // R1 before 0528 / a model repeating the tag
  [OPEN, "<think>\nhmm</think>42", "\nhmm", "42"],
  [OPEN, "  <think>hmm</think>42", "hmm", "42"],
  // never closed: all reasoning (generation stopped inside it)
  [OPEN, "still thinking <", "still thinking <", ""],
  [OPEN, "", "", ""],
  // GLM-4.5 / Kimi: the model opens the tag itself
  [CLOSED, "<think>a < b </thin k></think>\n\nyes", "a < b </thin k>", "yes"],
  [CLOSED, "\n<think></think>yes", "", "yes"],
  // thinking switched off: no tags, all content, verbatim
  [CLOSED, "  plain answer\n", null, "  plain answer\n"],
  [CLOSED, "<thin", null, "<thin"],
  [CLOSED, "<thinking>no</thinking>", null, "<thinking>no</thinking>"],
  // a tag after the start is content, as is anything after the first </think>
  [CLOSED, "x <think>y</think>", null, "x <think>y</think>"],
  [CLOSED, "<think>r</think>c <think>d</think> e", "r", "c <think>d</think> e"],
  [OPEN, "r</think></think>", "r", "</think>"],
  // all whitespace after </think>: empty content
  [OPEN, "r</think>\n\n", "r", ""],
];

function streamed(opts: ReasoningOptions, pieces: readonly string[]): { reasoning: string | null; content: string } {
  const s = new ReasoningStream(opts);
  let reasoning = "";
  let content = "";
  for (const d of [...pieces.map((p) => s.push(p)), s.finish()]) {
    for (const k of Object.keys(d))
      assert.ok(k === "reasoning_content" || k === "content", `unexpected delta key ${k}`);
    if (d.reasoning_content !== undefined) {
      assert.notEqual(d.reasoning_content, "", "a delta never carries an empty field");
      reasoning += d.reasoning_content;
    }
    if (d.content !== undefined) {
      assert.notEqual(d.content, "");
      content += d.content;
    }
  }
  return { reasoning: s.hadReasoning ? reasoning : null, content };
}

test("whole texts split into reasoning and content", () => {
  for (const [opts, text, reasoning, content] of CASES) {
    assert.deepEqual(splitReasoning(text, opts), { reasoning, content }, JSON.stringify({ opts, text }));
  }
});

test("streamed: every cut into two and three pieces gives the whole-text answer", () => {
  for (const [opts, text, reasoning, content] of CASES) {
    for (let i = 0; i <= text.length; i++) {
      assert.deepEqual(
        streamed(opts, [text.slice(0, i), text.slice(i)]),
        { reasoning, content },
        JSON.stringify({ text, i }),
      );
      for (let j = i; j <= text.length; j++) {
        assert.deepEqual(
          streamed(opts, [text.slice(0, i), text.slice(i, j), text.slice(j)]),
          { reasoning, content },
          JSON.stringify({ text, i, j }),
        );
      }
    }
    assert.deepEqual(
      streamed(opts, [...text]),
      { reasoning, content },
      `one character at a time: ${JSON.stringify(text)}`,
    );
  }
});

test("streamed: reasoning is given out as it comes, only a possible tag is held back", () => {
  const s = new ReasoningStream(OPEN);
  assert.deepEqual(s.push("Let me"), { reasoning_content: "Let me" });
  assert.deepEqual(s.push(" see </"), { reasoning_content: " see " });
  assert.deepEqual(s.push("thi"), {});
  assert.deepEqual(s.push("nk>\n\n"), {});
  assert.deepEqual(s.push("Four."), { content: "Four." });
  assert.deepEqual(s.push(" <think>"), { content: " <think>" });
  assert.deepEqual(s.finish(), {});
  // a false alarm is released as soon as it cannot be the tag
  const t = new ReasoningStream(OPEN);
  assert.deepEqual(t.push("a </th"), { reasoning_content: "a " });
  assert.deepEqual(t.push("ing>"), { reasoning_content: "</thing>" });
  // one piece holding the end of the reasoning and the start of the content
  assert.deepEqual(new ReasoningStream(CLOSED).push("<think>r</think>c"), { reasoning_content: "r", content: "c" });
});

test("content-start mode waits only while the start could still be <think>", () => {
  const s = new ReasoningStream(CLOSED);
  assert.deepEqual(s.push("\n <th"), {});
  assert.deepEqual(s.push("e end"), { content: "\n <the end" });
});

test("promptOpensReasoning: the prompt ends with an open <think>", () => {
  assert.equal(promptOpensReasoning("<｜User｜>hi<｜Assistant｜><think>\n"), true);
  assert.equal(promptOpensReasoning("<|assistant|><think>"), true);
  assert.equal(promptOpensReasoning("<｜User｜>hi<｜Assistant｜></think>"), false);
  assert.equal(promptOpensReasoning("<|assistant|>\n<think></think>"), false);
  assert.equal(promptOpensReasoning("<|user|>what is <think>?<|assistant|>"), false);
  assert.equal(promptOpensReasoning(""), false);
});
