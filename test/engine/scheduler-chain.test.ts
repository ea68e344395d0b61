// Chained greedy decoding in the scheduler: with a model that can chain greedy steps on its device, the token streams,
// finish reasons, logprobs and event order equal those of host-sampled steps (chainSteps 0), and chains really run.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { PagePool } from "../../src/engine/paged-cache.js";
import { argmax, Sampler } from "../../src/engine/sampler.js";
import { logSoftmax } from "../../src/engine/logprobs.js";
import {
  Scheduler,
  type BatchModel,
  type Sequence,
  type SchedulerOptions,
  type SequenceRequest,
  type StepInfo,
} from "../../src/engine/scheduler.js";
import type { SequenceChunk } from "../../src/model/deepseek2.js";
import type { LatentStore } from "../../src/model/cache.js";
import type { GreedyChunk, GreedyPick, PickDraw } from "../../src/engine/device-picks.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";

const synth = synthModel(CASES[0], 5);
after(() => synth.cleanup());
const loaded = loadModel(synth.path);
const tokenizer = Tokenizer.fromMetadata(loaded.file.metadata);
const V = loaded.config.nVocab;

/**
 * Logits that depend only on (position, input token): a sequence's stream does not depend on its batch. Values in
 * 0..7, so the argmax ties often (both sides must pick the lowest id). `nanFrom`: positions from there give NaN logits.
 */
class FakeChainModel implements BatchModel {
  readonly config = loaded.config;
  chains = 0;
  chainedSteps = 0;
  constructor(private readonly nanFrom = Infinity) {}

  logits(pos: number, token: number): Float32Array {
    const out = new Float32Array(V);
    let h = (Math.imul(pos + 1, 0x9e3779b1) ^ Math.imul(token + 7, 0x85ebca6b)) >>> 0;
    for (let v = 0; v < V; v++) {
      h ^= h << 13;
      h ^= h >>> 17;
      h ^= h << 5;
      h >>>= 0;
      out[v] = h % 8;
    }
    if (pos >= this.nanFrom) out[h % V] = NaN;
    return out;
  }

  forwardBatch(seqs: readonly SequenceChunk[]): Float32Array[] {
    return seqs.map((s) => {
      const pos0 = s.cache!.length;
      const rows = s.tokens
        .map((t, j) => this.logits(pos0 + j, t))
        .filter((_, j) => s.logits === "all" || (s.logits === "last" && j === s.tokens.length - 1));
      s.cache!.advance(s.tokens.length);
      const out = new Float32Array(rows.length * V);
      rows.forEach((r, i) => out.set(r, i * V));
      return out;
    });
  }

  /** greedy picks as the device would make them (NaN logprob for a row the host sampler refuses) */
  pickCalls = 0;
  pickedRows = 0;
  forwardBatchPicks(
    seqs: readonly SequenceChunk[],
    picks: readonly (boolean | PickDraw)[],
  ): (Float32Array | GreedyPick)[] {
    this.pickCalls++;
    const rows = this.forwardBatch(seqs);
    return rows.map((r, i) => {
      if (picks[i] === false) return r;
      this.pickedRows++;
      const last = r.subarray(r.length - V);
      const id = argmax(last);
      let lp = NaN;
      try {
        lp = logSoftmax(last)[id];
      } catch {
        // refused by the host sampler: NaN
      }
      return { token: id, logprob: lp };
    });
  }

  decodeGreedyBatch(
    seqs: readonly { readonly token: number; readonly cache: LatentStore }[],
    steps: number,
  ): GreedyChunk[] {
    this.chains++;
    this.chainedSteps += steps;
    return seqs.map(({ token, cache }) => {
      const tokens: number[] = [];
      const logprobs: number[] = [];
      let input = token;
      for (let s = 0; s < steps; s++) {
        const logits = this.logits(cache.length + s, input);
        let lp = NaN;
        let id = argmax(logits);
        try {
          lp = logSoftmax(logits)[id];
        } catch {
          // refused by the host sampler: the device reports a NaN logprob (and some id)
          id = 0;
        }
        tokens.push(id);
        logprobs.push(lp);
        input = id;
      }
      cache.advance(steps);
      return { tokens, logprobs };
    });
  }
}

