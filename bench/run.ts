/**
 * `npm run bench [-- --json results.json] [-- name ...]`: runs every registered benchmark module and prints its
 * results as a table. Without module names, `--backend webgpu` runs the webgpu module and `--backend cpu|reference`
 * the cpu one. To add a benchmark, write bench/NAME.ts exporting `run(): Promise<BenchResult[]> | BenchResult[]` and
 * add one line to MODULES below.
 */
import { writeFileSync } from "node:fs";

export interface BenchResult {
  /** what was measured, e.g. "dequant Q4_K 4096×1024" */
  readonly name: string;
  /** the headline number */
  readonly value: number;
  /** its unit, e.g. "MB/s" */
  readonly unit: string;
  /** anything else worth keeping in the JSON output */
  readonly extra?: Readonly<Record<string, number | string>>;
}

type BenchModule = { run(): Promise<BenchResult[]> | BenchResult[] };

/** name → loader; one line per benchmark module. */
const MODULES: Record<string, () => Promise<BenchModule>> = {
  dequant: () => import("./dequant.js"),
  webgpu: () => import("./webgpu.js"),
  "webgpu-kernels": () => import("./webgpu-kernels.js"),
  cpu: () => import("./cpu.js"),
  sampling: () => import("./sampling.js"),
};

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  let jsonPath: string | undefined;
  let backend: string | undefined;
  const only: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--json") jsonPath = args[++i] ?? "bench-results.json";
    else if (args[i]!.startsWith("--")) {
      // module options (--backend cpu --threads 2 ...): modules read process.argv
      if (args[i] === "--backend") backend = args[i + 1];
      i += args[i + 1]?.startsWith("--") === false ? 1 : 0;
    } else only.push(args[i]!);
  }
  if (only.length === 0 && backend !== undefined) only.push(backend === "webgpu" ? "webgpu" : "cpu");
  const all: Record<string, BenchResult[]> = {};
  for (const [name, load] of Object.entries(MODULES)) {
    if (only.length > 0 && !only.includes(name)) continue;
    const results = await (await load()).run();
    all[name] = results;
    console.log(`\n== ${name}`);
    const w = Math.max(...results.map((r) => r.name.length), 4);
    for (const r of results) {
      const v = r.value >= 100 ? r.value.toFixed(0) : r.value.toPrecision(3);
      console.log(`${r.name.padEnd(w)}  ${v.padStart(10)} ${r.unit}`);
    }
  }
  if (jsonPath !== undefined) {
    writeFileSync(jsonPath, JSON.stringify({ date: new Date().toISOString(), node: process.version, results: all }, null, 2) + "\n");
    console.log(`\nwrote ${jsonPath}`);
  }
}

await main();
