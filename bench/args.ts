/** The value after `--name` on the command line of `npm run bench` (benchmark modules read their own options). */
export function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
