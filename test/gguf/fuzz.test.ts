// Mutation fuzzing of the GGUF reader: mutated fixture bytes must either open (and then every tensor reads and
// dequantizes) or fail with a LatentError subclass. Anything else (TypeError, RangeError, a hang) is a bug.
//
//   LATENT_FUZZ_ITERATIONS=1000000 LATENT_FUZZ_SEED=42 node scripts/run-tests.mjs gguf/fuzz
//
// See docs/fuzzing.md. Iteration i only depends on (seed, i), so one failure is replayed with
// LATENT_FUZZ_SEED=<seed> LATENT_FUZZ_START=<i> LATENT_FUZZ_ITERATIONS=1.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { writeModel, type TensorToWrite } from "../../src/gguf/writer.js";
import { GGUFValueType, typeName } from "../../src/gguf/types.js";
import { summarizeModel, formatSummary } from "../../src/gguf/summary.js";
import { canDequantize, dequantize } from "../../src/quant/index.js";
import { LatentError } from "../../src/util/errors.js";
import { fixture, MODEL_NAMES, plainMetadata, tempDir } from "./helpers.js";
import { envInt, Rng } from "../helpers/rng.js";

const ITERATIONS = envInt("LATENT_FUZZ_ITERATIONS", 2000);
const SEED = envInt("LATENT_FUZZ_SEED", 0x1a7e47);
const START = envInt("LATENT_FUZZ_START", 0);
const LONG = ITERATIONS > 20_000;

/** Positions of the integer fields of a valid GGUF header (counts, lengths, types, dims, offsets): the best places to mutate. */
interface Field {
  readonly pos: number;
  readonly size: 4 | 8;
}

function headerFields(buf: Buffer): { fields: Field[]; headerEnd: number } {
  const fields: Field[] = [
    { pos: 4, size: 4 },
    { pos: 8, size: 8 },
    { pos: 16, size: 8 },
  ];
  const nt = Number(buf.readBigUInt64LE(8));
  const nkv = Number(buf.readBigUInt64LE(16));
  let p = 24;
  const u64 = (): number => {
    fields.push({ pos: p, size: 8 });
    const v = Number(buf.readBigUInt64LE(p));
    p += 8;
    return v;
  };
  const u32 = (): number => {
    fields.push({ pos: p, size: 4 });
    const v = buf.readUInt32LE(p);
    p += 4;
    return v;
  };
  const str = (): void => {
    const len = u64(); // (not `p += u64()`: that would read p before u64 advances it)
    p += len;
  };
  const scalar: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const value = (type: number): void => {
    if (type === GGUFValueType.STRING) str();
    else if (type === GGUFValueType.ARRAY) {
      const et = u32();
      const n = u64();
      // only record the fields of the first few elements of big arrays
      for (let i = 0; i < n; i++) {
        if (i < 4 || et === GGUFValueType.ARRAY) value(et);
        else if (et === GGUFValueType.STRING) p += 8 + Number(buf.readBigUInt64LE(p));
        else p += scalar[et];
      }
    } else if (type === GGUFValueType.UINT32 || type === GGUFValueType.UINT64 || type === GGUFValueType.INT32) {
      // integer values (alignment, split.*, token ids) are interesting too
      if (type === GGUFValueType.UINT64) u64();
      else u32();
    } else p += scalar[type];
  };
  for (let i = 0; i < nkv; i++) {
    str();
    value(u32());
  }
  for (let i = 0; i < nt; i++) {
    str();
    const nd = u32();
    for (let d = 0; d < nd; d++) u64();
    u32();
    u64();
  }
  return { fields, headerEnd: p };
}

interface Base {
  readonly label: string;
  /** the shard files' bytes; one element for a single file */
  readonly shards: Buffer[];
  readonly fields: { fields: Field[]; headerEnd: number }[];
}

const U64_SPECIAL = [
  0n,
  1n,
  2n ** 31n - 1n,
  2n ** 32n,
  2n ** 53n - 1n,
  2n ** 53n,
  2n ** 53n + 1n,
  2n ** 62n,
  2n ** 63n,
  2n ** 64n - 1n,
];
const U32_SPECIAL = [0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 31, 32, 39, 40, 64, 255, 2 ** 31, 2 ** 32 - 1];

