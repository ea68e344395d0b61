// Semantic fuzzing past the header: well-formed files whose metadata values, tensor data, shapes and names are
// hostile. Each mutated model goes through parseConfig, loadModelFrom (every weight read, shape-checked, scanned),
// the tokenizer and its chat template, and a 3-token forward pass; it must either give finite log-probabilities or
// fail with a LatentError. Anything else (TypeError, RangeError, an iteration over 2 s) fails the test.
//
//   LATENT_FUZZ_MODEL_ITERATIONS=20000 LATENT_FUZZ_SEED=7 node scripts/run-tests.mjs model/fuzz-model
//
// Iteration i depends only on (seed, i): replay one with LATENT_FUZZ_START=<i> LATENT_FUZZ_MODEL_ITERATIONS=1.
import { before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { GGUFFile } from "../../src/gguf/gguf-file.js";
import { Metadata } from "../../src/gguf/metadata.js";
import type { GGUFShard, TensorInfo } from "../../src/gguf/shard.js";
import { MemorySource, type ByteSource } from "../../src/gguf/source.js";
import { GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { loadModelFrom } from "../../src/model/from-file.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { logSoftmax } from "../../src/engine/logprobs.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { LatentError } from "../../src/util/errors.js";
import { fixture } from "../gguf/helpers.js";
import { envInt, Rng } from "../helpers/rng.js";

const ITERATIONS = envInt("LATENT_FUZZ_MODEL_ITERATIONS", 1000);
const SEED = envInt("LATENT_FUZZ_SEED", 0x1a7e47);
const START = envInt("LATENT_FUZZ_START", 0);
const LONG = ITERATIONS > 5_000;
const BASES = ["ds2-lite", "ds2-v3-mixed-q", "glm-dsa-topk8"] as const;

/** A GGUFFile over edited metadata and tensor infos (the constructor is the base class's, for tests). */
class EditedFile extends GGUFFile {
  static of(
    shard: GGUFShard,
    meta: Map<string, GGUFMetadataEntry>,
    tensors: Map<string, TensorInfo>,
    source: ByteSource,
  ): EditedFile {
    return new EditedFile([shard], new Metadata(meta), tensors, [source]);
  }
}

interface Base {
  readonly name: string;
  readonly bytes: Uint8Array;
  readonly shard: GGUFShard;
}

const u32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT32, value });
const i32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.INT32, value });
const f32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.FLOAT32, value });
const u64 = (value: bigint): GGUFMetadataEntry => ({ type: GGUFValueType.UINT64, value });
const str = (value: string): GGUFMetadataEntry => ({ type: GGUFValueType.STRING, value });
const VALUES: readonly GGUFMetadataEntry[] = [
  u32(0),
  u32(1),
  u32(2),
  u32(3),
  u32(7),
  u32(64),
  u32(4096),
  u32(2 ** 31),
  u32(2 ** 32 - 1),
  i32(-1),
  i32(-(2 ** 31)),
  u64(2n ** 53n),
  u64(2n ** 64n - 1n),
  f32(0),
  f32(-1),
  f32(NaN),
  f32(Infinity),
  f32(-Infinity),
  f32(1e-30),
  f32(1e30),
  f32(0.5),
  f32(2),
  str(""),
  str("yarn"),
  str("none"),
  str("deepseek2"),
  str("glm-dsa"),
  str("x\n\u001b]0;t\u0007"),
  { type: GGUFValueType.BOOL, value: true },
  { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.UINT32, values: [1, 2, 3] } },
  { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.STRING, values: ["a", "b"] } },
];
const TEMPLATES = [
  "{% for x in range(999999999) %}{% endfor %}",
  "{{ messages[0].content * 99999 }}",
  "{% for",
  "{{ raise_exception('no') }}",
  "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
];

/** Apply 1–3 semantic mutations; returns their descriptions. */
function mutate(
  rng: Rng,
  base: Base,
  meta: Map<string, GGUFMetadataEntry>,
  tensors: Map<string, TensorInfo>,
  bytes: Uint8Array,
): string[] {
  const what: string[] = [];
  const keys = [...meta.keys()].filter(
    (k) => !k.startsWith("tokenizer.ggml.tokens") && !k.startsWith("tokenizer.ggml.merges"),
  );
  for (let m = 1 + rng.int(3); m > 0; m--) {
    const names = [...tensors.keys()];
    const kind = rng.int(10);
    if (kind < 4) {
      const key = rng.pick(keys);
      const v = rng.pick(VALUES);
      meta.set(key, v);
      what.push(`${key} = ${JSON.stringify(v.value, (_, x: unknown) => (typeof x === "bigint" ? String(x) : x))}`);
    } else if (kind === 4) {
      const key = rng.pick(keys);
      meta.delete(key);
      what.push(`delete ${key}`);
    } else if (kind === 5) {
      const t = rng.pick(TEMPLATES);
      meta.set("tokenizer.chat_template", str(t));
      what.push(`chat_template ${t}`);
    } else if (kind < 8) {
      // poke the tensor's bytes: NaN/Inf/huge patterns or random bytes
      const t = tensors.get(rng.pick(names))!;
      if (t.nbytes === 0) continue;
      const at = t.offset + rng.int(t.nbytes);
      const pattern = rng.pick([
        [0x00, 0x7e],
        [0x00, 0x7c],
        [0xff, 0x7f],
        [0xff, 0xff],
        [rng.int(256), rng.int(256)],
      ]);
      bytes.set(pattern.slice(0, Math.min(2, base.bytes.length - at)), at);
      what.push(`bytes ${pattern.join(",")} at ${at} (in ${t.name})`);
    } else if (kind === 8) {
      const name = rng.pick(names);
      const t = tensors.get(name)!;
      const ne = [...t.ne];
      if (rng.chance(0.5) && ne.length > 1) ne.reverse();
      else ne[rng.int(ne.length)] = rng.pick([0, 1, 2, ne[0] * 2]);
      tensors.set(name, { ...t, ne });
      what.push(`${name} ne ${t.ne.join("x")} → ${ne.join("x")}`);
    } else {
      const name = rng.pick(names);
      const t = tensors.get(name)!;
      tensors.delete(name);
      if (rng.chance(0.5)) {
        const renamed = name.replace(/^blk\.(\d+)\./, (_, n: string) => `blk.${Number(n) + 1 + rng.int(3)}.`);
        tensors.set(renamed, { ...t, name: renamed });
        what.push(`rename ${name} → ${renamed}`);
      } else what.push(`drop ${name}`);
    }
  }
  return what;
}

