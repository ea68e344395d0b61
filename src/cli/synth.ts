import { statSync } from "node:fs";
import cliProgress from "cli-progress";
import type { Command } from "./command.js";
import { processIO } from "./common.js";
import { commandParser, parseCommand, repeatable, type Parser } from "./options.js";
import { UsageError } from "../util/errors.js";
import { preset, PRESET_NAMES, withOverrides, type SynthArch, type SynthConfig } from "../synth/presets.js";
import { synthesize } from "../synth/synthesize.js";
import { FILE_TYPE_NAMES } from "../synth/types.js";

function synthParser(): Parser {
  return commandParser(
    "synth",
    `--preset ${PRESET_NAMES.join("|")} [options] -o FILE.gguf`,
    "Write a random-weight model with the true shapes of a real one (or fewer layers).",
  )
    .option("--arch <deepseek2|glm-dsa>", "architecture (picks the tiny flavour; checked against the other presets)")
    .option("--preset <NAME>", PRESET_NAMES.join(", "))
    .option("--layers <N>", "main decoder layers (dense lead cut to N−1 so an MoE layer stays)")
    .option("--type <T>", `${FILE_TYPE_NAMES.join(", ")} (default F32)`)
    .option("--pure", "every quantizable matrix in the base type (llama-quantize --pure)")
    .option("--seed <S>", "weight seed (default 0); same seed → byte-identical file")
    .option("--legacy-kv-b", "old GGUF generation: attn_kv_b, head_count_kv = H, no *_mla keys")
    .option("--split <N>", "write N shards <prefix>-0000i-of-0000N.gguf")
    .option(
      "--set <key=JSON>",
      "override any config field, e.g. --set n_vocab=1000 --set yarn=null (repeatable)",
      repeatable,
    )
    .option("-o, --out <FILE>", "output path (written under a temporary name, renamed when complete)");
}

interface SynthFlags {
  arch?: string;
  preset?: string;
  layers?: string;
  type?: string;
  pure?: boolean;
  seed?: string;
  legacyKvB?: boolean;
  split?: string;
  set?: string[];
  out?: string;
}

function intArg(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

export const synthCommand: Command = {
  name: "synth",
  summary: "write a random-weight MLA MoE model (real shapes) for tests and benchmarks",
  async run(argv: string[]): Promise<void> {
    const parsed = parseCommand<SynthFlags>(synthParser(), argv, processIO);
    if (parsed === undefined) return;
    const values = parsed.opts;
    if (parsed.args.length > 0)
      throw new UsageError(`unexpected argument "${parsed.args[0]}" (the output file is -o FILE)`);
    if (values.preset === undefined)
      throw new UsageError("--preset is required\nRun `latent synth --help` for its options.");
    if (values.out === undefined) throw new UsageError("-o FILE is required");
    const arch = values.arch;
    if (arch !== undefined && arch !== "deepseek2" && arch !== "glm-dsa")
      throw new UsageError(`--arch must be deepseek2 or glm-dsa, got "${arch}"`);
    const over: Record<string, unknown> = {};
    const layers = intArg("layers", values.layers, 1);
    if (layers !== undefined) over["n_layer"] = layers;
    for (const s of values.set ?? []) {
      const eq = s.indexOf("=");
      if (eq < 1) throw new UsageError(`--set expects key=JSON, got "${s}"`);
      try {
        over[s.slice(0, eq)] = JSON.parse(s.slice(eq + 1));
      } catch {
        throw new UsageError(`--set ${s.slice(0, eq)}: the value is not JSON`);
      }
    }
    const cfg = withOverrides(preset(values.preset, arch as SynthArch | undefined), over as Partial<SynthConfig>);
    const seed = intArg("seed", values.seed, 0) ?? 0;
    const split = intArg("split", values.split, 1) ?? 1;
    const bar = process.stderr.isTTY
      ? new cliProgress.SingleBar(
          {
            stream: process.stderr,
            format: "synth [{bar}] {percentage}% | {value}/{total} MB | {tensor}",
            hideCursor: true,
          },
          cliProgress.Presets.shades_classic,
        )
      : undefined;
    const started = Date.now();
    let paths: string[];
    try {
      let last = 0;
      paths = synthesize(cfg, {
        type: values.type ?? "F32",
        pure: values.pure ?? false,
        seed,
        legacyKvB: values.legacyKvB ?? false,
        split,
        out: values.out,
        onProgress: (done, total, tensor) => {
          if (bar === undefined) return;
          const now = Date.now();
          if (last === 0) bar.start(Math.ceil(total / 1e6), 0, { tensor });
          if (now - last > 100 || done === total) {
            bar.update(Math.round(done / 1e6), { tensor });
            last = now;
          }
        },
      });
    } finally {
      bar?.stop();
    }
    const bytes = paths.reduce((s, p) => s + statSync(p).size, 0);
    const secs = (Date.now() - started) / 1000;
    console.error(`wrote ${paths.join(", ")}: ${(bytes / 1e9).toFixed(3)} GB in ${secs.toFixed(1)} s`);
  },
};
