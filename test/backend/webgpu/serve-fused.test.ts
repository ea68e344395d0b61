// latent serve on the fused WebGPU pipeline (FusedGpuModel behind the scheduler, GPU caches mirroring the page pool):
// concurrent greedy requests — batched decode steps, prompt chunks, more requests than the batch over time, a prompt
// prefix served from the prefix cache — give the tokens and log-probabilities each request gets alone on the CPU
// reference kernels (logprobs ≤ 1e-3); requests at a temperature alone get their tokens drawn on the GPU, the same for
// the same seed; the CLI takes that path.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadModel } from "../../../src/runtime/load.js";
import { Tokenizer } from "../../../src/tokenizer/index.js";
import { generateSync } from "../../../src/engine/generate.js";
import { startServer } from "../../../src/server/server.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { pagedFusedModel } from "../../helpers/fused-paged.js";
import { gpuOrSkip } from "./helpers.js";
import { spawnServe } from "../../helpers/serve-child.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

test("serve on the fused pipeline (GPU caches mirroring the page pool): 5 concurrent greedy requests, then a shared prompt prefix from the cache, equal each one alone on the CPU; seeded requests at a temperature drawn on the GPU", {
  skip,
}, async () => {
  const { synth, loaded, tok, fused, pageSize, numPages } = pagedFusedModel(7, 3, 40);
  const kvCacheTokens = numPages * pageSize;
  const server = await startServer({
    loaded: { file: loaded.file, config: fused.config, model: fused },
    port: 0,
    modelId: "tiny",
    maxBatch: 3,
    prefillChunk: 5,
    tokenBudget: 12,
    pageSize,
    kvCacheTokens,
  });
  try {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
    const ask = (prompt: number[]) =>
      client.completions.create({
        model: "tiny",
        prompt,
        max_tokens: 6,
        temperature: 0,
        logprobs: 1,
        ignore_eos: true,
      } as OpenAI.CompletionCreateParamsNonStreaming);
    const check = (prompt: number[], got: OpenAI.Completion, label: string): void => {
      const alone = generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: 6, ignoreEog: true });
      const c = got.choices[0];
      assert.equal(c.text, alone.text, `${label}: text`);
      c.logprobs!.token_logprobs!.forEach((lp, j) =>
        assert.ok(Math.abs(lp! - alone.logprobs[j]) <= 1e-3, `${label} token ${j}: ${lp} vs ${alone.logprobs[j]}`),
      );
    };
    const prompts = [0, 1, 2, 3, 4].map((i) => randomTokens(4 + 3 * i, 50 + i, 1, loaded.config.nVocab));
    const answers = await Promise.all(prompts.map(ask));
    prompts.forEach((prompt, i) => check(prompt, answers[i], `request ${i}`));
    // a prompt that starts with request 4's 16 tokens: its full pages come from the prefix cache, latents from the GPU
    const longer = [...prompts[4], ...randomTokens(5, 99, 1, loaded.config.nVocab)];
    const again = await ask(longer);
    assert.ok(
      (again.usage as { prompt_tokens_details?: { cached_tokens?: number } }).prompt_tokens_details!.cached_tokens! >=
        12,
      JSON.stringify(again.usage),
    );
    check(longer, again, "cached prefix");
    // seeded requests at a temperature (no top-k/p, no top logprobs): drawn on the GPU, no rows read back; the same seed
    // gives the same tokens and logprobs, each a log-probability
    const sampled = (prompt: number[], seed: number) =>
      client.completions.create({
        model: "tiny",
        prompt,
        max_tokens: 6,
        temperature: 0.9,
        seed,
        logprobs: 0,
        ignore_eos: true,
      } as OpenAI.CompletionCreateParamsNonStreaming);
    const drawnBefore = fused.drawnRows;
    const p = randomTokens(6, 77, 1, loaded.config.nVocab);
    const [x, y] = await Promise.all([sampled(p, 11), sampled(p, 11)]);
    assert.equal(fused.drawnRows - drawnBefore, 12, "every token of both drawn on the GPU");
    assert.equal(x.choices[0].text, y.choices[0].text);
    assert.deepEqual(x.choices[0].logprobs!.token_logprobs, y.choices[0].logprobs!.token_logprobs);
    for (const lp of x.choices[0].logprobs!.token_logprobs!)
      assert.ok(lp! <= 0 && Number.isFinite(lp), `logprob ${lp}`);
  } finally {
    await server.close();
    await fused.close();
    synth.cleanup();
  }
});

test("latent serve --backend webgpu (child process) takes the fused pipeline, answers like the CPU reference, exits 0 on SIGTERM", {
  skip,
}, async () => {
  const synth = synthModel(CASES[0], 8);
  const args = [
    synth.path,
    "--port",
    "0",
    "--alias",
    "tiny",
    "--backend",
    "webgpu",
    "--max-batch",
    "2",
    "--ctx-size",
    "64",
  ];
  const {
    child,
    url: listening,
    exited,
    stderr,
  } = spawnServe(args, { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" });
  try {
    const url = await listening;
    assert.match(stderr(), /fused WebGPU pipeline on /);
    assert.match(stderr(), /context 64/);
    const loaded = loadModel(synth.path);
    const tok = Tokenizer.fromMetadata(loaded.file.metadata);
    const prompt = randomTokens(7, 91, 1, loaded.config.nVocab);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
    const r = await client.completions.create({
      model: "tiny",
      prompt,
      max_tokens: 5,
      temperature: 0,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(
      r.choices[0].text,
      generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: 5, ignoreEog: true }).text,
    );
    child.kill("SIGTERM");
    assert.equal(await exited, 0);
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
    synth.cleanup();
  }
});
