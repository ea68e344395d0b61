// latent serve on the fused WebGPU pipeline (FusedGpuModel behind the scheduler): concurrent greedy requests —
// batched decode steps over GPU cache slots, prompt chunks, more requests than slots over time — give the tokens and
// log-probabilities each request gets alone on the CPU reference kernels (logprobs ≤ 1e-3).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadModel } from "../../../src/model/load.js";
import { Tokenizer } from "../../../src/tokenizer/index.js";
import { generateSync } from "../../../src/engine/generate.js";
import { startServer } from "../../../src/server/server.js";
import { FusedGpuModel } from "../../../src/backend/webgpu/fused.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

test("serve on the fused pipeline: 5 concurrent greedy requests (3 GPU slots) equal each one alone on the CPU", { skip }, async () => {
  const synth = synthModel(CASES[0]!, 7);
  const loaded = loadModel(synth.path);
  const tok = Tokenizer.fromMetadata(loaded.file.metadata);
  const fused = new FusedGpuModel(loaded.config, { slots: 3, context: 48, maxTokens: 8 });
  fused.load(synth.path);
  const server = await startServer({ loaded: { file: loaded.file, config: fused.config, model: fused }, port: 0, modelId: "tiny", maxBatch: 3, prefillChunk: 5, tokenBudget: 12, prefixCaching: false });
  try {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
    const prompts = [0, 1, 2, 3, 4].map((i) => randomTokens(4 + 3 * i, 50 + i, 1, loaded.config.nVocab));
    const answers = await Promise.all(prompts.map((prompt) => client.completions.create({ model: "tiny", prompt, max_tokens: 6, temperature: 0, logprobs: 1, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming)));
    prompts.forEach((prompt, i) => {
      const alone = generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: 6, ignoreEog: true });
      const got = answers[i]!.choices[0]!;
      assert.equal(got.text, alone.text, `request ${i}: text`);
      const lps = got.logprobs!.token_logprobs!;
      lps.forEach((lp, j) => assert.ok(Math.abs(lp! - alone.logprobs[j]!) <= 1e-3, `request ${i} token ${j}: ${lp} vs ${alone.logprobs[j]}`));
    });
  } finally {
    await server.close();
    await fused.close();
    synth.cleanup();
  }
});
