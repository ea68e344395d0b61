// Generation loop: greedy = argmax continuation of the reference path, seeded sampling, stop conditions, streaming.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadModel } from "../../src/runtime/load.js";
import type { DeepSeek2 } from "../../src/model/deepseek2.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { argmax } from "../../src/engine/sampler.js";
import {
  generate,
  generateSync,
  generateTokens,
  type GenerateModel,
  type TokenEvent,
} from "../../src/engine/generate.js";
import { UsageError } from "../../src/util/errors.js";
import { FIXTURE_DIR } from "../gguf/helpers.js";

const load = (name: string): { model: DeepSeek2; tok: Tokenizer } => {
  const { file, model } = loadModel(join(FIXTURE_DIR, `${name}.gguf`));
  return { model, tok: Tokenizer.fromMetadata(file.metadata) };
};
const lite = load("ds2-lite");
const glm = load("glm-dsa-topk8");

for (const [name, { model, tok }] of [
  ["ds2-lite", lite],
  ["glm-dsa-topk8", glm],
] as const) {
  const prompt = tok.encodePrompt("The quick brown fox");
  for (const path of ["prefill", "decode", "reference"] as const) {
    test(`${name}: greedy on ${path} equals the reference path's argmax continuation`, () => {
      const r = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 12, path, chunk: 3, ignoreEog: true });
      assert.equal(r.tokens.length, 12);
      assert.equal(r.finishReason, "length");
      const rows = evaluateAll(model, [...prompt, ...r.tokens], { path: "reference" });
      r.tokens.forEach((t, k) => assert.equal(t, argmax(rows[prompt.length - 1 + k]), `token ${k}`));
      // the reported logprob is log_softmax of the raw logits
      const row = rows[prompt.length - 1];
      const lse = Math.log(Array.from(row).reduce((s, x) => s + Math.exp(x), 0));
      assert.ok(Math.abs(r.logprobs[0] - (row[r.tokens[0]] - lse)) < 1e-4);
      assert.equal(r.text, tok.decode(r.tokens, { skipSpecial: true }));
      assert.equal(r.promptTokens, prompt.length);
      assert.equal(r.timings.decodeSteps, 11);
      assert.ok(r.timings.tokensPerSecond > 0 && r.timings.promptTokensPerSecond > 0);
    });
  }
}

const { model, tok } = lite;
const prompt = tok.encodePrompt("hello world");

test("seeded sampling is reproducible, and the seed matters", () => {
  const opts = { temperature: 1.0, topK: 0, topP: 1, minP: 0, maxTokens: 16, ignoreEog: true };
  const a = generateSync(model, tok, prompt, { ...opts, seed: 42 });
  const b = generateSync(model, tok, prompt, { ...opts, seed: 42 });
  const c = generateSync(model, tok, prompt, { ...opts, seed: 43 });
  assert.deepEqual(a.tokens, b.tokens);
  assert.deepEqual(a.logprobs, b.logprobs);
  assert.notDeepEqual(a.tokens, c.tokens);
  // the same seed on the reference path picks the same tokens (same logits up to rounding)
  const d = generateSync(model, tok, prompt, { ...opts, seed: 42, path: "reference" });
  assert.deepEqual(d.tokens, a.tokens);
});

test("an end-of-generation token stops generation and is not part of the output", () => {
  const free = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 40, ignoreEog: true });
  // make the 6th greedy token an end-of-generation token through a tokenizer wrapper
  const eog = free.tokens[5];
  const first = free.tokens.indexOf(eog);
  const wrapped = { createDecoder: tok.createDecoder.bind(tok), isEndOfGeneration: (id: number) => id === eog };
  const r = generateSync(model, wrapped, prompt, { temperature: 0, maxTokens: 40 });
  assert.equal(r.finishReason, "stop");
  assert.deepEqual(r.stoppedBy, { token: eog });
  assert.deepEqual(r.tokens, free.tokens.slice(0, first));
  // stopTokens does the same with the real tokenizer
  const s = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 40, stopTokens: [eog] });
  assert.deepEqual(s.tokens, r.tokens);
  // the model's own EOS: stops right before the first end-of-generation token of the free run
  const eos = free.tokens.findIndex((t) => tok.isEndOfGeneration(t));
  const real = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 40 });
  if (eos >= 0) {
    assert.equal(real.finishReason, "stop");
    assert.deepEqual(real.tokens, free.tokens.slice(0, eos));
  } else assert.equal(real.finishReason, "length");
});

