// `--backend webgpu` on the CLI: `latent logits --backend webgpu --full --json` equals the reference path (≤ 1e-3)
// on a kit model; `latent run --backend webgpu` generates the same greedy tokens; bad values are usage errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { logitsMain } from "../../../src/cli/logits.js";
import { runMain, backendOption, type CliIO } from "../../../src/cli/run.js";
import { isSoftwareAdapter } from "../../../src/runtime/load.js";
import { UsageError } from "../../../src/util/errors.js";
import { assertLogprobsClose } from "../../helpers/greedy-chain.js";
import { gpuOrSkip } from "./helpers.js";

const MODEL = join(import.meta.dirname, "../../fixtures/models/ds2-v3.gguf");
const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

async function capture(main: (argv: string[], io: CliIO) => Promise<void>, argv: string[]): Promise<string> {
  let out = "";
  await main(argv, { out: (t) => void (out += t), err: () => {}, tty: false });
  return out;
}

interface Rows {
  logprobs: (number | null)[][];
}

test("logits --backend webgpu --full equals --path reference on the reference kernels", { skip }, async () => {
  const tokens = "1,15,200,7,42,299,3,128";
  const ref = JSON.parse(
    await capture(logitsMain, [MODEL, "--tokens", tokens, "--full", "--json", "--path", "reference"]),
  ) as Rows;
  for (const path of ["reference", "prefill"]) {
    const gpu = JSON.parse(
      await capture(logitsMain, [MODEL, "--tokens", tokens, "--full", "--json", "--backend", "webgpu", "--path", path]),
    ) as Rows;
    assert.equal(gpu.logprobs.length, ref.logprobs.length);
    let worst = 0;
    gpu.logprobs.forEach((row, i) =>
      row.forEach((v, j) => (worst = Math.max(worst, Math.abs(v! - ref.logprobs[i]![j]!)))),
    );
    assert.ok(worst <= 1e-3, `${path}: worst |Δ logprob| ${worst}`);
  }
});

test("run --backend webgpu: greedy tokens (fused pipeline; WebGPUKernels on --path reference) equal the reference kernels'", {
  skip,
}, async () => {
  const args = [MODEL, "-p", "hello world", "-n", "6", "--temp", "0", "--json", "--seed", "1"];
  const ref = JSON.parse(await capture(runMain, args)) as { tokens: number[]; backend: string };
  const gpu = JSON.parse(await capture(runMain, [...args, "--backend", "webgpu"])) as {
    tokens: number[];
    backend: string;
  };
  assert.match(gpu.backend, /^fused-webgpu/, "run takes the fused pipeline on the cached paths");
  assert.deepEqual(gpu.tokens, ref.tokens);
  const perProduct = JSON.parse(await capture(runMain, [...args, "--backend", "webgpu", "--path", "reference"])) as {
    tokens: number[];
    backend: string;
  };
  assert.equal(perProduct.backend, "webgpu", "the reference path runs on WebGPUKernels");
  assert.deepEqual(perProduct.tokens, ref.tokens);
});

interface RunReport {
  tokens: number[];
  text: string;
  finish_reason: string;
  backend: string;
  decode: string;
  timings: { load_ms: number; compile_ms?: number; gpu_kernels_compiled?: number };
  logprobs: { id: number; logprob: number | null; top?: [number, number][] }[];
}

