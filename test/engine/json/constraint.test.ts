// The token constraint through the sampler: a toy vocabulary whose likeliest tokens would break JSON, greedy and
// sampled; every output parses and matches, and the end-of-generation token comes only once the value is whole.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsonConstraint, type TokenPieces } from "../../../src/engine/json/constraint.js";
import { compileSchema, ANY_OBJECT } from "../../../src/engine/json/schema.js";
import { Sampler } from "../../../src/engine/sampler.js";
import { deviceChoice } from "../../../src/engine/device-picks.js";

const PIECES = [
  "<eos>",
  "In the beginning",
  " ",
  "{",
  "}",
  '"',
  "a",
  "b",
  ":",
  ",",
  "1",
  "2",
  "[",
  "]",
  "null",
  '{"',
  '":',
  "true",
  "\n",
  "é",
];
const EOS = 0;
const enc = new TextEncoder();
const vocab: TokenPieces = {
  vocabSize: PIECES.length,
  tokenBytes: (id: number, skipSpecial = false) =>
    id === EOS && skipSpecial ? new Uint8Array(0) : enc.encode(PIECES[id]),
  isEndOfGeneration: (id: number) => id === EOS,
};

/** Runs a sampler over fixed random-ish logits that favour prose, until EOS or `max` tokens. */
function generate(sampler: Sampler, max: number, seed: number): { text: string; ended: boolean } {
  let text = "";
  let x = seed;
  for (let i = 0; i < max; i++) {
    const logits = new Float32Array(PIECES.length);
    for (let t = 0; t < logits.length; t++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      logits[t] = (x / 2 ** 32) * 4;
    }
    logits[1] = 20; // the prose token is always the likeliest and never allowed
    const { token } = sampler.sample(logits);
    if (token === EOS) return { text, ended: true };
    text += PIECES[token];
  }
  return { text, ended: false };
}

test("json_object: greedy and sampled outputs parse as objects, and the sampler leaves the device", () => {
  for (const temperature of [0, 1]) {
    for (let seed = 1; seed <= 20; seed++) {
      const sampler = new Sampler({ temperature, seed, constraint: new JsonConstraint(vocab, ANY_OBJECT) });
      assert.equal(
        deviceChoice(sampler, { picksDraw: true, chainsDraws: true, picksDrawFiltered: true }, "pick"),
        undefined,
      );
      assert.equal(
        deviceChoice(sampler, { picksDraw: true, chainsDraws: true, picksDrawFiltered: true }, "chain"),
        undefined,
      );
      const { text, ended } = generate(sampler, 200, seed);
      if (!ended) continue; // cut by the token limit: the server reports "length"
      const value: unknown = JSON.parse(text);
      assert.ok(typeof value === "object" && value !== null && !Array.isArray(value), text);
    }
  }
});

test("json_schema: an enum field closes within a few tokens and validates", () => {
  const schema = compileSchema({
    type: "object",
    properties: { b: { enum: [null, true, 1] } },
    required: ["b"],
    additionalProperties: false,
  });
  let ended = 0;
  for (let seed = 1; seed <= 20; seed++) {
    const out = generate(
      new Sampler({ temperature: seed % 2, seed, constraint: new JsonConstraint(vocab, schema) }),
      40,
      seed,
    );
    if (!out.ended) continue;
    ended++;
    const value = JSON.parse(out.text) as { b: unknown };
    assert.deepEqual(Object.keys(value), ["b"]);
    assert.ok([null, true, 1].includes(value.b as never), out.text);
  }
  assert.ok(ended > 10, `only ${ended} of 20 ended`);
});

test("sampling with a constraint draws from the distribution restricted to allowed tokens", () => {
  // at the start of an integer the allowed tokens are "1", "2", " " and "\n"; among them the draw is ∝ exp(logit)
  const counts = new Map<number, number>();
  const logits = new Float32Array(PIECES.length).fill(-5);
  logits[1] = 10; // banned prose
  logits[10] = 1; // "1"
  logits[11] = 0; // "2"
  const N = 4000;
  for (let i = 0; i < N; i++) {
    const c = new JsonConstraint(vocab, compileSchema({ type: "integer" }));
    const { token } = new Sampler({ temperature: 1, seed: i, constraint: c }).sample(logits);
    counts.set(token, (counts.get(token) ?? 0) + 1);
  }
  for (const t of counts.keys()) assert.ok([2, 10, 11, 18].includes(t), `token ${t} is not allowed`);
  const expected = Math.E / (Math.E + 1 + 2 * Math.exp(-5));
  assert.ok(Math.abs(counts.get(10)! / N - expected) < 0.03, `p("1") = ${counts.get(10)! / N}, expected ${expected}`);
});

test("end-of-generation only when the value is complete; nothing after a closed value", () => {
  const c = new JsonConstraint(vocab, ANY_OBJECT);
  assert.equal(c.allows(EOS), false);
  c.accept(3); // {
  assert.equal(c.allows(EOS), false);
  assert.equal(c.allows(1), false);
  c.accept(4); // }
  assert.equal(c.allows(EOS), true);
  assert.equal(c.allows(2), false, "no trailing whitespace");
  assert.equal(c.complete, true);
});

test("a constraint that allows no token is an error naming it, not a hang or an invalid token", () => {
  const nothing = { allows: () => false, accept: () => assert.fail("accepted a token") };
  for (const temperature of [0, 1]) {
    const sampler = new Sampler({ temperature, seed: 1, constraint: nothing });
    assert.throws(() => sampler.sample(new Float32Array([1, 2, 3])), /no token can continue the constrained output/);
  }
});
