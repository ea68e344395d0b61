// Greedy sampling on the GPU: the argmax kernel against the CPU sampler's argmax (ties to the lowest id, NaN never
// chosen, odd widths), and chained greedy decode (each step's argmax feeds the next step on the GPU) against the same
// steps taken one at a time with the logits read back and the next token chosen on the host.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { argmax } from "../../../src/engine/sampler.js";
import { loadModel } from "../../../src/model/load.js";
import { GpuModel } from "../../../src/backend/webgpu/gpu-model.js";
import { argmaxRows, argmaxScratchWords } from "../../../src/backend/webgpu/ops.js";
import { GpuRuntime } from "../../../src/backend/webgpu/runtime.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { gpuOrSkip, Rng } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({ checkWrites: true });
after(() => rt?.device.destroy());

test("argmax rows on the GPU = the CPU sampler's argmax (ties, NaN, negative rows, odd widths, strided rows)", { skip }, async () => {
  const r = rt!;
  const rng = new Rng(41);
  for (const [n, width, stride] of [
    [1, 1, 1],
    [3, 257, 257],
    [5, 1000, 1003],
    [2, 4097, 4099],
    [2, 102400, 102400],
  ] as const) {
    const x = rng.f32(n * stride);
    if (width > 4) {
      // row 0: a tie between two ids (the lower must win); row 1: NaNs around the maximum; last row: all negative
      x[7] = x[width - 2] = 50;
      if (n > 1) {
        x[stride + 3] = Number.NaN;
        x[stride + 9] = 60;
        x[stride + width - 1] = Number.NaN;
      }
      for (let i = 0; i < width; i++) x[(n - 1) * stride + i] = -Math.abs(x[(n - 1) * stride + i]!) - 1;
    }
    const xb = r.upload(x, "x");
    const ids = r.buffer(n * 4, "ids");
    const part = r.buffer(4 * argmaxScratchWords(n, width), "argmax slices");
    argmaxRows(r, xb, ids, part, { n, width, xStride: stride });
    const got = new Uint32Array(await r.read(ids, 0, n * 4));
    for (let t = 0; t < n; t++) assert.equal(got[t], argmax(x.subarray(t * stride, t * stride + width)), `n ${n} width ${width} row ${t}`);
    xb.destroy();
    ids.destroy();
    part.destroy();
  }
});

for (const replay of [false, true]) {
  test(`chained greedy decode on the GPU = one step at a time with host argmax (batch 2, 6 steps${replay ? ", recorded steps replayed" : ", --check-writes"})`, { skip }, async () => {
    const c = CASES.find((k) => k.base === "tiny")!;
    const m = synthModel(c, 5);
    const r = replay ? new GpuRuntime(rt!.info, { submitEvery: 5 }) : rt!;
    try {
      const { model, config } = loadModel(m.path);
      const prompts = [randomTokens(5, 1, 0, config.nVocab), randomTokens(3, 2, 0, config.nVocab)];
      const run = async (chained: boolean): Promise<number[][]> => {
        const g = new GpuModel(r, model, { slots: 2, context: 24, maxTokens: 4 });
        const firsts: number[] = [];
        for (let s = 0; s < 2; s++) firsts.push(argmax((await g.prefill(s, prompts[s]!))[0]!));
        const out: number[][] = [[], []];
        if (chained) {
          const hist = await g.decodeGreedy(prompts.map((p, s) => ({ token: firsts[s]!, slot: s, pos: p.length })), 6);
          for (let i = 0; i < 6; i++) for (let s = 0; s < 2; s++) out[s]!.push(hist[i * 2 + s]!);
        } else {
          const cur = [...firsts];
          for (let i = 0; i < 6; i++) {
            const logits = await g.step(cur.map((token, s) => ({ token, slot: s, pos: prompts[s]!.length + i, logits: true })));
            for (let s = 0; s < 2; s++) {
              cur[s] = argmax(logits.subarray(s * config.nVocab, (s + 1) * config.nVocab));
              out[s]!.push(cur[s]!);
            }
          }
        }
        return out;
      };
      const host = await run(false);
      const chained = await run(true);
      assert.deepEqual(chained, host);
      // a random model's greedy run should not be one repeated token (else the test could not tell steps apart)
      assert.ok(new Set(host.flat()).size > 2, JSON.stringify(host));
    } finally {
      m.cleanup();
    }
  });
}
