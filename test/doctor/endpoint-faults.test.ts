// Same GGUF, other faults (demo model): attn_k_b / attn_v_b swapped and prompt_logprobs off by one are errors with the
// cause named; a correct server computing in bf16 (activations and logits rounded) stays healthy.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { withFaults } from "../../src/doctor/faults/faults.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { startFakeServer, type FakeServerOptions } from "./fake-server.js";

const DEMO = "models/latent-demo-kjv.gguf";
const { model, file } = loadModel(DEMO);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

async function doctor(opts: Partial<FakeServerOptions> & Pick<FakeServerOptions, "mode">) {
  const s = await startFakeServer({ model, tokenizer, ...opts });
  try {
    return await runDoctor({ model: DEMO, endpoint: s.url });
  } finally {
    await s.close();
  }
}

async function mismatch(opts: Partial<FakeServerOptions> & Pick<FakeServerOptions, "mode">, cause: RegExp) {
  const r = await doctor(opts);
  assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
  const f = r.findings.find((x) => x.code === "logprobs-mismatch");
  assert.ok(f, JSON.stringify(r.findings));
  assert.equal(f.severity, "error");
  assert.match(f.message, cause);
  assert.equal(r.endpoint!.verdict, "mismatch");
}

test("a correct bf16 server (activations and logits rounded through bf16, vLLM): healthy, exit 0, no warning", async () => {
  const r = await doctor({ mode: "vllm", bf16: true });
  assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
  assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
  assert.equal(r.endpoint!.verdict, "close");
  // really noisy: well above float32 agreement, inside the tolerance
  assert.ok(r.endpoint!.prefill!.meanKL > 1e-6, JSON.stringify(r.endpoint!.prefill));
});

test("attn_k_b / attn_v_b swapped (echo): error, swap named", async () => {
  // the server runs the model code's own swap hook on its prefill/decode paths; the matcher simulates the swap by
  // exchanging the weight objects on the reference path
  await mismatch({ mode: "echo", model: withFaults(model, { swapKvB: true }) }, /attn_k_b and attn_v_b swapped/);
});

test("prompt_logprobs off by one position (vLLM): error, off-by-one named", async () => {
  await mismatch({ mode: "vllm", offByOne: true }, /off by one/);
});