interface Run {
  events: string[];
  results: { tokens: readonly number[]; text: string; finish: string; error?: string; cached: number }[];
  steps: StepInfo[];
  /** each request's token texts, in order */
  pieces: string[][];
  model: FakeChainModel;
  pagesInUse: number;
}

type Req = SequenceRequest & { cancelAt?: number };

async function run(
  reqs: readonly Req[],
  opts: SchedulerOptions,
  model = new FakeChainModel(),
  followUp?: (r: Run) => SequenceRequest,
): Promise<Run> {
  const pool = new PagePool(loaded.config, { pageSize: 4, numPages: 256 });
  const steps: StepInfo[] = [];
  const s = new Scheduler(model, tokenizer, pool, {
    maxBatch: 8,
    prefillChunk: 5,
    tokenBudget: 12,
    ...opts,
    onStep: (i) => steps.push(i),
  });
  const events: string[] = [];
  const results: Run["results"] = [];
  const pieces: string[][] = [];
  const go = (req: Req, i: number): Promise<void> =>
    new Promise((resolve) => {
      const seq = s.submit(req, {
        onToken: (t) => {
          (pieces[i] ??= []).push(t.text);
          events.push(
            `${i} #${t.index} ${t.id} ${JSON.stringify(t.text)} ${t.logprob}${t.top !== undefined ? ` top ${JSON.stringify(t.top)}` : ""}`,
          );
          if (req.cancelAt === t.index) s.cancel(seq);
        },
        onFinish: (r) => {
          events.push(`${i} finish ${r.finishReason} tail ${JSON.stringify(r.tail)}`);
          results[i] = {
            tokens: r.tokens,
            text: r.text,
            finish: r.finishReason,
            ...(r.error !== undefined ? { error: r.error.message } : {}),
            cached: r.cachedTokens,
          };
          resolve();
        },
      });
    });
  await Promise.all(reqs.map(go));
  const out: Run = { events, results, steps, pieces, model, pagesInUse: 0 };
  if (followUp !== undefined) await go(followUp(out), reqs.length);
  await s.idle();
  out.pagesInUse = pool.stats().pagesInUse;
  return out;
}

const greedy = (prompt: number[], maxTokens: number, more: Partial<Req> = {}): Req => ({
  prompt,
  maxTokens,
  sampling: { temperature: 0 },
  ...more,
});

