// Test helper: a GGUF written out as a Hugging Face checkpoint directory, in BF16 (test/convert/hf-export.ts) or
// FP8 block-scaled as DeepSeek-V3/R1, Kimi-K2 and GLM-5 publish them (2-D linear weights in F8_E4M3 + F32
// `weight_scale_inv` per 128×128 block; embeddings, lm_head, router, norms and biases in BF16).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { parseConfig } from "../../src/model/config.js";
import { toHfStateDict } from "../../src/convert/names.js";
import { quantizeFp8Blocks } from "../../src/convert/fp8.js";
import { encodeValues, exportHf, safetensorsBytes } from "../convert/hf-export.js";

export const DEMO_HF_CONFIG = JSON.parse(
  readFileSync(new URL("../convert/fixtures/demo-config.json", import.meta.url), "utf8"),
) as Record<string, unknown>;

const KEEP_BF16 = /embed_tokens|lm_head|mlp\.gate\.weight|norm|bias/;

export interface CheckpointOptions {
  readonly dtype: "BF16" | "F32" | "FP8";
  /** tensors per shard (model-0000i-of-0000N.safetensors + index) */
  readonly shardTensors?: number;
}

/** Write `gguf` as an HF checkpoint in `dir` (config.json = `config`); returns dir. */
export function writeHfCheckpoint(
  gguf: string,
  dir: string,
  opts: CheckpointOptions,
  config: Record<string, unknown> = DEMO_HF_CONFIG,
): string {
  const file = GGUFFile.open(gguf);
  try {
    if (opts.dtype !== "FP8") {
      exportHf(file, config, dir, {
        dtype: opts.dtype,
        ...(opts.shardTensors !== undefined ? { shardTensors: opts.shardTensors } : {}),
      });
      return dir;
    }
    // config.json and the tokenizer files as the BF16 export writes them; the weights are replaced below
    exportHf(file, config, dir, { dtype: "BF16" });
    const c = parseConfig(file.metadata, file.tensors.get("token_embd.weight")?.ne[1]);
    const tensors: { name: string; dtype: string; shape: readonly number[]; data: Uint8Array }[] = [];
    for (const [name, t] of toHfStateDict(file, c)) {
      if (t.shape.length !== 2 || KEEP_BF16.test(name)) {
        tensors.push({ name, dtype: "BF16", shape: t.shape, data: encodeValues(t.data, "BF16") });
        continue;
      }
      const q = quantizeFp8Blocks(t.data, t.shape);
      tensors.push({ name, dtype: "F8_E4M3", shape: t.shape, data: q.bytes });
      tensors.push({
        name: `${name}_scale_inv`,
        dtype: "F32",
        shape: q.scaleShape,
        data: new Uint8Array(q.scale.buffer),
      });
    }
    const per = opts.shardTensors ?? tensors.length;
    const n = Math.ceil(tensors.length / per);
    if (n === 1) writeFileSync(join(dir, "model.safetensors"), safetensorsBytes(tensors));
    else {
      const weightMap: Record<string, string> = {};
      for (let i = 0; i < n; i++) {
        const shard = `model-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`;
        const part = tensors.slice(i * per, (i + 1) * per);
        for (const t of part) weightMap[t.name] = shard;
        writeFileSync(join(dir, shard), safetensorsBytes(part));
      }
      writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: weightMap }));
    }
    const quantization_config = {
      activation_scheme: "dynamic",
      fmt: "e4m3",
      quant_method: "fp8",
      weight_block_size: [128, 128],
    };
    writeFileSync(join(dir, "config.json"), JSON.stringify({ ...config, quantization_config }, null, 2));
    return dir;
  } finally {
    file.close();
  }
}
