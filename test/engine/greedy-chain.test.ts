// The generation loop's chained greedy decoding (a GreedyChainModel decodes greedy steps itself, in chunks of 4
// doubling to 32): the same tokens, text, finish reason and events as sampling on the host, for maxTokens inside a
// chunk, an end-of-generation token and a stop string inside a chunk, the context limit and an abort; chunks never
// run past what maxTokens and the context allow; non-greedy sampling, logprobs, the reference path and
// chainedGreedy: false sample on the host. A CPU model stands in (HostChainModel); test/backend/webgpu/ runs the GPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { generate, generateSync } from "../../src/engine/generate.js";
import { Sampler } from "../../src/engine/sampler.js";
import { NonFiniteError } from "../../src/util/errors.js";
import { FIXTURE_DIR } from "../gguf/helpers.js";
import { assertChainedEqualsHost, HostChainModel, HostDrawModel } from "../helpers/greedy-chain.js";

const { file, model } = loadModel(join(FIXTURE_DIR, "ds2-lite.gguf"));
const tok = Tokenizer.fromMetadata(file.metadata);
const prompt = tok.encodePrompt("The quick brown fox");
const free = generateSync(model, tok, prompt, { temperature: 0, maxTokens: 40, ignoreEog: true });

test("the fixture's greedy run is varied enough to tell steps apart", () => {
  assert.ok(new Set(free.tokens).size > 10, JSON.stringify(free.tokens));
});

test("maxTokens inside a chunk: chunks of 4, 8, … stop exactly at maxTokens (nothing computed past it)", () => {
  for (const [maxTokens, chunks] of [
    [1, []],
    [2, [1]],
    [5, [4]],
    [7, [4, 2]],
    [40, [4, 8, 16, 11]],
  ] as const) {
    const m = new HostChainModel(model);
    const { chained, host } = assertChainedEqualsHost(
      m,
      tok,
      prompt,
      { temperature: 0, maxTokens, ignoreEog: true },
      `maxTokens ${maxTokens}`,
    );
    assert.deepEqual(m.chunks, chunks, `maxTokens ${maxTokens}: chunk steps`);
    // HostChainModel's logprobs are the host's log-softmax: the same numbers exactly
    assert.deepEqual(chained.logprobs, host.logprobs, `maxTokens ${maxTokens}: logprobs`);
    assert.equal(chained.tokens.length, maxTokens);
    assert.equal(chained.finishReason, "length");
    assert.equal(chained.timings.decodeSteps, Math.max(0, maxTokens - 1));
  }
  // chunks grow to 32 and stay there
  const m = new HostChainModel(model);
  generateSync(m, tok, prompt, { temperature: 0, maxTokens: 100, ignoreEog: true });
  assert.deepEqual(m.chunks, [4, 8, 16, 32, 32, 7]);
});

test("an end-of-generation token inside a chunk stops there; the ids computed past it are dropped", () => {
  // the first id from index 7 on that did not occur before: the 2nd chunk (tokens 5…12) reaches it at its 3rd step
  const at = free.tokens.findIndex((t, i) => i >= 7 && !free.tokens.slice(0, i).includes(t));
  assert.ok(at >= 7 && at < 12, `an id first seen inside the second chunk: ${JSON.stringify(free.tokens)}`);
  const eog = free.tokens[at];
  const wrapped = { createDecoder: tok.createDecoder.bind(tok), isEndOfGeneration: (id: number) => id === eog };
  const m = new HostChainModel(model);
  const { chained } = assertChainedEqualsHost(
    m,
    wrapped,
    prompt,
    { temperature: 0, maxTokens: 40 },
    "end of generation",
  );
  assert.deepEqual(chained.tokens, free.tokens.slice(0, at));
  assert.deepEqual(chained.stoppedBy, { token: eog });
  assert.deepEqual(m.chunks, [4, 8], "the stop came inside the second chunk");
  assert.equal(chained.timings.decodeSteps, 12, "both chunks' steps counted, including those past the stop");
  // the speed counts only the steps whose token was used: the `at` tokens after the first, and the stop token
  assert.equal(chained.timings.usedSteps, at, "used steps: the tokens after the first, then the stop");
  const host = generateSync(model, wrapped, prompt, { temperature: 0, maxTokens: 40, chainedGreedy: false });
  assert.equal(host.timings.usedSteps, host.timings.decodeSteps, "on the host every step is used");
  assert.equal(host.timings.usedSteps, at);
  // stopTokens: the same through the real tokenizer
  const s = assertChainedEqualsHost(
    new HostChainModel(model),
    tok,
    prompt,
    { temperature: 0, maxTokens: 40, stopTokens: [eog] },
    "stopTokens",
  );
  assert.deepEqual(s.chained.tokens, chained.tokens);
});

