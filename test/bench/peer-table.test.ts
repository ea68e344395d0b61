import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { peerRows, peerTable, serveNotes, serveRows } from "../../bench/peer-table.js";

const dir = mkdtempSync(join(tmpdir(), "peer-table-"));
after(() => rmSync(dir, { recursive: true, force: true }));

// what one scripts/h200-peer-bench.sh run leaves, cut down: llama-bench, llama-batched-bench, the WebGPU bench, serve
const write = (name: string, value: unknown): void =>
  writeFileSync(join(dir, name), typeof value === "string" ? value : JSON.stringify(value));
write("llama-pp.json", [
  { n_prompt: 512, n_gen: 0, avg_ts: 10000, stddev_ts: 1 },
  { n_prompt: 0, n_gen: 128, avg_ts: 300, stddev_ts: 1 },
]);
write(
  "llama-batched.jsonl",
  [
    "main: some log line",
    JSON.stringify({ pp: 128, tg: 128, pl: 8, speed_tg: 1000, speed: 1500 }),
    JSON.stringify({ pp: 128, tg: 128, pl: 32, speed_tg: 2000, speed: 3000 }),
  ].join("\n"),
);
write("latent-ctx16.json", {
  model: "tiny",
  results: [
    { name: "prefill 512 tokens", value: 2500 },
    { name: "decode batch 1", value: 250 },
    { name: "decode batch 32", value: 1000 },
    { name: "decode batch 32, greedy on the GPU (chained)", value: 1200 },
  ],
});
// a run with --activations q8: a row of its own, not mixed into the default prefill's span
write("latent-q8-p512.json", { model: "tiny", results: [{ name: "prefill 512 tokens", value: 4000 }] });
// batched decode with --activations q8: rows of their own beside the same llama.cpp figure
write("latent-q8-ctx16.json", {
  model: "tiny",
  results: [
    { name: "decode batch 32", value: 1400 },
    { name: "decode batch 32, greedy on the GPU (chained)", value: 1800 },
  ],
});
// serve-probe.mjs --stream --json: one measured round (an array, like every probe file)
write("latent-serve32.json", [
  {
    clients: 32,
    tokens: 4096,
    wall_s: 5,
    tok_s: 819.2,
    request_s_p50: 4.5,
    request_s_max: 5,
    stream: true,
    prompt_tokens: 4096,
    max_tokens: 128,
    total_tok_s: 1638.4,
    decode_tokens: 4000,
    decode_s: 4,
    decode_tok_s: 1000,
    prompt_tok_s: 4096,
    ttft_s_min: 0.25,
    ttft_s_mean: 0.6,
    ttft_s_p50: 0.5,
    ttft_s_max: 1,
    token_count_mismatch: 0,
  },
]);

test("the serve probe's file is not read as a bench run, q8 runs make rows of their own: the bench rows stay as they were", () => {
  const rows = peerRows(dir);
  assert.deepEqual(
    rows.map((r) => r.work),
    [
      "prefill 512",
      "prefill 512, latent --gpu-activations q8",
      "decode batch 1 (llama.cpp: tg128)",
      "decode batch 8 (llama.cpp: batched-bench S_TG)",
      "decode batch 32 (llama.cpp: batched-bench S_TG)",
      "decode batch 32, latent --gpu-activations q8",
    ],
  );
  assert.deepEqual(rows[5].llama, [2000, 2000]);
  assert.deepEqual(rows[5].latent, [1400, 1400]);
  assert.deepEqual(rows[5].chained, [1800, 1800]);
  assert.deepEqual(rows[0].latent, [2500, 2500]);
  assert.deepEqual(rows[1].latent, [4000, 4000]);
  assert.deepEqual(rows[1].llama, rows[0].llama);
  const b32 = rows[4];
  assert.deepEqual(b32.llama, [2000, 2000]);
  assert.deepEqual(b32.latent, [1000, 1000]);
  assert.deepEqual(b32.chained, [1200, 1200]);
});

test("serve at 32 clients beside llama-batched-bench at B = 32: S_TG for decode, S overall", () => {
  const rows = serveRows(dir);
  assert.equal(rows.length, 2);
  assert.equal(rows[0].work, "serve, 32 clients (128+128)");
  assert.deepEqual(rows[0].llama, [2000, 2000]);
  assert.deepEqual(rows[0].latent, [1000, 1000]);
  assert.deepEqual(rows[1].llama, [3000, 3000]);
  assert.deepEqual(rows[1].latent, [1638.4, 1638.4]);
  const table = peerTable([...peerRows(dir), ...serveRows(dir)]).split("\n");
  assert.ok(table.includes("| serve, 32 clients (128+128) | 2000 | 1000 | – | 0.50× | – |"), table.join("\n"));
  assert.ok(
    table.includes(
      "| serve, 32 clients (128+128), prompt + generated over wall time (llama.cpp: batched-bench S) | 3000 | 1638 | – | 0.55× | – |",
    ),
    table.join("\n"),
  );
  assert.deepEqual(serveNotes(dir), [
    "serve, 32 clients: time to first token mean 0.60 s, p50 0.50 s, max 1.00 s; 4096 tokens generated",
  ]);
});

test("a serve round with no llama.cpp peer at its batch still shows latent's figure", () => {
  const other = mkdtempSync(join(tmpdir(), "peer-table-"));
  try {
    writeFileSync(
      join(other, "latent-serve4.json"),
      JSON.stringify([
        {
          clients: 4,
          tokens: 32,
          stream: true,
          prompt_tokens: 32,
          max_tokens: 8,
          decode_tok_s: 20,
          total_tok_s: 30,
          ttft_s_p50: 1,
          ttft_s_max: 2,
        },
      ]),
    );
    assert.deepEqual(peerRows(other), []);
    const rows = serveRows(other);
    assert.equal(rows[0].work, "serve, 4 clients (8+8)");
    assert.equal(rows[0].llama, undefined);
    assert.deepEqual(rows[0].latent, [20, 20]);
  } finally {
    rmSync(other, { recursive: true, force: true });
  }
});
