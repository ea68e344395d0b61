// Routed experts streamed from disk through a bounded cache give exactly the logits of the all-in-memory model (same
// kernels), for caches that force every path: one expert (a chunk's experts in many batches), one layer's top-k,
// everything; reference and cpu backends; prefill chunks of many tokens and one-token decode; a split file. The
// store's counters show the cache is bounded and used.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DeepSeek2 } from "../../src/model/deepseek2.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { ExpertStore, expertFootprint } from "../../src/model/expert-store.js";
import { loadModelFrom } from "../../src/model/from-file.js";
import { LatentCache } from "../../src/model/cache.js";
import { parseConfig } from "../../src/model/config.js";
import { closeLoaded, loadModel, type LoadModelOptions } from "../../src/runtime/load.js";
import { formatBinaryBytes, parseByteSize } from "../../src/util/byte-size.js";
import { GGUFError, UsageError } from "../../src/util/errors.js";
import { find, rewriteGGUF } from "../helpers/gguf-rewrite.js";
import { randomTokens, synthModel, type SynthCase } from "../helpers/synth.js";

/** 3 MoE layers of 8 experts, top-3, one shared expert; K-quant shapes (cols of 256) so Q6_K expert downs repack */
const CASE: SynthCase = {
  label: "stream-k256",
  base: "tiny",
  type: "Q4_K_M",
  over: {
    n_layer: 4,
    n_dense: 1,
    n_embd: 256,
    q_lora: 256,
    kv_lora: 256,
    n_ff: 512,
    n_ff_exp: 256,
    n_expert: 8,
    n_used: 3,
  },
};
const MOE_LAYERS = 3;
const EXPERTS = 8;
const TOP_K = 3;

const single = synthModel(CASE, 7);
after(single.cleanup);
const split = synthModel({ ...CASE, label: "stream-split" }, 8, { split: 3 });
after(split.cleanup);

/** logits of prefill and decode, and the MoE layers' float64 outputs (where a different order of sums would show) */
type Run = { prefill: Float32Array[]; decode: Float32Array[]; ffn: Float64Array[] };

/** logits of every position: prefill in chunks of 13 tokens, then the same tokens decoded one at a time */
function logitsOf(path: string, options: LoadModelOptions, check?: (l: ReturnType<typeof loadModel>) => void): Run {
  const loaded = loadModel(path, undefined, { threads: 2, ...options });
  try {
    const tokens = randomTokens(29, 5, 0, loaded.config.nVocab);
    const run = forwards(loaded.model, tokens);
    check?.(loaded);
    return run;
  } finally {
    closeLoaded(loaded);
  }
}

/** prefill in chunks of 13 tokens, then decode steps on a fresh cache, with the MoE outputs traced */
function forwards(model: DeepSeek2, tokens: readonly number[]): Run {
  const ffn: Float64Array[] = [];
  const trace = (_layer: number, stage: string, rows: Float64Array): void => {
    if (stage === "ffn_out") ffn.push(Float64Array.from(rows));
  };
  const prefill: Float32Array[] = [];
  let cache = new LatentCache(model.config);
  for (let i = 0; i < tokens.length; i += 13)
    prefill.push(model.forward(tokens.slice(i, i + 13), cache, { path: "prefill", logits: "all", trace }));
  const decode: Float32Array[] = [];
  cache = new LatentCache(model.config);
  for (const t of tokens.slice(0, 8)) decode.push(model.forward([t], cache, { path: "decode", logits: "last", trace }));
  return { prefill, decode, ffn };
}

function assertSame(got: Run, want: Run, label: string): void {
  assert.equal(got.prefill.length, want.prefill.length);
  got.prefill.forEach((r, i) => assert.deepEqual(r, want.prefill[i], `${label}: prefill position ${i}`));
  got.decode.forEach((r, i) => assert.deepEqual(r, want.decode[i], `${label}: decode position ${i}`));
  assert.equal(got.ffn.length, want.ffn.length);
  got.ffn.forEach((r, i) => assert.deepEqual(r, want.ffn[i], `${label}: FFN output ${i}`));
}