test("maxTokens and the context length end with finishReason length", () => {
  const zero = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 0 });
  assert.deepEqual([zero.tokens, zero.finishReason, zero.text], [[], "length", ""]);
  const small: GenerateModel = {
    config: { ...model.config, contextLength: prompt.length + 3 },
    forward: model.forward.bind(model),
  };
  for (const path of ["prefill", "reference"] as const) {
    const r = generateSync(small, tok, prompt, { temperature: 0, maxTokens: 100, ignoreEog: true, path });
    assert.equal(r.tokens.length, 3, path);
    assert.equal(r.finishReason, "length");
  }
  assert.throws(
    () =>
      generateSync({ config: { ...model.config, contextLength: 2 }, forward: model.forward.bind(model) }, tok, prompt),
    UsageError,
  );
});

test("stop strings cut the text before them; streamed pieces are a prefix of the text", () => {
  const free = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 30, ignoreEog: true });
  const chars = [...free.text];
  // a two-character stop string from the middle of the text, avoiding U+FFFD (which decoding can shift)
  let k = 4;
  while (k < chars.length - 2 && (chars[k] === "\uFFFD" || chars[k + 1] === "\uFFFD")) k++;
  const stop = chars[k] + chars[k + 1];
  const want = free.text.slice(0, free.text.indexOf(stop));
  const events: TokenEvent[] = [];
  const r = generateSync(model, tok, prompt, {
    temperature: 0,
    maxTokens: 30,
    ignoreEog: true,
    stop: ["\u0000never", stop],
    onToken: (e) => events.push(e),
  });
  assert.equal(r.text, want);
  assert.equal(r.finishReason, "stop");
  assert.deepEqual(r.stoppedBy, { string: stop });
  assert.equal(events.map((e) => e.text).join(""), want);
  assert.deepEqual(
    events.map((e) => e.id),
    r.tokens,
  );
  assert.deepEqual(
    events.map((e) => e.index),
    r.tokens.map((_, i) => i),
  );
});

test("streamed text plus the final tail is the whole text; async generate = sync", async () => {
  const events: TokenEvent[] = [];
  const opts = { temperature: 0.9, seed: 7, maxTokens: 20, ignoreEog: true, logprobs: 3 };
  const r = await generate(model, tok, prompt, { ...opts, onToken: (e) => events.push(e) });
  const streamed = events.map((e) => e.text).join("");
  assert.ok(r.text.startsWith(streamed));
  assert.equal(r.text, tok.decode(r.tokens, { skipSpecial: true }));
  assert.equal(r.top?.length, 20);
  for (const e of events) assert.equal(e.top?.length, 3);
  const s = generateSync(model, tok, prompt, opts);
  assert.deepEqual(s.tokens, r.tokens);
  // the generator form yields the same events
  const it = generateTokens(model, tok, prompt, opts);
  const ids: number[] = [];
  for (let n = it.next(); n.done !== true; n = it.next()) ids.push(n.value.id);
  assert.deepEqual(ids, r.tokens);
});

test("an aborted signal ends generation with finishReason abort", async () => {
  const ctl = new AbortController();
  const r = await generate(model, tok, prompt, {
    temperature: 0,
    maxTokens: 50,
    ignoreEog: true,
    signal: ctl.signal,
    onToken: (e) => {
      if (e.index === 2) ctl.abort();
    },
  });
  assert.equal(r.finishReason, "abort");
  assert.equal(r.tokens.length, 3);
});

test("bad prompts and options are UsageErrors", () => {
  assert.throws(() => generateSync(model, tok, []), /no tokens/);
  assert.throws(() => generateSync(model, tok, [0, 300]), /outside the vocabulary/);
  assert.throws(() => generateSync(model, tok, [0, 1.5]), UsageError);
  assert.throws(() => generateSync(model, tok, prompt, { maxTokens: -1 }), UsageError);
  assert.throws(() => generateSync(model, tok, prompt, { chunk: 0 }), UsageError);
  assert.throws(() => generateSync(model, tok, prompt, { temperature: -1 }), UsageError);
});