/** Load, tokenize, render, run 3 positions; "ok" or the LatentError's class name. */
function exercise(file: GGUFFile): string {
  try {
    const { config, model } = loadModelFrom(file);
    try {
      const tok = Tokenizer.fromMetadata(file.metadata);
      tok.encodePrompt("In the beginning");
      if (file.metadata.has("tokenizer.chat_template"))
        tok.renderChat([{ role: "user", content: "hi" }], { limits: { timeMs: 500 } });
    } catch (e) {
      if (!(e instanceof LatentError)) throw e;
    }
    const tokens = [0, 1, 2].map((t) => t % config.nVocab);
    for (const row of evaluateAll(model, tokens, { path: "reference" })) logSoftmax(row);
    return "ok";
  } catch (e) {
    if (e instanceof LatentError) return e.name;
    throw e;
  }
}

describe("model fuzzing: config, weights, tokenizer, forward pass", () => {
  const bases: Base[] = [];
  before(() => {
    for (const name of BASES) {
      const bytes = new Uint8Array(readFileSync(fixture(name)));
      bases.push({ name, bytes, shard: GGUFFile.fromSources([new MemorySource(bytes, name)]).shards[0] });
    }
  });

  it("every base model runs unmutated (control)", () => {
    for (const b of bases)
      assert.equal(
        exercise(
          EditedFile.of(
            b.shard,
            new Map(b.shard.metadata),
            new Map(b.shard.tensors.map((t) => [t.name, t])),
            new MemorySource(b.bytes),
          ),
        ),
        "ok",
        b.name,
      );
  });

  it(`survives ${ITERATIONS} mutated models (seed ${SEED}, start ${START})`, { timeout: LONG ? 0 : 60_000 }, (t) => {
    const outcomes = new Map<string, number>();
    let slowest = 0;
    const started = performance.now();
    for (let i = START; i < START + ITERATIONS; i++) {
      const rng = new Rng(SEED, i);
      const base = rng.pick(bases);
      const meta = new Map(base.shard.metadata);
      const tensors = new Map(base.shard.tensors.map((x) => [x.name, x]));
      const bytes = base.bytes.slice();
      const what = mutate(rng, base, meta, tensors, bytes);
      const t0 = performance.now();
      let outcome: string;
      try {
        outcome = exercise(EditedFile.of(base.shard, meta, tensors, new MemorySource(bytes, base.name)));
      } catch (e) {
        throw new Error(
          `iteration ${i} (seed ${SEED}, base ${base.name}): ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}\nmutations: ${what.join("; ")}\n` +
            `replay: LATENT_FUZZ_SEED=${SEED} LATENT_FUZZ_START=${i} LATENT_FUZZ_MODEL_ITERATIONS=1 node scripts/run-tests.mjs model/fuzz-model`,
          { cause: e },
        );
      }
      const dt = performance.now() - t0;
      assert.ok(dt < 2000, `iteration ${i} took ${dt.toFixed(0)} ms; mutations: ${what.join("; ")}`);
      slowest = Math.max(slowest, dt);
      // exit 2 is for usage errors: a bad file must never be reported as one
      assert.notEqual(
        outcome,
        "UsageError",
        `iteration ${i}: a bad file raised a UsageError; mutations: ${what.join("; ")}`,
      );
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      if (LONG && (i - START + 1) % 1000 === 0)
        process.stderr.write(
          `fuzz-model: ${i - START + 1}/${ITERATIONS}, ${JSON.stringify(Object.fromEntries(outcomes))}\n`,
        );
    }
    t.diagnostic(
      `${ITERATIONS} models in ${((performance.now() - started) / 1000).toFixed(1)} s; outcomes ${JSON.stringify(Object.fromEntries(outcomes))}; slowest ${slowest.toFixed(0)} ms`,
    );
    if (ITERATIONS >= 200) {
      assert.ok((outcomes.get("ok") ?? 0) > ITERATIONS / 20, "too few mutated models ran");
      assert.ok(ITERATIONS - (outcomes.get("ok") ?? 0) > ITERATIONS / 5, "too few mutated models were refused");
    }
  });
});