test("chained greedy steps give the same streams, logprobs, finishes and events as host-sampled steps", async () => {
  const base = [
    greedy(randomTokens(3, 1, 3, V), 30),
    greedy(randomTokens(9, 2, 3, V), 17),
    greedy(randomTokens(6, 3, 3, V), 40, { ignoreEog: true }),
    greedy(randomTokens(2, 4, 3, V), 25, { ignoreEog: true }),
  ];
  const plain = await run(base, { chainSteps: 0 });
  // a stop token from request 0's stream, a stop string across two of request 2's tokens, a cancel in request 3
  const r0 = plain.results[0];
  const r2 = plain.results[2];
  assert.ok(r0.tokens.length > 8 && r2.tokens.length > 12, "streams long enough for the stops below");
  const stopTok = r0.tokens[7];
  const pieces = plain.pieces[2];
  const k = pieces.findIndex((p, i) => i >= 9 && p.length > 0 && (pieces[i + 1] ?? "").length > 0);
  assert.ok(k > 0, "two non-empty pieces in a row");
  const stopStr = pieces[k].slice(-1) + pieces[k + 1].slice(0, 1);
  const reqs: Req[] = [
    { ...base[0], stopTokens: [stopTok] },
    base[1],
    { ...base[2], stop: [stopStr] },
    { ...base[3], cancelAt: 13 },
    greedy(randomTokens(4, 5, 3, V), 3),
    greedy(randomTokens(5, 6, 3, V), 1),
  ];
  const host = await run(reqs, { chainSteps: 0 });
  for (const chainSteps of [8, 5, 2]) {
    const chained = await run(reqs, { chainSteps });
    assert.deepEqual(chained.events, host.events, `chainSteps ${chainSteps}: events`);
    assert.deepEqual(chained.results, host.results, `chainSteps ${chainSteps}: results`);
    assert.ok(chained.model.chains >= 2, `chainSteps ${chainSteps}: ${chained.model.chains} chains ran`);
    assert.ok(
      chained.steps.some((s) => s.chained === chainSteps),
      `chainSteps ${chainSteps}: chains grow to chainSteps: ${chained.steps.map((s) => s.chained ?? 1).join(" ")}`,
    );
    assert.ok(chained.steps.every((s) => (s.chained ?? 1) <= chainSteps));
    assert.equal(chained.pagesInUse, 0);
  }
  assert.equal(host.model.chains, 0);
  assert.equal(host.results[0].finish, "stop");
  assert.ok(host.results[0].tokens.length <= 7);
  assert.equal(host.results[2].finish, "stop");
  assert.ok(!host.results[2].text.includes(stopStr));
  assert.equal(host.results[3].finish, "abort");
  assert.equal(host.results[3].tokens.length, 14);
});

test("sequences ending a token apart ride along a chain to the last one's limit: no host step each as they end; the same streams", async () => {
  // all admitted in the first step (12 prompt tokens in the budget), then every step decodes all that still run
  const reqs = Array.from({ length: 6 }, (_, i) => greedy(randomTokens(2, 20 + i, 3, V), 20 + i, { ignoreEog: true }));
  const host = await run(reqs, { chainSteps: 0, maxBatch: 6 });
  const chained = await run(reqs, { chainSteps: 8, maxBatch: 6 });
  assert.deepEqual(chained.events, host.events);
  assert.deepEqual(chained.results, host.results);
  assert.ok(host.results.every((r, i) => r.tokens.length === 20 + i && r.finish === "length"));
  // the prefill step samples every first token; the rest is chained (4, 8, 8, then the 4 the longest still needs),
  // where each sequence ending before the longest had cost a host step of its own
  const kinds = chained.steps.map((s) => s.chained ?? "host").join(" ");
  assert.equal(kinds, ["host", ...[4, 8, 8, 4].flatMap((n) => Array<number>(n).fill(n))].join(" "));
  assert.equal(chained.pagesInUse, 0);
});

test("greedy choices made on the device in host steps (forwardBatchPicks) give the same streams and events as host sampling; sampled and top-logprobs requests keep their rows", async () => {
  const reqs: Req[] = [
    greedy(randomTokens(3, 31, 3, V), 12),
    greedy(randomTokens(9, 32, 3, V), 7, { ignoreEog: true }),
    { prompt: randomTokens(4, 33, 3, V), maxTokens: 9, sampling: { temperature: 0.8, seed: 5 } },
    greedy(randomTokens(5, 34, 3, V), 6, { sampling: { temperature: 0, logprobs: 2 } }),
    greedy(randomTokens(2, 35, 3, V), 0),
  ];
  // a model without picks: every row sampled on the host
  const plainModel = new FakeChainModel();
  (plainModel as { forwardBatchPicks?: unknown }).forwardBatchPicks = undefined;
  const host = await run(reqs, { chainSteps: 0 }, plainModel);
  const picked = await run(reqs, { chainSteps: 0 });
  assert.deepEqual(picked.events, host.events);
  assert.deepEqual(picked.results, host.results);
  assert.ok(
    picked.model.pickCalls > 0 && picked.model.pickedRows > 0,
    `${picked.model.pickCalls} calls, ${picked.model.pickedRows} rows picked`,
  );
  // a row the host sampler refuses ends its sequence with an error either way
  const nanHost = new FakeChainModel(6);
  (nanHost as { forwardBatchPicks?: unknown }).forwardBatchPicks = undefined;
  const a = await run([greedy(randomTokens(3, 36, 3, V), 10, { ignoreEog: true })], { chainSteps: 0 }, nanHost);
  const b = await run(
    [greedy(randomTokens(3, 36, 3, V), 10, { ignoreEog: true })],
    { chainSteps: 0 },
    new FakeChainModel(6),
  );
  assert.equal(a.results[0].finish, "error");
  assert.equal(b.results[0].finish, "error");
  assert.deepEqual(b.results[0].tokens, a.results[0].tokens);
});

