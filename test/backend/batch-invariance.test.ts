// The fast CPU kernels give every token the same result whatever else shares the call (batch size, tile position,
// fused single-token or unpacked multi-token kernel), so the server's batched steps equal each request alone exactly.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { LatentCache } from "../../src/model/cache.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { loadModel } from "../../src/runtime/load.js";
import { fillRandom, Rng } from "../../src/synth/random-blocks.js";
import { rowBytes } from "../../src/quant/index.js";

const backend = new CpuBackend({ threads: 2 });
after(() => backend.close());

const TYPES = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.Q4_0,
  GGMLType.Q5_0,
  GGMLType.Q8_0,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
];

for (const type of TYPES) {
  // 32-value block types also with a column count whose block count is no multiple of 4 (the fused single-token
  // dots take blocks four at a time, then one at a time)
  const kQuant = [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.IQ4_XS].includes(type);
  for (const cols of kQuant ? [512, 768] : [512, 608]) {
    test(`${typeName(type)} × ${cols} columns: products are identical for n = 1 … 9 and every split of the batch`, () => {
      const rng = new Rng(11, `batch-${type}-${cols}`);
      const rows = 37;
      const data = new Uint8Array(rowBytes(type, cols) * rows);
      fillRandom(type, data, rows * cols, 0.5, rng);
      const w = new QMatrix("w", type, cols, rows, data);
      const N = 9;
      const x = new Float64Array(N * cols);
      for (let i = 0; i < x.length; i++) x[i] = (rng.uniform() - 0.5) * (1 + (i % 17));
      const all = new Float64Array(N * rows);
      backend.matmul(w, x, N, cols, all, rows);
      for (let n = 1; n <= 5; n++) {
        for (let t0 = 0; t0 + n <= N; t0 += n) {
          const y = new Float64Array(n * rows);
          backend.matmul(w, x.subarray(t0 * cols), n, cols, y, rows);
          assert.deepEqual(y, all.subarray(t0 * rows, (t0 + n) * rows), `n = ${n}, tokens ${t0}..`);
        }
      }
    });
  }
}

test("quantized model on the cpu backend: a batch of sequences equals each sequence alone, bit for bit", () => {
  const path = new URL("../fixtures/models/ds2-v3-mixed-q.gguf", import.meta.url).pathname;
  const { model, config } = loadModel(path, undefined, { backend: "cpu", threads: 2 });
  const prompts = Array.from({ length: 7 }, (_, s) =>
    Array.from({ length: 3 + s }, (_, i) => (i * 31 + s * 7) % config.nVocab),
  );
  const alone = prompts.map((p) => model.forward(p, new LatentCache(config), { path: "prefill", logits: "last" }));
  const caches = prompts.map(() => new LatentCache(config));
  const batched = model.forwardBatch(
    prompts.map((p, i) => ({ tokens: p, cache: caches[i], path: "prefill" as const, logits: "last" as const })),
  );
  batched.forEach((b, i) => assert.deepEqual(b, alone[i], `sequence ${i}`));
  // and a decode step of all of them together
  const next = model.forwardBatch(
    prompts.map((_, i) => ({ tokens: [5 + i], cache: caches[i], path: "decode" as const, logits: "last" as const })),
  );
  prompts.forEach((p, i) => {
    const c = new LatentCache(config);
    model.forward(p, c, { path: "prefill", logits: "last" });
    assert.deepEqual(next[i], model.forward([5 + i], c, { path: "decode", logits: "last" }), `decode ${i}`);
  });
});
