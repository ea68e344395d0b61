// The scheduler on the fused WebGPU pipeline with greedy steps chained on the GPU (decodeGreedyBatch over the GPU
// caches that mirror the page pool) gives the tokens, finishes and logprobs (≤ 1e-4) of host-sampled steps; requests
// drawn on the GPU (top-k, top-p and min-p, with and without top-k) give the same tokens chained as step by step.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PagePool } from "../../../src/engine/paged-cache.js";
import { Scheduler, type BatchModel, type SequenceRequest, type StepInfo } from "../../../src/engine/scheduler.js";
import { randomTokens } from "../../helpers/synth.js";
import { pagedFusedModel } from "../../helpers/fused-paged.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

interface Outcome {
  ids: number[];
  logprobs: number[];
  finish: string;
}

/** Every request through the scheduler at once: each one's tokens, logprobs and finish; the page pool empty after. */
async function serveAll(s: Scheduler, reqs: readonly SequenceRequest[]): Promise<Outcome[]> {
  const out = await Promise.all(
    reqs.map(
      (req) =>
        new Promise<Outcome>((resolve) => {
          const o: Outcome = { ids: [], logprobs: [], finish: "" };
          s.submit(req, {
            onToken: (t) => {
              o.ids.push(t.id);
              o.logprobs.push(t.logprob);
            },
            onFinish: (r) => resolve({ ...o, finish: r.finishReason }),
          });
        }),
    ),
  );
  assert.equal(s.pool.stats().pagesInUse, 0);
  return out;
}

test("fused pipeline: 3 concurrent greedy requests through the scheduler give the same tokens with chained GPU steps as with host sampling", {
  skip,
}, async () => {
  const { synth, loaded, tok, fused, pageSize, numPages } = pagedFusedModel(11, 3, 40);
  try {
    let chains = 0;
    const model: BatchModel = {
      config: fused.config,
      forwardBatch: (seqs) => fused.forwardBatch(seqs),
      decodeGreedyBatch: (seqs, steps) => {
        chains++;
        return fused.decodeGreedyBatch(seqs, steps);
      },
    };
    const V = loaded.config.nVocab;
    const reqs: SequenceRequest[] = [
      { prompt: randomTokens(5, 61, 1, V), maxTokens: 14, sampling: { temperature: 0 }, ignoreEog: true },
      { prompt: randomTokens(9, 62, 1, V), maxTokens: 9, sampling: { temperature: 0 }, ignoreEog: true },
      { prompt: randomTokens(3, 63, 1, V), maxTokens: 20, sampling: { temperature: 0 }, ignoreEog: true },
    ];
    const run = async (chainSteps: number): Promise<{ out: Outcome[]; steps: StepInfo[] }> => {
      const steps: StepInfo[] = [];
      const s = new Scheduler(model, tok, new PagePool(fused.config, { pageSize, numPages }), {
        maxBatch: 3,
        prefillChunk: 5,
        tokenBudget: 12,
        chainSteps,
        onStep: (i) => steps.push(i),
      });
      return { out: await serveAll(s, reqs), steps };
    };
    const host = await run(0);
    assert.equal(chains, 0);
    const chained = await run(8);
    assert.ok(chains >= 2, `${chains} chains`);
    assert.ok(
      chained.steps.some((st) => st.chained !== undefined && st.sequences === 3),
      "a chain ran with all three sequences",
    );
    chained.out.forEach((o, i) => {
      assert.deepEqual(o.ids, host.out[i].ids, `request ${i}: ids`);
      assert.equal(o.finish, host.out[i].finish);
      assert.equal(o.ids.length, reqs[i].maxTokens);
      o.logprobs.forEach((lp, j) =>
        assert.ok(
          Math.abs(lp - host.out[i].logprobs[j]) <= 1e-4,
          `request ${i} token ${j}: ${lp} vs ${host.out[i].logprobs[j]}`,
        ),
      );
    });
  } finally {
    await fused.close();
    synth.cleanup();
  }
});

test("fused pipeline: requests drawn on the GPU with the host Sampler's filters (top-p / min-p without top-k, top-k with them, a temperature alone) give the same tokens chained as step by step", {
  skip,
}, async () => {
  const { synth, loaded, tok, fused, pageSize, numPages } = pagedFusedModel(13, 4, 48);
  try {
    let chains = 0;
    let picked = 0;
    const model: BatchModel = {
      config: fused.config,
      picksDraw: true,
      picksDrawFiltered: fused.picksDrawFiltered,
      chainsDraws: true,
      forwardBatch: (seqs) => fused.forwardBatch(seqs),
      forwardBatchPicks: (seqs, picks) => {
        picked += picks.filter((p) => typeof p === "object").length;
        return fused.forwardBatchPicks(seqs, picks);
      },
      decodeGreedyBatch: (seqs, steps, draws) => {
        chains++;
        return fused.decodeGreedyBatch(seqs, steps, draws);
      },
    };
    const V = loaded.config.nVocab;
    const reqs: SequenceRequest[] = [
      {
        prompt: randomTokens(5, 71, 1, V),
        maxTokens: 13,
        sampling: { temperature: 0.9, topP: 0.8, seed: 1 },
        ignoreEog: true,
      },
      {
        prompt: randomTokens(4, 72, 1, V),
        maxTokens: 11,
        sampling: { temperature: 1.2, minP: 0.1, seed: 2 },
        ignoreEog: true,
      },
      {
        prompt: randomTokens(6, 73, 1, V),
        maxTokens: 15,
        sampling: { temperature: 0.7, topK: 20, topP: 0.9, minP: 0.02, seed: 3 },
        ignoreEog: true,
      },
      { prompt: randomTokens(3, 74, 1, V), maxTokens: 9, sampling: { temperature: 1, seed: 4 }, ignoreEog: true },
    ];
    const run = async (chainSteps: number): Promise<Outcome[]> => {
      const s = new Scheduler(model, tok, new PagePool(fused.config, { pageSize, numPages }), {
        maxBatch: 4,
        prefillChunk: 6,
        tokenBudget: 16,
        chainSteps,
      });
      return serveAll(s, reqs);
    };
    const stepwise = await run(0);
    assert.equal(chains, 0);
    assert.ok(picked > 0, "the step-by-step run drew on the GPU");
    const chained = await run(8);
    assert.ok(chains >= 2, `${chains} chains`);
    chained.forEach((o, i) => {
      assert.deepEqual(o.ids, stepwise[i].ids, `request ${i}: ids`);
      assert.equal(o.ids.length, reqs[i].maxTokens);
      o.logprobs.forEach((lp, j) =>
        assert.ok(
          Math.abs(lp - stepwise[i].logprobs[j]) <= 1e-4,
          `request ${i} token ${j}: ${lp} vs ${stepwise[i].logprobs[j]}`,
        ),
      );
    });
    // the draws vary with the seed: not one fixed token
    assert.ok(new Set(stepwise.flatMap((o) => o.ids)).size > 4);
  } finally {
    await fused.close();
    synth.cleanup();
  }
});
