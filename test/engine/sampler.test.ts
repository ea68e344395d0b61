import { test } from "node:test";
import assert from "node:assert/strict";
import { createSampler, Sampler, type SamplerOptions } from "../../src/engine/sampler.js";
import { greedyLogprob, logSoftmax, logSoftmaxInto, topLogprobs } from "../../src/engine/logprobs.js";
import { NonFiniteError, UsageError } from "../../src/util/errors.js";
import { uniforms } from "../helpers/rng.js";

function randomLogits(n: number, seed: number, scale = 3): Float32Array {
  const r = uniforms(seed);
  return Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
}
function naiveArgmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 0; i < x.length; i++) if (x[i] > x[best]) best = i;
  return best;
}

/** Reference filter chain with a full sort: top-k → top-p (renormalized within top-k) → min-p. */
function referenceKept(logits: Float32Array, o: { topK?: number; topP?: number; minP?: number }): number[] {
  const p = Array.from(logSoftmax(logits), Math.exp);
  let ids = [...p.keys()].sort((a, b) => p[b] - p[a] || a - b);
  if (o.topK) ids = ids.slice(0, o.topK);
  if (o.topP !== undefined && o.topP < 1) {
    const mass = ids.reduce((s, i) => s + p[i], 0);
    let cum = 0;
    const n = ids.findIndex((i) => (cum += p[i] / mass) >= o.topP!);
    ids = ids.slice(0, n < 0 ? ids.length : n + 1);
  }
  if (o.minP) ids = ids.filter((i) => p[i] >= o.minP! * p[ids[0]]);
  return ids;
}

/** Sample `n` times; check only `allowed` ids occur and the counts fit softmax(logit/T) over `allowed` (chi-square). */
function checkEmpirical(logits: Float32Array, opts: SamplerOptions, allowed: number[], n = 20000): void {
  const s = createSampler(opts);
  const counts = new Map<number, number>();
  for (let i = 0; i < n; i++) {
    const { token } = s.sample(logits);
    counts.set(token, (counts.get(token) ?? 0) + 1);
  }
  for (const id of counts.keys()) assert.ok(allowed.includes(id), `token ${id} is outside the allowed set ${allowed}`);
  const t = opts.temperature ?? 1;
  const w = allowed.map((i) => Math.exp((logits[i] - logits[allowed[0]]) / t));
  const total = w.reduce((a, b) => a + b, 0);
  let chi2 = 0;
  allowed.forEach((id, j) => {
    const expected = (n * w[j]) / total;
    chi2 += ((counts.get(id) ?? 0) - expected) ** 2 / expected;
  });
  const df = allowed.length - 1;
  if (df === 0) return;
  // Wilson–Hilferty 0.9999 quantile of chi-square(df); the seed is fixed so this is deterministic.
  const limit = df * (1 - 2 / (9 * df) + 3.72 * Math.sqrt(2 / (9 * df))) ** 3;
  assert.ok(chi2 < limit, `chi2 ${chi2.toFixed(2)} >= ${limit.toFixed(2)} (df ${df})`);
}

test("greedy equals argmax (lowest id on ties) on random vectors of odd sizes", () => {
  for (const [i, n] of [1, 3, 7, 31, 127, 1001, 4099, 151_937].entries()) {
    const x = randomLogits(n, 100 + i);
    const s = createSampler({ temperature: 0, seed: 1 });
    assert.equal(s.sample(x).token, naiveArgmax(x));
  }
  const ties = new Float32Array([1, 5, -Infinity, 5, 2]);
  assert.equal(createSampler({ temperature: 0 }).sample(ties).token, 1);
});

