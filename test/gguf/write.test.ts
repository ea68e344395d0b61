import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile, parseSplitPath, splitPath } from "../../src/gguf/file.js";
import { readShard } from "../../src/gguf/reader.js";
import { writeAll, writeGGUF, writeModel, type TensorToWrite } from "../../src/gguf/writer.js";
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { GGUFError } from "../../src/util/errors.js";
import { ShortReadError } from "../../src/gguf/source.js";
import { readFully } from "../../src/gguf/source-node.js";
import { fixture, MODEL_NAMES, plainMetadata, plainValue, tempDir, tensorsToWrite } from "./helpers.js";

const tmp = tempDir();
after(tmp.cleanup);

function sameIndex(a: GGUFFile, b: GGUFFile): void {
  assert.deepEqual(
    [...a.tensors.values()].map((t) => [t.name, t.ne, t.type, t.nbytes]),
    [...b.tensors.values()].map((t) => [t.name, t.ne, t.type, t.nbytes]),
  );
}

describe("round trip write → read → write", () => {
  for (const model of MODEL_NAMES) {
    it(`${model} is rewritten byte-identical`, () => {
      const original = readFileSync(fixture(model));
      const file = GGUFFile.open(fixture(model));
      const out1 = join(tmp.dir, `${model}.rt1.gguf`);
      writeGGUF(out1, file.metadata.entries, tensorsToWrite(file));
      file.close();
      assert.ok(readFileSync(out1).equals(original), "first rewrite differs from the fixture");

      const again = GGUFFile.open(out1);
      const out2 = join(tmp.dir, `${model}.rt2.gguf`);
      writeGGUF(out2, again.metadata.entries, tensorsToWrite(again));
      again.close();
      assert.ok(readFileSync(out2).equals(original), "second rewrite differs from the fixture");
    });
  }
});

describe("split files", () => {
  for (const model of ["ds2-v3-mixed-q", "glm-dsa-topk8"] as const) {
    const source = GGUFFile.open(fixture(model));
    const n = source.tensors.size;
    for (const per of [1, 7, 20, n - 1]) {
      it(`${model}, ${per} tensors per shard`, async () => {
        const prefix = join(tmp.dir, `${model}-per${per}`);
        const progress: number[] = [];
        const paths = writeModel(`${prefix}.gguf`, plainMetadata(source), tensorsToWrite(source), {
          maxTensorsPerShard: per,
          onTensor: (done, total) => {
            assert.equal(total, n);
            progress.push(done);
          },
        });
        const count = Math.ceil(n / per);
        assert.equal(paths.length, count);
        assert.deepEqual(
          progress,
          Array.from({ length: n }, (_, i) => i + 1),
        );
        paths.forEach((p, i) => assert.equal(p, splitPath(prefix, i + 1, count)));
        assert.deepEqual(parseSplitPath(paths[0]), { prefix, index: 1, count });

        // Opening the first, a middle and the last shard yields the same model.
        const opened = [...new Set([0, Math.floor(count / 2), count - 1])].map((i) => GGUFFile.open(paths[i]));
        for (const f of opened) {
          assert.deepEqual(f.paths, paths);
          sameIndex(f, source);
          assert.equal(f.metadata.requireInteger("split.count"), count);
          assert.equal(f.metadata.requireInteger("split.no"), 0);
          assert.equal(f.metadata.requireInteger("split.tensors.count"), n);
          assert.equal(f.metadata.entries.get("split.no")!.type, GGUFValueType.UINT16);
          assert.equal(f.metadata.entries.get("split.tensors.count")!.type, GGUFValueType.INT32);
          for (const [k, v] of source.metadata.entries) assert.deepEqual(f.metadata.entries.get(k), v, k);
          for (const t of f.tensors.values()) {
            assert.equal(t.shard, Math.floor([...source.tensors.keys()].indexOf(t.name) / per));
            assert.deepEqual(f.readBytes(t), source.readBytes(source.tensor(t.name)), t.name);
          }
        }
        // Non-first shards carry only the split keys.
        if (count > 1)
          assert.deepEqual([...readShard(paths[1]).metadata.keys()].sort(), [
            "split.count",
            "split.no",
            "split.tensors.count",
          ]);

        // Joining the shards back gives the original file, byte for byte.
        const joined = join(tmp.dir, `${model}-per${per}-joined.gguf`);
        writeGGUF(joined, plainMetadata(opened[0]), tensorsToWrite(opened[0]));
        assert.ok(readFileSync(joined).equals(readFileSync(fixture(model))));

        // A third-party parser agrees on the split layout.
        const { readGgufFileInfo } = await import("node-llama-cpp");
        const theirs = await readGgufFileInfo(paths[0], { logWarnings: false });
        assert.equal(theirs.splicedParts, count);
        assert.deepEqual(
          theirs.fullTensorInfo!.map((t) => [t.name, t.filePart - 1, Number(t.fileOffset)]),
          [...opened[0].tensors.values()].map((t) => [t.name, t.shard, t.offset]),
        );
        for (const f of opened) f.close();
      });
    }
  }

  it("writes a single file when maxTensorsPerShard covers every tensor", () => {
    const src = GGUFFile.open(fixture("ds2-lite"));
    const out = join(tmp.dir, "single.gguf");
    assert.deepEqual(
      writeModel(out, plainMetadata(src), tensorsToWrite(src), { maxTensorsPerShard: src.tensors.size }),
      [out],
    );
    assert.ok(readFileSync(out).equals(readFileSync(fixture("ds2-lite"))));
    assert.throws(
      () => writeModel(join(tmp.dir, "zero.gguf"), plainMetadata(src), tensorsToWrite(src), { maxTensorsPerShard: 0 }),
      GGUFError,
    );
  });
});

