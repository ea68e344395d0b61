import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { GGUFFile } from "../../src/gguf/file.js";
import { typeByName, typeName } from "../../src/gguf/types.js";
import { canDequantize, dequantize, dequantizeRow, rowBytes } from "../../src/quant/index.js";
import { QuantTypeError } from "../../src/util/errors.js";

const FIXTURE = fileURLToPath(new URL("../fixtures/quants/dequant.gguf", import.meta.url));

const EXPECTED_TYPES = [
  "F16",
  "BF16",
  "Q4_0",
  "Q4_1",
  "Q5_0",
  "Q5_1",
  "Q8_0",
  "Q2_K",
  "Q3_K",
  "Q4_K",
  "Q5_K",
  "Q6_K",
  "IQ4_NL",
  "IQ4_XS",
  "MXFP4",
  "TQ1_0",
  "TQ2_0",
  "IQ2_XXS",
  "IQ3_XXS",
  "IQ2_XS",
  "IQ3_S",
  "IQ2_S",
  "IQ1_S",
  "IQ1_M",
];

function elements(ne: readonly number[]): number {
  return ne.reduce((a, b) => a * b, 1);
}

const file = GGUFFile.open(FIXTURE);
const names = [...file.tensors.keys()].filter((n) => n.endsWith(".q")).map((n) => n.slice(0, -2));

test("dequant.gguf holds the 24 documented types", () => {
  assert.deepEqual([...names].sort(), [...EXPECTED_TYPES].sort());
});

for (const name of names) {
  test(`dequantize ${name} bit-exact with ggml`, () => {
    const q = file.tensors.get(`${name}.q`)!;
    const f = file.tensors.get(`${name}.f32`)!;
    const type = typeByName(name)!;
    assert.equal(q.type, type);
    assert.ok(canDequantize(type));
    const n = elements(q.ne);
    const bytes = file.readBytes(q);
    const expected = new Uint32Array(new Float32Array(file.readBytes(f).slice().buffer).buffer);
    // whole tensor at once
    const got = new Uint32Array(dequantize(type, bytes, n, `${name}.q`).buffer);
    let mismatches = 0;
    let first = -1;
    for (let i = 0; i < n; i++) {
      if (got[i] !== expected[i]) {
        mismatches++;
        if (first < 0) first = i;
      }
    }
    assert.equal(mismatches, 0, `${name}: ${mismatches} of ${n} elements differ, first at ${first}`);
    // row by row at offsets, into a larger buffer
    const cols = q.ne[0];
    const rows = n / cols;
    const rb = rowBytes(type, cols);
    const out = new Float32Array(cols + 3);
    for (let r = 0; r < rows; r++) {
      dequantizeRow(type, bytes, r * rb, out, 3, cols);
      const row = new Uint32Array(out.buffer, 12, cols);
      assert.deepEqual(row, expected.subarray(r * cols, (r + 1) * cols), `${name} row ${r}`);
    }
  });
}

test("F32 decodes as a bit copy, from an unaligned offset", () => {
  const src = new Float32Array([1.5, -0, Number.NaN, 3e-42]);
  const bytes = new Uint8Array(17);
  bytes.set(new Uint8Array(src.buffer), 1);
  const out = new Float32Array(4);
  dequantizeRow(0, bytes, 1, out, 0, 4);
  assert.deepEqual(new Uint32Array(out.buffer), new Uint32Array(src.buffer));
});

test("unknown type id → QuantTypeError naming it", () => {
  assert.throws(
    () => dequantize(99, new Uint8Array(64), 32, "blk.0.attn_q.weight"),
    (e: unknown) => {
      assert.ok(e instanceof QuantTypeError);
      assert.match(e.message, /99/);
      assert.match(e.message, /blk\.0\.attn_q\.weight/);
      return true;
    },
  );
  assert.throws(
    () => rowBytes(1234, 32),
    (e: unknown) => e instanceof QuantTypeError && /1234/.test(e.message),
  );
});

test("known but undecodable type → QuantTypeError naming id and name", () => {
  // I32 (26) is a GGUF type with no float decoding.
  assert.equal(canDequantize(26), false);
  assert.throws(
    () => dequantize(26, new Uint8Array(16), 4),
    (e: unknown) => {
      assert.ok(e instanceof QuantTypeError);
      assert.match(e.message, new RegExp(`${typeName(26)}`));
      assert.match(e.message, /26/);
      return true;
    },
  );
});

test("rowBytes", () => {
  assert.equal(rowBytes(typeByName("Q4_K")!, 4096), 16 * 144);
  assert.equal(rowBytes(typeByName("Q8_0")!, 64), 68);
  assert.equal(rowBytes(0, 7), 28);
  assert.throws(() => rowBytes(typeByName("Q4_K")!, 4096 + 32), QuantTypeError);
  assert.throws(
    () => rowBytes(typeByName("Q4_0")!, 33),
    (e: unknown) => e instanceof QuantTypeError && /Q4_0/.test(e.message),
  );
});

test("dequantizeRow rejects a short buffer", () => {
  assert.throws(
    () => dequantizeRow(typeByName("Q8_0")!, new Uint8Array(33), 0, new Float32Array(32), 0, 32),
    RangeError,
  );
  assert.throws(
    () => dequantizeRow(typeByName("Q8_0")!, new Uint8Array(34), 0, new Float32Array(31), 0, 32),
    RangeError,
  );
});
