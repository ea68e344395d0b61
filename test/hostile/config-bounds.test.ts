// Hostile metadata values: every count is bounded before anything is allocated from it, and every hyper-parameter is
// range-checked at load, with an error naming the key (never an out-of-memory abort or "logits contain NaN" later).
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { Metadata } from "../../src/gguf/metadata.js";
import { GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { parseConfig } from "../../src/model/config.js";
import { loadModel } from "../../src/runtime/load.js";
import { LatentError } from "../../src/util/errors.js";
import { rewriteGGUF, str, u32 } from "../helpers/gguf-rewrite.js";
import { tempDir } from "../gguf/helpers.js";

const FIXTURES = new URL("../fixtures/models/", import.meta.url).pathname;
const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const tmp = tempDir("latent-hostile-config-");
after(tmp.cleanup);

function meta(name: string, edit: (m: Map<string, GGUFMetadataEntry>) => void): Metadata {
  const f = GGUFFile.open(join(FIXTURES, `${name}.gguf`));
  const m = new Map(f.shards[0].metadata);
  f.close();
  edit(m);
  return new Metadata(m);
}
const f32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.FLOAT32, value });
const u64 = (value: bigint): GGUFMetadataEntry => ({ type: GGUFValueType.UINT64, value });

/** parseConfig must throw a LatentError whose message names `key`. */
function refuses(m: Metadata, key: string, label: string): void {
  assert.throws(
    () => parseConfig(m),
    (e: unknown) => e instanceof LatentError && e.message.includes(key),
    `${label}: expected a LatentError naming ${key}`,
  );
}

describe("counts are bounded before allocation", { timeout: 20_000 }, () => {
  it("block_count 2^31 and 1e8 are refused at once, naming the key", () => {
    for (const n of [2 ** 31, 1e8, 2 ** 32 - 1]) {
      const t0 = performance.now();
      refuses(
        meta("ds2-lite", (m) => m.set("deepseek2.block_count", u32(n))),
        "deepseek2.block_count",
        `block_count ${n}`,
      );
      assert.ok(performance.now() - t0 < 1000, `block_count ${n} took ${performance.now() - t0} ms`);
    }
    refuses(
      meta("ds2-lite", (m) => m.set("deepseek2.block_count", u64(2n ** 40n))),
      "deepseek2.block_count",
      "u64 block_count",
    );
  });

  it("head, expert, width and context counts past any real model are refused", () => {
    const cases: [string, number][] = [
      ["deepseek2.attention.head_count", 2 ** 31],
      ["deepseek2.expert_count", 2 ** 31],
      ["deepseek2.embedding_length", 2 ** 31],
      ["deepseek2.context_length", 2 ** 31],
      ["deepseek2.vocab_size", 2 ** 31],
      ["deepseek2.attention.kv_lora_rank", 2 ** 31],
    ];
    for (const [key, v] of cases)
      refuses(
        meta("ds2-v3", (m) => m.set(key, u32(v))),
        key,
        `${key} = ${v}`,
      );
  });

  it("the demo model loads; block_count that disagrees with the blk.N tensors is a load error naming the key", () => {
    const control = loadModel(DEMO);
    assert.equal(control.config.nLayer, 6);
    control.file.close();
    for (const n of [5, 7, 100_000_000]) {
      const path = join(tmp.dir, `blocks-${n}.gguf`);
      rewriteGGUF(DEMO, path, { meta: (m) => m.set("deepseek2.block_count", u32(n)) });
      const t0 = performance.now();
      assert.throws(
        () => loadModel(path),
        (e: unknown) =>
          e instanceof LatentError &&
          new RegExp(`deepseek2\\.block_count = ${n}.*${n < 4096 ? "6 layers" : "exceeds"}`).test(e.message),
        `block_count ${n}`,
      );
      assert.ok(performance.now() - t0 < 5000, `block_count ${n} took ${performance.now() - t0} ms`);
    }
  });
});

describe("hyper-parameters are range-checked at load", () => {
  const bad = [NaN, Infinity, -Infinity, 0, -1];
  it("rms epsilon, rope base", () => {
    for (const key of ["deepseek2.attention.layer_norm_rms_epsilon", "deepseek2.rope.freq_base"]) {
      for (const v of bad)
        refuses(
          meta("ds2-lite", (m) => m.set(key, f32(v))),
          key,
          `${key} = ${v}`,
        );
    }
    refuses(
      meta("ds2-lite", (m) => m.set("deepseek2.attention.layer_norm_rms_epsilon", f32(2))),
      "layer_norm_rms_epsilon",
      "eps 2",
    );
  });

  it("expert weight scale (0 still means 'absent' = 1)", () => {
    const key = "deepseek2.expert_weights_scale";
    for (const v of [NaN, Infinity, -Infinity, -1])
      refuses(
        meta("ds2-v3", (m) => m.set(key, f32(v))),
        key,
        `${key} = ${v}`,
      );
    assert.equal(parseConfig(meta("ds2-v3", (m) => m.set(key, f32(0)))).weightsScale, 1);
  });

  it("YaRN factor, original context, beta_fast/slow, log multiplier", () => {
    const yarn = (m: Map<string, GGUFMetadataEntry>): void => {
      m.set("deepseek2.rope.scaling.type", str("yarn"));
      m.set("deepseek2.rope.scaling.factor", f32(4));
    };
    // control: a sane YaRN config parses
    assert.ok(parseConfig(meta("ds2-lite", yarn)).yarn !== undefined);
    const cases: [string, number[]][] = [
      ["deepseek2.rope.scaling.factor", [NaN, Infinity, 0, -1, 0.5]],
      ["deepseek2.rope.scaling.original_context_length", [NaN, Infinity, 0, -1]],
      ["deepseek2.rope.scaling.yarn_beta_fast", [NaN, Infinity, -Infinity, 0, -1]],
      ["deepseek2.rope.scaling.yarn_beta_slow", [NaN, Infinity, -Infinity, 0, -1]],
      ["deepseek2.rope.scaling.yarn_log_multiplier", [NaN, Infinity, -Infinity, -1]],
    ];
    for (const [key, values] of cases) {
      for (const v of values) {
        refuses(
          meta("ds2-lite", (m) => {
            yarn(m);
            m.set(key, f32(v));
          }),
          key,
          `${key} = ${v}`,
        );
      }
    }
  });
});
