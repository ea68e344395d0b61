import { existsSync, statSync } from "node:fs";
import cliProgress from "cli-progress";
import type { Command } from "./command.js";
import { commandParser, parseCommand, type Parser } from "./options.js";
import { ggufToHf } from "../convert/names.js";
import { UsageError } from "../util/errors.js";
import { GGUFFile } from "../gguf/file.js";
import type { HeaderProgress } from "../gguf/reader.js";
import { formatSummary, INSPECT_FORMAT, summarizeModel, type SummaryOptions } from "../gguf/summary.js";

function inspectParser(): Parser {
  return commandParser(
    "inspect",
    "MODEL.gguf [--json] [--tensors] [--hf-names]",
    "Show what a GGUF model is without loading its weights: architecture, name, parameter count, file type, tensor counts and bytes per quantization type, the architecture's hyper-parameters, the tokenizer, the chat template's presence and the shards. Any shard of a split model opens the whole model.",
  )
    .option("--tensors", "list every tensor: name, type, shape (ggml ne order), bytes, shard")
    .option(
      "--hf-names",
      "with each tensor, the Hugging Face tensor(s) it holds (attn_k_b + attn_v_b → kv_b_proj; stacked experts → one HF tensor per expert); implies --tensors",
    )
    .option("--json", `JSON on stdout (format "${INSPECT_FORMAT}", see docs/inspect-json.md)`);
}

/** Where inspect writes; tests pass their own to capture the output. */
export interface InspectIO {
  out(text: string): void;
  err(text: string): void;
  /** stderr is a terminal: progress may be shown */
  readonly tty: boolean;
}

const stdIO: InspectIO = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
  get tty(): boolean {
    return process.stderr.isTTY === true;
  },
};

export const inspectCommand: Command = {
  name: "inspect",
  summary: "show a GGUF model's architecture, sizes, hyper-parameters, tokenizer and shards",
  run: (argv) => inspectMain(argv, stdIO),
};

/** Progress on stderr, only on a terminal and only once reading has taken longer than `delayMs`. */
function headerProgress(io: InspectIO, delayMs = 300): { update(p: HeaderProgress): void; stop(): void } {
  if (!io.tty) return { update: () => {}, stop: () => {} };
  const started = Date.now();
  let bar: cliProgress.SingleBar | undefined;
  let path = "";
  return {
    update(p) {
      if (bar === undefined) {
        if (Date.now() - started < delayMs) return;
        bar = new cliProgress.SingleBar(
          {
            stream: process.stderr,
            format: "reading header [{bar}] {value}/{total} keys+tensors | {mb} MiB | {file}",
            hideCursor: true,
            clearOnComplete: true,
          },
          cliProgress.Presets.shades_classic,
        );
        bar.start(Math.max(1, p.keyCount + p.tensorCount), 0, { mb: "0.0", file: "" });
      }
      const payload = { mb: (p.bytes / 2 ** 20).toFixed(1), file: p.path.split("/").pop() ?? p.path };
      if (p.path !== path) {
        path = p.path;
        bar.setTotal(Math.max(1, p.keyCount + p.tensorCount));
      }
      bar.update(p.keysDone + p.tensorsDone, payload);
    },
    stop() {
      bar?.stop();
    },
  };
}

export async function inspectMain(argv: string[], io: InspectIO = stdIO): Promise<void> {
  const parsed = parseCommand<{ json?: boolean; tensors?: boolean; hfNames?: boolean }>(inspectParser(), argv, io);
  if (parsed === undefined) return;
  const { opts: values, args: positionals } = parsed;
  if (positionals.length !== 1) {
    throw new UsageError(
      `${positionals.length === 0 ? "missing the model file" : `expected one model file, got ${positionals.length}: ${positionals.join(" ")}`}\nRun \`latent inspect --help\` for its options.`,
    );
  }
  const path = positionals[0];
  if (!existsSync(path)) throw new UsageError(`model file not found: ${path}`);
  if (statSync(path).isDirectory()) throw new UsageError(`${path} is a directory, not a .gguf file`);

  const progress = headerProgress(io);
  let file: GGUFFile;
  try {
    file = GGUFFile.open(path, { onProgress: (p) => progress.update(p) });
  } finally {
    progress.stop();
  }
  try {
    const hfNames = values.hfNames === true;
    const nExpert = hfNames ? expertCount(file) : 0;
    const opts: SummaryOptions = {
      tensors: values.tensors === true || hfNames,
      path,
      hfNames: hfNames ? (name) => ggufToHf(name, nExpert) : undefined,
    };
    const summary = summarizeModel(file, opts);
    io.out(values.json === true ? `${JSON.stringify(summary, null, 2)}\n` : `${formatSummary(summary)}\n`);
  } finally {
    file.close();
  }
}

/** `<arch>.expert_count` (stacked expert tensors map to one HF tensor per expert); 0 when absent. */
function expertCount(file: GGUFFile): number {
  const arch = file.metadata.string("general.architecture");
  return (arch !== undefined ? file.metadata.integer(`${arch}.expert_count`) : undefined) ?? 0;
}
