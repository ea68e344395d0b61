// Hostile and corrupt input: every case must raise a GGUFError with a clear message; never a crash, a hang or a huge allocation.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { readShard } from "../../src/gguf/reader.js";
import { writeGGUF, writeModel } from "../../src/gguf/writer.js";
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { GGUFError } from "../../src/util/errors.js";
import { fixture, plainMetadata, Raw, tempDir, tensorsToWrite } from "./helpers.js";

const tmp = tempDir("latent-hostile-");
after(tmp.cleanup);
let counter = 0;
const T = { timeout: 20_000 };

/** Write `bytes` to a fresh temp file and assert that opening it fails with a GGUFError whose message matches `re`. */
function rejects(bytes: Uint8Array | Raw, re: RegExp): GGUFError {
  const path = join(tmp.dir, `case${counter++}.gguf`);
  writeFileSync(path, bytes instanceof Raw ? bytes.build() : bytes);
  return rejectsPath(path, re);
}

function rejectsPath(path: string, re: RegExp): GGUFError {
  let caught: unknown;
  try {
    GGUFFile.open(path).close();
  } catch (e) {
    caught = e;
  }
  assert.ok(
    caught instanceof GGUFError,
    `expected a GGUFError, got ${caught instanceof Error ? `${caught.name}: ${caught.message}` : String(caught)}`,
  );
  assert.match(caught.message, re);
  return caught;
}

/** One valid F32 tensor "w" of 8 elements, with `kvs` written before it. */
function oneTensor(kv: (r: Raw) => Raw = (r) => r, kvCount = 0): Raw {
  const r = kv(new Raw().header(1, kvCount));
  r.tensor("w", [8], GGMLType.F32, 0).padTo(32);
  return r.zeros(32);
}

