import { writeFileSync } from "node:fs";
import cliProgress from "cli-progress";
import type { Command } from "./command.js";
import { UsageError } from "../util/errors.js";
import { intOption, processIO, type CliIO } from "./common.js";
import { commandParser, parseCommand, type Parser } from "./options.js";
import { runDoctor, type DoctorReport } from "../doctor/index.js";
import { renderHtml } from "../doctor/html.js";
import { noProgress, type Progress } from "../doctor/report.js";

interface DoctorFlags {
  json?: boolean;
  html?: string;
  lowMemory?: boolean;
  backend?: string;
  threads?: string;
  endpoint?: string;
  source?: string;
  model?: string;
  apiKey?: string;
  chunk?: string;
  /** false with --no-data */
  data: boolean;
  progress?: boolean;
}

function doctorParser(): Parser {
  return commandParser(
    "doctor",
    "MODEL.gguf [--backend cpu] [--json] [--html report.html] [--low-memory]\n       latent doctor MODEL.gguf --source HF-DIR|other.gguf [--json]\n       latent doctor --endpoint http://host:port/v1 --model MODEL.gguf [--low-memory [--backend cpu]] [--api-key K] [--json]",
    "Diagnose garbage output: checks the GGUF file (tensors, shapes, types, NaN/Inf, statistics, metadata quirks, name map), the attention paths (reference vs prefill vs decode, per layer and sub-step), behaviour (entropy, loops, activation norms), or a live OpenAI-compatible endpoint against latent's reference on the same GGUF.\nExit status: 0 healthy, 1 problems found, 2 could not run.",
  )
    .option("--json", 'the report as JSON on stdout (format "latent-doctor/1", docs/doctor.md)')
    .option("--html <FILE>", "also write a self-contained HTML report (with an activation-norm plot)")
    .option(
      "--low-memory",
      "reference logits streamed one layer at a time from disk (models larger than RAM), with progress and the time left on stderr; reports peak RSS; skips the in-memory path and behaviour checks; with --endpoint the endpoint is compared with them (no known-fault diagnosis)",
    )
    .option(
      "--source <PATH>",
      "compare every tensor (dequantized, through the name map) and the logits with the original checkpoint (safetensors directory: F32/F16/BF16/FP8 block-scaled) or another GGUF of the model; names swapped, transposed, reordered, scaled or zeroed tensors",
    )
    .option("--endpoint <URL>", "check a server (latent, vLLM, SGLang, llama-server) at URL (…/v1)")
    .option("--model <FILE>", "the GGUF the endpoint serves (with --endpoint)")
    .option("--api-key <KEY>", "bearer token for the endpoint")
    .option(
      "--backend <B>",
      "kernels of the prefill/decode paths under test, or of the --low-memory pass: reference (default) or cpu (fast)",
    )
    .option("--threads <N>", "threads of --backend cpu (default: all cores)")
    .option("--chunk <N>", "prefill chunk of the path checks (default 8)")
    .option("--no-data", "skip the NaN/Inf and statistics scan of every weight")
    .option(
      "--progress",
      "progress of the checks on stderr even when it is not a terminal (default: only on a terminal)",
    );
}

export const doctorCommand: Command = {
  name: "doctor",
  summary: "diagnose a GGUF, its compute paths, or a live endpoint (exit 0 healthy, 1 problems, 2 could not run)",
  run: async (argv) => {
    process.exitCode = await doctorMain(argv, processIO);
  },
};

