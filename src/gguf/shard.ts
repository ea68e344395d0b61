/**
 * GGUF header parsing over a ByteSource (browser-safe: no Node-only imports). `reader.ts` adds `readShard(path)` on
 * top for files on disk.
 */
import { GGUFError } from "../util/errors.js";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUFValueType,
  typeName,
  typeTraits,
  type GGUFArray,
  type GGUFNumberArrayValues,
  type GGUFMetadataEntry,
  type GGUFScalar,
  type GGUFValue,
} from "./types.js";
import { NotFetchedError, ShortReadError, type ByteSource } from "./source.js";

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
/** Longest metadata key accepted (llama.cpp keys are < 100 bytes). */
const MAX_KEY_BYTES = 65535;
/** Longest metadata string accepted: chat templates and the like are kilobytes; this stops a hostile length from allocating. */
export const MAX_STRING_BYTES = 256 * 1024 * 1024;
/** Most elements in one metadata array (the largest vocabularies are well under a million tokens). */
export const MAX_ARRAY_ELEMENTS = 1 << 26;
/**
 * Most strings in the arrays of one header. A string costs some 40 bytes of memory however short it is in the file,
 * so this bounds what a header of millions of tiny strings can cost (~170 MB); the largest real tokenizers hold
 * about 260 000 tokens and 500 000 merges.
 */
export const MAX_HEADER_STRINGS = 1 << 22;
const CHUNK = 1 << 20;
/** element types read straight into a typed array (little-endian hosts, as the file is) */
const TYPED_ARRAYS: ReadonlyMap<number, new (n: number) => GGUFNumberArrayValues> = new Map<
  number,
  new (
    n: number,
  ) => GGUFNumberArrayValues
>([
  [GGUFValueType.UINT8, Uint8Array],
  [GGUFValueType.INT8, Int8Array],
  [GGUFValueType.UINT16, Uint16Array],
  [GGUFValueType.INT16, Int16Array],
  [GGUFValueType.UINT32, Uint32Array],
  [GGUFValueType.INT32, Int32Array],
  [GGUFValueType.FLOAT32, Float32Array],
  [GGUFValueType.FLOAT64, Float64Array],
]);
const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** Array elements between two progress reports. */
const PROGRESS_EVERY = 8192;

/** Progress of reading one shard's header, reported while parsing (synchronously). */
export interface HeaderProgress {
  readonly path: string;
  /** bytes of the header consumed so far */
  readonly bytes: number;
  readonly keysDone: number;
  readonly keyCount: number;
  readonly tensorsDone: number;
  readonly tensorCount: number;
}

export interface ReadOptions {
  /** called now and then while the header is parsed; a huge tokenizer can take a second */
  readonly onProgress?: (p: HeaderProgress) => void;
}

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

function isValueType(t: number): t is GGUFValueType {
  return Number.isInteger(t) && t >= GGUFValueType.UINT8 && t <= GGUFValueType.FLOAT64;
}

/** The element of an array being read; one mutable object per array, so the hot path (tokenizer arrays) allocates nothing. */
class ElementOf {
  index = 0;
  constructor(readonly array: What) {}
}

/** What is being read, for error messages, built only when an error is raised. */
type What = string | (() => string) | ElementOf;
const say = (w: What): string =>
  typeof w === "string" ? w : w instanceof ElementOf ? `${say(w.array)}[${w.index}]` : w();

/** Sequential reader over a ByteSource with a sliding window; every read is bounds-checked against the source size. */
class Cursor {
  private window: Uint8Array = new Uint8Array(0);
  private view: DataView = new DataView(this.window.buffer);
  private windowStart = 0;
  pos = 0;
  /** strings the header's arrays may still hold (MAX_HEADER_STRINGS) */
  stringsLeft = MAX_HEADER_STRINGS;

  constructor(
    private readonly source: ByteSource,
    readonly fileSize: number,
    private readonly path: string,
  ) {}

