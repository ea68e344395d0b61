import { createReadStream, existsSync } from "node:fs";
import { createInterface } from "node:readline";
import type { Command } from "./command.js";
import { UsageError } from "../util/errors.js";
import { closeLoaded, type LoadedModel } from "../runtime/load.js";
import { Tokenizer } from "../tokenizer/index.js";
import { Sampler } from "../engine/sampler.js";
import {
  backendOption,
  backendOptions,
  cpuActivationsOption,
  gpuActivationsOption,
  intOption,
  loadForCli,
  maxMemoryOption,
  parseModelArgs,
  processIO,
  type BackendFlags,
  type CliIO,
} from "./common.js";
import { commandParser, type Parser } from "./options.js";
import { samplingFromFlags, samplingOptions } from "./run.js";
import { ChatSession, type TurnReport } from "./chat-session.js";

interface ChatFlags extends BackendFlags {
  system?: string;
  file?: string;
  nPredict?: string;
  temp?: string;
  topK?: string;
  topP?: string;
  minP?: string;
  seed?: string;
}

function chatParser(): Parser {
  const parser = commandParser(
    "chat",
    "MODEL.gguf [--system TEXT] [-f FILE|-] [options]",
    "Chat with a model through its chat template; replies stream to stdout. The conversation's latents stay in the KV cache between turns, so each turn prefills only the new message.\n" +
      "Interactive on a terminal; with -f FILE, -f - or a stdin that is not a terminal, each line is one turn.\n" +
      "Commands: /reset (forget the conversation), /stats (tokens reused and prefilled, speeds; on stderr), /exit.",
  )
    .option("--system <TEXT>", "system message")
    .option("-f, --file <FILE>", "read the turns from FILE, one a line (- for stdin)")
    .option("-n, --n-predict <N>", "most tokens per reply (default 512; -1 = until the context is full)");
  samplingOptions(parser);
  return backendOptions(parser, "cpu");
}

export const chatCommand: Command = {
  name: "chat",
  summary: "interactive multi-turn chat through the model's chat template (KV cache kept between turns)",
  run: (argv) => chatMain(argv, processIO),
};

/** Where the turns come from; `interactive` shows a prompt and the commands' answers as a person expects them. */
interface TurnSource {
  readonly lines: AsyncIterable<string>;
  readonly interactive: boolean;
  prompt(): void;
  close(): void;
}

function turnSource(file: string | undefined): TurnSource {
  if (file !== undefined && file !== "-") {
    if (!existsSync(file)) throw new UsageError(`prompt file not found: ${file}`);
    const rl = createInterface({ input: createReadStream(file, "utf8"), crlfDelay: Infinity });
    return { lines: rl, interactive: false, prompt: () => {}, close: () => rl.close() };
  }
  const interactive = file === undefined && process.stdin.isTTY === true;
  const rl = createInterface({
    input: process.stdin,
    ...(interactive ? { output: process.stdout, prompt: "> " } : {}),
    crlfDelay: Infinity,
    terminal: interactive,
  });
  return { lines: rl, interactive, prompt: () => rl.prompt(), close: () => rl.close() };
}

export async function chatMain(argv: string[], io: CliIO): Promise<void> {
  const parsed = parseModelArgs<ChatFlags>(argv, chatParser(), io);
  if (parsed === undefined) return;
  const { values, model: modelPath } = parsed;
  const nArg = values.nPredict;
  if (nArg !== undefined && nArg !== "-1" && !/^\d+$/.test(nArg.trim()))
    throw new UsageError(`--n-predict must be an integer ≥ 0 (or -1), got "${nArg}"`);
  const nPredict = nArg === undefined ? 512 : Number(nArg);
  const sampler = new Sampler(samplingFromFlags(values));
  const backend = backendOption(values.backend, "cpu");
  if (backend !== "cpu" && backend !== "reference")
    throw new UsageError(`--backend must be cpu or reference for chat, got "${backend}"`);
  const threads = intOption("threads", values.threads, 1);
  const source = turnSource(values.file);

  let loaded: LoadedModel | undefined;
  try {
    // (inside the try: a model that fails to load must still close the reader, or stdin keeps the process alive)
    loaded = loadForCli(
      modelPath,
      io,
      backend,
      threads,
      values.allowNonfinite === true,
      maxMemoryOption(values.maxMemory),
      cpuActivationsOption(values.cpuActivations),
      gpuActivationsOption(values.gpuActivations, backend),
    );
    const tokenizer = Tokenizer.fromMetadata(loaded.file.metadata);
    // a model without a chat template fails here, before the first message is typed
    tokenizer.renderChat([{ role: "user", content: "" }]);
    const session = new ChatSession(loaded.model, tokenizer, {
      ...(values.system !== undefined ? { system: values.system } : {}),
      sampler,
      maxTokens: nPredict < 0 ? Infinity : nPredict,
    });
    if (source.interactive) io.err("type a message; /reset, /stats, /exit\n");
    source.prompt();
    for await (const raw of source.lines) {
      const line = raw.trim();
      if (line === "/exit" || line === "/quit") break;
      if (line === "/reset") {
        session.reset();
        io.err("(conversation reset)\n");
      } else if (line === "/stats") io.err(statsText(session));
      else if (line.startsWith("/")) io.err(`unknown command ${line.split(/\s/)[0]}: /reset, /stats or /exit\n`);
      else if (line !== "") {
        await session.send(line, (text) => io.out(text));
        io.out("\n");
      }
      source.prompt();
    }
  } finally {
    source.close();
    if (loaded !== undefined) closeLoaded(loaded);
  }
}

/** The /stats answer: the conversation so far and what the last turn reused, prefilled and generated. */
export function statsText(session: ChatSession): string {
  const lines = [`turns: ${session.turns.length}, cache: ${session.cachedTokens} positions`];
  const last: TurnReport | undefined = session.turns.at(-1);
  if (last !== undefined) {
    const t = last.result.timings;
    lines.push(
      `last turn: conversation ${last.conversationTokens} tokens, ${last.reusedTokens} reused from the cache, ${last.prefilledTokens} prefilled in ${t.prefillMs.toFixed(1)} ms ` +
        `(${t.promptTokensPerSecond.toFixed(2)} tokens/s), generated ${last.result.tokens.length} tokens (${t.tokensPerSecond.toFixed(2)} tokens/s), finish: ${last.result.finishReason}`,
    );
  }
  return lines.join("\n") + "\n";
}
