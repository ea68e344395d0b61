// Chained greedy decoding on the fused GPU pipeline: FusedGpuModel.decodeGreedy (the worker's "greedy" op) keeps the
// sequence's cache position as forward does (forward continues after a chunk, a chunk after forward), and `generate`
// through it gives the same tokens, text and finish reason as sampling every step's logits on the host — maxTokens,
// an end-of-generation token and a stop string inside a chunk, and consecutive generations on one model.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { FusedGpuModel } from "../../../src/backend/webgpu/engine/fused.js";
import { generateSync } from "../../../src/engine/generate.js";
import { LatentCache } from "../../../src/model/cache.js";
import { logSoftmax } from "../../../src/engine/logprobs.js";
import { argmax } from "../../../src/engine/sampler.js";
import { GGUFFile } from "../../../src/gguf/file.js";
import { parseConfig } from "../../../src/model/config.js";
import { Tokenizer } from "../../../src/tokenizer/index.js";
import { FIXTURE_DIR } from "../../gguf/helpers.js";
import { assertChainedEqualsHost, assertLogprobsClose } from "../../helpers/greedy-chain.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

const MODEL = join(FIXTURE_DIR, "ds2-lite.gguf");
const meta = GGUFFile.open(MODEL);
meta.close();
const tok = Tokenizer.fromMetadata(meta.metadata);
const fused =
  skip === false
    ? new FusedGpuModel(parseConfig(meta.metadata, meta.tensors.get("token_embd.weight")?.ne[1]), {
        context: 96,
        maxTokens: 8,
      })
    : undefined;
fused?.load(MODEL);
after(() => void fused?.close());

test("FusedGpuModel.decodeGreedy: chunks and forward steps continue each other on one sequence's cache", {
  skip,
}, () => {
  const f = fused!;
  const prompt = tok.encodePrompt("hello world");
  // the reference: every step's logits read back, argmax and log-softmax on the host
  const hostRun = (): { ids: number[]; lps: number[] } => {
    const cache = new LatentCache(f.config);
    const ids: number[] = [];
    const lps: number[] = [];
    const take = (logits: Float32Array): void => {
      ids.push(argmax(logits));
      lps.push(logSoftmax(logits)[ids.at(-1)!]);
    };
    take(f.forward(prompt, cache, { path: "prefill", logits: "last" }));
    for (let i = 0; i < 10; i++) take(f.forward([ids.at(-1)!], cache, { path: "decode", logits: "last" }));
    assert.equal(cache.length, prompt.length + 10);
    return { ids, lps };
  };
  const want = hostRun();
  assert.ok(new Set(want.ids).size > 4, `a varied greedy run: ${JSON.stringify(want.ids)}`);
  const cache = new LatentCache(f.config);
  const got = [argmax(f.forward(prompt, cache, { path: "prefill", logits: "last" }))];
  const gotLp: number[] = [];
  const a = f.decodeGreedy(got[0], cache, 3);
  assert.equal(a.tokens.length, 3);
  got.push(...a.tokens);
  gotLp.push(...a.logprobs);
  assert.equal(cache.length, prompt.length + 3, "a chunk of 3 advances the cache by 3");
  for (let i = 0; i < 2; i++) got.push(argmax(f.forward([got.at(-1)!], cache, { path: "decode", logits: "last" })));
  const b = f.decodeGreedy(got.at(-1)!, cache, 5);
  got.push(...b.tokens);
  assert.equal(cache.length, prompt.length + 10);
  assert.deepEqual(got, want.ids);
  // the chained steps' logprobs (GPU log-softmax) = the host's log-softmax of the same steps' logits
  assertLogprobsClose(a.logprobs, want.lps.slice(1, 4), "first chunk");
  assertLogprobsClose(b.logprobs, want.lps.slice(6, 11), "second chunk");
  // a new sequence after all that starts over in the slot: the same run again
  assert.deepEqual(hostRun().ids, want.ids);
  assert.throws(() => f.decodeGreedy(got.at(-1)!, cache, f.config.contextLength), /context full/);
  assert.throws(() => f.decodeGreedy(f.config.nVocab, cache, 1), /outside the vocabulary/);
});