for (const backend of ["reference", "cpu"] as const) {
  const resident = logitsOf(single.path, { backend });

  test(`${backend}: the resident model loads no expert store`, () => {
    logitsOf(single.path, { backend }, (l) => assert.equal(l.experts, undefined));
  });

  for (const cache of [1, TOP_K, 10, MOE_LAYERS * EXPERTS]) {
    test(`${backend}: experts streamed through a cache of ${cache} give the resident logits exactly`, () => {
      const got = logitsOf(single.path, { backend, expertCache: cache }, (l) => {
        const s = l.experts!.stats;
        assert.ok(l.model.weights.layers.slice(1).every((lw) => lw.moe!.experts.length === 0 && lw.moe!.streamed));
        assert.ok(l.experts!.cached <= cache, `${l.experts!.cached} cached`);
        assert.ok(s.misses > 0 && s.reads === 3 * s.misses, JSON.stringify(s));
        const each = expertBytes(single.path); // Q4_K_M gives some layers Q6_K downs: sizes differ by layer
        assert.ok(s.bytesRead >= s.misses * Math.min(...each) && s.bytesRead <= s.misses * Math.max(...each));
        if (cache === MOE_LAYERS * EXPERTS) {
          // everything fits: each expert is read once, later uses are hits
          assert.equal(s.evictions, 0);
          assert.ok(s.misses <= MOE_LAYERS * EXPERTS && s.hits > s.misses, JSON.stringify(s));
        } else {
          assert.equal(s.evictions, s.misses - cache, JSON.stringify(s));
        }
      });
      assertSame(got, resident, `${backend} cache ${cache}`);
    });
  }

  test(`${backend}: a split file streams from its shards`, () => {
    assert.ok(GGUFFile.open(split.path).shards.length > 1);
    assertSame(logitsOf(split.path, { backend, expertCache: TOP_K }), logitsOf(split.path, { backend }), backend);
  });
}

/** bytes of one expert (gate + up + down) of each MoE layer */
function expertBytes(path: string): number[] {
  const f = GGUFFile.open(path);
  try {
    return [1, 2, 3].map((il) =>
      ["gate", "up", "down"].reduce((s, m) => s + f.tensor(`blk.${il}.ffn_${m}_exps.weight`).nbytes / EXPERTS, 0),
    );
  } finally {
    f.close();
  }
}

function footprint(path: string): ReturnType<typeof expertFootprint> {
  const f = GGUFFile.open(path);
  try {
    return expertFootprint(f, parseConfig(f.metadata, f.tensors.get("token_embd.weight")?.ne[1]));
  } finally {
    f.close();
  }
}

test("--max-memory: the cache holds what the budget leaves after the resident weights", () => {
  const fp = footprint(single.path);
  assert.ok(fp.residentBytes > 0 && fp.expertBytes > 0 && fp.residentBytes + fp.expertBytes === fp.totalBytes);
  // reference kernels keep no repacked copies: a slot is one expert's bytes
  const budget = fp.residentBytes + 5 * fp.slotBytes + 10;
  const notes: string[] = [];
  const got = logitsOf(single.path, { backend: "reference", maxMemory: budget, onNote: (l) => notes.push(l) }, (l) =>
    assert.equal(l.experts!.capacity, 5),
  );
  assert.equal(notes.length, 1);
  assert.match(notes[0], /streaming routed experts from disk: budget .* cache of 5 of 24 experts/);
  assertSame(got, logitsOf(single.path, { backend: "reference" }), "budget");
  // a budget the whole file fits: nothing streamed, nothing said
  const quiet: string[] = [];
  logitsOf(single.path, { backend: "reference", maxMemory: fp.totalBytes, onNote: (l) => quiet.push(l) }, (l) =>
    assert.equal(l.experts, undefined),
  );
  assert.deepEqual(quiet, []);
});

test("--max-memory below the resident weights plus one layer's top-k experts is an error naming both", () => {
  const fp = footprint(single.path);
  for (const backend of ["reference", "cpu"] as const) {
    assert.throws(
      () => loadModel(single.path, undefined, { backend, threads: 1, maxMemory: fp.residentBytes + fp.slotBytes }),
      (e: Error) =>
        e instanceof UsageError &&
        e.message.includes(`resident weights (${formatBinaryBytes(fp.residentBytes)})`) &&
        e.message.includes(`top-${TOP_K} experts`),
    );
  }
  assert.throws(
    () => loadModel(single.path, undefined, { backend: "webgpu", maxMemory: fp.totalBytes }),
    /needs the cpu or reference backend/,
  );
});