/** A model whose picks also take draws at a temperature: the token is the key modulo the vocabulary (a stand-in for the device's draw). */
class FakeDrawModel extends FakeChainModel {
  readonly picksDraw = true;
  /** the draws received, per step */
  draws: PickDraw[] = [];
  kinds = new Set<string>();
  override forwardBatchPicks(
    seqs: readonly SequenceChunk[],
    picks: readonly (boolean | PickDraw)[],
  ): (Float32Array | GreedyPick)[] {
    const out = super.forwardBatchPicks(
      seqs,
      picks.map((p) => p === true),
    );
    return out.map((o, i) => {
      const p = picks[i];
      this.kinds.add(typeof p === "object" ? "draw" : String(p));
      if (typeof p !== "object") return o;
      this.draws.push(p);
      const row = (o as Float32Array).subarray((o as Float32Array).length - V);
      const token = p.key % V;
      return { token, logprob: logSoftmax(row)[token] };
    });
  }
}

test("draws at a temperature alone are made on a model that takes them (PickDraw, keys from the request's seeded sampler); filtered or top-logprobs requests keep their rows", async () => {
  const draw = {
    prompt: randomTokens(4, 41, 3, V),
    maxTokens: 9,
    ignoreEog: true,
    sampling: { temperature: 0.8, seed: 5 },
  };
  const reqs: Req[] = [
    greedy(randomTokens(3, 42, 3, V), 6, { ignoreEog: true }),
    draw,
    {
      prompt: randomTokens(5, 43, 3, V),
      maxTokens: 5,
      ignoreEog: true,
      sampling: { temperature: 0.8, topP: 0.9, seed: 6 },
    },
    {
      prompt: randomTokens(2, 44, 3, V),
      maxTokens: 5,
      ignoreEog: true,
      sampling: { temperature: 0.7, logprobs: 2, seed: 7 },
    },
  ];
  const m = new FakeDrawModel();
  const r = await run(reqs, { chainSteps: 0 }, m);
  assert.deepEqual([...m.kinds].sort(), ["draw", "false", "true"]);
  // every draw is request 1's, at its temperature, with the keys its seed gives, one a token; its tokens follow them
  const keys = new Sampler({ temperature: 0.8, seed: 5 });
  assert.equal(m.draws.length, 9);
  for (const d of m.draws) assert.deepEqual(d, { temperature: 0.8, topK: 0, topP: 1, minP: 0, key: keys.drawKey() });
  assert.deepEqual(
    r.results[1].tokens,
    m.draws.map((d) => d.key % V),
  );
  // the same seed again: the same stream; the filtered and top-logprobs requests sampled on the host as before
  const again = await run(reqs, { chainSteps: 0 }, new FakeDrawModel());
  assert.deepEqual(again.results, r.results);
  const host = await run(reqs, { chainSteps: 0 });
  assert.deepEqual([r.results[2], r.results[3]], [host.results[2], host.results[3]]);
  assert.deepEqual(r.results[0], host.results[0]);
});

