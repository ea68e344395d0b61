// `latent serve` as a child process for tests: waits for the "listening on URL" line on stderr, keeps all of stderr.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";

const BIN = join(import.meta.dirname, "..", "..", "bin", "latent.mjs");

export interface ServeChild {
  readonly child: ChildProcess;
  /** the server's base URL, once it listens (rejects when it exits first) */
  readonly url: Promise<string>;
  /** exit code */
  readonly exited: Promise<number | null>;
  /** everything written to stderr so far */
  stderr(): string;
}

export function spawnServe(args: readonly string[], env: NodeJS.ProcessEnv = process.env): ServeChild {
  const child = spawn(process.execPath, [BIN, "serve", ...args], { stdio: ["ignore", "pipe", "pipe"], env });
  let stderr = "";
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const url = new Promise<string>((resolve, reject) => {
    child.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m !== null) resolve(m[1]);
    });
    child.on("exit", () => reject(new Error(`server exited early:\n${stderr}`)));
  });
  url.catch(() => {}); // observed by the caller's await; not an unhandled rejection when the test ends first
  return { child, url, exited, stderr: () => stderr };
}
