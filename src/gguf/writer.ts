import { closeSync, openSync, writeSync } from "node:fs";
import { GGUFError } from "../util/errors.js";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUFValueType,
  typeName,
  typeTraits,
  type GGUFArray,
  type GGUFMetadataEntry,
  type GGUFValue,
} from "./types.js";
import { splitPath } from "./file.js";

/**
 * A tensor to write: its bytes come from `data` (already in the tensor's ggml type) or from a producer called at write
 * time, which may give them in pieces, in order (a converter producing a huge tensor expert by expert holds one piece).
 */
export interface TensorToWrite {
  readonly name: string;
  readonly ne: readonly number[];
  readonly type: number;
  readonly data: Uint8Array | (() => Uint8Array | Iterable<Uint8Array>);
}

export interface WriteOptions {
  /** tensors per shard; when set and smaller than the tensor count, writes `<prefix>-NNNNN-of-NNNNN.gguf` files */
  readonly maxTensorsPerShard?: number;
  /** called after each tensor's bytes are written */
  readonly onTensor?: (done: number, total: number, bytes: number) => void;
}

export function tensorBytes(ne: readonly number[], type: number): number {
  const t = typeTraits(type);
  if (t === undefined) throw new GGUFError(`unknown ggml type id ${type}`);
  if (ne[0] % t.blockSize !== 0)
    throw new GGUFError(`ne[0] = ${ne[0]} is not a multiple of the ${t.name} block size ${t.blockSize}`);
  return (ne.reduce((a, b) => a * b, 1) / t.blockSize) * t.typeSize;
}

/** Growable little-endian byte buffer for the header. */
class ByteSink {
  private buf = Buffer.alloc(1 << 16);
  length = 0;

