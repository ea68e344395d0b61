/**
 * A GGUF's matrices re-quantized to the types the q8 kernels cover, for measuring q8 mode on a trained model: rows of
 * a multiple of 256 values → Q4_K, other multiples of 32 → Q5_0, output.weight → Q6_K; the token embedding, vectors
 * and other rows stay as they are.
 *
 *   node --import tsx research/cpu-relaxed/requant.ts IN.gguf OUT.gguf
 */
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { writeModel, type TensorToWrite } from "../../src/gguf/writer.js";
import { dequantize, quantize } from "../../src/quant/index.js";

const [input, out] = process.argv.slice(2);
const file = GGUFFile.open(input);
const meta = new Map(file.shards[0].metadata);
const counts = new Map<string, number>();
const tensors: TensorToWrite[] = [...file.tensors.values()]
  .sort((a, b) => a.shard - b.shard || a.offset - b.offset)
  .map((info) => {
    const cols = info.ne[0];
    const matrix = info.ne.length >= 2 && info.name !== "token_embd.weight";
    const type = !matrix
      ? info.type
      : info.name === "output.weight" && cols % 256 === 0
        ? GGMLType.Q6_K
        : cols % 256 === 0
          ? GGMLType.Q4_K
          : cols % 32 === 0
            ? GGMLType.Q5_0
            : info.type;
    counts.set(typeName(type), (counts.get(typeName(type)) ?? 0) + 1);
    if (type === info.type) return { name: info.name, ne: info.ne, type, data: () => file.readBytes(info) };
    return {
      name: info.name,
      ne: info.ne,
      type,
      data: () =>
        quantize(
          type,
          dequantize(
            info.type,
            file.readBytes(info),
            info.ne.reduce((a, b) => a * b, 1),
          ),
          cols,
        ),
    };
  });
writeModel(out, meta, tensors);
console.log(`wrote ${out}: ${[...counts].map(([t, n]) => `${n} ${t}`).join(", ")}`);
