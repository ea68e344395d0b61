// Fault injection proof: each simulated bug in the implementation under test is caught by the path checks with a
// message pointing at the cause (and reproduced by the fault matcher); a clean second implementation raises nothing.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { runDoctor, type DoctorReport } from "../../src/doctor/index.js";
import { writeFaultyFile } from "../helpers/file-faults.js";
import { withFaults, type Faults } from "../../src/doctor/faults/faults.js";
import { NeoxRope } from "../../src/doctor/faults/neox-rope.js";
import { LatentCache } from "../../src/model/cache.js";
import type { DeepSeek2 } from "../../src/model/deepseek2.js";
import { Rope } from "../../src/model/rope.js";
import { loadModel } from "../../src/runtime/load.js";
import { randomTokens, synthModel } from "../helpers/synth.js";

// P = V so that k_b and v_b can be swapped without a shape error (as in a converter that split kv_b the wrong way).
const m = synthModel({ label: "doc-faults", base: "tiny", over: { v_head: 24 } }, 9);
after(m.cleanup);

async function withFault(faults: Faults, model = m.path): Promise<DoctorReport> {
  return runDoctor({ model, implementation: (clean) => withFaults(clean, faults), greedyTokens: 0, skipData: true });
}

function divergence(r: DoctorReport): { message: string; matching: string[] } {
  const f = r.findings.find((x) => x.code === "path-divergence");
  assert.ok(f, `no path divergence reported: ${JSON.stringify(r.findings)}`);
  return { message: f.message, matching: (f.evidence?.matchingFaults as string[] | undefined) ?? [] };
}

/** Logits of the reference, prefill (12 tokens) and decode (the rest) paths over the same 16 tokens. */
function pathLogits(
  model: DeepSeek2,
  tokens: readonly number[],
): Record<"reference" | "prefill" | "decode", Float32Array[]> {
  const cache = new LatentCache(model.config);
  return {
    reference: [model.forward(tokens, undefined, { path: "reference", logits: "all" })],
    prefill: [model.forward(tokens.slice(0, 12), cache, { path: "prefill", logits: "all" })],
    decode: tokens.slice(12).map((t) => model.forward([t], cache, { path: "decode", logits: "all" })),
  };
}

test("fault models: no fault is the clean model bit for bit; each fault changes only the paths it breaks", () => {
  const { model } = loadModel(m.path);
  const tokens = randomTokens(16, 5, 1, model.config.nVocab);
  const clean = pathLogits(model, tokens);
  const same = (a: Float32Array[], b: Float32Array[]): boolean =>
    a.length === b.length && a.every((x, i) => Buffer.from(x.buffer).equals(Buffer.from(b[i].buffer)));
  const cases: [Faults, ("reference" | "prefill" | "decode")[]][] = [
    [{}, []],
    [{ attnOutUnwritten: "decode" }, ["decode"]],
    [{ attnOutUnwritten: "prefill" }, ["prefill", "decode"]],
    [{ swapKvB: true }, ["prefill", "decode"]],
    [{ fp16AbsorbedQuery: true }, ["decode"]],
    [{ neoxRope: true }, ["reference", "prefill", "decode"]],
    [{ softmaxGating: true }, ["reference", "prefill", "decode"]],
    [{ biasInWeights: true }, ["reference", "prefill", "decode"]],
  ];
  for (const [faults, broken] of cases) {
    const got = pathLogits(withFaults(model, faults), tokens);
    for (const path of ["reference", "prefill", "decode"] as const) {
      const changed = !same(got[path], clean[path]);
      assert.equal(
        changed,
        broken.includes(path),
        `${JSON.stringify(faults)} on the ${path} path: ${changed ? "changed" : "unchanged"}`,
      );
    }
  }
});

