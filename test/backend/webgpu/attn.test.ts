// The wide absorbed-MLA decode attention (attention/wide.wgsl.ts) against a float64 reference and against the previous kernels
// (tune.attn = 0; tune.attn = 1 takes the wide kernel at every key count) on fresh random inputs: key counts 0..2100 (one dispatch and split), 1–128 heads, 1, 2 and 4 queries
// with their own key counts, contiguous and paged caches, DSA key selection, odd latent widths, the tuning knobs; and
// that the kernel is chosen where it applies and nowhere else.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  attention,
  attentionScratch,
  type AttentionArgs,
} from "../../../src/backend/webgpu/kernels/attention/attention.js";
import type { RuntimeOptions } from "../../../src/backend/webgpu/core/runtime.js";
import type { KernelTuning } from "../../../src/backend/webgpu/core/tuning.js";
import { attnWidePlan } from "../../../src/backend/webgpu/kernels/attention/select.js";
import { f32, gpuOrSkip, relErr, Rng, u32 } from "./helpers.js";
import { build, type Case, checkAttention, O_OFF, reference, run, Spy } from "./attn-cases.js";

const { rt, skip: noGpu } = await gpuOrSkip();
const skip =
  noGpu !== false
    ? noGpu
    : rt!.info.subgroupSize === undefined
      ? "the adapter has no fixed subgroup size (the wide kernel needs one)"
      : false;
const TOL = 1e-4;

/** The wide kernel is on by default only past 256 keys (see kernels/attention/attention.ts); these tests turn it on at every key count unless a case says otherwise. */
function runtime(tune: KernelTuning = {}, opts: RuntimeOptions = {}): Spy {
  return new Spy(rt!.info, { checkWrites: true, tune: { attn: 1, ...tune }, ...opts });
}

/** The new kernel (with `tune`), checked against the reference and the previous kernels; returns its dispatch labels. */
async function check(name: string, k: Case, tune: KernelTuning = {}, seed = 1): Promise<string[]> {
  return checkAttention("wide", name, k, runtime(tune), seed, runtime({ attn: 0 }));
}

const ONE = ["attention wide"];
const SPLIT = ["attention wide split", "attention wide combine"];

test("wide attention, 16 heads, one query: every key count, one dispatch up to 256 keys and split above", {
  skip,
}, async () => {
  for (const n of [1, 2, 17, 255, 256])
    assert.deepEqual(await check(`16 heads, ${n} keys`, { heads: 16, keys: [n] }, {}, n), ONE, `${n} keys`);
  for (const n of [257, 600, 2100])
    assert.deepEqual(await check(`16 heads, ${n} keys`, { heads: 16, keys: [n] }, {}, n), SPLIT, `${n} keys`);
});

test("wide attention, several queries with their own key counts (causal), contiguous and paged", { skip }, async () => {
  await check("2 queries, causal 16/17", { heads: 16, keys: [16, 17], shared: true });
  await check("4 queries, causal 254..257", { heads: 16, keys: [254, 255, 256, 257], shared: true }, {}, 2);
  await check("4 queries, slots 600/1/257/2100", { heads: 3, keys: [600, 1, 257, 2100] }, {}, 3);
  await check("2 queries, paged 16, causal 599/600", { heads: 16, keys: [599, 600], paged: 16, shared: true }, {}, 4);
  await check("4 queries, paged 5, 2/17/255/256", { heads: 16, keys: [2, 17, 255, 256], paged: 5 }, {}, 5);
  await check("1 query, paged 64, 2100 keys", { heads: 16, keys: [2100], paged: 64 }, {}, 6);
});

test("wide attention, 1, 3 and 128 heads (head groups with padded heads)", { skip }, async () => {
  await check("1 head, 17 keys", { heads: 1, keys: [17] }, {}, 7);
  await check("1 head, 2 queries, 600 keys", { heads: 1, keys: [600, 257] }, {}, 8);
  await check("3 heads, 256 keys", { heads: 3, keys: [256] }, {}, 9);
  await check("128 heads, 257 keys", { heads: 128, keys: [257] }, {}, 10);
  await check("128 heads, 4 queries, 1..2100 keys, paged", { heads: 128, keys: [1, 2, 600, 2100], paged: 16 }, {}, 11);
});

test("wide attention with DSA key selection (contiguous and paged)", { skip }, async () => {
  await check("DSA 16 of 17", { heads: 16, keys: [17], sel: 16 }, {}, 12);
  await check("DSA 2 queries, 64 of 600 / 2100", { heads: 16, keys: [600, 2100], sel: 64 }, {}, 13);
  await check(
    "DSA 4 queries, 300 of 1/255/600/2100 (dense where fewer), paged 16",
    { heads: 16, keys: [1, 255, 600, 2100], sel: 300, paged: 16 },
    {},
    14,
  );
  await check(
    "DSA 128 heads, 2 queries, 256 of 257 / 2100, paged 7",
    { heads: 128, keys: [257, 2100], sel: 256, paged: 7 },
    {},
    15,
  );
});

