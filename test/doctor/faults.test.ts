// Fault injection proof: each simulated bug in the implementation under test is caught by the path checks with a
// message pointing at the cause (and reproduced by the fault matcher); a clean second implementation raises nothing.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { runDoctor, type DoctorReport } from "../../src/doctor/index.js";
import { writeFaultyFile } from "../helpers/file-faults.js";
import { withFaults, type Faults } from "../../src/doctor/faults/faults.js";
import { synthModel } from "../helpers/synth.js";

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

test("healthy: a second, clean implementation raises no alarm", async () => {
  const r = await withFault({});
  assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
  assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
});

const CASES: { name: string; faults: Faults; cause: RegExp; match: RegExp; paths?: RegExp }[] = [
  { name: "k_b and v_b swapped", faults: { swapKvB: true }, cause: /attention output differs.*attn_k_b.*attn_v_b/s, match: /attn_k_b and attn_v_b swapped/, paths: /prefill|decode/ },
  { name: "NeoX instead of interleaved rope", faults: { neoxRope: true }, cause: /RoPE.*interleaved pairs, not NeoX/s, match: /NeoX/ },
  { name: "softmax instead of sigmoid gating", faults: { softmaxGating: true }, cause: /router logits agree but the MoE output differs.*gating function/s, match: /softmax router gating instead of sigmoid/ },
  { name: "correction bias applied to the weights", faults: { biasInWeights: true }, cause: /router logits agree but the MoE output differs.*correction bias/s, match: /correction bias \(exp_probs_b\) added to the expert weights/ },
  { name: "attention output never written (decode)", faults: { attnOutUnwritten: "decode" }, cause: /decode path.*attn_out.*never written/s, match: /never written/, paths: /^the decode path/ },
];

for (const c of CASES) {
  test(`fault caught: ${c.name}`, async () => {
    const r = await withFault(c.faults);
    assert.equal(r.exitCode, 1);
    const d = divergence(r);
    assert.match(d.message, c.cause);
    assert.ok(d.matching.some((x) => c.match.test(x)), `matcher: ${JSON.stringify(d.matching)}`);
    if (c.paths) assert.match(d.message, c.paths);
  });
}

test("fault caught: fp16 overflow in the absorbed query (model with large W_UK) — file warns, decode path named", async () => {
  // A model whose absorbed query exceeds fp16 range: W_UK scaled ×3e4 (the reference stays finite in float64).
  const big = writeFaultyFile(m.path, join(m.dir, "bigkb.gguf"), { scale: { "blk.0.attn_k_b.weight": 3e4, "blk.1.attn_k_b.weight": 3e4 } });
  const healthy = await runDoctor({ model: big, greedyTokens: 0, skipData: true });
  assert.equal(healthy.exitCode, 0, JSON.stringify(healthy.findings));
  assert.ok(healthy.findings.some((f) => f.code === "fp16-absorbed-query-overflow" && f.severity === "warning"), JSON.stringify(healthy.findings));
  const r = await withFault({ fp16AbsorbedQuery: true }, big);
  assert.equal(r.exitCode, 1);
  const d = divergence(r);
  assert.match(d.message, /decode path/);
  assert.match(d.message, /Inf\/NaN.*fp16 absorbed query/s);
  assert.ok(d.matching.some((x) => /fp16/.test(x)), JSON.stringify(d.matching));
});
