// `latent doctor --endpoint` speaks each server's dialect: healthy fakes in vLLM, SGLang native, SGLang OpenAI and
// llama-server JSON shapes (numbers computed by latent on the demo model) pass with exit 0 and no warning.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { startFakeServer, type FakeDialect } from "./fake-server.js";

const DEMO = "models/latent-demo-kjv.gguf";
const { model, file } = loadModel(DEMO);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

const cases: { mode: FakeDialect; dialect: string; logprobMode: string }[] = [
  { mode: "vllm", dialect: "vllm", logprobMode: "prompt_logprobs" },
  { mode: "sglang", dialect: "sglang", logprobMode: "input_logprobs" },
  { mode: "sglang-openai", dialect: "echo", logprobMode: "echo" },
  { mode: "llama-server", dialect: "llama-server", logprobMode: "greedy" },
];

for (const c of cases) {
  test(`healthy ${c.mode} server: exit 0, no error or warning, decode path tested`, async () => {
    const s = await startFakeServer({ model, tokenizer, mode: c.mode });
    try {
      const r = await runDoctor({ model: DEMO, endpoint: s.url });
      assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
      assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
      const e = r.endpoint!;
      assert.equal(e.dialect, c.dialect);
      assert.equal(e.mode, c.logprobMode);
      assert.equal(e.verdict, "match");
      // three probes (1 token, a sentence, longer than a prefill chunk), 16 generated tokens each, compared
      assert.deepEqual(
        e.probes!.map((p) => p.generated.length),
        [16, 16, 16],
      );
      assert.equal(e.probes![0].promptTokens, 1);
      assert.ok(e.probes![2].promptTokens > 256);
      assert.equal(e.decode!.n, c.mode === "llama-server" ? 45 : 48); // the first generated token is prefill where no prompt log-probs exist
      assert.ok(
        e.decode!.meanKL < 1e-8 && e.prefill!.meanGap < 1e-4,
        JSON.stringify({ prefill: e.prefill, decode: e.decode }),
      );
      assert.ok(e.tokenization!.checked > 0 && e.tokenization!.mismatches === 0, JSON.stringify(e.tokenization));
      if (c.mode === "llama-server") {
        // the vLLM /tokenize body got {"tokens": []} and echo got HTTP 500: both tried, neither taken for an answer
        assert.equal(e.tokenization!.via, "tokenize");
        assert.ok(
          e.attempts!.some((a) => a.dialect === "echo" && /500/.test(a.error)),
          JSON.stringify(e.attempts),
        );
        assert.ok(s.requests.filter((q) => q === "POST /tokenize").length >= 6, JSON.stringify(s.requests));
      }
    } finally {
      await s.close();
    }
  });
}
