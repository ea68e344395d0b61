// The request path under a structured fuzzer: valid requests to every POST endpoint, mutated (fields dropped,
// values swapped for other JSON types, extreme numbers, control characters and lone surrogates, deep nesting, truncated
// or garbage bodies), sent eight at a time. Every answer is a 2xx with the documented shape or an OpenAI-shaped 4xx
// whose message is one printable line; no 5xx, no hang; afterwards the server is healthy, holds no sequence or KV
// page, and gives the same greedy completion as before. LATENT_FUZZ_SEED / LATENT_FUZZ_REQUESTS reproduce or widen.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../../src/runtime/load.js";
import { startServer, type RunningServer } from "../../src/server/server.js";
import { CASES, synthModel } from "../helpers/synth.js";
import { envInt, Rng } from "../helpers/rng.js";

const SEED = envInt("LATENT_FUZZ_SEED", 20261201);
const REQUESTS = envInt("LATENT_FUZZ_REQUESTS", 400);

const synth = synthModel(CASES[0], 5);
const loaded = loadModel(synth.path);
let server: RunningServer;

before(async () => {
  server = await startServer({
    loaded,
    port: 0,
    modelId: "tiny",
    maxBatch: 4,
    contextLength: 512,
    log: () => {},
    requestTimeoutMs: 30_000,
  });
});
after(async () => {
  await server.close();
  synth.cleanup();
});

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const TEMPLATES: { path: string; body: { [k: string]: Json } }[] = [
  { path: "/v1/completions", body: { model: "tiny", prompt: "the cat", max_tokens: 4, temperature: 0 } },
  {
    path: "/v1/completions",
    body: {
      model: "tiny",
      prompt: [1, 2, 3],
      max_tokens: 3,
      logprobs: 2,
      echo: true,
      seed: 3,
      temperature: 0.7,
      top_p: 0.9,
    },
  },
  {
    path: "/v1/completions",
    body: { model: "tiny", prompt: "a b", max_tokens: 3, stream: true, stop: ["x", "\n"], n: 2 },
  },
  {
    path: "/v1/chat/completions",
    body: {
      model: "tiny",
      messages: [{ role: "user", content: "hello" }],
      max_tokens: 4,
      logprobs: true,
      top_logprobs: 2,
    },
  },
  {
    path: "/v1/chat/completions",
    body: {
      model: "tiny",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: [{ type: "text", text: "hi" }] },
      ],
      max_completion_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
      logit_bias: { "5": -100 },
      presence_penalty: 0.5,
    },
  },
  { path: "/tokenize", body: { content: "hello world", add_special: true } },
  { path: "/detokenize", body: { tokens: [1, 2, 3] } },
];

const STRANGE_STRINGS = [
  "",
  "\u0000\u001b]0;title\u0007",
  "\ud800",
  "\udfff\ud800",
  "x".repeat(5000),
  "<｜begin▁of▁sentence｜>",
  "🦀".repeat(50),
  "%s%n%x",
  "\r\n\r\nHTTP/1.1 200 OK",
  "__proto__",
];
const STRANGE_NUMBERS = [0, -1, 1, 2 ** 31, 2 ** 53 + 2, -(2 ** 53), 1e308, -1e-308, 0.5, 1.5, 65535, 4294967297];

function randomValue(rng: Rng, depth: number): Json {
  const kind = rng.int(8);
  if (kind === 0) return null;
  if (kind === 1) return rng.int(2) === 0;
  if (kind === 2) return STRANGE_NUMBERS[rng.int(STRANGE_NUMBERS.length)];
  if (kind === 3) return STRANGE_STRINGS[rng.int(STRANGE_STRINGS.length)];
  if (kind === 4 || depth > 3) return rng.int(100);
  if (kind === 5) return Array.from({ length: rng.int(4) }, () => randomValue(rng, depth + 1));
  if (kind === 6) return { [STRANGE_STRINGS[rng.int(STRANGE_STRINGS.length)]]: randomValue(rng, depth + 1) };
  return "text";
}

