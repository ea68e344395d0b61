// Continuous batching: batched = alone (greedy tokens and logprobs), long prompts do not stall decodes, preemption
// by recompute, cancellation frees pages, prompt log-probabilities, queue bound.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { PagePool } from "../../src/engine/paged-cache.js";
import {
  QueueFullError,
  Scheduler,
  type SchedulerOptions,
  type SequenceRequest,
  type SequenceResult,
  type TokenOut,
} from "../../src/engine/scheduler.js";
import { generateSync } from "../../src/engine/generate.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { logSoftmax } from "../../src/engine/logprobs.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";

const synth = synthModel(CASES[0]!, 5);
const glmSynth = synthModel(CASES.find((c) => c.base === "tiny-glm")!, 5);
after(() => {
  synth.cleanup();
  glmSynth.cleanup();
});
const loaded = loadModel(synth.path);
const tok = Tokenizer.fromMetadata(loaded.file.metadata);
const V = loaded.config.nVocab;

interface Outcome {
  tokens: TokenOut[];
  result: SequenceResult;
}

function make(opts: SchedulerOptions & { pages?: number; pageSize?: number } = {}, l = loaded): Scheduler {
  const pool = new PagePool(l.config, { pageSize: opts.pageSize ?? 4, numPages: opts.pages ?? 256 });
  return new Scheduler(l.model, Tokenizer.fromMetadata(l.file.metadata), pool, opts);
}

function submit(s: Scheduler, req: SequenceRequest): Promise<Outcome> {
  return new Promise((resolve) => {
    const tokens: TokenOut[] = [];
    s.submit(req, { onToken: (t) => tokens.push(t), onFinish: (result) => resolve({ tokens, result }) });
  });
}

const greedy = (prompt: number[], maxTokens: number): SequenceRequest => ({
  prompt,
  maxTokens,
  sampling: { temperature: 0, logprobs: 3 },
  ignoreEog: true,
});

const prompts = [
  randomTokens(3, 1, 3, V),
  randomTokens(37, 2, 3, V),
  randomTokens(12, 3, 3, V),
  [...randomTokens(37, 2, 3, V).slice(0, 20), 7, 8, 9],
  randomTokens(1, 9, 3, V),
];

function assertSame(got: Outcome, want: { tokens: number[]; logprobs: number[] }, label: string): void {
  assert.deepEqual(
    got.tokens.map((t) => t.id),
    want.tokens,
    label,
  );
  got.tokens.forEach((t, i) =>
    assert.ok(
      Math.abs(t.logprob - want.logprobs[i]!) <= 1e-4,
      `${label} token ${i}: ${t.logprob} vs ${want.logprobs[i]}`,
    ),
  );
}

for (const l of [loaded, loadModel(glmSynth.path)]) {
  test(`${l.config.arch}: batched greedy generation equals each request alone (tokens, logprobs ≤ 1e-4)`, async () => {
    const t = Tokenizer.fromMetadata(l.file.metadata);
    const alone = prompts.map((p) => generateSync(l.model, t, p, { temperature: 0, maxTokens: 10, ignoreEog: true }));
    const s = make({ prefillChunk: 5, tokenBudget: 9, maxBatch: 4 }, l);
    const got = await Promise.all(prompts.map((p) => submit(s, greedy(p, 10))));
    got.forEach((g, i) => {
      assertSame(g, alone[i]!, `prompt ${i}`);
      assert.equal(g.result.finishReason, "length");
      assert.equal(g.result.text, alone[i]!.text);
    });
    assert.equal(s.pool.stats().pagesInUse, 0);
    assert.ok(s.stats().steps > 10);
  });
}

test("a long prompt is prefilled in chunks while running streams keep decoding every step", async () => {
  const perStep: number[] = [];
  let aTokens = 0;
  const s = make({ prefillChunk: 8, tokenBudget: 16, onStep: () => perStep.push(aTokens) });
  const a = new Promise<void>((resolve) => {
    s.submit(greedy(prompts[0]!, 30), { onToken: () => aTokens++, onFinish: () => resolve() });
  });
  // let a start decoding, then send a long prompt
  while (aTokens < 2) await new Promise((r) => setImmediate(r));
  const stepAtB = perStep.length;
  const b = submit(s, greedy(randomTokens(120, 4, 3, V), 2));
  await Promise.all([a, b]);
  // over the 15 steps b needs to prefill (120 / 8), a produced a token in every one
  for (let i = stepAtB + 1; i < stepAtB + 15; i++) assert.equal(perStep[i]! - perStep[i - 1]!, 1, `step ${i}`);
});

