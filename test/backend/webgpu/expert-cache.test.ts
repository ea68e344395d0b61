// Routed experts streamed through a GPU expert cache (GpuModelOptions.gpuMemory / expertCache): the logits of chunked
// prefill and 2-sequence batched decode, and chained greedy tokens, equal those with every expert resident (same
// kernels: within float rounding of the gathered products) and the CPU reference (≤ 1e-3), for caches that force every
// path — one step's experts only (every step evicts), half a layer's experts shared by all layers, a resident layer
// beside streamed ones, a budget that fits everything (no cache); the cache's counts show it bounded and used.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { logSoftmaxRow } from "../../../src/engine/evaluate.js";
import { loadModel } from "../../../src/runtime/load.js";
import { GpuModel, type GpuModelOptions } from "../../../src/backend/webgpu/graph/gpu-model.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { FusedGpuModel } from "../../../src/backend/webgpu/engine/fused.js";
import { LatentCache } from "../../../src/model/cache.js";
import {
  ExpertCache,
  expertBytes,
  planExperts,
  type PlanLayer,
} from "../../../src/backend/webgpu/graph/expert-cache.js";
import type { DeepSeek2 } from "../../../src/model/deepseek2.js";
import { QMatrix } from "../../../src/tensor/qmatrix.js";
import { GGMLType } from "../../../src/gguf/types.js";
import { logprobRows, maxAbsDiff } from "../../helpers/logprobs.js";
import { randomTokens, synthModel, type SynthCase } from "../../helpers/synth.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({ checkWrites: true });
// steps recorded (in segments, with streamed experts) and replayed
const plain = rt === undefined ? undefined : new GpuRuntime(rt.info);
after(() => rt?.device.destroy());

// three MoE layers of 16 experts (2 used a token), Q8_0: small steps take the wide kernel's fused norms
const q8: SynthCase = {
  label: "cache-q8",
  base: "tiny",
  over: { n_layer: 4, n_dense: 1, n_expert: 16, n_used: 2, n_head: 4, v_head: 16 },
  type: "Q8_0",
};
// odd widths in F32 (the coalesced kernels), 3 used of 8 experts
const f32: SynthCase = {
  label: "cache-f32",
  base: "tiny",
  over: { n_layer: 3, n_dense: 1, n_expert: 8, n_used: 3, n_embd: 40, n_ff_exp: 24 },
};

// K-quants (256-column rows): layer 1's down experts Q4_K, layers 2 and 3's Q6_K (Q4_K_M's mix), so two pools
const q4km: SynthCase = {
  label: "cache-q4km",
  base: "tiny",
  over: { n_layer: 4, n_dense: 1, n_embd: 256, n_ff_exp: 256, n_expert: 8, n_used: 2, n_head: 4, v_head: 16 },
  type: "Q4_K_M",
};

const TOL = 1e-3;
const SAME = 1e-4;
const CTX = 24;

/** Log-probability rows of both sequences: prefill in chunks of the model's maxTokens, then batched decode. */
async function rowsOf(g: GpuModel, seqs: readonly number[][], prompt: readonly number[]): Promise<Float64Array[][]> {
  const out: Float64Array[][] = seqs.map(() => []);
  for (let s = 0; s < seqs.length; s++)
    for (const row of await g.prefill(s, seqs[s].slice(0, prompt[s]), 0, true)) out[s].push(logSoftmaxRow(row));
  for (let pos = Math.min(...prompt); pos < Math.max(...seqs.map((q) => q.length)); pos++) {
    const step = seqs
      .map((q, s) => ({ q, s }))
      .filter(({ q, s }) => pos >= prompt[s] && pos < q.length)
      .map(({ q, s }) => ({ token: q[pos], slot: s, pos, logits: true }));
    // a decode batch in steps of at most maxTokens tokens
    for (let at = 0; at < step.length; at += g.opts.maxTokens) {
      const part = step.slice(at, at + g.opts.maxTokens);
      const logits = await g.step(part);
      const width = logits.length / part.length;
      part.forEach((t, i) => out[t.slot].push(logSoftmaxRow(logits.subarray(i * width, (i + 1) * width))));
    }
  }
  return out;
}

/** Largest difference between two sets of rows, sequence by sequence (equal row counts). */
function worst(a: Float64Array[][], b: Float64Array[][]): number {
  return Math.max(...a.map((rows, s) => maxAbsDiff(rows, b[s])));
}

