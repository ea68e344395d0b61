import { statSync } from "node:fs";
import cliProgress from "cli-progress";
import type { Command } from "./command.js";
import { processIO } from "./common.js";
import { commandParser, parseCommand, type Parser } from "./options.js";
import { UsageError } from "../util/errors.js";
import { convertHf, typeSummary } from "../convert/index.js";
import { FILE_TYPE_NAMES } from "../synth/types.js";

function convertParser(): Parser {
  return commandParser(
    "convert",
    "HF_DIR -o FILE.gguf [--type T]",
    "Convert a Hugging Face checkpoint (config.json, model.safetensors or sharded *.safetensors + index, tokenizer.json, tokenizer_config.json) of DeepseekV2/V3ForCausalLM, Glm4MoeLiteForCausalLM (deepseek2) or GlmMoeDsaForCausalLM (glm-dsa) into a GGUF that llama.cpp and latent load: current generation (attn_k_b/attn_v_b), llama.cpp's tensor names, metadata keys and tokenizer encoding.",
  )
    .option(
      "--type <T>",
      `${FILE_TYPE_NAMES.join(", ")} (default F16); norms, biases and the router stay F32, rows that don't fit a type's block fall back as llama-quantize does`,
    )
    .option("--name <NAME>", "general.name (default: the directory name)")
    .option("-o, --out <FILE>", "output path (written under a temporary name, renamed when complete)");
}

export const convertCommand: Command = {
  name: "convert",
  summary: "convert a Hugging Face DeepSeek-V2/V3 / GLM checkpoint (safetensors) to GGUF",
  async run(argv: string[]): Promise<void> {
    const parsed = parseCommand<{ type?: string; name?: string; out?: string }>(convertParser(), argv, processIO);
    if (parsed === undefined) return;
    const { opts: values, args: positionals } = parsed;
    if (positionals.length !== 1)
      throw new UsageError(
        `expected one Hugging Face directory, got ${positionals.length}\nRun \`latent convert --help\` for its options.`,
      );
    if (values.out === undefined) throw new UsageError("-o FILE is required");
    const bar = process.stderr.isTTY
      ? new cliProgress.SingleBar(
          {
            stream: process.stderr,
            format: "convert [{bar}] {percentage}% | {value}/{total} MB | {tensor}",
            hideCursor: true,
          },
          cliProgress.Presets.shades_classic,
        )
      : undefined;
    const started = Date.now();
    let result: ReturnType<typeof convertHf>;
    try {
      let last = 0;
      result = convertHf(positionals[0], values.out, {
        type: values.type ?? "F16",
        ...(values.name !== undefined ? { name: values.name } : {}),
        onProgress: (done, total, tensor) => {
          if (bar === undefined) return;
          const now = Date.now();
          if (last === 0) bar.start(Math.max(1, Math.ceil(total / 1e6)), 0, { tensor });
          if (now - last > 100 || done === total) {
            bar.update(Math.round(done / 1e6), { tensor });
            last = now;
          }
        },
      });
    } finally {
      bar?.stop();
    }
    const bytes = result.paths.reduce((s, p) => s + statSync(p).size, 0);
    const secs = (Date.now() - started) / 1000;
    const c = result.info.config;
    console.error(
      `${result.info.architecture} → ${c.arch}: ${c.n_layer} layers${c.nextn > 0 ? ` + ${c.nextn} MTP` : ""}, ${c.n_expert} experts (${c.n_used} used), vocab ${c.n_vocab}, pre "${result.vocab.pre}"`,
    );
    console.error(`tensors: ${typeSummary(result.tensors)}`);
    console.error(`wrote ${result.paths.join(", ")}: ${(bytes / 1e6).toFixed(1)} MB in ${secs.toFixed(1)} s`);
  },
};
