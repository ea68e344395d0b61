/**
 * The options of `npm run bench`, parsed once by bench/run.ts (which declares them, so its --help lists them all) and
 * read by the benchmark modules: arg("model") is the value of --model, flag("no-llama") whether --no-llama was given.
 */
const values = new Map<string, string | boolean>();

/** Set by bench/run.ts before any module runs: option name (as typed, without "--") → value. */
export function setBenchOptions(options: Readonly<Record<string, string | boolean | undefined>>): void {
  values.clear();
  for (const [name, value] of Object.entries(options)) if (value !== undefined) values.set(name, value);
}

/** The value given to `--name`, or undefined. */
export function arg(name: string): string | undefined {
  const v = values.get(name);
  return typeof v === "string" ? v : undefined;
}

/** Whether the switch `--name` was given. */
export function flag(name: string): boolean {
  return values.get(name) === true;
}