test("NeoX rope: the interleaved rotation of the same values laid out half-split", () => {
  const yarn = { factor: 4, originalContext: 64, betaFast: 32, betaSlow: 1, mscaleAllDim: undefined };
  const R = 8;
  const rope = new Rope(R, 10000, yarn, 1.25);
  const neox = new NeoxRope(R, 10000, yarn, 1.25);
  const x = Float64Array.from({ length: R }, (_, i) => Math.sin(i + 1));
  // half-split pair i is (x[i], x[i + R/2]); interleaved pair i is (y[2i], y[2i+1])
  const y = new Float64Array(R);
  for (let i = 0; i < R / 2; i++) [y[2 * i], y[2 * i + 1]] = [x[i], x[i + R / 2]];
  neox.apply(x, 0, 7);
  rope.apply(y, 0, 7);
  for (let i = 0; i < R / 2; i++) {
    assert.equal(x[i], y[2 * i]);
    assert.equal(x[i + R / 2], y[2 * i + 1]);
  }
});

test("healthy: a second, clean implementation raises no alarm", async () => {
  const r = await withFault({});
  assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
  assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
});

const CASES: { name: string; faults: Faults; cause: RegExp; match: RegExp; paths?: RegExp }[] = [
  {
    name: "k_b and v_b swapped",
    faults: { swapKvB: true },
    cause: /attention output differs.*attn_k_b.*attn_v_b/s,
    match: /attn_k_b and attn_v_b swapped/,
    paths: /prefill|decode/,
  },
  {
    name: "NeoX instead of interleaved rope",
    faults: { neoxRope: true },
    cause: /RoPE.*interleaved pairs, not NeoX/s,
    match: /NeoX/,
  },
  {
    name: "softmax instead of sigmoid gating",
    faults: { softmaxGating: true },
    cause: /router logits agree but the MoE output differs.*gating function/s,
    match: /softmax router gating instead of sigmoid/,
  },
  {
    name: "correction bias applied to the weights",
    faults: { biasInWeights: true },
    cause: /router logits agree but the MoE output differs.*correction bias/s,
    match: /correction bias \(exp_probs_b\) added to the expert weights/,
  },
  {
    name: "attention output never written (decode)",
    faults: { attnOutUnwritten: "decode" },
    cause: /decode path.*attn_out.*never written/s,
    match: /never written/,
    paths: /^the decode path/,
  },
];

for (const c of CASES) {
  test(`fault caught: ${c.name}`, async () => {
    const r = await withFault(c.faults);
    assert.equal(r.exitCode, 1);
    const d = divergence(r);
    assert.match(d.message, c.cause);
    assert.ok(
      d.matching.some((x) => c.match.test(x)),
      `matcher: ${JSON.stringify(d.matching)}`,
    );
    if (c.paths) assert.match(d.message, c.paths);
  });
}

test("fault caught: fp16 overflow in the absorbed query (model with large W_UK) — file warns, decode path named", async () => {
  // A model whose absorbed query exceeds fp16 range: W_UK scaled ×3e4 (the reference stays finite in float64).
  const big = writeFaultyFile(m.path, join(m.dir, "bigkb.gguf"), {
    scale: { "blk.0.attn_k_b.weight": 3e4, "blk.1.attn_k_b.weight": 3e4 },
  });
  const healthy = await runDoctor({ model: big, greedyTokens: 0, skipData: true });
  assert.equal(healthy.exitCode, 0, JSON.stringify(healthy.findings));
  assert.ok(
    healthy.findings.some((f) => f.code === "fp16-absorbed-query-overflow" && f.severity === "warning"),
    JSON.stringify(healthy.findings),
  );
  const r = await withFault({ fp16AbsorbedQuery: true }, big);
  assert.equal(r.exitCode, 1);
  const d = divergence(r);
  assert.match(d.message, /decode path/);
  assert.match(d.message, /Inf\/NaN.*fp16 absorbed query/s);
  assert.ok(
    d.matching.some((x) => /fp16/.test(x)),
    JSON.stringify(d.matching),
  );
});