test("wide attention: a query without keys gives zeros, the others are unaffected", { skip }, async () => {
  for (const keys of [[0], [0, 17], [600, 0]]) {
    const x = build(new Rng(16), { heads: 16, keys });
    const got = await run(runtime(), x);
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

test("wide attention: odd latent widths (not multiples of the subgroup or the workgroup)", { skip }, async () => {
  await check("d1 100, d2 10, 3 heads, 2 queries", { heads: 3, keys: [17, 300], d1: 100, d2: 10 }, {}, 17);
  await check("d1 96, d2 6, 16 heads, paged 5, 600 keys", { heads: 16, keys: [600], d1: 96, d2: 6, paged: 5 }, {}, 18);
  await check("d1 300, d2 1, 5 heads, 257 keys", { heads: 5, keys: [257, 3], d1: 300, d2: 1 }, {}, 19);
});

test("wide attention: the tuning knobs (heads per workgroup, tile, split threshold, grid size)", { skip }, async () => {
  const sg = rt!.info.subgroupSize!;
  const k: Case = { heads: 16, keys: [255, 600, 2100, 1], paged: 16 };
  // tiles of 2, 3 and 4 keys per subgroup, whatever the subgroup size, and of 1
  for (const tile of [(2 * 256) / sg, (3 * 256) / sg, (4 * 256) / sg, 1])
    await check(`tile ${tile}`, k, { attnTile: tile }, 20);
  for (const attnHeads of [1, 3, 8]) await check(`${attnHeads} heads per workgroup`, k, { attnHeads }, 21);
  // always split (even 17 keys), never split below the row limit (2100 keys still take two splits), few workgroups
  assert.deepEqual(await check("always split", { heads: 16, keys: [17] }, { attnSplitFrom: 0 }, 22), SPLIT);
  assert.deepEqual(
    await check("split from 4096, 600 keys", { heads: 16, keys: [600, 1] }, { attnSplitFrom: 4096 }, 23),
    ONE,
  );
  assert.deepEqual(
    await check("split from 4096, 2100 keys", { heads: 16, keys: [2100] }, { attnSplitFrom: 4096 }, 24),
    SPLIT,
  );
  await check("8 workgroups", k, { attnWgs: 8 }, 25);
});

test("the wide kernel applies to latent decode of 1–4 queries with a fixed subgroup size, and not otherwise", {
  skip,
}, async () => {
  const x = build(new Rng(26), { heads: 4, keys: [17] });
  const labels = async (r: Spy, edit: (a: AttentionArgs) => AttentionArgs, v?: "own"): Promise<string[]> => {
    const a = edit(x.args);
    const c = f32(r, x.c);
    const o = r.buffer((O_OFF + a.nq * a.o.stride) * 4);
    const part = r.buffer(attentionScratch(a.nq, a.heads, a.dv, a.maxKeys) * 4);
    attention(
      r,
      {
        q: f32(r, x.q),
        k1: c,
        k2: f32(r, x.kpe),
        v: v === "own" ? f32(r, x.c) : c,
        meta: u32(r, [0, 17, 0, 0, 0, 17, 0, 0, 0, 17, 0, 0, 0, 17, 0, 0, 0, 17, 0, 0]),
        sel: u32(r, x.sel),
        o,
        part,
      },
      a,
    );
    await r.sync();
    return r.labels;
  };
  assert.deepEqual(await labels(runtime(), (a) => a), ONE);
  assert.deepEqual(await labels(runtime(), (a) => ({ ...a, nq: 4, q: { ...a.q, stride: 0 } })), ONE);
  assert.deepEqual(await labels(runtime(), (a) => ({ ...a, nq: 5, q: { ...a.q, stride: 0 } })), ["attention"]);
  assert.deepEqual(await labels(runtime({ attn: 0 }), (a) => a), ["attention"]);
  // by default only past one chunk of 256 keys
  assert.deepEqual(await labels(new Spy(rt!.info, { checkWrites: true }), (a) => a), ["attention"]);
  assert.deepEqual(await labels(new Spy(rt!.info, { checkWrites: true }), (a) => ({ ...a, maxKeys: 257 })), SPLIT);
  // V not the latent itself, per-head K1 (prefill MHA), V narrower than K1
  assert.deepEqual(await labels(runtime(), (a) => a, "own"), ["attention"]);
  assert.deepEqual(await labels(runtime(), (a) => ({ ...a, k1: { ...a.k1, head: 8 } })), ["attention"]);
  assert.deepEqual(await labels(runtime(), (a) => ({ ...a, dv: 256, v: a.v })), ["attention"]);
  // without a fixed subgroup size
  assert.deepEqual(await labels(new Spy({ ...rt!.info, subgroupSize: undefined }, { checkWrites: true }), (a) => a), [
    "attention",
  ]);
  // the plan depends on maxKeys only through its chunks of 256 (recorded steps replay it as the key count grows)
  const sg = rt!.info.subgroupSize!;
  for (const [lo, hi] of [
    [1, 256],
    [257, 512],
    [3841, 4096],
  ] as const)
    assert.deepEqual(attnWidePlan({}, sg, 1, 16, lo), attnWidePlan({}, sg, 1, 16, hi));
});
