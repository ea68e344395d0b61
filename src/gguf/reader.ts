import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { GGUFError } from "../util/errors.js";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUFValueType,
  typeName,
  typeTraits,
  type GGUFArray,
  type GGUFMetadataEntry,
  type GGUFScalar,
  type GGUFValue,
} from "./types.js";
import { Metadata } from "./metadata.js";

/** Where one tensor lives: ggml dims (ne[0] fastest), type, and its absolute byte range in one shard file. */
export interface TensorInfo {
  readonly name: string;
  readonly ne: readonly number[];
  readonly type: number;
  /** index into the model's shard list */
  readonly shard: number;
  /** offset relative to the shard's data blob, as written in the file */
  readonly relativeOffset: number;
  /** absolute offset in the shard file */
  readonly offset: number;
  readonly nbytes: number;
}

/** One parsed .gguf file: header, metadata, tensor infos; tensor data stays on disk. */
export interface GGUFShard {
  readonly path: string;
  readonly version: number;
  readonly fileSize: number;
  readonly metadata: Map<string, GGUFMetadataEntry>;
  /** tensor infos in file order */
  readonly tensors: TensorInfo[];
  readonly alignment: number;
  readonly dataOffset: number;
}

const MAX_NAME_BYTES = 64;
const MAX_DIMS = 4;
const MAX_ARRAY_DEPTH = 8;
const CHUNK = 1 << 20;

const SCALAR_SIZE: Partial<Record<GGUFValueType, number>> = {
  [GGUFValueType.UINT8]: 1,
  [GGUFValueType.INT8]: 1,
  [GGUFValueType.UINT16]: 2,
  [GGUFValueType.INT16]: 2,
  [GGUFValueType.UINT32]: 4,
  [GGUFValueType.INT32]: 4,
  [GGUFValueType.FLOAT32]: 4,
  [GGUFValueType.BOOL]: 1,
  [GGUFValueType.UINT64]: 8,
  [GGUFValueType.INT64]: 8,
  [GGUFValueType.FLOAT64]: 8,
};

