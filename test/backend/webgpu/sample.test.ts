// Temperature sampling on the GPU (sample.wgsl.ts, the Gumbel-max trick): greedy rows (1/T = 0) choose as argmaxRows;
// sampled rows report the chosen token's log-probability under the unmodified distribution (float64 reference); the
// draws' frequencies fit softmax(x / T) (chi-square, many keys over one row); a key decides its token; rows the host
// sampler refuses get a NaN log-probability.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import {
  argmaxRows,
  argmaxScratchWords,
  sampleNucleusWords,
  sampleRows,
  sampleScratchWords,
  sampleTopKWords,
} from "../../../src/backend/webgpu/kernels/sample/sample.js";
import { Sampler } from "../../../src/engine/sampler.js";
import { f32bits } from "../../../src/backend/webgpu/core/runtime.js";
import { gpuOrSkip, Rng } from "./helpers.js";
import { logprobAt } from "../../helpers/logprobs.js";

const { rt, skip } = await gpuOrSkip({ checkWrites: true });
after(() => rt?.device.destroy());

interface Draw {
  readonly invT: number;
  readonly key: number;
  readonly topK?: number;
  readonly topP?: number;
  readonly minP?: number;
}

/** The rows' DRAW_WORDS words: (1/T bits, key, top-k, top-p bits), (min-p bits, 0, 0, 0). */
function draws(rows: readonly Draw[]): Uint32Array {
  return Uint32Array.from(
    rows.flatMap((d) => [
      f32bits(d.invT),
      d.key >>> 0,
      d.topK ?? 0,
      f32bits(d.topP ?? 1),
      f32bits(d.minP ?? 0),
      0,
      0,
      0,
    ]),
  );
}

/**
 * sampleRows over n rows of x; with `topK`, the top-k stages too (a candidates buffer); with `nucleus`, the stages of
 * top-p and min-p without top-k (its scratch, used `nucleus` times in a row: its histograms must be left zeroed).
 */
async function run(
  x: Float32Array,
  d: Uint32Array,
  n: number,
  width: number,
  stride: number,
  topK = false,
  nucleus = 0,
  scratch?: GPUBuffer,
): Promise<{ ids: Uint32Array; lps: Float32Array }> {
  const r = rt!;
  const xb = r.upload(x, "x");
  const db = r.upload(d, "draws");
  const ids = r.buffer(n * 4, "ids");
  const lps = r.buffer(n * 4, "logprobs");
  const part = r.buffer(4 * sampleScratchWords(n, width), "sample slices");
  const cand = topK ? r.buffer(4 * sampleTopKWords(n, width), "top-k candidates") : undefined;
  const nuc = nucleus > 0 ? (scratch ?? r.buffer(4 * sampleNucleusWords(n), "nucleus scratch")) : undefined;
  let out: { ids: Uint32Array; lps: Float32Array } | undefined;
  for (let use = 0; use < Math.max(1, nucleus); use++) {
    sampleRows(r, xb, db, ids, lps, part, {
      n,
      width,
      xStride: stride,
      ...(cand !== undefined ? { cand } : {}),
      ...(nuc !== undefined ? { nucleus: nuc } : {}),
    });
    const got = { ids: new Uint32Array(await r.read(ids, 0, n * 4)), lps: await r.readF32(lps, 0, n) };
    if (out !== undefined) assert.deepEqual(got.ids, out.ids, "the same draws on the scratch's next use");
    out = got;
  }
  for (const b of [
    xb,
    db,
    ids,
    lps,
    part,
    ...(cand !== undefined ? [cand] : []),
    ...(nuc !== undefined && scratch === undefined ? [nuc] : []),
  ])
    b.destroy();
  return out!;
}

