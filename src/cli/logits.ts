import type { Command } from "./command.js";
import { ModelConfigError, UsageError } from "../util/errors.js";
import { Tokenizer } from "../tokenizer/index.js";
import { DEFAULT_PREFILL_CHUNK, evaluateAll } from "../engine/evaluate.js";
import { logSoftmax, topLogprobs } from "../engine/logprobs.js";
import type { AttentionPath } from "../model/mla.js";
import { closeLoaded } from "../runtime/load.js";
import {
  backendOption,
  backendOptions,
  cpuActivationsOption,
  gpuActivationsOption,
  type BackendFlags,
  type CliIO,
  intOption,
  loadForCli,
  maxMemoryOption,
  parseModelArgs,
  positionsBar,
  processIO,
} from "./common.js";
import { commandParser, type Parser } from "./options.js";

/** Stable output format of `latent logits --json`; see docs/logits-json.md. */
export const LOGITS_FORMAT = "latent-logits/1";
const DEFAULT_TOP = 5;

interface LogitsFlags extends BackendFlags {
  tokens?: string;
  prompt?: string;
  path?: string;
  chunk?: string;
  top?: string;
  full?: boolean;
  json?: boolean;
}

function logitsParser(): Parser {
  const parser = commandParser(
    "logits",
    'MODEL.gguf (--tokens 1,2,3 | --prompt "text") [options]',
    "Log-probabilities of the next token after every position of the input (teacher forcing).",
  )
    .option("--tokens <LIST>", "token ids, comma- or space-separated")
    .option("--prompt <TEXT>", "text, encoded with the model's tokenizer (BOS per add_bos_token, never twice)")
    .option("--path <reference|prefill|decode>", "attention path (default reference: whole sequence, no cache)")
    .option("--chunk <N>", `prefill chunk length (default ${DEFAULT_PREFILL_CHUNK})`);
  return backendOptions(parser, "reference, which defines correctness")
    .option("--top <K>", `the K most likely [id, logprob] per position (default ${DEFAULT_TOP})`)
    .option("--full", "the log-softmax over the whole vocabulary per position")
    .option("--json", `JSON on stdout (format "${LOGITS_FORMAT}", docs/logits-json.md); else a table`)
    .addHelpText("after", "\nSpeed (tokens/s) goes to stderr.");
}

export const logitsCommand: Command = {
  name: "logits",
  summary: "next-token log-probabilities after every input position (JSON or a table)",
  run: (argv) => logitsMain(argv, processIO),
};

/** Parse "1,2,3", "1 2 3" or "[1, 2, 3]" into ids < nVocab; a UsageError names the bad entry. */
export function parseTokenList(s: string, nVocab: number): number[] {
  const body = s
    .trim()
    .replace(/^\[(.*)\]$/s, "$1")
    .trim();
  if (body === "") throw new UsageError("--tokens is empty");
  const parts = body.split(/\s*,\s*|\s+/);
  return parts.map((p, i) => {
    if (!/^\d+$/.test(p))
      throw new UsageError(
        `--tokens: entry ${i} "${p}" is not a token id (expected a comma-separated list of integers)`,
      );
    const id = Number(p);
    if (id >= nVocab)
      throw new UsageError(`--tokens: token id ${id} (entry ${i}) is outside the vocabulary (0..${nVocab - 1})`);
    return id;
  });
}

/** Printable form of a token's text for the table. */
function show(text: string): string {
  return JSON.stringify(text).slice(1, -1);
}

