/**
 * safetensors reader: `u64 header length (LE)`, a JSON header `{name: {dtype, shape, data_offsets: [begin, end]}, __metadata__?}`,
 * then the raw little-endian bytes (offsets relative to the end of the header). Sharded checkpoints list their
 * files in `model.safetensors.index.json` (`weight_map: {tensor: file}`).
 * Tensors are read one at a time (positional reads), so memory stays at one tensor.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";
import { bf16ToF32, f16ToF32 } from "../quant/f16.js";
import { LatentError } from "../util/errors.js";
import { READ_CHUNK } from "../gguf/source-node.js";
import { dequantizeFp8, FP8_DTYPES, scaleGridShape } from "./fp8.js";

export class ConvertError extends LatentError {}

export type SafetensorsDType = "F32" | "F16" | "BF16";
const SIZES: Record<string, number> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};
const FLOAT_DTYPES: ReadonlySet<string> = new Set(["F32", "F16", "BF16"]);

export interface SafetensorsTensor {
  readonly name: string;
  readonly dtype: string;
  /** PyTorch shape (row-major, last dim contiguous) */
  readonly shape: readonly number[];
  readonly file: string;
  /** absolute byte offset in `file` */
  readonly offset: number;
  readonly nbytes: number;
}

interface HeaderEntry {
  dtype?: unknown;
  shape?: unknown;
  data_offsets?: unknown;
}

/** The tensor table of one .safetensors file (validated: known dtypes, sizes, offsets inside the file). */
export function readSafetensorsHeader(path: string): SafetensorsTensor[] {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    if (size < 8) throw new ConvertError(`${path}: not a safetensors file (${size} bytes)`);
    const lenBuf = Buffer.alloc(8);
    readSync(fd, lenBuf, 0, 8, 0);
    const n = lenBuf.readBigUInt64LE(0);
    if (n > BigInt(Math.min(size - 8, 100 * 1024 * 1024)))
      throw new ConvertError(`${path}: header length ${n} exceeds the file (${size} bytes)`);
    const hdr = Buffer.alloc(Number(n));
    readSync(fd, hdr, 0, hdr.length, 8);
    let json: unknown;
    try {
      json = JSON.parse(hdr.toString("utf8"));
    } catch (e) {
      throw new ConvertError(`${path}: header is not JSON (${(e as Error).message})`);
    }
    if (json === null || typeof json !== "object" || Array.isArray(json))
      throw new ConvertError(`${path}: header is not a JSON object`);
    const base = 8 + hdr.length;
    const out: SafetensorsTensor[] = [];
    for (const [name, v] of Object.entries(json as Record<string, HeaderEntry>)) {
      if (name === "__metadata__") continue;
      const { dtype, shape, data_offsets: offs } = v;
      if (typeof dtype !== "string" || SIZES[dtype] === undefined)
        throw new ConvertError(`${path}: tensor "${name}" has unknown dtype ${JSON.stringify(dtype)}`);
      if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0))
        throw new ConvertError(`${path}: tensor "${name}" has a bad shape`);
      if (
        !Array.isArray(offs) ||
        offs.length !== 2 ||
        !offs.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)
      )
        throw new ConvertError(`${path}: tensor "${name}" has bad data_offsets`);
      const [b, e] = offs as [number, number];
      const count = (shape as number[]).reduce((a, d) => a * d, 1);
      if (e - b !== count * SIZES[dtype])
        throw new ConvertError(
          `${path}: tensor "${name}" (${dtype} [${shape.join(", ")}]) spans ${e - b} bytes, expected ${count * SIZES[dtype]}`,
        );
      if (base + e > size)
        throw new ConvertError(`${path}: tensor "${name}" ends past the end of the file (truncated download?)`);
      out.push({ name, dtype, shape: shape as number[], file: path, offset: base + b, nbytes: e - b });
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

