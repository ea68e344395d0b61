// FP8 block-scaled checkpoints (DeepSeek-V3 / Kimi-K2 / GLM-5 layout) as the source of `latent doctor --source`:
// the E4M3 decoding and the 128×128 block-scale convention, then healthy and faulted GGUFs against such a checkpoint.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL } from "../../src/cli/demo.js";
import { GGMLType } from "../../src/gguf/types.js";
import { dequantizeFp8, E4M3_TABLE, f32ToE4M3, quantizeFp8Blocks } from "../../src/convert/fp8.js";
import { readCheckpoint, readWeightF32 } from "../../src/convert/safetensors.js";
import { safetensorsBytes } from "../convert/hf-export.js";
import { writeHfCheckpoint } from "../helpers/hf-checkpoint.js";
import { doctorWithSource, faulted } from "../helpers/source-doctor.js";
import * as F from "../helpers/source-faults.js";

let dir = "";
let hf = "";
before(() => {
  dir = mkdtempSync(join(tmpdir(), "latent-doctor-fp8-"));
  hf = writeHfCheckpoint(DEMO_MODEL, join(dir, "hf"), { dtype: "FP8" });
});
after(() => rmSync(dir, { recursive: true, force: true }));

test("E4M3 (fn): 1.0, the largest finite 448, subnormals, NaN, and round-to-nearest-even encoding", () => {
  assert.equal(E4M3_TABLE[0x38], 1);
  assert.equal(E4M3_TABLE[0x7e], 448);
  assert.equal(E4M3_TABLE[0xfe], -448);
  assert.equal(E4M3_TABLE[0x01], 2 ** -9);
  assert.equal(E4M3_TABLE[0x08], 2 ** -6);
  assert.ok(Number.isNaN(E4M3_TABLE[0x7f]) && Number.isNaN(E4M3_TABLE[0xff]));
  assert.equal(E4M3_TABLE[0x3c], 1.5);
  for (let b = 0; b < 0x7f; b++) assert.equal(f32ToE4M3(E4M3_TABLE[b]), b, `byte ${b}`);
  assert.equal(f32ToE4M3(1000), 0x7e, "saturates");
  assert.equal(f32ToE4M3(1.0625), 0x38, "halfway 1 | 1.125 rounds to even (1)");
  assert.equal(f32ToE4M3(1.1875), 0x3a, "halfway 1.125 | 1.25 rounds to even (1.25)");
});

test("block scales: element (r, c) uses scale_inv[r/128][c/128], partial edge blocks included; read from a checkpoint", () => {
  const [R, C] = [130, 260]; // grid 2 × 3, last blocks partial
  const bytes = new Uint8Array(R * C).fill(0x38); // every fp8 value 1.0
  const scale = Float32Array.from({ length: 6 }, (_, i) => i + 1);
  const v = dequantizeFp8(bytes, "F8_E4M3", [R, C], scale);
  assert.equal(v[0], 1);
  assert.equal(v[127 * C + 127], 1);
  assert.equal(v[127 * C + 128], 2);
  assert.equal(v[129 * C + 259], 6);
  assert.equal(v[128 * C + 0], 4);
  const x = Float32Array.from({ length: R * C }, (_, i) => Math.sin(i) * (1 + (i % 7)));
  const q = quantizeFp8Blocks(x, [R, C]);
  assert.deepEqual(q.scaleShape, [2, 3]);
  const ckptDir = mkdtempSync(join(dir, "ck-"));
  const scaleBytes = new Uint8Array(q.scale.buffer);
  writeFileSync(
    join(ckptDir, "model.safetensors"),
    safetensorsBytes([
      { name: "w.weight", dtype: "F8_E4M3", shape: [R, C], data: q.bytes },
      { name: "w.weight_scale_inv", dtype: "F32", shape: q.scaleShape, data: scaleBytes },
      { name: "bad.weight", dtype: "F8_E4M3", shape: [R, C], data: q.bytes },
      { name: "odd.weight", dtype: "F8_E4M3", shape: [R, C], data: q.bytes },
      { name: "odd.weight_scale_inv", dtype: "F32", shape: [3, 2], data: scaleBytes },
    ]),
  );
  const ck = readCheckpoint(ckptDir);
  const back = readWeightF32(ck, ck.get("w.weight")!);
  let d2 = 0;
  let s2 = 0;
  for (let i = 0; i < x.length; i++) {
    d2 += (back[i] - x[i]) ** 2;
    s2 += x[i] ** 2;
  }
  assert.ok(Math.sqrt(d2 / s2) < 0.04, `E4M3 block round trip rel ${Math.sqrt(d2 / s2)}`);
  assert.throws(
    () => readWeightF32(ck, ck.get("bad.weight")!),
    /F8_E4M3 is not supported without its block scales.*bad\.weight_scale_inv/,
  );
  assert.throws(
    () => readWeightF32(ck, ck.get("odd.weight")!),
    /odd\.weight_scale_inv.*shape \[3, 2\], expected \[2, 3\]/,
  );
});

