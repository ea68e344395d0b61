// The fused WebGPU pipeline (one submission per step, latent caches on the GPU): chunked prefill, then batched decode
// of two sequences at once, against the CPU reference path's log-probabilities (≤ 1e-3); MoE layers of small steps
// route in a dispatch of their own (moeRoute).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { logSoftmaxRow } from "../../../src/engine/evaluate.js";
import { loadModel } from "../../../src/runtime/load.js";
import { GpuModel } from "../../../src/backend/webgpu/graph/gpu-model.js";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { logprobRows, maxAbsDiff } from "../../helpers/logprobs.js";
import { CASES, randomTokens, synthModel, type SynthCase } from "../../helpers/synth.js";
import { gpuOrSkip, record, sweepSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({ checkWrites: true });
// without --check-writes steps are recorded once per shape and replayed (here in submissions of 7 dispatches)
const plain = rt === undefined ? undefined : new GpuRuntime(rt.info, { submitEvery: 7 });
// the wide decode attention (by default only past 256 keys) at every key count
const wideAttn = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { attn: 1 } });
// expert-major products from expert lists at small batches too (by default only from pairs ≥ 8 × experts where the
// wide kernel reads the experts)
const listed =
  rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { expertsFrom: 0.25 } });
// the RMSNorms (and the MoE combine into the residual) as dispatches of their own in small steps, not fused into the
// wide products that read them (default on: normFuse)
const unfused = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { normFuse: 0 } });
// the FFN's norm fused only, the attention's norm and the MoE combine dispatches of their own (by default both are
// fused, the attention's into A0 and o)
const ffnOnly = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { normFuse: 2 } });
// a one-token step's cache write, absorb, attention and W_UV as one dispatch (attnFuse = 1; with q-LoRA the absorb,
// attention and W_UV after the cache write and q_b), counted
const attnFused = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { attnFuse: 1 } });
let attnFusedDispatches = 0;
if (attnFused !== undefined) {
  const dispatch = attnFused.dispatch.bind(attnFused);
  attnFused.dispatch = (label, ...rest) => {
    if (label === "attention fused") attnFusedDispatches++;
    dispatch(label, ...rest);
  };
}
// the register-tiled kernel (gemm.wgsl.ts) for every product it can take: the 6-token prompt's plain products, and
// expert lists from a quarter pair an expert (by default on GPUs from 128 tokens and 24 pairs an expert)
const tiled =
  rt === undefined
    ? undefined
    : new GpuRuntime(rt.info, { checkWrites: true, tune: { gemm: 2, expertsFrom: 0.25, rowTile: 1 } });
let tiledDispatches = 0;
if (tiled !== undefined) {
  const dispatch = tiled.dispatch.bind(tiled);
  tiled.dispatch = (label, code, ...rest) => {
    if (/register-tiled product/.test(code)) tiledDispatches++;
    dispatch(label, code, ...rest);
  };
}
// the tiled latent attention (attention/tiled.wgsl.ts) for every step, prompts and batched decode alike (by default from
// 128 queries), with the wide decode kernel off
const tiledAttn =
  rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { attnTiled: 1, attn: 0 } });
let tiledAttnDispatches = 0;
if (tiledAttn !== undefined) {
  const dispatch = tiledAttn.dispatch.bind(tiledAttn);
  tiledAttn.dispatch = (label, ...rest) => {
    if (label.startsWith("attention tiled")) tiledAttnDispatches++;
    dispatch(label, ...rest);
  };
}
// the H200's small-step defaults on this adapter: the wide kernel's passes software-pipelined (widePipe) and the fused
// one-token attention, on a model wide enough for several passes a row at this adapter's subgroup size
const piped =
  rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { widePipe: 1, attnFuse: 1 } });
// the independent kernel pairs of small steps dispatched one by one instead of combined (together = 0)
const apart = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { together: 0 } });
// the shared experts' down product beside the routing, into the residual's other buffer (sharedEarly = 1, the default,
// whose dispatches' labels are checked below), or beside the routed one into h (sharedEarly = 0)
const early = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { sharedEarly: 1 } });
const lateShared =
  rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { sharedEarly: 0 } });
