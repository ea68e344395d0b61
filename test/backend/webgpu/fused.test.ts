// FusedGpuModel: the fused pipeline behind the engine's synchronous forward (worker thread, blocking calls). Chunked
// prefill with every position's logits, then decode steps, against the CPU reference path (≤ 1e-3); a new cache
// object starts the sequence over; the context limit, the reference path and unsupported models are clear errors;
// close() drains the worker; glm-dsa's DSA selection runs on the GPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LatentCache } from "../../../src/model/cache.js";
import { PagedSequence, PagePool } from "../../../src/engine/paged-cache.js";
import { logSoftmaxRow } from "../../../src/engine/evaluate.js";
import { loadModel } from "../../../src/runtime/load.js";
import { FusedGpuModel } from "../../../src/backend/webgpu/engine/fused.js";
import { LatentError } from "../../../src/util/errors.js";
import type { SequenceChunk } from "../../../src/model/deepseek2.js";
import { argmax, logprobRows, maxAbsDiff, rowLogprobs } from "../../helpers/logprobs.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { gpuOrSkip } from "./helpers.js";
import { Sampler } from "../../../src/engine/sampler.js";
import type { PickDraw } from "../../../src/engine/device-picks.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

test("FusedGpuModel.forward: prefill chunks (all logits) + decode steps match the reference; a new cache restarts", {
  skip,
}, () => {
  const c = CASES.find((x) => x.base === "tiny")!;
  const m = synthModel(c, 21);
  const fused = (() => {
    const { model, config } = loadModel(m.path);
    const tokens = randomTokens(10, 5, 0, config.nVocab);
    const ref = logprobRows(model, tokens, "reference");
    // the kernels of its steps compiled while loading: prefill chunks of 3 and 1 tokens (7 = 3 + 3 + 1), decode steps
    const f = new FusedGpuModel(config, { context: 12, maxTokens: 3, warm: { decode: 1, prefill: [3, 1] } });
    let last: [number, number, string] = [0, 0, ""];
    const phases = new Set<string>();
    const stats = f.load(m.path, (done, total, phase) => {
      last = [done, total, phase];
      phases.add(phase);
    });
    assert.ok(last[1] > 0 && last[0] === last[1], `progress ends at the total: ${last.join("/")}`);
    // (a model this small may load between two ticks: no "load" tick before the kernels)
    assert.equal(last[2], "compile");
    assert.ok(
      [...phases].every((p, i) => p === (i === phases.size - 1 ? "compile" : "load")),
      [...phases].join(),
    );
    assert.ok(stats.kernels > 0 && stats.compileMs > 0 && f.warmStats === stats, JSON.stringify(stats));
    return { f, tokens, ref, V: config.nVocab };
  })();
  const { f, tokens, ref, V } = fused;
  try {
    for (let round = 0; round < 2; round++) {
      const cache = new LatentCache(f.config);
      const got: Float64Array[] = [];
      const all = f.forward(tokens.slice(0, 7), cache, { path: "prefill", logits: "all" });
      for (let i = 0; i < 7; i++) got.push(logSoftmaxRow(all.subarray(i * V, (i + 1) * V)));
      for (let i = 7; i < 10; i++)
        got.push(logSoftmaxRow(f.forward([tokens[i]], cache, { path: "decode", logits: "last" })));
      const err = maxAbsDiff(got, ref);
      assert.ok(err <= 1e-3, `round ${round}: max |Δ logprob| ${err}`);
    }
    const cache = new LatentCache(f.config);
    assert.equal(f.config.contextLength, 12);
    assert.throws(
      () => f.forward(randomTokens(13, 1, 0, V), cache, { path: "prefill", logits: "last" }),
      /context full/,
    );
    assert.throws(() => f.forward(tokens, undefined, { path: "reference", logits: "last" }), LatentError);
  } finally {
    void f.close();
    m.cleanup();
  }
});

