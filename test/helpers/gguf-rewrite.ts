// Rewrite a GGUF with edits (test-only): metadata changes, tensors replaced, renamed, dropped, or re-encoded.
// Fault suites build their broken files with it; every tensor is available as float32 values in ggml order.
import { GGUFFile } from "../../src/gguf/file.js";
import { writeGGUF, type TensorToWrite } from "../../src/gguf/writer.js";
import { GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { dequantize, quantize } from "../../src/quant/index.js";

/** One tensor of the file being rewritten. */
export interface RewriteTensor {
  name: string;
  ne: number[];
  type: number;
  /** the stored bytes in `type` */
  bytes: Uint8Array;
}

export interface Rewrite {
  /** edit the metadata in place (`m.set(key, entry)`, `m.delete(key)`) */
  readonly meta?: (m: Map<string, GGUFMetadataEntry>, arch: string) => void;
  /** edit the tensor list in place (replace, rename, drop, reorder) */
  readonly tensors?: (list: RewriteTensor[]) => void;
}

/** float32 values of a tensor (ggml order: ne[0] fastest). */
export function values(t: RewriteTensor): Float32Array {
  return dequantize(
    t.type,
    t.bytes,
    t.ne.reduce((a, b) => a * b, 1),
    t.name,
  );
}

/** Set a tensor's values, re-encoded in `type` (default: its own type). */
export function setValues(t: RewriteTensor, v: Float32Array, type = t.type): void {
  t.type = type;
  t.bytes = quantize(type, v, t.ne[0], t.name);
}

export function find(list: readonly RewriteTensor[], name: string): RewriteTensor {
  const t = list.find((x) => x.name === name);
  if (t === undefined) throw new Error(`no tensor ${name}`);
  return t;
}

export const u32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT32, value });
export const f32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.FLOAT32, value });
export const str = (value: string): GGUFMetadataEntry => ({ type: GGUFValueType.STRING, value });
export const bool = (value: boolean): GGUFMetadataEntry => ({ type: GGUFValueType.BOOL, value });

/** Copy `src` to `dst` with the edits applied. Returns `dst`. */
export function rewriteGGUF(src: string, dst: string, edit: Rewrite): string {
  const file = GGUFFile.open(src);
  try {
    const arch = file.metadata.string("general.architecture") ?? "";
    const meta = new Map<string, GGUFMetadataEntry>(file.metadata.entries);
    edit.meta?.(meta, arch);
    const list: RewriteTensor[] = [...file.tensors.values()].map((info) => ({
      name: info.name,
      ne: [...info.ne],
      type: info.type,
      bytes: file.readBytes(info),
    }));
    edit.tensors?.(list);
    const out: TensorToWrite[] = list.map((t) => ({ name: t.name, ne: t.ne, type: t.type, data: t.bytes }));
    writeGGUF(dst, meta, out);
    return dst;
  } finally {
    file.close();
  }
}