test("run --backend webgpu --temp 0 chains the greedy steps on the GPU: same text as --backend cpu; --logprobs stays on the host; sampling chains draws on the GPU", {
  skip,
}, async () => {
  const args = [MODEL, "-p", "hello world", "-n", "20", "--temp", "0", "--json", "--seed", "1", "--ignore-eos"];
  const cpu = JSON.parse(await capture(runMain, [...args, "--backend", "cpu"])) as RunReport;
  const gpu = JSON.parse(await capture(runMain, [...args, "--backend", "webgpu"])) as RunReport;
  assert.equal(cpu.decode, "host-sampling");
  assert.equal(gpu.decode, "gpu-greedy-chained");
  assert.match(gpu.backend, /^fused-webgpu/);
  // the run's kernels compiled while loading (counted in load_ms)
  assert.ok(
    gpu.timings.gpu_kernels_compiled! > 0 &&
      gpu.timings.compile_ms! > 0 &&
      gpu.timings.compile_ms! < gpu.timings.load_ms,
    JSON.stringify(gpu.timings),
  );
  assert.equal(cpu.timings.compile_ms, undefined);
  assert.equal(gpu.tokens.length, 20);
  assert.deepEqual(gpu.tokens, cpu.tokens);
  assert.equal(gpu.text, cpu.text);
  assert.equal(gpu.finish_reason, cpu.finish_reason);
  const withLogprobs = JSON.parse(
    await capture(runMain, [...args, "--backend", "webgpu", "--logprobs", "2"]),
  ) as RunReport;
  assert.equal(withLogprobs.decode, "host-sampling");
  assert.deepEqual(withLogprobs.tokens, cpu.tokens);
  assert.ok(withLogprobs.logprobs.every((e) => typeof e.logprob === "number" && e.top?.length === 2));
  // the first token is sampled from the prompt's logits on the host, the chained ones' logprobs come from the GPU:
  // all numbers, equal to the host sampler's over the same GPU logits (--logprobs 2) within 1e-4
  const num = (e: RunReport["logprobs"][number]): number => {
    assert.equal(typeof e.logprob, "number", JSON.stringify(gpu.logprobs));
    return e.logprob!;
  };
  assertLogprobsClose(
    gpu.logprobs.map(num),
    withLogprobs.logprobs.map(num),
    "run --json logprobs, chained vs host sampling",
  );
  // and within the CPU kernels' agreement of the CPU backend's
  gpu.logprobs.forEach((e, i) =>
    assert.ok(
      Math.abs(num(e) - num(cpu.logprobs[i])) <= 1e-3,
      `token ${i}: ${e.logprob} vs the CPU's ${cpu.logprobs[i].logprob}`,
    ),
  );
  // sampling at the CLI's defaults (temperature 0.8, top-k 40, top-p 0.95) chains draws on the GPU: the same seed gives
  // the same tokens; a top-k past 64 samples on the host
  const sampledArgs = [
    MODEL,
    "-p",
    "hello world",
    "-n",
    "8",
    "--temp",
    "0.8",
    "--json",
    "--seed",
    "1",
    "--backend",
    "webgpu",
    "--ignore-eos",
  ];
  const sampled = JSON.parse(await capture(runMain, sampledArgs)) as RunReport;
  assert.equal(sampled.decode, "gpu-draws-chained");
  // the fused pipeline's steps and its worker's host time, for telling a host-bound run from a GPU-bound one
  const host = sampled.timings as {
    gpu_steps?: number;
    gpu_dispatches?: number;
    gpu_host_encode_ms?: number;
    gpu_host_submit_ms?: number;
  };
  assert.ok(
    host.gpu_steps! >= 8 &&
      host.gpu_dispatches! > host.gpu_steps! &&
      host.gpu_host_encode_ms! > 0 &&
      host.gpu_host_submit_ms! >= 0,
    JSON.stringify(sampled.timings),
  );
  assert.equal((cpu.timings as { gpu_steps?: number }).gpu_steps, undefined);
  assert.equal(sampled.tokens.length, 8);
  assert.ok(
    sampled.logprobs.every((e) => typeof e.logprob === "number" && e.logprob <= 0),
    JSON.stringify(sampled.logprobs),
  );
  assert.deepEqual((JSON.parse(await capture(runMain, sampledArgs)) as RunReport).tokens, sampled.tokens);
  const wideTopK = JSON.parse(await capture(runMain, [...sampledArgs, "--top-k", "100"])) as RunReport;
  assert.equal(wideTopK.decode, "host-sampling");
  // top-p and min-p without top-k (OpenAI-style) are drawn on the GPU too
  const nucleus = JSON.parse(await capture(runMain, [...sampledArgs, "--top-k", "0"])) as RunReport;
  assert.equal(nucleus.decode, "gpu-draws-chained");
  assert.equal(nucleus.tokens.length, 8);
});

test("--backend values", () => {
  assert.equal(backendOption(undefined, "reference"), "reference");
  for (const b of ["cpu", "reference", "webgpu", "auto"]) assert.equal(backendOption(b, "reference"), b);
  assert.throws(() => backendOption("cuda", "reference"), UsageError);
  assert.ok(isSoftwareAdapter("mesa cpu llvmpipe (LLVM 19.1.7, 256 bits)"));
  assert.ok(!isSoftwareAdapter("nvidia hopper NVIDIA H200"));
});