test("byte sizes: suffixes are powers of 1024; nonsense is refused", () => {
  assert.equal(parseByteSize("16G"), 16 * 2 ** 30);
  assert.equal(parseByteSize("512M"), 512 * 2 ** 20);
  assert.equal(parseByteSize("1.5g"), 1.5 * 2 ** 30);
  assert.equal(parseByteSize("4096"), 4096);
  assert.equal(parseByteSize("2GiB"), 2 * 2 ** 30);
  for (const bad of ["", "G", "-1G", "0", "12X", "1e9"]) assert.throws(() => parseByteSize(bad), UsageError, bad);
});

test("reads on the calling thread (the store's default reader) give the same logits", () => {
  const file = GGUFFile.open(single.path);
  let store: ExpertStore | undefined;
  try {
    const { model, config } = loadModelFrom(file, undefined, { experts: () => (store = new ExpertStore(file, TOP_K)) });
    const tokens = randomTokens(29, 5, 0, config.nVocab);
    const got = forwards(model, tokens);
    assert.ok(store!.stats.misses > TOP_K && store!.cached === TOP_K);
    assertSame(got, logitsOf(single.path, { backend: "reference" }), "sync reader");
  } finally {
    file.close();
  }
});

test("a file cut short after loading: a miss is a GGUFError naming the tensor, and the cache keeps no broken expert", () => {
  const dir = mkdtempSync(join(tmpdir(), "latent-stream-cut-"));
  const path = join(dir, "cut.gguf");
  copyFileSync(single.path, path);
  const loaded = loadModel(path, undefined, { backend: "cpu", threads: 1, expertCache: TOP_K });
  try {
    const first = loaded.model.weights.layers.findIndex((l) => l.moe !== undefined);
    const experts = loaded.model.weights.layers[first].moe!.streamed!;
    experts.request([0]).wait();
    const down = GGUFFile.open(single.path);
    const cut = down.tensor(`blk.${first}.ffn_down_exps.weight`).offset; // expert downs of that layer are gone
    down.close();
    truncateSync(path, cut);
    assert.throws(
      () => experts.request([5, 6]).wait(),
      (e: Error) =>
        e instanceof GGUFError &&
        /unexpected end of file reading tensor "blk\.\d\.ffn_(gate|up|down)_exps\.weight"/.test(e.message),
    );
    assert.equal(loaded.experts!.cached, 1, "the failed experts are not cached");
    assert.ok(experts.request([0]).cached[0] !== undefined, "expert 0 is still a hit");
  } finally {
    closeLoaded(loaded);
    rmSync(dir, { recursive: true, force: true });
  }
});

test("fused gate_up_exps tensors (GLM's layout) stream too", () => {
  const dir = mkdtempSync(join(tmpdir(), "latent-stream-fused-"));
  try {
    const fused = rewriteGGUF(single.path, join(dir, "fused.gguf"), {
      tensors: (list) => {
        for (const il of [1, 2, 3]) {
          const gate = find(list, `blk.${il}.ffn_gate_exps.weight`);
          const up = find(list, `blk.${il}.ffn_up_exps.weight`);
          assert.equal(gate.type, up.type);
          const each = gate.bytes.length / EXPERTS;
          const bytes = new Uint8Array(2 * gate.bytes.length);
          for (let e = 0; e < EXPERTS; e++) {
            bytes.set(gate.bytes.subarray(e * each, (e + 1) * each), 2 * e * each);
            bytes.set(up.bytes.subarray(e * each, (e + 1) * each), (2 * e + 1) * each);
          }
          const ne = [gate.ne[0], 2 * gate.ne[1], gate.ne[2]];
          list.splice(list.indexOf(gate), 1, { name: `blk.${il}.ffn_gate_up_exps.weight`, ne, type: gate.type, bytes });
          list.splice(list.indexOf(up), 1);
        }
      },
    });
    const f = GGUFFile.open(fused);
    assert.ok(f.tensors.has("blk.1.ffn_gate_up_exps.weight") && !f.tensors.has("blk.1.ffn_gate_exps.weight"));
    f.close();
    for (const backend of ["reference", "cpu"] as const) {
      const resident = logitsOf(fused, { backend });
      assertSame(resident, logitsOf(single.path, { backend }), `${backend}: fused file, resident`);
      const got = logitsOf(fused, { backend, expertCache: 10 }, (l) =>
        assert.equal(l.experts!.stats.reads, 2 * l.experts!.stats.misses),
      );
      assertSame(got, resident, `${backend}: fused file, streamed`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
