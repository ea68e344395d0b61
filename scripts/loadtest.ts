#!/usr/bin/env -S node --import tsx
/**
 * Load test for `latent serve` (loopback only, bounded in time and count): N concurrent streaming clients send
 * completions for T seconds; at the deadline the streams still open are aborted (cancellation is part of the test).
 * Reports throughput, TTFT and inter-token-latency percentiles, errors, and the KV pages still held once the server
 * is idle (leaked pages: must be 0).
 *
 *   node --import tsx scripts/loadtest.ts --model /tmp/m.gguf --clients 8 --duration 60 [-- serve options]
 *   node --import tsx scripts/loadtest.ts --url http://127.0.0.1:8080 --clients 8 --duration 60
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { Rng } from "../src/synth/random-blocks.js";

const HELP = `usage: node --import tsx scripts/loadtest.ts (--model FILE.gguf | --url http://127.0.0.1:PORT) [options] [-- latent serve options]

  --model FILE         start \`latent serve FILE\` on a free loopback port for the run (stopped after)
  --url URL            use a running server (loopback addresses only)
  --api-key KEY        bearer key for --url
  --clients N          concurrent streaming clients (default 8)
  --duration S         seconds of load (default 60); open streams are aborted at the deadline
  --max-requests R     most requests in all (default 10000)
  --prompt-tokens P    prompt length in token ids (default 32)
  --shared-prefix S    the first S prompt tokens are the same for every request (default 0)
  --max-tokens M       tokens per completion (default 32; end-of-generation ignored)
  --json               print the report as JSON`;

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);

interface Report {
  clients: number;
  duration_s: number;
  elapsed_s: number;
  requests_started: number;
  requests_completed: number;
  requests_aborted_at_deadline: number;
  errors: number;
  error_samples: string[];
  prompt_tokens: number;
  generated_tokens: number;
  throughput_tokens_per_s: number;
  ttft_ms: Percentiles;
  itl_ms: Percentiles;
  kv_pages_total: number;
  kv_pages_leaked: number;
  prefix_cache_hits: number;
  preemptions: number;
}

interface Percentiles {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

function percentiles(xs: number[]): Percentiles {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number): number =>
    s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
  const r = (x: number): number => Math.round(x * 10) / 10;
  return { n: s.length, p50: r(at(0.5)), p90: r(at(0.9)), p99: r(at(0.99)), max: r(s.length ? s[s.length - 1] : NaN) };
}

function int(name: string, v: string | undefined, dflt: number, min: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

/** deterministic ids in [lo, hi), from the project's seeded generator */
function ids(n: number, seed: number, lo: number, hi: number): number[] {
  const rng = new Rng(seed, "loadtest-prompt");
  return Array.from({ length: n }, () => lo + Math.floor(rng.uniform() * (hi - lo)));
}

async function metric(url: string, name: string): Promise<number> {
  let text: string;
  try {
    text = await (await fetch(`${url}/metrics`)).text();
  } catch (e) {
    throw new Error(`GET ${url}/metrics: ${e instanceof Error ? `${e.message} (${String(e.cause)})` : String(e)}`);
  }
  const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  return m === null ? NaN : Number(m[1]);
}

async function startServe(model: string, extra: string[]): Promise<{ url: string; child: ChildProcess }> {
  const bin = join(import.meta.dirname, "..", "bin", "latent.mjs");
  const child = spawn(
    process.execPath,
    [bin, "serve", model, "--host", "127.0.0.1", "--port", "0", "--alias", "loadtest", ...extra],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let err = "";
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on("data", (d: Buffer) => {
      err += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m !== null) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`latent serve exited (${code}):\n${err}`)));
  });
  process.stderr.write(err.trim().split("\n").pop()! + "\n");
  child.on("exit", (code, signal) => {
    if (code !== 0)
      process.stderr.write(
        `loadtest: latent serve exited (code ${code}, signal ${signal}); its stderr:\n${err.slice(-4000)}\n`,
      );
  });
  return { url, child };
}