/** Every tensor of a checkpoint directory: model.safetensors, or the shards of model.safetensors.index.json. */
export function readCheckpoint(dir: string): Map<string, SafetensorsTensor> {
  const index = join(dir, "model.safetensors.index.json");
  const single = join(dir, "model.safetensors");
  let files: string[];
  if (existsSync(index)) {
    let map: unknown;
    try {
      map = (JSON.parse(readFileSync(index, "utf8")) as { weight_map?: unknown }).weight_map;
    } catch (e) {
      throw new ConvertError(`${index}: ${(e as Error).message}`);
    }
    if (map === null || typeof map !== "object") throw new ConvertError(`${index}: no weight_map`);
    files = [...new Set(Object.values(map as Record<string, string>))].sort();
    for (const f of files)
      if (!existsSync(join(dir, f)))
        throw new ConvertError(`${dir}: shard ${f} listed in model.safetensors.index.json is missing`);
  } else if (existsSync(single)) files = ["model.safetensors"];
  else {
    const bin = existsSync(join(dir, "pytorch_model.bin")) || existsSync(join(dir, "pytorch_model.bin.index.json"));
    throw new ConvertError(
      `${dir}: no model.safetensors or model.safetensors.index.json${bin ? " (PyTorch .bin checkpoints are not supported: re-save with safe_serialization=True)" : ""}`,
    );
  }
  const out = new Map<string, SafetensorsTensor>();
  for (const f of files) {
    for (const t of readSafetensorsHeader(join(dir, f))) {
      if (out.has(t.name)) throw new ConvertError(`${dir}: tensor "${t.name}" appears in two shards`);
      out.set(t.name, t);
    }
  }
  return out;
}

/** The raw bytes of a tensor (positional reads in chunks). */
function readBytes(t: SafetensorsTensor): Buffer {
  const buf = Buffer.alloc(t.nbytes);
  const fd = openSync(t.file, "r");
  try {
    let done = 0;
    while (done < t.nbytes) {
      const n = readSync(fd, buf, done, Math.min(t.nbytes - done, READ_CHUNK), t.offset + done);
      if (n === 0) throw new ConvertError(`${t.file}: unexpected end of file in tensor "${t.name}"`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return buf;
}

/**
 * A tensor's values as float32: F32, F16 and BF16; FP8 (F8_E4M3, F8_E5M2) with its `scaleInv` (one value, or the
 * 128×128 block grid of DeepSeek-style checkpoints; see fp8.ts). readWeightF32 finds the scale in a checkpoint.
 */
export function readTensorF32(t: SafetensorsTensor, scaleInv?: Float32Array): Float32Array {
  if (FP8_DTYPES.has(t.dtype)) {
    if (scaleInv === undefined)
      throw new ConvertError(
        `tensor "${t.name}": dtype ${t.dtype} is not supported without its block scales (FP8 checkpoints store them in "${t.name}${SCALE_SUFFIX}")`,
      );
    const bytes = readBytes(t);
    try {
      return dequantizeFp8(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length), t.dtype, t.shape, scaleInv);
    } catch (e) {
      throw new ConvertError(`tensor "${t.name}": ${(e as Error).message}`);
    }
  }
  if (!FLOAT_DTYPES.has(t.dtype))
    throw new ConvertError(
      `tensor "${t.name}": dtype ${t.dtype} is not supported (F32, F16, BF16, block-scaled F8_E4M3/F8_E5M2)`,
    );
  const buf = readBytes(t);
  const count = t.nbytes / (SIZES[t.dtype] ?? 1);
  const out = new Float32Array(count);
  if (t.dtype === "F32") {
    for (let i = 0; i < count; i++) out[i] = buf.readFloatLE(i * 4);
  } else if (t.dtype === "F16") {
    for (let i = 0; i < count; i++) out[i] = f16ToF32(buf.readUInt16LE(i * 2));
  } else {
    for (let i = 0; i < count; i++) out[i] = bf16ToF32(buf.readUInt16LE(i * 2));
  }
  return out;
}

/** Suffix of the FP8 scale tensors: `X.weight` → `X.weight_scale_inv`. */
export const SCALE_SUFFIX = "_scale_inv";

/** A checkpoint tensor as float32, FP8 weights multiplied by their `…_scale_inv` block scales. */
export function readWeightF32(ckpt: ReadonlyMap<string, SafetensorsTensor>, t: SafetensorsTensor): Float32Array {
  if (!FP8_DTYPES.has(t.dtype)) return readTensorF32(t);
  const s = ckpt.get(t.name + SCALE_SUFFIX);
  if (s === undefined) return readTensorF32(t); // throws the missing-scale error
  const grid = scaleGridShape(t.shape);
  const count = s.shape.reduce((a, d) => a * d, 1);
  if (count !== 1 && s.shape.join(",") !== grid.join(","))
    throw new ConvertError(
      `tensor "${s.name}": shape [${s.shape.join(", ")}], expected [${grid.join(", ")}] (128×128 blocks of [${t.shape.join(", ")}]) or one value`,
    );
  return readTensorF32(t, readTensorF32(s));
}