test("greedyLogprob (the greedy sampler's one pass) equals logSoftmax at argmax, bit for bit; rejects NaN / +Infinity / all -Infinity like it", () => {
  for (const [i, n] of [1, 2, 7, 1001, 102_400].entries()) {
    for (const f64 of [false, true]) {
      const x32 = randomLogits(n, 300 + i);
      const x = f64 ? Float64Array.from(x32, (v) => v * 1.000001) : x32;
      if (n > 2) x[n - 1] = -Infinity;
      const got = greedyLogprob(x);
      assert.equal(got.token, naiveArgmax(x));
      assert.equal(got.logprob, logSoftmax(x)[got.token]);
      assert.deepEqual(createSampler({ temperature: 0 }).sample(x), got);
    }
  }
  assert.deepEqual(greedyLogprob(new Float32Array([-Infinity, 3, 3, -1])).token, 1);
  for (const bad of [
    [0, NaN, 1],
    [NaN],
    [1, Infinity, 2],
    [Infinity, Infinity],
    [2, Infinity, NaN],
    [-Infinity, -Infinity],
    [],
  ]) {
    const x = new Float32Array(bad);
    let want = "";
    let wantClass: unknown;
    try {
      logSoftmax(x);
    } catch (e) {
      want = (e as Error).message;
      wantClass = (e as Error).constructor;
    }
    assert.ok(wantClass === (bad.length === 0 ? UsageError : NonFiniteError), `${bad.join()}: ${String(wantClass)}`);
    assert.throws(
      () => greedyLogprob(x),
      (e: unknown) => e instanceof Error && e.constructor === wantClass && e.message === want,
      `${bad.join()}: ${want}`,
    );
  }
});

test("logSoftmaxInto writes logSoftmax into a reused row (bit for bit); samplers sharing it (and the draw's weights) give what fresh ones give", () => {
  const long = randomLogits(5000, 401, 8);
  const short = randomLogits(37, 402, 8);
  const buf = new Float64Array(6000).fill(7);
  const got = logSoftmaxInto(short, buf);
  assert.equal(got.length, 37);
  assert.equal(got.buffer, buf.buffer);
  assert.deepEqual([...got], [...logSoftmax(short)]);
  assert.equal(buf[37], 7, "nothing written past the row");
  assert.throws(() => logSoftmaxInto(long, new Float64Array(10)), RangeError);
  assert.throws(
    () => logSoftmaxInto(new Float32Array([1, NaN]), buf),
    (e: unknown) => e instanceof NonFiniteError && /NaN.*1/.test(e.message),
  );
  // rows of different lengths through the samplers' shared row, interleaved, against a fresh sampler per row
  // (temperature alone: the draw's weights over the whole row go through a reused row too)
  const opts: SamplerOptions[] = [
    { temperature: 0.9, topK: 20, seed: 3, logprobs: 2 },
    { temperature: 0.7, topP: 0.8, minP: 0.02, seed: 4 },
    { temperature: 0, logprobs: 3 },
    { temperature: 1, seed: 5 },
    { temperature: 0.6, seed: 6, logprobs: 1 },
  ];
  for (const o of opts) {
    const a = new Sampler(o);
    const seq = [long, short, long, short].map((x) => a.sample(x));
    const fresh = [long, short, long, short].map((x, i) => {
      const f = new Sampler(o);
      for (let j = 0; j < i; j++) f.sample([long, short][j % 2]); // the same draws before, for the same rng state
      return f.sample(x);
    });
    assert.deepEqual(seq, fresh, JSON.stringify(o));
  }
});

test("logSoftmax matches a naive float64 reference, incl. ±1e4 magnitudes and -Infinity", () => {
  for (let trial = 0; trial < 20; trial++) {
    const r = uniforms(trial);
    const n = 1 + Math.floor(r() * 500);
    const big = trial % 2 === 1;
    const x = new Float64Array(n).map(() => (r() * 2 - 1) * (big ? 1e4 : 20));
    for (let i = 0; i < n; i++) if (r() < 0.1 && i !== 0) x[i] = -Infinity;
    const lp = logSoftmax(x);
    // Naive reference: log(exp(x_i - c) / Σ exp(x_j - c)), summed in reverse order. At ±1e4, exp overflows
    // unless c is the max, so shift by it there (softmax is shift-invariant).
    const c = big ? Math.max(...x) : 0;
    const e = Array.from(x, (v) => Math.exp(v - c));
    const z = e.reduceRight((a, b) => a + b, 0);
    for (let i = 0; i < n; i++) {
      if (x[i] === -Infinity) {
        assert.equal(lp[i], -Infinity);
        continue;
      }
      const ref = Math.log(e[i] / z);
      if (Number.isFinite(ref))
        assert.ok(
          Math.abs(lp[i] - ref) <= 1e-9 * Math.max(1, Math.abs(ref)),
          `trial ${trial} id ${i}: ${lp[i]} vs ${ref}`,
        );
      else assert.ok(lp[i] < -700, `id ${i}: ${lp[i]}`); // reference underflowed; ours must still be a (very negative) finite number
    }
    assert.ok(Math.abs(lp.reduce((a, v) => a + Math.exp(v), 0) - 1) < 1e-12);
  }
});