function deeplyNested(levels: number): Json {
  let v: Json = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

/** One mutated request body: a string (possibly not JSON at all). */
function mutate(rng: Rng, body: { [k: string]: Json }): string {
  const copy = JSON.parse(JSON.stringify(body)) as { [k: string]: Json };
  const keys = Object.keys(copy);
  const edits = 1 + rng.int(3);
  for (let e = 0; e < edits; e++) {
    const key = keys[rng.int(keys.length)];
    const op = rng.int(9);
    if (op === 0) delete copy[key];
    else if (op === 1) copy[key] = randomValue(rng, 0);
    else if (op === 2) copy[key] = STRANGE_NUMBERS[rng.int(STRANGE_NUMBERS.length)];
    else if (op === 3) copy[key] = STRANGE_STRINGS[rng.int(STRANGE_STRINGS.length)];
    else if (op === 4) copy[key] = deeplyNested(50 + rng.int(2000));
    else if (op === 5)
      copy[rng.int(2) === 0 ? `unknown_${rng.int(5)}` : STRANGE_STRINGS[rng.int(STRANGE_STRINGS.length)]] = randomValue(
        rng,
        0,
      );
    else if (op === 6 && Array.isArray(copy[key])) (copy[key] as Json[]).push(randomValue(rng, 0));
    else if (op === 7) copy[key] = Array.from({ length: 3 }, () => randomValue(rng, 1));
    else copy[key] = { nested: randomValue(rng, 1) };
  }
  const text = JSON.stringify(copy);
  const tail = rng.int(12);
  if (tail === 0) return text.slice(0, rng.int(text.length)); // truncated
  if (tail === 1) return text.replace(/"/, "'"); // not JSON
  if (tail === 2) return `${text}${text}`; // two documents
  if (tail === 3) return JSON.stringify(randomValue(rng, 0)); // not an object
  return text;
}

interface Outcome {
  path: string;
  body: string;
  status: number;
  text: string;
}

async function send(path: string, body: string): Promise<Outcome> {
  // the server's own deadline is 30 s: past 90 s it has hung on this request
  try {
    const res = await fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
      signal: AbortSignal.timeout(90_000),
    });
    return { path, body, status: res.status, text: await res.text() };
  } catch (e) {
    throw new Error(`${path} ${body.slice(0, 300)}: ${(e as Error).message}`);
  }
}

const isPrintableLine = (s: string): boolean => !/[\u0000-\u001f\u007f]/.test(s);

function checkOutcome(o: Outcome): void {
  const where = `${o.path} ${o.body.slice(0, 300)} → ${o.status} ${o.text.slice(0, 300)}`;
  const timedOut = o.status === 504 && o.text.includes('"code":"request_timeout"'); // the deadline, under load
  assert.ok(o.status < 500 || timedOut, `server error: ${where}`);
  if (o.status >= 400) {
    const parsed = JSON.parse(o.text) as { error?: { message?: unknown; type?: unknown } };
    assert.equal(typeof parsed.error?.message, "string", `4xx without an OpenAI error body: ${where}`);
    assert.equal(typeof parsed.error?.type, "string", `4xx error without a type: ${where}`);
    const message = parsed.error!.message as string;
    assert.ok(
      isPrintableLine(message) && message.length < 1000,
      `error message not one short printable line: ${where}`,
    );
    return;
  }
  assert.equal(o.status, 200, where);
  const streamed = o.text.startsWith("data: ");
  if (streamed) {
    const events = o.text.split("\n\n").filter((e) => e.length > 0);
    assert.equal(events.at(-1), "data: [DONE]", `stream not closed with [DONE]: ${where}`);
    for (const e of events.slice(0, -1)) {
      const payload = JSON.parse(e.slice("data: ".length)) as { error?: unknown; object?: unknown };
      assert.ok(payload.error === undefined, `stream carried an error: ${where}`);
    }
    return;
  }
  const parsed = JSON.parse(o.text) as { object?: string; choices?: unknown[]; tokens?: unknown[]; content?: unknown };
  if (o.path === "/tokenize") assert.ok(Array.isArray(parsed.tokens), where);
  else if (o.path === "/detokenize") assert.equal(typeof parsed.content, "string", where);
  else assert.ok(Array.isArray(parsed.choices) && parsed.choices.length > 0, where);
}

async function greedyText(): Promise<string> {
  const o = await send(
    "/v1/completions",
    JSON.stringify({ model: "tiny", prompt: "the cat sat", max_tokens: 8, temperature: 0 }),
  );
  assert.equal(o.status, 200, o.text);
  return (JSON.parse(o.text) as { choices: { text: string }[] }).choices[0].text;
}

test(`${REQUESTS} mutated requests: no 5xx, OpenAI-shaped 4xx, a healthy server with nothing held afterwards`, async () => {
  const before = await greedyText();
  const statuses = new Map<number, number>();
  for (let start = 0; start < REQUESTS; start += 8) {
    const batch: Promise<Outcome>[] = [];
    for (let i = start; i < Math.min(REQUESTS, start + 8); i++) {
      const rng = new Rng(SEED, i);
      const template = TEMPLATES[rng.int(TEMPLATES.length)];
      batch.push(send(template.path, mutate(rng, template.body)));
    }
    for (const o of await Promise.all(batch)) {
      checkOutcome(o);
      statuses.set(o.status, (statuses.get(o.status) ?? 0) + 1);
    }
  }
  // the mutations reach past the validation: some requests are served, most are refused
  assert.ok((statuses.get(200) ?? 0) > REQUESTS / 50, `too few served: ${JSON.stringify([...statuses])}`);
  assert.ok((statuses.get(400) ?? 0) > REQUESTS / 4, `too few refused: ${JSON.stringify([...statuses])}`);

  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  assert.equal(await greedyText(), before, "greedy output changed after the fuzzing");
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  const gauge = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1] ?? Number.NaN);
  for (const name of ["latent_running_sequences", "latent_queue_depth", "latent_kv_pages_in_use"]) {
    assert.equal(gauge(name), 0, `${name} after the fuzzing`);
  }
});