/** chi-square of `ids`' counts against probabilities p over `support` (the 20 likeliest apart, the rest pooled) < the 0.9999 quantile */
function fits(ids: Uint32Array, support: readonly number[], p: (id: number) => number, label: string): void {
  const n = ids.length;
  const total = support.reduce((a, id) => a + p(id), 0);
  const top = [...support].sort((a, b) => p(b) - p(a)).slice(0, 20);
  const counts = new Map<number, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  let chi2 = 0;
  let restWant = n;
  let restGot = n;
  let df = -1;
  for (const id of top) {
    const want = (n * p(id)) / total;
    const got = counts.get(id) ?? 0;
    if (want < 1e-9) continue;
    chi2 += (got - want) ** 2 / Math.max(want, 1e-9);
    restWant -= want;
    restGot -= got;
    df++;
  }
  if (restWant > 5) {
    chi2 += (restGot - restWant) ** 2 / restWant;
    df++;
  }
  df = Math.max(df, 1);
  const limit = df * (1 - 2 / (9 * df) + 3.72 * Math.sqrt(2 / (9 * df))) ** 3;
  assert.ok(chi2 < limit, `${label}: chi2 ${chi2.toFixed(2)} >= ${limit.toFixed(2)} (df ${df})`);
}

test("sampled rows on the GPU: greedy rows as argmaxRows; sampled rows' tokens with their log_softmax (odd widths, strided rows, several slices)", {
  skip,
}, async () => {
  const r = rt!;
  const rng = new Rng(77);
  for (const [n, width, stride] of [
    [1, 1, 1],
    [4, 257, 261],
    [3, 4097, 4100],
    [6, 9000, 9000],
    [2, 102400, 102400],
  ] as const) {
    const x = rng.f32(n * stride);
    for (let i = 0; i < x.length; i++) x[i] = x[i] * 6;
    const rows = Array.from({ length: n }, (_, t) => ({
      invT: t % 2 === 0 ? 0 : 1 / (0.5 + t * 0.3),
      key: 1000 + 7919 * t,
    }));
    const { ids, lps } = await run(x, draws(rows), n, width, stride);
    // the greedy rows against argmaxRows on the same rows
    const gIds = r.buffer(n * 4, "ids");
    const gLps = r.buffer(n * 4, "logprobs");
    const gPart = r.buffer(4 * argmaxScratchWords(n, width), "argmax slices");
    const xb = r.upload(x, "x");
    argmaxRows(r, xb, gIds, gPart, { n, width, xStride: stride, logprobs: gLps });
    const wantIds = new Uint32Array(await r.read(gIds, 0, n * 4));
    const wantLps = await r.readF32(gLps, 0, n);
    for (const b of [gIds, gLps, gPart, xb]) b.destroy();
    for (let t = 0; t < n; t++) {
      const row = x.subarray(t * stride, t * stride + width);
      assert.ok(ids[t] < width, `n ${n} width ${width} row ${t}: id ${ids[t]}`);
      if (rows[t].invT === 0) {
        assert.equal(ids[t], wantIds[t], `n ${n} width ${width} row ${t}: greedy`);
        assert.ok(
          Math.abs(lps[t] - wantLps[t]) <= 1e-6,
          `n ${n} width ${width} row ${t}: logprob ${lps[t]} vs argmaxRows' ${wantLps[t]}`,
        );
      }
      const want = logprobAt(row, ids[t]);
      assert.ok(
        Math.abs(lps[t] - want) <= 1e-5 * Math.max(1, Math.abs(want)),
        `n ${n} width ${width} row ${t}: logprob ${lps[t]} vs ${want}`,
      );
    }
  }
});

