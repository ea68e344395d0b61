// Log-prob shapes that are no model's distribution, on the demo model: flat log-probs with only the actual token in
// each prompt_logprobs entry are not called healthy (the actual token's gap, the missing alternatives and the
// flatness are each findings).
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { startFakeServer } from "./fake-server.js";

const DEMO = "models/latent-demo-kjv.gguf";
const { model, file } = loadModel(DEMO);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

test("flat log-probs with only the actual token in each prompt_logprobs entry: not called healthy", async () => {
  const s = await startFakeServer({ model, tokenizer, mode: "vllm", logitScale: 0.05, onlyActual: true });
  let r: Awaited<ReturnType<typeof runDoctor>>;
  try {
    r = await runDoctor({ model: DEMO, endpoint: s.url });
  } finally {
    await s.close();
  }
  assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
  const codes = r.findings.filter((x) => x.severity === "error").map((x) => x.code);
  for (const code of ["logprobs-flat", "logprobs-incomplete", "logprobs-mismatch"])
    assert.ok(codes.includes(code), JSON.stringify(r.findings));
  assert.ok(r.endpoint!.prefill!.meanGap > 1, JSON.stringify(r.endpoint!.prefill));
});
