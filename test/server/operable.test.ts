// An operable server: the access log (text and JSON lines, request ids, token counts, streams logged at their end or
// abort), several model ids, the loading gate that holds the port while the model loads, a busy port as one line.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { createServer as createNetServer } from "node:net";
import { spawn } from "node:child_process";
import OpenAI from "openai";
import { loadModel } from "../../src/runtime/load.js";
import { startServer, type RunningServer } from "../../src/server/server.js";
import { accessLine, createLogger, type AccessEntry } from "../../src/server/access-log.js";
import { openLoadingGate } from "../../src/server/loading-gate.js";
import { ListenError } from "../../src/server/listen.js";
import { parseCorsOrigins } from "../../src/server/cors.js";
import { CASES, synthModel } from "../helpers/synth.js";

const synth = synthModel(CASES[0], 2);
const loaded = loadModel(synth.path);
const servers: RunningServer[] = [];
after(async () => {
  for (const s of servers) await s.close();
  synth.cleanup();
});

function jsonLogged(): { lines: Record<string, unknown>[]; write: (line: string) => void } {
  const lines: Record<string, unknown>[] = [];
  return { lines, write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>) };
}

async function until(check: () => boolean, what: string): Promise<void> {
  const t0 = performance.now();
  while (!check()) {
    if (performance.now() - t0 > 10_000) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("access log as JSON lines: request id echoed or made, token counts, first-token time, streams and aborts", async () => {
  const log = jsonLogged();
  const server = await startServer({
    loaded,
    port: 0,
    modelId: "tiny",
    logger: createLogger({ format: "json", write: log.write }),
  });
  servers.push(server);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
  const { data, response } = await client.completions
    .create(
      {
        model: "tiny",
        prompt: "hello there",
        max_tokens: 5,
        temperature: 0,
        ignore_eos: true,
      } as OpenAI.CompletionCreateParamsNonStreaming,
      { headers: { "x-request-id": "req-42" } },
    )
    .withResponse();
  assert.equal(response.headers.get("x-request-id"), "req-42");
  await until(() => log.lines.some((l) => l["request_id"] === "req-42"), "the completion's access line");
  const line = log.lines.find((l) => l["request_id"] === "req-42")!;
  assert.equal(line["msg"], "request");
  assert.equal(line["level"], "info");
  assert.equal(typeof line["time"], "number");
  assert.equal(line["method"], "POST");
  assert.equal(line["path"], "/v1/completions");
  assert.equal(line["status"], 200);
  assert.equal(line["prompt_tokens"], data.usage!.prompt_tokens);
  assert.equal(line["completion_tokens"], 5);
  assert.ok(
    typeof line["ttft_ms"] === "number" && typeof line["total_ms"] === "number" && line["ttft_ms"] <= line["total_ms"],
    JSON.stringify(line),
  );

  // a stream is logged once it ends, with the id the server made (a UUID, also in the response header)
  const before = log.lines.length;
  const { data: stream, response: streamed } = await client.chat.completions
    .create({
      model: "tiny",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
      stream: true,
      ignore_eos: true,
    } as OpenAI.ChatCompletionCreateParamsStreaming)
    .withResponse();
  const madeId = streamed.headers.get("x-request-id")!;
  assert.match(madeId, /^[0-9a-f-]{36}$/);
  let chunks = 0;
  for await (const _ of stream) chunks++;
  assert.ok(chunks > 0);
  await until(() => log.lines.slice(before).some((l) => l["request_id"] === madeId), "the stream's access line");
  const streamLine = log.lines.find((l) => l["request_id"] === madeId)!;
  assert.equal(streamLine["status"], 200);
  assert.equal(streamLine["completion_tokens"], 4);

  // a client that leaves mid-stream: logged as 499 with the tokens sent so far
  const abort = new AbortController();
  const long = await client.completions.create(
    {
      model: "tiny",
      prompt: "again",
      max_tokens: 2000,
      stream: true,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsStreaming,
    { signal: abort.signal, headers: { "x-request-id": "leaver" } },
  );
  let got = 0;
  try {
    for await (const _ of long) if (++got === 3) abort.abort();
  } catch {
    // the aborted iteration throws
  }
  await until(() => log.lines.some((l) => l["request_id"] === "leaver"), "the aborted stream's access line");
  const left = log.lines.find((l) => l["request_id"] === "leaver")!;
  assert.equal(left["status"], 499);
  assert.ok(
    (left["completion_tokens"] as number) >= 3 && (left["completion_tokens"] as number) < 2000,
    JSON.stringify(left),
  );

  // an unusable x-request-id (control characters, too long) is replaced, not echoed
  const odd = await fetch(`${server.url}/v1/models`, { headers: { "x-request-id": "x".repeat(200) } });
  assert.match(odd.headers.get("x-request-id")!, /^[0-9a-f-]{36}$/);
});

test("access log levels: /health polls only at debug; --quiet-like warn hides access lines but not errors", async () => {
  const info: string[] = [];
  const server = await startServer({
    loaded,
    port: 0,
    modelId: "tiny",
    logger: createLogger({ write: (l) => info.push(l) }),
  });
  servers.push(server);
  await fetch(`${server.url}/health`);
  await fetch(`${server.url}/v1/models`);
  await until(() => info.some((l) => l.startsWith("GET /v1/models 200")), "the models line");
  assert.ok(!info.some((l) => l.startsWith("GET /health")), info.join(""));
  const warn: string[] = [];
  const quiet = createLogger({ level: "warn", write: (l) => warn.push(l) });
  quiet.request({
    requestId: "a",
    method: "GET",
    path: "/v1/models",
    status: 200,
    promptTokens: undefined,
    completionTokens: undefined,
    ttftMs: undefined,
    totalMs: 1,
  });
  quiet.request({
    requestId: "b",
    method: "POST",
    path: "/v1/completions",
    status: 500,
    promptTokens: 3,
    completionTokens: 0,
    ttftMs: undefined,
    totalMs: 2,
  });
  assert.deepEqual(warn, ["POST /v1/completions 500 3→0 tokens, 2.0 ms [b]\n"]);
});

test("the human access line", () => {
  const e: AccessEntry = {
    requestId: "r1",
    method: "POST",
    path: "/v1/chat/completions",
    status: 200,
    promptTokens: 12,
    completionTokens: 40,
    ttftMs: 35.2,
    totalMs: 410.4,
  };
  assert.equal(accessLine(e), "POST /v1/chat/completions 200 12→40 tokens, first token 35 ms, 410 ms [r1]");
  assert.equal(
    accessLine({
      ...e,
      path: "/v1/models",
      promptTokens: undefined,
      completionTokens: undefined,
      ttftMs: undefined,
      totalMs: 0.42,
    }),
    "POST /v1/models 200 0.4 ms [r1]",
  );
});

test("several model ids: all listed, any accepted and echoed; an unknown one is a 404 naming those that exist", async () => {
  const server = await startServer({ loaded, port: 0, modelId: "tiny", aliases: ["small", "tiny", "demo"] });
  servers.push(server);
  assert.deepEqual(server.modelIds, ["tiny", "small", "demo"]);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
  assert.deepEqual(
    (await client.models.list()).data.map((m) => m.id),
    ["tiny", "small", "demo"],
  );
  assert.equal((await client.models.retrieve("demo")).id, "demo");
  const done = await client.completions.create({ model: "small", prompt: "hi", max_tokens: 2 });
  assert.equal(done.model, "small");
  await assert.rejects(client.completions.create({ model: "large", prompt: "hi", max_tokens: 2 }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.NotFoundError);
    assert.match(e.message, /The model 'large' does not exist; this server has 'tiny', 'small', 'demo'/);
    return true;
  });
  await assert.rejects(client.models.retrieve("large"), OpenAI.NotFoundError);
});

test("the loading gate: /health 503 loading with progress, the API 503 OpenAI-shaped; closed, the port is free again", async () => {
  const gate = await openLoadingGate({ host: "127.0.0.1", port: 0, retryAfterSeconds: 3 });
  const base = `http://127.0.0.1:${gate.port}`;
  try {
    gate.setProgress(0.25);
    const health = await fetch(`${base}/health`);
    assert.equal(health.status, 503);
    assert.equal(health.headers.get("retry-after"), "3");
    assert.deepEqual(await health.json(), { status: "loading", progress: 0.25 });
    gate.setProgress(0.5);
    assert.deepEqual(await (await fetch(`${base}/health/`)).json(), { status: "loading", progress: 0.5 });
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 });
    await assert.rejects(
      client.chat.completions.create({ model: "any", messages: [{ role: "user", content: "hi" }] }),
      (e: unknown) => {
        assert.ok(e instanceof OpenAI.APIError);
        assert.equal(e.status, 503);
        assert.equal(e.message, "503 Loading model");
        assert.equal(e.type, "unavailable_error");
        return true;
      },
    );
    // the port is taken while the gate holds it
    await assert.rejects(
      openLoadingGate({ host: "127.0.0.1", port: gate.port, retryAfterSeconds: 1 }),
      (e: unknown) => e instanceof ListenError && e.message === `port ${gate.port} is in use; pick another with --port`,
    );
  } finally {
    await gate.close();
  }
  const server = await startServer({ loaded, port: gate.port, modelId: "tiny" });
  servers.push(server);
  assert.deepEqual(await (await fetch(`${base}/health`)).json(), { status: "ok" });
});

