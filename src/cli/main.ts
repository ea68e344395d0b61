import { LatentError, UsageError } from "../util/errors.js";
import { printable, printableLines } from "../util/printable.js";
import { commands } from "./commands.js";
import { commanderMessage, HELP_STYLE, packageVersion, Parser } from "./options.js";
import { CommanderError } from "commander";

/**
 * The top level (no known command name): help, --version, and unknown commands or options answered with a
 * suggestion ("did you mean run?"). Each command parses its own arguments (options.ts).
 */
function topLevel(argv: string[]): void {
  const program = new Parser("latent")
    .usage("<command> [options]")
    .description("Inference engine and OpenAI-compatible server for MLA MoE models read from GGUF.")
    .version(packageVersion(), "-V, --version", "print the version")
    .helpOption("-h, --help", "this help")
    .helpCommand(false)
    .showSuggestionAfterError(true)
    .configureHelp(HELP_STYLE)
    .addHelpText("after", "\nRun `latent <command> --help` for a command's options.")
    .exitOverride()
    .configureOutput({ writeOut: (s) => void process.stdout.write(s), writeErr: () => {}, outputError: () => {} });
  for (const c of commands) program.command(c.name).description(c.summary);
  if (argv.length === 0 || (argv.length === 1 && argv[0] === "help")) {
    program.outputHelp();
    return;
  }
  try {
    program.parse(argv, { from: "user" });
  } catch (e) {
    if (!(e instanceof CommanderError)) throw e;
    if (e.exitCode === 0) return; // --help, --version
    console.error(`latent: ${commanderMessage(e)}\nRun \`latent --help\` for the commands.`);
    process.exitCode = 2;
  }
}

/**
 * `latent … | head`: once the reader has gone, nothing more we write can be read, so stop at once and quietly (exit 0,
 * as when the output was wanted only up to there) instead of dying on an unhandled EPIPE.
 */
function exitQuietlyOnClosedPipe(stream: NodeJS.WriteStream): void {
  stream.on("error", (e: NodeJS.ErrnoException) => {
    if (e.code === "EPIPE") process.exit(0);
    throw e;
  });
}

/** Entry point of the `latent` CLI. Errors raised on purpose print one line and exit 1; usage errors exit 2. */
export async function main(argv: string[]): Promise<void> {
  exitQuietlyOnClosedPipe(process.stdout);
  exitQuietlyOnClosedPipe(process.stderr);
  // `latent help run` is `latent run --help`
  const [name, ...rest] = argv[0] === "help" && argv.length > 1 ? [argv[1], "--help"] : argv;
  const command = commands.find((c) => c.name === name);
  if (command === undefined) {
    topLevel(argv[0] === "help" && argv.length > 1 ? argv.slice(1) : argv);
    return;
  }
  try {
    await command.run(rest);
  } catch (e) {
    if (e instanceof LatentError) {
      // Messages quote names and values from the file: escaped, so that one error stays one line.
      const usage = e instanceof UsageError;
      console.error(`latent ${name}: ${usage ? printableLines(e.message) : printable(e.message)}`);
      process.exitCode = usage ? 2 : 1;
      return;
    }
    throw e;
  }
}