function barProgress(io: CliIO): Progress {
  if (!io.tty) return noProgress;
  let bar: cliProgress.SingleBar | undefined;
  return {
    start(label, total) {
      bar = new cliProgress.SingleBar(
        {
          stream: process.stderr,
          format: `${label} [{bar}] {percentage}% | {value}/{total} MB`,
          hideCursor: true,
          clearOnComplete: true,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(Math.max(1, Math.ceil(total / 1e6)), 0);
    },
    update(done) {
      bar?.update(Math.round(done / 1e6));
    },
    stop() {
      bar?.stop();
      bar = undefined;
    },
  };
}

/** Run the doctor; returns the exit code (usage problems throw a UsageError, which main turns into 2). */
export async function doctorMain(argv: string[], io: CliIO): Promise<number> {
  const parsed = parseCommand<DoctorFlags>(doctorParser(), argv, io);
  if (parsed === undefined) return 0;
  const { opts: values, args: positionals } = parsed;
  const model = values.model ?? positionals[0];
  if (model === undefined || positionals.length > 1 || (values.model !== undefined && positionals.length > 0))
    throw new UsageError("expected one model path\nRun `latent doctor --help` for its options.");
  if (values.apiKey !== undefined && values.endpoint === undefined) throw new UsageError("--api-key needs --endpoint");
  if (values.source !== undefined && values.endpoint !== undefined)
    throw new UsageError("--source and --endpoint do not combine");
  const chunk = intOption("chunk", values.chunk, 1);
  const threads = intOption("threads", values.threads, 1);
  const backend = values.backend ?? "reference";
  if (backend !== "reference" && backend !== "cpu")
    throw new UsageError(`--backend must be reference or cpu, got "${backend}"`);
  let report: DoctorReport;
  try {
    report = await runDoctor({
      model,
      ...(values.endpoint !== undefined ? { endpoint: values.endpoint } : {}),
      ...(values.apiKey !== undefined ? { apiKey: values.apiKey } : {}),
      ...(values.source !== undefined ? { source: values.source } : {}),
      lowMemory: values.lowMemory === true,
      backend,
      ...(threads !== undefined ? { threads } : {}),
      ...(chunk !== undefined ? { chunk } : {}),
      skipData: !values.data,
      progress: barProgress(io),
      ...(io.tty || values.progress === true ? { onStep: (step: string) => io.err(`latent doctor: ${step}\n`) } : {}),
    });
  } catch (e) {
    if (e instanceof UsageError) throw e;
    io.err(`latent doctor: could not run: ${e instanceof Error ? e.message : String(e)}\n`);
    return 2;
  }
  if (values.html !== undefined) writeFileSync(values.html, renderHtml(report));
  if (values.json === true)
    io.out(
      JSON.stringify(report, (_k, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v), 2) +
        "\n",
    );
  else io.out(renderText(report));
  return report.exitCode;
}

export function renderText(r: DoctorReport): string {
  const lines: string[] = [];
  lines.push(`latent doctor: ${r.target.model}${r.target.endpoint ? ` ↔ ${r.target.endpoint}` : ""}`);
  if (r.file)
    lines.push(
      `file: ${r.file.arch ?? "?"}, ${r.file.generation} generation, ${r.file.tensorCount} tensors, ${(r.file.bytes / 1e6).toFixed(1)} MB, ${Object.entries(
        r.file.types,
      )
        .map(([t, c]) => `${c}×${t}`)
        .join(" ")}`,
    );
  if (r.paths) {
    const worst = Math.max(...r.paths.comparisons.map((c) => c.maxKL));
    lines.push(
      `paths: ${r.paths.comparisons.length} comparisons over ${r.paths.prompts.map((p) => `${p.label}(${p.tokens})`).join(", ")}, chunk ${r.paths.chunk}; worst KL ${worst.toExponential(2)}`,
    );
  }
  if (r.behaviour) {
    for (const p of r.behaviour.probes)
      lines.push(
        `probe "${p.label}": entropy ${p.entropy.toFixed(3)} nats (${(p.entropyRatio * 100).toFixed(1)}% of ln V), top-1 ${p.top1} p=${p.top1Prob.toFixed(3)}`,
      );
    lines.push("layer  residual-RMS  attn-RMS    ffn-RMS     max|x|      max|q_abs|");
    for (const x of r.behaviour.norms)
      lines.push(
        `${String(x.layer).padStart(5)}  ${[x.residual, x.attn, x.ffn, x.absMax, x.qAbsMax].map((v) => v.toExponential(3).padEnd(11)).join(" ")}`,
      );
  }
  if (r.endpoint)
    lines.push(
      `endpoint: ${r.endpoint.dialect ?? "?"} dialect (${r.endpoint.mode}), ${r.endpoint.positions.length} positions (prefill ${r.endpoint.prefill?.n ?? 0}, decode ${r.endpoint.decode?.n ?? 0}), mean KL ${r.endpoint.meanKL.toExponential(2)}, mean |Δ logprob| ${r.endpoint.meanAbsLogprobDiff.toExponential(2)}, top-1 ${(r.endpoint.top1Agreement * 100).toFixed(0)}% → ${r.endpoint.verdict}`,
    );
  if (r.lowMemory)
    lines.push(
      `low-memory ${r.lowMemory.kernels === "cpu" ? "cpu-kernel" : "reference"} pass: ${r.lowMemory.tokens} tokens through ${r.lowMemory.layers} layers in ${r.lowMemory.ms} ms, peak RSS ${(r.lowMemory.peakRssBytes / 1e6).toFixed(0)} MB (model ${(r.lowMemory.modelBytes / 1e6).toFixed(0)} MB, largest layer ${(r.lowMemory.largestLayerBytes / 1e6).toFixed(1)} MB)`,
    );
  if (r.source)
    lines.push(
      `source: ${r.source.kind === "hf-dir" ? "checkpoint" : "GGUF"} ${r.source.path}: ${r.source.matched}/${r.source.compared} compared tensors within quantization noise${r.source.logits ? `; logits mean KL ${r.source.logits.meanKL.toExponential(2)}, top-1 ${(r.source.logits.top1Agreement * 100).toFixed(0)}%` : ""}`,
    );
  for (const f of r.findings) lines.push(`${f.severity.toUpperCase().padEnd(7)} [${f.area}/${f.code}] ${f.message}`);
  lines.push(`verdict: ${r.verdict} (exit ${r.exitCode})`);
  return lines.join("\n") + "\n";
}
