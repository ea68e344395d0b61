// Whole-model parity of the fast CPU backend: log-probs of the prefill and decode paths with backend "cpu" against
// the reference path (plain kernels, float64) on random synthetic models of many shapes.
// Tolerances: F32 weights (f32 activations, f32 sums) ≤ 1e-4 nats; 32-block quants (16-bit activations per 32) ≤ 2e-3;
// K quants and IQ4_XS (14-bit activations per 256) ≤ 2e-2 nats on these random-weight models, whose peaky attention
// amplifies small perturbations (8-bit activations as in ggml gave 0.1–1.7 nats here). Measured maxima are printed.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { logprobRows, maxAbsDiff } from "../helpers/logprobs.js";
import { CASES, randomTokens, synthModel, type SynthCase } from "../helpers/synth.js";

const QUANT_CASES: readonly [SynthCase, number][] = [
  [{ ...CASES[0], label: "tiny-v3-q8_0", type: "Q8_0" }, 2e-3],
  [{ ...CASES[0], label: "tiny-v3-q4_0", type: "Q4_0" }, 2e-3],
  [
    {
      label: "k256-q4_k_m",
      base: "tiny",
      type: "Q4_K_M",
      over: { n_embd: 256, q_lora: 256, kv_lora: 256, n_ff: 512, n_ff_exp: 256 },
    },
    2e-2,
  ],
  [
    {
      label: "k256-q5_k_s",
      base: "tiny",
      type: "Q5_K_S",
      over: { n_embd: 256, q_lora: 256, kv_lora: 256, n_ff: 512, n_ff_exp: 256 },
    },
    2e-2,
  ],
  [
    {
      label: "k256-iq4_xs",
      base: "tiny",
      type: "IQ4_XS",
      over: { n_embd: 256, q_lora: 256, kv_lora: 256, n_ff: 512, n_ff_exp: 256 },
    },
    2e-2,
  ],
];
const ALL: readonly [SynthCase, number][] = [...CASES.map((c) => [c, 1e-4] as [SynthCase, number]), ...QUANT_CASES];

for (const [c, tol] of ALL) {
  const m = synthModel(c, 5);
  after(m.cleanup);
  const { model, config, backend } = loadModel(m.path, undefined, { backend: "cpu", threads: 2 });
  after(() => backend?.close());
  const n = c.base === "tiny-glm" ? 40 : 23;
  test(`${c.label}: backend cpu prefill and decode equal the reference within ${tol} nats`, () => {
    assert.ok(backend !== undefined && model.kernels === backend);
    const tokens = randomTokens(n, 99, 0, config.nVocab);
    const ref = logprobRows(model, tokens, "reference");
    const pre = maxAbsDiff(logprobRows(model, tokens, "prefill", 8), ref);
    const dec = maxAbsDiff(logprobRows(model, tokens, "decode"), ref);
    console.log(
      `# ${c.label} (${c.type ?? "F32"}): max |Δ logprob| prefill ${pre.toExponential(2)}, decode ${dec.toExponential(2)}; fallbacks ${JSON.stringify([...backend.fallbacks])}`,
    );
    assert.ok(pre <= tol, `prefill ${pre}`);
    assert.ok(dec <= tol, `decode ${dec}`);
  });
}
