// `latent convert` of an FP8 block-scaled checkpoint (DeepSeek-V3 layout: F8_E4M3 weights + F32 weight_scale_inv per
// 128×128 block): the weights are dequantized with their block scales.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL } from "../../src/cli/demo.js";
import { convertHf } from "../../src/convert/index.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType } from "../../src/gguf/types.js";
import { dequantize } from "../../src/quant/index.js";
import { writeHfCheckpoint } from "../helpers/hf-checkpoint.js";

function valuesOf(f: GGUFFile, name: string): Float32Array {
  const t = f.tensor(name);
  return dequantize(
    t.type,
    f.readBytes(t),
    t.ne.reduce((a, b) => a * b, 1),
  );
}

test("convert: FP8 block-scaled checkpoint → F32 GGUF within E4M3 noise of the original weights", () => {
  const dir = mkdtempSync(join(tmpdir(), "latent-convert-fp8-"));
  try {
    const hf = writeHfCheckpoint(DEMO_MODEL, join(dir, "hf"), { dtype: "FP8", shardTensors: 50 });
    const out = join(dir, "demo-f32.gguf");
    const res = convertHf(hf, out, { type: "F32" });
    const orig = GGUFFile.open(DEMO_MODEL);
    const conv = GGUFFile.open(out);
    try {
      assert.equal(conv.tensors.size, orig.tensors.size);
      assert.ok(res.tensors.every((t) => t.type === GGMLType.F32));
      let fp8Tensors = 0;
      for (const name of orig.tensors.keys()) {
        const a = valuesOf(orig, name);
        const b = valuesOf(conv, name);
        let d2 = 0;
        let s2 = 0;
        for (let i = 0; i < a.length; i++) {
          d2 += (b[i] - a[i]) ** 2;
          s2 += a[i] ** 2;
        }
        const rel = Math.sqrt(d2 / s2);
        // E4M3 with 128×128 block scales: ~2.7e-2 worst measured; a wrong scale convention is far beyond
        assert.ok(rel < 0.04, `${name}: rel ${rel}`);
        if (rel > 1e-3) fp8Tensors++;
      }
      assert.ok(fp8Tensors > 40, `FP8-encoded tensors: ${fp8Tensors}`);
    } finally {
      orig.close();
      conv.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
