// Greedy sampling on the GPU: the argmax kernel against the CPU sampler's argmax (ties to the lowest id, NaN never
// chosen, odd widths) and the chosen token's logprob against a float64 log-softmax, and chained greedy decode (each
// step's argmax feeds the next step on the GPU) against the same steps taken one at a time with the logits read back
// and the next token (and its logprob) chosen by the host sampler.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { argmax, Sampler } from "../../../src/engine/sampler.js";
import { loadModel } from "../../../src/runtime/load.js";
import { GpuModel } from "../../../src/backend/webgpu/graph/gpu-model.js";
import { argmaxRows, argmaxScratchWords } from "../../../src/backend/webgpu/kernels/sample/sample.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { ATTN_CHUNK } from "../../../src/backend/webgpu/kernels/attention/attention.wgsl.js";
import { CASES, randomTokens, synthModel } from "../../helpers/synth.js";
import { assertLogprobsClose } from "../../helpers/greedy-chain.js";
import { logprobAt } from "../../helpers/logprobs.js";
import { gpuOrSkip, Rng } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({ checkWrites: true });
after(() => rt?.device.destroy());

test("argmax rows on the GPU = the CPU sampler's argmax, with its logprob (ties, NaN, negative rows, odd widths, strided rows)", {
  skip,
}, async () => {
  const r = rt!;
  const rng = new Rng(41);
  for (const [n, width, stride] of [
    [1, 1, 1],
    [3, 257, 257],
    [5, 1000, 1003],
    [2, 4097, 4099],
    [4, 8193, 8200],
    [2, 102400, 102400],
  ] as const) {
    const x = rng.f32(n * stride);
    // spread the values so that the logprobs are far from 0 and from each other (rng.f32 alone: a nearly flat row)
    for (let i = 0; i < x.length; i++) x[i] = x[i] * 8;
    if (width > 4) {
      // row 0: a tie between two ids (the lower must win); row 1: NaNs around the maximum; last row: all negative
      x[7] = x[width - 2] = 50;
      if (n > 1) {
        x[stride + 3] = Number.NaN;
        x[stride + 9] = 60;
        x[stride + width - 1] = Number.NaN;
      }
      for (let i = 0; i < width; i++) x[(n - 1) * stride + i] = -Math.abs(x[(n - 1) * stride + i]) - 1;
    }
    if (n > 3 && width > 4096) {
      // row 2: the maximum in the last slice, the whole first slice NaN, a clear winner (logprob near 0). The host
      // argmax would return the NaN at 0 (the sampler itself rejects NaN); the GPU never chooses NaN
      for (let i = 0; i < 4096; i++) x[2 * stride + i] = Number.NaN;
      x[2 * stride + width - 1] = 40;
    }
    const xb = r.upload(x, "x");
    const ids = r.buffer(n * 4, "ids");
    const lps = r.buffer(n * 4, "logprobs");
    const part = r.buffer(4 * argmaxScratchWords(n, width), "argmax slices");
    argmaxRows(r, xb, ids, part, { n, width, xStride: stride, logprobs: lps });
    const got = new Uint32Array(await r.read(ids, 0, n * 4));
    const gotLp = await r.readF32(lps, 0, n);
    for (let t = 0; t < n; t++) {
      const row = x.subarray(t * stride, t * stride + width);
      const id = Number.isNaN(row[0]) ? width - 1 : argmax(row);
      assert.equal(got[t], id, `n ${n} width ${width} row ${t}`);
      // a row the host sampler would refuse (a NaN here) has logprob NaN: the generation loop refuses it then
      if (row.some(Number.isNaN))
        assert.ok(
          Number.isNaN(gotLp[t]),
          `n ${n} width ${width} row ${t}: a row with NaN has logprob NaN, got ${gotLp[t]}`,
        );
      else {
        const want = logprobAt(row, id);
        assert.ok(Math.abs(gotLp[t] - want) <= 1e-5, `n ${n} width ${width} row ${t}: logprob ${gotLp[t]} vs ${want}`);
      }
      // where the row is all finite, the host sampler's own logprob
      if (row.every(Number.isFinite)) {
        const s = new Sampler({ temperature: 0 }).sample(row);
        assert.equal(s.token, id);
        assert.ok(
          Math.abs(gotLp[t] - s.logprob) <= 1e-5,
          `n ${n} width ${width} row ${t}: logprob ${gotLp[t]} vs the sampler's ${s.logprob}`,
        );
      }
    }
    // without the logprobs buffer: the same ids
    const ids2 = r.buffer(n * 4, "ids");
    argmaxRows(r, xb, ids2, part, { n, width, xStride: stride });
    assert.deepEqual(new Uint32Array(await r.read(ids2, 0, n * 4)), got, `n ${n} width ${width}: ids without logprobs`);
    for (const b of [xb, ids, ids2, lps, part]) b.destroy();
  }
});