test("sampled rows on the GPU: the draws' frequencies fit softmax(x / T) (one row, 6000 keys, chi-square); a key decides its token", {
  skip,
}, async () => {
  const width = 9000; // three slices
  const rng = new Rng(5);
  const row = rng.f32(width);
  // a peaked row: most of the mass on ~20 ids, the rest spread over the others
  for (let i = 0; i < width; i++) row[i] = row[i] * 2 - (i % 450 === 17 ? -6 : 3);
  for (const T of [1, 0.6, 2.5]) {
    const n = 6000;
    const keys = Array.from({ length: n }, (_, t) => Math.imul(t + 1, 0x2545f491) ^ (T * 1000));
    // every row the same logits (stride 0)
    const { ids } = await run(row, draws(keys.map((key) => ({ invT: 1 / T, key }))), n, width, 0);
    // expected frequencies: each of the 20 likeliest ids, and the rest together
    const w = Array.from(row, (v) => v / T);
    const mx = Math.max(...w);
    const p = w.map((v) => Math.exp(v - mx));
    const total = p.reduce((a, b) => a + b, 0);
    const top = [...p.keys()].sort((a, b) => p[b] - p[a]).slice(0, 20);
    const counts = new Map<number, number>();
    for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
    let chi2 = 0;
    let restWant = n;
    let restGot = n;
    for (const id of top) {
      const want = (n * p[id]) / total;
      const got = counts.get(id) ?? 0;
      chi2 += (got - want) ** 2 / want;
      restWant -= want;
      restGot -= got;
    }
    if (restWant > 5) chi2 += (restGot - restWant) ** 2 / restWant;
    const df = restWant > 5 ? 20 : 19;
    // Wilson–Hilferty 0.9999 quantile of chi-square(df); fixed keys, so deterministic
    const limit = df * (1 - 2 / (9 * df) + 3.72 * Math.sqrt(2 / (9 * df))) ** 3;
    assert.ok(chi2 < limit, `T ${T}: chi2 ${chi2.toFixed(2)} >= ${limit.toFixed(2)} (df ${df})`);
    assert.ok(counts.size > 10, `T ${T}: the draws vary (${counts.size} distinct ids)`);
    // the same keys again: the same tokens
    const again = await run(row, draws(keys.map((key) => ({ invT: 1 / T, key }))), n, width, 0);
    assert.deepEqual(again.ids, ids, `T ${T}: a key decides its token`);
  }
});

test("sampled rows on the GPU: rows the host sampler refuses (a NaN, +Infinity, all −Infinity) → logprob NaN; NaN never chosen", {
  skip,
}, async () => {
  for (const width of [5, 4097]) {
    const n = 4;
    const x = new Float32Array(n * width).fill(-2);
    x[1] = Number.NaN; // row 0: one NaN
    x[width + 2] = Number.POSITIVE_INFINITY; // row 1: +Infinity
    x.fill(Number.NEGATIVE_INFINITY, 2 * width, 3 * width); // row 2: all −Infinity
    x[3 * width + 3] = 1; // row 3: fine
    const { ids, lps } = await run(
      x,
      draws(Array.from({ length: n }, (_, t) => ({ invT: 1.25, key: 99 + t }))),
      n,
      width,
      width,
    );
    for (const t of [0, 1, 2]) assert.ok(Number.isNaN(lps[t]), `width ${width} row ${t}: logprob NaN, got ${lps[t]}`);
    assert.notEqual(ids[0], 1, "NaN never chosen");
    assert.ok(Number.isFinite(lps[3]), `width ${width} row 3: ${lps[3]}`);
    assert.ok(Math.abs(lps[3] - logprobAt(x.subarray(3 * width, 4 * width), ids[3])) <= 1e-5);
  }
});

/** The host Sampler's kept ids for a row (its top-k → top-p → min-p), from the row's log-softmax. */
/**
 * Draws of one row checked against the host Sampler's kept ids: every draw among them, at frequencies ∝ exp(x / T)
 * over them (`fit`: chi-square), varying where more than one is kept, and three logprobs against float64.
 */
function checkDraws(
  row: Float32Array,
  kept: readonly number[],
  T: number,
  got: { ids: Uint32Array; lps: Float32Array },
  label: string,
  fit = true,
): void {
  const { ids, lps } = got;
  const keptSet = new Set(kept);
  for (let i = 0; i < ids.length; i++)
    assert.ok(keptSet.has(ids[i]), `${label}: drew ${ids[i]} outside the host's ${kept.length} kept ids`);
  if (fit) fits(ids, kept, (id) => Math.exp(row[id] / T - row[kept[0]] / T), label);
  if (kept.length > 1) assert.ok(new Set(ids).size > 1, `${label}: the draws vary`);
  for (const t of [0, 17, ids.length - 1]) {
    const want = logprobAt(row, ids[t]);
    assert.ok(Math.abs(lps[t] - want) <= 1e-5 * Math.max(1, Math.abs(want)), `${label}: logprob ${lps[t]} vs ${want}`);
  }
}

