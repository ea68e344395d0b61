// `latent serve` as a child process: it prints its URL, serves, and on SIGTERM finishes the running stream, then exits 0.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { Socket } from "node:net";
import { join } from "node:path";
import OpenAI from "openai";
import { CASES, synthModel } from "../helpers/synth.js";
import { spawnServe } from "../helpers/serve-child.js";
import { serveMain } from "../../src/cli/serve.js";
import { UsageError } from "../../src/util/errors.js";

const ROOT = join(import.meta.dirname, "..", "..");
const BIN = join(ROOT, "bin", "latent.mjs");
const synth = synthModel(CASES[0], 4);
after(() => synth.cleanup());

test("latent serve --help; bad options exit 2", () => {
  const help = spawnSync(process.execPath, [BIN, "serve", "--help"], { encoding: "utf8" });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /--kv-cache-tokens/);
  const bad = spawnSync(process.execPath, [BIN, "serve", synth.path, "--max-batch", "0"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--max-batch must be an integer ≥ 1/);
  assert.match(help.stdout, /--chain-steps N/);
  assert.match(help.stdout, /--cors ORIGINS/);
  const chain = spawnSync(process.execPath, [BIN, "serve", synth.path, "--chain-steps", "-1"], { encoding: "utf8" });
  assert.equal(chain.status, 2);
  assert.match(chain.stderr, /--chain-steps must be an integer ≥ 0/);
  for (const flag of LIMIT_FLAGS) assert.match(help.stdout, new RegExp(flag));
  const backend = spawnSync(process.execPath, [BIN, "serve", synth.path, "--backend", "tpu"], { encoding: "utf8" });
  assert.equal(backend.status, 2);
});

const LIMIT_FLAGS = [
  "--max-connections",
  "--max-body-bytes",
  "--max-inflight-body-bytes",
  "--headers-timeout",
  "--body-timeout",
  "--request-timeout",
  "--drain-timeout",
  "--max-stream-buffer",
  "--stream-stall-timeout",
  "--default-max-tokens",
  "--retry-after",
];

test("limit flags out of range are refused before the model loads", async () => {
  let err = "";
  const io = { out: (): void => {}, err: (t: string): void => void (err += t), tty: false };
  for (const flag of LIMIT_FLAGS) {
    await assert.rejects(
      serveMain([synth.path, "--backend", "cpu", flag, "-1"], io),
      (e: unknown) => e instanceof UsageError && e.message.includes(`${flag} must be an integer`),
      flag,
    );
    await assert.rejects(
      serveMain([synth.path, "--backend", "cpu", flag, "1.5"], io),
      (e: unknown) => e instanceof UsageError,
      flag,
    );
  }
  await assert.rejects(
    serveMain([synth.path, "--backend", "cpu", "--cors", "http://app.example/page"], io),
    (e: unknown) => e instanceof UsageError && e.message.includes("not an origin"),
  );
  assert.doesNotMatch(err, /loaded/);
});

test("SIGTERM drains: the running stream completes, new requests are refused, exit code 0", async () => {
  const {
    child,
    url: listening,
    exited,
    stderr,
  } = spawnServe([synth.path, "--port", "0", "--alias", "tiny", "--max-batch", "4"]);
  try {
    const url = await listening;
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const stream = await client.completions.create({
      model: "tiny",
      prompt: "hello",
      max_tokens: 400,
      temperature: 0,
      stream: true,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsStreaming);
    let chunks = 0;
    let finish: string | null = null;
    let refused: boolean | undefined;
    for await (const ch of stream) {
      chunks++;
      if (chunks === 2) {
        child.kill("SIGTERM");
        // give the signal a moment, then try a new request: refused (503 or connection closed)
        await new Promise((r) => setTimeout(r, 100));
        refused = await fetch(`${url}/v1/models`).then(
          (r) => r.status === 503,
          () => true,
        );
      }
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    assert.equal(refused, true);
    assert.equal(finish, "length");
    assert.ok(chunks >= 300, `${chunks} chunks`);
    assert.equal(await exited, 0);
    assert.match(stderr(), /SIGTERM: draining \(1 running/);
    assert.match(stderr(), /stopped/);
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
});

test("the limit flags reach the server: --max-body-bytes, --max-queue with --retry-after", async () => {
  const { child, url: listening } = spawnServe([
    synth.path,
    "--port",
    "0",
    "--alias",
    "tiny",
    "--max-body-bytes",
    "200",
    "--max-queue",
    "0",
    "--retry-after",
    "7",
  ]);
  try {
    const url = await listening;
    const big = await fetch(`${url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "tiny", prompt: "x".repeat(300) }),
    });
    assert.equal(big.status, 413);
    const queued = await fetch(`${url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "tiny", prompt: "hi", max_tokens: 1 }),
    });
    assert.equal(queued.status, 429);
    assert.equal(queued.headers.get("retry-after"), "7");
  } finally {
    child.kill("SIGKILL");
  }
});

test("--stream-stall-timeout reaches the server: a client that reads nothing is dropped after it", {
  timeout: 120_000,
}, async () => {
  const {
    child,
    url: listening,
    stderr,
  } = spawnServe([
    synth.path,
    "--port",
    "0",
    "--alias",
    "tiny",
    "--backend",
    "cpu",
    "--threads",
    "1",
    "--max-batch",
    "16",
    "--stream-stall-timeout",
    "1",
  ]);
  const sock = new Socket();
  try {
    const url = await listening;
    // 16 greedy choices with top-20 logprobs: megabytes of events, more than the kernel's socket buffers hold
    const body = JSON.stringify({
      model: "tiny",
      messages: [{ role: "user", content: "hi" }],
      n: 16,
      temperature: 0,
      logprobs: true,
      top_logprobs: 20,
      max_tokens: 2000,
      stream: true,
      ignore_eos: true,
    });
    sock.on("error", () => {});
    sock.connect(Number(new URL(url).port), "127.0.0.1");
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    sock.pause(); // never read
    const t0 = performance.now();
    while (performance.now() - t0 < 60_000 && !/stream dropped: the client read nothing for 1 s/.test(stderr()))
      await new Promise((r) => setTimeout(r, 50));
    assert.match(stderr(), /stream dropped: the client read nothing for 1 s/);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    assert.match(metrics, /latent_streams_dropped_total\{reason="stall"\} 1\n/);
  } finally {
    sock.destroy();
    child.kill("SIGKILL");
  }
});