test("preemption by recompute when pages run out gives the same tokens; all pages come back", async () => {
  const alone = prompts
    .slice(0, 4)
    .map((p) => generateSync(loaded.model, tok, p, { temperature: 0, maxTokens: 24, ignoreEog: true }));
  // 22 pages × 4 = 88 positions: the four sequences need 3+37+12+23 + 4×24 = 171
  const s = make({ pages: 22, prefillChunk: 6, tokenBudget: 12 });
  const got = await Promise.all(prompts.slice(0, 4).map((p) => submit(s, greedy(p, 24))));
  got.forEach((g, i) => assertSame(g, alone[i]!, `prompt ${i}`));
  assert.ok(s.stats().preemptions > 0, "some sequence was preempted");
  assert.equal(s.pool.stats().pagesInUse, 0);
});

test("a sequence that cannot fit even alone ends with length (generated) instead of hanging", async () => {
  const s = make({ pages: 3, pageSize: 4 });
  const g = await submit(s, greedy(prompts[2]!, 20)); // 12 + 20 > 12 positions
  assert.equal(g.result.finishReason, "length");
  assert.equal(g.tokens.length, 1);
  assert.equal(s.pool.stats().pagesInUse, 0);
  assert.throws(() => s.submit(greedy(randomTokens(13, 1, 3, V), 1), { onFinish: () => {} }), /KV cache holds/);
});

test("cancel frees the pages at once; prefix pages stay cached for the next request", async () => {
  const s = make({ pageSize: 4 });
  let seqRef: ReturnType<Scheduler["submit"]> | undefined;
  const done = new Promise<SequenceResult>((resolve) => {
    seqRef = s.submit(greedy(prompts[1]!, 1000), {
      onToken: (t) => {
        if (t.index === 3) s.cancel(seqRef!);
      },
      onFinish: resolve,
    });
  });
  const r = await done;
  assert.equal(r.finishReason, "abort");
  assert.equal(r.tokens.length, 4);
  assert.equal(s.pool.stats().pagesInUse, 0);
  assert.equal(s.stats().running, 0);
  // same prompt again: 36 of its 37 tokens are in cached pages
  const again = await submit(s, greedy(prompts[1]!, 2));
  assert.equal(again.result.cachedTokens, 36);
  const alone = generateSync(loaded.model, tok, prompts[1]!, { temperature: 0, maxTokens: 2, ignoreEog: true });
  assertSame(again, alone, "after prefix hit");
});

test("prompt log-probabilities equal the reference path's log-softmax (≤ 1e-4), with ranks", async () => {
  const s = make({ prefillChunk: 7 });
  const prompt = prompts[1]!;
  let entries: Parameters<NonNullable<Parameters<Scheduler["submit"]>[1]["onPromptLogprobs"]>>[0] = [];
  await new Promise<void>((resolve) => {
    s.submit(
      { prompt, maxTokens: 0, promptLogprobs: 2 },
      { onPromptLogprobs: (e) => (entries = e), onFinish: () => resolve() },
    );
  });
  const rows = evaluateAll(loaded.model, prompt, { path: "reference" });
  assert.equal(entries.length, prompt.length);
  assert.equal(entries[0], null);
  for (let i = 1; i < prompt.length; i++) {
    const lp = logSoftmax(rows[i - 1]!);
    const e = entries[i]!;
    assert.equal(e.token, prompt[i]);
    assert.ok(Math.abs(e.logprob - lp[prompt[i]!]!) <= 1e-4);
    assert.equal(e.top.length, 2);
    assert.equal(e.rank, 1 + [...lp].filter((x) => x > lp[prompt[i]!]!).length);
  }
});

test("stop strings cut the text; queue bound throws QueueFullError", async () => {
  const s = make();
  const full = await submit(s, greedy(prompts[0]!, 12));
  const text = full.result.text;
  const stop = text.slice(3, 5);
  assert.ok(stop.length === 2);
  const cut = await submit(s, { ...greedy(prompts[0]!, 12), stop: [stop] });
  assert.equal(cut.result.finishReason, "stop");
  assert.equal(cut.result.text, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.tokens.map((t) => t.text).join("") + cut.result.tail, cut.result.text);

  const q = make({ maxQueue: 1 });
  const first = submit(q, greedy(prompts[0]!, 2));
  assert.throws(() => q.submit(greedy(prompts[0]!, 2), { onFinish: () => {} }), QueueFullError);
  await first;
});
