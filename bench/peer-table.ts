/**
 * The ratio table of latent's WebGPU bench against llama.cpp CUDA on the same GGUF, from the files one run of
 * scripts/h200-peer-bench.sh leaves in its output folder:
 *   llama-pp.json, llama-depth.json   llama-bench -o json (pp512/pp4096/tg128 at depth 0, tg128 at depth 4096/16384)
 *   llama-batched.jsonl               llama-batched-bench --output-format jsonl (S_TG at B = 1, 8, 32, 64)
 *   latent-*.json                     bench/webgpu-model.ts --json (prefill, decode batch B, decode after N keys)
 *   latent-q8-*.json                  the same with --activations q8 (rows of their own: prefill and batched decode with 8-bit activations)
 *   latent-budget.json, llama-ot.json with a GPU memory budget: latent's expert cache against llama.cpp's experts on
 *                                     the CPU (-ot exps=CPU)
 *   latent-serve<N>.json              scripts/serve-probe.mjs --stream --json: `latent serve` under N streaming clients,
 *                                     its decode rate beside S_TG and its overall rate beside S at B = N
 * `node --import tsx bench/peer-table.ts DIR [DIR …]` prints one markdown table per folder (one folder per model).
 * A figure measured by several runs (latent's prefill 512 and short-context decode come from more than one) is shown
 * as the range of those runs, and its ratio as the range over both sides' figures.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

interface LlamaBenchRow {
  readonly n_prompt: number;
  readonly n_gen: number;
  readonly n_depth?: number;
  readonly avg_ts: number;
  readonly stddev_ts: number;
  readonly model_type?: string;
}

interface BatchedRow {
  readonly pl: number;
  readonly pp: number;
  readonly tg: number;
  readonly speed_tg: number;
  /** prompt and generated tokens over the whole time (S) */
  readonly speed?: number;
}

/** One round of scripts/serve-probe.mjs --stream (the fields the table reads). */
export interface ServeProbeRow {
  readonly clients: number;
  /** generated tokens, all clients */
  readonly tokens: number;
  readonly prompt_tokens: number;
  readonly max_tokens: number;
  /** the tokens that came after every client had its first one, over the time from then to the last token */
  readonly decode_tok_s: number;
  /** prompt + generated tokens over the round's wall time */
  readonly total_tok_s: number;
  readonly ttft_s_mean?: number;
  readonly ttft_s_p50: number;
  readonly ttft_s_max: number;
}

interface LatentResult {
  readonly name: string;
  readonly value: number;
  readonly extra?: Readonly<Record<string, number | string>>;
}

interface LatentRun {
  readonly model: string;
  /** the decode context of the run (keys each slot held before its decode steps), from the file name */
  readonly context: number;
  /** a run with --activations q8 (latent-q8-*.json) */
  readonly q8: boolean;
  readonly results: readonly LatentResult[];
}

/** the lowest and highest of the runs that measured a figure (one run: both the same) */
export type Span = readonly [number, number];

export interface PeerRow {
  readonly work: string;
  readonly llama: Span | undefined;
  /** latent's plain figure and, for decode, the chained one (greedy on the GPU) */
  readonly latent: Span | undefined;
  readonly chained?: Span;
}

function readJson<T>(path: string): T | undefined {
  return existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as T) : undefined;
}

function readJsonl<T>(path: string): T[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as T);
}

/** latent-ctx<N>.json: a bench run whose decode steps start from N keys (prefill figures from the run's --prompt). */
function latentRuns(dir: string, budget = false): LatentRun[] {
  return readdirSync(dir)
    .filter(
      (f) => /^latent-.*\.json$/.test(f) && f.startsWith("latent-budget") === budget && !f.startsWith("latent-serve"),
    )
    .sort()
    .map((f) => {
      const run = readJson<{ model: string; results: LatentResult[] }>(join(dir, f))!;
      const ctx = /ctx(\d+)/.exec(f);
      return {
        model: run.model,
        context: ctx !== null ? Number(ctx[1]) : 16,
        q8: f.startsWith("latent-q8"),
        results: run.results,
      };
    });
}

const span = (xs: readonly number[]): Span | undefined =>
  xs.length === 0 ? undefined : [Math.min(...xs), Math.max(...xs)];