describe("hostile headers", () => {
  it("a well-formed hand-made file opens (control case)", () => {
    const path = join(tmp.dir, "control.gguf");
    oneTensor((r) => r.kvStr("general.architecture", "x"), 1).write(path);
    const f = GGUFFile.open(path);
    assert.deepEqual(f.tensor("w").ne, [8]);
    assert.equal(f.readBytes(f.tensor("w")).length, 32);
    f.close();
  });

  it("empty and tiny files", () => {
    rejects(new Uint8Array(0), /not a GGUF file \(only 0 bytes\)/);
    rejects(Buffer.from("GGUF"), /not a GGUF file/);
    rejects(
      new Raw().bytes(Buffer.from("GGUF")).u32(3).u32(0),
      /truncated file: tensor count needs 8 bytes at offset 8/,
    );
  });

  it("wrong magic", () => {
    rejects(
      new Raw().bytes(Buffer.from("GGML")).u32(3).u64(0).u64(0),
      /not a GGUF file \(magic 0x4c4d4747, expected "GGUF"\)/,
    );
    rejects(Buffer.from("PK\u0003\u0004 this is a zip file, not a model"), /not a GGUF file/);
  });

  it("unsupported versions", () => {
    for (const v of [0, 1, 4, 0xffffffff])
      rejects(new Raw().header(0, 0, v), new RegExp(`unsupported GGUF version ${v} \\(supported: 2, 3\\)`));
    rejects(new Raw().header(0, 0, 0x03000000), /big-endian GGUF \(version 3\) is not supported/);
  });

  it("counts that would allocate gigabytes", T, () => {
    rejects(new Raw().header(2n ** 40n, 0), /tensor count = 1099511627776 at offset 8 is impossible/);
    rejects(new Raw().header(0, 2n ** 64n - 1n), /metadata count = 18446744073709551615 at offset 16 is impossible/);
    rejects(
      new Raw()
        .header(0, 1)
        .str("k")
        .u32(GGUFValueType.ARRAY)
        .u32(GGUFValueType.UINT8)
        .u64(2n ** 62n),
      /array count 4611686018427387904 .* only 0 are left/,
    );
    rejects(
      new Raw().header(0, 1).str("k").u32(GGUFValueType.ARRAY).u32(GGUFValueType.STRING).u64(1e9).zeros(100),
      /metadata "k": array count 1000000000/,
    );
    rejects(
      new Raw()
        .header(0, 1)
        .str("k")
        .u32(GGUFValueType.ARRAY)
        .u32(GGUFValueType.ARRAY)
        .u64(2n ** 50n)
        .zeros(100),
      /array count/,
    );
    rejects(
      new Raw()
        .header(0, 1)
        .str("k", 2 ** 40)
        .zeros(10),
      /metadata key #0 at offset 24 has length 1099511627776, more than the 65535 bytes allowed/,
    );
    rejects(
      new Raw()
        .header(0, 1)
        .str("k")
        .u32(GGUFValueType.STRING)
        .u64(2n ** 63n),
      /metadata "k" at offset \d+ has length 9223372036854775808, more than/,
    );
    // a nested array whose inner count is huge
    rejects(
      new Raw()
        .header(0, 1)
        .str("k")
        .u32(GGUFValueType.ARRAY)
        .u32(GGUFValueType.ARRAY)
        .u64(1)
        .u32(GGUFValueType.FLOAT64)
        .u64(2n ** 59n),
      /metadata "k"\[0\]: array count 576460752303423488/,
    );
  });

  it("string lengths past the end of the file", () => {
    rejects(
      new Raw().header(0, 1).str("key", 1000).zeros(20),
      /metadata key #0 at offset 24 has length 1000, past the end of the file \(23 bytes left\)/,
    );
    rejects(
      new Raw().header(0, 1).str("k").u32(GGUFValueType.STRING).str("abc", 50),
      /metadata "k" at offset 37 has length 50, past the end of the file/,
    );
    rejects(
      new Raw().header(0, 1).str("k").u32(GGUFValueType.ARRAY).u32(GGUFValueType.STRING).u64(2).str("ok").str("x", 9),
      /metadata "k"\[1\] at offset \d+ has length 9, past the end/,
    );
    rejects(new Raw().header(1, 0).str("w", 70000).zeros(40), /name of tensor #0 .* more than the 64 bytes allowed/);
    rejects(
      new Raw().header(1, 0).str("w", 60).zeros(30),
      /name of tensor #0 at offset 24 has length 60, past the end of the file \(31 bytes left\)/,
    );
  });

  it("truncation of a real model at many points", T, () => {
    const bytes = readFileSync(fixture("ds2-v3-mixed-q"));
    const header = readShard(fixture("ds2-v3-mixed-q")).dataOffset;
    const cuts = new Set<number>();
    for (let i = 0; i < 64; i++) cuts.add(i);
    for (let i = 64; i <= header + 64; i += 13) cuts.add(i);
    for (let i = 0; i < 40; i++) cuts.add(Math.floor(header + ((bytes.length - header) * i) / 40));
    cuts.add(bytes.length - 1);
    const path = join(tmp.dir, "trunc.gguf");
    for (const cut of cuts) {
      writeFileSync(path, bytes.subarray(0, cut));
      const e = rejectsPath(path, /.+/);
      assert.match(e.message, /truncated|not a GGUF file|impossible/, `cut at ${cut}: ${e.message}`);
    }
  });

  it("offsets and sizes past the end of the file", () => {
    rejects(
      new Raw()
        .header(1, 0)
        .tensor("w", [8], GGMLType.F32, 2n ** 60n)
        .padTo(32)
        .zeros(32),
      /offset of tensor "w" = 1152921504606846976 at offset \d+ is impossible: past the end/,
    );
    rejects(
      new Raw().header(1, 0).tensor("w", [8], GGMLType.F32, 64).padTo(32).zeros(32),
      /tensor "w" \(F32, 32 bytes at data offset 64\) extends past the end of the file \(data section is 32 bytes\)/,
    );
    rejects(
      new Raw().header(1, 0).tensor("w", [1024, 1024], GGMLType.F32, 0).padTo(32).zeros(32),
      /tensor "w" \(F32, ne = \[1024, 1024\]\) would take 4194304 bytes, more than the whole file/,
    );
    // the data section itself would start past the end of the file
    rejects(
      new Raw().header(1, 0).tensor("w", [8], GGMLType.F32, 0),
      /truncated file: data section would start at 64, file has 57 bytes/,
    );
  });

  it("overlapping tensors", () => {
    rejects(
      new Raw().header(2, 0).tensor("a", [16], GGMLType.F32, 0).tensor("b", [8], GGMLType.F32, 32).padTo(32).zeros(128),
      /tensors "a" \(\[0, 64\)\) and "b" \(\[32, 64\)\) overlap in the data section/,
    );
    rejects(
      new Raw().header(2, 0).tensor("a", [8], GGMLType.F32, 0).tensor("b", [8], GGMLType.F32, 0).padTo(32).zeros(64),
      /overlap/,
    );
    // zero-sized tensors may share an offset
    const path = join(tmp.dir, "zero-size.gguf");
    new Raw()
      .header(2, 0)
      .tensor("a", [8], GGMLType.F32, 0)
      .tensor("e", [0, 4], GGMLType.F32, 0)
      .padTo(32)
      .zeros(32)
      .write(path);
    const f = GGUFFile.open(path);
    assert.equal(f.tensor("e").nbytes, 0);
    assert.equal(f.readBytes(f.tensor("e")).length, 0);
    f.close();
  });

  it("dimension products that overflow", () => {
    rejects(
      new Raw()
        .header(1, 0)
        .tensor("w", [2n ** 32n, 2n ** 32n], GGMLType.F32, 0)
        .padTo(32)
        .zeros(32),
      /tensor "w" element count overflows \(ne = \[4294967296, 4294967296\]\)/,
    );
    rejects(
      new Raw()
        .header(1, 0)
        .tensor("w", [2n ** 64n - 1n], GGMLType.F32, 0)
        .padTo(32)
        .zeros(32),
      /ne\[0\] of tensor "w" = 18446744073709551615 .* is impossible/,
    );
    rejects(
      new Raw()
        .header(1, 0)
        .tensor("w", [2n ** 26n, 2n ** 26n, 2n ** 26n, 2n ** 26n], GGMLType.I8, 0)
        .padTo(32)
        .zeros(32),
      /element count overflows/,
    );
    rejects(
      new Raw()
        .header(1, 0)
        .tensor("w", [2n ** 52n], GGMLType.F64, 0)
        .padTo(32)
        .zeros(32),
      /would take \d+ bytes, more than the whole file/,
    );
  });

  it("n_dims out of range and bad names", () => {
    rejects(
      new Raw().header(1, 0).str("w").u32(0).u32(0).u64(0).padTo(32),
      /tensor "w" has 0 dimensions \(1\.\.4 allowed\)/,
    );
    rejects(
      new Raw().header(1, 0).tensor("w", [1, 1, 1, 1, 8], GGMLType.F32, 0).padTo(32).zeros(32),
      /tensor "w" has 5 dimensions/,
    );
    rejects(new Raw().header(1, 0).str("w").u32(0xffffffff).zeros(40), /has 4294967295 dimensions/);
    rejects(
      new Raw().header(1, 0).tensor("", [8], GGMLType.F32, 0).padTo(32).zeros(32),
      /tensor #0 at offset 24 has an empty name/,
    );
    rejects(
      new Raw().header(1, 0).tensor("x".repeat(65), [8], GGMLType.F32, 0).padTo(32).zeros(32),
      /length 65, more than the 64 bytes allowed/,
    );
  });

  it("ne[0] not a multiple of the block size", () => {
    rejects(
      new Raw().header(1, 0).tensor("blk.0.ffn_up.weight", [100, 4], GGMLType.Q4_K, 0).padTo(32).zeros(1024),
      /tensor "blk.0.ffn_up.weight" of type Q4_K has ne\[0\] = 100, not a multiple of the block size 256/,
    );
    rejects(
      new Raw().header(1, 0).tensor("w", [33], GGMLType.Q8_0, 0).padTo(32).zeros(64),
      /not a multiple of the block size 32/,
    );
  });

  it("misaligned offsets and bad general.alignment", () => {
    rejects(
      new Raw().header(2, 0).tensor("a", [4], GGMLType.F32, 0).tensor("b", [4], GGMLType.F32, 16).padTo(32).zeros(64),
      /tensor "b" offset 16 is not a multiple of the alignment 32/,
    );
    for (const a of [0, 48, 3]) {
      rejects(
        oneTensor((r) => r.kvU32("general.alignment", a), 1),
        new RegExp(`general.alignment = ${a} is not a power of two`),
      );
    }
    rejects(
      oneTensor((r) => r.kvStr("general.alignment", "32"), 1),
      /general.alignment = 32 is not a power of two/,
    );
    rejects(
      oneTensor((r) => r.str("general.alignment").u32(GGUFValueType.FLOAT32).f32(32.5), 1),
      /general.alignment = 32.5/,
    );
  });

  it("invalid UTF-8", () => {
    const bad = new Uint8Array([0x61, 0xff, 0x62]);
    rejects(
      new Raw().header(0, 1).str(bad).u32(GGUFValueType.UINT8).u8(1),
      /metadata key #0 at offset 32 is not valid UTF-8/,
    );
    rejects(
      new Raw()
        .header(0, 1)
        .str("k")
        .u32(GGUFValueType.STRING)
        .str(new Uint8Array([0xc3])),
      /metadata "k" at offset \d+ is not valid UTF-8/,
    );
    rejects(
      new Raw()
        .header(0, 1)
        .str("k")
        .u32(GGUFValueType.STRING)
        .str(new Uint8Array([0xed, 0xa0, 0x80])),
      /not valid UTF-8/,
    ); // a lone surrogate
    rejects(
      new Raw()
        .header(0, 1)
        .str("tokenizer.ggml.tokens")
        .u32(GGUFValueType.ARRAY)
        .u32(GGUFValueType.STRING)
        .u64(2)
        .str("a")
        .str(bad),
      /metadata "tokenizer.ggml.tokens"\[1\] at offset \d+ is not valid UTF-8/,
    );
    rejects(
      new Raw().header(1, 0).str(bad).u32(1).u64(8).u32(0).u64(0).padTo(32).zeros(32),
      /name of tensor #0 at offset 32 is not valid UTF-8/,
    );
  });

  it("unknown metadata value types", () => {
    rejects(new Raw().header(0, 1).str("k").u32(13).u32(0), /metadata "k" has unknown value type 13 at offset \d+/);
    rejects(new Raw().header(0, 1).str("k").u32(0xffffffff).u32(0), /unknown value type 4294967295/);
    rejects(
      new Raw().header(0, 1).str("k").u32(GGUFValueType.ARRAY).u32(99).u64(1).u32(0),
      /metadata "k": unknown array element type 99/,
    );
    rejects(
      new Raw().header(0, 1).str("k").u32(GGUFValueType.BOOL).u8(2),
      /metadata "k": bool byte at offset \d+ is 2, expected 0 or 1/,
    );
  });

  it("unknown ggml type ids name the tensor and the id", () => {
    for (const id of [4, 5, 31, 36, 1000, 0xffffffff]) {
      rejects(
        new Raw().header(1, 0).tensor("blk.3.ffn_down_exps.weight", [256], id, 0).padTo(32).zeros(1024),
        new RegExp(`tensor "blk\\.3\\.ffn_down_exps\\.weight" has unknown ggml type id ${id}`),
      );
    }
  });

  it("array nesting depth", () => {
    const deep = (levels: number): Raw => {
      const r = new Raw().header(0, 1).str("deep").u32(GGUFValueType.ARRAY);
      for (let i = 0; i < levels - 1; i++) r.u32(GGUFValueType.ARRAY).u64(1);
      return r.u32(GGUFValueType.UINT8).u64(0);
    };
    const path = join(tmp.dir, "deep8.gguf");
    deep(8).write(path);
    assert.equal(GGUFFile.open(path).metadata.array("deep")!.values.length, 1);
    rejects(deep(9), /metadata "deep"\[0\]\[0\]\[0\]\[0\]\[0\]\[0\]\[0\]\[0\]: arrays nested deeper than 8 levels/);
    rejects(deep(100_000), /arrays nested deeper than 8 levels/);
  });

  it("duplicate keys and tensors", () => {
    rejects(new Raw().header(0, 2).kvU32("a.b", 1).kvU32("a.b", 2), /duplicate metadata key "a.b" at offset \d+/);
    rejects(
      new Raw().header(2, 0).tensor("w", [8], GGMLType.F32, 0).tensor("w", [8], GGMLType.F32, 32).padTo(32).zeros(64),
      /duplicate tensor name "w"/,
    );
  });

  it("paths that are not GGUF files", () => {
    rejectsPath(join(tmp.dir, "does-not-exist.gguf"), /does-not-exist\.gguf: no such file/);
    const dir = join(tmp.dir, "a-directory.gguf");
    mkdirSync(dir);
    rejectsPath(dir, /not a regular file/);
  });

  it("readBytes outside a tensor", () => {
    const path = join(tmp.dir, "rb.gguf");
    oneTensor().write(path);
    const f = GGUFFile.open(path);
    const t = f.tensor("w");
    assert.throws(() => f.readBytes(t, 30, 4), /read of bytes \[30, 34\) outside tensor "w" \(32 bytes\)/);
    assert.throws(() => f.readBytes(t, -1, 1), GGUFError);
    assert.throws(() => f.readBytes(t, 0.5, 1), GGUFError);
    assert.throws(() => f.tensor("nope"), /tensor "nope" not found/);
    f.close();
  });

  it("a file that shrinks after it was opened", () => {
    const path = join(tmp.dir, "shrink.gguf");
    oneTensor().write(path);
    const f = GGUFFile.open(path);
    writeFileSync(path, readFileSync(path).subarray(0, 40));
    assert.throws(() => f.readBytes(f.tensor("w")), /unexpected end of file reading tensor "w"/);
    f.close();
  });
});

describe("hostile split files", () => {
  const src = GGUFFile.open(fixture("ds2-lite"));
  const n = src.tensors.size; // 44
  let k = 0;
  /** A fresh 4-shard split of ds2-lite in its own directory. */
  function split(): string[] {
    const dir = join(tmp.dir, `split${k++}`);
    mkdirSync(dir);
    return writeModel(join(dir, "m.gguf"), plainMetadata(src), tensorsToWrite(src), { maxTensorsPerShard: 11 });
  }
  /** Rewrite shard `i` (0-based) of `paths` with changed split keys and/or tensors. */
  function rewriteShard(
    paths: string[],
    i: number,
    keys: Record<string, GGUFMetadataEntry | null>,
    extraTensor?: string,
  ): void {
    const f = readShard(paths[i]);
    const meta = new Map(f.metadata);
    for (const [key, v] of Object.entries(keys)) {
      if (v === null) meta.delete(key);
      else meta.set(key, v);
    }
    const ts = f.tensors.map((t) => ({
      name: t.name,
      ne: t.ne,
      type: t.type,
      data: src.readBytes(src.tensor(t.name)),
    }));
    if (extraTensor !== undefined)
      ts.push({
        name: extraTensor,
        ne: src.tensor(extraTensor).ne,
        type: src.tensor(extraTensor).type,
        data: src.readBytes(src.tensor(extraTensor)),
      });
    writeGGUF(paths[i], meta, ts);
  }
  const u16 = (v: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT16, value: v });
  const i32 = (v: number): GGUFMetadataEntry => ({ type: GGUFValueType.INT32, value: v });

  it("control: every shard opens the whole model", () => {
    const paths = split();
    assert.equal(paths.length, 4);
    for (const p of paths) assert.equal(GGUFFile.open(p).tensors.size, n);
  });

  it("missing shard", () => {
    const paths = split();
    rmSync(paths[2]);
    for (const p of [paths[0], paths[3]])
      rejectsPath(p, /missing shard 3 of 4: .*m-00003-of-00004\.gguf does not exist/);
  });

  it("shard with the wrong split.no", () => {
    const paths = split();
    rewriteShard(paths, 2, { "split.no": u16(1) });
    rejectsPath(paths[0], /m-00003-of-00004\.gguf: split\.no = 1, expected 2 \(shard 3 of 4\)/);
    rewriteShard(paths, 2, { "split.no": null });
    rejectsPath(paths[0], /split\.no = undefined, expected 2/);
    rewriteShard(paths, 2, { "split.no": { type: GGUFValueType.STRING, value: "2" } });
    rejectsPath(paths[1], /m-00003-of-00004\.gguf: metadata "split\.no" should be a number/);
  });

  it("shards swapped on disk", () => {
    const paths = split();
    const t = `${paths[1]}.tmp`;
    renameSync(paths[1], t);
    renameSync(paths[2], paths[1]);
    renameSync(t, paths[2]);
    rejectsPath(paths[0], /split\.no = 2, expected 1/);
  });

  it("split.count disagreeing with the name or between shards", () => {
    const paths = split();
    rewriteShard(paths, 1, { "split.count": u16(5) });
    rejectsPath(paths[1], /the name says 4 shards, split\.count says 5/);
    rejectsPath(paths[0], /m-00002-of-00004\.gguf: split\.count = 5, expected 4/);
  });

  it("split.tensors.count mismatch", () => {
    const paths = split();
    rewriteShard(paths, 0, { "split.tensors.count": i32(n + 1) });
    rejectsPath(paths[3], /m-00002-of-00004\.gguf: split\.tensors\.count = 44, but the first shard says 45/);
    for (let i = 1; i < 4; i++) rewriteShard(paths, i, { "split.tensors.count": i32(n + 1) });
    rejectsPath(paths[3], /split\.tensors\.count = 45, but the 4 shards hold 44 tensors/);
  });

  it("duplicate tensor across shards", () => {
    const paths = split();
    rewriteShard(paths, 3, {}, "token_embd.weight");
    rejectsPath(
      paths[0],
      /tensor "token_embd\.weight" appears in both .*m-00001-of-00004\.gguf and .*m-00004-of-00004\.gguf/,
    );
  });

  it("a split file whose name lost the -NNNNN-of-NNNNN suffix", () => {
    const paths = split();
    const renamed = join(tmp.dir, "renamed.gguf");
    renameSync(paths[0], renamed);
    rejectsPath(renamed, /split\.count = 4, but the name does not follow <prefix>-NNNNN-of-NNNNN\.gguf/);
  });

  it("a single file named like a shard opens as a single file", () => {
    const path = join(tmp.dir, "solo-00001-of-00003.gguf");
    writeFileSync(path, readFileSync(fixture("ds2-lite")));
    assert.equal(GGUFFile.open(path).tensors.size, n);
  });
});
