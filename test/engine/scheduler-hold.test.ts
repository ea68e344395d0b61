// Holding a sequence (its sink cannot take more): it gets no new tokens but keeps its pages and slot while the others
// run on; released, it continues to the same greedy tokens as alone; the loop sleeps (no steps) while only held
// sequences are left; a queued sequence may take a held one's slot (preempted, its output kept); cancelling a held
// sequence frees its pages.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { PagePool } from "../../src/engine/paged-cache.js";
import { Scheduler, type Sequence, type SequenceRequest, type SequenceResult } from "../../src/engine/scheduler.js";
import { generateSync } from "../../src/engine/generate.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";

const synth = synthModel(CASES[0], 5);
after(() => synth.cleanup());
const loaded = loadModel(synth.path);
const tok = Tokenizer.fromMetadata(loaded.file.metadata);
const V = loaded.config.nVocab;

const greedy = (prompt: number[], maxTokens: number): SequenceRequest => ({
  prompt,
  maxTokens,
  sampling: { temperature: 0 },
  ignoreEog: true,
});
const turns = (n: number): Promise<void> => new Promise((r) => setTimeout(r, n));

test("a held sequence gets no tokens while another completes, keeps its pages, and resumes to the same tokens", async () => {
  const s = new Scheduler(loaded.model, tok, new PagePool(loaded.config, { pageSize: 4, numPages: 256 }), {
    maxBatch: 4,
  });
  const pa = randomTokens(5, 11, 3, V);
  const pb = randomTokens(7, 12, 3, V);
  const alone = generateSync(loaded.model, tok, pa, { temperature: 0, maxTokens: 24, ignoreEog: true });
  const aIds: number[] = [];
  let a!: Sequence;
  let finishedA: SequenceResult | undefined;
  const doneA = new Promise<void>((resolve) => {
    a = s.submit(greedy(pa, 24), {
      onToken: (t) => {
        aIds.push(t.id);
        if (aIds.length === 3) s.hold(a);
      },
      onFinish: (r) => {
        finishedA = r;
        resolve();
      },
    });
  });
  let bTokens = 0;
  const doneB = new Promise<SequenceResult>((resolve) =>
    s.submit(greedy(pb, 40), { onToken: () => bTokens++, onFinish: resolve }),
  );
  const b = await doneB;
  assert.equal(b.finishReason, "length");
  assert.equal(bTokens, 40, "the other sequence ran to its end");
  assert.equal(aIds.length, 3, "the held sequence got tokens while held");
  assert.equal(a.generated, 3);
  assert.equal(finishedA, undefined);
  assert.deepEqual([s.stats().running, s.stats().held], [1, 1]);
  assert.ok(s.pool.stats().pagesInUse > 0, "the held sequence kept its pages");
  // only a held sequence left: the loop sleeps instead of stepping
  const steps = s.stats().steps;
  await turns(50);
  assert.equal(s.stats().steps, steps, "the scheduler stepped with nothing to run");
  s.release(a);
  await doneA;
  assert.deepEqual(aIds, alone.tokens);
  assert.equal(finishedA!.text, alone.text);
  assert.equal(s.pool.stats().pagesInUse, 0);
});

test("a queued sequence takes a held one's slot (the held one is preempted, then resumes to the same tokens)", async () => {
  const s = new Scheduler(loaded.model, tok, new PagePool(loaded.config, { pageSize: 4, numPages: 64 }), {
    maxBatch: 1,
  });
  const pa = randomTokens(5, 21, 3, V);
  const alone = generateSync(loaded.model, tok, pa, { temperature: 0, maxTokens: 12, ignoreEog: true });
  let a!: Sequence;
  const aIds: number[] = [];
  const doneA = new Promise<SequenceResult>((resolve) => {
    a = s.submit(greedy(pa, 12), {
      onToken: (t) => {
        aIds.push(t.id);
        if (aIds.length === 2) s.hold(a);
      },
      onFinish: resolve,
    });
  });
  while (aIds.length < 2) await turns(1);
  const c = await new Promise<SequenceResult>((resolve) =>
    s.submit(greedy(randomTokens(6, 22, 3, V), 10), { onFinish: resolve }),
  );
  assert.equal(c.finishReason, "length");
  assert.equal(aIds.length, 2);
  assert.equal(s.stats().preemptions, 1);
  assert.deepEqual([s.stats().waiting, s.stats().held, s.pool.stats().pagesInUse], [1, 1, 0]);
  s.release(a);
  assert.equal((await doneA).finishReason, "length");
  assert.deepEqual(aIds, alone.tokens);
});

test("cancelled while held, a sequence gives its pages back", async () => {
  const s = new Scheduler(loaded.model, tok, new PagePool(loaded.config, { pageSize: 4, numPages: 64 }), {
    maxBatch: 2,
  });
  let a!: Sequence;
  let aTokens = 0;
  const doneA = new Promise<SequenceResult>((resolve) => {
    a = s.submit(greedy(randomTokens(5, 23, 3, V), 50), {
      onToken: () => {
        if (++aTokens === 2) s.hold(a);
      },
      onFinish: resolve,
    });
  });
  while (aTokens < 2) await turns(1);
  await turns(20);
  assert.equal(aTokens, 2);
  assert.ok(s.pool.stats().pagesInUse > 0);
  s.cancel(a);
  assert.equal((await doneA).finishReason, "abort");
  assert.deepEqual([s.pool.stats().pagesInUse, s.stats().held, s.stats().running], [0, 0, 0]);
});
