// The engine against llama.cpp (node-llama-cpp 3.21.1) on random-weight models written by `latent synth`:
// F32 weights ≤ 1e-4; quantized weights ≤ 1e-4 against llama.cpp run on the same weights rewritten as F32
// (llama.cpp quantizes activations on quantized weights, so the quantized file itself is no tight oracle).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { rewriteAsF32 } from "../../src/gguf/convert.js";
import { loadModel } from "../../src/runtime/load.js";
import { logprobRows, maxAbsDiff } from "../helpers/logprobs.js";
import { oracleLogprobs } from "../helpers/oracle.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { preset, withOverrides } from "../../src/synth/presets.js";
import { synthesize } from "../../src/synth/synthesize.js";
import { CASES, randomTokens, synthModel, type SynthCase } from "../helpers/synth.js";

const TOL = 1e-4;

function check(
  label: string,
  enginePath: string,
  oraclePath: string,
  seqLens: readonly number[],
  llamaCppGroupScoring = false,
): void {
  test(`${label}: every path matches llama.cpp`, () => {
    const { model, config } = loadModel(enginePath, undefined, { llamaCppGroupScoring });
    const seqs = seqLens.map((n, i) => [0, ...randomTokens(n - 1, 97 + i, 2, config.nVocab)]);
    const want = oracleLogprobs(oraclePath, seqs);
    seqs.forEach((tokens, i) => {
      for (const path of ["reference", "prefill", "decode"] as const) {
        const d = maxAbsDiff(logprobRows(model, tokens, path, 8), want[i]);
        assert.ok(d <= TOL, `${path}, ${tokens.length} tokens: max |Δ logprob| = ${d}`);
      }
    });
  });
}

for (const c of CASES) {
  // V2-style softmax + groups: llama.cpp scores groups by top-2 sum, the model's definition by the max (see below).
  const emulate = c.label === "v2-groups-softmax";
  const m = synthModel(c, 21);
  after(m.cleanup);
  check(
    `${c.label} (F32${emulate ? ", llama.cpp group scoring" : ""})`,
    m.path,
    m.path,
    c.base === "tiny-glm" ? [40] : [1, 23],
    emulate,
  );
}

const QUANT: readonly SynthCase[] = [
  {
    label: "tiny-v3-q4km",
    base: "tiny",
    over: { n_embd: 256, kv_lora: 256, n_ff: 512, n_ff_exp: 256, q_lora: 256 },
    type: "Q4_K_M",
  },
  { label: "tiny-v3-q8", base: "tiny", over: {}, type: "Q8_0" },
  { label: "glm-dsa-iq4xs", base: "tiny-glm", over: { n_embd: 256, n_ff_exp: 256, n_ff: 256 }, type: "IQ4_XS" },
];
for (const c of QUANT) {
  const m = synthModel(c, 5);
  after(m.cleanup);
  const f32 = join(m.dir, "f32.gguf");
  const file = GGUFFile.open(m.path);
  rewriteAsF32(file, f32);
  file.close();
  check(`${c.label} (vs llama.cpp on the F32 rewrite)`, m.path, f32, [20]);
}

// The real attention geometry of released models (V2-Lite: no q-LoRA, 16 heads, P = V = 128, YaRN; GLM-4.7-Flash:
// 20 heads, P = 192, V = 256, q-LoRA 768; kv_lora 512, rope 64, n_embd 2048), one MoE layer with fewer, narrower
// experts and a small vocabulary so the F32 files stay ~100 MB.
for (const name of ["v2-lite", "glm47-flash"]) {
  const dir = mkdtempSync(join(tmpdir(), "latent-geom-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const cfg = withOverrides(preset(name), {
    n_layer: 1,
    n_vocab: 512,
    n_expert: 4,
    n_used: 2,
    n_ff_exp: 256,
    groups: 0,
    groups_used: 0,
  });
  const path = synthesize(cfg, { out: join(dir, `${name}.gguf`), seed: 3, type: "F32" })[0];
  check(`${name} geometry, 1 layer (F32)`, path, path, [12]);
}

test("V2 group-limited routing follows DeepSeek's definition (max per group), not llama.cpp's top-2 sum", () => {
  const c = CASES.find((x) => x.label === "v2-groups-softmax")!;
  const m = synthModel(c, 21);
  try {
    const tokens = [0, ...randomTokens(22, 97 + 1, 2, 400)];
    const want = oracleLogprobs(m.path, [tokens])[0];
    const asLlama = loadModel(m.path, undefined, { llamaCppGroupScoring: true }).model;
    const definition = loadModel(m.path).model;
    assert.ok(maxAbsDiff(logprobRows(asLlama, tokens, "reference"), want) <= TOL);
    // Same weights, different group choice somewhere in 23 tokens × 2 MoE layers: the outputs must differ.
    assert.ok(maxAbsDiff(logprobRows(definition, tokens, "reference"), want) > 1e-3);
  } finally {
    m.cleanup();
  }
});
