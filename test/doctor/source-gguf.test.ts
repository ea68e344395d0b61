// `latent doctor MODEL --source other.gguf`: a second GGUF of the same model as the source (both dequantized
// tensor by tensor, each side's type in the tolerance); missing or extra tensors; a source that cannot be read.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL } from "../../src/cli/demo.js";
import { doctorMain } from "../../src/cli/doctor.js";
import { GGMLType } from "../../src/gguf/types.js";
import { doctorWithSource, faulted } from "../helpers/source-doctor.js";
import * as F from "../helpers/source-faults.js";

let dir = "";
let q8 = "";
before(() => {
  dir = mkdtempSync(join(tmpdir(), "latent-doctor-gguf-src-"));
  q8 = faulted(DEMO_MODEL, join(dir, "q8.gguf"), F.requantize(GGMLType.Q8_0, 32));
});
after(() => rmSync(dir, { recursive: true, force: true }));

test("healthy: the F16 file against its Q8_0 requantization (and back) → exit 0, logits of both files compared", async () => {
  for (const [model, source] of [
    [DEMO_MODEL, q8],
    [q8, DEMO_MODEL],
  ] as const) {
    const r = await doctorWithSource(model, source);
    assert.equal(r.code, 0, JSON.stringify(r.errors, null, 1));
    const s = r.report.source!;
    assert.equal(s.kind, "gguf");
    assert.equal(s.compared, r.report.file!.tensorCount);
    assert.ok(
      s.tensors.some((t) => t.type === "F16" && t.sourceDtype === "Q8_0") ||
        s.tensors.some((t) => t.type === "Q8_0" && t.sourceDtype === "F16"),
    );
    assert.equal(s.logits?.sourceModel, "the source GGUF");
  }
  let out = "";
  const code = await doctorMain([q8, "--source", DEMO_MODEL], {
    out: (t) => void (out += t),
    err: (t) => void (out += t),
    tty: false,
  });
  assert.equal(code, 0, out);
  assert.match(
    out,
    /source: GGUF .*latent-demo-kjv\.gguf: (\d+)\/\1 compared tensors within quantization noise; logits mean KL/,
  );
  assert.match(out, /verdict: healthy \(exit 0\)/);
});

test("faulted against a GGUF source: attn_k_b/attn_v_b swapped, one expert zeroed, sign flipped → exit 1, named", async () => {
  const cases: { edit: F.TensorEdit; code: string; tensors: string[]; words: RegExp }[] = [
    {
      edit: F.swapData("blk.4.attn_k_b.weight", "blk.4.attn_v_b.weight"),
      code: "source-k-b-v-b-swapped",
      tensors: ["blk.4.attn_k_b.weight", "blk.4.attn_v_b.weight"],
      words: /attn_k_b and attn_v_b swapped/,
    },
    {
      edit: F.zeroSlice("blk.5.ffn_gate_exps.weight", 7),
      code: "source-expert-zeroed",
      tensors: ["blk.5.ffn_gate_exps.weight"],
      words: /expert 7 is all zeros/,
    },
    {
      edit: F.scaleTensor("blk.0.ffn_up.weight", -1),
      code: "source-sign-flipped",
      tensors: ["blk.0.ffn_up.weight"],
      words: /sign flipped/,
    },
  ];
  for (const c of cases) {
    const r = await doctorWithSource(faulted(DEMO_MODEL, join(dir, "fault.gguf"), c.edit), q8);
    assert.equal(r.code, 1);
    for (const t of c.tensors)
      assert.ok(
        r.errors.some((e) => e.code === c.code && e.message.includes(t) && c.words.test(e.message)),
        JSON.stringify(r.errors.map((e) => e.message)),
      );
    assert.deepEqual(r.report.source!.mismatches.map((m) => m.tensor).sort(), [...c.tensors].sort());
  }
});

test("a legacy-generation GGUF (attn_kv_b) against the current-generation file: healthy both ways; kv_b heads reordered → named", async () => {
  const legacy = F.writeLegacyGeneration(DEMO_MODEL, join(dir, "legacy.gguf"));
  for (const [model, source] of [
    [legacy, DEMO_MODEL],
    [DEMO_MODEL, legacy],
  ] as const) {
    const r = await doctorWithSource(model, source);
    assert.equal(r.code, 0, JSON.stringify(r.errors, null, 1));
  }
  const bad = faulted(legacy, join(dir, "legacy-heads.gguf"), F.permuteSlices("blk.2.attn_kv_b.weight", [3, 2, 1, 0]));
  const r = await doctorWithSource(bad, DEMO_MODEL);
  assert.equal(r.code, 1);
  assert.ok(
    r.errors.some(
      (e) =>
        e.code === "source-heads-reordered" &&
        e.message.includes("blk.2.attn_kv_b.weight") &&
        /head 0 holds the source's head 3/.test(e.message),
    ),
    JSON.stringify(r.errors),
  );
});

test("a tensor missing from the GGUF, or one the source lacks → exit 1 naming it (logits skipped)", async () => {
  const dropped = faulted(
    DEMO_MODEL,
    join(dir, "dropped.gguf"),
    (l) =>
      void l.splice(
        l.findIndex((t) => t.name === "blk.2.ffn_norm.weight"),
        1,
      ),
  );
  const r = await doctorWithSource(dropped, DEMO_MODEL);
  assert.equal(r.code, 1);
  assert.ok(
    r.errors.some(
      (e) => e.code === "source-missing-tensor" && e.message.includes("model.layers.2.post_attention_layernorm.weight"),
    ),
    JSON.stringify(r.errors),
  );
  assert.ok(r.report.findings.some((f) => f.code === "source-logits-skipped"));
  const back = await doctorWithSource(DEMO_MODEL, dropped);
  assert.equal(back.code, 1);
  assert.ok(
    back.errors.some((e) => e.code === "source-extra-tensor" && e.message.includes("blk.2.ffn_norm.weight")),
    JSON.stringify(back.errors),
  );
});

test("a source that cannot be read → exit 2 with a clear message", async () => {
  const empty = join(dir, "empty-dir");
  mkdirSync(empty);
  const junk = join(dir, "junk.gguf");
  writeFileSync(junk, "not a gguf at all");
  const truncated = join(dir, "truncated");
  mkdirSync(truncated);
  writeFileSync(join(truncated, "model.safetensors"), Buffer.from([255, 0, 0, 0, 0, 0, 0, 0, 123]));
  for (const [source, message] of [
    [join(dir, "does-not-exist"), /source not found: .*does-not-exist/],
    [empty, /cannot read the source .*empty-dir: .*no model\.safetensors or model\.safetensors\.index\.json/],
    [junk, /cannot read the source .*junk\.gguf/],
    [truncated, /cannot read the source .*header length/],
  ] as const) {
    let out = "";
    const code = await doctorMain([DEMO_MODEL, "--source", source], {
      out: (t) => void (out += t),
      err: (t) => void (out += t),
      tty: false,
    });
    assert.equal(code, 2, out);
    assert.match(out, /ERROR +\[source\/source-unreadable\]/);
    assert.match(out, message);
    assert.match(out, /verdict: could-not-run \(exit 2\)/);
  }
});
