/**
 * The streamed reference pass (`latent doctor --low-memory`) on a file: time and peak RSS for the reference or the CPU
 * kernels, over sequences like the endpoint check's (one token, a sentence, a long prompt).
 *   npx tsx bench/low-memory.ts MODEL.gguf [--kernels reference|cpu] [--threads N] [--tokens N]
 * Run one kernel set per process: the peak RSS is the process's.
 */
import { parseArgs } from "node:util";
import { GGUFFile } from "../src/gguf/file.js";
import { parseConfig } from "../src/model/config.js";
import { streamedLogits } from "../src/doctor/low-memory.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { kernels: { type: "string" }, threads: { type: "string" }, tokens: { type: "string" } },
});
const kernels = values.kernels === "cpu" ? "cpu" : "reference";
const long = Number(values.tokens ?? 300);
const file = GGUFFile.open(positionals[0]);
const c = parseConfig(file.metadata);
const ids = (n: number, a: number): number[] => Array.from({ length: n }, (_, i) => (i * a + 11) % c.nVocab);
const seqs = [ids(1, 37), ids(36, 37), ids(long, 53)];
const r = streamedLogits(file, c, seqs, {
  kernels,
  ...(values.threads !== undefined ? { threads: Number(values.threads) } : {}),
  onLayer: (p) =>
    process.stderr.write(
      `layer ${p.done}/${p.layers}: ${(p.elapsedMs / 1000).toFixed(1)} s, ~${(p.etaMs / 1000).toFixed(1)} s left\n`,
    ),
});
file.close();
const { lastTop5, ...rest } = r.report;
console.log(JSON.stringify({ ...rest, top1: lastTop5[0][0], sequences: seqs.map((s) => s.length) }));
