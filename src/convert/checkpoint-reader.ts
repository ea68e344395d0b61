/**
 * Row ranges of checkpoint weights as float32, for conversion with bounded memory: F32, F16, BF16, and FP8 (E4M3,
 * E5M2) with the scale layouts FP8 releases use:
 * - DeepSeek-V3/R1, Kimi-K2 and GLM FP8 releases (`quant_method: "fp8"`): `W.weight_scale_inv` F32
 *   [⌈rows/128⌉, ⌈cols/128⌉] (`weight_block_size`), value = fp8 · scale of its block (DeepSeek `weight_dequant`).
 * - compressed-tensors (llm-compressor's FP8_BLOCK, FP8_DYNAMIC, FP8): `W.weight_scale` as a block grid, one value per
 *   output row ([rows, 1]: per channel), or one value (per tensor); value = fp8 · scale.
 * Leading dimensions (fused experts [E, rows, cols]) are shared by the weight and its scale. Any other scale shape,
 * a zero point (asymmetric), or an FP8 weight without a scale is refused with the tensor's name and what was expected.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { bf16ToF32, f16ToF32 } from "../quant/f16.js";
import { READ_CHUNK } from "../gguf/source-node.js";
import { fp8Table, FP8_DTYPES } from "./fp8.js";
import { ConvertError, SCALE_SUFFIX, type SafetensorsTensor } from "./safetensors.js";

/** How a scale applies: one value; one per output row; one per block of rows × cols. */
export type ScaleLayout =
  | { readonly kind: "tensor" }
  | { readonly kind: "channel" }
  | { readonly kind: "block"; readonly rows: number; readonly cols: number };

export interface Fp8Scale {
  readonly tensor: SafetensorsTensor;
  readonly layout: ScaleLayout;
}

/** Names a weight's scale may have: DeepSeek-style `…weight_scale_inv`, compressed-tensors `…weight_scale`. */
export function scaleNames(weight: string): string[] {
  return [weight + SCALE_SUFFIX, `${weight}_scale`];
}

/** Tensors that only serve FP8 inference or dequantization (applied on read, or not needed): not converted. */
export function isFp8Companion(name: string, ckpt: ReadonlyMap<string, SafetensorsTensor>): boolean {
  const m = /^(.*\.weight)(_scale_inv|_scale)$/.exec(name) ?? /^(.*)\.input_scale$/.exec(name);
  if (m === null) return false;
  const weight = name.endsWith(".input_scale") ? `${m[1]}.weight` : m[1];
  return FP8_DTYPES.has(ckpt.get(weight)?.dtype ?? "");
}

const count = (shape: readonly number[]): number => shape.reduce((a, d) => a * d, 1);

/** rows × cols of a weight (a vector is one row) and the number of leading slices. */
function dims(shape: readonly number[]): { lead: number; rows: number; cols: number } {
  if (shape.length === 0) return { lead: 1, rows: 1, cols: 1 };
  if (shape.length === 1) return { lead: 1, rows: 1, cols: shape[0] };
  const rows = shape[shape.length - 2];
  const cols = shape[shape.length - 1];
  return { lead: count(shape.slice(0, -2)), rows, cols };
}

/**
 * The scale of an FP8 weight and its layout; `block` is the checkpoint's block size ([rows, cols], from
 * quantization_config, default 128×128). Throws a ConvertError naming the tensor for anything it cannot apply.
 */
export function fp8Scale(
  ckpt: ReadonlyMap<string, SafetensorsTensor>,
  t: SafetensorsTensor,
  block: readonly [number, number] = [128, 128],
): Fp8Scale {
  const names = scaleNames(t.name);
  const s = names.map((n) => ckpt.get(n)).find((x) => x !== undefined);
  if (s === undefined)
    throw new ConvertError(
      `tensor "${t.name}": dtype ${t.dtype} needs its scale, "${names[0]}" (DeepSeek-style FP8) or "${names[1]}" (compressed-tensors), and the checkpoint has neither`,
    );
  if (ckpt.has(t.name.replace(/\.weight$/, ".weight_zero_point")))
    throw new ConvertError(
      `tensor "${t.name}": FP8 with a zero point (asymmetric) is not supported, only symmetric scales`,
    );
  if (!["F32", "BF16", "F16"].includes(s.dtype))
    throw new ConvertError(`tensor "${s.name}": scale dtype ${s.dtype}, expected F32, BF16 or F16`);
  const { lead, rows, cols } = dims(t.shape);
  const lead0 = t.shape.slice(0, -2);
  const grid = [...lead0, Math.ceil(rows / block[0]), Math.ceil(cols / block[1])];
  const n = count(s.shape);
  const same = (a: readonly number[], b: readonly number[]): boolean =>
    a.length === b.length && a.every((x, i) => x === b[i]);
  if (n === 1) return { tensor: s, layout: { kind: "tensor" } };
  if (t.shape.length >= 2 && same(s.shape, grid))
    return { tensor: s, layout: { kind: "block", rows: block[0], cols: block[1] } };
  if (
    t.shape.length >= 2 &&
    n === lead * rows &&
    (same(s.shape, [...lead0, rows, 1]) || same(s.shape, [...lead0, rows]))
  )
    return { tensor: s, layout: { kind: "channel" } };
  throw new ConvertError(
    `tensor "${s.name}": scale shape [${s.shape.join(", ")}] fits no FP8 layout of the weight [${t.shape.join(", ")}]: expected [${grid.join(", ")}] (${block[0]}×${block[1]} blocks), [${[...lead0, rows, 1].join(", ")}] (one per output row) or one value`,
  );
}

