import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { GGUFFile } from "../../src/gguf/file.js";
import { typeByName } from "../../src/gguf/types.js";
import { canQuantize, dequantize, quantize, quantizeRow, rowBytes } from "../../src/quant/index.js";
import { QuantTypeError } from "../../src/util/errors.js";

const FIXTURE = fileURLToPath(new URL("../fixtures/quants/quantize.gguf", import.meta.url));
const TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"];

const file = GGUFFile.open(FIXTURE);

for (const name of TYPES) {
  test(`quantize ${name} byte-identical to llama-quantize`, () => {
    const srcInfo = file.tensors.get(`${name}.src`)!;
    const refInfo = file.tensors.get(`${name}.ggml`)!;
    const type = typeByName(name)!;
    assert.equal(refInfo.type, type);
    assert.ok(canQuantize(type));
    const cols = srcInfo.ne[0];
    const rows = srcInfo.ne[1];
    const src = new Float32Array(file.readBytes(srcInfo).slice().buffer);
    const expected = file.readBytes(refInfo);
    const got = quantize(type, src, cols, `${name}.src`);
    assert.equal(got.length, expected.length);
    const rb = rowBytes(type, cols);
    const badRows: number[] = [];
    for (let r = 0; r < rows; r++) {
      for (let b = r * rb; b < (r + 1) * rb; b++) {
        if (got[b] !== expected[b]) {
          badRows.push(r);
          break;
        }
      }
    }
    assert.deepEqual(badRows, [], `${name}: rows differing from ggml: ${badRows.join(", ")}`);
  });
}

/** Deterministic N(0,1) samples (xorshift + Box-Muller). */
function gaussian(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  const next = (): number => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.sqrt(-2 * Math.log(next())) * Math.cos(2 * Math.PI * next());
  return out;
}

// Relative RMS error bounds for N(0,1) rows: the README's mean over rows 0–3, with 25% headroom.
const RMS_BOUND: Record<string, number> = {
  Q4_0: 0.085,
  Q4_1: 0.078,
  Q5_0: 0.044,
  Q5_1: 0.038,
  Q8_0: 0.0054,
  Q2_K: 0.301,
  Q3_K: 0.151,
  Q4_K: 0.073,
  Q5_K: 0.036,
  Q6_K: 0.018,
  IQ4_NL: 0.075,
  IQ4_XS: 0.076,
};

for (const name of TYPES) {
  test(`${name}: quantize → dequantize error within bounds (odd row count)`, () => {
    const type = typeByName(name)!;
    const cols = 512;
    const rows = 5;
    const src = gaussian(rows * cols, 1234 + type);
    const q = quantize(type, src, cols);
    assert.equal(q.length, rows * rowBytes(type, cols));
    const y = dequantize(type, q, rows * cols);
    for (let r = 0; r < rows; r++) {
      let num = 0;
      let den = 0;
      for (let i = r * cols; i < (r + 1) * cols; i++) {
        num += (y[i] - src[i]) ** 2;
        den += src[i] ** 2;
      }
      const rel = Math.sqrt(num / den);
      assert.ok(
        rel <= RMS_BOUND[name] * 1.25,
        `${name} row ${r}: relative RMS ${rel.toFixed(4)} > ${RMS_BOUND[name] * 1.25}`,
      );
    }
  });
}

test("quantizeRow writes at offsets and leaves the rest alone", () => {
  const type = typeByName("Q8_0")!;
  const src = gaussian(96, 7);
  const out = new Uint8Array(5 + rowBytes(type, 64) + 5).fill(0xaa);
  quantizeRow(type, src, 32, 64, out, 5);
  assert.deepEqual(out.subarray(5, 5 + 68), quantize(type, src.subarray(32), 64));
  assert.ok(out.subarray(0, 5).every((b) => b === 0xaa));
  assert.ok(out.subarray(73).every((b) => b === 0xaa));
});

test("unsupported quantization target → QuantTypeError naming it", () => {
  assert.throws(
    () => quantize(typeByName("IQ2_XXS")!, new Float32Array(256), 256, "blk.3.ffn_down.weight"),
    (e: unknown) => {
      assert.ok(e instanceof QuantTypeError);
      assert.match(e.message, /IQ2_XXS/);
      assert.match(e.message, /16/);
      assert.match(e.message, /blk\.3\.ffn_down\.weight/);
      return true;
    },
  );
  assert.throws(
    () => quantize(77, new Float32Array(32), 32),
    (e: unknown) => e instanceof QuantTypeError && /77/.test(e.message),
  );
  assert.throws(() => quantize(typeByName("Q4_K")!, new Float32Array(384), 384), QuantTypeError);
});
