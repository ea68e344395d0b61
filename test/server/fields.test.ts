// The request fields real clients send, on the demo model through the official openai client (plain fetch where the
// client cannot express it): fields the server does not implement are refused by name, max_completion_tokens,
// stream_options.include_usage, logit_bias, the penalties (= the engine alone with the same settings), and --cors.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import OpenAI from "openai";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { generateSync } from "../../src/engine/generate.js";
import { startServer, type RunningServer } from "../../src/server/server.js";
import { parseCorsOrigins } from "../../src/server/cors.js";

const loaded = loadModel(join(import.meta.dirname, "..", "..", "models", "latent-demo-kjv.gguf"));
const tok = Tokenizer.fromMetadata(loaded.file.metadata);
const MODEL = "demo";
const PROMPT = "And God said,";
let server: RunningServer;
let client: OpenAI;
const servers: RunningServer[] = [];

before(async () => {
  server = await startServer({ loaded, port: 0, modelId: MODEL, maxBatch: 4 });
  servers.push(server);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 30_000 });
});
after(async () => {
  for (const s of servers) await s.close();
});

/** The request must fail with 400, naming `param`. */
async function refused(call: Promise<unknown>, param: string, message?: RegExp): Promise<void> {
  await assert.rejects(call, (e: unknown) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `expected a 400, got ${String(e)}`);
    assert.equal(e.param, param);
    if (message !== undefined) assert.match(e.message, message);
    return true;
  });
}

const chat = (extra: Record<string, unknown>) =>
  client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Who made the heaven?" }],
    max_tokens: 4,
    temperature: 0,
    ...extra,
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);
const complete = (extra: Record<string, unknown>) =>
  client.completions.create({
    model: MODEL,
    prompt: PROMPT,
    max_tokens: 4,
    temperature: 0,
    ...extra,
  } as OpenAI.CompletionCreateParamsNonStreaming);

test("fields the server does not implement get a 400 naming them; their no-op values and ignored-by-design fields are accepted", async () => {
  // json_object and json_schema are constrained decoding (test/server/response-format.test.ts)
  await refused(
    chat({
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "email" } } },
    }),
    "response_format",
    /'format' is not supported/,
  );
  const tool = { type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } };
  // the demo model's template writes tool calls in no format the server parses (test/server/reasoning-*.test.ts: one that does)
  await refused(chat({ tools: [tool] }), "tools", /none of the formats/);
  await refused(chat({ tools: [tool], tool_choice: "auto" }), "tools");
  await refused(chat({ tool_choice: "required" }), "tool_choice");
  await refused(chat({ functions: [{ name: "f" }] }), "functions");
  await refused(chat({ reasoning_effort: "low" }), "reasoning_effort");
  await refused(chat({ modalities: ["text", "audio"] }), "modalities");
  await refused(chat({ store: true }), "store");
  await refused(chat({ guided_json: { type: "object" } }), "guided_json", /unknown field/);
  await refused(complete({ suffix: "amen" }), "suffix");
  await refused(complete({ messages: [] }), "messages", /not a field of \/v1\/completions/);
  await refused(complete({ response_format: { type: "text" } }), "response_format");
  const ok = await chat({
    response_format: { type: "text" },
    tools: [tool],
    tool_choice: "none",
    user: "u-1",
    metadata: { a: "b" },
    store: false,
    modalities: ["text"],
    parallel_tool_calls: false,
    service_tier: "auto",
  });
  assert.equal(ok.choices.length, 1);
  assert.equal(ok.choices[0].message.tool_calls, undefined);
  assert.equal((await complete({ user: "u-1" })).choices.length, 1);
});

test("max_completion_tokens limits a chat like max_tokens; both must agree", async () => {
  const r = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Who?" }],
    max_completion_tokens: 3,
    temperature: 0,
    ignore_eos: true,
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  assert.equal(r.usage?.completion_tokens, 3);
  assert.equal(r.choices[0].finish_reason, "length");
  const both = await chat({ max_tokens: 5, max_completion_tokens: 5, ignore_eos: true });
  assert.equal(both.usage?.completion_tokens, 5);
  await refused(chat({ max_tokens: 5, max_completion_tokens: 6 }), "max_tokens", /differ/);
});