test("a stop string inside a chunk cuts the text as on the host", () => {
  const chars = [...free.text];
  // a two-character stop string from past the first chunk's text, avoiding U+FFFD
  let k = Math.floor(chars.length / 2);
  while (k < chars.length - 2 && (chars[k] === "\uFFFD" || chars[k + 1] === "\uFFFD")) k++;
  const stop = chars[k] + chars[k + 1];
  const m = new HostChainModel(model);
  const { chained } = assertChainedEqualsHost(
    m,
    tok,
    prompt,
    { temperature: 0, maxTokens: 40, ignoreEog: true, stop: ["\u0000never", stop] },
    "stop string",
  );
  assert.equal(chained.finishReason, "stop");
  assert.deepEqual(chained.stoppedBy, { string: stop });
  assert.equal(chained.text, free.text.slice(0, free.text.indexOf(stop)));
  assert.ok(
    chained.tokens.length > 5 && chained.tokens.length < 40,
    `stopped after the first chunk: ${chained.tokens.length} tokens`,
  );
  const emitted = m.chunks.reduce((s, n) => s + n, 0) + 1;
  assert.ok(
    emitted >= chained.tokens.length && emitted - chained.tokens.length < m.chunks.at(-1)!,
    `the last chunk held the stop: ${JSON.stringify(m.chunks)}`,
  );
});

test("the context limit inside a chunk: the chunk is cut to the positions left", () => {
  const config = { ...model.config, contextLength: prompt.length + 6 };
  const m = new HostChainModel(model, config);
  const { chained } = assertChainedEqualsHost(
    m,
    tok,
    prompt,
    { temperature: 0, maxTokens: 100, ignoreEog: true },
    "context limit",
  );
  assert.equal(chained.tokens.length, 6);
  assert.equal(chained.finishReason, "length");
  assert.deepEqual(m.chunks, [4, 1]);
  assert.deepEqual(chained.tokens, free.tokens.slice(0, 6));
});

test("an abort between tokens of a chunk ends generation there", async () => {
  const ctl = new AbortController();
  const m = new HostChainModel(model);
  const r = await generate(m, tok, prompt, {
    temperature: 0,
    maxTokens: 50,
    ignoreEog: true,
    signal: ctl.signal,
    onToken: (e) => {
      if (e.index === 2) ctl.abort();
    },
  });
  assert.equal(r.decode, "greedy-chained");
  assert.equal(r.finishReason, "abort");
  assert.deepEqual(r.tokens, free.tokens.slice(0, 3));
});

test("non-greedy sampling, logprobs, the reference path, a custom sampler and chainedGreedy false sample on the host", () => {
  const cases = [
    ["temperature 0.8 top-k 1", { temperature: 0.8, topK: 1, seed: 3 }],
    ["temperature 1", { temperature: 1, seed: 3 }],
    ["greedy with logprobs", { temperature: 0, logprobs: 2 }],
    ["greedy on the reference path", { temperature: 0, path: "reference" as const }],
    [
      "greedy through a given sampler object",
      { sampler: { sample: (l: Float32Array) => new Sampler({ temperature: 0 }).sample(l) } },
    ],
    ["chainedGreedy false", { temperature: 0, chainedGreedy: false }],
  ] as const;
  for (const [what, opts] of cases) {
    const m = new HostChainModel(model);
    const r = generateSync(m, tok, prompt, { ...opts, maxTokens: 6, ignoreEog: true });
    assert.equal(r.decode, "host-sampling", what);
    assert.deepEqual(m.chunks, [], `${what}: decodeGreedy not called`);
    assert.equal(r.tokens.length, 6);
    assert.ok(r.logprobs.every(Number.isFinite), `${what}: every token has its logprob`);
  }
  // a model without decodeGreedy (the CPU model itself) samples on the host
  assert.equal(generateSync(model, tok, prompt, { temperature: 0, maxTokens: 3 }).decode, "host-sampling");
  // greedy is the sampler's own definition: temperature 0, whatever the filters say
  assert.ok(new Sampler({ temperature: 0, topK: 40, topP: 0.95, minP: 0.05 }).isGreedy());
  assert.ok(!new Sampler({ temperature: 0.5, topK: 1 }).isGreedy());
});

