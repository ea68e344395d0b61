import { Command as Parser, CommanderError } from "commander";
import { readFileSync } from "node:fs";
import { UsageError } from "../util/errors.js";

export { Parser };

/** Where a parser writes its help: the command's own output (a capture in tests). */
export interface HelpSink {
  out(text: string): void;
}

/**
 * Help in the house style: lowercase section titles ("usage:", "options:") and value placeholders without angle
 * brackets ("--temp T"), as the hand-written help had before, so that scripts and docs quoting it keep matching.
 */
export const HELP_STYLE = {
  styleTitle: (title: string) => title.toLowerCase(),
  optionTerm: (option: { flags: string }) => option.flags.replace(/<([^>]+)>/g, "$1"),
  // a pipe or a file has no width: 120 columns rather than commander's 80, which wraps most descriptions
  ...(process.stdout.isTTY ? {} : { helpWidth: 120 }),
};

/**
 * A subcommand's parser. Options are declared on it once, so its --help, its unknown-option errors (with "did you mean
 * --temp?") and its parsing can never disagree. Positionals are left to the command, which checks their count with
 * its own message ("expected one model path, got 0"). Values stay strings: each command range-checks them with the
 * messages users and tests know.
 */
export function commandParser(name: string, usage: string, description: string): Parser {
  return new Parser(`latent ${name}`)
    .usage(usage)
    .description(description)
    .allowExcessArguments(true)
    .helpOption("-h, --help", "this help")
    .showSuggestionAfterError(true)
    .configureHelp(HELP_STYLE);
}

/** Collects a repeatable option's values (`--stop a --stop b` → ["a", "b"]); absent → undefined. */
export function repeatable(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * Parse `argv` (the arguments after the command name). Returns the option values (camelCase keys, as commander names
 * them) and the positionals, or undefined when --help was printed. A malformed command line is a UsageError (exit 2).
 */
export function parseCommand<T>(
  parser: Parser,
  argv: readonly string[],
  sink: HelpSink,
): { opts: T; args: string[] } | undefined {
  parser.exitOverride().configureOutput({ writeOut: (s) => sink.out(s), writeErr: () => {}, outputError: () => {} });
  try {
    parser.parse([...argv], { from: "user" });
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === "commander.helpDisplayed" || e.code === "commander.help" || e.code === "commander.version")
        return undefined;
      throw new UsageError(`${commanderMessage(e)}\nRun \`${parser.name()} --help\` for its options.`);
    }
    throw e;
  }
  return { opts: parser.opts<Record<string, unknown>>() as T, args: [...parser.args] };
}

/** "error: unknown option '--x'" → "Unknown option '--x'" (the command name is prefixed by main). */
export function commanderMessage(e: CommanderError): string {
  const m = e.message.replace(/^error: /, "");
  return m.charAt(0).toUpperCase() + m.slice(1);
}

/** The package's version, from package.json (two levels up from both src/cli and dist/cli). */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version?: unknown };
  return typeof pkg.version === "string" ? pkg.version : "unknown";
}

/**
 * The parsed values keyed by the flags as typed ("max-batch", "no-prefix-cache": true when given), for commands whose
 * code reads them by flag name rather than commander's camelCase attribute names.
 */
export function valuesByFlag(parser: Parser): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const option of parser.options) {
    if (option.long === undefined || option.long === "--help") continue;
    const value: unknown = parser.getOptionValue(option.attributeName());
    if (option.negate) {
      if (value === false) values[option.long.slice(2)] = true;
    } else if (value !== undefined) values[option.long.slice(2)] = value;
  }
  return values;
}