  get remaining(): number {
    return this.fileSize - this.pos;
  }

  fail(message: string): GGUFError {
    return new GGUFError(`${this.path}: ${message}`);
  }

  /** Make n bytes at pos available in the window; returns their index in the window and advances pos. */
  private take(n: number, what: What): number {
    const rel = this.pos - this.windowStart;
    if (rel >= 0 && rel + n <= this.window.length) {
      this.pos += n;
      return rel;
    }
    if (n > this.remaining) {
      throw this.fail(
        `truncated file: ${say(what)} needs ${n} bytes at offset ${this.pos}, but the file ends at ${this.fileSize}`,
      );
    }
    const size = Math.min(Math.max(n, CHUNK), this.remaining);
    let buf: Uint8Array;
    try {
      buf = this.source.read(this.pos, size);
    } catch (e) {
      if (e instanceof NotFetchedError) throw e; // a prefetching caller fetches more and parses again
      if (e instanceof ShortReadError)
        throw this.fail(`unexpected end of file at offset ${e.at} (the file shrank while being read?)`);
      throw this.fail(`read error at offset ${this.pos}: ${(e as Error).message}`);
    }
    this.window = buf;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.windowStart = this.pos;
    this.pos += n;
    return 0;
  }

  /** dst.length bytes at pos copied into dst, a window at a time; advances pos. */
  bytesInto(dst: Uint8Array, what: What): void {
    for (let done = 0; done < dst.length; ) {
      const step = Math.min(dst.length - done, CHUNK);
      const i = this.take(step, what);
      dst.set(this.window.subarray(i, i + step), done);
      done += step;
    }
  }

  u8(what: What): number {
    const i = this.take(1, what); // (take first: it may replace this.window)
    return this.window[i];
  }
  i8(what: What): number {
    const i = this.take(1, what);
    return this.view.getInt8(i);
  }
  u16(what: What): number {
    const i = this.take(2, what);
    return this.view.getUint16(i, true);
  }
  i16(what: What): number {
    const i = this.take(2, what);
    return this.view.getInt16(i, true);
  }
  u32(what: What): number {
    const i = this.take(4, what);
    return this.view.getUint32(i, true);
  }
  i32(what: What): number {
    const i = this.take(4, what);
    return this.view.getInt32(i, true);
  }
  f32(what: What): number {
    const i = this.take(4, what);
    return this.view.getFloat32(i, true);
  }
  f64(what: What): number {
    const i = this.take(8, what);
    return this.view.getFloat64(i, true);
  }
  u64(what: What): bigint {
    const i = this.take(8, what);
    return this.view.getBigUint64(i, true);
  }
  i64(what: What): bigint {
    const i = this.take(8, what);
    return this.view.getBigInt64(i, true);
  }

  /** A u64 length or count as a number, or -1 when it is 2^53 or more (without BigInt: this is the hot path). */
  private u64Small(what: What): number {
    const i = this.take(8, what);
    const lo = this.view.getUint32(i, true);
    const hi = this.view.getUint32(i + 4, true);
    return hi >= 0x200000 ? -1 : hi * 0x100000000 + lo;
  }

  /** A u64 that must fit a JS number and not exceed `maxValue`; `why` explains the limit in the error. */
  size(what: What, maxValue: number, why: string): number {
    const at = this.pos;
    const v = this.u64Small(what);
    if (v < 0 || v > Math.max(0, maxValue)) {
      throw this.fail(
        `${say(what)} = ${this.view.getBigUint64(at - this.windowStart, true)} at offset ${at} is impossible: ${why}`,
      );
    }
    return v;
  }