test("no chaining while a sampled or top-logprobs request is in the batch; the same streams either way", async () => {
  const reqs: Req[] = [
    greedy(randomTokens(3, 11, 3, V), 30, { ignoreEog: true }),
    greedy(randomTokens(4, 12, 3, V), 12, { ignoreEog: true, sampling: { temperature: 0.8, seed: 3 } }),
    greedy(randomTokens(5, 13, 3, V), 20, { ignoreEog: true, sampling: { temperature: 0, logprobs: 2 } }),
  ];
  const host = await run(reqs, { chainSteps: 0 });
  const chained = await run(reqs, { chainSteps: 8 });
  assert.deepEqual(chained.events, host.events);
  assert.deepEqual(chained.results, host.results);
  assert.ok(chained.model.chains > 0, "request 0 chains once it runs alone");
  // every chained step came after the other two had finished: request 0 is then alone
  for (const s of chained.steps) if (s.chained !== undefined) assert.equal(s.sequences, 1);
});

test("a chained step whose logits the sampler refuses ends the sequence with an error, as on the host", async () => {
  const reqs = [
    greedy(randomTokens(3, 21, 3, V), 30, { ignoreEog: true }),
    greedy(randomTokens(8, 22, 3, V), 30, { ignoreEog: true }),
  ];
  const host = await run(reqs, { chainSteps: 0 }, new FakeChainModel(14));
  const chained = await run(reqs, { chainSteps: 8 }, new FakeChainModel(14));
  assert.ok(chained.model.chains > 0);
  assert.deepEqual(
    chained.results.map((r) => [r.tokens, r.finish]),
    host.results.map((r) => [r.tokens, r.finish]),
  );
  for (const r of chained.results) {
    assert.equal(r.finish, "error");
    assert.match(r.error ?? "", /NaN/);
  }
  assert.equal(chained.pagesInUse, 0);
});

test("pages filled by a chain are published with the ids the chain fed: a follow-up prompt finds them", async () => {
  const reqs = [greedy(randomTokens(3, 31, 3, V), 21, { ignoreEog: true })];
  const follow = (r: Run): SequenceRequest =>
    greedy([...reqs[0].prompt, ...r.results[0].tokens], 2, { ignoreEog: true });
  const host = await run(reqs, { chainSteps: 0 }, new FakeChainModel(), follow);
  const chained = await run(reqs, { chainSteps: 8 }, new FakeChainModel(), follow);
  assert.ok(chained.model.chains > 0);
  assert.deepEqual(chained.results, host.results);
  assert.equal(host.results[1].cached, 20);
});

test("a model that filters its draws (picksDrawFiltered) also takes requests with top-p and min-p, with top-k 0 or 1..64; top-k past 64 and top logprobs stay on the host", async () => {
  class FakeTopKModel extends FakeDrawModel {
    readonly picksDrawFiltered = true;
  }
  const reqs: Req[] = [
    {
      prompt: randomTokens(4, 51, 3, V),
      maxTokens: 6,
      ignoreEog: true,
      sampling: { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, seed: 11 },
    },
    {
      prompt: randomTokens(3, 52, 3, V),
      maxTokens: 5,
      ignoreEog: true,
      sampling: { temperature: 0.8, topP: 0.9, seed: 12 },
    },
    {
      prompt: randomTokens(3, 53, 3, V),
      maxTokens: 5,
      ignoreEog: true,
      sampling: { temperature: 0.8, topK: 65, seed: 13 },
    },
    {
      prompt: randomTokens(2, 54, 3, V),
      maxTokens: 5,
      ignoreEog: true,
      sampling: { temperature: 0.7, topK: 10, logprobs: 2, seed: 14 },
    },
  ];
  const m = new FakeTopKModel();
  const r = await run(reqs, { chainSteps: 0 }, m);
  const keys = new Sampler({ temperature: 0.8, seed: 11 });
  const keysP = new Sampler({ temperature: 0.8, seed: 12 });
  const withK = m.draws.filter((d) => d.topK === 40);
  const withP = m.draws.filter((d) => d.topK === 0);
  assert.equal(withK.length, 6);
  assert.equal(withP.length, 5);
  assert.equal(m.draws.length, 11);
  for (const d of withK)
    assert.deepEqual(d, { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, key: keys.drawKey() });
  for (const d of withP) assert.deepEqual(d, { temperature: 0.8, topK: 0, topP: 0.9, minP: 0, key: keysP.drawKey() });
  assert.deepEqual(
    r.results[0].tokens,
    withK.map((d) => d.key % V),
  );
  assert.deepEqual(
    r.results[1].tokens,
    withP.map((d) => d.key % V),
  );
  const host = await run(reqs, { chainSteps: 0 });
  assert.deepEqual([r.results[2], r.results[3]], [host.results[2], host.results[3]]);
  // a model that draws only at a temperature keeps the top-k request on the host
  const plain = new FakeDrawModel();
  const p = await run(reqs, { chainSteps: 0 }, plain);
  assert.equal(plain.draws.length, 0);
  assert.deepEqual(p.results, host.results);
});

