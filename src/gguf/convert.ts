import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "./types.js";
import { dequantize } from "../quant/index.js";
import type { GGUFFile } from "./file.js";
import { writeModel, type TensorToWrite } from "./writer.js";

/**
 * Rewrite a GGUF with every tensor dequantized to F32 (same names, shapes, metadata; file_type 0). llama.cpp run on
 * such a file does exact f32 math on the quantized weights, which makes it a tight oracle for a quantized model.
 */
export function rewriteAsF32(file: GGUFFile, out: string, onTensor?: (done: number, total: number) => void): string[] {
  const meta = new Map<string, GGUFMetadataEntry>();
  for (const [k, v] of file.shards[0].metadata) if (!k.startsWith("split.")) meta.set(k, v);
  meta.set("general.file_type", { type: GGUFValueType.UINT32, value: 0 });
  const tensors: TensorToWrite[] = [...file.tensors.values()]
    .sort((a, b) => a.shard - b.shard || a.offset - b.offset)
    .map((info) => ({
      name: info.name,
      ne: info.ne,
      type: GGMLType.F32,
      data: () => {
        const f = dequantize(
          info.type,
          file.readBytes(info),
          info.ne.reduce((a, b) => a * b, 1),
        );
        return new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
      },
    }));
  return writeModel(out, meta, tensors, { onTensor: onTensor ? (d, t) => onTensor(d, t) : undefined });
}