test("a chained step whose logits the host sampler would refuse (logprob NaN from the device) stops generation with a NonFiniteError", () => {
  class BrokenStep extends HostChainModel {
    override decodeGreedy(
      token: number,
      cache: Parameters<HostChainModel["decodeGreedy"]>[1],
      steps: number,
    ): ReturnType<HostChainModel["decodeGreedy"]> {
      const chunk = super.decodeGreedy(token, cache, steps);
      return {
        tokens: chunk.tokens,
        logprobs: chunk.logprobs.map((lp, s) => (this.chunks.length === 2 && s === 1 ? Number.NaN : lp)),
      };
    }
  }
  const m = new BrokenStep(model);
  assert.throws(
    () => generateSync(m, tok, prompt, { temperature: 0, maxTokens: 40, ignoreEog: true }),
    (e: unknown) => e instanceof NonFiniteError && /decode step 6 contain NaN or \+Infinity/.test(e.message),
  );
});

test("draws chain on a model that takes them (chainsDraws): top-p / min-p with top-k 0 or ≤ 64, or a temperature alone; keys from the seeded sampler; others stay on the host", () => {
  for (const sampling of [
    { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.02, seed: 3 },
    { temperature: 1.2, seed: 4 },
    { temperature: 0.9, topP: 0.9, minP: 0.05, seed: 5 },
  ]) {
    const m = new HostDrawModel(model);
    const r = generateSync(m, tok, prompt, { ...sampling, maxTokens: 14, ignoreEog: true });
    const what = JSON.stringify(sampling);
    assert.equal(r.decode, "draws-chained", what);
    assert.deepEqual(m.chunks, [4, 8, 1], `${what}: chunks of 4 doubling, cut at maxTokens`);
    assert.equal(r.tokens.length, 14);
    // every draw carries the sampler's settings and a key of its generator; the chain's tokens are the draws'
    for (const d of m.draws)
      assert.deepEqual(
        { ...d, key: 0 },
        {
          temperature: sampling.temperature,
          topK: sampling.topK ?? 0,
          topP: sampling.topP ?? 1,
          minP: sampling.minP ?? 0,
          key: 0,
        },
        what,
      );
    assert.equal(new Set(m.draws.map((d) => d.key)).size, m.draws.length, `${what}: a fresh key a step`);
    assert.ok(r.logprobs.every(Number.isFinite), `${what}: logprobs`);
    // the same seed: the same keys and tokens
    const again = new HostDrawModel(model);
    assert.deepEqual(
      generateSync(again, tok, prompt, { ...sampling, maxTokens: 14, ignoreEog: true }).tokens,
      r.tokens,
      `${what}: same seed, same tokens`,
    );
    assert.deepEqual(again.draws, m.draws);
  }
  for (const [what, opts] of [
    ["top-k past 64", { temperature: 0.8, topK: 65, seed: 3 }],
    ["top logprobs", { temperature: 0.8, topK: 40, logprobs: 1, seed: 3 }],
    ["chainedGreedy false", { temperature: 0.8, topK: 40, seed: 3, chainedGreedy: false }],
  ] as const) {
    const m = new HostDrawModel(model);
    const r = generateSync(m, tok, prompt, { ...opts, maxTokens: 5, ignoreEog: true });
    assert.equal(r.decode, "host-sampling", what);
    assert.deepEqual(m.draws, [], what);
  }
});
