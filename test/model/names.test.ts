// GGUF ↔ HF names and tensors for every kit model, and legacy / split files that must compute the same logits.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { writeModel } from "../../src/gguf/writer.js";
import { parseConfig } from "../../src/model/config.js";
import { loadModel } from "../../src/runtime/load.js";
import { fromHfStateDict, generationMetadata, ggufToHf, hfToGguf, toHfStateDict } from "../../src/convert/names.js";
import { dequantize } from "../../src/quant/index.js";
import { logprobRows, maxAbsDiff } from "../helpers/logprobs.js";

const DIR = new URL("../fixtures/models/", import.meta.url).pathname;
const MODELS = ["ds2-qlora-softmax", "ds2-lite", "ds2-v3", "glm-dsa-topk8", "ds2-v3-mixed-q"];

function expected(name: string): { tokens: number[]; want: (number | null)[][] } {
  const e = JSON.parse(readFileSync(join(DIR, `${name}.expected.json`), "utf8")) as {
    cases: { tokens: number[]; logprobs: (number | null)[][]; logprobs_f32_weights?: (number | null)[][] }[];
  };
  const kc = e.cases[0];
  return { tokens: kc.tokens.slice(0, 24), want: (kc.logprobs_f32_weights ?? kc.logprobs).slice(0, 24) };
}

test("known names map both ways", () => {
  assert.deepEqual(ggufToHf("blk.3.attn_kv_a_mqa.weight", 8), ["model.layers.3.self_attn.kv_a_proj_with_mqa.weight"]);
  assert.deepEqual(ggufToHf("blk.0.attn_k_b.weight", 8), ["model.layers.0.self_attn.kv_b_proj.weight"]);
  assert.deepEqual(ggufToHf("blk.1.exp_probs_b.bias", 8), ["model.layers.1.mlp.gate.e_score_correction_bias"]);
  assert.equal(ggufToHf("blk.1.ffn_down_exps.weight", 4)!.length, 4);
  assert.deepEqual(hfToGguf("model.layers.2.self_attn.kv_b_proj.weight", "current")!.gguf, [
    "blk.2.attn_k_b.weight",
    "blk.2.attn_v_b.weight",
  ]);
  assert.deepEqual(hfToGguf("model.layers.2.self_attn.kv_b_proj.weight", "legacy")!.gguf, ["blk.2.attn_kv_b.weight"]);
  assert.deepEqual(hfToGguf("model.layers.5.mlp.experts.7.up_proj.weight", "current"), {
    gguf: ["blk.5.ffn_up_exps.weight"],
    expert: 7,
  });
  assert.equal(ggufToHf("blk.0.no_such.weight", 8), undefined);
});

for (const name of MODELS) {
  test(`${name}: every tensor round-trips GGUF → HF → GGUF with identical values`, () => {
    const file = GGUFFile.open(join(DIR, `${name}.gguf`));
    const c = parseConfig(file.metadata);
    for (const info of file.tensors.values()) {
      for (const hf of ggufToHf(info.name, c.nExpert)!)
        assert.ok(hfToGguf(hf, "current")!.gguf.includes(info.name), `${info.name} → ${hf} → back`);
    }
    const sd = toHfStateDict(file, c);
    assert.ok(sd.has("model.layers.0.self_attn.kv_b_proj.weight"));
    assert.deepEqual(sd.get("model.layers.0.self_attn.kv_b_proj.weight")!.shape, [
      c.nHead * (c.qkNope + c.vHead),
      c.kvLoraRank,
    ]);
    const back = fromHfStateDict(sd, c, "current");
    assert.deepEqual(back.map((t) => t.name).sort(), [...file.tensors.keys()].sort());
    for (const t of back) {
      const info = file.tensor(t.name);
      assert.deepEqual(t.ne, info.ne, t.name);
      const orig = dequantize(
        info.type,
        file.readBytes(info),
        info.ne.reduce((a, b) => a * b, 1),
      );
      const bytes = t.data as Uint8Array;
      const mine = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
      assert.deepEqual(
        new Uint32Array(mine.buffer, mine.byteOffset, mine.length),
        new Uint32Array(orig.buffer, orig.byteOffset, orig.length),
        t.name,
      );
    }
    file.close();
  });

  test(`${name}: legacy (attn_kv_b), PR #11446-era and split rewrites give the same logits`, () => {
    const tmp = mkdtempSync(join(tmpdir(), "latent-gen-"));
    try {
      const file = GGUFFile.open(join(DIR, `${name}.gguf`));
      const c = parseConfig(file.metadata);
      const legacyTensors = fromHfStateDict(toHfStateDict(file, c), c, "legacy");
      assert.ok(legacyTensors.some((t) => t.name === "blk.0.attn_kv_b.weight"));
      assert.ok(!legacyTensors.some((t) => t.name === "blk.0.attn_k_b.weight"));
      const legacyPath = join(tmp, "legacy.gguf");
      writeModel(legacyPath, generationMetadata(file.shards[0].metadata, c, "legacy"), legacyTensors);
      // The PR #11446-era generation: split attn_k_b/attn_v_b tensors with legacy metadata (no *_mla keys).
      const midPath = join(tmp, "split-tensors-legacy-keys.gguf");
      writeModel(
        midPath,
        generationMetadata(file.shards[0].metadata, c, "legacy"),
        [...file.tensors.values()].map((t) => ({ name: t.name, ne: t.ne, type: t.type, data: file.readBytes(t) })),
      );
      const splitPaths = writeModel(
        join(tmp, "split.gguf"),
        file.shards[0].metadata,
        [...file.tensors.values()].map((t) => ({ name: t.name, ne: t.ne, type: t.type, data: file.readBytes(t) })),
        { maxTensorsPerShard: 9 },
      );
      assert.ok(splitPaths.length > 2);
      const { tokens, want } = expected(name);
      const legacy = loadModel(legacyPath);
      assert.equal(legacy.model.weights.generation, "legacy");
      const split = loadModel(splitPaths[1]);
      const mid = loadModel(midPath);
      for (const path of ["reference", "prefill", "decode"] as const) {
        assert.ok(
          maxAbsDiff(logprobRows(mid.model, tokens, path, 5), want) <= 1e-4,
          `split tensors + legacy keys ${path}`,
        );
        assert.ok(maxAbsDiff(logprobRows(legacy.model, tokens, path, 5), want) <= 1e-4, `legacy ${path}`);
        assert.ok(maxAbsDiff(logprobRows(split.model, tokens, path, 5), want) <= 1e-4, `split ${path}`);
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
}
