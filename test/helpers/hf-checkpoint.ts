// Test helper: a GGUF written out as a Hugging Face checkpoint directory, in BF16 (test/convert/hf-export.ts) or
// FP8 block-scaled as DeepSeek-V3/R1, Kimi-K2 and GLM-5 publish them (2-D linear weights in F8_E4M3 + F32
// `weight_scale_inv` per 128×128 block; embeddings, lm_head, router, norms and biases in BF16).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { parseConfig } from "../../src/model/config.js";
import { toHfStateDict } from "../../src/convert/names.js";
import { E4M3_MAX, f32ToE4M3, quantizeFp8Blocks } from "../../src/convert/fp8.js";
import { encodeValues, exportHf, safetensorsBytes } from "../convert/hf-export.js";

export const DEMO_HF_CONFIG = JSON.parse(
  readFileSync(new URL("../convert/fixtures/demo-config.json", import.meta.url), "utf8"),
) as Record<string, unknown>;

const KEEP_BF16 = /embed_tokens|lm_head|mlp\.gate\.weight|norm|bias/;

/**
 * How FP8 weights are scaled: DeepSeek-V3/R1, Kimi-K2 and GLM's releases (`weight_scale_inv` per 128×128 block), or
 * compressed-tensors (llm-compressor) `weight_scale` per 128×128 block (FP8_BLOCK) or per output row (FP8_DYNAMIC,
 * with an `input_scale` beside it as static FP8 schemes write).
 */
export type Fp8Layout = "deepseek" | "ct-block" | "ct-channel";

export interface CheckpointOptions {
  readonly dtype: "BF16" | "F32" | "FP8";
  readonly fp8Layout?: Fp8Layout;
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
      const layout = opts.fp8Layout ?? "deepseek";
      if (layout === "ct-channel") {
        const [rows, cols] = t.shape as [number, number];
        const scale = new Float32Array(rows);
        const bytes = new Uint8Array(rows * cols);
        for (let r = 0; r < rows; r++) {
          let amax = 0;
          for (let c = 0; c < cols; c++) amax = Math.max(amax, Math.abs(t.data[r * cols + c]));
          scale[r] = Math.fround(amax === 0 ? 1 : amax / E4M3_MAX);
          for (let c = 0; c < cols; c++) bytes[r * cols + c] = f32ToE4M3(t.data[r * cols + c] / scale[r]);
        }
        tensors.push({ name, dtype: "F8_E4M3", shape: t.shape, data: bytes });
        tensors.push({ name: `${name}_scale`, dtype: "F32", shape: [rows, 1], data: new Uint8Array(scale.buffer) });
        const input = name.replace(/\.weight$/, ".input_scale");
        tensors.push({ name: input, dtype: "F32", shape: [1], data: new Uint8Array(new Float32Array([0.5]).buffer) });
        continue;
      }
      const q = quantizeFp8Blocks(t.data, t.shape);
      tensors.push({ name, dtype: "F8_E4M3", shape: t.shape, data: q.bytes });
      tensors.push({
        name: layout === "deepseek" ? `${name}_scale_inv` : `${name}_scale`,
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
    const layout = opts.fp8Layout ?? "deepseek";
    const quantization_config =
      layout === "deepseek"
        ? { activation_scheme: "dynamic", fmt: "e4m3", quant_method: "fp8", weight_block_size: [128, 128] }
        : {
            quant_method: "compressed-tensors",
            format: "float-quantized",
            config_groups: {
              group_0: {
                targets: ["Linear"],
                weights: {
                  type: "float",
                  num_bits: 8,
                  symmetric: true,
                  ...(layout === "ct-block"
                    ? { strategy: "block", block_structure: [128, 128] }
                    : { strategy: "channel", block_structure: null }),
                },
              },
            },
          };
    writeFileSync(join(dir, "config.json"), JSON.stringify({ ...config, quantization_config }, null, 2));
    return dir;
  } finally {
    file.close();
  }
}