function keptByHost(row: Float32Array, topK: number, topP: number, minP: number): number[] {
  let mx = -Infinity;
  for (const v of row) mx = Math.max(mx, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - mx);
  const lse = mx + Math.log(sum);
  const lp = Float64Array.from(row, (v) => v - lse);
  return new Sampler({ temperature: 1, topK, topP, minP, seed: 1 }).candidates(lp);
}

test("top-k draws on the GPU: only the host Sampler's kept ids (top-k → top-p → min-p), at frequencies ∝ exp(x / T) (chi-square, 4000 keys a setting)", {
  skip,
}, async () => {
  const rng = new Rng(19);
  for (const [width, topK, topP, minP, T] of [
    [9000, 40, 0.95, 0, 0.8],
    [9000, 64, 1, 0, 1.3],
    [9000, 8, 1, 0, 1],
    [102400, 40, 0.9, 0.05, 0.7],
    [4097, 1, 1, 0, 1],
    [300, 20, 0.5, 0, 2],
    [5, 40, 1, 0, 1],
  ] as const) {
    const row = rng.f32(width);
    // peaked: a few ids well above the rest, so that top-p and min-p cut inside the top-k
    for (let i = 0; i < width; i++) row[i] = row[i] * 2 + (i % 97 === 3 ? 4 : 0);
    const kept = keptByHost(row, topK, topP, minP);
    const n = 4000;
    const keys = Array.from({ length: n }, (_, t) => Math.imul(t + 7, 0x9e3779b1) ^ width);
    const got = await run(row, draws(keys.map((key) => ({ invT: 1 / T, key, topK, topP, minP }))), n, width, 0, true);
    checkDraws(row, kept, T, got, `width ${width} top-k ${topK} top-p ${topP} min-p ${minP} T ${T}`);
  }
});

test("top-k draws on the GPU: ties keep the lower ids; rows without top-k beside them draw as before; refused rows get a NaN logprob", {
  skip,
}, async () => {
  // 30 ids tied at the top across three slices, top-k 12: the 12 lowest of them
  const width = 9000;
  const row = new Float32Array(width).fill(-3);
  const tied = Array.from({ length: 30 }, (_, i) => 11 + i * 293);
  for (const id of tied) row[id] = 2;
  const n = 600;
  const { ids } = await run(
    row,
    draws(Array.from({ length: n }, (_, t) => ({ invT: 1, key: 5 + t * 31, topK: 12 }))),
    n,
    width,
    0,
    true,
  );
  const want = new Set(tied.slice(0, 12));
  for (const id of ids) assert.ok(want.has(id), `tie: drew ${id}, not one of the 12 lowest tied ids`);
  assert.equal(new Set(ids).size, 12, "tie: all 12 drawn over 600 keys");
  // mixed rows: greedy, temperature only and top-k, with and without the top-k stages
  const rng = new Rng(3);
  const w2 = 4100;
  const x = rng.f32(4 * w2).map((v) => v * 5);
  const rows: Draw[] = [
    { invT: 0, key: 1 },
    { invT: 1.5, key: 2 },
    { invT: 1, key: 3, topK: 5 },
    { invT: 0.7, key: 4 },
  ];
  const withTopK = await run(x, draws(rows), 4, w2, w2, true);
  const without = await run(x, draws(rows), 4, w2, w2, false);
  for (const t of [0, 1, 3]) assert.equal(withTopK.ids[t], without.ids[t], `row ${t} (no top-k): the same token`);
  assert.ok(keptByHost(x.subarray(2 * w2, 3 * w2), 5, 1, 0).includes(withTopK.ids[2]), "row 2: one of its top 5");
  // refused rows (NaN, +Infinity) with top-k: logprob NaN
  const bad = new Float32Array(2 * 300).fill(0.5);
  bad[7] = Number.NaN;
  bad[300 + 9] = Number.POSITIVE_INFINITY;
  const refused = await run(
    bad,
    draws([
      { invT: 1, key: 9, topK: 10 },
      { invT: 1, key: 10, topK: 10 },
    ]),
    2,
    300,
    300,
    true,
  );
  for (const t of [0, 1])
    assert.ok(Number.isNaN(refused.lps[t]), `refused row ${t}: logprob NaN, got ${refused.lps[t]}`);
  assert.notEqual(refused.ids[0], 7, "NaN never chosen");
});

