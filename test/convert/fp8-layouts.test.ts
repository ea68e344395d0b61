// FP8 weights read in row ranges (what `latent convert` streams) equal an independent float64 reading of the same
// bytes element by element: E4M3 and E5M2, DeepSeek-style 128×128 block scales with partial edge blocks, 3-D (fused
// experts) weights, compressed-tensors per-channel and per-tensor scales, F32 and BF16 scales. Unknown layouts are
// refused naming the tensor and what was expected.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readSafetensorsHeader, type SafetensorsTensor } from "../../src/convert/safetensors.js";
import { fp8Scale, readRowsF32 } from "../../src/convert/checkpoint-reader.js";
import { safetensorsBytes } from "./hf-export.js";

const dir = mkdtempSync(join(tmpdir(), "latent-fp8-layouts-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The value of an FP8 byte from its bits, in float64 (OCP FP8: E4M3 "fn" has no infinities, S.1111.111 is NaN). */
function fp8Value(byte: number, dtype: "F8_E4M3" | "F8_E5M2"): number {
  const [eBits, mBits, bias] = dtype === "F8_E4M3" ? [4, 3, 7] : [5, 2, 15];
  const sign = byte >> 7 ? -1 : 1;
  const e = (byte >> mBits) & ((1 << eBits) - 1);
  const m = byte & ((1 << mBits) - 1);
  if (dtype === "F8_E4M3" && e === 15 && m === 7) return NaN;
  if (dtype === "F8_E5M2" && e === 31) return m === 0 ? sign * Infinity : NaN;
  return e === 0 ? (sign * m * 2 ** (1 - bias)) / 2 ** mBits : sign * (1 + m / 2 ** mBits) * 2 ** (e - bias);
}

test("the independent decoder itself: known E4M3/E5M2 values", () => {
  assert.equal(fp8Value(0x7e, "F8_E4M3"), 448);
  assert.equal(fp8Value(0x01, "F8_E4M3"), 2 ** -9);
  assert.equal(fp8Value(0x38, "F8_E4M3"), 1);
  assert.equal(fp8Value(0xc0, "F8_E4M3"), -2);
  assert.equal(fp8Value(0x7b, "F8_E5M2"), 57344);
  assert.equal(fp8Value(0x3c, "F8_E5M2"), 1);
  assert.equal(fp8Value(0x01, "F8_E5M2"), 2 ** -16);
});

let seed = 12345;
const rand = (): number => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed >>> 8;
};

interface Case {
  label: string;
  dtype: "F8_E4M3" | "F8_E5M2";
  shape: number[];
  scaleShape: number[];
  scaleDtype: "F32" | "BF16";
  suffix: "_scale_inv" | "_scale";
  /** element → index into the scale values */
  scaleIndex: (lead: number, r: number, c: number) => number;
}

const blockIdx =
  (shape: number[]) =>
  (lead: number, r: number, c: number): number => {
    const [rows, cols] = shape.slice(-2);
    const gr = Math.ceil(rows / 128);
    const gc = Math.ceil(cols / 128);
    return (lead * gr + Math.floor(r / 128)) * gc + Math.floor(c / 128);
  };

const CASES: Case[] = [
  {
    label: "E4M3, 128×128 blocks, partial edge blocks (300 × 260), F32 scales",
    dtype: "F8_E4M3",
    shape: [300, 260],
    scaleShape: [3, 3],
    scaleDtype: "F32",
    suffix: "_scale_inv",
    scaleIndex: blockIdx([300, 260]),
  },
  {
    label: "E5M2, 3-D fused experts [3, 130, 257], BF16 scales",
    dtype: "F8_E5M2",
    shape: [3, 130, 257],
    scaleShape: [3, 2, 3],
    scaleDtype: "BF16",
    suffix: "_scale_inv",
    scaleIndex: blockIdx([3, 130, 257]),
  },
  {
    label: "E4M3, compressed-tensors per channel [rows, 1]",
    dtype: "F8_E4M3",
    shape: [129, 70],
    scaleShape: [129, 1],
    scaleDtype: "F32",
    suffix: "_scale",
    scaleIndex: (_l, r) => r,
  },
  {
    label: "E4M3, compressed-tensors per channel on 3-D [2, 5, 33] → [2, 5]",
    dtype: "F8_E4M3",
    shape: [2, 5, 33],
    scaleShape: [2, 5],
    scaleDtype: "BF16",
    suffix: "_scale",
    scaleIndex: (l, r) => l * 5 + r,
  },
  {
    label: "E4M3, one scale per tensor (shape [])",
    dtype: "F8_E4M3",
    shape: [17, 300],
    scaleShape: [],
    scaleDtype: "F32",
    suffix: "_scale",
    scaleIndex: () => 0,
  },
];

function scaleBytes(values: Float32Array, dtype: "F32" | "BF16"): Uint8Array {
  if (dtype === "F32") return new Uint8Array(values.buffer.slice(0));
  const b = Buffer.alloc(values.length * 2);
  values.forEach((v, i) => b.writeUInt16LE(new Uint32Array(new Float32Array([v]).buffer)[0] >>> 16, i * 2));
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}

/** The scale values as stored, read back independently (BF16 = the high half of a float32). */
function storedScale(bytes: Uint8Array, dtype: "F32" | "BF16", i: number): number {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === "F32") return v.getFloat32(i * 4, true);
  return new Float32Array(new Uint32Array([v.getUint16(i * 2, true) << 16]).buffer)[0];
}