test("argmax rows on the GPU: rows the host sampler refuses (only NaN, one NaN, +Infinity, all −Infinity) → logprob NaN; a flat row → −log(width)", {
  skip,
}, async () => {
  const r = rt!;
  for (const width of [5, 4097]) {
    const n = 5;
    const x = new Float32Array(n * width).fill(-3.5);
    x.fill(Number.NaN, 0, width); // row 0: only NaN → token 0
    x[width + width - 1] = Number.NaN; // row 1: one NaN, the rest flat → token 0 (NaN never chosen)
    x[2 * width + 2] = Number.POSITIVE_INFINITY; // row 2: +Infinity → its id
    x.fill(Number.NEGATIVE_INFINITY, 3 * width, 4 * width); // row 3: all −Infinity → token 0
    const xb = r.upload(x, "x"); // row 4: flat
    const ids = r.buffer(4 * n, "ids");
    const lps = r.buffer(4 * n, "logprobs");
    const part = r.buffer(4 * argmaxScratchWords(n, width), "argmax slices");
    argmaxRows(r, xb, ids, part, { n, width, logprobs: lps });
    assert.deepEqual([...new Uint32Array(await r.read(ids, 0, 4 * n))], [0, 0, 2, 0, 0], `width ${width}: ids`);
    const lp = await r.readF32(lps, 0, n);
    for (let t = 0; t < 4; t++)
      assert.ok(Number.isNaN(lp[t]), `width ${width} row ${t}: a row the host refuses has logprob NaN, got ${lp[t]}`);
    assert.ok(
      Math.abs(lp[4] + Math.log(width)) <= 1e-5,
      `width ${width}: a flat row has logprob −log(width), got ${lp[4]}`,
    );
    for (const b of [xb, ids, lps, part]) b.destroy();
  }
});

// the long prompt crosses a key chunk (ATTN_CHUNK) mid-chain, so a step of a new shape is recorded between replayed ones
const CHAIN_CASES: { replay: boolean; long?: boolean }[] = [
  { replay: false },
  { replay: true },
  { replay: true, long: true },
];
for (const { replay, long } of CHAIN_CASES) {
  const steps = long === true ? 10 : 6;
  test(`chained greedy decode on the GPU = one step at a time with the host sampler: ids and logprobs (batch 2, ${steps} steps${replay ? ", recorded steps replayed" : ", --check-writes"}${long === true ? `, across key chunk ${ATTN_CHUNK}` : ""})`, {
    skip,
  }, async () => {
    const c = CASES.find((k) => k.base === "tiny")!;
    const m = synthModel(c, 5);
    const r = replay ? new GpuRuntime(rt!.info, { submitEvery: 5 }) : rt!;
    try {
      const { model, config } = loadModel(m.path);
      const prompts = [
        randomTokens(long === true ? ATTN_CHUNK - 6 : 5, 1, 0, config.nVocab),
        randomTokens(3, 2, 0, config.nVocab),
      ];
      const context = long === true ? ATTN_CHUNK + 8 : 24;
      let chainSubmits = 0;
      // per sequence: the chosen ids and their logprobs
      const run = async (chained: boolean): Promise<{ ids: number[][]; lps: number[][] }> => {
        const g = new GpuModel(r, model, { slots: 2, context, maxTokens: long === true ? 64 : 4 });
        const firsts: number[] = [];
        for (let s = 0; s < 2; s++) firsts.push(argmax((await g.prefill(s, prompts[s]))[0]));
        const ids: number[][] = [[], []];
        const lps: number[][] = [[], []];
        if (chained) {
          const s0 = r.stats.submits;
          const hist = await g.decodeGreedy(
            prompts.map((p, s) => ({ token: firsts[s], slot: s, pos: p.length })),
            steps,
          );
          chainSubmits = r.stats.submits - s0;
          assert.equal(hist.tokens.length, 2 * steps);
          assert.equal(hist.logprobs.length, 2 * steps);
          for (let i = 0; i < steps; i++) {
            for (let s = 0; s < 2; s++) {
              ids[s].push(hist.tokens[i * 2 + s]);
              lps[s].push(hist.logprobs[i * 2 + s]);
            }
          }
        } else {
          const cur = [...firsts];
          for (let i = 0; i < steps; i++) {
            const logits = await g.step(
              cur.map((token, s) => ({ token, slot: s, pos: prompts[s].length + i, logits: true })),
            );
            for (let s = 0; s < 2; s++) {
              const res = new Sampler({ temperature: 0 }).sample(
                logits.subarray(s * config.nVocab, (s + 1) * config.nVocab),
              );
              cur[s] = res.token;
              ids[s].push(res.token);
              lps[s].push(res.logprob);
            }
          }
        }
        return { ids, lps };
      };
      const host = await run(false);
      const chained = await run(true);
      assert.deepEqual(chained.ids, host.ids);
      // a random model's greedy run should not be one repeated token (else the test could not tell steps apart)
      assert.ok(new Set(host.ids.flat()).size > 2, JSON.stringify(host.ids));
      // the logprobs computed on the GPU = the host sampler's for the same logits
      for (let s = 0; s < 2; s++) assertLogprobsClose(chained.lps[s], host.lps[s], `sequence ${s}`);
      // and not all alike (else a constant could pass)
      assert.ok(new Set(host.lps.flat().map((x) => x.toFixed(3))).size > 2, JSON.stringify(host.lps));
      // one submission a step (the next step's, or the read's, submits it): a replay adds none of its own
      if (replay && long !== true) assert.equal(chainSubmits, steps, `${chainSubmits} submissions`);
    } finally {
      m.cleanup();
    }
  });
}