test("topLogprobs equals the head of a full sort (ties to lower id)", () => {
  const r = uniforms(7);
  for (const n of [1, 2, 10, 999, 20000]) {
    const lp = new Float64Array(n).map(() => Math.round(r() * 50) / 10); // many ties
    const full = [...lp.keys()].sort((a, b) => lp[b] - lp[a] || a - b);
    for (const k of [0, 1, 5, 20, n, n + 3]) {
      assert.deepEqual(
        topLogprobs(lp, k),
        full.slice(0, k).map((id) => [id, lp[id]]),
        `n ${n} k ${k}`,
      );
    }
  }
});

test("filters keep exactly the expected sets (hand-made distribution)", () => {
  const logits = new Float32Array([0.4, 0.3, 0.2, 0.1].map(Math.log));
  const kept = (o: SamplerOptions): number[] =>
    createSampler(o)
      .candidates(logSoftmax(logits))
      .sort((a, b) => a - b);
  assert.deepEqual(kept({}), [0, 1, 2, 3]);
  assert.deepEqual(kept({ topK: 2 }), [0, 1]);
  assert.deepEqual(kept({ topP: 0.75 }), [0, 1, 2]);
  assert.deepEqual(kept({ topK: 3, topP: 0.75 }), [0, 1]); // top-p renormalized within top-k: 0.7/0.9 ≥ 0.75
  assert.deepEqual(kept({ minP: 0.45 }), [0, 1, 2]); // p ≥ 0.18
  assert.deepEqual(kept({ topP: 0.5, minP: 0.45 }), [0, 1]);
  assert.deepEqual(kept({ topP: 0.8, minP: 0.6 }), [0, 1]); // min-p is the shorter prefix here
  assert.deepEqual(kept({ topP: 0.01 }), [0]);
});

test("filters keep exactly the reference sets on random vocabularies", () => {
  const cases: SamplerOptions[] = [
    { topK: 40 },
    { topP: 0.9 },
    { topP: 0.5 },
    { topP: 0.99999 },
    { topP: 0.99999, minP: 1e-5 },
    { minP: 0.05 },
    { minP: 0.5 },
    { topK: 40, topP: 0.8, minP: 0.02 },
    { topP: 0.95, minP: 0.1 },
    { topK: 1 },
    { topK: 10_000 },
  ];
  for (const [i, n] of [17, 1001, 151_937].entries()) {
    for (const [j, o] of cases.entries()) {
      const x = randomLogits(n, 1000 * i + j, n > 1000 ? 8 : 3);
      if (j % 3 === 0) x[5] = -Infinity;
      const got = createSampler(o)
        .candidates(logSoftmax(x))
        .sort((a, b) => a - b);
      assert.deepEqual(
        got,
        referenceKept(x, o).sort((a, b) => a - b),
        `n ${n} options ${JSON.stringify(o)}`,
      );
    }
  }
});

test("sampled tokens stay in the kept set with frequencies matching the renormalized probabilities", () => {
  const x = randomLogits(64, 42, 2);
  const cases: SamplerOptions[] = [
    { seed: 1 },
    { seed: 2, topK: 5 },
    { seed: 3, topP: 0.5 },
    { seed: 4, minP: 0.3 },
    { seed: 5, topK: 12, topP: 0.7, minP: 0.2, temperature: 0.7 },
    { seed: 6, topK: 8, temperature: 2 },
  ];
  for (const o of cases) checkEmpirical(x, o, referenceKept(x, o));
});

