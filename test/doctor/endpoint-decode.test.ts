// Decode-path faults behind plausible servers on the demo model: generated tokens garbage while prompt log-probs are
// exact (a broken decode path), in the vLLM, llama-server and SGLang shapes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { withFaults } from "../../src/doctor/faults/faults.js";
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

for (const mode of ["vllm", "llama-server"] as const) {
  test(`${mode}: exact prompt log-probs, garbage generated tokens: decode path named, exit 1`, async () => {
    const r = await doctor({ mode, model: withFaults(model, { attnOutUnwritten: "decode" }) });
    assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
    const f = r.findings.find((x) => x.code === "decode-path-broken");
    assert.ok(f, JSON.stringify(r.findings));
    assert.equal(f.severity, "error");
    assert.match(f.message, /the server's decode path is broken, its prefill path is not/);
    assert.match(f.message, /attention output is never written/);
    assert.ok(!r.findings.some((x) => x.code === "logprobs-mismatch"), JSON.stringify(r.findings));
    assert.equal(r.endpoint!.verdict, "mismatch");
  });
}

test("SGLang native: exact input log-probs, every generated token garbage (the first too): decode path named", async () => {
  const r = await doctor({ mode: "sglang", garbageGenerated: true });
  assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
  const f = r.findings.find((x) => x.code === "decode-path-broken");
  assert.ok(f, JSON.stringify(r.findings));
  assert.match(f.message, /the server's decode path is broken, its prefill path is not/);
  assert.ok(!r.findings.some((x) => x.code === "logprobs-mismatch"), JSON.stringify(r.findings));
});