// the routing kernel 64 threads wide (routeThreads = 64; by default 256, so that it shares its dispatch with the shared
// down product)
const routeNarrow =
  rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { routeThreads: 64 } });
// half a subgroup a row wherever the wide kernel can (wideHalf = 2): plain, dual and pair-major products
const halfRows = rt === undefined ? undefined : new GpuRuntime(rt.info, { checkWrites: true, tune: { wideHalf: 2 } });
const earlyLabels: string[] = [];
if (early !== undefined) {
  const dispatch = early.dispatch.bind(early);
  early.dispatch = (label, ...rest) => {
    earlyLabels.push(label);
    dispatch(label, ...rest);
  };
}
after(() => rt?.device.destroy());

/** The kernels a runtime dispatches (the first word of their labels), collected from now on. */
function kernelsOf(r: GpuRuntime): Set<string> {
  const seen = new Set<string>();
  const dispatch = r.dispatch.bind(r);
  r.dispatch = (label, ...rest) => {
    seen.add(label.split(" ")[0]);
    dispatch(label, ...rest);
  };
  return seen;
}
const kernels = new Map([rt, listed].flatMap((r) => (r === undefined ? [] : [[r, kernelsOf(r)] as const])));
/** dispatches of a case's run on the default runtime, by case label */
const dispatches = new Map<string, number>();
const TOL = 1e-3;

// every product of the attention and MoE FFN on the wide kernel (Q8_0; o 64 columns wide), two MoE layers: the fused
// norms and the combine into the next layer's A0 and o all run
const fusedCase: SynthCase = {
  label: "tiny-q8-2moe",
  base: "tiny",
  over: { n_layer: 3, n_dense: 1, n_head: 4, v_head: 16 },
  type: "Q8_0",
};
// glm-dsa on the wide kernel: the FFN's norm fused (DSA keeps the attention's norm a dispatch of its own)
const glmCase: SynthCase = { label: "tiny-glm-q8", base: "tiny-glm", over: {}, type: "Q8_0" };
// no q-LoRA (the fused attention's case), every attention matrix Q8_0
const noLoraCase: SynthCase = {
  label: "tiny-q8-noqlora",
  base: "tiny",
  over: { n_layer: 3, n_dense: 1, n_head: 4, v_head: 16, q_lora: 0 },
  type: "Q8_0",
};
const oddCase = CASES.find((c) => c.label === "no-qlora-odd")!;
// rows of 512 and 256 columns (Q4_K_M: Q4_K, Q6_K, Q5_0 and Q8_0 matrices), no q-LoRA
const wideCase: SynthCase = {
  label: "wide-q4km-noqlora",
  base: "tiny",
  over: { n_layer: 3, n_dense: 1, n_embd: 512, n_ff: 512, n_ff_exp: 256, q_lora: 0 },
  type: "Q4_K_M",
};
// V2's group-limited softmax routing (groups scored by their max) with every MoE product on the wide kernel
const groupsCase: SynthCase = {
  ...CASES.find((c) => c.label === "v2-groups-softmax")!,
  label: "v2-groups-softmax-q8",
  type: "Q8_0",
};
const cases: SynthCase[] = [
  ...CASES.filter((c) => c.base === "tiny"),
  fusedCase,
  glmCase,
  { label: "tiny-v3-q4km", base: "tiny", over: {}, type: "Q4_K_M" },
];