describe("metadata value types", () => {
  const entries: [string, GGUFMetadataEntry][] = [
    ["t.u8", { type: GGUFValueType.UINT8, value: 255 }],
    ["t.i8", { type: GGUFValueType.INT8, value: -128 }],
    ["t.u16", { type: GGUFValueType.UINT16, value: 65535 }],
    ["t.i16", { type: GGUFValueType.INT16, value: -32768 }],
    ["t.u32", { type: GGUFValueType.UINT32, value: 4294967295 }],
    ["t.i32", { type: GGUFValueType.INT32, value: -2147483648 }],
    ["t.f32", { type: GGUFValueType.FLOAT32, value: Math.fround(3.14159) }],
    ["t.f32.nan", { type: GGUFValueType.FLOAT32, value: Number.NaN }],
    ["t.f32.inf", { type: GGUFValueType.FLOAT32, value: -Infinity }],
    ["t.f64", { type: GGUFValueType.FLOAT64, value: 1 / 3 }],
    ["t.f64.tiny", { type: GGUFValueType.FLOAT64, value: 5e-324 }],
    ["t.u64", { type: GGUFValueType.UINT64, value: 18446744073709551615n }],
    ["t.u64.small", { type: GGUFValueType.UINT64, value: 7n }],
    ["t.i64", { type: GGUFValueType.INT64, value: -9223372036854775808n }],
    ["t.i64.max", { type: GGUFValueType.INT64, value: 9223372036854775807n }],
    ["t.bool.true", { type: GGUFValueType.BOOL, value: true }],
    ["t.bool.false", { type: GGUFValueType.BOOL, value: false }],
    ["t.str", { type: GGUFValueType.STRING, value: "héllo ▁ 世界 🙂" }],
    ["t.str.empty", { type: GGUFValueType.STRING, value: "" }],
    ["t.str.bom", { type: GGUFValueType.STRING, value: "\uFEFFbom kept" }],
    ["t.str.nul", { type: GGUFValueType.STRING, value: "a\u0000b" }],
    ["t.arr.empty", { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.INT32, values: [] } }],
    ["t.arr.empty.str", { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.STRING, values: [] } }],
    ["t.arr.u8", { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.UINT8, values: [0, 1, 255] } }],
    [
      "t.arr.f32",
      {
        type: GGUFValueType.ARRAY,
        value: { elementType: GGUFValueType.FLOAT32, values: [0.5, -2, Math.fround(1e30)] },
      },
    ],
    ["t.arr.f64", { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.FLOAT64, values: [Math.PI, -0] } }],
    [
      "t.arr.bool",
      { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.BOOL, values: [true, false, true] } },
    ],
    [
      "t.arr.u64",
      {
        type: GGUFValueType.ARRAY,
        value: { elementType: GGUFValueType.UINT64, values: [0n, 2n ** 63n, 2n ** 64n - 1n] },
      },
    ],
    ["t.arr.i64", { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.INT64, values: [-1n, 2n ** 62n] } }],
    ["t.arr.str", { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.STRING, values: ["a", "", "ü"] } }],
    [
      "t.arr.nested",
      {
        type: GGUFValueType.ARRAY,
        value: {
          elementType: GGUFValueType.ARRAY,
          values: [
            { elementType: GGUFValueType.INT16, values: [1, -2] },
            { elementType: GGUFValueType.STRING, values: ["x"] },
            { elementType: GGUFValueType.ARRAY, values: [{ elementType: GGUFValueType.BOOL, values: [] }] },
            { elementType: GGUFValueType.UINT64, values: [] },
          ],
        },
      },
    ],
  ];
  const meta = new Map(entries);
  const tensors: TensorToWrite[] = [
    { name: "a", ne: [4, 2], type: GGMLType.F32, data: new Uint8Array(32).map((_, i) => i) },
    { name: "b", ne: [32], type: GGMLType.Q8_0, data: new Uint8Array(34).fill(7) },
    { name: "c", ne: [3], type: GGMLType.F16, data: () => new Uint8Array(6).fill(1) },
  ];

  it("every value type survives write → read → write", () => {
    const p1 = join(tmp.dir, "types1.gguf");
    writeGGUF(p1, meta, tensors);
    const f = GGUFFile.open(p1);
    assert.deepEqual([...f.metadata.entries.keys()], [...meta.keys()]);
    for (const [k, e] of meta) {
      const got = f.metadata.entries.get(k)!;
      assert.equal(got.type, e.type, k);
      if (typeof e.value === "number" && Number.isNaN(e.value)) assert.ok(Number.isNaN(got.value as number), k);
      else assert.deepEqual(plainValue(got.value), plainValue(e.value), k);
    }
    assert.equal(typeof f.metadata.raw("t.u64"), "bigint");
    assert.equal(Object.is(f.metadata.array("t.arr.f64")!.values[1], -0), true);
    assert.throws(() => f.metadata.number("t.u64"), /does not fit a safe integer/);
    assert.equal(f.metadata.number("t.u64.small"), 7);
    assert.deepEqual([...f.readBytes(f.tensor("a"))], [...new Uint8Array(32).map((_, i) => i)]);
    assert.equal(f.tensor("b").nbytes, 34);
    assert.equal(f.tensor("c").relativeOffset, 96);
    const p2 = join(tmp.dir, "types2.gguf");
    writeGGUF(p2, f.metadata.entries, tensorsToWrite(f));
    f.close();
    assert.ok(readFileSync(p2).equals(readFileSync(p1)));
  });

  it("a file with no tensors and no metadata is valid", () => {
    const p = join(tmp.dir, "empty.gguf");
    writeGGUF(p, new Map(), []);
    assert.equal(readFileSync(p).length, 32); // the header is padded to the alignment
    const f = GGUFFile.open(p);
    assert.equal(f.tensors.size, 0);
    assert.equal(f.metadata.keys().length, 0);
    // without the padding too
    const p2 = join(tmp.dir, "empty24.gguf");
    writeFileSync(p2, readFileSync(p).subarray(0, 24));
    assert.equal(GGUFFile.open(p2).tensors.size, 0);
  });

  it("typed accessors name the key in their errors", () => {
    const p = join(tmp.dir, "types1.gguf");
    const m = GGUFFile.open(p).metadata;
    assert.throws(
      () => m.requireString("t.u8"),
      (e: Error) => e instanceof GGUFError && e.message.includes('"t.u8"'),
    );
    assert.throws(() => m.requireNumber("missing.key"), /missing metadata key "missing.key"/);
    assert.throws(() => m.integer("t.i8"), /"t.i8" = -128 should be a non-negative integer/);
    assert.throws(() => m.stringArray("t.arr.u8"), /"t.arr.u8" should be an array of strings/);
    assert.throws(() => m.bool("t.str"), /"t.str" should be a bool/);
    assert.deepEqual(m.perLayer("t.u8", 3), [255, 255, 255]);
    assert.throws(() => m.perLayer("t.arr.u8", 4), /3 entries, expected one per layer \(4\)/);
    assert.throws(() => m.numberArray("t.arr.u64"), /t\.arr\.u64\[1\]/);
  });
});