for (const k of CASES)
  test(`${k.label}: every element of full and partial row reads = fround(fp8 · scale) in float64`, () => {
    const n = k.shape.reduce((a, d) => a * d, 1);
    const bytes = Uint8Array.from({ length: n }, () => rand() & 0xff); // every byte pattern, NaN and Inf included
    const nScale = k.scaleShape.reduce((a, d) => a * d, 1);
    const scales = Float32Array.from({ length: nScale }, () => 2 ** ((rand() % 20) - 14) * (1 + (rand() % 7) / 8));
    const sBytes = scaleBytes(scales, k.scaleDtype);
    const path = join(dir, `${k.label.replace(/\W+/g, "-")}.safetensors`);
    writeFileSync(
      path,
      safetensorsBytes([
        { name: "w.weight", dtype: k.dtype, shape: k.shape, data: bytes },
        { name: `w.weight${k.suffix}`, dtype: k.scaleDtype, shape: k.scaleShape, data: sBytes },
      ]),
    );
    const ckpt = new Map<string, SafetensorsTensor>(readSafetensorsHeader(path).map((t) => [t.name, t]));
    const w = ckpt.get("w.weight")!;
    const scale = fp8Scale(ckpt, w);
    const [rows, cols] = k.shape.slice(-2);
    const lead = k.shape.length === 3 ? k.shape[0] : 1;
    const ranges: [number, number][] = [
      [0, rows],
      [0, 1],
      [rows - 1, rows],
      [1, Math.min(rows, 129)],
      [Math.min(127, rows - 1), rows],
    ];
    let checked = 0;
    for (let l = 0; l < lead; l++)
      for (const [r0, r1] of ranges) {
        const got = readRowsF32(w, l, r0, r1, scale);
        assert.equal(got.length, (r1 - r0) * cols);
        for (let r = r0; r < r1; r++)
          for (let c = 0; c < cols; c++) {
            const b = bytes[(l * rows + r) * cols + c];
            const want = Math.fround(fp8Value(b, k.dtype) * storedScale(sBytes, k.scaleDtype, k.scaleIndex(l, r, c)));
            const v = got[(r - r0) * cols + c];
            if (!Object.is(v, want) && !(Number.isNaN(v) && Number.isNaN(want)))
              assert.fail(`slice ${l} row ${r} col ${c}: byte 0x${b.toString(16)} → ${v}, expected ${want}`);
            checked++;
          }
      }
    assert.ok(checked >= n, `${checked} elements checked`);
  });

test("unknown FP8 layouts are refused with the tensor's name and what was expected", () => {
  const write = (name: string, extra: { name: string; dtype: string; shape: number[]; data: Uint8Array }[]) => {
    const path = join(dir, `${name}.safetensors`);
    writeFileSync(
      path,
      safetensorsBytes([
        { name: "w.weight", dtype: "F8_E4M3", shape: [300, 260], data: new Uint8Array(300 * 260) },
        ...extra,
      ]),
    );
    const ckpt = new Map(readSafetensorsHeader(path).map((t) => [t.name, t]));
    return () => fp8Scale(ckpt, ckpt.get("w.weight")!);
  };
  const f32 = (n: number): Uint8Array => new Uint8Array(n * 4);
  assert.throws(
    write("grid", [{ name: "w.weight_scale_inv", dtype: "F32", shape: [2, 3], data: f32(6) }]),
    /tensor "w\.weight_scale_inv": scale shape \[2, 3\] fits no FP8 layout of the weight \[300, 260\]: expected \[3, 3\] \(128×128 blocks\), \[300, 1\] \(one per output row\) or one value/,
  );
  assert.throws(
    write("none", []),
    /tensor "w\.weight": dtype F8_E4M3 needs its scale, "w\.weight_scale_inv" .* or "w\.weight_scale"/,
  );
  assert.throws(
    write("zp", [
      { name: "w.weight_scale", dtype: "F32", shape: [300, 1], data: f32(300) },
      { name: "w.weight_zero_point", dtype: "F32", shape: [300, 1], data: f32(300) },
    ]),
    /tensor "w\.weight": FP8 with a zero point/,
  );
  assert.throws(
    write("i32", [{ name: "w.weight_scale", dtype: "I32", shape: [300, 1], data: f32(300) }]),
    /tensor "w\.weight_scale": scale dtype I32, expected F32, BF16 or F16/,
  );
});