test("FusedGpuModel.forwardBatch: interleaved sequences in GPU slots (decode batches, prefill chunks past maxTokens, a third sequence reusing a finished one's slot) match the reference", {
  skip,
}, () => {
  const c = CASES.find((x) => x.label === "no-qlora-odd")!;
  const m = synthModel(c, 4);
  const { model, config } = loadModel(m.path);
  const V = config.nVocab;
  const seqs = [randomTokens(9, 31, 0, V), randomTokens(8, 32, 0, V), randomTokens(6, 33, 0, V)];
  const refs = seqs.map((t) => logprobRows(model, t, "reference"));
  const f = new FusedGpuModel(config, { slots: 2, context: 16, maxTokens: 3 });
  try {
    f.load(m.path);
    const caches = seqs.map(() => new LatentCache(f.config));
    const got: Float64Array[][] = [[], [], []];
    const take = (i: number, rows: Float32Array): number => got[i].push(...rowLogprobs(rows, V));
    // step 1: sequence 0 prefills 5 tokens (two GPU steps of ≤ 3), sequence 1 prefills 4 with "all" logits
    let outs = f.forwardBatch([
      { tokens: seqs[0].slice(0, 5), cache: caches[0], path: "prefill", logits: "all" },
      { tokens: seqs[1].slice(0, 4), cache: caches[1], path: "prefill", logits: "all" },
    ]);
    take(0, outs[0]);
    take(1, outs[1]);
    // decode both together until sequence 1 ends, then sequence 0 alone
    for (let pos = 5; pos < 9; pos++) {
      const chunks = [0, 1].filter((i) => pos - (i === 1 ? 1 : 0) < seqs[i].length);
      const step = chunks.map((i) => ({
        tokens: [seqs[i][i === 1 ? pos - 1 : pos]],
        cache: caches[i],
        path: "decode" as const,
        logits: "last" as const,
      }));
      outs = f.forwardBatch(step);
      chunks.forEach((i, k) => take(i, outs[k]));
    }
    // both are done: sequence 2 takes the least recently used slot (sequence 0's: 1 was used after it in the last step)
    outs = f.forwardBatch([{ tokens: seqs[2], cache: caches[2], path: "prefill", logits: "all" }]);
    take(2, outs[0]);
    for (let s = 0; s < 3; s++) {
      const err = maxAbsDiff(got[s], refs[s].slice(0, got[s].length));
      assert.equal(got[s].length, seqs[s].length, `sequence ${s}: rows`);
      assert.ok(err <= 1e-3, `sequence ${s}: max |Δ logprob| ${err}`);
    }
    assert.equal(caches[0].length, 9);
    // sequence 0 lost its slot: continuing it is an error, not a silently wrong answer; nor do 3 new sequences fit 2 slots
    assert.throws(
      () => f.forwardBatch([{ tokens: [1], cache: caches[0], path: "decode", logits: "last" }]),
      /no latents for a sequence that starts at position 9/,
    );
    const fresh = (): SequenceChunk => ({
      tokens: [1],
      cache: new LatentCache(f.config),
      path: "decode",
      logits: "last",
    });
    assert.throws(() => f.forwardBatch([fresh(), fresh(), fresh()]), /more than 2 sequences in one step/);
  } finally {
    void f.close();
    m.cleanup();
  }
});

