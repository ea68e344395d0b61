// The library's WebGPU session (LatentModel.webgpu, what the page's GPU path runs): the library's device with its
// subgroup size, logits as the CPU's, and generation through the engine's loop — greedy chained on the GPU with the
// CPU's tokens, sampling on the host. Skipped without a WebGPU adapter (LATENT_REQUIRE_GPU=1 makes that a failure).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { load, type LatentModel, type WebGpuSession } from "../../src/index.js";
import { requestGpuDevice } from "../../src/backend/webgpu/index.js";
import { synthModel } from "../helpers/synth.js";

process.env.XDG_RUNTIME_DIR ??= "/tmp";

const tiny = synthModel({ label: "lib-webgpu", base: "tiny", over: {} }, 3);
const m: LatentModel = await load(tiny.path);
let session: WebGpuSession | undefined;
let skip: string | false = false;
try {
  session = await m.webgpu({ context: 48 });
} catch (e) {
  if (process.env.LATENT_REQUIRE_GPU === "1") throw e;
  skip = `no WebGPU adapter (${(e as Error).message})`;
}
after(() => {
  session?.close();
  m.close();
  tiny.cleanup();
});

test("the session's device is the library's: the adapter's fixed subgroup size reaches the kernels", {
  skip,
}, async () => {
  const info = await requestGpuDevice();
  info.device.destroy();
  assert.equal(session!.subgroupSize, info.subgroupSize);
  assert.equal(session!.adapter, info.adapterInfo);
  assert.equal(session!.context, 48);
});

test("logits after every position are the CPU's (≤ 1e-3)", { skip }, async () => {
  const tokens = [1, 7, 19, 3, 42, 11, 5];
  const got = await session!.logitsAll(tokens);
  const want = m.logitsAll(tokens, "reference");
  assert.equal(got.length, tokens.length);
  let d = 0;
  got.forEach((row, i) => row.forEach((v, j) => (d = Math.max(d, Math.abs(v - want[i][j])))));
  assert.ok(d <= 1e-3, `max |Δ logit| ${d}`);
});

test("greedy generation chains on the GPU and gives the CPU's tokens and text; sampling reads the logits back", {
  skip,
}, async () => {
  const prompt = [1, 7, 19, 3];
  const cpu = await m.generate(prompt, { temperature: 0, maxTokens: 12, ignoreEog: true });
  const events: number[] = [];
  const gpu = await session!.generate(prompt, {
    temperature: 0,
    maxTokens: 12,
    ignoreEog: true,
    onToken: (e) => events.push(e.id),
  });
  assert.equal(gpu.decode, "greedy-chained");
  assert.deepEqual(gpu.tokens, cpu.tokens);
  assert.deepEqual(events, cpu.tokens);
  assert.equal(gpu.text, cpu.text);
  gpu.logprobs.forEach((lp, i) =>
    assert.ok(Math.abs(lp - cpu.logprobs[i]) <= 1e-3, `logprob ${i}: ${lp} vs ${cpu.logprobs[i]}`),
  );
  // the cache is the session's: a second run from position 0 gives the same again
  const again = await session!.generate(prompt, { temperature: 0, maxTokens: 12, ignoreEog: true });
  assert.deepEqual(again.tokens, cpu.tokens);

  // one stream at a time: a second while the first runs is refused; the first goes on
  const first = session!.stream(prompt, { temperature: 0, maxTokens: 3, ignoreEog: true });
  assert.equal((await first.next()).done, false);
  await assert.rejects(session!.generate(prompt, { maxTokens: 1 }), /one sequence at a time/);
  let rest = await first.next();
  while (rest.done !== true) rest = await first.next();
  assert.deepEqual(rest.value.tokens, cpu.tokens.slice(0, 3));

  const sampled = await session!.generate(prompt, { temperature: 0.8, seed: 5, maxTokens: 6, ignoreEog: true });
  assert.equal(sampled.decode, "host-sampling");
  assert.equal(sampled.tokens.length, 6);
  // the context bounds the sequence: prompt + generated tokens stop at 48
  const long = await session!.generate(prompt, { temperature: 0, ignoreEog: true });
  assert.equal(long.finishReason, "length");
  assert.equal(prompt.length + long.tokens.length, 48);
});

test("a GPU memory budget: one too small for the model is refused naming both numbers; one that holds it all changes nothing", {
  skip,
}, async () => {
  await assert.rejects(m.webgpu({ context: 48, gpuMemory: 1000 }), /is below what must stay on the GPU/);
  const roomy = await m.webgpu({ context: 48, gpuMemory: 2 ** 40 });
  try {
    const prompt = [1, 7, 19, 3];
    const want = await session!.generate(prompt, { temperature: 0, maxTokens: 6, ignoreEog: true });
    const got = await roomy.generate(prompt, { temperature: 0, maxTokens: 6, ignoreEog: true });
    assert.deepEqual(got.tokens, want.tokens);
  } finally {
    roomy.close();
  }
});