  string(what: What, maxBytes = MAX_STRING_BYTES): string {
    const at = this.pos;
    const len = this.u64Small(what); // (no closure: this runs once per token)
    if (len < 0 || len > maxBytes) {
      throw this.fail(
        `${say(what)} at offset ${at} has length ${this.view.getBigUint64(at - this.windowStart, true)}, more than the ${maxBytes} bytes allowed`,
      );
    }
    if (len > this.remaining) {
      throw this.fail(
        `${say(what)} at offset ${at} has length ${len}, past the end of the file (${this.remaining} bytes left): truncated or corrupt`,
      );
    }
    const i = this.take(len, what);
    const w = this.window;
    let ascii = true;
    for (let j = i; j < i + len; j++) {
      if (w[j] >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return asciiString(w, i, i + len);
    // ignoreBOM: a leading BOM is kept (a rewrite must be byte-identical); fatal: invalid UTF-8 is an error.
    try {
      return UTF8.decode(w.subarray(i, i + len));
    } catch {
      throw this.fail(`${say(what)} at offset ${at + 8} is not valid UTF-8`);
    }
  }
}

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const ASCII_CHUNK = 4096;

/** Bytes < 0x80 as a string: String.fromCharCode over the bytes (no decoder round trip for short token strings). */
function asciiString(w: Uint8Array, start: number, end: number): string {
  if (end - start <= ASCII_CHUNK) return String.fromCharCode.apply(null, w.subarray(start, end) as unknown as number[]);
  let s = "";
  for (let p = start; p < end; p += ASCII_CHUNK)
    s += String.fromCharCode.apply(null, w.subarray(p, Math.min(end, p + ASCII_CHUNK)) as unknown as number[]);
  return s;
}

function readScalar(c: Cursor, type: GGUFValueType, what: What): GGUFScalar {
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
      const at = c.pos;
      const b = c.u8(what);
      if (b > 1) throw c.fail(`${say(what)}: bool byte at offset ${at} is ${b}, expected 0 or 1`);
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
      throw c.fail(`${say(what)}: unknown metadata value type ${type as number}`);
  }
}

function readValue(c: Cursor, type: number, what: What, depth: number, tick: () => void): GGUFValue {
  if (type === GGUFValueType.ARRAY) {
    if (depth >= MAX_ARRAY_DEPTH) throw c.fail(`${say(what)}: arrays nested deeper than ${MAX_ARRAY_DEPTH} levels`);
    const typeAt = c.pos;
    const elementType = c.u32(() => `element type of ${say(what)}`);
    if (!isValueType(elementType))
      throw c.fail(`${say(what)}: unknown array element type ${elementType} at offset ${typeAt}`);
    const countAt = c.pos;
    const countV = c.u64(() => `element count of ${say(what)}`);
    const minSize = minEncodedSize(elementType);
    if (countV > BigInt(Math.floor(c.remaining / minSize))) {
      throw c.fail(
        `${say(what)}: array count ${countV} at offset ${countAt} needs at least ${countV * BigInt(minSize)} bytes, but only ${c.remaining} are left: truncated or corrupt`,
      );
    }
    if (countV > BigInt(MAX_ARRAY_ELEMENTS))
      throw c.fail(`${say(what)}: array count ${countV} exceeds the limit of ${MAX_ARRAY_ELEMENTS} elements`);
    const count = Number(countV);
    const Typed = LITTLE_ENDIAN_HOST ? TYPED_ARRAYS.get(elementType) : undefined;
    if (Typed !== undefined) {
      const typed = new Typed(count);
      c.bytesInto(new Uint8Array(typed.buffer), what);
      tick();
      return { elementType, values: typed };
    }
    if (elementType === GGUFValueType.STRING) {
      if (count > c.stringsLeft) {
        throw c.fail(
          `${say(what)}: ${count} strings take the header past ${MAX_HEADER_STRINGS} strings in arrays, far more than any tokenizer has: corrupt or hostile`,
        );
      }
      c.stringsLeft -= count;
    }
    const values: GGUFValue[] = new Array<GGUFValue>(count);
    const element = new ElementOf(what);
    if (elementType === GGUFValueType.ARRAY) {
      for (let i = 0; i < count; i++) {
        element.index = i;
        values[i] = readValue(c, elementType, () => `${say(what)}[${i}]`, depth + 1, tick);
      }
    } else {
      for (let i = 0; i < count; i++) {
        element.index = i;
        values[i] = readScalar(c, elementType, element);
        if ((i & (PROGRESS_EVERY - 1)) === PROGRESS_EVERY - 1) tick();
      }
    }
    const arr: GGUFArray = { elementType, values };
    return arr;
  }
  if (!isValueType(type)) throw c.fail(`${say(what)}: unknown metadata value type ${type}`);
  return readScalar(c, type, what);
}

/**
 * Parse the header of one GGUF shard read through `source` (its name is the shard's path in messages), without reading
 * tensor data. A PrefetchedSource that lacks part of the header makes this throw NotFetchedError: fetch more, parse again.
 */
export function parseShard(source: ByteSource, opts: ReadOptions = {}): GGUFShard {
  const path = source.name;
  const fileSize = source.size;
  const c = new Cursor(source, fileSize, path);
  if (fileSize < 8) throw new GGUFError(`${path}: not a GGUF file (only ${fileSize} bytes)`);
  const magic = c.u32("magic");
  if (magic !== GGUF_MAGIC) {
    throw new GGUFError(`${path}: not a GGUF file (magic 0x${magic.toString(16).padStart(8, "0")}, expected "GGUF")`);
  }
  const version = c.u32("version");
  if (version !== 2 && version !== 3) {
    const swapped =
      ((version & 0xff) << 24) | ((version & 0xff00) << 8) | ((version >>> 8) & 0xff00) | (version >>> 24);
    if (swapped === 2 || swapped === 3)
      throw new GGUFError(`${path}: big-endian GGUF (version ${swapped}) is not supported`);
    throw new GGUFError(`${path}: unsupported GGUF version ${version} (supported: 2, 3)`);
  }
  // A tensor info is at least 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset) bytes; a KV at least 8 + 4 + 1.
  const tensorCount = c.size(
    "tensor count",
    Math.floor((fileSize - 24) / 32),
    `the file (${fileSize} bytes) cannot hold that many tensor infos`,
  );
  const kvCount = c.size(
    "metadata count",
    Math.floor((fileSize - 24) / 13),
    `the file (${fileSize} bytes) cannot hold that many metadata entries`,
  );

  const onProgress = opts.onProgress;
  let keysDone = 0;
  let tensorsDone = 0;
  const tick =
    onProgress === undefined
      ? () => {}
      : () => onProgress({ path, bytes: c.pos, keysDone, keyCount: kvCount, tensorsDone, tensorCount });

  const metadata = new Map<string, GGUFMetadataEntry>();
  for (let i = 0; i < kvCount; i++) {
    const keyAt = c.pos;
    const key = c.string(() => `metadata key #${i}`, MAX_KEY_BYTES);
    if (metadata.has(key)) throw c.fail(`duplicate metadata key "${key}" at offset ${keyAt}`);
    const typeAt = c.pos;
    const type = c.u32(() => `type of metadata "${key}"`);
    if (!isValueType(type)) throw c.fail(`metadata "${key}" has unknown value type ${type} at offset ${typeAt}`);
    const value = readValue(c, type, () => `metadata "${key}"`, 0, tick);
    metadata.set(key, { type, value });
    keysDone = i + 1;
    tick();
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const alignEntry = metadata.get("general.alignment");
  if (alignEntry !== undefined) {
    const a = alignEntry.value;
    if (typeof a !== "number" || !Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0) {
      throw new GGUFError(
        `${path}: general.alignment = ${typeof a === "object" ? "an array" : String(a)} is not a power of two`,
      );
    }
    alignment = a;
  }

  const infos: { name: string; ne: number[]; type: number; relativeOffset: number; nbytes: number }[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const nameAt = c.pos;
    const name = c.string(() => `name of tensor #${i}`, MAX_NAME_BYTES);
    if (name.length === 0) throw c.fail(`tensor #${i} at offset ${nameAt} has an empty name`);
    if (seen.has(name)) throw c.fail(`duplicate tensor name "${name}" at offset ${nameAt}`);
    seen.add(name);
    const nDims = c.u32(() => `n_dims of tensor "${name}"`);
    if (nDims < 1 || nDims > MAX_DIMS)
      throw c.fail(`tensor "${name}" has ${nDims} dimensions (1..${MAX_DIMS} allowed)`);
    const ne: number[] = [];
    let elements = 1;
    for (let d = 0; d < nDims; d++) {
      const n = c.size(() => `ne[${d}] of tensor "${name}"`, Number.MAX_SAFE_INTEGER, "larger than 2^53");
      elements *= n;
      ne.push(n);
      if (elements > Number.MAX_SAFE_INTEGER)
        throw c.fail(`tensor "${name}" element count overflows (ne = [${ne.join(", ")}])`);
    }
    const typeAt = c.pos;
    const type = c.u32(() => `type of tensor "${name}"`);
    const traits = typeTraits(type);
    if (traits === undefined) throw c.fail(`tensor "${name}" has unknown ggml type id ${type} (at offset ${typeAt})`);
    if (ne[0] % traits.blockSize !== 0) {
      throw c.fail(
        `tensor "${name}" of type ${traits.name} has ne[0] = ${ne[0]}, not a multiple of the block size ${traits.blockSize}`,
      );
    }
    const nbytes = (elements / traits.blockSize) * traits.typeSize;
    if (nbytes > fileSize) {
      throw c.fail(
        `tensor "${name}" (${traits.name}, ne = [${ne.join(", ")}]) would take ${nbytes} bytes, more than the whole file (${fileSize} bytes): truncated or corrupt`,
      );
    }
    const relativeOffset = c.size(
      () => `offset of tensor "${name}"`,
      fileSize,
      `past the end of the file (${fileSize} bytes)`,
    );
    if (relativeOffset % alignment !== 0) {
      throw c.fail(`tensor "${name}" offset ${relativeOffset} is not a multiple of the alignment ${alignment}`);
    }
    infos.push({ name, ne, type, relativeOffset, nbytes });
    tensorsDone = i + 1;
    if ((i & 255) === 255) tick();
  }
  tick();

  const dataOffset = c.pos + ((alignment - (c.pos % alignment)) % alignment);
  if (tensorCount > 0 && dataOffset > fileSize)
    throw c.fail(`truncated file: data section would start at ${dataOffset}, file has ${fileSize} bytes`);
  const blobSize = fileSize - dataOffset;
  for (const t of infos) {
    if (t.relativeOffset + t.nbytes > blobSize) {
      throw c.fail(
        `tensor "${t.name}" (${typeName(t.type)}, ${t.nbytes} bytes at data offset ${t.relativeOffset}) extends past the end of the file (data section is ${blobSize} bytes): truncated file?`,
      );
    }
  }
  // Zero-sized tensors occupy nothing and may share an offset with anything.
  const byOffset = infos.filter((t) => t.nbytes > 0).sort((a, b) => a.relativeOffset - b.relativeOffset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1];
    const cur = byOffset[i];
    if (prev.relativeOffset + prev.nbytes > cur.relativeOffset) {
      throw c.fail(
        `tensors "${prev.name}" ([${prev.relativeOffset}, ${prev.relativeOffset + prev.nbytes})) and "${cur.name}" ([${cur.relativeOffset}, ${cur.relativeOffset + cur.nbytes})) overlap in the data section`,
      );
    }
  }
  const tensors: TensorInfo[] = infos.map((t) => ({ ...t, shard: 0, offset: dataOffset + t.relativeOffset }));
  return { path, version, fileSize, metadata, tensors, alignment, dataOffset };
}