interface Mode {
  readonly label: string;
  readonly maxTokens: number;
  readonly opts: (model: DeepSeek2) => Partial<GpuModelOptions>;
  /** whether the mode streams (an expert cache exists) */
  readonly streams: boolean;
}

const modes: Mode[] = [
  {
    label: "one step's experts (every step evicts)",
    maxTokens: 1,
    opts: (m) => ({ expertCache: { slots: m.config.nExpertUsed } }),
    streams: true,
  },
  {
    label: "half a layer's experts, steps of 4",
    maxTokens: 4,
    opts: (m) => ({
      expertCache: { slots: Math.max(m.config.nExpert / 2, Math.min(m.config.nExpert, 4 * m.config.nExpertUsed)) },
    }),
    streams: true,
  },
  {
    label: "layer 2 resident, the others streamed",
    maxTokens: 4,
    opts: (m) => ({ expertCache: { slots: m.config.nExpert, residentLayers: [2] } }),
    streams: true,
  },
  {
    // the model's bytes less a third of its experts'
    label: "a budget of two thirds of the experts",
    maxTokens: 4,
    opts: () => ({}),
    streams: true,
  },
  { label: "a budget holding everything", maxTokens: 4, opts: () => ({ gpuMemory: 2 ** 40 }), streams: false },
];

for (const c of [q8, f32, q4km]) {
  const m = synthModel(c, 5);
  after(() => m.cleanup());
  // (the K-quant model, slower on a software adapter: the smallest cache and a budget)
  for (const mode of c === q4km ? modes.filter((x) => /one step|budget of/.test(x.label)) : modes) {
    for (const [r, name] of [
      [rt, "checked writes"],
      [plain, "segments replayed"],
    ] as const) {
      test(`${c.label}: ${mode.label} (${name}): logits equal all-resident and the CPU reference`, {
        skip,
      }, async () => {
        const { model, config } = loadModel(m.path);
        const seqs = [randomTokens(10, 3, 0, config.nVocab), randomTokens(7, 8, 0, config.nVocab)];
        // repeat a stretch so some experts come back
        seqs[0].splice(6, 3, ...seqs[0].slice(0, 3));
        const prompt = [5, 3];
        const base: GpuModelOptions = { slots: 2, context: CTX, maxTokens: mode.maxTokens };
        const whole = new GpuModel(r!, model as DeepSeek2, base);
        const want = await rowsOf(whole, seqs, prompt);
        const experts = (model as DeepSeek2).weights.layers.reduce(
          (b, l) => b + (l.moe?.experts.reduce((s, e) => s + expertBytes(e), 0) ?? 0),
          0,
        );
        const budget = Math.floor(whole.gpuBytes - experts / 3);
        const byBudget = mode.label.includes("budget of") ? { gpuMemory: budget } : {};
        const g = new GpuModel(r!, model as DeepSeek2, { ...base, ...mode.opts(model as DeepSeek2), ...byBudget });
        if (mode.label.includes("budget of")) {
          assert.ok(g.gpuBytes <= budget, `${g.gpuBytes} bytes on the GPU, over ${budget}`);
          assert.equal(g.layers[config.nLayer - 1]!.experts, undefined, "the last MoE layer streamed");
          // three MoE layers: the first one's experts fit whole beside the others' smallest pool
          if (c === q8)
            assert.ok(g.layers[config.nLeadingDense]!.experts !== undefined, "the first MoE layer resident");
        }
        assert.equal(g.expertCache !== undefined, mode.streams);
        const got = await rowsOf(g, seqs, prompt);
        const same = worst(got, want);
        assert.ok(same <= SAME, `against all-resident: ${same}`);
        const refs = seqs.map((s) => logprobRows(model, s, "reference"));
        const ref = worst(
          got,
          refs.map((rows, s) => rows.slice(0, got[s].length)),
        );
        assert.ok(ref <= TOL, `against the reference: ${ref}`);
        if (c === q4km && mode.label.startsWith("one step"))
          assert.equal(g.expertCache!.slotCounts().size, 2, "a pool per down type");
        const st = g.expertCache?.stats;
        if (st !== undefined) {
          const slots = [...g.expertCache!.slotCounts().values()];
          // each step of each streamed layer looks up its distinct experts; misses are uploads, never more than that
          assert.ok(st.lookups > 0 && st.uploads + st.hits === st.lookups, JSON.stringify(st));
          assert.ok(st.uploads >= Math.min(...slots), JSON.stringify(st));
          if (mode.label.startsWith("layer 2"))
            assert.ok(st.hits > 0, `a cache of every expert hits: ${JSON.stringify(st)}`);
          if (r === plain) assert.ok(g.replayStats.replayed > 0, JSON.stringify(g.replayStats));
        }
      });
    }
  }

  test(`${c.label}: chained greedy decode of 2 sequences with a cache of one step's experts picks the all-resident tokens`, {
    skip,
  }, async () => {
    const { model, config } = loadModel(m.path);
    const K = config.nExpertUsed;
    const seqs = [
      { token: 7, slot: 0, pos: 0 },
      { token: 11, slot: 1, pos: 0 },
    ];
    const run = async (o: Partial<GpuModelOptions>) => {
      const g = new GpuModel(plain!, model as DeepSeek2, { slots: 2, context: CTX, maxTokens: 2, ...o });
      const chosen = await g.decodeGreedy(seqs, 9);
      return { g, chosen };
    };
    const want = await run({});
    const got = await run({ expertCache: { slots: 2 * K } });
    // (and waiting for the GPU after every expert written: ExpertCache.flushBytes)
    const flushed = new GpuModel(plain!, model as DeepSeek2, {
      slots: 2,
      context: CTX,
      maxTokens: 2,
      expertCache: { slots: 2 * K },
    });
    flushed.expertCache!.flushBytes = 1;
    const chosen = await flushed.decodeGreedy(seqs, 9);
    assert.deepEqual([...chosen.tokens], [...want.chosen.tokens]);
    assert.deepEqual([...got.chosen.tokens], [...want.chosen.tokens]);
    for (let i = 0; i < got.chosen.logprobs.length; i++)
      assert.ok(Math.abs(got.chosen.logprobs[i] - want.chosen.logprobs[i]) <= SAME);
    assert.ok(got.g.expertCache!.stats.uploads > 0);
  });
}

