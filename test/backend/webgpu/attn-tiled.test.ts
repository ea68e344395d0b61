// The tiled latent attention for prompt chunks (attention/tiled.wgsl.ts) against a float64 reference and against the
// previous kernels (tune.attnTiled = 0, tune.attn = 0) on fresh random inputs: causal chunks sharing one sequence's
// rows, queries with their own slots, key counts around the 64-key blocks and 256-key chunks, paged caches, DSA key
// selection, 1–40 heads (padded head groups of 4, 8, 16 and 32), odd latent widths, keys split over workgroups and
// combined; a query without keys gives zeros; and where the kernel is chosen.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GpuRuntime, type RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { ATTN_TILED_FROM, attnTiledChoice } from "../../../src/backend/webgpu/kernels/attention/select.js";
import { attnTiledBytes, attnTiledGroup } from "../../../src/backend/webgpu/kernels/attention/tiled.wgsl.js";
import { gpuOrSkip, relErr, Rng } from "./helpers.js";
import { build, type Case, checkAttention, reference, run, Spy } from "./attn-cases.js";

const { rt, skip } = await gpuOrSkip();
const TOL = 1e-4;

/** The tiled kernel at every query count (attnTiled = 1; the wide decode kernel off) unless a case says otherwise. */
function runtime(tune: KernelTuning = {}, opts: RuntimeOptions = {}): Spy {
  return new Spy(rt!.info, { checkWrites: true, tune: { attn: 0, attnTiled: 1, ...tune }, ...opts });
}

const causal = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);
const ONE = ["attention tiled"];
const SPLIT = ["attention tiled split", "attention tiled combine"];

/**
 * The tiled kernel (with `tune`) against the float64 reference and, with `previous` (the 16-head model shapes; each
 * width costs lavapipe a compile of the other kernels too), against the chunked kernels; returns its dispatch labels.
 */
async function check(name: string, k: Case, tune: KernelTuning = {}, seed = 1, previous = false): Promise<string[]> {
  const r = runtime(tune);
  await checkAttention("tiled", name, k, r, seed, previous ? runtime({ attnTiled: 0, attn: 0 }) : undefined);
  assert.ok(
    r.labels.every((l) => l.startsWith("attention tiled")),
    `${name}: dispatched ${r.labels.join(", ")}`,
  );
  return r.labels;
}

test("tiled attention, 16 heads: causal chunks across the 64-key blocks, one dispatch", {
  skip,
}, async () => {
  assert.deepEqual(await check("1 query, 1 key", { heads: 16, keys: [1], shared: true }, {}, 1, true), ONE);
  await check("causal 1..70", { heads: 16, keys: causal(1, 70), shared: true }, { attnTiledWgs: 1 }, 2, true);
  await check("causal 60..68 after a cache", { heads: 16, keys: causal(60, 9), shared: true }, { attnTiledWgs: 1 }, 3);
  await check("own slots 63/64/65/128/129", { heads: 16, keys: [63, 64, 65, 128, 129] }, { attnTiledWgs: 1 }, 4);
});

test("tiled attention: keys split over workgroups and combined, contiguous and paged", { skip }, async () => {
  // splits of one chunk (256 keys) each: 600 keys take three, 2100 nine; a query ends inside its last split
  assert.deepEqual(await check("split, 600/257/1 keys", { heads: 16, keys: [600, 257, 1] }, {}, 5, true), SPLIT);
  await check("split, causal 2095..2100", { heads: 16, keys: causal(2095, 6), shared: true }, {}, 6);
  await check("split, paged 16, 599/600", { heads: 16, keys: [599, 600], paged: 16, shared: true }, {}, 7);
  await check(
    "one dispatch, paged 5, 2/17/255/256",
    { heads: 16, keys: [2, 17, 255, 256], paged: 5 },
    {
      attnTiledWgs: 1,
    },
    8,
  );
  await check("split in chunks of 512", { heads: 16, keys: [1100, 300] }, { attnTiledWgs: 5 }, 9);
});

test("tiled attention with DSA key selection (contiguous and paged)", { skip }, async () => {
  await check("DSA 16 of 17", { heads: 16, keys: [17], sel: 16 }, {}, 10);
  await check("DSA 2 queries, 70 of 600 / 2100", { heads: 16, keys: [600, 2100], sel: 70 }, {}, 11);
  await check(
    "DSA 300 of 1/255/600/2100, paged 16",
    { heads: 16, keys: [1, 255, 600, 2100], sel: 300, paged: 16 },
    {
      attnTiledWgs: 1,
    },
    12,
  );
});

