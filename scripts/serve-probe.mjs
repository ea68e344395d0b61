// A dependency-free client for timing a running `latent serve`: for each N given, N concurrent /v1/completions
// requests of `--max-tokens` each (end-of-generation ignored; greedy, or with `--temperature T` sampled at T with a
// seed per request, and with `--top-p P` OpenAI's nucleus filter), then the aggregate generated tok/s and per-request
// wall times. Plain Node (no tsx), so that it runs where only the compiled tree is (scripts/h200-serve.sh,
// scripts/h200-peer-bench.sh).
//   node scripts/serve-probe.mjs --url http://127.0.0.1:8199 --clients 1,8,32 --max-tokens 128 [--temperature 1 [--top-p 0.9]] [--json FILE]
// `--warmup 1,32`: client counts run first, reported as warm-up and left out of the JSON (default 1: one request).
// `--stream --prompt-tokens P` (llama-batched-bench's -npp P -ntg M): each request sends P token ids (seeded, different
// for every request and round, so that no prompt comes from the prefix cache) and streams its tokens (logprobs: 0, so
// that every token comes as its own chunk); each row then also has the time to first token, the prompt tokens, the
// overall rate (prompt + generated over the round's wall time, batched-bench's S) and the decode rate: the tokens that
// arrived after every request had its first one, over the time from then to the last token (batched-bench's S_TG).
// `--timeout S`: the most seconds one round may take (default 600).
import { writeFileSync } from "node:fs";

const args = process.argv.slice(2);
const arg = (k, d) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
const url = arg("--url", "http://127.0.0.1:8080");
const list = (s) => (s === "" ? [] : s.split(",").map(Number));
const clients = list(arg("--clients", "1,8"));
const warmup = list(arg("--warmup", "1"));
const maxTokens = Number(arg("--max-tokens", "128"));
const temperature = Number(arg("--temperature", "0"));
const topP = Number(arg("--top-p", "1"));
const stream = args.includes("--stream");
const promptTokens = Number(arg("--prompt-tokens", "0"));
const roundTimeoutMs = Number(arg("--timeout", "600")) * 1000;

async function waitHealthy(deadlineMs) {
  const end = Date.now() + deadlineMs;
  for (;;) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > end) throw new Error(`${url}/health did not answer within ${deadlineMs / 1000} s`);
    await new Promise((res) => setTimeout(res, 500));
  }
}

/** P token ids in [lo, hi), the same for the same seed (mulberry32) */
function promptIds(seed, lo, hi) {
  let a = seed >>> 0;
  return Array.from({ length: promptTokens }, () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return lo + Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * (hi - lo));
  });
}

let model = "";
let vocab = 1000;
async function complete(i, round, signal) {
  const t0 = performance.now();
  const body = {
    model,
    prompt:
      promptTokens > 0
        ? promptIds(round * 1000003 + i + 1, Math.min(100, vocab - 1), Math.min(vocab, 5000))
        : `Request ${i}: the quick brown fox jumps over the lazy dog`,
    max_tokens: maxTokens,
    temperature,
    ...(temperature > 0 ? { seed: i + 1 } : {}),
    ...(topP < 1 ? { top_p: topP } : {}),
    ignore_eos: true,
    ...(stream ? { stream: true, stream_options: { include_usage: true }, logprobs: 0 } : {}),
  };
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  if (!stream) {
    const json = await r.json();
    if (!r.ok) throw new Error(`HTTP ${r.status}: ${JSON.stringify(json)}`);
    return { start: t0, seconds: (performance.now() - t0) / 1000, tokens: json.usage?.completion_tokens ?? 0 };
  }
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  // SSE: `data: JSON\n\n` events, the usage chunk last, then `data: [DONE]`
  const times = [];
  let usage;
  let buf = "";
  const text = new TextDecoder();
  for await (const bytes of r.body) {
    const now = performance.now();
    buf += text.decode(bytes, { stream: true });
    for (let at = buf.indexOf("\n\n"); at >= 0; at = buf.indexOf("\n\n")) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const msg = JSON.parse(data);
        if (msg.error !== undefined)
          throw new Error(`stream error after ${times.length} tokens: ${JSON.stringify(msg)}`);
        if (msg.usage) usage = msg.usage;
        for (const c of msg.choices ?? [])
          if (c.finish_reason === null || c.finish_reason === undefined) times.push(now);
      }
    }
  }
  return {
    start: t0,
    seconds: (performance.now() - t0) / 1000,
    tokens: usage?.completion_tokens ?? times.length,
    promptTokens: usage?.prompt_tokens ?? 0,
    times,
  };
}

const median = (xs) => xs[Math.floor(xs.length / 2)];
const r3 = (x) => Math.round(x * 1000) / 1000;

async function round(n, index) {
  const abort = AbortSignal.timeout(roundTimeoutMs);
  const t0 = performance.now();
  const done = await Promise.all(Array.from({ length: n }, (_, i) => complete(i, index, abort)));
  const end = performance.now();
  const wall = (end - t0) / 1000;
  const tokens = done.reduce((s, d) => s + d.tokens, 0);
  const per = done.map((d) => d.seconds).sort((a, b) => a - b);
  const row = {
    clients: n,
    tokens,
    wall_s: r3(wall),
    tok_s: r3(tokens / wall),
    request_s_p50: r3(median(per)),
    request_s_max: r3(per[per.length - 1]),
  };
  if (!stream) return row;
  const prompt = done.reduce((s, d) => s + d.promptTokens, 0);
  const ttft = done.map((d) => ((d.times[0] ?? end) - d.start) / 1000).sort((a, b) => a - b);
  // the decode phase: from the moment every request had its first token to the last token
  const from = Math.max(...done.map((d) => d.times[0] ?? end));
  const to = Math.max(...done.map((d) => d.times[d.times.length - 1] ?? end));
  const decodeTokens = done.reduce((s, d) => s + d.times.filter((t) => t > from).length, 0);
  return {
    ...row,
    stream: true,
    prompt_tokens: prompt,
    max_tokens: maxTokens,
    // batched-bench's S: prompt and generated tokens over the round's wall time
    total_tok_s: r3((prompt + tokens) / wall),
    decode_tokens: decodeTokens,
    decode_s: r3((to - from) / 1000),
    decode_tok_s: to > from ? r3(decodeTokens / ((to - from) / 1000)) : 0,
    // the prompts' tokens over the time until every request had its first token (decode steps of the early ones in it)
    prompt_tok_s: r3(prompt / ((from - t0) / 1000)),
    ttft_s_min: r3(ttft[0]),
    ttft_s_mean: r3(ttft.reduce((a, b) => a + b, 0) / ttft.length),
    ttft_s_p50: r3(median(ttft)),
    ttft_s_max: r3(ttft[ttft.length - 1]),
    // tokens counted from the chunks against the usage the server reports (0 unless a chunk carried several)
    token_count_mismatch: done.reduce((s, d) => s + Math.abs(d.tokens - d.times.length), 0),
  };
}

await waitHealthy(600_000);
const models = await (await fetch(`${url}/v1/models`)).json();
model = models.data[0].id;
vocab = models.data[0].meta?.n_vocab ?? vocab;
const results = [];
let index = 0;
for (const n of warmup) console.log(`warm-up: ${JSON.stringify(await round(n, index++))}`);
for (const n of clients) {
  const row = await round(n, index++);
  console.log(JSON.stringify(row));
  results.push(row);
}
const json = arg("--json");
if (json !== undefined) writeFileSync(json, JSON.stringify(results, null, 2));
