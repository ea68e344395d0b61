// `latent doctor --endpoint` against latent's own server (`latent serve`): a healthy deployment passes with the
// teacher-forced prompt_logprobs comparison, and a server whose model has a different weight file is caught.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { startServer } from "../../src/server/server.js";
import { synthModel } from "../helpers/synth.js";

const m = synthModel({ label: "doc-serve", base: "tiny", over: {} }, 31);
const other = synthModel({ label: "doc-serve-other", base: "tiny", over: {} }, 32);
after(() => {
  m.cleanup();
  other.cleanup();
});

test("healthy latent serve: match, exit 0, no warnings", async () => {
  const server = await startServer({ modelPath: m.path, port: 0, apiKey: "k" });
  try {
    const r = await runDoctor({ model: m.path, endpoint: `${server.url}/v1`, apiKey: "k" });
    assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
    assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
    assert.equal(r.endpoint!.verdict, "match");
    assert.equal(r.endpoint!.mode, "prompt_logprobs");
    assert.equal(r.endpoint!.top1Agreement, 1);
    assert.ok(r.endpoint!.meanKL < 1e-6, String(r.endpoint!.meanKL));
  } finally {
    await server.close();
  }
});

test("latent serve running other weights than the GGUF given to the doctor: mismatch, exit 1", async () => {
  const server = await startServer({ modelPath: other.path, port: 0 });
  try {
    const r = await runDoctor({ model: m.path, endpoint: `${server.url}/v1` });
    assert.equal(r.exitCode, 1);
    assert.equal(r.endpoint!.verdict, "mismatch");
    assert.ok(r.findings.some((f) => f.code === "logprobs-mismatch"));
  } finally {
    await server.close();
  }
});