test("stream_options.include_usage: every chunk carries usage null, the last has choices [] and the usage; it needs stream", async () => {
  for (const endpoint of ["chat", "completion"] as const) {
    const params = {
      model: MODEL,
      max_tokens: 5,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    };
    const stream =
      endpoint === "chat"
        ? await client.chat.completions.create({
            ...params,
            messages: [{ role: "user", content: "Who?" }],
          } as OpenAI.ChatCompletionCreateParamsStreaming)
        : await client.completions.create({ ...params, prompt: PROMPT } as OpenAI.CompletionCreateParamsStreaming);
    const chunks: { choices: unknown[]; usage?: OpenAI.CompletionUsage | null }[] = [];
    for await (const c of stream) chunks.push(c);
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, [], endpoint);
    assert.equal(last.usage?.completion_tokens, 5, endpoint);
    assert.ok(chunks.length > 2);
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null, `${endpoint}: ${JSON.stringify(c)}`);
  }
  await refused(complete({ stream_options: { include_usage: true } }), "stream_options", /stream/);
  const raw = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: MODEL,
      prompt: PROMPT,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    }),
  });
  assert.equal(raw.status, 400);
  assert.match(((await raw.json()) as { error: { message: string } }).error.message, /continuous_usage_stats/);
});

const greedy = async (extra: Record<string, unknown>, n = 12) => {
  const r = await client.completions.create({
    model: MODEL,
    prompt: PROMPT,
    max_tokens: n,
    temperature: 0,
    ignore_eos: true,
    logprobs: 0,
    ...extra,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  const ids = tok.encode(r.choices[0].text, { addSpecial: false });
  return { text: r.choices[0].text, ids, logprobs: r.choices[0].logprobs!.token_logprobs! };
};

test("logit_bias: -100 bans a token, +100 forces one; logprobs stay the model's; ids, values and size are validated", async () => {
  const plain = await greedy({});
  const first = tok.encode(plain.text, { addSpecial: false })[0];
  const banned = await greedy({ logit_bias: { [String(first)]: -100 } });
  assert.notEqual(banned.ids[0], first);
  // ban every token the plain answer used: none comes back
  const used = [...new Set(plain.ids)];
  const banAll = await greedy({ logit_bias: Object.fromEntries(used.map((id) => [String(id), -100])) });
  for (const id of banAll.ids) assert.ok(!used.includes(id), `banned token ${id} in ${JSON.stringify(banAll.text)}`);
  // " the" (one token) forced at every step; its logprob is the unmodified distribution's, not 0
  const a = tok.encode(" the", { addSpecial: false });
  assert.equal(a.length, 1);
  const forced = await greedy({ logit_bias: { [String(a[0])]: 100 } }, 4);
  assert.equal(forced.text, " the the the the");
  assert.ok(
    forced.logprobs.every((lp) => lp < -0.01),
    `logprobs ${forced.logprobs.join(", ")}`,
  );
  await refused(complete({ logit_bias: { "4096": 1 } }), "logit_bias", /not a token id/);
  await refused(complete({ logit_bias: { "-1": 1 } }), "logit_bias");
  await refused(complete({ logit_bias: { x: 1 } }), "logit_bias");
  await refused(complete({ logit_bias: { "5": 101 } }), "logit_bias", /between -100 and 100/);
  await refused(complete({ logit_bias: { "5": "1" } }), "logit_bias");
  await refused(
    complete({ logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1])) }),
    "logit_bias",
    /at most 1024/,
  );
});

test("presence, frequency and repetition penalties: the server's tokens equal the engine's alone with the same settings, and change the greedy text", async () => {
  const prompt = tok.encode(PROMPT, { addSpecial: true });
  const n = 24;
  const settings = [
    { body: { frequency_penalty: 2 }, opts: { frequencyPenalty: 2 } },
    { body: { presence_penalty: 2 }, opts: { presencePenalty: 2 } },
    { body: { repetition_penalty: 1.8 }, opts: { repetitionPenalty: 1.8 } },
    {
      body: { frequency_penalty: 0.5, presence_penalty: -0.5, repetition_penalty: 1.2 },
      opts: { frequencyPenalty: 0.5, presencePenalty: -0.5, repetitionPenalty: 1.2 },
    },
  ];
  const plain = await greedy({}, n);
  for (const { body, opts } of settings) {
    const served = await greedy(body, n);
    const alone = generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: n, ignoreEog: true, ...opts });
    assert.equal(served.text, alone.text, JSON.stringify(body));
    assert.notEqual(served.text, plain.text, `${JSON.stringify(body)} changed nothing`);
  }
  await refused(complete({ presence_penalty: 2.5 }), "presence_penalty", /between -2 and 2/);
  await refused(complete({ frequency_penalty: -3 }), "frequency_penalty");
  await refused(complete({ repetition_penalty: 0 }), "repetition_penalty", /> 0/);
});