/** FakeDrawModel whose chains take draws too (chainsDraws): a drawn step's token is its key modulo the vocabulary, as in its picks. */
class FakeChainDrawModel extends FakeDrawModel {
  readonly chainsDraws = true;
  readonly picksDrawFiltered = true;
  chainDraws: PickDraw[] = [];
  override decodeGreedyBatch(
    seqs: readonly { readonly token: number; readonly cache: LatentStore }[],
    steps: number,
    draws?: readonly PickDraw[],
  ): GreedyChunk[] {
    if (draws === undefined) return super.decodeGreedyBatch(seqs, steps);
    assert.equal(draws.length, steps * seqs.length);
    this.chains++;
    this.chainedSteps += steps;
    this.chainDraws.push(...draws);
    return seqs.map(({ token, cache }, b) => {
      const tokens: number[] = [];
      const logprobs: number[] = [];
      let input = token;
      for (let s = 0; s < steps; s++) {
        const logits = this.logits(cache.length + s, input);
        const d = draws[s * seqs.length + b];
        const id = d.temperature > 0 ? d.key % V : argmax(logits);
        tokens.push(id);
        logprobs.push(logSoftmax(logits)[id]);
        input = id;
      }
      cache.advance(steps);
      return { tokens, logprobs };
    });
  }
}

test("chains take draws on a model that chains them: drawn and greedy requests together give what step-by-step picks give (keys in each request's token order); a request sampled on the host keeps the batch unchained", async () => {
  const reqs: Req[] = [
    { prompt: randomTokens(4, 61, 3, V), maxTokens: 17, ignoreEog: true, sampling: { temperature: 0.8, seed: 21 } },
    {
      prompt: randomTokens(3, 62, 3, V),
      maxTokens: 11,
      ignoreEog: true,
      sampling: { temperature: 1.1, topK: 40, topP: 0.9, seed: 22 },
    },
    greedy(randomTokens(5, 63, 3, V), 14, { ignoreEog: true }),
  ];
  const stepwise = await run(reqs, { chainSteps: 0 }, new FakeChainDrawModel());
  const m = new FakeChainDrawModel();
  const chained = await run(reqs, { chainSteps: 8 }, m);
  assert.ok(m.chains >= 2 && m.chainDraws.length > 0, `${m.chains} chains, ${m.chainDraws.length} draws`);
  assert.deepEqual(chained.results, stepwise.results);
  assert.deepEqual(chained.events, stepwise.events);
  // greedy members of a drawn chain go at temperature 0; the drawn ones carry their settings
  assert.ok(m.chainDraws.some((d) => d.temperature === 0) && m.chainDraws.some((d) => d.topK === 40 && d.topP === 0.9));
  // a request with top logprobs is sampled on the host: no chain while it runs
  const withHost = [
    ...reqs,
    {
      prompt: randomTokens(2, 64, 3, V),
      maxTokens: 30,
      ignoreEog: true,
      sampling: { temperature: 0.8, topP: 0.9, logprobs: 2, seed: 23 },
    },
  ];
  const h = new FakeChainDrawModel();
  await run(withHost, { chainSteps: 8 }, h);
  assert.equal(h.chains, 0, "no chain while a host-sampled request runs");
});

