// `latent … | head`: when the reader goes away the CLI exits quietly (no EPIPE stack trace).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";

const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const BIN = new URL("../../bin/latent.mjs", import.meta.url).pathname;

/** Run the CLI, read its first stdout bytes, close the pipe (as `head -c` does), and wait for the exit. */
function closeEarly(
  args: string[],
): Promise<{ code: number | null; signal: NodeJS.Signals | null; err: string; got: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let err = "";
    let got = 0;
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    child.stdout.once("data", (d: Buffer) => {
      got = d.length;
      child.stdout.destroy();
    });
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`no exit after the pipe closed; stderr: ${err}`));
    }, 60_000);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, err, got });
    });
  });
}

describe("a closed stdout", { timeout: 120_000 }, () => {
  it("logits --json --full: exits 0 without a stack trace", async () => {
    const r = await closeEarly([
      "logits",
      DEMO,
      "--tokens",
      Array.from({ length: 40 }, (_, i) => i + 5).join(","),
      "--json",
      "--full",
    ]);
    assert.ok(r.got > 0);
    assert.equal(r.code, 0, `exit ${r.code} ${r.signal}: ${r.err}`);
    assert.doesNotMatch(r.err, /EPIPE|\n\s+at /);
  });

  it("run: exits 0 without a stack trace", async () => {
    const r = await closeEarly([
      "run",
      DEMO,
      "-p",
      "In the beginning",
      "-n",
      "200",
      "--temp",
      "0",
      "--ignore-eos",
      "--backend",
      "reference",
    ]);
    assert.ok(r.got > 0);
    assert.equal(r.code, 0, `exit ${r.code} ${r.signal}: ${r.err}`);
    assert.doesNotMatch(r.err, /EPIPE|\n\s+at /);
  });
});