test("same seed and logits give the same token sequence; another seed differs", () => {
  const run = (seed: number): number[] => {
    const s = createSampler({ seed, temperature: 1.5, topK: 50, topP: 0.95 });
    return Array.from({ length: 300 }, (_, i) => s.sample(randomLogits(997, i)).token);
  };
  assert.deepEqual(run(1234), run(1234));
  assert.notDeepEqual(run(1234), run(1235));
  assert.deepEqual(run(2 ** 40 + 3), run(2 ** 40 + 3));
  assert.notDeepEqual(run(2 ** 40 + 3), run(3)); // high seed bits matter
});

test("temperature → 0 approaches greedy", () => {
  for (let i = 0; i < 50; i++) {
    const x = randomLogits(1 + i * 37, 500 + i);
    const s = createSampler({ temperature: 1e-9, seed: i });
    assert.equal(s.sample(x).token, naiveArgmax(x));
  }
});

test("logprob is under the unmodified distribution; top alternatives returned", () => {
  const x = randomLogits(1001, 9);
  const lp = logSoftmax(x);
  const s = createSampler({ temperature: 0.3, topK: 3, seed: 8, logprobs: 5 });
  for (let i = 0; i < 20; i++) {
    const r = s.sample(x);
    assert.equal(r.logprob, lp[r.token]);
    assert.deepEqual(r.top, topLogprobs(lp, 5));
  }
  assert.equal(createSampler({ seed: 1 }).sample(x).top, undefined);
});

test("options and logits are validated with UsageError", () => {
  const bad: SamplerOptions[] = [
    { temperature: -0.1 },
    { temperature: NaN },
    { topP: 0 },
    { topP: 1.01 },
    { minP: 1 },
    { minP: -0.1 },
    { topK: -1 },
    { topK: 2.5 },
    { seed: 1.5 },
    { seed: NaN },
    { logprobs: -1 },
  ];
  for (const o of bad) assert.throws(() => new Sampler(o), UsageError, JSON.stringify(o));
  const s = createSampler({ seed: 1 });
  assert.throws(
    () => s.sample(new Float32Array([0, 1, NaN, 2])),
    (e: unknown) => e instanceof NonFiniteError && /NaN.*2/.test(e.message),
  );
  assert.throws(() => s.sample(new Float32Array([-Infinity, -Infinity])), NonFiniteError);
  assert.throws(() => s.sample(new Float32Array(0)), UsageError);
  assert.equal(s.sample(new Float32Array([-Infinity, 0, -Infinity])).token, 1);
});

test("drawsOnDevice: a temperature alone; with a filtering device also top-p and min-p with top-k 0 or 1..64; never greedy, top-k past 64, or top logprobs", () => {
  const on = (o: SamplerOptions, filtered: boolean): boolean => new Sampler({ seed: 1, ...o }).drawsOnDevice(filtered);
  for (const filtered of [false, true]) {
    assert.equal(on({ temperature: 0.8 }, filtered), true);
    assert.equal(on({ temperature: 0 }, filtered), false);
    assert.equal(on({ temperature: 0, topP: 0.9 }, filtered), false);
    assert.equal(on({ temperature: 0.8, topP: 0.9 }, filtered), filtered);
    assert.equal(on({ temperature: 0.8, minP: 0.1 }, filtered), filtered);
    assert.equal(on({ temperature: 0.8, topP: 0.5, minP: 0.1 }, filtered), filtered);
    assert.equal(on({ temperature: 0.8, logprobs: 1 }, filtered), false);
    assert.equal(on({ temperature: 0.8, topP: 0.9, logprobs: 1 }, filtered), false);
    assert.equal(on({ temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 }, filtered), filtered);
    assert.equal(on({ temperature: 0.8, topK: 64 }, filtered), filtered);
    assert.equal(on({ temperature: 0.8, topK: 65 }, filtered), false);
    assert.equal(on({ temperature: 0.8, topK: 65, topP: 0.9 }, filtered), false);
    assert.equal(on({ temperature: 0.8, topK: 40, logprobs: 2 }, filtered), false);
  }
  // a device draw carries the settings and the sampler's next key
  const s = new Sampler({ temperature: 0.7, topK: 40, topP: 0.9, minP: 0.02, seed: 9 });
  const keys = new Sampler({ temperature: 0.7, seed: 9 });
  assert.deepEqual(s.deviceDraw(), { temperature: 0.7, topK: 40, topP: 0.9, minP: 0.02, key: keys.drawKey() });
});