test("top-p and min-p without top-k on the GPU: only the host Sampler's kept ids (any size), at frequencies ∝ exp(x / T) (chi-square, 2000 keys a setting); the scratch left zeroed", {
  skip,
}, async () => {
  const rng = new Rng(23);
  for (const [width, topP, minP, T, shape] of [
    [9000, 0.95, 0, 0.8, "peaked"],
    [9000, 0.5, 0, 1.3, "flat"],
    [9000, 0.9, 0.05, 1, "flat"],
    [9000, 1, 0.2, 0.7, "flat"],
    [9000, 1, 0.02, 1, "peaked"],
    [102400, 0.9, 0, 0.9, "flat"],
    [4097, 0.3, 0, 2, "peaked"],
    [300, 0.999, 0, 1, "flat"],
    [7, 0.6, 0.1, 1, "flat"],
  ] as const) {
    const row = rng.f32(width);
    // peaked: a few ids well above the rest (the kept set small); flat: thousands of ids in the kept set
    for (let i = 0; i < width; i++) row[i] = shape === "peaked" ? row[i] * 2 + (i % 97 === 3 ? 4 : 0) : row[i] * 0.8;
    const kept = keptByHost(row, 0, topP, minP);
    const n = width === 102400 ? 300 : 2000;
    const keys = Array.from({ length: n }, (_, t) => Math.imul(t + 3, 0x85ebca6b) ^ width);
    const got = await run(row, draws(keys.map((key) => ({ invT: 1 / T, key, topP, minP }))), n, width, 0, false, 2);
    checkDraws(
      row,
      kept,
      T,
      got,
      `width ${width} top-p ${topP} min-p ${minP} T ${T} (${shape}, ${kept.length} kept)`,
      width !== 102400,
    );
  }
});

test("top-p without top-k on the GPU: the cut is exact at the boundary (the least-likely kept id and the next one), ties straddling it keep the lower ids", {
  skip,
}, async () => {
  // a row whose sorted masses make top-p's boundary known: for each cut, a topP just above and just below its mass
  const width = 5000;
  const rng = new Rng(41);
  const row = rng.f32(width).map((v) => v * 3);
  const lpSorted = [...row.keys()].sort((a, b) => row[b] - row[a] || a - b);
  let mx = -Infinity;
  for (const v of row) mx = Math.max(mx, v);
  let z = 0;
  for (const v of row) z += Math.exp(v - mx);
  for (const at of [0, 1, 9, 200, 2500]) {
    let cum = 0;
    for (let i = 0; i <= at; i++) cum += Math.exp(row[lpSorted[i]] - mx) / z;
    const gap = Math.exp(row[lpSorted[at]] - mx) / z;
    for (const topP of [cum - gap * 0.25, cum + (Math.exp(row[lpSorted[at + 1]] - mx) / z) * 0.25]) {
      const kept = keptByHost(row, 0, topP, 0);
      // at T = 20 the draws reach the least likely kept ids
      const { ids } = await run(
        row,
        draws(Array.from({ length: 400 }, (_, t) => ({ invT: 1 / 20, key: 11 + t * 7, topP }))),
        400,
        width,
        0,
        false,
        1,
      );
      const keptSet = new Set(kept);
      for (const id of ids)
        assert.ok(keptSet.has(id), `cut after ${at}: top-p ${topP}: drew ${id} outside the host's ${kept.length}`);
      if (kept.length <= 10)
        assert.equal(
          new Set(ids).size,
          kept.length,
          `cut after ${at}: top-p ${topP}: every one of the ${kept.length} kept ids drawn`,
        );
    }
  }
  // 40 ids tied at the top across two slices and top-p 0.31: each holds 1/40 of the mass (the rest ~0), so 13 are kept,
  // the 13 lowest
  const w2 = 6000;
  const tiedRow = new Float32Array(w2).fill(-40);
  const tied = Array.from({ length: 40 }, (_, i) => 5 + i * 149);
  for (const id of tied) tiedRow[id] = 1.5;
  const n = 800;
  const { ids } = await run(
    tiedRow,
    draws(Array.from({ length: n }, (_, t) => ({ invT: 1, key: 3 + t * 13, topP: 0.31 }))),
    n,
    w2,
    0,
    false,
    2,
  );
  const want = keptByHost(tiedRow, 0, 0.31, 0);
  assert.deepEqual(want, tied.slice(0, 13), "the host keeps the 13 lowest tied ids");
  for (const id of ids) assert.ok(want.includes(id), `tie: drew ${id}, not one of the 13 lowest tied ids`);
  assert.equal(new Set(ids).size, 13, "tie: all 13 drawn");
});