/** The rows of one model's comparison; a side that did not run that work is undefined. */
export function peerRows(dir: string): PeerRow[] {
  const llama = [
    ...(readJson<LlamaBenchRow[]>(join(dir, "llama-pp.json")) ?? []),
    ...(readJson<LlamaBenchRow[]>(join(dir, "llama-depth.json")) ?? []),
  ];
  const batched = readJsonl<BatchedRow>(join(dir, "llama-batched.jsonl"));
  const runs = latentRuns(dir);
  const latent = (pred: (r: LatentResult, run: LatentRun) => boolean, q8 = false): Span | undefined =>
    span(runs.flatMap((run) => (run.q8 === q8 ? run.results.filter((r) => pred(r, run)).map((r) => r.value) : [])));
  const pp = (n: number): Span | undefined =>
    span(llama.filter((r) => r.n_prompt === n && r.n_gen === 0 && (r.n_depth ?? 0) === 0).map((r) => r.avg_ts));
  const tg = (depth: number): Span | undefined =>
    span(llama.filter((r) => r.n_prompt === 0 && r.n_gen > 0 && (r.n_depth ?? 0) === depth).map((r) => r.avg_ts));
  const rows: PeerRow[] = [];
  for (const n of [512, 4096])
    rows.push({ work: `prefill ${n}`, llama: pp(n), latent: latent((r) => r.name === `prefill ${n} tokens`) });
  // latent-q8-*.json: latent with --activations q8 (8-bit activations in the prompt's products; llama.cpp's are 8-bit too)
  for (const n of [512, 4096]) {
    const q8 = latent((r) => r.name === `prefill ${n} tokens`, true);
    if (q8 !== undefined) rows.push({ work: `prefill ${n}, latent --gpu-activations q8`, llama: pp(n), latent: q8 });
  }
  for (const B of [1, 8, 32, 64]) {
    const peer = B === 1 ? tg(0) : span(batched.filter((r) => r.pl === B).map((r) => r.speed_tg));
    rows.push({
      work: `decode batch ${B}${B === 1 ? " (llama.cpp: tg128)" : " (llama.cpp: batched-bench S_TG)"}`,
      llama: peer,
      latent: latent((r, run) => run.context <= 256 && r.name === `decode batch ${B}`),
      chained: latent((r, run) => run.context <= 256 && r.name === `decode batch ${B}, greedy on the GPU (chained)`),
    });
    const q8 = (name: string): Span | undefined => latent((r, run) => run.context <= 256 && r.name === name, true);
    if (q8(`decode batch ${B}`) !== undefined)
      rows.push({
        work: `decode batch ${B}, latent --gpu-activations q8`,
        llama: peer,
        latent: q8(`decode batch ${B}`),
        chained: q8(`decode batch ${B}, greedy on the GPU (chained)`),
      });
  }
  for (const depth of [4096, 16384])
    rows.push({
      work: `decode batch 1 after ${depth} tokens`,
      llama: tg(depth),
      latent: latent((r, run) => run.context === depth && r.name === "decode batch 1"),
      chained: latent((r, run) => run.context === depth && r.name === "decode batch 1, greedy on the GPU (chained)"),
    });
  return rows.filter((r) => r.llama !== undefined || r.latent !== undefined);
}

/** With a GPU memory budget: latent's streamed experts against llama.cpp's experts on the CPU. */
export function budgetRows(dir: string): PeerRow[] {
  const llama = readJson<LlamaBenchRow[]>(join(dir, "llama-ot.json")) ?? [];
  const runs = latentRuns(dir, true);
  const latent = (name: string): Span | undefined =>
    span(runs.flatMap((run) => run.results.filter((r) => r.name === name).map((r) => r.value)));
  const rows: PeerRow[] = [
    {
      work: "prefill 512, budget vs -ot exps=CPU",
      llama: span(llama.filter((r) => r.n_prompt === 512 && r.n_gen === 0).map((r) => r.avg_ts)),
      latent: latent("prefill 512 tokens"),
    },
    {
      work: "decode batch 1, budget vs -ot exps=CPU",
      llama: span(llama.filter((r) => r.n_prompt === 0 && r.n_gen > 0).map((r) => r.avg_ts)),
      latent: latent("decode batch 1"),
      chained: latent("decode batch 1, greedy on the GPU (chained)"),
    },
    {
      work: "decode batch 8, budget (llama.cpp: not run)",
      llama: undefined,
      latent: latent("decode batch 8"),
      chained: latent("decode batch 8, greedy on the GPU (chained)"),
    },
  ];
  return rows.filter((r) => r.llama !== undefined || r.latent !== undefined);
}

