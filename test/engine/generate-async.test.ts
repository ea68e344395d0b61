// The generation loop on an asynchronous model that keeps its own cache (generateTokensAsync, what a browser's GPU
// session runs): the same events and result as generateTokens on the same model — host sampling, stop strings,
// chained greedy steps and chained draws — and forward passes asked at the positions its cache holds.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { LatentCache } from "../../src/model/cache.js";
import {
  generateTokens,
  generateTokensAsync,
  type AsyncGenerateModel,
  type GenerateModel,
  type GenerateOptions,
  type GenerateResult,
  type TokenEvent,
} from "../../src/engine/generate.js";
import type { GreedyChainModel, GreedyChunk, PickDraw } from "../../src/engine/device-picks.js";
import { UsageError } from "../../src/util/errors.js";
import { FIXTURE_DIR } from "../gguf/helpers.js";
import { HostChainModel, HostDrawModel } from "../helpers/greedy-chain.js";

const { file, model } = loadModel(join(FIXTURE_DIR, "ds2-lite.gguf"));
const tok = Tokenizer.fromMetadata(file.metadata);
const prompt = tok.encodePrompt("The quick brown fox");

/** A synchronous model as an asynchronous one with its own cache, recording [pos, tokens] of every forward. */
class OwnCacheModel implements AsyncGenerateModel {
  readonly forwards: [number, number][] = [];
  private cache: LatentCache;
  readonly chainsDraws?: boolean;
  readonly picksDrawFiltered?: boolean;
  readonly decodeGreedy?: (
    token: number,
    pos: number,
    steps: number,
    draws?: readonly PickDraw[],
  ) => Promise<GreedyChunk>;
  constructor(private readonly inner: GenerateModel & Partial<GreedyChainModel>) {
    this.cache = new LatentCache(inner.config);
    if (inner.chainsDraws !== undefined) this.chainsDraws = inner.chainsDraws;
    if (inner.picksDrawFiltered !== undefined) this.picksDrawFiltered = inner.picksDrawFiltered;
    const chain = inner.decodeGreedy?.bind(inner);
    if (chain !== undefined) {
      this.decodeGreedy = async (token, pos, steps, draws) => {
        assert.equal(pos, this.cache.length, "a chain starts where the cache ends");
        return draws !== undefined ? chain(token, this.cache, steps, draws) : chain(token, this.cache, steps);
      };
    }
  }
  get config(): GenerateModel["config"] {
    return this.inner.config;
  }
  async forward(tokens: readonly number[], pos: number): Promise<Float32Array> {
    assert.equal(pos, this.cache.length, "a forward starts where the cache ends");
    this.forwards.push([pos, tokens.length]);
    await new Promise((r) => setImmediate(r));
    return this.inner.forward(tokens, this.cache, {
      path: tokens.length === 1 && pos > 0 ? "decode" : "prefill",
      logits: "last",
    });
  }
}

function syncRun(m: GenerateModel, opts: GenerateOptions): { events: TokenEvent[]; result: GenerateResult } {
  const events: TokenEvent[] = [];
  const it = generateTokens(m, tok, prompt, opts);
  for (;;) {
    const r = it.next();
    if (r.done === true) return { events, result: r.value };
    events.push(r.value);
  }
}

async function asyncRun(
  m: AsyncGenerateModel,
  opts: GenerateOptions,
): Promise<{ events: TokenEvent[]; result: GenerateResult }> {
  const events: TokenEvent[] = [];
  const it = generateTokensAsync(m, tok, prompt, opts);
  for (;;) {
    const r = await it.next();
    if (r.done === true) return { events, result: r.value };
    events.push(r.value);
  }
}

const withoutTimings = (r: GenerateResult): Omit<GenerateResult, "timings"> & { steps: [number, number] } => {
  const { timings, ...rest } = r;
  return { ...rest, steps: [timings.decodeSteps, timings.usedSteps] };
};

test("host sampling: the same events and result as the synchronous loop; one forward per token at the cache's end", async () => {
  const opts: GenerateOptions = { temperature: 0.9, seed: 3, maxTokens: 12, ignoreEog: true, logprobs: 2 };
  const want = syncRun(model, opts);
  const m = new OwnCacheModel(model);
  const got = await asyncRun(m, opts);
  assert.deepEqual(got.events, want.events);
  assert.deepEqual(withoutTimings(got.result), withoutTimings(want.result));
  assert.equal(got.result.decode, "host-sampling");
  assert.deepEqual(m.forwards, [
    [0, prompt.length],
    ...Array.from({ length: 11 }, (_, k): [number, number] => [prompt.length + k, 1]),
  ]);
});

test("a stop string, prefill chunks and the decode path give what the synchronous loop gives", async () => {
  const free = syncRun(model, { temperature: 0, maxTokens: 20, ignoreEog: true }).result;
  const stop = free.text.slice(6, 9);
  for (const opts of [
    { temperature: 0, maxTokens: 20, ignoreEog: true, stop: [stop], chunk: 2 },
    { temperature: 0, maxTokens: 5, path: "decode" as const },
  ]) {
    const want = syncRun(model, opts);
    const got = await asyncRun(new OwnCacheModel(model), opts);
    assert.deepEqual(got.events, want.events);
    assert.deepEqual(withoutTimings(got.result), withoutTimings(want.result));
  }
});

test("chained greedy steps and chained draws run through the asynchronous model's decodeGreedy, as through the synchronous one's", async () => {
  for (const [make, opts, mode] of [
    [() => new HostChainModel(model), { temperature: 0, maxTokens: 15, ignoreEog: true }, "greedy-chained"],
    [
      () => new HostDrawModel(model),
      { temperature: 0.8, topP: 0.9, seed: 4, maxTokens: 15, ignoreEog: true },
      "draws-chained",
    ],
  ] as const) {
    const want = syncRun(make(), opts);
    const inner = make();
    const got = await asyncRun(new OwnCacheModel(inner), opts);
    assert.equal(got.result.decode, mode);
    assert.deepEqual(got.events, want.events);
    assert.deepEqual(withoutTimings(got.result), withoutTimings(want.result));
    assert.deepEqual(inner.chunks, [4, 8, 2], "chunks of 4, 8, then what maxTokens leaves");
  }
});

test("the reference path needs a model without a cache of its own: a UsageError", async () => {
  await assert.rejects(asyncRun(new OwnCacheModel(model), { path: "reference" }), UsageError);
});