/** Smallest encoded size of one value of a type: bounds counts by the bytes left, so a hostile count cannot allocate. */
function minEncodedSize(type: GGUFValueType): number {
  if (type === GGUFValueType.STRING) return 8;
  if (type === GGUFValueType.ARRAY) return 12;
  return SCALAR_SIZE[type] ?? 1;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Sequential reader over a file descriptor with a sliding window; every read is bounds-checked against the file size. */
class Cursor {
  private window = Buffer.alloc(0);
  private windowStart = 0;
  pos = 0;

  constructor(
    private readonly fd: number,
    readonly fileSize: number,
    private readonly path: string,
  ) {}

  get remaining(): number {
    return this.fileSize - this.pos;
  }

  private need(n: number, what: string): Buffer {
    if (n > this.remaining) {
      throw new GGUFError(`${this.path}: truncated file: ${what} needs ${n} bytes at offset ${this.pos}, file has ${this.fileSize}`);
    }
    const rel = this.pos - this.windowStart;
    if (rel < 0 || rel + n > this.window.length) {
      const size = Math.min(Math.max(n, CHUNK), this.remaining);
      const buf = Buffer.allocUnsafe(size);
      let got = 0;
      while (got < size) {
        const r = readSync(this.fd, buf, got, size - got, this.pos + got);
        if (r === 0) throw new GGUFError(`${this.path}: unexpected end of file at offset ${this.pos + got}`);
        got += r;
      }
      this.window = buf;
      this.windowStart = this.pos;
    }
    const start = this.pos - this.windowStart;
    this.pos += n;
    return this.window.subarray(start, start + n);
  }

  u8(what: string): number {
    return this.need(1, what).readUInt8(0);
  }
  i8(what: string): number {
    return this.need(1, what).readInt8(0);
  }
  u16(what: string): number {
    return this.need(2, what).readUInt16LE(0);
  }
  i16(what: string): number {
    return this.need(2, what).readInt16LE(0);
  }
  u32(what: string): number {
    return this.need(4, what).readUInt32LE(0);
  }
  i32(what: string): number {
    return this.need(4, what).readInt32LE(0);
  }
  f32(what: string): number {
    return this.need(4, what).readFloatLE(0);
  }
  f64(what: string): number {
    return this.need(8, what).readDoubleLE(0);
  }
  u64(what: string): bigint {
    return this.need(8, what).readBigUInt64LE(0);
  }
  i64(what: string): bigint {
    return this.need(8, what).readBigInt64LE(0);
  }

  /** A u64 that must fit a JS number and, when `maxValue` is given, not exceed it. */
  size(what: string, maxValue = Number.MAX_SAFE_INTEGER): number {
    const v = this.u64(what);
    if (v > BigInt(maxValue)) {
      throw new GGUFError(`${this.path}: ${what} = ${v} at offset ${this.pos - 8} is larger than possible (max ${maxValue})`);
    }
    return Number(v);
  }

  string(what: string, maxBytes = this.remaining): string {
    const len = this.size(`length of ${what}`, Math.min(maxBytes, this.remaining));
    const bytes = this.need(len, what);
    try {
      return utf8.decode(bytes);
    } catch {
      throw new GGUFError(`${this.path}: ${what} at offset ${this.pos - len} is not valid UTF-8`);
    }
  }
}

function readScalar(c: Cursor, type: GGUFValueType, what: string): GGUFScalar {
  switch (type) {
    case GGUFValueType.UINT8:
      return c.u8(what);
    case GGUFValueType.INT8:
      return c.i8(what);
    case GGUFValueType.UINT16:
      return c.u16(what);
    case GGUFValueType.INT16:
      return c.i16(what);
    case GGUFValueType.UINT32:
      return c.u32(what);
    case GGUFValueType.INT32:
      return c.i32(what);
    case GGUFValueType.FLOAT32:
      return c.f32(what);
    case GGUFValueType.BOOL: {
      const b = c.u8(what);
      if (b > 1) throw new GGUFError(`${what}: bool byte is ${b}, expected 0 or 1`);
      return b === 1;
    }
    case GGUFValueType.STRING:
      return c.string(what);
    case GGUFValueType.UINT64:
      return c.u64(what);
    case GGUFValueType.INT64:
      return c.i64(what);
    case GGUFValueType.FLOAT64:
      return c.f64(what);
    default:
      throw new GGUFError(`${what}: unknown metadata value type ${type as number}`);
  }
}

function readValue(c: Cursor, type: number, what: string, depth: number): GGUFValue {
  if (type === GGUFValueType.ARRAY) {
    if (depth >= MAX_ARRAY_DEPTH) throw new GGUFError(`${what}: arrays nested deeper than ${MAX_ARRAY_DEPTH}`);
    const elementType = c.u32(`element type of ${what}`);
    if (!(elementType in GGUFValueType)) throw new GGUFError(`${what}: unknown array element type ${elementType}`);
    const maxCount = Math.floor(c.remaining / minEncodedSize(elementType));
    const count = c.size(`element count of ${what}`, Math.max(0, maxCount - 1));
    const values: GGUFValue[] = new Array<GGUFValue>(count);
    for (let i = 0; i < count; i++) values[i] = readValue(c, elementType, `${what}[${i}]`, depth + 1);
    const arr: GGUFArray = { elementType, values };
    return arr;
  }
  if (!(type in GGUFValueType)) throw new GGUFError(`${what}: unknown metadata value type ${type}`);
  return readScalar(c, type as GGUFValueType, what);
}

/** Parse the header of one .gguf file without reading tensor data. */
export function readShard(path: string): GGUFShard {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    throw new GGUFError(`cannot open ${path}: ${(e as Error).message}`);
  }
  try {
    return parseHeader(fd, path);
  } finally {
    closeSync(fd);
  }
}

