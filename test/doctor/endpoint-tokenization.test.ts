// Tokenization parity through the text path: servers without /tokenize whose text path drops the BOS (their
// token-id prompts are fine, so the log-probs alone look healthy) are caught by sending text and reading back the
// tokens the server used — echoed tokens (vLLM), SGLang's input_token_logprobs, or only usage.prompt_tokens.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { startFakeServer, type FakeDialect } from "./fake-server.js";

const DEMO = "models/latent-demo-kjv.gguf";
const { model, file } = loadModel(DEMO);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

const cases: { mode: FakeDialect; via: string; message: RegExp; noEcho?: boolean }[] = [
  { mode: "vllm", via: "text", message: /omits the BOS/ },
  { mode: "vllm", via: "count", message: /one fewer.*BOS/, noEcho: true },
  { mode: "sglang", via: "text", message: /omits the BOS/ },
  { mode: "greedy", via: "count", message: /one fewer.*BOS/ },
];

for (const c of cases) {
  test(`${c.mode}${c.noEcho === true ? " without echo" : ""} without /tokenize, text path drops BOS: tokenization error (${c.via}), exit 1`, async () => {
    const s = await startFakeServer({
      model,
      tokenizer,
      mode: c.mode,
      noTokenize: true,
      textDropsBos: true,
      ...(c.noEcho === true ? { noEcho: true } : {}),
    });
    try {
      const r = await runDoctor({ model: DEMO, endpoint: s.url });
      assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
      const f = r.findings.find((x) => x.code === "tokenization");
      assert.ok(f, JSON.stringify(r.findings));
      assert.equal(f.severity, "error");
      assert.match(f.message, c.message);
      assert.equal(r.endpoint!.tokenization!.via, c.via);
      assert.equal(r.endpoint!.tokenization!.mismatches, r.endpoint!.tokenization!.checked);
      // the token-id path is healthy: only the tokenization is blamed
      assert.equal(r.endpoint!.verdict, "match");
    } finally {
      await s.close();
    }
  });
}

test("llama-server whose /tokenize ignores add_special (no BOS) while completions add it: healthy, exit 0", async () => {
  const s = await startFakeServer({ model, tokenizer, mode: "llama-server", tokenizeNoBos: true });
  try {
    const r = await runDoctor({ model: DEMO, endpoint: s.url });
    assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
    assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
    assert.ok(
      r.findings.some((f) => f.code === "tokenize-route-no-bos"),
      JSON.stringify(r.findings),
    );
    assert.equal(r.endpoint!.tokenization!.mismatches, 0);
  } finally {
    await s.close();
  }
});
