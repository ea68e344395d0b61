// Paged latent cache: same logits as the contiguous cache, prefix sharing by chained hash, refcounts, LRU eviction.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { LatentCache } from "../../src/model/cache.js";
import { PagePool, PagedSequence, pageHashes } from "../../src/engine/paged-cache.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";
import { maxAbsDiffFlat } from "../helpers/measure.js";

const v3 = synthModel(CASES[0], 3);
const glm = synthModel(CASES.find((c) => c.base === "tiny-glm")!, 3);
after(() => {
  v3.cleanup();
  glm.cleanup();
});
const models = [loadModel(v3.path), loadModel(glm.path)];

/** Run `tokens` in the given chunks, then decode `extra`, on a store; returns every logits row block. */
function run(
  model: (typeof models)[number]["model"],
  store: LatentCache | PagedSequence,
  tokens: number[],
  chunks: number[],
  extra: number[],
): Float32Array[] {
  const out: Float32Array[] = [];
  let at = 0;
  for (const n of chunks) {
    const toks = tokens.slice(at, at + n);
    if (store instanceof PagedSequence) assert.ok(store.reserve(toks));
    out.push(model.forward(toks, store, { path: "prefill", logits: "all" }));
    at += n;
  }
  for (const t of extra) {
    if (store instanceof PagedSequence) assert.ok(store.reserve([t]));
    out.push(model.forward([t], store, { path: "decode", logits: "last" }));
  }
  return out;
}

for (const { model, config } of models) {
  test(`${config.arch}: paged cache gives the contiguous cache's logits (chunks across page boundaries, decode)`, () => {
    const V = config.nVocab;
    const tokens = randomTokens(45, 7, 3, V);
    const extra = randomTokens(6, 8, 3, V);
    const chunks = [5, 16, 3, 21];
    const ref = run(model, new LatentCache(config), tokens, chunks, extra);
    const pool = new PagePool(config, { pageSize: 4, numPages: 20 });
    const seq = new PagedSequence(pool);
    const got = run(model, seq, tokens, chunks, extra);
    ref.forEach((r, i) => assert.ok(maxAbsDiffFlat(r, got[i]) === 0, `block ${i}`));
    assert.equal(seq.length, 51);
    assert.equal(seq.table.length, 13);
    assert.equal(pool.stats().pagesInUse, 13);
    seq.free();
    const s = pool.stats();
    assert.equal(s.pagesInUse, 0);
    assert.equal(s.pagesCached, 12, "the 12 full pages stay cached");
    assert.equal(s.pagesFree, 8);
  });
}

test("prefix caching: a repeated prefix adopts the full pages and gives the same logits", () => {
  const { model, config } = models[0];
  const V = config.nVocab;
  const pool = new PagePool(config, { pageSize: 8, numPages: 16 });
  const system = randomTokens(20, 11, 3, V); // 2 full pages + 4
  const a = new PagedSequence(pool);
  run(model, a, [...system, 5, 6, 7], [23], []);
  // b shares the system prompt; its first 16 positions come from a's pages, still held by a
  const b = new PagedSequence(pool);
  const bTokens = [...system, 9, 10];
  assert.equal(b.adoptPrefix(bTokens), 16);
  assert.deepEqual(b.table, a.table.slice(0, 2));
  assert.equal(pool.refCount(a.table[0]), 2);
  const got = run(model, b, bTokens.slice(16), [bTokens.length - 16], []);
  const ref = run(model, new LatentCache(config), bTokens, [bTokens.length], []);
  const tail = ref[0].subarray(16 * V);
  assert.ok(maxAbsDiffFlat(tail, got[0]) < 1e-5);
  assert.deepEqual(b.prefixLookup, { queried: 2, hit: 2 });
  a.free();
  assert.equal(pool.refCount(b.table[0]), 1);
  b.free();
  assert.equal(pool.stats().pagesInUse, 0);

  // a prompt whose second page matches but whose first does not shares nothing (chained hashes)
  const c = new PagedSequence(pool);
  const cTokens = [...system];
  cTokens[0] = (cTokens[0] + 1) % V;
  assert.equal(c.adoptPrefix(cTokens), 0);
  // a prompt that is exactly two pages keeps its last page to compute (logits for the last token)
  const d = new PagedSequence(pool);
  assert.equal(d.adoptPrefix(system.slice(0, 16)), 8);
  d.free();
  c.free();
});

