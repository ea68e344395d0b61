// A batch of sequences (decodes mixed with prefill chunks, different positions) computes exactly what each
// sequence computes alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LatentCache } from "../../src/model/cache.js";
import { loadModel } from "../../src/runtime/load.js";
import { maxAbsDiff } from "../helpers/logprobs.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";

for (const c of [CASES[0], CASES.find((x) => x.base === "tiny-glm")!]) {
  test(`${c.label}: batched steps equal single-sequence steps`, () => {
    const m = synthModel(c, 17);
    try {
      const { model, config } = loadModel(m.path);
      const prompts = [
        randomTokens(23, 1, 0, config.nVocab),
        randomTokens(5, 2, 0, config.nVocab),
        randomTokens(1, 3, 0, config.nVocab),
      ];
      // alone: prefill each prompt fully, then decode 3 tokens
      const alone = prompts.map((p) => {
        const cache = new LatentCache(config);
        const rows = [model.forward(p, cache, { path: "prefill", logits: "all" })];
        for (let i = 0; i < 3; i++)
          rows.push(model.forward([(p[i] ?? 7) % config.nVocab], cache, { path: "decode", logits: "all" }));
        return rows;
      });
      // batched: seq 0 prefills in chunks of 8 while seqs 1 and 2 (short prompts) prefill then decode
      const caches = prompts.map(() => new LatentCache(config));
      const got: Float32Array[][] = prompts.map(() => []);
      const pending = prompts.map((p) => [...p]);
      const decodes = prompts.map((p) => [0, 1, 2].map((i) => (p[i] ?? 7) % config.nVocab));
      const chunk: Float32Array[] = prompts.map(() => new Float32Array(0));
      while (pending.some((p) => p.length > 0) || decodes.some((d) => d.length > 0)) {
        const items: { si: number; tokens: number[]; path: "prefill" | "decode" }[] = [];
        pending.forEach((p, si) => {
          if (p.length > 0) items.push({ si, tokens: p.splice(0, 8), path: "prefill" });
          else if (decodes[si].length > 0) items.push({ si, tokens: [decodes[si].shift()!], path: "decode" });
        });
        const outs = model.forwardBatch(
          items.map((it) => ({ tokens: it.tokens, cache: caches[it.si], path: it.path, logits: "all" as const })),
        );
        items.forEach((it, i) => {
          if (it.path === "prefill") {
            const prev = chunk[it.si];
            const joined = new Float32Array(prev.length + outs[i].length);
            joined.set(prev);
            joined.set(outs[i], prev.length);
            chunk[it.si] = joined;
            if (pending[it.si].length === 0) got[it.si].push(joined);
          } else got[it.si].push(outs[i]);
        });
      }
      prompts.forEach((_, si) => {
        assert.equal(got[si].length, alone[si].length);
        assert.ok(maxAbsDiff(got[si], alone[si]) <= 1e-9, `sequence ${si}`);
      });
    } finally {
      m.cleanup();
    }
  });
}
