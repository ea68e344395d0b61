// Slow readers: a stream whose socket reports backpressure has its sequences held (no new tokens, pages kept) while
// other clients run at full speed; reading again resumes them to the same greedy text. Held past
// --stream-stall-timeout, the client is dropped (499, latent_streams_dropped_total{reason="stall"}) and its pages
// freed. Sixteen clients that never read do not grow the server's heap.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { request, type IncomingMessage } from "node:http";
import { Duplex } from "node:stream";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { loadModel } from "../../src/runtime/load.js";
import { startServer, type RunningServer, type ServerOptions } from "../../src/server/server.js";
import { CASES, synthModel } from "../helpers/synth.js";

const synth = synthModel(CASES[0], 3);
const loaded = loadModel(synth.path);
const servers: RunningServer[] = [];
const logs: string[] = [];
after(async () => {
  for (const s of servers) await s.close();
  synth.cleanup();
});

async function serve(opts: Partial<ServerOptions> = {}): Promise<RunningServer> {
  const s = await startServer({
    loaded,
    port: 0,
    modelId: "tiny",
    maxBatch: 16,
    kvCacheTokens: 32768,
    maxStreamBufferBytes: 256 * 1024 * 1024,
    log: (l) => logs.push(l),
    ...opts,
  });
  servers.push(s);
  return s;
}

/** A greedy chat stream with top-20 logprobs: ~2.5 KB of events per token and choice, so the kernel's buffers fill fast. */
const chatBody = (n: number, maxTokens: number): string =>
  JSON.stringify({
    model: "tiny",
    messages: [{ role: "user", content: "hi" }],
    n,
    temperature: 0,
    logprobs: true,
    top_logprobs: 20,
    max_tokens: maxTokens,
    stream: true,
    ignore_eos: true,
  });

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
async function until(what: string, ok: () => boolean, ms = 60_000): Promise<void> {
  const t0 = performance.now();
  while (!ok()) {
    if (performance.now() - t0 > ms) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}
async function metricValue(s: RunningServer, line: RegExp): Promise<number> {
  const m = line.exec(await (await fetch(`${s.url}/metrics`)).text());
  return m === null ? 0 : Number(m[1]);
}
const generated = (s: RunningServer): Promise<number> => metricValue(s, /^latent_generation_tokens_total (\S+)$/m);

/** Each choice's text (reasoning and content deltas in order) and finish reason, from a whole SSE body. */
function choicesOf(sse: string): Map<number, { text: string; finish: string | null }> {
  const out = new Map<number, { text: string; finish: string | null }>();
  for (const line of sse.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const ev = JSON.parse(line.slice(6)) as {
      choices: { index: number; delta: Record<string, unknown>; finish_reason: string | null }[];
    };
    for (const c of ev.choices) {
      const o = out.get(c.index) ?? { text: "", finish: null };
      for (const k of ["reasoning_content", "content"])
        if (typeof c.delta[k] === "string") o.text += c.delta[k] as string;
      o.finish ??= c.finish_reason;
      out.set(c.index, o);
    }
  }
  return out;
}

/** A streaming request whose response is not read until `read()` (Node stops reading the socket: bytes stay in the kernel). */
function stalledStream(
  s: RunningServer,
  body: string,
): { response: Promise<IncomingMessage>; read(): Promise<string> } {
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port: s.port,
        path: "/v1/chat/completions",
        method: "POST",
        headers: { "content-type": "application/json" },
      },
      (res) => {
        res.pause();
        resolve(res);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
  const read = async (): Promise<string> => {
    const res = await response;
    res.setEncoding("utf8");
    let text = "";
    for await (const d of res) text += d as string;
    return text;
  };
  return { response, read };
}

test("a client that stops reading has its sequences held while another completes; reading again resumes them to the same text", {
  timeout: 120_000,
}, async () => {
  const s = await serve();
  const reference = choicesOf(
    await (await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: chatBody(1, 400) })).text(),
  ).get(0)!;
  assert.equal(reference.finish, "length");
  const slow = stalledStream(s, chatBody(16, 400));
  await slow.response;
  await until("the 16 sequences of the client that does not read to be held", () => s.stats().held === 16);
  const g0 = await generated(s);
  await sleep(300);
  assert.equal(await generated(s), g0, "held sequences got tokens");
  // a second client runs alone in the batch: every token generated meanwhile is its own
  const t0 = performance.now();
  const other = choicesOf(
    await (await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: chatBody(1, 60) })).text(),
  );
  const otherMs = performance.now() - t0;
  assert.equal(other.get(0)!.finish, "length");
  assert.equal((await generated(s)) - g0, 60, "the held sequences generated while the other client ran");
  assert.equal(s.stats().held, 16);
  assert.ok(s.stats().pagesInUse > 0, "the held sequences kept their pages");
  // generous: the point is that it finished while the others stayed held, not a benchmark
  assert.ok(otherMs < 30_000, `the other client took ${otherMs.toFixed(0)} ms`);
  const got = choicesOf(await slow.read());
  assert.equal(got.size, 16);
  for (const [i, c] of got) assert.deepEqual(c, reference, `choice ${i}`);
  await until("pages to be freed", () => s.stats().pagesInUse === 0 && s.stats().held === 0, 5000);
});