test("pageHashes chain every previous token", () => {
  const a = pageHashes([1, 2, 3, 4, 5, 6], 2);
  const b = pageHashes([9, 2, 3, 4, 5, 6], 2);
  assert.equal(a.length, 3);
  assert.notEqual(a[1], b[1]);
  assert.notEqual(a[2], b[2]);
  assert.deepEqual(pageHashes([1, 2, 3, 4, 5], 2), a.slice(0, 2));
});

test("LRU eviction of unreferenced cached pages; reserve is all or nothing", () => {
  const { model, config } = models[0];
  const V = config.nVocab;
  const pool = new PagePool(config, { pageSize: 4, numPages: 6 });
  const first = randomTokens(8, 21, 3, V);
  const second = randomTokens(8, 22, 3, V);
  for (const toks of [first, second]) {
    const s = new PagedSequence(pool);
    run(model, s, toks, [8], []);
    s.free();
  }
  assert.deepEqual(pool.stats().pagesCached, 4);
  // "first" was used longer ago: taking 4 fresh pages evicts its two pages first
  const big = new PagedSequence(pool);
  assert.equal(big.reserve(randomTokens(16, 5, 3, V)), true);
  assert.equal(pool.stats().evictions, 2);
  const probeFirst = new PagedSequence(pool);
  assert.equal(probeFirst.adoptPrefix([...first, 1]), 0, "first's pages were evicted");
  const probeSecond = new PagedSequence(pool);
  assert.equal(probeSecond.adoptPrefix([...second, 1]), 8, "second's pages survived");
  // 6 pages: 4 held by big, 2 by probeSecond: nothing left, and a failed reserve takes nothing
  const more = new PagedSequence(pool);
  assert.equal(more.reserve([1]), false);
  assert.equal(more.table.length, 0);
  big.free();
  probeSecond.free();
  probeFirst.free();
  more.free();
  assert.equal(pool.stats().pagesInUse, 0);
  assert.throws(() => pool.release(0), /released more often/);
});

test("writing past the reserved pages is refused", () => {
  const { model, config } = models[0];
  const pool = new PagePool(config, { pageSize: 4, numPages: 4 });
  const s = new PagedSequence(pool);
  assert.ok(s.reserve([3, 4]));
  assert.throws(() => model.forward([3, 4, 5, 6, 7], s, { path: "prefill", logits: "last" }), /only 4 reserved/);
});

test("reserveChain takes pages for a chain's positions, all or nothing; pages publish only once record names their ids", () => {
  const { config } = models[0];
  const pool = new PagePool(config, { pageSize: 4, numPages: 4 });
  const a = new PagedSequence(pool);
  assert.ok(a.reserve([1, 2, 3]));
  a.advance(3);
  assert.equal(a.pagesNeeded(14), 4);
  assert.equal(a.reserveChain(4, 14), false);
  assert.equal(a.pages().length, 1, "nothing taken when the chain does not fit");
  assert.ok(a.reserveChain(4, 6));
  assert.equal(a.pages().length, 3);
  a.advance(6); // positions 3..8 hold 4 and then ids not yet known
  const b = new PagedSequence(pool);
  assert.equal(b.adoptPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9], 1), 4, "only the page of known ids is published");
  b.free();
  a.record([5, 6, 7, 8]);
  const c = new PagedSequence(pool);
  assert.equal(c.adoptPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9], 1), 8);
  c.free();
  a.free();
});