describe("alignment", () => {
  for (const alignment of [1, 8, 64, 4096]) {
    it(`general.alignment = ${alignment}`, () => {
      const src = GGUFFile.open(fixture("ds2-v3-mixed-q"));
      const meta = new Map(plainMetadata(src));
      meta.set("general.alignment", { type: GGUFValueType.UINT32, value: alignment });
      const p = join(tmp.dir, `align${alignment}.gguf`);
      writeGGUF(p, meta, tensorsToWrite(src));
      const f = GGUFFile.open(p);
      const shard = f.shards[0];
      assert.equal(shard.alignment, alignment);
      assert.equal(shard.dataOffset % alignment, 0);
      for (const t of f.tensors.values()) {
        assert.equal(t.relativeOffset % alignment, 0);
        assert.deepEqual(f.readBytes(t), src.readBytes(src.tensor(t.name)), t.name);
      }
      const p2 = join(tmp.dir, `align${alignment}.rt.gguf`);
      writeGGUF(p2, f.metadata.entries, tensorsToWrite(f));
      assert.ok(readFileSync(p2).equals(readFileSync(p)));
      // split shards keep the alignment
      const paths = writeModel(join(tmp.dir, `align${alignment}-split.gguf`), meta, tensorsToWrite(src), {
        maxTensorsPerShard: 20,
      });
      const s = GGUFFile.open(paths[2]);
      for (const sh of s.shards) assert.equal(sh.alignment, alignment);
      sameIndex(s, src);
      f.close();
      s.close();
      src.close();
    });
  }

  it("the writer refuses an alignment that is not a power of two", () => {
    const meta = new Map<string, GGUFMetadataEntry>([["general.alignment", { type: GGUFValueType.UINT32, value: 48 }]]);
    assert.throws(() => writeGGUF(join(tmp.dir, "bad-align.gguf"), meta, []), GGUFError);
  });

  it("the writer refuses data of the wrong size", () => {
    assert.throws(
      () =>
        writeGGUF(join(tmp.dir, "bad-size.gguf"), new Map(), [
          { name: "x", ne: [4], type: GGMLType.F32, data: new Uint8Array(15) },
        ]),
      /needs 16 bytes, got 15/,
    );
    assert.throws(
      () =>
        writeGGUF(join(tmp.dir, "bad-block.gguf"), new Map(), [
          { name: "x", ne: [33], type: GGMLType.Q8_0, data: new Uint8Array(0) },
        ]),
      GGUFError,
    );
  });
});