test("FusedGpuModel.forwardBatch packs decodes and prompt chunks of different sequences into shared GPU steps of ≤ maxTokens (a chunk split across two); every row matches the reference", {
  skip,
}, () => {
  for (const c of [CASES.find((x) => x.label === "no-qlora-odd")!, CASES.find((x) => x.label === "glm-dsa-top16")!]) {
    const m = synthModel(c, 6);
    const { model, config } = loadModel(m.path);
    const V = config.nVocab;
    const seqs = [randomTokens(6, 41, 0, V), randomTokens(7, 42, 0, V), randomTokens(8, 43, 0, V)];
    const refs = seqs.map((t) => logprobRows(model, t, "reference"));
    const f = new FusedGpuModel(config, { slots: 3, context: 16, maxTokens: 8 });
    try {
      f.load(m.path);
      const caches = seqs.map(() => new LatentCache(f.config));
      const got: Float64Array[][] = [[], [], []];
      const take = (i: number, rows: Float32Array): number => got[i].push(...rowLogprobs(rows, V));
      take(0, f.forwardBatch([{ tokens: seqs[0].slice(0, 3), cache: caches[0], path: "prefill", logits: "all" }])[0]);
      assert.equal(f.gpuSteps, 1);
      // 1 decode + 5 + 4 prompt tokens = 10: steps of 8 (the decode, sequence 1's five, two of sequence 2's) and 2
      let outs = f.forwardBatch([
        { tokens: seqs[1].slice(0, 5), cache: caches[1], path: "prefill", logits: "all" },
        { tokens: seqs[2].slice(0, 4), cache: caches[2], path: "prefill", logits: "none" },
        { tokens: [seqs[0][3]], cache: caches[0], path: "decode", logits: "last" },
      ]);
      assert.equal(f.gpuSteps, 3);
      assert.equal(outs[1].length, 0);
      take(1, outs[0]);
      take(0, outs[2]);
      // two decodes and sequence 2's last 4 prompt tokens (the last one's logits): one step
      outs = f.forwardBatch([
        { tokens: seqs[2].slice(4), cache: caches[2], path: "prefill", logits: "last" },
        { tokens: [seqs[0][4]], cache: caches[0], path: "decode", logits: "last" },
        { tokens: [seqs[1][5]], cache: caches[1], path: "decode", logits: "last" },
      ]);
      assert.equal(f.gpuSteps, 4);
      take(2, outs[0]);
      take(0, outs[1]);
      take(1, outs[2]);
      const want = [refs[0].slice(0, 5), refs[1].slice(0, 6), refs[2].slice(7, 8)];
      for (let s = 0; s < 3; s++) {
        assert.equal(got[s].length, want[s].length, `${c.label} sequence ${s}: rows`);
        const err = maxAbsDiff(got[s], want[s]);
        assert.ok(err <= 1e-3, `${c.label} sequence ${s}: max |Δ logprob| ${err}`);
      }
      assert.deepEqual(
        caches.map((x) => x.length),
        [5, 6, 8],
      );
      assert.throws(
        () =>
          f.forwardBatch(
            [0, 0].map(() => ({ tokens: [1], cache: caches[0], path: "decode" as const, logits: "last" as const })),
          ),
        /two chunks of one sequence/,
      );
    } finally {
      void f.close();
      m.cleanup();
    }
  }
});

type Pick = boolean | PickDraw;

/**
 * Two FusedGpuModels on one file, three sequences: `a` takes forwardBatchPicks with each round's picks, `b` forwardBatch
 * on the same chunks. Round 0: prompt chunks of 5 and 8 tokens ("last": the 8 split across the 8-token steps) and an
 * "all" chunk of 3; later rounds: one decode token each. A greedy pick must be the argmax of b's row, a draw a token
 * of the vocabulary, each with b's log_softmax there; a chunk not picked gives b's rows. Then `after(a, caches)`.
 */
