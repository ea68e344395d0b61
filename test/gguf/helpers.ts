/** Shared helpers for the GGUF tests: fixture paths, temp dirs, and a raw byte builder for hand-made (hostile) files. */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { GGUFValueType, type GGUFMetadataEntry, type GGUFValue } from "../../src/gguf/types.js";
import type { GGUFFile } from "../../src/gguf/file.js";
import type { TensorToWrite } from "../../src/gguf/writer.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const FIXTURE_DIR = join(ROOT, "test", "fixtures", "models");
export const MODEL_NAMES = ["ds2-lite", "ds2-qlora-softmax", "ds2-v3", "ds2-v3-mixed-q", "glm-dsa-topk8"] as const;
export type ModelName = (typeof MODEL_NAMES)[number];
export const fixture = (name: ModelName): string => join(FIXTURE_DIR, `${name}.gguf`);

/** A fresh temporary directory; call the returned cleanup in an `after` hook. */
export function tempDir(tag = "latent-gguf-"): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), tag));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Every tensor of an opened file as something `writeGGUF`/`writeModel` can write back. */
export function tensorsToWrite(file: GGUFFile): TensorToWrite[] {
  return [...file.tensors.values()].map((t) => ({
    name: t.name,
    ne: t.ne,
    type: t.type,
    data: () => file.readBytes(t),
  }));
}

/** Metadata of a file without the split.* keys (what a writer should get as input). */
export function plainMetadata(file: GGUFFile): Map<string, GGUFMetadataEntry> {
  const m = new Map<string, GGUFMetadataEntry>();
  for (const [k, v] of file.metadata.entries) if (!k.startsWith("split.")) m.set(k, v);
  return m;
}

/** Little-endian byte builder with no validation at all: writes exactly what it is told. */
export class Raw {
  private parts: Buffer[] = [];

  get length(): number {
    return this.parts.reduce((a, b) => a + b.length, 0);
  }
  bytes(b: Uint8Array | number[]): this {
    this.parts.push(Buffer.from(b));
    return this;
  }
  u8(v: number): this {
    const b = Buffer.alloc(1);
    b.writeUInt8(v);
    return this.bytes(b);
  }
  u16(v: number): this {
    const b = Buffer.alloc(2);
    b.writeUInt16LE(v);
    return this.bytes(b);
  }
  i32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    return this.bytes(b);
  }
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v >>> 0);
    return this.bytes(b);
  }
  u64(v: number | bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    return this.bytes(b);
  }
  f32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    return this.bytes(b);
  }
  /** u64 length + bytes; `len` overrides the written length */
  str(s: string | Uint8Array, len?: number): this {
    const b = typeof s === "string" ? Buffer.from(s, "utf8") : Buffer.from(s);
    this.u64(len ?? b.length);
    return this.bytes(b);
  }
  header(tensorCount: number | bigint, kvCount: number | bigint, version = 3): this {
    return this.bytes(Buffer.from("GGUF", "latin1")).u32(version).u64(tensorCount).u64(kvCount);
  }
  kvU32(key: string, v: number): this {
    return this.str(key).u32(GGUFValueType.UINT32).u32(v);
  }
  kvStr(key: string, v: string): this {
    return this.str(key).u32(GGUFValueType.STRING).str(v);
  }
  /** tensor info: name, ne, type, offset */
  tensor(name: string, ne: (number | bigint)[], type: number, offset: number | bigint): this {
    this.str(name).u32(ne.length);
    for (const n of ne) this.u64(n);
    return this.u32(type).u64(offset);
  }
  padTo(alignment: number): this {
    const n = (alignment - (this.length % alignment)) % alignment;
    return this.bytes(new Uint8Array(n));
  }
  zeros(n: number): this {
    return this.bytes(new Uint8Array(n));
  }
  build(): Buffer {
    return Buffer.concat(this.parts);
  }
  write(path: string): string {
    writeFileSync(path, this.build());
    return path;
  }
}

/** A metadata value with typed arrays (how numeric arrays are read) turned into plain arrays, for deepEqual. */
export function plainValue(v: GGUFValue): unknown {
  if (typeof v === "object" && v !== null && "elementType" in v) {
    return { elementType: v.elementType, values: Array.from(v.values as ArrayLike<GGUFValue>, plainValue) };
  }
  return v;
}