test("the loading gate answers while the main thread is blocked (as it is by a synchronous load)", async () => {
  const gate = await openLoadingGate({ host: "127.0.0.1", port: 0, retryAfterSeconds: 1 });
  try {
    gate.setProgress(0.5);
    const script = `setTimeout(async () => { const r = await fetch("http://127.0.0.1:${gate.port}/health"); console.log(JSON.stringify({ at: Date.now(), status: r.status, body: await r.json() })); }, 300);`;
    const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise((r) => child.on("exit", r));
    // block this thread the way loadModel does; the child's request must be answered meanwhile
    const blockedUntil = Date.now() + 4000;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 4000);
    await exited;
    const answer = JSON.parse(out) as { at: number; status: number; body: unknown };
    assert.equal(answer.status, 503);
    assert.deepEqual(answer.body, { status: "loading", progress: 0.5 });
    assert.ok(answer.at < blockedUntil, `answered ${answer.at - blockedUntil} ms after the main thread was free again`);
  } finally {
    await gate.close();
  }
});

test("the loading gate with --cors: an allowed page may read /health's 503, another origin gets no grant", async () => {
  const gate = await openLoadingGate({
    host: "127.0.0.1",
    port: 0,
    retryAfterSeconds: 1,
    cors: parseCorsOrigins("http://app.example"),
  });
  try {
    const allowed = await fetch(`http://127.0.0.1:${gate.port}/health`, { headers: { origin: "http://app.example" } });
    assert.equal(allowed.status, 503);
    assert.equal(allowed.headers.get("access-control-allow-origin"), "http://app.example");
    assert.equal(allowed.headers.get("access-control-expose-headers"), "Retry-After");
    const other = await fetch(`http://127.0.0.1:${gate.port}/health`, { headers: { origin: "http://evil.example" } });
    assert.equal(other.headers.get("access-control-allow-origin"), null);
    assert.equal(other.headers.get("vary"), "Origin");
  } finally {
    await gate.close();
  }
});

test("startServer on a busy port: one line naming the port and --port", async () => {
  const holder = createNetServer();
  await new Promise<void>((r) => holder.listen(0, "127.0.0.1", () => r()));
  const port = (holder.address() as { port: number }).port;
  try {
    await assert.rejects(
      startServer({ loaded, port, modelId: "tiny" }),
      (e: unknown) => e instanceof ListenError && e.message === `port ${port} is in use; pick another with --port`,
    );
  } finally {
    holder.close();
  }
});
