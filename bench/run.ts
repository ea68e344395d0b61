/**
 * `npm run bench [-- --json results.json] [-- name ...]`: runs every registered benchmark module and prints its
 * results as a table. Without module names, `--backend webgpu` runs the webgpu module and `--backend cpu|reference`
 * the cpu one. To add a benchmark, write bench/NAME.ts exporting `run(): Promise<BenchResult[]> | BenchResult[]` and
 * add one line to MODULES below.
 */
import { renameSync, writeFileSync } from "node:fs";
import { Command } from "commander";
import { setBenchOptions } from "./args.js";

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

/** The command line: every option any module reads is declared here, so --help lists them and typos are caught. */
function benchParser(): Command {
  return (
    new Command("npm run bench --")
      .usage("[options] [module ...]")
      .description(
        `Run benchmark modules (${Object.keys(MODULES).join(", ")}) and print their results as a table. Without module names: all of them, or with --backend webgpu the webgpu module and with --backend cpu|reference the cpu one.`,
      )
      .argument("[module...]", `benchmarks to run: ${Object.keys(MODULES).join(", ")}`)
      .option("--json [FILE]", "also write the results as JSON (default file bench-results.json)")
      .option("--backend <B>", "cpu, reference or webgpu: picks the module without names, and the cpu module's kernels")
      .option("--threads <N>", "cpu: threads, or a list run in turn such as 1,2,all (default 2)")
      .option("--cpu-activations <MODE>", "cpu: activations of the cpu backend's integer dots, exact (default) or q8")
      .option(
        "--model <FILE>",
        "cpu, webgpu: the GGUF to run (cpu default: a synthesized v2-lite, 8 layers, Q4_K_M in the temp dir, reused while it checks out)",
      )
      .option("--prompt <N>", "cpu: prompt tokens prefilled in one batch (default 512)")
      .option("--decode <N>", "cpu: single-token decode steps (default 128)")
      .option("--repeat <N>", "cpu: rounds of latent and llama.cpp runs, interleaved; medians reported (default 1)")
      .option("--no-llama", "cpu: skip the llama.cpp side")
      .option("--batches <LIST>", "webgpu: batch sizes, comma-separated")
      .option("--gpu-activations <MODE>", "webgpu: activations of the register-tiled products, exact (default) or q8")
      .helpOption("-h, --help", "this help")
      .showSuggestionAfterError(true)
      // usage errors exit 2, as latent's own commands do (commander's default is 1)
      .exitOverride((e) => process.exit(e.exitCode === 0 ? 0 : 2))
      .configureHelp({
        styleTitle: (title) => title.toLowerCase(),
        optionTerm: (o) => o.flags.replace(/<([^>]+)>/g, "$1"),
      })
  );
}

interface BenchFlags {
  json?: string | boolean;
  backend?: string;
  threads?: string;
  cpuActivations?: string;
  model?: string;
  prompt?: string;
  decode?: string;
  repeat?: string;
  llama: boolean;
  batches?: string;
  gpuActivations?: string;
}

async function main(): Promise<void> {
  const parser = benchParser();
  parser.parse(process.argv.slice(2), { from: "user" });
  const opts = parser.opts<BenchFlags>();
  const only = parser.args;
  const unknown = only.filter((m) => !(m in MODULES));
  if (unknown.length > 0)
    parser.error(`error: unknown benchmark ${unknown.join(", ")} (the modules: ${Object.keys(MODULES).join(", ")})`, {
      exitCode: 2,
    });
  const { json, llama, ...valued } = opts;
  setBenchOptions({ ...valued, "no-llama": !llama });
  const jsonPath = json === true ? "bench-results.json" : json === false ? undefined : json;
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
    // a temporary name renamed when complete: a reader of jsonPath never sees half a file
    const partial = `${jsonPath}.partial-${process.pid}`;
    writeFileSync(
      partial,
      JSON.stringify({ date: new Date().toISOString(), node: process.version, results: all }, null, 2) + "\n",
    );
    renameSync(partial, jsonPath);
    console.log(`\nwrote ${jsonPath}`);
  }
}

await main();