test("cache-q8: a pool bound in pieces (a binding limit of 4 experts) gives the all-resident logits", {
  skip,
}, async () => {
  const m = synthModel(q8, 7);
  // a Q8_0 expert matrix here is 32 rows of 68 bytes, or 64 of 34: 2176 bytes, 4 to a binding
  const pieces = new GpuRuntime(rt!.info, { maxBindingBytes: 4 * 2176 });
  try {
    const { model, config } = loadModel(m.path);
    const seqs = [randomTokens(8, 5, 0, config.nVocab), randomTokens(6, 9, 0, config.nVocab)];
    const base: GpuModelOptions = { slots: 2, context: CTX, maxTokens: 4 };
    const want = await rowsOf(new GpuModel(pieces, model as DeepSeek2, base), seqs, [5, 3]);
    const g = new GpuModel(pieces, model as DeepSeek2, { ...base, expertCache: { slots: 8 } });
    assert.equal(g.expertCache!.ffnOf(config.nLayer - 1).gate.pieces.length, 2);
    const got = await rowsOf(g, seqs, [5, 3]);
    const d = worst(got, want);
    assert.ok(d <= SAME, `against all-resident: ${d}`);
  } finally {
    m.cleanup();
  }
});

test("paged latent caches (serve): a cache of one step's experts gives the all-resident logits", { skip }, async () => {
  const m = synthModel(q8, 6);
  try {
    const { model, config } = loadModel(m.path);
    const tokens = randomTokens(9, 4, 0, config.nVocab);
    // pages of 4 positions, the sequence's pages out of order in the pool
    const pages = [5, 2, 7];
    const run = async (o: Partial<GpuModelOptions>): Promise<Float64Array[]> => {
      const g = new GpuModel(rt!, model as DeepSeek2, {
        slots: 1,
        context: 12,
        maxTokens: 2,
        pages: { pageSize: 4, numPages: 8 },
        ...o,
      });
      const out: Float64Array[] = [];
      for (let at = 0; at < tokens.length; at += 2) {
        const step = tokens.slice(at, at + 2).map((token, i) => ({ token, slot: 0, pos: at + i, logits: true, pages }));
        const logits = await g.step(step);
        step.forEach((_, i) => out.push(logSoftmaxRow(logits.subarray(i * config.nVocab, (i + 1) * config.nVocab))));
      }
      return out;
    };
    const want = await run({});
    const got = await run({ expertCache: { slots: 2 * config.nExpertUsed } });
    const d = maxAbsDiff(got, want);
    assert.ok(d <= SAME, `against all-resident: ${d}`);
  } finally {
    m.cleanup();
  }
});

