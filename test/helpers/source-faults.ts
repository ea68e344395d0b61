// Conversion mistakes that every compute path shares, written into a copy of a GGUF (test-only; for
// `latent doctor --source`). Each edits the tensor list of test/helpers/gguf-rewrite.ts.
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType } from "../../src/gguf/types.js";
import { writeGGUF } from "../../src/gguf/writer.js";
import { parseConfig } from "../../src/model/config.js";
import { fromHfStateDict, generationMetadata, toHfStateDict } from "../../src/convert/names.js";
import { find, setValues, values, type RewriteTensor } from "./gguf-rewrite.js";

export type TensorEdit = (list: RewriteTensor[]) => void;

/** The data of two same-sized tensors exchanged (names and shapes stay). */
export function swapData(a: string, b: string): TensorEdit {
  return (list) => {
    const x = find(list, a);
    const y = find(list, b);
    if (x.bytes.length !== y.bytes.length || x.type !== y.type) throw new Error(`${a} and ${b} differ in size or type`);
    [x.bytes, y.bytes] = [y.bytes, x.bytes];
  };
}

/** The names of two tensors exchanged (each keeps its shape and data). */
export function swapNames(a: string, b: string): TensorEdit {
  return (list) => {
    const x = find(list, a);
    const y = find(list, b);
    [x.name, y.name] = [y.name, x.name];
  };
}

/** attn_k_b (ne {P, L, H}) holding each head's [P × L] block of kv_b reinterpreted instead of transposed. */
export function reshapeNotTranspose(name: string): TensorEdit {
  return (list) => {
    const t = find(list, name);
    const [P, L, H] = t.ne as [number, number, number];
    const v = values(t);
    const out = new Float32Array(v.length);
    for (let h = 0; h < H; h++)
      for (let c = 0; c < L; c++) for (let p = 0; p < P; p++) out[h * L * P + p * L + c] = v[(h * L + c) * P + p];
    setValues(t, out);
  };
}

/** The outermost slices (heads of k_b/v_b, experts of *_exps) of a tensor permuted: slice i ← slice perm[i]. */
export function permuteSlices(name: string, perm: readonly number[]): TensorEdit {
  return (list) => {
    const t = find(list, name);
    const v = values(t);
    const size = v.length / perm.length;
    const out = new Float32Array(v.length);
    perm.forEach((j, i) => out.set(v.subarray(j * size, (j + 1) * size), i * size));
    setValues(t, out);
  };
}

/** Expert e of a stacked tensor set to zero. */
export function zeroSlice(name: string, e: number): TensorEdit {
  return (list) => {
    const t = find(list, name);
    const v = values(t);
    const size = v.length / t.ne[t.ne.length - 1];
    v.fill(0, e * size, (e + 1) * size);
    setValues(t, v);
  };
}

export function scaleTensor(name: string, factor: number): TensorEdit {
  return (list) => {
    const t = find(list, name);
    setValues(
      t,
      values(t).map((x) => x * factor),
    );
  };
}

/** Re-encode as Q8_0, then give every 32-value block the scale of the next block (the last keeps its own). */
export function q8ScalesShifted(name: string): TensorEdit {
  return (list) => {
    const t = find(list, name);
    setValues(t, values(t), GGMLType.Q8_0);
    const b = t.bytes;
    const blocks = b.length / 34;
    for (let i = 0; i < blocks - 1; i++) {
      b[i * 34] = b[(i + 1) * 34];
      b[i * 34 + 1] = b[(i + 1) * 34 + 1];
    }
  };
}

/** Every tensor of ≥ 2 dimensions whose rows fit the type's blocks re-encoded in `type` (a requantized file). */
export function requantize(type: GGMLType, blockSize: number): TensorEdit {
  return (list) => {
    for (const t of list) if (t.ne.length >= 2 && t.ne[0] % blockSize === 0) setValues(t, values(t), type);
  };
}

/** `src` rewritten in the legacy generation (one attn_kv_b per layer, its metadata keys), as older converters wrote it. */
export function writeLegacyGeneration(src: string, dst: string): string {
  const f = GGUFFile.open(src);
  try {
    const c = parseConfig(f.metadata, f.tensors.get("token_embd.weight")?.ne[1]);
    writeGGUF(
      dst,
      generationMetadata(f.metadata.entries, c, "legacy"),
      fromHfStateDict(toHfStateDict(f, c), c, "legacy"),
    );
    return dst;
  } finally {
    f.close();
  }
}
