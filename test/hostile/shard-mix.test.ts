// Shards of different models: what can be told apart is refused with an error naming both shards.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { splitPath } from "../../src/gguf/file.js";
import { loadModel } from "../../src/runtime/load.js";
import { GGUFError, LatentError } from "../../src/util/errors.js";
import { writeGGUF } from "../../src/gguf/writer.js";
import { str, u32 } from "../helpers/gguf-rewrite.js";
import { synthModel, type SynthCase } from "../helpers/synth.js";
import { tempDir } from "../gguf/helpers.js";

const tmp = tempDir("latent-hostile-shards-");
after(tmp.cleanup);

const A: SynthCase = { label: "mix-a", base: "tiny", over: {} };
const B: SynthCase = { label: "mix-b", base: "tiny", over: { n_embd: 48 } };

/** shard `no` (1-based) of a 2-shard model */
const shard = (m: { path: string }, no: number): string =>
  m.path.replace(/-00001-of-00002\.gguf$/, `-0000${no}-of-00002.gguf`);

describe("mixed shards", { timeout: 60_000 }, () => {
  const a = synthModel(A, 1, { split: 2 });
  const b = synthModel(B, 2, { split: 2 });
  after(() => {
    a.cleanup();
    b.cleanup();
  });

  it("control: each model's own shards open and load", () => {
    assert.match(a.path, /-00001-of-00002\.gguf$/);
    const m = loadModel(a.path);
    assert.equal(m.file.shards.length, 2);
    m.file.close();
  });

  it("a later shard that declares metadata disagreeing with the first shard is refused at open, naming the key", () => {
    const dir = join(tmp.dir, "declared");
    mkdirSync(dir);
    const prefix = join(dir, "m");
    copyFileSync(shard(a, 1), splitPath(prefix, 1, 2));
    // some tools write the model's metadata into every shard: here shard 2 says it is a different model
    const fb = GGUFFile.open(b.path);
    const meta = new Map(fb.shards[1].metadata);
    meta.set("general.architecture", str("deepseek2"));
    meta.set("deepseek2.embedding_length", u32(48));
    writeGGUF(
      splitPath(prefix, 2, 2),
      meta,
      fb.shards[1].tensors.map((t) => ({
        name: t.name,
        ne: t.ne,
        type: t.type,
        data: fb.readBytes(fb.tensor(t.name)),
      })),
    );
    fb.close();
    assert.throws(
      () => GGUFFile.open(splitPath(prefix, 1, 2)),
      (e: unknown) =>
        e instanceof GGUFError &&
        /deepseek2\.embedding_length/.test(e.message) &&
        /00002-of-00002/.test(e.message) &&
        /00001-of-00002/.test(e.message),
    );
  });

  it("gguf-split style shards (no metadata after the first) of a model with other shapes: the load error names the shard", () => {
    const dir = join(tmp.dir, "split-style");
    mkdirSync(dir);
    const prefix = join(dir, "m");
    copyFileSync(shard(a, 1), splitPath(prefix, 1, 2));
    copyFileSync(shard(b, 2), splitPath(prefix, 2, 2));
    assert.throws(
      () => loadModel(splitPath(prefix, 1, 2)),
      (e: unknown) =>
        e instanceof LatentError &&
        /has shape/.test(e.message) &&
        /shard 2 of 2/.test(e.message) &&
        /different model/.test(e.message),
    );
  });
});