  private grow(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = Buffer.alloc(size);
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  u8(v: number): void {
    this.grow(1);
    this.buf.writeUInt8(v, this.length);
    this.length += 1;
  }
  i8(v: number): void {
    this.grow(1);
    this.buf.writeInt8(v, this.length);
    this.length += 1;
  }
  u16(v: number): void {
    this.grow(2);
    this.buf.writeUInt16LE(v, this.length);
    this.length += 2;
  }
  i16(v: number): void {
    this.grow(2);
    this.buf.writeInt16LE(v, this.length);
    this.length += 2;
  }
  u32(v: number): void {
    this.grow(4);
    this.buf.writeUInt32LE(v, this.length);
    this.length += 4;
  }
  i32(v: number): void {
    this.grow(4);
    this.buf.writeInt32LE(v, this.length);
    this.length += 4;
  }
  f32(v: number): void {
    this.grow(4);
    this.buf.writeFloatLE(v, this.length);
    this.length += 4;
  }
  f64(v: number): void {
    this.grow(8);
    this.buf.writeDoubleLE(v, this.length);
    this.length += 8;
  }
  u64(v: bigint | number): void {
    this.grow(8);
    this.buf.writeBigUInt64LE(BigInt(v), this.length);
    this.length += 8;
  }
  i64(v: bigint | number): void {
    this.grow(8);
    this.buf.writeBigInt64LE(BigInt(v), this.length);
    this.length += 8;
  }
  string(s: string): void {
    const bytes = Buffer.from(s, "utf8");
    this.u64(bytes.length);
    this.grow(bytes.length);
    bytes.copy(this.buf, this.length);
    this.length += bytes.length;
  }
  pad(alignment: number): void {
    const n = (alignment - (this.length % alignment)) % alignment;
    this.grow(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function asNumber(v: GGUFValue, key: string): number {
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return Number(v);
  if (typeof v === "boolean") return v ? 1 : 0;
  throw new GGUFError(`metadata "${key}": expected a number, got ${typeof v}`);
}

function writeValue(sink: ByteSink, type: GGUFValueType, v: GGUFValue, key: string): void {
  switch (type) {
    case GGUFValueType.UINT8:
      return sink.u8(asNumber(v, key));
    case GGUFValueType.INT8:
      return sink.i8(asNumber(v, key));
    case GGUFValueType.UINT16:
      return sink.u16(asNumber(v, key));
    case GGUFValueType.INT16:
      return sink.i16(asNumber(v, key));
    case GGUFValueType.UINT32:
      return sink.u32(asNumber(v, key));
    case GGUFValueType.INT32:
      return sink.i32(asNumber(v, key));
    case GGUFValueType.FLOAT32:
      return sink.f32(asNumber(v, key));
    case GGUFValueType.FLOAT64:
      return sink.f64(asNumber(v, key));
    case GGUFValueType.UINT64:
      return sink.u64(typeof v === "bigint" ? v : BigInt(asNumber(v, key)));
    case GGUFValueType.INT64:
      return sink.i64(typeof v === "bigint" ? v : BigInt(asNumber(v, key)));
    case GGUFValueType.BOOL:
      return sink.u8(v === true || v === 1 ? 1 : 0);
    case GGUFValueType.STRING:
      if (typeof v !== "string") throw new GGUFError(`metadata "${key}": expected a string`);
      return sink.string(v);
    case GGUFValueType.ARRAY: {
      const arr = v as GGUFArray;
      if (typeof arr !== "object" || !("elementType" in arr))
        throw new GGUFError(`metadata "${key}": expected an array`);
      sink.u32(arr.elementType);
      sink.u64(arr.values.length);
      for (const item of arr.values) writeValue(sink, arr.elementType, item, key);
      return;
    }
    default:
      throw new GGUFError(`metadata "${key}": unknown value type ${type as number}`);
  }
}

function header(
  metadata: ReadonlyMap<string, GGUFMetadataEntry>,
  tensors: readonly TensorToWrite[],
  alignment: number,
): { bytes: Buffer; offsets: number[] } {
  const sink = new ByteSink();
  sink.u32(GGUF_MAGIC);
  sink.u32(3);
  sink.u64(tensors.length);
  sink.u64(metadata.size);
  for (const [key, entry] of metadata) {
    sink.string(key);
    sink.u32(entry.type);
    writeValue(sink, entry.type, entry.value, key);
  }
  const offsets: number[] = [];
  let offset = 0;
  for (const t of tensors) {
    sink.string(t.name);
    sink.u32(t.ne.length);
    for (const n of t.ne) sink.u64(n);
    sink.u32(t.type);
    sink.u64(offset);
    offsets.push(offset);
    offset += tensorBytes(t.ne, t.type);
    offset += (alignment - (offset % alignment)) % alignment;
  }
  sink.pad(alignment);
  return { bytes: sink.bytes(), offsets };
}

function alignmentOf(metadata: ReadonlyMap<string, GGUFMetadataEntry>): number {
  const a = metadata.get("general.alignment")?.value;
  if (a === undefined) return GGUF_DEFAULT_ALIGNMENT;
  if (typeof a !== "number" || !Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0) {
    throw new GGUFError(`general.alignment = ${typeof a === "object" ? "an array" : String(a)} is not a power of two`);
  }
  return a;
}

/** Most bytes one write takes: Node refuses a length past 2^31 − 1 (a GLM-5 expert tensor is 2.6 GB). */
const WRITE_CHUNK = 1 << 30;

/** Write all of `data` at file position `pos`, in writes of at most `chunk` bytes. */
export function writeAll(fd: number, data: Uint8Array, pos: number, chunk = WRITE_CHUNK): void {
  let written = 0;
  while (written < data.length)
    written += writeSync(fd, data, written, Math.min(chunk, data.length - written), pos + written);
}

/** Write one .gguf file: header, tensor infos, then each tensor's bytes padded to the alignment. */
export function writeGGUF(
  path: string,
  metadata: ReadonlyMap<string, GGUFMetadataEntry>,
  tensors: readonly TensorToWrite[],
  opts: WriteOptions = {},
  progressBase = 0,
  progressTotal = tensors.length,
): void {
  const alignment = alignmentOf(metadata);
  const { bytes, offsets } = header(metadata, tensors, alignment);
  const fd = openSync(path, "w");
  try {
    let pos = 0;
    while (pos < bytes.length) pos += writeSync(fd, bytes, pos, bytes.length - pos, pos);
    const zeros = new Uint8Array(alignment);
    tensors.forEach((t, i) => {
      const data = typeof t.data === "function" ? t.data() : t.data;
      const pieces = data instanceof Uint8Array ? [data] : data;
      const expected = tensorBytes(t.ne, t.type);
      const wrongSize = (got: string): GGUFError =>
        new GGUFError(`tensor "${t.name}" (${typeName(t.type)} ${t.ne.join("x")}) needs ${expected} bytes, got ${got}`);
      if (data instanceof Uint8Array && data.length !== expected) throw wrongSize(String(data.length));
      const at = bytes.length + offsets[i];
      while (pos < at) pos += writeSync(fd, zeros, 0, Math.min(at - pos, zeros.length), pos);
      let written = 0;
      for (const piece of pieces) {
        // checked before writing: a producer giving too much must not overwrite the next tensor's bytes
        if (written + piece.length > expected) throw wrongSize(`more than ${written + piece.length}`);
        writeAll(fd, piece, pos);
        pos += piece.length;
        written += piece.length;
      }
      if (written !== expected) throw wrongSize(String(written));
      opts.onTensor?.(progressBase + i + 1, progressTotal, written);
    });
    const end = pos + ((alignment - (pos % alignment)) % alignment);
    if (tensors.length > 0 && pos < end) writeSync(fd, zeros, 0, end - pos, pos);
  } finally {
    closeSync(fd);
  }
}

/**
 * Write a model, split into `<prefix>-NNNNN-of-NNNNN.gguf` shards when `maxTensorsPerShard` asks for it.
 * As llama.cpp's gguf-split does, shard 0 carries all metadata and the others only the `split.*` keys.
 * Returns the paths written.
 */
export function writeModel(
  pathOrPrefix: string,
  metadata: ReadonlyMap<string, GGUFMetadataEntry>,
  tensors: readonly TensorToWrite[],
  opts: WriteOptions = {},
): string[] {
  const per = opts.maxTensorsPerShard;
  if (per === undefined || per >= tensors.length) {
    writeGGUF(pathOrPrefix, metadata, tensors, opts);
    return [pathOrPrefix];
  }
  if (per < 1) throw new GGUFError(`maxTensorsPerShard must be at least 1, got ${per}`);
  const count = Math.ceil(tensors.length / per);
  if (count > 65535) throw new GGUFError(`${count} shards exceed the u16 split.count`);
  const prefix = pathOrPrefix.replace(/\.gguf$/, "");
  const paths: string[] = [];
  for (let i = 0; i < count; i++) {
    const splitKeys = new Map<string, GGUFMetadataEntry>([
      ["split.no", { type: GGUFValueType.UINT16, value: i }],
      ["split.count", { type: GGUFValueType.UINT16, value: count }],
      ["split.tensors.count", { type: GGUFValueType.INT32, value: tensors.length }],
    ]);
    const meta = new Map<string, GGUFMetadataEntry>();
    if (i === 0) {
      for (const [k, v] of metadata) if (!k.startsWith("split.")) meta.set(k, v);
    } else if (metadata.has("general.alignment")) {
      meta.set("general.alignment", metadata.get("general.alignment")!);
    }
    for (const [k, v] of splitKeys) meta.set(k, v);
    const path = splitPath(prefix, i + 1, count);
    writeGGUF(path, meta, tensors.slice(i * per, (i + 1) * per), opts, i * per, tensors.length);
    paths.push(path);
  }
  return paths;
}