function picksAgainstHost(
  seed: number,
  rounds: readonly (readonly Pick[])[],
  after: (a: FusedGpuModel, ca: LatentCache[]) => void,
): void {
  const c = CASES.find((x) => x.label === "no-qlora-odd")!;
  const m = synthModel(c, 8);
  const { config } = loadModel(m.path);
  const V = config.nVocab;
  const seqs = [randomTokens(8, seed, 0, V), randomTokens(11, seed + 1, 0, V), randomTokens(6, seed + 2, 0, V)];
  const a = new FusedGpuModel(config, { slots: 3, context: 16, maxTokens: 8 });
  const b = new FusedGpuModel(config, { slots: 3, context: 16, maxTokens: 8 });
  try {
    a.load(m.path);
    b.load(m.path);
    const ca = seqs.map(() => new LatentCache(a.config));
    const cb = seqs.map(() => new LatentCache(b.config));
    const chunks = (caches: LatentCache[], round: number): SequenceChunk[] =>
      round === 0
        ? [
            { tokens: seqs[0].slice(0, 5), cache: caches[0], path: "prefill", logits: "last" },
            { tokens: seqs[1].slice(0, 8), cache: caches[1], path: "prefill", logits: "last" },
            { tokens: seqs[2].slice(0, 3), cache: caches[2], path: "prefill", logits: "all" },
          ]
        : [0, 1, 2].map((i) => ({
            tokens: [seqs[i][caches[i].length]],
            cache: caches[i],
            path: "decode" as const,
            logits: "last" as const,
          }));
    rounds.forEach((picks, round) => {
      const got = a.forwardBatchPicks(chunks(ca, round), picks);
      const want = b.forwardBatch(chunks(cb, round));
      picks.forEach((p, i) => {
        if (p === false) {
          assert.ok(got[i] instanceof Float32Array);
          assert.deepEqual(Array.from(got[i] as Float32Array), Array.from(want[i]), `round ${round} chunk ${i}: rows`);
          return;
        }
        const g = got[i] as { token: number; logprob: number };
        const row = want[i].subarray(want[i].length - V);
        const lp = logSoftmaxRow(row);
        if (p === true) assert.equal(g.token, argmax(row), `round ${round} chunk ${i}: greedy token`);
        else {
          assert.ok(
            Number.isInteger(g.token) && g.token >= 0 && g.token < V,
            `round ${round} chunk ${i}: drawn token ${g.token}`,
          );
          // a filtered draw: one of the host Sampler's kept ids for b's row
          if ((p.topK ?? 0) > 0)
            assert.ok(
              keptIds(lp, p).includes(g.token),
              `round ${round} chunk ${i}: drawn token ${g.token} outside the host's kept ids`,
            );
        }
        assert.ok(
          Math.abs(g.logprob - lp[g.token]) <= 1e-4,
          `round ${round} chunk ${i}: logprob ${g.logprob} vs ${lp[g.token]}`,
        );
      });
    });
    after(a, ca);
  } finally {
    void a.close();
    void b.close();
    m.cleanup();
  }
}

test("FusedGpuModel.forwardBatchPicks: the GPU's greedy choice of a chunk's last row equals the host's on forwardBatch's rows (mixed with rows read back, a chunk split across steps, all-pick steps)", {
  skip,
}, () => {
  // round 0: two picks (one split across the 8-token steps) and an "all" chunk read back; round 1: all three picks
  picksAgainstHost(
    51,
    [
      [true, true, false],
      [true, true, true],
    ],
    (a, ca) => {
      assert.deepEqual(
        ca.map((x) => x.length),
        [6, 9, 4],
      );
      assert.throws(
        () => a.forwardBatchPicks([{ tokens: [1], cache: ca[0], path: "decode", logits: "all" }], [true]),
        /without logits "last"/,
      );
    },
  );
});

test("FusedGpuModel.forwardBatchPicks with draws: tokens drawn at a temperature on the GPU come with the host's log_softmax of their row; greedy picks and rows read back beside them as before", {
  skip,
}, () => {
  // round 0: a draw (its chunk split across the 8-token steps), a greedy pick, an "all" chunk read back; round 1: two
  // draws at other temperatures beside a greedy pick
  const rounds: Pick[][] = [
    [{ temperature: 0.8, key: 12345 }, true, false],
    [{ temperature: 1.7, key: 0xfffffff0 }, true, { temperature: 0.3, key: 7 }],
  ];
  picksAgainstHost(61, rounds, (a, ca) => {
    assert.equal(a.picksDraw, true);
    assert.deepEqual(
      ca.map((x) => x.length),
      [6, 9, 4],
    );
    const one: SequenceChunk[] = [{ tokens: [1], cache: ca[0], path: "decode", logits: "last" }];
    assert.throws(() => a.forwardBatchPicks(one, [{ temperature: -1, key: 1 }]), /temperature ≥ 0 and a 32-bit key/);
    assert.throws(() => a.forwardBatchPicks(one, [{ temperature: 1, key: 2 ** 32 }]), /32-bit key/);
  });
});

/** The host Sampler's kept ids (top-k → top-p → min-p) for a row's log_softmax at a draw's settings. */
function keptIds(lp: Float64Array | Float32Array, d: PickDraw): number[] {
  return new Sampler({ temperature: 1, topK: d.topK ?? 0, topP: d.topP ?? 1, minP: d.minP ?? 0, seed: 1 }).candidates(
    Float64Array.from(lp),
  );
}