/** `length` bytes of a tensor from byte `start` (positional reads in chunks). */
function readRange(t: SafetensorsTensor, start: number, length: number): Uint8Array {
  const buf = Buffer.alloc(length);
  const fd = openSync(t.file, "r");
  try {
    let done = 0;
    while (done < length) {
      const n = readSync(fd, buf, done, Math.min(length - done, READ_CHUNK), t.offset + start + done);
      if (n === 0) throw new ConvertError(`${t.file}: unexpected end of file in tensor "${t.name}"`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return new Uint8Array(buf.buffer, buf.byteOffset, length);
}

const SIZE: Readonly<Record<string, number>> = { F32: 4, F16: 2, BF16: 2, F8_E4M3: 1, F8_E5M2: 1 };

/** `n` float values (F32, F16, BF16) from byte `start`. */
function readFloats(t: SafetensorsTensor, start: number, n: number): Float32Array {
  const size = SIZE[t.dtype];
  if (size === undefined || FP8_DTYPES.has(t.dtype))
    throw new ConvertError(
      `tensor "${t.name}": dtype ${t.dtype} is not supported (F32, F16, BF16, or F8_E4M3/F8_E5M2 with a scale)`,
    );
  const b = readRange(t, start, n * size);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out = new Float32Array(n);
  if (t.dtype === "F32") for (let i = 0; i < n; i++) out[i] = v.getFloat32(i * 4, true);
  else if (t.dtype === "F16") for (let i = 0; i < n; i++) out[i] = f16ToF32(v.getUint16(i * 2, true));
  else for (let i = 0; i < n; i++) out[i] = bf16ToF32(v.getUint16(i * 2, true));
  return out;
}

/**
 * Rows [r0, r1) of slice `lead` (the index over the dims before the last two; 0 for a 2-D tensor) as float32,
 * row-major; a vector is one row. FP8 weights are multiplied by their scale (`scale`: from fp8Scale).
 */
export function readRowsF32(
  t: SafetensorsTensor,
  lead: number,
  r0: number,
  r1: number,
  scale?: Fp8Scale,
): Float32Array {
  const { lead: L, rows, cols } = dims(t.shape);
  if (!(lead >= 0 && lead < L && r0 >= 0 && r0 <= r1 && r1 <= rows))
    throw new RangeError(`rows ${r0}..${r1} of slice ${lead} of "${t.name}" [${t.shape.join(", ")}]`);
  const n = (r1 - r0) * cols;
  const first = (lead * rows + r0) * cols;
  if (!FP8_DTYPES.has(t.dtype)) return readFloats(t, first * SIZE[t.dtype], n);
  if (scale === undefined) throw new ConvertError(`tensor "${t.name}": dtype ${t.dtype} needs its scale`);
  const table = fp8Table(t.dtype)!;
  const bytes = readRange(t, first, n);
  const out = new Float32Array(n);
  const lay = scale.layout;
  if (lay.kind === "tensor") {
    const s = readFloats(scale.tensor, 0, 1)[0];
    for (let i = 0; i < n; i++) out[i] = table[bytes[i]] * s;
    return out;
  }
  if (lay.kind === "channel") {
    const s = readFloats(scale.tensor, (lead * rows + r0) * SIZE[scale.tensor.dtype], r1 - r0);
    for (let r = 0; r < r1 - r0; r++)
      for (let c = 0; c < cols; c++) out[r * cols + c] = table[bytes[r * cols + c]] * s[r];
    return out;
  }
  // block grid: the grid rows these rows fall in
  const gr = Math.ceil(rows / lay.rows);
  const gc = Math.ceil(cols / lay.cols);
  const g0 = Math.floor(r0 / lay.rows);
  const g1 = r1 === r0 ? g0 : Math.floor((r1 - 1) / lay.rows) + 1;
  const s = readFloats(scale.tensor, (lead * gr + g0) * gc * SIZE[scale.tensor.dtype], (g1 - g0) * gc);
  for (let r = r0; r < r1; r++) {
    const srow = (Math.floor(r / lay.rows) - g0) * gc;
    const base = (r - r0) * cols;
    for (let c = 0; c < cols; c++) out[base + c] = table[bytes[base + c]] * s[srow + Math.floor(c / lay.cols)];
  }
  return out;
}