export async function logitsMain(argv: string[], io: CliIO): Promise<void> {
  const parsed = parseModelArgs<LogitsFlags>(argv, logitsParser(), io);
  if (parsed === undefined) return;
  const { values, model: modelPath } = parsed;
  if ((values.tokens === undefined) === (values.prompt === undefined))
    throw new UsageError("give exactly one of --tokens and --prompt");
  const path = values.path ?? "reference";
  if (path !== "reference" && path !== "prefill" && path !== "decode")
    throw new UsageError(`--path must be reference, prefill or decode, got "${path}"`);
  const chunk = intOption("chunk", values.chunk, 1);
  if (chunk !== undefined && path !== "prefill") throw new UsageError("--chunk applies to --path prefill only");
  const full = values.full === true;
  if (full && values.top !== undefined) throw new UsageError("give at most one of --full and --top");
  const topK = intOption("top", values.top, 1) ?? DEFAULT_TOP;
  const json = values.json === true;
  const backend = backendOption(values.backend, "reference");

  const loaded = loadForCli(
    modelPath,
    io,
    backend,
    intOption("threads", values.threads, 1),
    values.allowNonfinite === true,
    maxMemoryOption(values.maxMemory),
    cpuActivationsOption(values.cpuActivations),
    gpuActivationsOption(values.gpuActivations, backend),
  );
  const { file, config, model } = loaded;
  const nVocab = config.nVocab;
  let tokens: number[];
  let tokenizer: Tokenizer | undefined;
  const tok = (): Tokenizer => (tokenizer ??= Tokenizer.fromMetadata(file.metadata));
  if (values.tokens !== undefined) tokens = parseTokenList(values.tokens, nVocab);
  else {
    tokens = tok().encodePrompt(values.prompt!);
    if (tokens.length === 0) throw new UsageError("--prompt encodes to no tokens");
    const bad = tokens.find((t) => t >= nVocab);
    if (bad !== undefined)
      throw new ModelConfigError(`the tokenizer gave id ${bad}, outside the model's ${nVocab} logits`);
  }
  if (tokens.length > config.contextLength)
    throw new UsageError(`${tokens.length} tokens exceed the model's context length ${config.contextLength}`);

  const bar = positionsBar(io, path);
  const t0 = performance.now();
  let rows: Float32Array[];
  try {
    rows = evaluateAll(model, tokens, {
      path: path as AttentionPath,
      ...(chunk !== undefined ? { chunk } : {}),
      onProgress: (d, t) => bar.update(d, t),
    });
  } finally {
    bar.stop();
    closeLoaded(loaded);
  }
  const ms = performance.now() - t0;
  const lps = rows.map((r) => logSoftmax(r));

  if (json) {
    const head = {
      format: LOGITS_FORMAT,
      model: modelPath,
      path,
      ...(path === "prefill" ? { chunk: chunk ?? DEFAULT_PREFILL_CHUNK } : {}),
      n_vocab: nVocab,
      kind: full ? "full" : "top",
      ...(full ? {} : { top: topK }),
      tokens,
    };
    // Streamed row by row: full rows of a real vocabulary are large.
    io.out(JSON.stringify(head).slice(0, -1) + ',"logprobs":[');
    lps.forEach((lp, i) => {
      const row = full
        ? Array.from(lp, (x) => (Number.isFinite(x) ? x : null))
        : topLogprobs(lp, topK).map(([id, x]) => [id, Number.isFinite(x) ? x : null]);
      io.out((i > 0 ? ",\n" : "\n") + JSON.stringify(row));
    });
    io.out("\n]}\n");
  } else {
    const t = tok();
    const k = full ? Math.min(DEFAULT_TOP, nVocab) : topK;
    io.out(`pos  token   text                 next-token logprob  | top ${k}: id "text" logprob\n`);
    let nll = 0;
    lps.forEach((lp, i) => {
      const id = tokens[i];
      const next = tokens[i + 1];
      const nextLp = next !== undefined ? lp[next] : undefined;
      if (nextLp !== undefined) nll -= nextLp;
      const top = topLogprobs(lp, k)
        .map(([tid, x]) => `${tid} "${show(t.decode([tid]))}" ${x.toFixed(4)}`)
        .join("  ");
      io.out(
        `${String(i).padStart(3)}  ${String(id).padStart(6)}  ${show(t.decode([id]))
          .slice(0, 20)
          .padEnd(20)} ${(nextLp !== undefined ? nextLp.toFixed(4) : "-").padStart(19)}  | ${top}\n`,
      );
    });
    if (tokens.length > 1) {
      const mean = nll / (tokens.length - 1);
      io.out(
        `mean NLL of the given continuation: ${mean.toFixed(4)} nats (perplexity ${Math.exp(mean).toFixed(3)}) over ${tokens.length - 1} predictions\n`,
      );
    }
  }
  io.err(
    `logits: ${tokens.length} tokens in ${ms.toFixed(1)} ms (${((tokens.length * 1000) / ms).toFixed(2)} tokens/s, path ${path}${path === "prefill" ? `, chunk ${chunk ?? DEFAULT_PREFILL_CHUNK}` : ""})\n`,
  );
}
