// latent serve on the fused WebGPU pipeline (FusedGpuModel behind the scheduler): concurrent greedy requests —
// batched decode steps over GPU cache slots, prompt chunks, more requests than slots over time — give the tokens and
// log-probabilities each request gets alone on the CPU reference kernels (logprobs ≤ 1e-3); the CLI takes that path.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import OpenAI from "openai";
import { loadModel } from "../../../src/model/load.js";
import { Tokenizer } from "../../../src/tokenizer/index.js";
import { generateSync } from "../../../src/engine/generate.js";
import { startServer } from "../../../src/server/server.js";
import { FusedGpuModel } from "../../../src/backend/webgpu/fused.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { gpuOrSkip } from "./helpers.js";

const BIN = join(import.meta.dirname, "..", "..", "..", "bin", "latent.mjs");
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

test("latent serve --backend webgpu (child process) takes the fused pipeline, answers like the CPU reference, exits 0 on SIGTERM", { skip }, async () => {
  const synth = synthModel(CASES[0]!, 8);
  const child = spawn(process.execPath, [BIN, "serve", synth.path, "--port", "0", "--alias", "tiny", "--backend", "webgpu", "--max-batch", "2", "--ctx-size", "64"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" },
  });
  let stderr = "";
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on("data", (d: Buffer) => {
        stderr += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(stderr);
        if (m !== null) resolve(m[1]!);
      });
      child.on("exit", () => reject(new Error(`server exited early:\n${stderr}`)));
    });
    assert.match(stderr, /fused WebGPU pipeline on /);
    assert.match(stderr, /context 64/);
    const loaded = loadModel(synth.path);
    const tok = Tokenizer.fromMetadata(loaded.file.metadata);
    const prompt = randomTokens(7, 91, 1, loaded.config.nVocab);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
    const r = await client.completions.create({ model: "tiny", prompt, max_tokens: 5, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(r.choices[0]!.text, generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: 5, ignoreEog: true }).text);
    child.kill("SIGTERM");
    assert.equal(await exited, 0);
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
    synth.cleanup();
  }
});
