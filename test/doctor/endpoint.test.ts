// Endpoint checks against a fake OpenAI-compatible server computing with latent: a healthy server passes in every
// log-prob mode; plausible but wrong log-probs are caught with the cause named.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { withFaults } from "../../src/doctor/faults/faults.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { synthModel } from "../helpers/synth.js";
import { startFakeServer, type FakeServerOptions } from "./fake-server.js";

const m = synthModel({ label: "doc-endpoint", base: "tiny", over: {} }, 21);
after(m.cleanup);
const { model, file } = loadModel(m.path);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

async function check(opts: Partial<FakeServerOptions>, apiKey?: string) {
  const s = await startFakeServer({ model, tokenizer, mode: "vllm", ...opts });
  try {
    return await runDoctor({ model: m.path, endpoint: s.url, ...(apiKey ? { apiKey } : {}) });
  } finally {
    await s.close();
  }
}

for (const mode of ["vllm", "echo", "greedy"] as const) {
  test(`healthy server (${mode}): match, exit 0, no false alarm`, async () => {
    const r = await check({ mode, apiKey: "sekret" }, "sekret");
    assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
    assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
    assert.equal(r.endpoint!.mode, mode === "vllm" ? "prompt_logprobs" : mode);
    assert.equal(r.endpoint!.verdict, "match");
    assert.ok(r.endpoint!.meanKL < 1e-6);
    assert.equal(r.endpoint!.top1Agreement, 1);
    assert.deepEqual(r.endpoint!.tokenization, { checked: 3, mismatches: 0, via: "tokenize" });
  });
}

test("plausible but wrong log-probs (NeoX rope on the server): mismatch, cause named", async () => {
  const r = await check({ model: withFaults(model, { neoxRope: true }) });
  assert.equal(r.exitCode, 1);
  const f = r.findings.find((x) => x.code === "logprobs-mismatch");
  assert.ok(f, JSON.stringify(r.findings));
  assert.match(f.message, /NeoX/);
});

test("plausible but wrong log-probs (softmax gating on the server): cause named", async () => {
  const r = await check({ model: withFaults(model, { softmaxGating: true }), mode: "echo" });
  assert.equal(r.exitCode, 1);
  assert.match(r.findings.find((x) => x.code === "logprobs-mismatch")!.message, /softmax router gating/);
});

test("log-probs shifted by one position: off-by-one named", async () => {
  const r = await check({ offByOne: true });
  assert.equal(r.exitCode, 1);
  assert.match(r.findings.find((x) => x.code === "logprobs-mismatch")!.message, /off by one/);
});

test("a different model behind the endpoint: mismatch with evidence", async () => {
  const other = synthModel({ label: "doc-other", base: "tiny", over: {} }, 99);
  try {
    const r = await check({ model: loadModel(other.path).model });
    assert.equal(r.exitCode, 1);
    const f = r.findings.find((x) => x.code === "logprobs-mismatch")!;
    assert.ok((f.evidence!.meanKL as number) > 1e-2);
    assert.equal(r.endpoint!.verdict, "mismatch");
  } finally {
    other.cleanup();
  }
});

test("tokenizer that adds BOS twice: tokenization parity fails", async () => {
  const r = await check({ doubleBos: true });
  assert.equal(r.exitCode, 1);
  assert.match(r.findings.find((x) => x.code === "tokenization")!.message, /BOS/);
});

test("unreachable endpoint: could not run, exit 2", async () => {
  const r = await runDoctor({ model: m.path, endpoint: "http://127.0.0.1:9/v1" });
  assert.equal(r.exitCode, 2);
  assert.equal(r.verdict, "could-not-run");
});