const last = cases[cases.length - 1];
// The wide model under each tuning knob takes minutes a case on lavapipe: those sweeps run with LATENT_LONG_SWEEPS=1;
// the wide model's default run and the knobs on the small models always run.
for (const [c, r] of [
  ...cases.map((c) => [c, rt] as const),
  [last, plain] as const,
  [last, wideAttn] as const,
  [last, listed] as const,
  [fusedCase, unfused] as const,
  [fusedCase, ffnOnly] as const,
  [fusedCase, apart] as const,
  [noLoraCase, attnFused] as const,
  [oddCase, attnFused] as const,
  [last, attnFused] as const,
  [wideCase, rt] as const,
  [wideCase, piped] as const,
  [fusedCase, early] as const,
  [wideCase, early] as const,
  [last, early] as const,
  [fusedCase, lateShared] as const,
  [wideCase, lateShared] as const,
  [wideCase, halfRows] as const,
  [fusedCase, halfRows] as const,
  [fusedCase, routeNarrow] as const,
  [last, routeNarrow] as const,
  [groupsCase, rt] as const,
  [last, tiled] as const,
  [last, tiledAttn] as const,
  [glmCase, tiledAttn] as const,
]) {
  const replay = r === plain;
  test(`${c.label}: fused GPU prefill + 2-sequence batched decode match the CPU reference (≤ ${TOL})${replay ? ", recorded steps replayed" : ""}${r === wideAttn ? ", wide decode attention" : ""}${r === listed ? ", expert lists (expertsFrom = 0.25)" : ""}${r === unfused ? ", norms unfused (normFuse = 0)" : ""}${r === ffnOnly ? ", only the FFN's norm fused (normFuse = 2)" : ""}${r === apart ? ", kernel pairs apart (together = 0)" : ""}${r === attnFused ? ", one-token attention fused (attnFuse = 1)" : ""}${r === piped ? ", wide passes pipelined and attention fused (widePipe = 1, attnFuse = 1)" : ""}${r === early ? ", shared down beside the routing (sharedEarly = 1)" : ""}${r === lateShared ? ", shared down beside the routed one (sharedEarly = 0)" : ""}${r === halfRows ? ", half a subgroup a row (wideHalf = 2)" : ""}${r === routeNarrow ? ", the routing 64 threads a workgroup, a dispatch of its own (routeThreads = 64)" : ""}${r === tiled ? ", the register-tiled kernel wherever it applies (gemm = 2, expertsFrom = 0.25)" : ""}${r === tiledAttn ? ", tiled latent attention at every step (attnTiled = 1)" : ""}`, {
    skip: sweepSkip(skip, c !== wideCase || r === rt),
  }, async () => {
    kernels.get(r!)?.clear();
    const before = r!.stats.dispatches;
    const m = synthModel(c, 9);
    try {
      const { model, config } = loadModel(m.path);
      const seqs = [randomTokens(11, 3, 0, config.nVocab), randomTokens(7, 8, 0, config.nVocab)];
      const refs = seqs.map((s) => logprobRows(model, s, "reference"));
      const g = new GpuModel(r!, model, { slots: 2, context: 32, maxTokens: 4 });
      const prompt = [6, 3];
      const got: Float64Array[][] = [[], []];
      for (let s = 0; s < 2; s++) {
        for (const row of await g.prefill(s, seqs[s].slice(0, prompt[s]), 0, true)) got[s].push(logSoftmaxRow(row));
      }
      // decode both sequences in one step while both have tokens left, then the longer one alone
      for (let pos = 3; pos < 11; pos++) {
        const step = [0, 1]
          .filter((s) => pos >= prompt[s] && pos < seqs[s].length)
          .map((s) => ({ token: seqs[s][pos], slot: s, pos, logits: true }));
        if (step.length === 0) continue;
        const logits = await g.step(step);
        step.forEach((t, i) =>
          got[t.slot].push(logSoftmaxRow(logits.subarray(i * config.nVocab, (i + 1) * config.nVocab))),
        );
      }
      if (replay) assert.ok(g.replayStats.replayed >= 3 && g.replayStats.recorded >= 2, JSON.stringify(g.replayStats));
      else assert.equal(g.replayStats.replayed, 0);
      const seen = kernels.get(r!);
      if (seen !== undefined && config.nLayer > config.nLeadingDense)
        assert.ok(seen.has("moeRoute"), `kernels: ${[...seen].join(", ")}`);
      if (r === rt) dispatches.set(c.label, r!.stats.dispatches - before);
      if (r === listed && config.nLayer > config.nLeadingDense)
        assert.ok(seen!.has("expertLists"), `kernels: ${[...seen!].join(", ")}`);
      // per small step: the FFN's norm a dispatch of its own in each MoE layer unfused; fused by default (normFuse = 1)
      // also the attention's norm in every layer, which normFuse = 2 leaves a dispatch
      if (r === tiled) {
        assert.ok(tiledDispatches > 0, "the register-tiled kernel ran");
        tiledDispatches = 0;
      }
      if (r === tiledAttn) {
        assert.ok(tiledAttnDispatches > 0, "the tiled attention ran");
        tiledAttnDispatches = 0;
      }
      if (r === attnFused) {
        assert.ok(attnFusedDispatches > 0, "the fused attention ran");
        attnFusedDispatches = 0;
      }
      if (r === early) {
        // small steps: MoE layers' shared down products right after their routing (held for one dispatch with it)
        const after = (i: number): string => earlyLabels[i - 1] ?? "";
        const sharedDowns = earlyLabels.map((l, i) => [l, i] as const).filter(([l]) => /ffn_down_shexp/.test(l));
        assert.ok(
          sharedDowns.some(([, i]) => after(i) === "moeRoute"),
          `labels: …${earlyLabels.slice(-40).join(", ")}`,
        );
        earlyLabels.length = 0;
      }
      // (the default runtime's count is known where its case ran first: not under a name pattern)
      if (r === routeNarrow && dispatches.has(c.label))
        assert.ok(
          r!.stats.dispatches - before > dispatches.get(c.label)!,
          `routing apart: ${r!.stats.dispatches - before} dispatches, ${dispatches.get(c.label)} by default`,
        );
      if (r === apart)
        assert.ok(r!.stats.dispatches - before > dispatches.get(c.label)!, "pairs apart: more dispatches");
      if (r === unfused || r === ffnOnly) {
        const fusedCount = dispatches.get(c.label)!;
        const count = r!.stats.dispatches - before;
        assert.ok(
          count > fusedCount,
          `dispatches: ${count} with normFuse = ${r!.tune.normFuse}, ${fusedCount} by default`,
        );
      }
      for (let s = 0; s < 2; s++) {
        const e = record(`fused model ${c.label}`, maxAbsDiff(got[s], refs[s]));
        assert.ok(e <= TOL, `sequence ${s}: max |Δ logprob| ${e}`);
      }
    } finally {
      m.cleanup();
    }
  });
}