test("FusedGpuModel (latent run/serve): --gpu-memory too small is refused naming both numbers; one that streams gives the all-resident logits and counts its cache", {
  skip,
}, () => {
  const m = synthModel(q8, 8);
  const opened: FusedGpuModel[] = [];
  const open = (gpuMemory?: number): FusedGpuModel => {
    const { config } = loadModel(m.path);
    const f = new FusedGpuModel(config, {
      context: 12,
      maxTokens: 2,
      ...(gpuMemory !== undefined ? { gpuMemory } : {}),
    });
    opened.push(f);
    f.load(m.path);
    return f;
  };
  try {
    const { model, config } = loadModel(m.path);
    let resident = 0;
    assert.throws(
      () => open(1000),
      (e: unknown) => {
        const got = /below what must stay on the GPU, .*\((\d+) bytes\)/.exec((e as Error).message);
        resident = Number(got?.[1] ?? 0);
        return got !== null && resident > 1000;
      },
    );
    const experts = (model as DeepSeek2).weights.layers.reduce(
      (b, l) => b + (l.moe?.experts.reduce((s, e) => s + expertBytes(e), 0) ?? 0),
      0,
    );
    const tokens = randomTokens(9, 2, 0, config.nVocab);
    const logprobs = (f: FusedGpuModel): Float64Array[] => {
      const cache = new LatentCache(f.config);
      const all = f.forward(tokens.slice(0, 5), cache, { path: "prefill", logits: "all" });
      const rows = [0, 1, 2, 3, 4].map((i) => logSoftmaxRow(all.subarray(i * config.nVocab, (i + 1) * config.nVocab)));
      for (const t of tokens.slice(5))
        rows.push(logSoftmaxRow(f.forward([t], cache, { path: "decode", logits: "last" })));
      return rows;
    };
    const want = logprobs(open());
    const streamed = open(resident + Math.floor(experts / 2));
    const d = maxAbsDiff(logprobs(streamed), want);
    assert.ok(d <= SAME, `against all-resident: ${d}`);
    const st = streamed.hostStats().expertCache;
    assert.ok(st !== undefined && st.uploads > 0 && st.lookups === st.hits + st.uploads, JSON.stringify(st));
  } finally {
    for (const f of opened) void f.close();
    m.cleanup();
  }
});

test("a budget below the resident part, or below one step's experts, is refused naming the numbers", {
  skip,
}, async () => {
  const m = synthModel(q8, 5);
  try {
    const { model, config } = loadModel(m.path);
    assert.throws(
      () => new GpuModel(rt!, model as DeepSeek2, { slots: 1, context: CTX, maxTokens: 1, gpuMemory: 1000 }),
      /--gpu-memory .*\(1000 bytes\) is below what must stay on the GPU, .*\(\d+ bytes\)/,
    );
    assert.throws(
      () =>
        new GpuModel(rt!, model as DeepSeek2, {
          slots: 1,
          context: CTX,
          maxTokens: 2,
          expertCache: { slots: 2 * config.nExpertUsed - 1 },
        }),
      /at least 4 slots/,
    );
  } finally {
    m.cleanup();
  }
});

test("planExperts: resident part first, whole layers while the streamed ones keep their smallest pools, the rest in slots", () => {
  const layers: PlanLayer[] = [1, 2, 3, 4].map((layer) => ({
    layer,
    experts: 16,
    signature: layer === 4 ? "b" : "a",
    expertBytes: layer === 4 ? 200 : 100,
  }));
  // everything fits: every layer resident, no pools
  const all = planExperts(100 + 3 * 1600 + 3200, 100, layers, 4);
  assert.deepEqual([...all.residentLayers], [1, 2, 3, 4]);
  assert.equal(all.slots.size, 0);
  // 1000 + 1600 (layer 1) + 400 + 800 (pools of 4) + 600 spare
  const some = planExperts(1000 + 1600 + 1200 + 600, 1000, layers, 4);
  assert.deepEqual([...some.residentLayers], [1]);
  const a = some.slots.get("a")!;
  const b = some.slots.get("b")!;
  assert.ok(a >= 4 && b >= 4 && a <= 32 && b <= 16, `${a} ${b}`);
  assert.ok(a * 100 + b * 200 + 1600 + 1000 <= 1000 + 1600 + 1200 + 600, `over budget: ${a} ${b}`);
  assert.ok(a > 4 || b > 4, "the spare bytes are used");
  // nothing resident when only the smallest pools fit
  const least = planExperts(1000 + 1200, 1000, layers, 4);
  assert.deepEqual([...least.residentLayers], []);
  assert.deepEqual(
    [...least.slots],
    [
      ["a", 4],
      ["b", 4],
    ],
  );
  assert.throws(() => planExperts(999, 1000, layers, 4), /below what must stay on the GPU/);
  assert.throws(() => planExperts(1000 + 1199, 1000, layers, 4), /cannot hold the resident part/);
});