it("writeAll writes a buffer in pieces of at most `chunk` bytes at a file position (tensors past 2^31 − 1 bytes, which one write refuses)", () => {
  {
    const path = join(tmp.dir, "writeall.bin");
    const data = Uint8Array.from({ length: 1000 }, (_, i) => (i * 37 + 11) & 255);
    const fd = openSync(path, "w");
    try {
      writeAll(fd, new Uint8Array([1, 2, 3]), 0);
      writeAll(fd, data, 3, 7);
      writeAll(fd, data.subarray(0, 10), 1003, 1);
    } finally {
      closeSync(fd);
    }
    const got = readFileSync(path);
    assert.equal(got.length, 1013);
    // and read back in pieces, as readFully does past 1 GiB; a read past the end is a ShortReadError
    const back = new Uint8Array(1000);
    const rfd = openSync(path, "r");
    try {
      readFully(rfd, back, 3, "f.bin", 7);
      assert.deepEqual([...back], [...data]);
      assert.throws(() => readFully(rfd, new Uint8Array(20), 1000, "f.bin", 3), ShortReadError);
    } finally {
      closeSync(rfd);
    }
    assert.deepEqual([...got.subarray(0, 3)], [1, 2, 3]);
    assert.deepEqual([...got.subarray(3, 1003)], [...data]);
    assert.deepEqual([...got.subarray(1003)], [...data.subarray(0, 10)]);
  }
});

describe("tensor bytes produced in pieces", () => {
  const meta = new Map<string, GGUFMetadataEntry>([["general.name", { type: GGUFValueType.STRING, value: "pieces" }]]);
  const values = Float32Array.from({ length: 7 * 5 }, (_, i) => i * 0.5 - 3);
  const whole = new Uint8Array(values.buffer);
  const tensor = (data: TensorToWrite["data"]): TensorToWrite[] => [
    { name: "a", ne: [7, 5], type: GGMLType.F32, data },
    { name: "b", ne: [3], type: GGMLType.F32, data: new Uint8Array(new Float32Array([1, 2, 3]).buffer) },
  ];
  it("pieces of uneven sizes give the same file as the whole tensor", () => {
    const a = join(tmp.dir, "whole.gguf");
    const b = join(tmp.dir, "pieces.gguf");
    writeGGUF(a, meta, tensor(whole));
    writeGGUF(
      b,
      meta,
      tensor(() => [whole.subarray(0, 4), whole.subarray(4, 60), whole.subarray(60)]),
    );
    assert.deepEqual(readFileSync(b), readFileSync(a));
  });
  it("too few or too many bytes in pieces is an error naming the tensor, before the next tensor is overwritten", () => {
    const out = join(tmp.dir, "bad-pieces.gguf");
    assert.throws(
      () =>
        writeGGUF(
          out,
          meta,
          tensor(() => [whole.subarray(0, 100)]),
        ),
      (e: unknown) => e instanceof GGUFError && /tensor "a" .* needs 140 bytes, got 100/.test(e.message),
    );
    assert.throws(
      () =>
        writeGGUF(
          out,
          meta,
          tensor(() => [whole, whole.subarray(0, 4)]),
        ),
      (e: unknown) => e instanceof GGUFError && /tensor "a" .* needs 140 bytes, got more than 144/.test(e.message),
    );
  });
});