test("tiled attention, 1, 5 and 40 heads (padded head groups of 4, 8 and 32, or 16 where 32 do not fit)", {
  skip,
}, async () => {
  assert.deepEqual(
    [1, 3, 5, 8, 9, 16, 17, 40, 128].map(attnTiledGroup),
    [4, 4, 8, 8, 16, 16, 32, 32, 32],
    "heads a workgroup",
  );
  await check("1 head, causal 1..66", { heads: 1, keys: causal(1, 66), shared: true }, { attnTiledWgs: 1 }, 13);
  await check("5 heads, causal 62..66", { heads: 5, keys: causal(62, 5), shared: true }, { attnTiledWgs: 1 }, 15);
  await check("40 heads, 129/3, paged 7", { heads: 40, keys: [129, 3], paged: 7 }, {}, 16);
});

test("tiled attention: odd latent widths", { skip }, async () => {
  await check("d1 100, d2 10, 3 heads", { heads: 3, keys: [17, 300, 64], d1: 100, d2: 10 }, {}, 17);
  // a 4-column piece straddling c and k_pe (513), and k_pe of one column
  await check("d1 513, d2 63", { heads: 4, keys: [70, 1], d1: 513, d2: 63 }, {}, 20);
  await check(
    "d1 99, d2 1, paged 5",
    { heads: 5, keys: causal(64, 3), d1: 99, d2: 1, paged: 5, shared: true },
    {
      attnTiledWgs: 1,
    },
    19,
  );
});

test("tiled attention: a query without keys gives zeros, the others are unaffected", { skip }, async () => {
  for (const [keys, tune] of [
    [[0], { attnTiledWgs: 1 }],
    [[0, 70], { attnTiledWgs: 1 }],
    [[600, 0], {}],
  ] as const) {
    const x = build(new Rng(21), { heads: 16, keys });
    const got = await run(runtime(tune), x);
    assert.ok(relErr(got, reference(x)) <= TOL, `keys ${keys.join("/")}`);
    keys.forEach((n, i) => {
      if (n === 0)
        assert.ok(
          got.subarray(i * 16 * 512, (i + 1) * 16 * 512).every((v) => v === 0),
          `query ${i} (no keys) is all zeros`,
        );
    });
  }
});

test("the tiled kernel is chosen for steps of many queries over the latent, and its plan follows the chunks", {
  skip,
}, () => {
  const at = (tune: KernelTuning = {}, storage?: number): GpuRuntime =>
    new GpuRuntime(
      storage === undefined
        ? rt!.info
        : { ...rt!.info, limits: { ...rt!.info.limits, maxComputeWorkgroupStorageSize: storage } },
      { tune },
    );
  const step = (nq: number, maxKeys: number, heads = 16) => ({ nq, heads, maxKeys });
  assert.equal(attnTiledChoice(at(), step(ATTN_TILED_FROM - 1, 512)), undefined);
  // a 512-token prompt: 512 workgroups, no split; 128 queries: 128, each query's keys in two splits
  assert.deepEqual(attnTiledChoice(at(), step(512, 512)), { group: 16, splits: 1, splitKeys: 512 });
  assert.deepEqual(attnTiledChoice(at(), step(ATTN_TILED_FROM, 512)), { group: 16, splits: 2, splitKeys: 256 });
  assert.equal(attnTiledChoice(at({ attnTiled: 0 }), step(512, 512)), undefined);
  assert.equal(attnTiledChoice(at({ attnTiledFrom: 600 }), step(512, 512)), undefined);
  assert.ok(attnTiledChoice(at({ attnTiled: 1 }), step(1, 17)) !== undefined);
  // few queries over many keys: split in whole chunks until about attnTiledWgs workgroups
  assert.deepEqual(attnTiledChoice(at({ attnTiled: 1 }), step(2, 4096)), {
    group: 16,
    splits: 16,
    splitKeys: 256,
  });
  assert.deepEqual(attnTiledChoice(at({ attnTiled: 1 }), step(64, 4096)), {
    group: 16,
    splits: 4,
    splitKeys: 1024,
  });
  // many queries over long key lists: no workgroup walks more than 4,096 keys
  assert.deepEqual(attnTiledChoice(at(), step(2048, 4096)), { group: 16, splits: 1, splitKeys: 4096 });
  assert.deepEqual(attnTiledChoice(at(), step(2048, 16384)), { group: 16, splits: 4, splitKeys: 4096 });
  assert.deepEqual(attnTiledChoice(at(), step(512, 4097)), { group: 16, splits: 2, splitKeys: 2304 });
  for (const [lo, hi] of [
    [1, 256],
    [257, 512],
    [3841, 4096],
  ] as const)
    assert.deepEqual(
      attnTiledChoice(at({ attnTiled: 1 }), step(8, lo)),
      attnTiledChoice(at({ attnTiled: 1 }), step(8, hi)),
    );
  // a device whose workgroup memory does not hold the natural group's tiles takes fewer heads a workgroup, or none
  assert.equal(attnTiledChoice(at({}, attnTiledBytes(16) - 4), step(512, 512))?.group, 8);
  assert.equal(attnTiledChoice(at({}, attnTiledBytes(4) - 4), step(512, 512)), undefined);
});