// past one chunk of keys (256) the one-token fused attention splits the keys over its workgroups and merges them in a
// second dispatch (attnFusedShape's keySplit): decode steps from 258 to 262 keys, with and without q-LoRA, against the
// CPU reference
for (const c of [noLoraCase, fusedCase]) {
  test(`${c.label}: decode steps past 256 keys with the key-split fused attention (attnFuse = 1) match the CPU reference (≤ ${TOL})`, {
    skip,
  }, async () => {
    const r = new GpuRuntime(rt!.info, { checkWrites: true, tune: { attnFuse: 1 } });
    let split = 0;
    const dispatch = r.dispatch.bind(r);
    r.dispatch = (label, ...rest) => {
      if (label === "attention fused keys") split++;
      dispatch(label, ...rest);
    };
    const m = synthModel(c, 9);
    try {
      const { model, config } = loadModel(m.path);
      const seq = randomTokens(262, 17, 0, config.nVocab);
      const ref = logprobRows(model, seq, "reference");
      const g = new GpuModel(r, model, { slots: 1, context: 300, maxTokens: 64 });
      await g.prefill(0, seq.slice(0, 257));
      const got: Float64Array[] = [];
      for (let pos = 257; pos < 262; pos++)
        got.push(logSoftmaxRow(await g.step([{ token: seq[pos], slot: 0, pos, logits: true }])));
      assert.ok(split > 0, "the key-split kernel ran");
      const e = record(`fused model ${c.label}, 258–262 keys`, maxAbsDiff(got, ref.slice(257)));
      assert.ok(e <= TOL, `max |Δ logprob| ${e}`);
    } finally {
      m.cleanup();
    }
  });
}
