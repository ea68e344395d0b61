// `latent doctor MODEL --source HF-DIR` on the demo model against its own checkpoint (BF16, sharded): healthy files
// pass, conversion mistakes that every compute path shares are named with the tensor and the mistake.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL } from "../../src/cli/demo.js";
import { GGMLType } from "../../src/gguf/types.js";
import { writeHfCheckpoint } from "../helpers/hf-checkpoint.js";
import { doctorWithSource, faulted } from "../helpers/source-doctor.js";
import * as F from "../helpers/source-faults.js";

let dir = "";
let hf = "";
before(() => {
  dir = mkdtempSync(join(tmpdir(), "latent-doctor-source-"));
  hf = writeHfCheckpoint(DEMO_MODEL, join(dir, "hf"), { dtype: "BF16", shardTensors: 60 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

test("healthy: the F16 demo model and a Q8_0 requantization match their BF16 checkpoint (every tensor, logits)", async () => {
  assert.ok(readdirSync(hf).includes("model.safetensors.index.json"), "the checkpoint is sharded");
  const q8 = faulted(DEMO_MODEL, join(dir, "q8.gguf"), F.requantize(GGMLType.Q8_0, 32));
  for (const model of [DEMO_MODEL, q8]) {
    const r = await doctorWithSource(model, hf);
    assert.equal(r.code, 0, JSON.stringify(r.errors, null, 1));
    const s = r.report.source!;
    assert.equal(s.kind, "hf-dir");
    assert.equal(s.compared, r.report.file!.tensorCount, "every GGUF tensor compared");
    assert.equal(s.matched, s.compared);
    assert.deepEqual(s.missingInGguf, []);
    assert.deepEqual(s.mismatches, []);
    for (const t of s.tensors) assert.ok(t.rel! <= t.tolerance!, `${t.tensor}: rel ${t.rel} > ${t.tolerance}`);
    assert.ok(s.logits !== undefined && s.logits.positions > 20);
    assert.ok(s.logits.meanKL <= s.logits.klTolerance);
  }
});

const FAULTS: { label: string; edit: F.TensorEdit; code: string; tensors: string[]; words: RegExp }[] = [
  {
    label: "attn_k_b / attn_v_b data swapped",
    edit: F.swapData("blk.1.attn_k_b.weight", "blk.1.attn_v_b.weight"),
    code: "source-k-b-v-b-swapped",
    tensors: ["blk.1.attn_k_b.weight", "blk.1.attn_v_b.weight"],
    words: /swapped/,
  },
  {
    label: "k_b reshaped instead of transposed",
    edit: F.reshapeNotTranspose("blk.2.attn_k_b.weight"),
    code: "source-reshaped-not-transposed",
    tensors: ["blk.2.attn_k_b.weight"],
    words: /reshaped instead of transposed/,
  },
  {
    label: "kv_b heads reordered",
    edit: (l) =>
      [
        F.permuteSlices("blk.3.attn_k_b.weight", [2, 1, 0, 3]),
        F.permuteSlices("blk.3.attn_v_b.weight", [2, 1, 0, 3]),
      ].forEach((f) => f(l)),
    code: "source-heads-reordered",
    tensors: ["blk.3.attn_k_b.weight", "blk.3.attn_v_b.weight"],
    words: /head 0 holds the source's head 2/,
  },
  {
    label: "gate/up names exchanged",
    edit: F.swapNames("blk.4.ffn_gate_exps.weight", "blk.4.ffn_up_exps.weight"),
    code: "source-gate-up-exchanged",
    tensors: ["blk.4.ffn_gate_exps.weight", "blk.4.ffn_up_exps.weight"],
    words: /gate and up exchanged/,
  },
  {
    label: "a tensor scaled by 0.9",
    edit: F.scaleTensor("blk.1.attn_output.weight", 0.9),
    code: "source-scaled",
    tensors: ["blk.1.attn_output.weight"],
    words: /scaled by a constant 0\.900/,
  },
];

for (const f of FAULTS) {
  test(`fault: ${f.label} → exit 1, the tensor and the mistake named`, async () => {
    const r = await doctorWithSource(faulted(DEMO_MODEL, join(dir, "fault.gguf"), f.edit), hf);
    assert.equal(r.code, 1);
    const named = r.errors.filter((e) => e.code === f.code);
    for (const t of f.tensors)
      assert.ok(
        named.some((e) => e.message.includes(t) && f.words.test(e.message)),
        `${t} / ${f.code}: ${JSON.stringify(r.errors.map((e) => e.message))}`,
      );
    // nothing else is blamed
    const blamed = new Set(r.report.source!.mismatches.map((m) => m.tensor));
    assert.deepEqual([...blamed].sort(), [...f.tensors].sort());
  });
}
