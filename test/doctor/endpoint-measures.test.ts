// The endpoint comparison's measures and dialect parsers on hand-made replies (no model, no server): the full
// distribution is never judged on a renormalized subset, and the less common reply shapes are read.
import { test } from "node:test";
import assert from "node:assert/strict";
import { logSoftmaxRow } from "../../src/engine/evaluate.js";
import {
  comparePosition,
  summarize,
  TOLERANCE,
  withinTolerance,
  type Scored,
} from "../../src/doctor/endpoint/compare.js";
import { probe, type DialectContext } from "../../src/doctor/endpoint/dialects.js";
import type { Call } from "../../src/doctor/endpoint/http.js";

const ref = logSoftmaxRow(Array.from({ length: 64 }, (_, i) => Math.sin(i * 1.7) * 3));
const order = [...ref.keys()].sort((a, b) => ref[b] - ref[a]);
const scored = (top: [number, number][], next: number, nextLogprob: number | undefined): Scored => ({
  pos: 0,
  group: "prompt",
  step: undefined,
  seq: 0,
  top: new Map(top),
  returned: top.length,
  unmapped: 0,
  next,
  nextLogprob,
});

test("exact top-5 and actual token: KL 0, gap 0, within tolerance", () => {
  const next = order[7];
  const p = comparePosition(
    ref,
    scored(
      order.slice(0, 5).map((id) => [id, ref[id]]),
      next,
      ref[next],
    ),
  )!;
  assert.ok(p.kl < 1e-12 && p.actualGap! < 1e-12);
  assert.ok(withinTolerance(summarize([p])));
});

test("a top-5 renormalized to sum 1 is not a match (the rest of the mass is one bucket)", () => {
  const ids = order.slice(0, 5);
  const z = Math.log(ids.reduce((a, id) => a + Math.exp(ref[id]), 0));
  const p = comparePosition(
    ref,
    scored(
      ids.map((id) => [id, ref[id] - z]),
      ids[0],
      ref[ids[0]] - z,
    ),
  )!;
  assert.ok(p.kl > 0.1, String(p.kl));
  assert.ok(!withinTolerance(summarize([p])));
});

test("only the actual token, flat: the gap decides (no renormalized KL 0)", () => {
  const next = order[0];
  const p = comparePosition(ref, scored([[next, -Math.log(64)]], next, -Math.log(64)))!;
  assert.ok(p.actualGap! > 1, String(p.actualGap));
  assert.ok(!withinTolerance(summarize([p])));
  assert.equal(p.k, 1);
});

test("tolerance: bf16-sized noise passes, a 0.1-nat shift of the actual token does not", () => {
  const next = order[2];
  const top = order.slice(0, 5).map((id): [number, number] => [id, ref[id] + 0.01 * Math.sin(id)]);
  assert.ok(withinTolerance(summarize([comparePosition(ref, scored(top, next, ref[next] + 0.01))!])));
  assert.ok(!withinTolerance(summarize([comparePosition(ref, scored(top, next, ref[next] + 0.1))!])));
  assert.ok(TOLERANCE.meanGap < 0.066 && TOLERANCE.meanKL < 7e-3);
});

function ctxWith(reply: unknown): DialectContext {
  const call: Call = async () => ({ status: 200, json: reply });
  const texts = new Map([
    ["a", 1],
    ["b", 2],
    ["c", 3],
  ]);
  return {
    call,
    base: "http://x/v1",
    origin: "http://x",
    servedModel: "m",
    topK: 2,
    maxTokens: 2,
    byText: (t) => texts.get(t),
  };
}

test("SGLang /generate without an entry for the first prompt token: realigned to the prompt", async () => {
  const r = await probe(
    "sglang",
    ctxWith({
      meta_info: {
        input_token_logprobs: [
          [-1.5, 2, null],
          [-0.5, 3, null],
        ],
        input_top_logprobs: [
          [
            [-0.4, 1, null],
            [-1.5, 2, null],
          ],
          [
            [-0.5, 3, null],
            [-1.2, 1, null],
          ],
        ],
        output_token_logprobs: [[-0.1, 1, null]],
        output_top_logprobs: [
          [
            [-0.1, 1, null],
            [-2.5, 2, null],
          ],
        ],
        prompt_tokens: 3,
      },
    }),
    { ids: [0, 2, 3] },
  );
  assert.ok(typeof r !== "string", String(r));
  assert.equal(r.prompt!.length, 3);
  assert.equal(r.prompt![0], undefined);
  assert.equal(r.prompt![1]!.actual, 2);
  assert.equal(r.prompt![1]!.actualLogprob, -1.5);
  assert.deepEqual(r.promptTokens, [0, 2, 3]);
  assert.deepEqual(r.generated, [1]);
});

test("llama-server's older completion_probabilities {content, probs: [{tok_str, prob}]} are read", async () => {
  const r = await probe(
    "llama-server",
    ctxWith({
      content: "ab",
      tokens_evaluated: 3,
      completion_probabilities: [
        {
          content: "a",
          probs: [
            { tok_str: "a", prob: 0.5 },
            { tok_str: "b", prob: 0.25 },
          ],
        },
        {
          content: "b",
          probs: [
            { tok_str: "b", prob: 0.75 },
            { tok_str: "c", prob: 0.125 },
          ],
        },
      ],
    }),
    { ids: [0, 2, 3] },
  );
  assert.ok(typeof r !== "string", String(r));
  assert.deepEqual(r.generated, [1, 2]);
  assert.equal(r.genEntries[1].actualLogprob, Math.log(0.75));
  assert.equal(r.promptCount, 3);
});

test("a completion without prompt_logprobs is not the vllm dialect", async () => {
  const r = await probe("vllm", ctxWith({ choices: [{ text: "x", logprobs: null }] }), { ids: [0, 1] });
  assert.equal(typeof r, "string");
});
