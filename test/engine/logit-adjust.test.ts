// Logit bias and the presence / frequency / repetition penalties: the adjuster against a plain reference of the
// OpenAI and HF/vLLM definitions on random logits, and the sampler choosing from the adjusted row.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LogitAdjuster } from "../../src/engine/logit-adjust.js";
import { Sampler } from "../../src/engine/sampler.js";
import { logSoftmax } from "../../src/engine/logprobs.js";
import { uniforms } from "../helpers/rng.js";

/** The definitions written out plainly, one token at a time. */
function reference(
  logits: Float32Array,
  o: {
    bias: Map<number, number>;
    presence: number;
    frequency: number;
    repetition: number;
    prompt: number[];
    output: number[];
  },
): number[] {
  const out = Array.from(logits);
  for (const [id, b] of o.bias) out[id] = b === -100 ? -Infinity : out[id] + b;
  for (let t = 0; t < out.length; t++) {
    if (o.repetition !== 1 && (o.prompt.includes(t) || o.output.includes(t)))
      out[t] = out[t] > 0 ? out[t] / o.repetition : out[t] * o.repetition;
    const count = o.output.filter((x) => x === t).length;
    out[t] = out[t] - o.frequency * count - o.presence * (count > 0 ? 1 : 0);
  }
  return out;
}

test("the adjuster equals the reference definitions on random logits, histories and settings", () => {
  const r = uniforms(7);
  const V = 97;
  for (let trial = 0; trial < 200; trial++) {
    const logits = Float32Array.from({ length: V }, () => (r() - 0.5) * 20);
    const bias = new Map<number, number>();
    for (let i = 0; i < 5; i++) bias.set(Math.floor(r() * V), r() < 0.2 ? -100 : Math.round((r() - 0.5) * 200) / 2);
    const presence = (r() - 0.5) * 4;
    const frequency = (r() - 0.5) * 4;
    const repetition = r() < 0.3 ? 1 : 0.5 + r() * 1.5;
    const prompt = Array.from({ length: 6 }, () => Math.floor(r() * V));
    const output = Array.from({ length: Math.floor(r() * 12) }, () => Math.floor((r() * V) / 4)); // repeats likely
    const adj = new LogitAdjuster({
      logitBias: bias,
      presencePenalty: presence,
      frequencyPenalty: frequency,
      repetitionPenalty: repetition,
      promptTokens: prompt,
    });
    for (const t of output) adj.observe(t);
    const got = Array.from(adj.apply(logits));
    const want = reference(logits, { bias, presence, frequency, repetition, prompt, output });
    for (let t = 0; t < V; t++) {
      if (want[t] === -Infinity) assert.equal(got[t], -Infinity, `trial ${trial}, token ${t}`);
      else
        assert.ok(
          Math.abs(got[t] - want[t]) <= 1e-9 * Math.max(1, Math.abs(want[t])),
          `trial ${trial}, token ${t}: ${got[t]} vs ${want[t]}`,
        );
    }
  }
});

test("no setting leaves the row unchanged and the adjuster inactive", () => {
  const adj = new LogitAdjuster({
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
    logitBias: new Map(),
  });
  assert.equal(adj.active, false);
  const logits = Float32Array.from([1, -2, 3]);
  adj.observe(0);
  assert.deepEqual(Array.from(adj.apply(logits)), [1, -2, 3]);
  assert.equal(new LogitAdjuster({ frequencyPenalty: 0.5 }).active, true);
  assert.throws(() => new LogitAdjuster({ repetitionPenalty: 0 }), /repetitionPenalty/);
  assert.throws(() => new LogitAdjuster({ logitBias: new Map([[1, Number.NaN]]) }), /finite/);
});

test("greedy sampling with a bias takes the adjusted argmax, reports the unmodified logprob, and never chains on a device", () => {
  const logits = Float32Array.from([5, 4, 1, 0]);
  const s = new Sampler({
    temperature: 0,
    logitBias: new Map([
      [0, -100],
      [2, 3.5],
    ]),
  });
  assert.equal(s.picksGreedyOnDevice(), false);
  assert.equal(s.drawsOnDevice(true), false);
  const r = s.sample(logits);
  assert.equal(r.token, 2); // 1 + 3.5 beats 4 once token 0 is banned
  assert.ok(Math.abs(r.logprob - logSoftmax(logits)[2]) < 1e-12);
  assert.equal(new Sampler({ temperature: 0 }).picksGreedyOnDevice(), true);
});

test("a frequency penalty turns greedy repetition into the next candidate, counting each generated token", () => {
  // token 0 leads by 0.7: each pick costs its token 1, so they alternate (0: 2.5, then 1.5 < 1.8, then 1.5 > 0.8, ...)
  const logits = Float32Array.from([2.5, 1.8, -3]);
  const s = new Sampler({ temperature: 0, frequencyPenalty: 1 });
  const picks = [0, 1, 2, 3].map(() => s.sample(logits).token);
  assert.deepEqual(picks, [0, 1, 0, 1]);
  const plain = new Sampler({ temperature: 0 });
  assert.deepEqual(
    [0, 1, 2].map(() => plain.sample(logits).token),
    [0, 0, 0],
  );
});

test("a banned token is never drawn at a temperature, and the draw follows the adjusted distribution", () => {
  const logits = Float32Array.from([3, 3, 0, 0]);
  const s = new Sampler({
    temperature: 1,
    seed: 11,
    logitBias: new Map([
      [0, -100],
      [3, 3],
    ]),
  });
  const counts = [0, 0, 0, 0];
  const N = 4000;
  for (let i = 0; i < N; i++) counts[s.sample(logits).token]++;
  assert.equal(counts[0], 0);
  // adjusted logits [-inf, 3, 0, 3]: tokens 1 and 3 each ~ e^3 / (2 e^3 + 1) ≈ 0.488
  const p = Math.exp(3) / (2 * Math.exp(3) + 1);
  for (const t of [1, 3]) assert.ok(Math.abs(counts[t] / N - p) < 0.04, `token ${t}: ${counts[t] / N} vs ${p}`);
});

test("banning every token is an error, not a silent pick", () => {
  const s = new Sampler({
    temperature: 0,
    logitBias: new Map([
      [0, -100],
      [1, -100],
    ]),
  });
  assert.throws(() => s.sample(Float32Array.from([1, 2])));
});