function parseHeader(fd: number, path: string): GGUFShard {
  const fileSize = fstatSync(fd).size;
  const c = new Cursor(fd, fileSize, path);
  if (fileSize < 4) throw new GGUFError(`${path}: not a GGUF file (${fileSize} bytes)`);
  const magic = c.u32("magic");
  if (magic !== GGUF_MAGIC) {
    throw new GGUFError(`${path}: not a GGUF file (magic 0x${magic.toString(16).padStart(8, "0")}, expected "GGUF")`);
  }
  const version = c.u32("version");
  if (version !== 2 && version !== 3) {
    throw new GGUFError(`${path}: unsupported GGUF version ${version} (supported: 2, 3)`);
  }
  // A tensor info is at least 8 (name len) + 4 (n_dims) + 4 (type) + 8 (offset) bytes; a KV at least 8+4+1.
  const tensorCount = c.size("tensor count", Math.floor((fileSize - 24) / 24));
  const kvCount = c.size("metadata count", Math.floor((fileSize - 24) / 13));

  const metadata = new Map<string, GGUFMetadataEntry>();
  for (let i = 0; i < kvCount; i++) {
    const key = c.string(`metadata key #${i}`, 65535);
    if (metadata.has(key)) throw new GGUFError(`${path}: duplicate metadata key "${key}"`);
    const type = c.u32(`type of metadata "${key}"`);
    const value = readValue(c, type, `metadata "${key}"`, 0);
    metadata.set(key, { type, value });
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const alignEntry = metadata.get("general.alignment");
  if (alignEntry !== undefined) {
    const a = alignEntry.value;
    if (typeof a !== "number" || !Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0 || a % 8 !== 0) {
      throw new GGUFError(`${path}: general.alignment = ${String(a)} is not a power of two multiple of 8`);
    }
    alignment = a;
  }

  const infos: { name: string; ne: number[]; type: number; relativeOffset: number; nbytes: number }[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = c.string(`name of tensor #${i}`, MAX_NAME_BYTES);
    if (seen.has(name)) throw new GGUFError(`${path}: duplicate tensor name "${name}"`);
    seen.add(name);
    const nDims = c.u32(`n_dims of tensor "${name}"`);
    if (nDims < 1 || nDims > MAX_DIMS) throw new GGUFError(`${path}: tensor "${name}" has ${nDims} dimensions (1..${MAX_DIMS} allowed)`);
    const ne: number[] = [];
    let elements = 1;
    for (let d = 0; d < nDims; d++) {
      const n = c.size(`ne[${d}] of tensor "${name}"`);
      if (n < 1) throw new GGUFError(`${path}: tensor "${name}" has ne[${d}] = 0`);
      elements *= n;
      if (elements > Number.MAX_SAFE_INTEGER) throw new GGUFError(`${path}: tensor "${name}" element count overflows (ne = ${[...ne, n].join("x")})`);
      ne.push(n);
    }
    const type = c.u32(`type of tensor "${name}"`);
    const traits = typeTraits(type);
    if (traits === undefined) throw new GGUFError(`${path}: tensor "${name}" has unknown ggml type id ${type}`);
    if (ne[0]! % traits.blockSize !== 0) {
      throw new GGUFError(`${path}: tensor "${name}" of type ${traits.name} has ne[0] = ${ne[0]}, not a multiple of the block size ${traits.blockSize}`);
    }
    const nbytes = (elements / traits.blockSize) * traits.typeSize;
    const relativeOffset = c.size(`offset of tensor "${name}"`);
    if (relativeOffset % alignment !== 0) {
      throw new GGUFError(`${path}: tensor "${name}" offset ${relativeOffset} is not a multiple of the alignment ${alignment}`);
    }
    infos.push({ name, ne, type, relativeOffset, nbytes });
  }

  const dataOffset = c.pos + ((alignment - (c.pos % alignment)) % alignment);
  if (tensorCount > 0 && dataOffset > fileSize) throw new GGUFError(`${path}: truncated file: data section would start at ${dataOffset}, file has ${fileSize} bytes`);
  const blobSize = fileSize - dataOffset;
  for (const t of infos) {
    if (t.relativeOffset + t.nbytes > blobSize) {
      throw new GGUFError(
        `${path}: tensor "${t.name}" (${typeName(t.type)}, ${t.nbytes} bytes at data offset ${t.relativeOffset}) extends past the end of the file (data section is ${blobSize} bytes): truncated file?`,
      );
    }
  }
  const byOffset = [...infos].sort((a, b) => a.relativeOffset - b.relativeOffset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1]!;
    const cur = byOffset[i]!;
    if (prev.relativeOffset + prev.nbytes > cur.relativeOffset) {
      throw new GGUFError(`${path}: tensors "${prev.name}" and "${cur.name}" overlap in the data section`);
    }
  }
  const tensors: TensorInfo[] = infos.map((t) => ({ ...t, shard: 0, offset: dataOffset + t.relativeOffset }));
  return { path, version, fileSize, metadata, tensors, alignment, dataOffset };
}

export { Metadata };