/** Apply 1–4 random mutations; returns their description (for the failure report). */
function mutate(
  rng: Rng,
  input: Buffer,
  meta: { fields: Field[]; headerEnd: number },
): { out: Buffer; what: string[] } {
  let buf = Buffer.from(input);
  const what: string[] = [];
  const n = 1 + rng.int(4);
  const pos = (): number =>
    rng.chance(0.85) ? rng.int(Math.min(meta.headerEnd + 64, buf.length)) : rng.int(buf.length);
  for (let m = 0; m < n && buf.length > 0; m++) {
    const kind = rng.int(10);
    switch (kind) {
      case 0: {
        const p = pos();
        const bit = rng.int(8);
        buf[p] ^= 1 << bit;
        what.push(`flip bit ${bit} at ${p}`);
        break;
      }
      case 1: {
        const p = pos();
        const v = rng.pick([0, 0xff, rng.int(256)]);
        buf[p] = v;
        what.push(`set byte ${p} = ${v}`);
        break;
      }
      case 2:
      case 3:
      case 4: {
        const f = rng.pick(meta.fields);
        if (f.pos + f.size > buf.length) break;
        if (f.size === 8) {
          const old = buf.readBigUInt64LE(f.pos);
          const v = rng.pick([
            ...U64_SPECIAL,
            BigInt(buf.length),
            BigInt(buf.length - 1),
            old + 1n,
            old > 0n ? old - 1n : 0n,
            old * 2n,
            BigInt(rng.next()) * 2n ** 32n + BigInt(rng.next()),
            BigInt(rng.int(1000)),
          ]);
          buf.writeBigUInt64LE(v & (2n ** 64n - 1n), f.pos);
          what.push(`u64 at ${f.pos}: ${old} -> ${v & (2n ** 64n - 1n)}`);
        } else {
          const old = buf.readUInt32LE(f.pos);
          const v = rng.pick([...U32_SPECIAL, old + 1, Math.max(0, old - 1), rng.next(), rng.int(50)]) >>> 0;
          buf.writeUInt32LE(v, f.pos);
          what.push(`u32 at ${f.pos}: ${old} -> ${v}`);
        }
        break;
      }
      case 5: {
        const cut = rng.chance(0.7) ? rng.int(meta.headerEnd + 64) : rng.int(buf.length);
        buf = buf.subarray(0, Math.min(cut, buf.length));
        what.push(`truncate to ${buf.length}`);
        break;
      }
      case 6: {
        const p = pos();
        const len = 1 + rng.int(16);
        const ins = Buffer.alloc(len);
        for (let i = 0; i < len; i++) ins[i] = rng.pick([0, 0xff, rng.int(256)]);
        buf = Buffer.concat([buf.subarray(0, p), ins, buf.subarray(p)]);
        what.push(`insert ${len} bytes at ${p}`);
        break;
      }
      case 7: {
        const p = pos();
        const len = 1 + rng.int(16);
        buf = Buffer.concat([buf.subarray(0, p), buf.subarray(Math.min(buf.length, p + len))]);
        what.push(`delete ${len} bytes at ${p}`);
        break;
      }
      case 8: {
        // copy a chunk of the header over another place (duplicates names, keys, type ids)
        const from = rng.int(meta.headerEnd);
        const to = pos();
        const len = Math.min(1 + rng.int(32), buf.length - from, buf.length - to);
        if (len > 0) buf.copy(buf, to, from, from + len);
        what.push(`copy ${len} bytes ${from} -> ${to}`);
        break;
      }
      default: {
        // swap two integer fields
        const a = rng.pick(meta.fields);
        const b = rng.pick(meta.fields);
        if (a.size !== b.size || a.pos + a.size > buf.length || b.pos + b.size > buf.length) break;
        const ta = Buffer.from(buf.subarray(a.pos, a.pos + a.size));
        buf.copy(buf, a.pos, b.pos, b.pos + b.size);
        ta.copy(buf, b.pos);
        what.push(`swap fields at ${a.pos} and ${b.pos}`);
      }
    }
  }
  return { out: buf, what };
}

/** Open the (possibly split) model and touch everything a user of the reader would: all bytes, dequantization, the summary. */
function exercise(path: string): "ok" | string {
  let file: GGUFFile;
  try {
    file = GGUFFile.open(path);
  } catch (e) {
    if (e instanceof LatentError) return e.name;
    throw e;
  }
  try {
    for (const t of file.tensors.values()) {
      const bytes = file.readBytes(t);
      assert.equal(bytes.length, t.nbytes);
      if (canDequantize(t.type)) {
        const n = t.ne.reduce((a, b) => a * b, 1);
        const f = dequantize(t.type, bytes, n, t.name);
        assert.equal(f.length, n);
      }
    }
    const summary = summarizeModel(file, { tensors: true });
    JSON.stringify(summary);
    formatSummary(summary);
    return "ok";
  } catch (e) {
    if (e instanceof LatentError) return e.name;
    throw e;
  } finally {
    file.close();
  }
}

