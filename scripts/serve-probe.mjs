// A dependency-free client for timing a running `latent serve`: for each N given, N concurrent /v1/completions
// requests of `--max-tokens` each (end-of-generation ignored; greedy, or with `--temperature T` sampled at T with a
// seed per request, and with `--top-p P` OpenAI's nucleus filter), then the aggregate generated tok/s and per-request
// wall times. Plain Node (no tsx), so that it runs where only the compiled tree is (scripts/h200-serve.sh).
//   node scripts/serve-probe.mjs --url http://127.0.0.1:8199 --clients 1,8,32 --max-tokens 128 [--temperature 1 [--top-p 0.9]] [--json FILE]
import { writeFileSync } from "node:fs";

const args = process.argv.slice(2);
const arg = (k, d) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
const url = arg("--url", "http://127.0.0.1:8080");
const clients = arg("--clients", "1,8").split(",").map(Number);
const maxTokens = Number(arg("--max-tokens", "128"));
const temperature = Number(arg("--temperature", "0"));
const topP = Number(arg("--top-p", "1"));

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

let model = "";
async function complete(i) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model,
      prompt: `Request ${i}: the quick brown fox jumps over the lazy dog`,
      max_tokens: maxTokens,
      temperature,
      ...(temperature > 0 ? { seed: i + 1 } : {}),
      ...(topP < 1 ? { top_p: topP } : {}),
      ignore_eos: true,
    }),
  });
  const body = await r.json();
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${JSON.stringify(body)}`);
  return { seconds: (performance.now() - t0) / 1000, tokens: body.usage?.completion_tokens ?? 0 };
}

await waitHealthy(600_000);
model = (await (await fetch(`${url}/v1/models`)).json()).data[0].id;
const results = [];
for (const n of [1, ...clients]) {
  const t0 = performance.now();
  const done = await Promise.all(Array.from({ length: n }, (_, i) => complete(i)));
  const wall = (performance.now() - t0) / 1000;
  const tokens = done.reduce((s, d) => s + d.tokens, 0);
  const per = done.map((d) => d.seconds).sort((a, b) => a - b);
  const row = {
    clients: n,
    tokens,
    wall_s: wall,
    tok_s: tokens / wall,
    request_s_p50: per[Math.floor(per.length / 2)],
    request_s_max: per[per.length - 1],
  };
  // the first single request warms the server up (pipelines compiled, steps recorded): reported, not kept
  if (results.length === 0 && n === 1 && clients[0] !== undefined) console.log(`warm-up: ${JSON.stringify(row)}`);
  else console.log(JSON.stringify(row));
  results.push(row);
}
const json = arg("--json");
if (json !== undefined) writeFileSync(json, JSON.stringify(results.slice(1), null, 2));