test("healthy: the F16 demo model and a Q4_K requantization match an FP8 block-scaled checkpoint", async () => {
  const q4 = faulted(DEMO_MODEL, join(dir, "q4k.gguf"), F.requantize(GGMLType.Q4_K, 256));
  for (const model of [DEMO_MODEL, q4]) {
    const r = await doctorWithSource(model, hf);
    assert.equal(r.code, 0, JSON.stringify(r.errors, null, 1));
    const s = r.report.source!;
    assert.equal(s.compared, r.report.file!.tensorCount);
    assert.ok(s.tensors.some((t) => t.sourceDtype === "F8_E4M3"));
    assert.ok(
      s.skippedInSource.some((x) => x.name.endsWith("weight_scale_inv")),
      "scales consumed, not reported missing",
    );
  }
});

test("faults against FP8: two experts swapped, one expert zeroed, Q8_0 block scales shifted by one block", async () => {
  const cases: { edit: F.TensorEdit; code: string; tensor: string; words: RegExp }[] = [
    {
      edit: F.permuteSlices("blk.2.ffn_up_exps.weight", [0, 6, 2, 3, 4, 5, 1, 7]),
      code: "source-experts-swapped",
      tensor: "blk.2.ffn_up_exps.weight",
      words: /expert 1 holds expert 6's values \(swapped\).*expert 6 holds expert 1's/,
    },
    {
      edit: F.zeroSlice("blk.3.ffn_down_exps.weight", 4),
      code: "source-expert-zeroed",
      tensor: "blk.3.ffn_down_exps.weight",
      words: /expert 4 is all zeros/,
    },
    {
      edit: F.q8ScalesShifted("blk.2.attn_q_b.weight"),
      code: "source-block-scales",
      tensor: "blk.2.attn_q_b.weight",
      words: /shifted by one block/,
    },
  ];
  for (const c of cases) {
    const r = await doctorWithSource(faulted(DEMO_MODEL, join(dir, "fault.gguf"), c.edit), hf);
    assert.equal(r.code, 1);
    assert.ok(
      r.errors.some((e) => e.code === c.code && e.message.includes(c.tensor) && c.words.test(e.message)),
      JSON.stringify(r.errors.map((e) => e.message)),
    );
    assert.deepEqual(
      r.report.source!.mismatches.map((m) => m.tensor),
      [c.tensor],
    );
  }
});

test("an FP8 weight whose block scales are missing: that tensor is not compared (a warning naming it), the rest are", async () => {
  const ck = readCheckpoint(hf);
  const bytes = readFileSync(join(hf, "model.safetensors"));
  const lacking = join(dir, "hf-lacking");
  mkdirSync(lacking);
  const kept = [...ck.values()].filter((t) => t.name !== "model.layers.1.self_attn.o_proj.weight_scale_inv");
  writeFileSync(
    join(lacking, "model.safetensors"),
    safetensorsBytes(
      kept.map((t) => ({
        name: t.name,
        dtype: t.dtype,
        shape: t.shape,
        data: new Uint8Array(bytes.subarray(t.offset, t.offset + t.nbytes)),
      })),
    ),
  );
  const r = await doctorWithSource(DEMO_MODEL, lacking);
  assert.equal(r.code, 0, JSON.stringify(r.errors));
  const w = r.report.findings.find((f) => f.code === "source-not-compared" && f.severity === "warning");
  assert.ok(
    w?.message.includes("blk.1.attn_output.weight") && /weight_scale_inv/.test(w.message),
    JSON.stringify(r.report.findings),
  );
  assert.equal(r.report.source!.compared, r.report.file!.tensorCount - 1);
});