describe("GGUF mutation fuzzing", () => {
  const tmp = tempDir("latent-fuzz-");
  after(tmp.cleanup);
  const bases: Base[] = [];

  before(() => {
    // Small models (all metadata, a few tensors of every type present) keep an iteration around a millisecond.
    const build = (
      label: string,
      meta: Map<string, import("../../src/gguf/types.js").GGUFMetadataEntry>,
      tensors: TensorToWrite[],
      per?: number,
    ): void => {
      const dir = join(tmp.dir, `base-${label}`);
      mkdirSync(dir);
      const paths = writeModel(
        join(dir, "m.gguf"),
        meta,
        tensors,
        per === undefined ? {} : { maxTensorsPerShard: per },
      );
      const shards = paths.map((p) => readFileSync(p));
      bases.push({ label, shards, fields: shards.map((b) => headerFields(b)) });
    };
    for (const model of MODEL_NAMES) {
      const f = GGUFFile.open(fixture(model));
      const chosen: TensorToWrite[] = [];
      const seenTypes = new Map<number, number>();
      for (const t of [...f.tensors.values()].sort((a, b) => a.nbytes - b.nbytes)) {
        const k = seenTypes.get(t.type) ?? 0;
        if (k >= 3 || t.nbytes > 40_000) continue;
        seenTypes.set(t.type, k + 1);
        chosen.push({ name: t.name, ne: t.ne, type: t.type, data: f.readBytes(t) });
      }
      const meta = plainMetadata(f);
      build(model, meta, chosen);
      if (model === "ds2-v3-mixed-q") {
        build(`${model}-split`, meta, chosen, 3);
        const m64 = new Map(meta);
        m64.set("general.alignment", { type: GGUFValueType.UINT32, value: 64 });
        build(`${model}-align64`, m64, chosen);
      }
      f.close();
    }
    assert.ok(bases.some((b) => b.label.endsWith("mixed-q")));
  });

  it(`survives ${ITERATIONS} mutations (seed ${SEED}, start ${START})`, { timeout: LONG ? 0 : 120_000 }, (t) => {
    const outcomes = new Map<string, number>();
    const started = performance.now();
    let slowest = 0;
    let slowestAt = -1;
    for (let i = START; i < START + ITERATIONS; i++) {
      const rng = new Rng(SEED, i);
      const base = rng.pick(bases);
      const target = rng.int(base.shards.length);
      const { out, what } = mutate(rng, base.shards[target], base.fields[target]);
      const dir = join(tmp.dir, `it${i % 2}`);
      mkdirSync(dir, { recursive: true });
      const count = base.shards.length;
      const names =
        count === 1
          ? ["m.gguf"]
          : base.shards.map((_, s) => `m-${String(s + 1).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`);
      base.shards.forEach((b, s) => writeFileSync(join(dir, names[s]), s === target ? out : b));
      const t0 = performance.now();
      let outcome: string;
      try {
        outcome = exercise(join(dir, names[rng.int(count)]));
      } catch (e) {
        const keep = join(tmp.dir, "..", `latent-fuzz-failure-seed${SEED}-it${i}.gguf`);
        copyFileSync(join(dir, names[target]), keep);
        throw new Error(
          `iteration ${i} (seed ${SEED}, base ${base.label}, shard ${target}): ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}\n` +
            `mutations: ${what.join("; ")}\ninput kept at ${keep}\n` +
            `replay: LATENT_FUZZ_SEED=${SEED} LATENT_FUZZ_START=${i} LATENT_FUZZ_ITERATIONS=1 node scripts/run-tests.mjs gguf/fuzz`,
          { cause: e },
        );
      }
      const dt = performance.now() - t0;
      if (dt > slowest) {
        slowest = dt;
        slowestAt = i;
      }
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      if (LONG && (i - START + 1) % 10_000 === 0) {
        const s = (performance.now() - started) / 1000;
        process.stderr.write(
          `fuzz: ${i - START + 1}/${ITERATIONS} in ${s.toFixed(0)} s, ${JSON.stringify(Object.fromEntries(outcomes))}\n`,
        );
      }
    }
    const secs = (performance.now() - started) / 1000;
    t.diagnostic(
      `${ITERATIONS} iterations in ${secs.toFixed(1)} s; outcomes ${JSON.stringify(Object.fromEntries(outcomes))}; slowest ${slowest.toFixed(1)} ms (iteration ${slowestAt})`,
    );
    if (ITERATIONS >= 500) {
      // The mutations must leave some files valid and break others, or the fuzzer tests nothing.
      assert.ok((outcomes.get("ok") ?? 0) > ITERATIONS / 50, "too few mutated files opened");
      assert.ok((outcomes.get("GGUFError") ?? 0) > ITERATIONS / 10, "too few mutated files were rejected");
    }
    assert.ok(slowest < 2000, `iteration ${slowestAt} took ${slowest.toFixed(0)} ms`);
  });

  it("exercise() reads every fixture cleanly", () => {
    for (const model of MODEL_NAMES) assert.equal(exercise(fixture(model)), "ok", model);
    assert.equal(typeName(12), "Q4_K");
  });
});
