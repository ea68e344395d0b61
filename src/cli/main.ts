import { LatentError, UsageError } from "../util/errors.js";
import { printable, printableLines } from "../util/printable.js";
import { commands } from "./commands.js";

function usage(): string {
  const lines = ["usage: latent <command> [options]", "", "commands:"];
  for (const c of commands) lines.push(`  ${c.name.padEnd(10)} ${c.summary}`);
  lines.push("", "Run `latent <command> --help` for a command's options.");
  return lines.join("\n");
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
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return;
  }
  const command = commands.find((c) => c.name === name);
  if (command === undefined) {
    console.error(`latent: unknown command "${name}"\n\n${usage()}`);
    process.exitCode = 2;
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
    // node:util parseArgs rejects unknown or malformed options with ERR_PARSE_ARGS_*: a usage error, not a crash
    if (e instanceof TypeError && String((e as NodeJS.ErrnoException).code).startsWith("ERR_PARSE_ARGS_")) {
      console.error(`latent ${name}: ${e.message}\nRun \`latent ${name} --help\` for its options.`);
      process.exitCode = 2;
      return;
    }
    throw e;
  }
}