/** A raw request with an Origin header. */
const fromOrigin = (s: RunningServer, path: string, init: RequestInit & { origin: string }) =>
  fetch(`${s.url}${path}`, { ...init, headers: { origin: init.origin, ...(init.headers as Record<string, string>) } });

test("--cors: preflight 204 with the allowed methods, headers and max-age; answers (errors and streams too) carry the origin; others get nothing", async () => {
  const s = await startServer({
    loaded,
    port: 0,
    modelId: MODEL,
    cors: "http://app.example,https://other.example:8443",
    apiKey: "k",
  });
  servers.push(s);
  const pre = await fromOrigin(s, "/v1/chat/completions", {
    method: "OPTIONS",
    origin: "http://app.example",
    headers: {
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization, content-type, x-stainless-os",
    },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get("access-control-allow-origin"), "http://app.example");
  assert.match(pre.headers.get("access-control-allow-methods") ?? "", /POST/);
  assert.deepEqual(
    (pre.headers.get("access-control-allow-headers") ?? "").split(", ").map((h) => h.toLowerCase()),
    ["authorization", "content-type", "x-stainless-os"],
  );
  assert.equal(pre.headers.get("access-control-max-age"), "7200");
  const other = await fromOrigin(s, "/v1/chat/completions", {
    method: "OPTIONS",
    origin: "http://evil.example",
    headers: { "access-control-request-method": "POST" },
  });
  assert.equal(other.headers.get("access-control-allow-origin"), null);
  assert.equal(other.headers.get("access-control-allow-methods"), null);

  const body = JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 2, temperature: 0 });
  const auth = { authorization: "Bearer k", "content-type": "application/json" };
  const real = await fromOrigin(s, "/v1/completions", {
    method: "POST",
    origin: "https://other.example:8443",
    headers: auth,
    body,
  });
  assert.equal(real.status, 200);
  assert.equal(real.headers.get("access-control-allow-origin"), "https://other.example:8443");
  assert.match(real.headers.get("vary") ?? "", /Origin/);
  const sse = await fromOrigin(s, "/v1/completions", {
    method: "POST",
    origin: "http://app.example",
    headers: auth,
    body: JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 2, stream: true }),
  });
  assert.equal(sse.headers.get("content-type"), "text/event-stream; charset=utf-8");
  assert.equal(sse.headers.get("access-control-allow-origin"), "http://app.example");
  assert.match(await sse.text(), /\[DONE\]/);
  const unauth = await fromOrigin(s, "/v1/completions", {
    method: "POST",
    origin: "http://app.example",
    headers: { "content-type": "application/json" },
    body,
  });
  assert.equal(unauth.status, 401);
  assert.equal(unauth.headers.get("access-control-allow-origin"), "http://app.example"); // the page can read why
  const evil = await fromOrigin(s, "/v1/completions", {
    method: "POST",
    origin: "http://evil.example",
    headers: auth,
    body,
  });
  assert.equal(evil.headers.get("access-control-allow-origin"), null);

  // off by default: a preflight is a 405 without CORS headers
  const off = await fromOrigin(server, "/v1/completions", {
    method: "OPTIONS",
    origin: "http://app.example",
    headers: { "access-control-request-method": "POST" },
  });
  assert.equal(off.status, 405);
  assert.equal(off.headers.get("access-control-allow-origin"), null);
  await off.text();
  await pre.text();
  await other.text();
  await real.text();
  await unauth.text();
  await evil.text();
});

test("--cors '*' answers any origin with '*'; a malformed origin list is a usage error", async () => {
  const s = await startServer({ loaded, port: 0, modelId: MODEL, cors: "*" });
  servers.push(s);
  const r = await fromOrigin(s, "/v1/models", { method: "GET", origin: "http://anything.example" });
  assert.equal(r.headers.get("access-control-allow-origin"), "*");
  await r.text();
  assert.throws(() => parseCorsOrigins("http://app.example/path"), /not an origin/);
  assert.throws(() => parseCorsOrigins("*,http://a.example"), /alone/);
  assert.throws(() => parseCorsOrigins(" , "), /--cors needs/);
  assert.deepEqual(
    [...parseCorsOrigins("http://a.example/, http://b.example:81").origins],
    ["http://a.example", "http://b.example:81"],
  );
});
