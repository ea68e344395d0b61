// `latent doctor --source` and tensor layouts: a checkpoint with transformers 5's fused experts
// (`mlp.experts.gate_up_proj` [E, 2F, H]) is read one expert at a time; a transposed tensor and one stored under the
// transposed shape without moving its values are told apart.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL } from "../../src/cli/demo.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { exportHf } from "../convert/hf-export.js";
import { DEMO_HF_CONFIG } from "../helpers/hf-checkpoint.js";
import { find, setValues, values } from "../helpers/gguf-rewrite.js";
import { doctorWithSource, faulted } from "../helpers/source-doctor.js";

let dir = "";
let hf = "";
before(() => {
  dir = mkdtempSync(join(tmpdir(), "latent-doctor-layout-"));
  hf = join(dir, "hf-fused");
  const f = GGUFFile.open(DEMO_MODEL);
  try {
    exportHf(f, DEMO_HF_CONFIG, hf, { dtype: "BF16", fusedExperts: true });
  } finally {
    f.close();
  }
});
after(() => rmSync(dir, { recursive: true, force: true }));

test("fused-experts checkpoint: healthy file → exit 0, every expert compared", async () => {
  const r = await doctorWithSource(DEMO_MODEL, hf);
  assert.equal(r.code, 0, JSON.stringify(r.errors, null, 1));
  const exps = r.report.source!.tensors.filter((t) => t.tensor.endsWith("_exps.weight"));
  assert.equal(exps.length, 15);
  for (const t of exps) assert.equal(t.parts, 8);
});

test("transposed (shape and values) vs misshaped (shape only) → each named", async () => {
  const name = "blk.0.attn_q_a.weight";
  const transposed = faulted(DEMO_MODEL, join(dir, "transposed.gguf"), (l) => {
    const t = find(l, name);
    const [a, b] = t.ne as [number, number];
    const v = values(t);
    const o = new Float32Array(v.length);
    for (let i = 0; i < b; i++) for (let j = 0; j < a; j++) o[j * b + i] = v[i * a + j];
    t.ne = [b, a];
    setValues(t, o);
  });
  const r = await doctorWithSource(transposed, hf);
  assert.equal(r.code, 1);
  assert.ok(
    r.errors.some((e) => e.code === "source-transposed" && e.message.includes(name)),
    JSON.stringify(r.errors),
  );
  const misshaped = faulted(DEMO_MODEL, join(dir, "misshaped.gguf"), (l) => {
    const t = find(l, name);
    t.ne = [t.ne[1], t.ne[0]];
  });
  const m = await doctorWithSource(misshaped, hf);
  assert.equal(m.code, 1);
  assert.ok(
    m.errors.some((e) => e.code === "source-misshaped" && e.message.includes(name)),
    JSON.stringify(m.errors),
  );
});