test("greedy requests with a logit bias or a penalty are neither chained nor picked on the device: their tokens are the adjusted argmax", async () => {
  const prompt = randomTokens(4, 21, 3, V);
  const plain = await run([greedy(prompt, 12, { ignoreEog: true })], { chainSteps: 8 });
  assert.ok(plain.model.chains > 0 && plain.model.pickedRows > 0, "the plain request does use the device");
  const first = plain.results[0].tokens[0];
  for (const sampling of [
    { temperature: 0, logitBias: new Map([[first, -100]]) },
    { temperature: 0, frequencyPenalty: 2 },
    { temperature: 0, repetitionPenalty: 1.5, promptTokens: prompt },
  ]) {
    const adjusted = await run([greedy(prompt, 12, { ignoreEog: true, sampling })], { chainSteps: 8 });
    assert.equal(adjusted.model.chains, 0, JSON.stringify(sampling));
    assert.equal(adjusted.model.pickedRows, 0, JSON.stringify(sampling));
    // the same choices made on the host from the fake model's rows, one token at a time
    const sampler = new Sampler(sampling);
    const want: number[] = [];
    let input = prompt[prompt.length - 1];
    for (let pos = prompt.length - 1; want.length < 12; pos++) {
      input = sampler.sample(adjusted.model.logits(pos, input)).token;
      want.push(input);
    }
    assert.deepEqual(adjusted.results[0].tokens, want, JSON.stringify(sampling));
  }
  assert.notEqual(
    (
      await run(
        [greedy(prompt, 12, { ignoreEog: true, sampling: { temperature: 0, logitBias: new Map([[first, -100]]) } })],
        { chainSteps: 8 },
      )
    ).results[0].tokens[0],
    first,
  );
});

test("a held sequence sits out the chains (the other chains on without it) and resumes to the same tokens", async () => {
  const prompts = [randomTokens(5, 31, 3, V), randomTokens(6, 32, 3, V)];
  const req = (prompt: number[]): SequenceRequest => ({
    prompt,
    maxTokens: 40,
    sampling: { temperature: 0 },
    ignoreEog: true,
  });
  const want = await run(prompts.map(req), { chainSteps: 0 });
  const model = new FakeChainModel();
  const s = new Scheduler(model, tokenizer, new PagePool(loaded.config, { pageSize: 4, numPages: 256 }), {
    maxBatch: 8,
    chainSteps: 8,
  });
  const ids: number[][] = [[], []];
  let a!: Sequence;
  const doneA = new Promise<void>((resolve) => {
    a = s.submit(req(prompts[0]), {
      onToken: (t) => {
        ids[0].push(t.id);
        if (ids[0].length === 2) s.hold(a);
      },
      onFinish: () => resolve(),
    });
  });
  await new Promise<void>((resolve) =>
    s.submit(req(prompts[1]), { onToken: (t) => ids[1].push(t.id), onFinish: () => resolve() }),
  );
  const heldAt = ids[0].length;
  // held mid-chain, it still gets the rest of that chain (already computed): at most chainSteps - 1 more
  assert.ok(heldAt >= 2 && heldAt <= 9, `${heldAt} tokens while held`);
  assert.ok(model.chains > 0, "no chain ran");
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(ids[0].length, heldAt);
  s.release(a);
  await doneA;
  assert.deepEqual(
    ids,
    want.results.map((r) => [...r.tokens]),
  );
});