test("top-p and min-p without top-k on the GPU beside other rows: greedy, temperature-only and top-k rows unchanged; refused rows get a NaN logprob", {
  skip,
}, async () => {
  const rng = new Rng(8);
  const w = 4100;
  const x = rng.f32(6 * w).map((v) => v * 4);
  const rows: Draw[] = [
    { invT: 0, key: 1, topP: 0.5 },
    { invT: 1.5, key: 2 },
    { invT: 1, key: 3, topK: 5, topP: 0.9 },
    { invT: 0.7, key: 4, topP: 0.8 },
    { invT: 1.1, key: 5, minP: 0.3 },
    { invT: 1, key: 6, topP: 0.2, minP: 0.5 },
  ];
  // (one scratch for another batch first: what it leaves must not move these draws)
  const shared = rt!.buffer(4 * sampleNucleusWords(6), "nucleus scratch");
  await run(rng.f32(6 * w), draws(rows.map((d) => ({ ...d, topK: 0, topP: 0.7 }))), 6, w, w, false, 1, shared);
  const both = await run(x, draws(rows), 6, w, w, true, 1, shared);
  shared.destroy();
  assert.deepEqual(both, await run(x, draws(rows), 6, w, w, true, 1), "the same draws on a fresh scratch");
  const plain = await run(x, draws(rows), 6, w, w, true, 0);
  for (const t of [0, 1, 2])
    assert.equal(both.ids[t], plain.ids[t], `row ${t}: the same token with the nucleus stages`);
  for (const t of [3, 4, 5]) {
    const { topP = 1, minP = 0 } = rows[t];
    assert.ok(
      keptByHost(x.subarray(t * w, (t + 1) * w), 0, topP, minP).includes(both.ids[t]),
      `row ${t}: among the host's kept ids`,
    );
    assert.ok(
      Math.abs(both.lps[t] - logprobAt(x.subarray(t * w, (t + 1) * w), both.ids[t])) <=
        1e-5 * Math.max(1, Math.abs(both.lps[t])),
    );
  }
  // a min-p so small that it keeps every id: the same draw as the temperature alone (the same noise)
  const all = await run(x, draws([{ invT: 0.9, key: 77, minP: 1e-30 }]), 1, w, w, false, 1);
  const alone = await run(x, draws([{ invT: 0.9, key: 77 }]), 1, w, w, false, 0);
  assert.equal(all.ids[0], alone.ids[0], "min-p keeping every id draws as the temperature alone");
  const bad = new Float32Array(2 * 300).fill(0.5);
  bad[7] = Number.NaN;
  bad[300 + 9] = Number.POSITIVE_INFINITY;
  const refused = await run(
    bad,
    draws([
      { invT: 1, key: 9, topP: 0.5 },
      { invT: 1, key: 10, minP: 0.1 },
    ]),
    2,
    300,
    300,
    false,
    2,
  );
  for (const t of [0, 1])
    assert.ok(Number.isNaN(refused.lps[t]), `refused row ${t}: logprob NaN, got ${refused.lps[t]}`);
});
