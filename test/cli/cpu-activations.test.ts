// `--cpu-activations` on run and logits: "exact" is the default path (same logprobs as without the flag), "q8" runs the
// 8-bit-activation kernels (different logprobs, the backend named "… q8"), anything else is a UsageError; `--gpu-activations`
// is refused with a bad value or a backend without a GPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { logitsMain } from "../../src/cli/logits.js";
import { runMain } from "../../src/cli/run.js";
import { relaxedSimdAvailable } from "../../src/backend/cpu/fast.js";
import { UsageError } from "../../src/util/errors.js";
import { fixture } from "../gguf/helpers.js";
import { captureCli } from "../helpers/cli.js";

const M = fixture("ds2-v3-mixed-q");
// q8's kernels are WebAssembly's: where the native kernels run, the backend falls back to exact (test/backend/native.test.ts)
process.env.LATENT_CPU_KERNELS = "wasm";

test("run --cpu-activations: exact equals the default, q8 differs and says so in the summary", {
  skip: relaxedSimdAvailable() ? false : "this V8 has no relaxed SIMD",
}, async () => {
  const argv = [M, "-p", "hello world", "-n", "6", "--temp", "0", "--ignore-eos", "--json", "--backend", "cpu"];
  const dflt = await captureCli(runMain, argv);
  const exact = await captureCli(runMain, [...argv, "--cpu-activations", "exact"]);
  const q8 = await captureCli(runMain, [...argv, "--cpu-activations", "q8"]);
  const lp = (s: string): unknown => (JSON.parse(s) as { logprobs: unknown }).logprobs;
  assert.deepEqual(lp(exact.out), lp(dflt.out));
  assert.notDeepEqual(lp(q8.out), lp(dflt.out));
  assert.match(q8.out, /wasm-simd×\d+ q8/);
});

test("--cpu-activations with another value is a usage error", async () => {
  await assert.rejects(captureCli(runMain, [M, "-p", "hi", "--cpu-activations", "q4"]), UsageError);
  await assert.rejects(captureCli(logitsMain, [M, "--prompt", "hi", "--cpu-activations", "int8"]), UsageError);
});

test("--gpu-activations: another value, or a backend without a GPU, is a usage error", async () => {
  await assert.rejects(
    captureCli(runMain, [M, "-p", "hi", "--backend", "webgpu", "--gpu-activations", "q4"]),
    /int15.*q8/,
  );
  await assert.rejects(
    captureCli(runMain, [M, "-p", "hi", "--backend", "cpu", "--gpu-activations", "q8"]),
    (e: unknown) => e instanceof UsageError && /needs --backend webgpu or auto/.test(e.message),
  );
  await assert.rejects(
    captureCli(logitsMain, [M, "--prompt", "hi", "--gpu-activations", "q8"]),
    (e: unknown) => e instanceof UsageError && /not reference/.test(e.message),
  );
});
