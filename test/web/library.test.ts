// The public library API (src/index.ts) and the byte sources behind it, in Node: a model loaded from a path, bytes,
// an asynchronous source (header prefix grown on demand, tensors fetched by range) and over HTTP range requests
// gives the same logits and the same greedy text as loadModel(path).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  load,
  GGUFFile,
  MemorySource,
  PrefetchedSource,
  NotFetchedError,
  ShortReadError,
  httpSource,
  memoryAsyncSource,
  type AsyncByteSource,
} from "../../src/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { generateSync } from "../../src/engine/generate.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { synthModel } from "../helpers/synth.js";
import { serveStatic } from "./serve.js";
import { maxAbsDiffFlat as maxAbs } from "../helpers/measure.js";

const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const tiny = synthModel({ label: "lib-tiny", base: "tiny", over: {} }, 3);
after(() => tiny.cleanup());

/** An AsyncByteSource over bytes that counts reads and their bytes. */
function countingSource(bytes: Uint8Array, name: string): AsyncByteSource & { reads: [number, number][] } {
  const inner = memoryAsyncSource(bytes, name);
  const reads: [number, number][] = [];
  return { name, size: inner.size, reads, read: (o, n) => (reads.push([o, n]), inner.read(o, n)) };
}

test("PrefetchedSource: reads inside one fetched range are views; others throw NotFetchedError; overlaps merge", () => {
  const p = new PrefetchedSource("x", 100);
  p.add(10, new Uint8Array([1, 2, 3, 4]));
  p.add(20, new Uint8Array([5, 6]));
  assert.deepEqual([...p.read(11, 2)], [2, 3]);
  assert.throws(() => p.read(12, 4), NotFetchedError);
  assert.throws(() => p.read(0, 1), NotFetchedError);
  assert.throws(() => p.read(99, 2), ShortReadError);
  p.add(13, new Uint8Array([9, 9, 9])); // overlaps [10, 14): merged into [10, 16)
  assert.deepEqual([...p.read(10, 6)], [1, 2, 3, 9, 9, 9]);
  assert.deepEqual([...p.read(20, 2)], [5, 6]);
  assert.equal(p.held, 8);
});

test("MemorySource and GGUFFile.fromSources read what GGUFFile.open reads", () => {
  const bytes = new Uint8Array(readFileSync(tiny.path));
  const a = GGUFFile.fromSources([new MemorySource(bytes, "mem.gguf")]);
  const b = loadModel(tiny.path).file;
  assert.deepEqual([...a.tensors.keys()], [...b.tensors.keys()]);
  for (const info of a.tensors.values()) assert.deepEqual(a.readBytes(info), b.readBytes(b.tensor(info.name)));
  assert.equal(a.shards[0].path, "mem.gguf");
});

test("GGUFFile.load: the header prefix grows until it parses, tensors come by range, nothing is read twice", async () => {
  const bytes = new Uint8Array(readFileSync(DEMO));
  const src = countingSource(bytes, "demo.gguf");
  const progress: number[] = [];
  const f = await GGUFFile.load([src], {
    headerBytes: 64,
    requestBytes: 1 << 20,
    onFetch: (p) => progress.push(p.bytes),
  });
  // 64 bytes, doubled while the parser asks for more: several header reads, then tensor requests of ≤ 1 MiB (or one tensor)
  assert.ok(src.reads.length > 4, `reads: ${src.reads.length}`);
  const largest = Math.max(...[...f.tensors.values()].map((t) => t.nbytes));
  for (const [, n] of src.reads)
    assert.ok(n <= Math.max(1 << 20, largest, 2 * f.shards[0].dataOffset), `read of ${n} bytes`);
  const total = src.reads.reduce((s, [, n]) => s + n, 0);
  assert.ok(total <= bytes.length * 1.6, `fetched ${total} of ${bytes.length}`);
  assert.equal(progress.at(-1), total);
  const ref = GGUFFile.fromSources([new MemorySource(bytes)]);
  for (const info of ref.tensors.values()) assert.deepEqual(f.readBytes(f.tensor(info.name)), ref.readBytes(info));
});

test("load(): path, bytes, async source and URL give loadModel's logits and greedy text", async () => {
  const node = loadModel(DEMO);
  const tok = Tokenizer.fromMetadata(node.file.metadata);
  const ids = tok.encode("And it came to pass");
  const want = evaluateAll(node.model, ids, { path: "prefill" }).at(-1)!;
  const greedy = generateSync(node.model, tok, ids, { temperature: 0, maxTokens: 12 });

  const srv = await serveStatic(undefined, { files: { "/demo.gguf": DEMO } });
  try {
    const bytes = new Uint8Array(readFileSync(DEMO));
    const inputs: [string, Parameters<typeof load>[0]][] = [
      ["path", DEMO],
      ["bytes", bytes],
      ["ArrayBuffer", bytes.slice().buffer],
      ["async source", memoryAsyncSource(bytes, "demo")],
      ["url", `${srv.url}/demo.gguf`],
    ];
    for (const [label, input] of inputs) {
      const m = await load(input);
      assert.deepEqual(m.tokenize("And it came to pass"), ids, label);
      assert.ok(maxAbs(m.logits(ids), want) <= 1e-6, label);
      const streamed: string[] = [];
      const res = await m.generate(ids, { temperature: 0, maxTokens: 12, onToken: (ev) => streamed.push(ev.text) });
      assert.deepEqual(res.tokens, greedy.tokens, label);
      assert.equal(res.text, greedy.text, label);
      assert.ok(res.text.startsWith(streamed.join("")), label);
      m.close();
    }
    assert.ok(
      srv.requests.length > 1 && srv.requests.every((r) => r.range !== undefined && r.status === 206),
      JSON.stringify(srv.requests.slice(0, 3)),
    );
  } finally {
    await srv.close();
  }
});

test("LatentModel: stream with logprobs, summary, path check", async () => {
  const m = await load(tiny.path);
  const events = [];
  const it = m.stream([1, 2, 3, 4], { temperature: 0, maxTokens: 5, logprobs: 3, ignoreEog: true });
  for (;;) {
    const r = await it.next();
    if (r.done === true) {
      assert.equal(r.value.tokens.length, 5);
      break;
    }
    events.push(r.value);
  }
  assert.equal(events.length, 5);
  for (const ev of events) {
    assert.equal(ev.top?.length, 3);
    assert.equal(ev.top![0][0], ev.id); // greedy: the top alternative is the chosen token
  }
  assert.equal(m.summary().architecture, "deepseek2");
  const check = m.pathCheck([1, 5, 9, 13, 17, 21, 25, 29]);
  assert.equal(check.ok, true, JSON.stringify(check));
  assert.deepEqual(
    check.rows.map((r) => r.path),
    ["prefill", "decode"],
  );
});

test("httpSource: a server that ignores Range is an error, not a whole download per read", async () => {
  const srv = await serveStatic(undefined, { files: { "/m.gguf": tiny.path }, ignoreRanges: true });
  try {
    await assert.rejects(httpSource(`${srv.url}/m.gguf`), /ignored the Range request/);
    await assert.rejects(httpSource(`${srv.url}/missing.gguf`), /HTTP 404/);
  } finally {
    await srv.close();
  }
});
