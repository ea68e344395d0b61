// llama.cpp (node-llama-cpp 3.21.1, CPU, F32 KV cache, flash attention off) as a numerical oracle, run in a child
// process because ggml asserts abort the whole process.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const TOOL = new URL("./oracle-logprobs.mjs", import.meta.url).pathname;

/** llama.cpp's full-vocabulary log-probs after every position, for each token sequence. */
export function oracleLogprobs(modelPath: string, sequences: readonly (readonly number[])[]): (number | null)[][][] {
  const dir = mkdtempSync(join(tmpdir(), "latent-oracle-"));
  try {
    const input = join(dir, "tokens.json");
    const output = join(dir, "out.json");
    writeFileSync(input, JSON.stringify(sequences));
    execFileSync(process.execPath, [TOOL, modelPath, "--tokens-file", input, "--out", output, "--quiet"], {
      stdio: ["ignore", "ignore", "pipe"],
      timeout: 120_000,
    });
    const res = JSON.parse(readFileSync(output, "utf8")) as { cases: { logprobs: (number | null)[][] }[] };
    return res.cases.map((c) => c.logprobs);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