test("FusedGpuModel.forwardBatchPicks with filtered draws (top-k, top-p, min-p; top-p and min-p without top-k): each token one of the host Sampler's kept ids for its row", {
  skip,
}, () => {
  const rounds: Pick[][] = [
    [{ temperature: 0.8, key: 99, topK: 40, topP: 0.95 }, { temperature: 1.1, key: 3, topK: 5 }, false],
    [{ temperature: 0.6, key: 1234567, topK: 64, topP: 0.5, minP: 0.05 }, true, { temperature: 1.5, key: 42 }],
    [
      { temperature: 0.9, key: 5, topP: 0.6 },
      { temperature: 1.2, key: 6, minP: 0.2 },
      { temperature: 0.7, key: 7, topK: 3 },
    ],
    [{ temperature: 1, key: 8, topP: 0.3, minP: 0.1 }, true, false],
  ];
  picksAgainstHost(71, rounds, (a, ca) => {
    assert.equal(a.picksDrawFiltered, true);
    const one: SequenceChunk[] = [{ tokens: [1], cache: ca[0], path: "decode", logits: "last" }];
    assert.throws(() => a.forwardBatchPicks(one, [{ temperature: 1, key: 1, topK: 65 }]), /not drawn on this GPU/);
    assert.throws(() => a.forwardBatchPicks(one, [{ temperature: 1, key: 1, topP: 0 }]), /not drawn on this GPU/);
    assert.throws(() => a.forwardBatchPicks(one, [{ temperature: 1, key: 1, minP: 1 }]), /not drawn on this GPU/);
  });
});

test("FusedGpuModel.decodeGreedy with draws: the chained steps draw the tokens step-by-step picks draw with the same keys (filtered and not)", {
  skip,
}, () => {
  const c = CASES.find((x) => x.label === "no-qlora-odd")!;
  const m = synthModel(c, 8);
  const { config } = loadModel(m.path);
  const prompt = randomTokens(5, 81, 0, config.nVocab);
  const a = new FusedGpuModel(config, { slots: 1, context: 24, maxTokens: 8 });
  const b = new FusedGpuModel(config, { slots: 1, context: 24, maxTokens: 8 });
  try {
    a.load(m.path);
    b.load(m.path);
    for (const settings of [
      { temperature: 0.9, topK: 40, topP: 0.9, minP: 0.01 },
      { temperature: 1.3 },
      { temperature: 1.1, topP: 0.7, minP: 0.02 },
    ]) {
      const draws: PickDraw[] = Array.from({ length: 6 }, (_, s) => ({ ...settings, key: 1000 + 7 * s }));
      const ca = new LatentCache(a.config);
      const cb = new LatentCache(b.config);
      a.forwardBatch([{ tokens: prompt, cache: ca, path: "prefill", logits: "last" }]);
      b.forwardBatch([{ tokens: prompt, cache: cb, path: "prefill", logits: "last" }]);
      const chained = a.decodeGreedy(7, ca, draws.length, draws);
      let next = 7;
      draws.forEach((d, s) => {
        const [pick] = b.forwardBatchPicks([{ tokens: [next], cache: cb, path: "decode", logits: "last" }], [d]) as {
          token: number;
          logprob: number;
        }[];
        assert.equal(chained.tokens[s], pick!.token, `${JSON.stringify(settings)} step ${s}: token`);
        assert.ok(
          Math.abs(chained.logprobs[s] - pick!.logprob) <= 1e-5,
          `${JSON.stringify(settings)} step ${s}: logprob`,
        );
        next = pick!.token;
      });
      assert.equal(ca.length, cb.length);
    }
    assert.throws(
      () => a.decodeGreedy(7, new LatentCache(a.config), 2, [{ temperature: 1, key: 1 }]),
      /1 draws for 2 steps/,
    );
  } finally {
    void a.close();
    void b.close();
    m.cleanup();
  }
});