/** The serve probe's rounds (latent-serve<N>.json), streamed ones only. */
export function serveProbeRows(dir: string): ServeProbeRow[] {
  return readdirSync(dir)
    .filter((f) => /^latent-serve\d+\.json$/.test(f))
    .sort()
    .flatMap((f) => readJson<(ServeProbeRow & { stream?: boolean })[]>(join(dir, f)) ?? [])
    .filter((r) => r.stream === true && r.clients > 0);
}

/**
 * `latent serve` under N concurrent clients of P prompt + G generated tokens each: its aggregate decode rate beside
 * llama-batched-bench's S_TG at B = N (-npp P -ntg G), and its overall rate beside batched-bench's S.
 */
export function serveRows(dir: string): PeerRow[] {
  const probes = serveProbeRows(dir);
  const batched = readJsonl<BatchedRow>(join(dir, "llama-batched.jsonl"));
  const rows: PeerRow[] = [];
  for (const n of [...new Set(probes.map((r) => r.clients))].sort((a, b) => a - b)) {
    const mine = probes.filter((r) => r.clients === n);
    const prompt = Math.round(mine[0].prompt_tokens / n);
    const gen = mine[0].max_tokens;
    const peer = batched.filter((r) => r.pl === n && r.pp === prompt && r.tg === gen);
    const work = `serve, ${n} clients (${prompt}+${gen})`;
    rows.push({
      work,
      llama: span(peer.map((r) => r.speed_tg)),
      latent: span(mine.map((r) => r.decode_tok_s)),
    });
    rows.push({
      work: `${work}, prompt + generated over wall time (llama.cpp: batched-bench S)`,
      llama: span(peer.flatMap((r) => (r.speed !== undefined ? [r.speed] : []))),
      latent: span(mine.map((r) => r.total_tok_s)),
    });
  }
  return rows;
}

/** One line per client count: the serve rounds' time to first token. */
export function serveNotes(dir: string): string[] {
  return serveProbeRows(dir).map(
    (r) =>
      `serve, ${r.clients} clients: time to first token ${r.ttft_s_mean !== undefined ? `mean ${r.ttft_s_mean.toFixed(2)} s, ` : ""}p50 ${r.ttft_s_p50.toFixed(2)} s, max ${r.ttft_s_max.toFixed(2)} s; ${r.tokens} tokens generated`,
  );
}

const num = (x: number): string => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
const fmt = (x: Span | undefined): string =>
  x === undefined ? "–" : x[0] === x[1] ? num(x[0]) : `${num(x[0])}–${num(x[1])}`;
/** latent ÷ llama.cpp over both spans: the lowest latent against the highest llama.cpp, and the other way round */
const ratio = (a: Span | undefined, b: Span | undefined): string => {
  if (a === undefined || b === undefined) return "–";
  const lo = (a[0] / b[1]).toFixed(2);
  const hi = (a[1] / b[0]).toFixed(2);
  return lo === hi ? `${lo}×` : `${lo}–${hi}×`;
};

/** Markdown: work | llama.cpp CUDA | latent | latent chained | ratio (plain, chained). */
export function peerTable(rows: readonly PeerRow[]): string {
  const out = [
    "| work | llama.cpp CUDA tok/s | latent WebGPU tok/s | latent, greedy chained on the GPU | ratio | ratio, chained |",
    "| --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of rows)
    out.push(
      `| ${r.work} | ${fmt(r.llama)} | ${fmt(r.latent)} | ${fmt(r.chained)} | ${ratio(r.latent, r.llama)} | ${ratio(r.chained, r.llama)} |`,
    );
  return out.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const dirs = process.argv.slice(2);
  if (dirs.length === 0) {
    console.error("usage: peer-table DIR [DIR …] (folders written by scripts/h200-peer-bench.sh)");
    process.exit(2);
  }
  for (const dir of dirs) {
    const model = latentRuns(dir)[0]?.model ?? dir;
    console.log(`\n${model}\n\n${peerTable([...peerRows(dir), ...serveRows(dir)])}`);
    const notes = serveNotes(dir);
    if (notes.length > 0) console.log(`\n${notes.join("\n")}`);
    const budget = budgetRows(dir);
    if (budget.length > 0) console.log(`\nwith a GPU memory budget\n\n${peerTable(budget)}`);
  }
}
