// Servers off by a little on the same GGUF (demo model): log-probs of 0.9 × logits, a wrong RoPE base, one expert
// zeroed. Each is an error beyond the same-weights tolerance, with the cause named by the known-fault matcher.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { withExpertZeroed, withRopeBase } from "../../src/doctor/endpoint/variants.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { startFakeServer, type FakeServerOptions } from "./fake-server.js";

const DEMO = "models/latent-demo-kjv.gguf";
const { model, file } = loadModel(DEMO);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

async function mismatch(opts: Partial<FakeServerOptions> & Pick<FakeServerOptions, "mode">, cause: RegExp) {
  const s = await startFakeServer({ model, tokenizer, ...opts });
  try {
    const r = await runDoctor({ model: DEMO, endpoint: s.url });
    assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
    const f = r.findings.find((x) => x.code === "logprobs-mismatch");
    assert.ok(f, JSON.stringify(r.findings));
    assert.equal(f.severity, "error");
    assert.match(f.message, cause);
    assert.equal(r.endpoint!.verdict, "mismatch");
    return r;
  } finally {
    await s.close();
  }
}

test("log-probs of 0.9 × logits (SGLang native): error, temperature named", async () => {
  const r = await mismatch({ mode: "sglang", logitScale: 0.9 }, /logits multiplied by 0\.9\d\d/);
  const scale = r.findings.find((x) => x.code === "logprobs-mismatch")!.evidence!.fittedScale as number;
  assert.ok(Math.abs(scale - 0.9) < 0.01, String(scale));
});

test("wrong RoPE base off the candidate grid (vLLM): error, fitted base named", async () => {
  await mismatch(
    { mode: "vllm", model: withRopeBase(model, 40_000) },
    /RoPE base ≈ 40000 \(fitted\) instead of the file.s 10000/,
  );
});

test("one expert zeroed (vLLM): error, expert and layer named", async () => {
  await mismatch({ mode: "vllm", model: withExpertZeroed(model, 5, 3) }, /expert 5 of layer 3 zeroed/);
});