test("ExpertCache: a slot is taken from the layer whose turn comes last (this layer's unchosen experts, then the layers before it), so a cache smaller than a step's experts still hits", async () => {
  // host bookkeeping only: a stand-in runtime that allocates nothing and records the writes
  const writes: number[] = [];
  const fake = {
    maxBindingBytes: 2 ** 20,
    buffer: () => ({ destroy: () => {} }),
    write: (_b: unknown, offset: number) => writes.push(offset),
    sync: async () => {},
  } as unknown as GpuRuntime;
  const q = (rows: number) => new QMatrix("m", GGMLType.F32, 4, rows, new Uint8Array(16 * rows));
  const experts = Array.from({ length: 6 }, () => ({ gate: q(2), up: q(2), down: q(4) }));
  // three streamed layers sharing one pool of 4 slots; each step routes 2 experts a layer (6 a step: more than 4)
  const cache = new ExpertCache(
    fake,
    new Map([1, 2, 3].map((il) => [il, experts])),
    new Map([["0:4x2|0:4x2|0:4x4", 4]]),
  );
  const hitsOf = async (): Promise<number> => {
    const before = cache.stats.hits;
    for (const il of [1, 2, 3]) await cache.assign(il, Uint32Array.from([0, 1]));
    return cache.stats.hits - before;
  };
  // step 1: layers 1 and 2 fill the 4 slots; layer 3 takes layer 2's (just visited: its turn comes back last)
  // step 2: layer 1 hits; layer 2 takes layer 1's slots (layer 1's turn comes last now); layer 3 hits
  // step 3: layer 1 takes layer 3's, layer 2 hits, layer 3 takes layer 2's
  assert.deepEqual([await hitsOf(), await hitsOf(), await hitsOf()], [0, 4, 2]);
  assert.deepEqual(cache.stats, { lookups: 18, hits: 6, uploads: 12, uploadedBytes: 12 * 128 });
  assert.equal(writes.length, 3 * 12, "three matrices written per upload");
  // (one LRU order over all layers would have evicted every expert before its layer came back: no hits)
  await assert.rejects(
    cache.assign(1, Uint32Array.from([0, 1, 2, 3, 4])),
    /5 distinct experts, more than the expert cache's 4 slots/,
  );
  await assert.rejects(cache.assign(1, Uint32Array.from([9])), /routed to expert 9 of 6/);
});

test("ExpertCache: a signature's slots past 256 are split into pools of at most 256 (each at least a step's experts), each serving every k-th layer", () => {
  const fake = {
    maxBindingBytes: 2 ** 30,
    buffer: () => ({ destroy: () => {} }),
    write: () => {},
  } as unknown as GpuRuntime;
  const q = (rows: number) => new QMatrix("m", GGMLType.F32, 4, rows, new Uint8Array(16 * rows));
  const experts = Array.from({ length: 256 }, () => ({ gate: q(2), up: q(2), down: q(4) }));
  const host = new Map([3, 4, 5, 6].map((il) => [il, experts]));
  const sig = "0:4x2|0:4x2|0:4x4";
  // 600 slots: three pools of 200 (layers 3 and 6, 4, 5)
  const split = new ExpertCache(fake, host, new Map([[sig, 600]]), 16);
  assert.deepEqual([...split.slotCounts().values()], [200, 200, 200]);
  assert.equal(split.ffnOf(3), split.ffnOf(6));
  assert.notEqual(split.ffnOf(3), split.ffnOf(4));
  for (const il of [3, 4, 5, 6]) assert.ok(split.ffnOf(il).gate.items <= 256);
  // 300 slots where a step may route to all 256 experts of a layer: one pool (two would hold fewer than 256 each)
  assert.deepEqual([...new ExpertCache(fake, host, new Map([[sig, 300]]), 256).slotCounts().values()], [300]);
  // at most 256: one pool
  assert.deepEqual([...new ExpertCache(fake, host, new Map([[sig, 256]]), 16).slotCounts().values()], [256]);
});
