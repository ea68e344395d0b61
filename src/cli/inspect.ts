import { existsSync, statSync } from "node:fs";
import { freemem } from "node:os";
import cliProgress from "cli-progress";
import type { Command } from "./command.js";
import { commandParser, parseCommand, type Parser } from "./options.js";
import { ggufToHf } from "../convert/names.js";
import { UsageError } from "../util/errors.js";
import { GGUFFile } from "../gguf/file.js";
import type { HeaderProgress } from "../gguf/reader.js";
import { formatSummary, INSPECT_FORMAT, summarizeModel, type SummaryOptions } from "../gguf/summary.js";
import { parseConfig } from "../model/config.js";
import { planMemory, type MemoryPlan } from "../runtime/plan.js";
import { formatBytes, parseByteSize } from "../util/byte-size.js";
import { intOption } from "./common.js";

function inspectParser(): Parser {
  return commandParser(
    "inspect",
    "MODEL.gguf [--json] [--tensors] [--hf-names] [--plan [--memory N] [--gpu-memory N] [--context N]]",
    "Show what a GGUF model is without loading its weights: architecture, name, parameter count, file type, tensor counts and bytes per quantization type, the architecture's hyper-parameters, the tokenizer, the chat template's presence and the shards. Any shard of a split model opens the whole model.",
  )
    .option("--tensors", "list every tensor: name, type, shape (ggml ne order), bytes, shard")
    .option(
      "--hf-names",
      "with each tensor, the Hugging Face tensor(s) it holds (attn_k_b + attn_v_b → kv_b_proj; stacked experts → one HF tensor per expert); implies --tensors",
    )
    .option(
      "--plan",
      "what each way of running it needs (all in RAM; routed experts streamed from disk; all on the GPU; experts in host memory) — resident, expert and latent-cache bytes — and which it would choose",
    )
    .option("--memory <N>", "host memory budget for --plan, e.g. 24G (default: this machine's free memory)")
    .option("--gpu-memory <N>", "GPU memory budget for --plan, e.g. 80G (default: no GPU)")
    .option("--context <N>", "context positions --plan counts the latent cache for (default 4096)")
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
  const parsed = parseCommand<{
    json?: boolean;
    tensors?: boolean;
    hfNames?: boolean;
    plan?: boolean;
    memory?: string;
    gpuMemory?: string;
    context?: string;
  }>(inspectParser(), argv, io);
  if (parsed === undefined) return;
  const { opts: values, args: positionals } = parsed;
  if (positionals.length !== 1) {
    throw new UsageError(
      `${positionals.length === 0 ? "missing the model file" : `expected one model file, got ${positionals.length}: ${positionals.join(" ")}`}\nRun \`latent inspect --help\` for its options.`,
    );
  }
  const path = positionals[0];
  const planned = values.plan === true;
  for (const [flag, v] of [
    ["--memory", values.memory],
    ["--gpu-memory", values.gpuMemory],
    ["--context", values.context],
  ] as const)
    if (v !== undefined && !planned) throw new UsageError(`${flag} needs --plan`);
  const budgets = {
    memory: values.memory !== undefined ? parseByteSize(values.memory, "--memory") : freemem(),
    gpuMemory: values.gpuMemory !== undefined ? parseByteSize(values.gpuMemory, "--gpu-memory") : undefined,
    context: intOption("context", values.context, 1) ?? 4096,
  };
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
    // the plan needs the model's config: a file latent cannot run fails here with the config's own error
    const plan = planned ? planMemory(file, parseConfig(file.metadata), budgets) : undefined;
    io.out(
      values.json === true
        ? `${JSON.stringify(plan !== undefined ? { ...summary, plan: planJson(plan) } : summary, null, 2)}\n`
        : `${formatSummary(summary)}\n${plan !== undefined ? `${formatPlan(plan)}\n` : ""}`,
    );
  } finally {
    file.close();
  }
}

/** `<arch>.expert_count` (stacked expert tensors map to one HF tensor per expert); 0 when absent. */
function expertCount(file: GGUFFile): number {
  const arch = file.metadata.string("general.architecture");
  return (arch !== undefined ? file.metadata.integer(`${arch}.expert_count`) : undefined) ?? 0;
}

/** The plan in the inspect JSON's snake_case (docs/inspect-json.md). */
function planJson(p: MemoryPlan): Record<string, unknown> {
  return {
    layers: p.layers,
    moe_layers: p.moeLayers,
    experts: p.experts,
    experts_used: p.expertsUsed,
    loaded_bytes: p.loadedBytes,
    unused_bytes: p.unusedBytes,
    resident_bytes: p.residentBytes,
    expert_bytes: {
      total: p.expertBytes.total,
      per_layer: p.expertBytes.perLayer,
      per_expert: p.expertBytes.perExpert,
      layers: p.expertBytes.layers.map((l) => ({ layer: l.layer, bytes: l.bytes, per_expert: l.perExpert })),
    },
    largest_layer_bytes: p.largestLayerBytes,
    kv: {
      bytes_per_1k_tokens: p.kv.bytesPer1kTokens,
      floats_per_token_layer: p.kv.floatsPerTokenLayer,
      indexer_layers: p.kv.indexerLayers,
      dtype: p.kv.dtype,
    },
    context: p.context,
    kv_bytes: p.kvBytes,
    budgets: { memory: p.budgets.memory, gpu_memory: p.budgets.gpuMemory ?? null },
    modes: p.modes.map((m) => ({
      mode: m.mode,
      host_bytes: m.hostBytes,
      gpu_bytes: m.gpuBytes,
      disk_bytes_per_token: m.diskBytesPerToken,
      fits: m.fits,
      note: m.note,
    })),
    choice: p.choice ?? null,
    reason: p.reason,
  };
}

function formatPlan(p: MemoryPlan): string {
  const b = formatBytes;
  const lines = [
    `plan (memory ${b(p.budgets.memory)}${p.budgets.gpuMemory !== undefined ? `, GPU ${b(p.budgets.gpuMemory)}` : ", no GPU"}, context ${p.context}):`,
    `  weights read: ${b(p.loadedBytes)}${p.unusedBytes > 0 ? ` (${b(p.unusedBytes)} of MTP layers unused)` : ""}; resident (all but routed experts) ${b(p.residentBytes)}`,
    `  routed experts: ${b(p.expertBytes.total)} over ${p.moeLayers} layers; ${b(p.expertBytes.perLayer)} per layer, ${b(p.expertBytes.perExpert)} per expert (${p.experts} experts, ${p.expertsUsed} used per token)`,
    `  latent cache: ${b(p.kv.bytesPer1kTokens)} per 1k tokens (${p.kv.floatsPerTokenLayer} ${p.kv.dtype} per token per layer${p.kv.indexerLayers > 0 ? ` + DSA indexer keys in ${p.kv.indexerLayers} layers` : ""}); ${b(p.kvBytes)} at ${p.context}`,
    `  largest layer ${b(p.largestLayerBytes)} (what \`latent doctor --low-memory\` holds)`,
    "  mode          host         GPU          disk/token   fits",
    ...p.modes.map(
      (m) =>
        `  ${m.mode.padEnd(12)}  ${b(m.hostBytes).padEnd(11)}  ${b(m.gpuBytes).padEnd(11)}  ${(m.diskBytesPerToken > 0 ? b(m.diskBytesPerToken) : "-").padEnd(11)}  ${m.fits ? "yes" : "no"}`,
    ),
    `  choice: ${p.reason}`,
  ];
  return lines.join("\n");
}