test("a client held past --stream-stall-timeout is dropped (499, counted), its KV pages freed", {
  timeout: 120_000,
}, async () => {
  const s = await serve({ streamStallTimeoutMs: 500 });
  const before = logs.length;
  const slow = stalledStream(s, chatBody(16, 2000));
  await slow.response;
  await until("the stall drop", () =>
    logs.slice(before).some((l) => l.startsWith("stream dropped: the client read nothing for 0.5 s")),
  );
  await until(
    "pages to be freed",
    () => s.stats().pagesInUse === 0 && s.stats().running === 0 && s.stats().waiting === 0,
    5000,
  );
  assert.equal(await metricValue(s, /^latent_streams_dropped_total\{reason="stall"\} (\S+)$/m), 1);
  // the access log's status for a client that left (or was dropped) before its answer was sent
  assert.equal(
    await metricValue(s, /^latent_requests_total\{endpoint="\/v1\/chat\/completions",status="499"\} (\S+)$/m),
    1,
  );
  (await slow.response).destroy();
});

/**
 * A client socket with room for 16 KiB (Node's high-water mark) and no kernel buffers behind it, plugged into the
 * server as a connection: backpressure after kilobytes, not the megabytes loopback TCP absorbs first.
 */
class NonReadingSocket extends Duplex {
  constructor(request: string) {
    super();
    this.push(request);
  }
  override _read(): void {}
  override _write(_chunk: unknown, _enc: BufferEncoding, _done: (e?: Error | null) => void): void {
    // never done: the client takes nothing
  }
}

test("16 clients that never read do not grow the server's heap", { timeout: 120_000 }, async () => {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const s = await serve({ maxQueue: 256 });
  const heap = (): number => {
    gc();
    return process.memoryUsage().heapUsed / 2 ** 20;
  };
  const heap0 = heap();
  const body = chatBody(4, 300);
  const sockets = Array.from(
    { length: 16 },
    () =>
      new NonReadingSocket(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      ),
  );
  for (const sock of sockets) s.http.emit("connection", sock);
  // every sequence held (or, were they not, done: 300 tokens × 4 choices × 16 clients, ~45 MB of events unsent)
  await until(
    "every sequence held or finished",
    () => s.stats().held === 64 || (s.stats().running === 0 && s.stats().waiting === 0),
  );
  let g = -1;
  for (let now = await generated(s); now !== g; now = await generated(s)) {
    g = now;
    await sleep(300);
  }
  const grown = heap() - heap0;
  assert.ok(
    grown < 8,
    `the heap grew by ${grown.toFixed(1)} MiB with 16 clients that never read (${g} tokens generated)`,
  );
  for (const sock of sockets) sock.destroy();
  await until(
    "pages to be freed",
    () => s.stats().pagesInUse === 0 && s.stats().running === 0 && s.stats().waiting === 0,
    5000,
  );
});
