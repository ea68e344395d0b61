// A header's memory is bounded by its size: numeric arrays are typed arrays, and a header of millions of strings is refused.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { truncateSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { MAX_HEADER_STRINGS } from "../../src/gguf/shard.js";
import { GGUFValueType } from "../../src/gguf/types.js";
import { GGUFError } from "../../src/util/errors.js";
import { Raw, tempDir } from "../gguf/helpers.js";

const tmp = tempDir("latent-hostile-header-");
after(tmp.cleanup);

/** A file with no tensors and one array key "big" of `count` elements of `type`, whose element bytes follow. */
function arrayFile(name: string, type: GGUFValueType, count: number, elements: Buffer): string {
  const path = join(tmp.dir, name);
  new Raw().header(0, 1).str("big").u32(GGUFValueType.ARRAY).u32(type).u64(count).bytes(elements).write(path);
  return path;
}

describe("header memory", { timeout: 30_000 }, () => {
  it("numeric arrays are read into typed arrays with their values", () => {
    const f32 = Buffer.alloc(16);
    [1.5, -2, 0, 3e38].forEach((v, i) => f32.writeFloatLE(v, 4 * i));
    const cases: [GGUFValueType, Buffer, unknown, number[]][] = [
      [GGUFValueType.UINT8, Buffer.from([0, 7, 255, 1]), Uint8Array, [0, 7, 255, 1]],
      [GGUFValueType.INT16, Buffer.from([0xff, 0xff, 2, 0, 0, 0x80, 0, 0]), Int16Array, [-1, 2, -32768, 0]],
      [GGUFValueType.FLOAT32, f32, Float32Array, [1.5, -2, 0, Math.fround(3e38)]],
    ];
    for (const [type, bytes, ctor, want] of cases) {
      const f = GGUFFile.open(arrayFile(`t${type}.gguf`, type, 4, bytes));
      const v = f.metadata.array("big")!.values;
      assert.ok(v instanceof (ctor as typeof Uint8Array), `${GGUFValueType[type]}: ${v.constructor.name}`);
      assert.deepEqual(f.metadata.numberArray("big"), want);
      f.close();
    }
  });

  it("a header with more strings in arrays than MAX_HEADER_STRINGS is refused at once", () => {
    const count = MAX_HEADER_STRINGS + 1;
    const path = arrayFile("strings.gguf", GGUFValueType.STRING, count, Buffer.alloc(0));
    truncateSync(path, 64 + 8 * count); // empty strings: 8 zero bytes each (a sparse file)
    const t0 = performance.now();
    assert.throws(
      () => GGUFFile.open(path),
      (e: unknown) => e instanceof GGUFError && /"big".*4194305 strings .*4194304/.test(e.message),
    );
    assert.ok(performance.now() - t0 < 2000, `took ${performance.now() - t0} ms`);
  });
});
