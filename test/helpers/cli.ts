// In-process CLI runs with stdout/stderr captured.
import type { CliIO } from "../../src/cli/common.js";

export interface Captured {
  out: string;
  err: string;
}

export async function captureCli(
  main: (argv: string[], io: CliIO) => Promise<void>,
  argv: string[],
): Promise<Captured> {
  const c: Captured = { out: "", err: "" };
  await main(argv, { out: (t) => void (c.out += t), err: (t) => void (c.err += t), tty: false });
  return c;
}