test("generate on the fused pipeline: chained greedy = host sampling (maxTokens, end of generation and stop string inside a chunk)", {
  skip,
}, () => {
  const f = fused!;
  const prompt = tok.encodePrompt("The quick brown fox");
  const free = generateSync(f, tok, prompt, { temperature: 0, maxTokens: 30, ignoreEog: true, chainedGreedy: false });
  assert.ok(new Set(free.tokens).size > 8, JSON.stringify(free.tokens));
  for (const maxTokens of [1, 2, 7, 30]) {
    const { chained } = assertChainedEqualsHost(
      f,
      tok,
      prompt,
      { temperature: 0, maxTokens, ignoreEog: true },
      `maxTokens ${maxTokens}`,
    );
    assert.equal(chained.timings.decodeSteps, maxTokens - 1, "nothing computed past maxTokens");
    assert.deepEqual(chained.tokens, free.tokens.slice(0, maxTokens));
  }
  // an id first seen at index 7…11: inside the second chunk (tokens 5…12)
  const at = free.tokens.findIndex((t, i) => i >= 7 && !free.tokens.slice(0, i).includes(t));
  assert.ok(at >= 7 && at < 12, JSON.stringify(free.tokens));
  const eog = free.tokens[at];
  const wrapped = { createDecoder: tok.createDecoder.bind(tok), isEndOfGeneration: (id: number) => id === eog };
  const e = assertChainedEqualsHost(f, wrapped, prompt, { temperature: 0, maxTokens: 30 }, "end of generation");
  assert.deepEqual(e.chained.tokens, free.tokens.slice(0, at));
  assert.deepEqual(e.chained.stoppedBy, { token: eog });
  assert.equal(e.chained.timings.decodeSteps, 12, "the second chunk ran past the stop");
  const chars = [...free.text];
  let k = Math.floor(chars.length / 2);
  while (k < chars.length - 2 && (chars[k] === "\uFFFD" || chars[k + 1] === "\uFFFD")) k++;
  const stop = chars[k] + chars[k + 1];
  const s = assertChainedEqualsHost(
    f,
    tok,
    prompt,
    { temperature: 0, maxTokens: 30, ignoreEog: true, stop: [stop] },
    "stop string",
  );
  assert.deepEqual(s.chained.stoppedBy, { string: stop });
  assert.equal(s.chained.text, free.text.slice(0, free.text.indexOf(stop)));
});

test("consecutive generations on one fused model: a chunk that ran past a stop leaves nothing behind for the next", {
  skip,
}, () => {
  const f = fused!;
  const long = tok.encodePrompt("In the beginning God created the heaven and the earth");
  const short = tok.encodePrompt("And God said");
  const opts = { temperature: 0, maxTokens: 12, ignoreEog: true } as const;
  const shortHost = generateSync(f, tok, short, { ...opts, chainedGreedy: false });
  const longFree = generateSync(f, tok, long, { ...opts, maxTokens: 20 });
  // the long run stopped by a stop token inside its third chunk (tokens 13…28): its cache holds rows past the stop
  const stopAt = longFree.tokens.findIndex((t, i) => i >= 14 && !longFree.tokens.slice(0, i).includes(t));
  assert.ok(stopAt >= 14, JSON.stringify(longFree.tokens));
  const longStopped = generateSync(f, tok, long, {
    temperature: 0,
    maxTokens: 40,
    stopTokens: [longFree.tokens[stopAt]],
  });
  assert.equal(longStopped.decode, "greedy-chained");
  assert.deepEqual(longStopped.tokens, longFree.tokens.slice(0, stopAt));
  assert.ok(longStopped.timings.decodeSteps > stopAt, "computed past the stop");
  for (let round = 0; round < 2; round++) {
    const again = generateSync(f, tok, short, opts);
    assert.equal(again.decode, "greedy-chained");
    assert.deepEqual(again.tokens, shortHost.tokens, `round ${round}`);
    assert.equal(again.text, shortHost.text);
    assertLogprobsClose(again.logprobs, shortHost.logprobs, `round ${round}`);
  }
});
