// GpuModel.warm: the kernels of the step shapes it names are compiled before the first step, from a dry run over one
// layer of each kind. Steps of those shapes — prefill chunks, decode batches up to the size named (past one key chunk
// too), chained greedy steps — then compile nothing more, and give the same logits, bit for bit, as a model that was
// not warmed. Models with layers of several kinds (Q4_K_M's mixed types, dense and MoE layers, DSA).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../../src/runtime/load.js";
import { GpuModel, type StepToken } from "../../../src/backend/webgpu/graph/gpu-model.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { LatentError } from "../../../src/util/errors.js";
import { CASES, randomTokens, synthModel, type SynthCase } from "../../helpers/synth.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({});
after(() => rt?.device.destroy());

const cases: SynthCase[] = [
  { label: "tiny-v3-q4km", base: "tiny", over: { n_layer: 4, n_dense: 1 }, type: "Q4_K_M" },
  { ...CASES.find((c) => c.label === "glm-dsa-top16")!, type: "Q8_0" },
];
const CONTEXT = 300; // past one key chunk (256)

/** Prefill chunks of 5 and 2 tokens, decode steps of 1..3 tokens at 5..299 keys, then 4 chained greedy steps of 2. */
async function drive(g: GpuModel, V: number): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  const prompt = randomTokens(7, 3, 0, V);
  const tok = (i: number, slot: number, pos: number, logits: boolean): StepToken => ({
    token: prompt[i % 7],
    slot,
    pos,
    logits,
  });
  out.push(await g.step(Array.from({ length: 5 }, (_, i) => tok(i, 0, i, i === 4))));
  out.push(await g.step(Array.from({ length: 2 }, (_, i) => tok(i, 1, i, i === 1))));
  for (const [n, pos] of [
    [1, 5],
    [2, 6],
    [3, 7],
    [3, 280],
    [1, 299],
  ] as const)
    out.push(await g.step(Array.from({ length: n }, (_, s) => tok(s, s, pos, true))));
  const { tokens, logprobs } = await g.decodeGreedy(
    [0, 1].map((slot) => ({ token: 3, slot, pos: 8 })),
    4,
  );
  out.push(new Float32Array(tokens.buffer), logprobs);
  return out;
}

for (const c of cases) {
  test(`${c.label}: warm({ decode: 3, greedy, prefill: [5, 2] }) compiles every kernel those steps use; their logits equal an unwarmed model's`, {
    skip,
  }, async () => {
    const m = synthModel(c, 4);
    try {
      const { model, config } = loadModel(m.path);
      const warmRt = new GpuRuntime(rt!.info, {});
      const warm = new GpuModel(warmRt, model, { slots: 3, context: CONTEXT, maxTokens: 5 });
      const seen: number[] = [];
      const kernels = await warm.warm({ decode: 3, greedy: true, prefill: [5, 2] }, (done, total) =>
        seen.push(done / total),
      );
      assert.equal(warmRt.stats.dispatches, 0, "warm runs nothing on the GPU");
      assert.ok(
        kernels > 0 && warmRt.pipelineCount === kernels,
        `${kernels} kernels, ${warmRt.pipelineCount} compiled`,
      );
      assert.equal(seen.length, kernels);
      assert.equal(Math.max(...seen), 1);
      const got = await drive(warm, config.nVocab);
      assert.equal(warmRt.pipelineCount, kernels, "the steps compiled no kernel of their own");

      const coldRt = new GpuRuntime(rt!.info, {});
      const want = await drive(
        new GpuModel(coldRt, model, { slots: 3, context: CONTEXT, maxTokens: 5 }),
        config.nVocab,
      );
      // warm's shapes are a superset of these steps' (prefill n = 1, decode at exactly 257 keys), not many more
      assert.ok(
        coldRt.pipelineCount <= kernels && coldRt.pipelineCount >= kernels - 4,
        `${coldRt.pipelineCount} kernels used, ${kernels} compiled`,
      );
      got.forEach((g, i) => assert.deepEqual(Array.from(g), Array.from(want[i]), `step ${i}`));
      await assert.rejects(warm.warm({ prefill: [6] }), LatentError);
    } finally {
      m.cleanup();
    }
  });
}
