import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Command } from "./command.js";
import { commandParser, parseCommand, type Parser } from "./options.js";
import { UsageError } from "../util/errors.js";
import { loadModel, type LoadedModel } from "../runtime/load.js";
import { Tokenizer } from "../tokenizer/index.js";
import { generate } from "../engine/generate.js";
import { processIO, type CliIO } from "./common.js";

/** The model shipped in the package: a 8.9 M-parameter DeepSeek-V3-style MLA MoE trained on the King James Bible (models/README.md). */
export const DEMO_MODEL: string = fileURLToPath(new URL("../../models/latent-demo-kjv.gguf", import.meta.url));
export const DEMO_PROMPT = "And it came to pass, when the king";

function demoParser(): Parser {
  return commandParser(
    "demo",
    "[options]       (what `npm start` runs)",
    "Load the bundled model (models/latent-demo-kjv.gguf: a tiny DeepSeek-V3-style MLA MoE trained on the King James Bible, no download), stream a greedy continuation of an English prompt, then a sampled one, and print tokens/s.",
  )
    .option("-p, --prompt <TEXT>", `prompt (default "${DEMO_PROMPT}")`)
    .option("-n, --n-predict <N>", "tokens per continuation (default 64)")
    .option("--temp <T>", "temperature of the sampled continuation (default 0.8; the first is always greedy)")
    .option("--seed <S>", "sampling seed (default 7)")
    .option("--greedy-only", "skip the sampled continuation")
    .option("--model <FILE>", "another GGUF instead of the bundled one")
    .option("--backend <B>", "cpu (WebAssembly SIMD + threads, default) or reference");
}

interface DemoFlags {
  prompt?: string;
  nPredict?: string;
  temp?: string;
  seed?: string;
  greedyOnly?: boolean;
  model?: string;
  backend?: string;
}

function intOpt(name: string, v: string | undefined, dflt: number, min: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

export async function runDemo(argv: string[], io: CliIO = processIO): Promise<void> {
  const parsed = parseCommand<DemoFlags>(demoParser(), argv, io);
  if (parsed === undefined) return;
  const values = parsed.opts;
  if (parsed.args.length > 0)
    throw new UsageError(`unexpected argument "${parsed.args[0]}" (another model is --model FILE)`);
  const path = values.model ?? DEMO_MODEL;
  if (!existsSync(path))
    throw new UsageError(
      `model file not found: ${path}${values.model === undefined ? " (the bundled demo model is missing from this install)" : ""}`,
    );
  const n = intOpt("n-predict", values.nPredict, 64, 1);
  const seed = intOpt("seed", values.seed, 7, 0);
  const temp = values.temp === undefined ? 0.8 : Number(values.temp);
  if (!Number.isFinite(temp) || temp < 0) throw new UsageError(`--temp must be a number ≥ 0, got "${values.temp}"`);
  const backend = values.backend ?? "cpu";
  if (backend !== "cpu" && backend !== "reference")
    throw new UsageError(`--backend must be cpu or reference, got "${backend}"`);
  const prompt = values.prompt ?? DEMO_PROMPT;

  const t0 = performance.now();
  const loaded: LoadedModel = loadModel(path, undefined, { backend });
  const { file, model, config: c } = loaded;
  try {
    const tokenizer = Tokenizer.fromMetadata(file.metadata);
    const name = file.metadata.raw("general.name");
    const params = [...file.tensors.values()].reduce((s, t) => s + t.ne.reduce((a, b) => a * b, 1), 0);
    io.err(
      `latent demo: ${typeof name === "string" ? name : path} — ${c.arch}, ${(params / 1e6).toFixed(1)} M parameters, ${c.nLayer} layers, MLA (kv_lora ${c.kvLoraRank}), ` +
        `${c.nExpert} experts (${c.nExpertUsed} used + ${c.nExpertShared} shared, ${c.gating}), vocab ${c.nVocab}; loaded in ${(performance.now() - t0).toFixed(0)} ms (${backend} backend)\n`,
    );
    const ids = tokenizer.encodePrompt(prompt);
    const runs: { label: string; temperature: number }[] = [{ label: "greedy", temperature: 0 }];
    if (values.greedyOnly !== true)
      runs.push({ label: `sampled, temperature ${temp}, seed ${seed}`, temperature: temp });
    for (const r of runs) {
      io.out(`\n--- ${r.label} ---\n${prompt}`);
      let streamed = 0;
      const res = await generate(model, tokenizer, ids, {
        temperature: r.temperature,
        topK: 40,
        topP: 0.95,
        minP: 0.05,
        seed,
        maxTokens: n,
        onToken: (ev) => {
          io.out(ev.text);
          streamed += ev.text.length;
        },
      });
      io.out(res.text.slice(streamed) + "\n");
      const t = res.timings;
      io.err(
        `[${res.tokens.length} tokens; prompt ${res.promptTokens} tokens at ${t.promptTokensPerSecond.toFixed(1)} tokens/s; generation ${t.tokensPerSecond.toFixed(1)} tokens/s]\n`,
      );
    }
  } finally {
    loaded.backend?.close();
  }
}

export const demoCommand: Command = {
  name: "demo",
  summary: "generate text with the bundled tiny trained model (what `npm start` runs)",
  run: (argv) => runDemo(argv),
};