test("FusedGpuModel on glm-dsa (--check-writes): DSA key selection on the GPU (sparse past top_k = 16 keys) matches the reference", {
  skip,
}, () => {
  const c = CASES.find((x) => x.base === "tiny-glm")!;
  const m = synthModel(c, 2);
  const { model, config } = loadModel(m.path);
  const V = config.nVocab;
  const tokens = randomTokens(26, 77, 0, V);
  const ref = logprobRows(model, tokens, "reference");
  const f = new FusedGpuModel(config, { slots: 1, context: 32, maxTokens: 5, checkWrites: true });
  try {
    f.load(m.path);
    const cache = new LatentCache(f.config);
    const got: Float64Array[] = [];
    const all = f.forward(tokens.slice(0, 19), cache, { path: "prefill", logits: "all" });
    for (let i = 0; i < 19; i++) got.push(logSoftmaxRow(all.subarray(i * V, (i + 1) * V)));
    for (let i = 19; i < tokens.length; i++)
      got.push(logSoftmaxRow(f.forward([tokens[i]], cache, { path: "decode", logits: "last" })));
    const err = maxAbsDiff(got, ref);
    assert.ok(err <= 1e-3, `max |Δ logprob| ${err}`);
  } finally {
    void f.close();
    m.cleanup();
  }
});

test("FusedGpuModel with GPU caches mirroring a page pool: scrambled pages, an adopted prompt prefix, batched decode match the reference", {
  skip,
}, () => {
  const c = CASES.find((x) => x.base === "tiny-glm")!; // DSA too: its key cache and scores go through the pages
  const m = synthModel(c, 5);
  const { model, config } = loadModel(m.path);
  const V = config.nVocab;
  const shared = randomTokens(20, 61, 0, V);
  const seqs = [
    [...shared, ...randomTokens(4, 62, 0, V)],
    [...shared, ...randomTokens(3, 63, 0, V)],
  ];
  const refs = seqs.map((t) => logprobRows(model, t, "reference"));
  const pool = new PagePool(config, { pageSize: 4, numPages: 24 });
  // take some pages first and give them back: the sequences then get non-consecutive page ids
  const scramble = new PagedSequence(pool);
  scramble.reserve(randomTokens(13, 64, 0, V));
  const f = new FusedGpuModel(config, { context: 32, maxTokens: 6, pages: { pageSize: 4, numPages: 24 } });
  try {
    f.load(m.path);
    const a = new PagedSequence(pool);
    assert.ok(a.reserve(seqs[0]));
    scramble.free();
    const gotA: Float64Array[] = [];
    const rowsA = f.forwardBatch([{ tokens: seqs[0].slice(0, 22), cache: a, path: "prefill", logits: "all" }])[0];
    for (let i = 0; i < 22; i++) gotA.push(logSoftmaxRow(rowsA.subarray(i * V, (i + 1) * V)));
    // sequence b adopts a's first 20 positions (5 full pages) and computes only the rest
    const b = new PagedSequence(pool);
    const adopted = b.adoptPrefix(seqs[1], 1);
    assert.equal(adopted, 20);
    assert.ok(b.reserve(seqs[1].slice(20)));
    const gotB: Float64Array[] = [];
    const rowsB = f.forwardBatch([{ tokens: seqs[1].slice(20, 22), cache: b, path: "prefill", logits: "all" }])[0];
    for (let i = 0; i < 2; i++) gotB.push(logSoftmaxRow(rowsB.subarray(i * V, (i + 1) * V)));
    // both decode together
    for (let pos = 22; pos < 24; pos++) {
      const chunks = [a, b].map((cache, k) => ({ k, cache })).filter(({ k }) => pos < seqs[k].length);
      const outs = f.forwardBatch(
        chunks.map(({ k, cache }) => ({
          tokens: [seqs[k][pos]],
          cache,
          path: "decode" as const,
          logits: "last" as const,
        })),
      );
      chunks.forEach(({ k }, j) => (k === 0 ? gotA : gotB).push(logSoftmaxRow(outs[j])));
    }
    const errA = maxAbsDiff(gotA, refs[0].slice(0, gotA.length));
    const errB = maxAbsDiff(gotB, refs[1].slice(20, 20 + gotB.length));
    assert.equal(gotA.length, 24);
    assert.equal(gotB.length, 3);
    assert.ok(errA <= 1e-3 && errB <= 1e-3, `max |Δ logprob| a ${errA}, b ${errB}`);
    assert.throws(
      () => f.forwardBatch([{ tokens: [1], cache: new LatentCache(f.config), path: "decode", logits: "last" }]),
      /must be paged/,
    );
  } finally {
    void f.close();
    m.cleanup();
  }
});
