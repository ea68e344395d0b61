// The engine against llama.cpp's full-vocabulary log-probs for the kit's tiny models (../shared/testdata/models),
// on every attention path. Tolerance 1e-4 (llama.cpp vs an independent float64 reference: ≤ 1.1e-5).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { loadModel } from "../../src/runtime/load.js";
import { argmax, logprobRows, maxAbsDiff } from "../helpers/logprobs.js";

interface KitCase {
  name: string;
  tokens: number[];
  logprobs: (number | null)[][];
  logprobs_f32_weights?: (number | null)[][];
}

const MODELS = ["ds2-qlora-softmax", "ds2-lite", "ds2-v3", "glm-dsa-topk8", "ds2-v3-mixed-q"];
const TOL = 1e-4;

for (const name of MODELS) {
  const dir = new URL("../fixtures/models/", import.meta.url);
  const expected = JSON.parse(readFileSync(new URL(`${name}.expected.json`, dir), "utf8")) as { cases: KitCase[] };
  const { model } = loadModel(new URL(`${name}.gguf`, dir).pathname);

  for (const kc of expected.cases) {
    // Quantized weights: compare with llama.cpp on the same weights rewritten as F32 (llama.cpp quantizes activations).
    const want = kc.logprobs_f32_weights ?? kc.logprobs;
    for (const [path, chunk] of [
      ["reference", undefined],
      ["prefill", 7],
      ["prefill", 256],
      ["decode", undefined],
    ] as const) {
      test(`${name}/${kc.name}: ${path}${chunk ? ` (chunk ${chunk})` : ""} matches llama.cpp`, () => {
        const got = logprobRows(model, kc.tokens, path, chunk);
        const d = maxAbsDiff(got, want);
        assert.ok(d <= TOL, `max |Δ logprob| = ${d}`);
        got.forEach((row, i) => assert.equal(argmax(row), argmax(want[i]), `argmax at position ${i}`));
      });
    }
    test(`${name}/${kc.name}: a one-token prompt gives row 0 on every path`, () => {
      for (const path of ["reference", "prefill", "decode"] as const) {
        const got = logprobRows(model, kc.tokens.slice(0, 1), path);
        assert.ok(maxAbsDiff(got, want.slice(0, 1)) <= TOL, path);
      }
    });
  }
}