async function main(): Promise<void> {
  const dash = process.argv.indexOf("--");
  const own = dash < 0 ? process.argv.slice(2) : process.argv.slice(2, dash);
  const serveArgs = dash < 0 ? [] : process.argv.slice(dash + 1);
  const { values } = parseArgs({
    args: own,
    options: {
      model: { type: "string" },
      url: { type: "string" },
      "api-key": { type: "string" },
      clients: { type: "string" },
      duration: { type: "string" },
      "max-requests": { type: "string" },
      "prompt-tokens": { type: "string" },
      "shared-prefix": { type: "string" },
      "max-tokens": { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true || (values.model === undefined) === (values.url === undefined)) {
    console.log(HELP);
    process.exitCode = values.help === true ? 0 : 2;
    return;
  }
  const clients = int("clients", values.clients, 8, 1);
  const duration = int("duration", values.duration, 60, 1);
  const maxRequests = int("max-requests", values["max-requests"], 10000, 1);
  const promptTokens = int("prompt-tokens", values["prompt-tokens"], 32, 1);
  const shared = Math.min(int("shared-prefix", values["shared-prefix"], 0, 0), promptTokens);
  const maxTokens = int("max-tokens", values["max-tokens"], 32, 1);
  if (clients > 256) throw new Error("--clients is capped at 256");
  if (duration > 3600) throw new Error("--duration is capped at 3600 s");

  let child: ChildProcess | undefined;
  let url: string;
  if (values.url !== undefined) {
    const u = new URL(values.url);
    if (!LOOPBACK.has(u.hostname))
      throw new Error(`--url must be a loopback address (127.0.0.1, localhost, ::1), got ${u.hostname}`);
    url = u.origin;
  } else ({ url, child } = await startServe(values.model!, serveArgs));
  const hardStop = setTimeout(
    () => {
      process.stderr.write("loadtest: hard time limit reached, exiting\n");
      child?.kill("SIGKILL");
      process.exit(3);
    },
    (duration + 300) * 1000,
  );
  hardStop.unref();

  try {
    const client = new OpenAI({
      baseURL: `${url}/v1`,
      apiKey: values["api-key"] ?? "none",
      maxRetries: 0,
      timeout: (duration + 120) * 1000,
    });
    const model = (await client.models.list()).data[0].id;
    const meta = (await (await fetch(`${url}/v1/models`)).json()) as { data: { meta?: { n_vocab?: number } }[] };
    const nVocab = meta.data[0]?.meta?.n_vocab ?? 1000;
    const prefix = ids(shared, 12345, Math.min(100, nVocab - 1), Math.min(nVocab, 5000));
    const hits0 = await metric(url, "latent_prefix_cache_hits_total");
    const pre0 = await metric(url, "latent_preemptions_total");

    const ttft: number[] = [];
    const itl: number[] = [];
    const errors: string[] = [];
    let started = 0;
    let completed = 0;
    let aborted = 0;
    let generated = 0;
    let prompted = 0;
    const open = new Set<AbortController>();
    const t0 = performance.now();
    const deadline = t0 + duration * 1000;
    let over = false;
    const stopAll = setTimeout(() => {
      over = true;
      for (const ac of open) ac.abort();
    }, duration * 1000);

    const worker = async (w: number): Promise<void> => {
      while (!over && performance.now() < deadline && started < maxRequests) {
        const seq = started++;
        const prompt = [
          ...prefix,
          ...ids(promptTokens - shared, 1000 + seq, Math.min(100, nVocab - 1), Math.min(nVocab, 5000)),
        ];
        const ac = new AbortController();
        open.add(ac);
        const sent = performance.now();
        let last = 0;
        let tokens = 0;
        try {
          const stream = await client.completions.create(
            {
              model,
              prompt,
              max_tokens: maxTokens,
              temperature: 0.8,
              seed: seq,
              logprobs: 0,
              stream: true,
              stream_options: { include_usage: true },
              ignore_eos: true,
            } as OpenAI.CompletionCreateParamsStreaming,
            { signal: ac.signal },
          );
          for await (const ch of stream) {
            const c = ch.choices[0];
            if (c !== undefined && c.finish_reason === null) {
              const now = performance.now();
              if (tokens === 0) ttft.push(now - sent);
              else itl.push(now - last);
              last = now;
              tokens++;
            }
          }
          // an aborted stream may end without throwing
          if (ac.signal.aborted) aborted++;
          else {
            completed++;
            prompted += prompt.length;
          }
        } catch (e) {
          if (ac.signal.aborted) aborted++;
          else {
            const cause =
              e instanceof Error && e.cause !== undefined
                ? ` (${e.cause instanceof Error ? `${e.cause.message}${e.cause.cause !== undefined ? `: ${String(e.cause.cause)}` : ""}` : String(e.cause)})`
                : "";
            const at = ((performance.now() - t0) / 1000).toFixed(1);
            if (
              errors.push(
                `client ${w} at ${at} s after ${tokens} tokens: ${e instanceof Error ? e.message : String(e)}${cause}`,
              ) > 1000
            )
              errors.length = 1000;
          }
        } finally {
          generated += tokens;
          open.delete(ac);
        }
      }
    };
    await Promise.all(Array.from({ length: clients }, (_, w) => worker(w)));
    clearTimeout(stopAll);
    const elapsed = (performance.now() - t0) / 1000;

    // wait for the server to finish the cancellations, then count what it still holds
    const settleBy = performance.now() + 120_000;
    while (performance.now() < settleBy) {
      const running = await metric(url, "latent_running_sequences");
      const queued = await metric(url, "latent_queue_depth");
      if (running === 0 && queued === 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const report: Report = {
      clients,
      duration_s: duration,
      elapsed_s: Math.round(elapsed * 10) / 10,
      requests_started: started,
      requests_completed: completed,
      requests_aborted_at_deadline: aborted,
      errors: errors.length,
      error_samples: errors.slice(0, 5),
      prompt_tokens: prompted,
      generated_tokens: generated,
      throughput_tokens_per_s: Math.round((generated / elapsed) * 100) / 100,
      ttft_ms: percentiles(ttft),
      itl_ms: percentiles(itl),
      kv_pages_total: await metric(url, "latent_kv_pages_total"),
      kv_pages_leaked: await metric(url, "latent_kv_pages_in_use"),
      prefix_cache_hits: (await metric(url, "latent_prefix_cache_hits_total")) - hits0,
      preemptions: (await metric(url, "latent_preemptions_total")) - pre0,
    };
    if (values.json === true) console.log(JSON.stringify(report, null, 2));
    else {
      const p = (x: Percentiles): string =>
        `p50 ${x.p50} ms, p90 ${x.p90} ms, p99 ${x.p99} ms, max ${x.max} ms (n=${x.n})`;
      console.log(
        `clients ${clients}, ${report.elapsed_s} s: ${started} requests (${completed} completed, ${aborted} aborted at the deadline, ${errors.length} errors)`,
      );
      console.log(`throughput ${report.throughput_tokens_per_s} generated tokens/s (${generated} tokens)`);
      console.log(`TTFT ${p(report.ttft_ms)}`);
      console.log(`ITL  ${p(report.itl_ms)}`);
      console.log(
        `KV pages leaked ${report.kv_pages_leaked} of ${report.kv_pages_total}; prefix-cache page hits ${report.prefix_cache_hits}; preemptions ${report.preemptions}`,
      );
      for (const e of report.error_samples) console.log(`error: ${e}`);
    }
    if (report.kv_pages_leaked !== 0 || errors.length > 0) process.exitCode = 1;
  } finally {
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise<void>((r) => child!.on("exit", () => r()));
      child.kill("SIGTERM");
      const t = setTimeout(() => child!.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(t);
    }
  }
}

main().catch((e: unknown) => {
  console.error(`loadtest: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
