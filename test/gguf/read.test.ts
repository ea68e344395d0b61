import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { GGUFFile } from "../../src/gguf/file.js";
import { readShard } from "../../src/gguf/reader.js";
import { GGUFValueType, GGMLType, typeName, typeTraits, type GGUFValue } from "../../src/gguf/types.js";
import { isGGUFArray } from "../../src/gguf/metadata.js";
import { fixture, MODEL_NAMES, plainValue, type ModelName } from "./helpers.js";

interface Expect {
  arch: "deepseek2" | "glm-dsa";
  name: string;
  tensors: Record<string, number>;
  fileType: number;
  hp: Record<string, number | boolean | string>;
}

// From test/fixtures/models (= /work/shared/testdata/models/README.md), "Hyper-parameters" and the quantized-model tables.
const EXPECT: Record<ModelName, Expect> = {
  "ds2-qlora-softmax": {
    arch: "deepseek2",
    name: "tiny-ds2-qlora-softmax-random",
    tensors: { F32: 50 },
    fileType: 0,
    hp: {
      embedding_length: 64,
      block_count: 3,
      leading_dense_block_count: 1,
      "attention.head_count": 4,
      "attention.head_count_kv": 1,
      "attention.q_lora_rank": 48,
      "attention.kv_lora_rank": 32,
      "rope.dimension_count": 8,
      "attention.key_length_mla": 32,
      "attention.value_length_mla": 20,
      "attention.key_length": 40,
      "attention.value_length": 32,
      feed_forward_length: 96,
      expert_count: 8,
      expert_used_count: 3,
      expert_shared_count: 2,
      expert_feed_forward_length: 40,
      expert_gating_func: 1,
      expert_weights_norm: false,
      expert_weights_scale: 4,
      "rope.freq_base": 1e4,
      "rope.scaling.type": "yarn",
      "rope.scaling.factor": 40,
      "rope.scaling.original_context_length": 4096,
      context_length: 163840,
    },
  },
  "ds2-lite": {
    arch: "deepseek2",
    name: "tiny-ds2-lite-random",
    tensors: { F32: 44 },
    fileType: 0,
    hp: {
      embedding_length: 64,
      block_count: 3,
      leading_dense_block_count: 1,
      "attention.head_count": 3,
      "attention.head_count_kv": 1,
      "attention.q_lora_rank": 0,
      "attention.kv_lora_rank": 32,
      "rope.dimension_count": 8,
      "attention.key_length_mla": 24,
      "attention.value_length_mla": 24,
      "attention.key_length": 40,
      "attention.value_length": 32,
      expert_count: 8,
      expert_used_count: 2,
      expert_shared_count: 2,
      expert_gating_func: 1,
      expert_weights_norm: false,
      expert_weights_scale: 1,
      "rope.freq_base": 1e4,
    },
  },
  "ds2-v3": {
    arch: "deepseek2",
    name: "tiny-ds2-v3-random",
    tensors: { F32: 65 },
    fileType: 0,
    hp: {
      embedding_length: 64,
      block_count: 4,
      leading_dense_block_count: 2,
      "attention.head_count": 4,
      "attention.q_lora_rank": 48,
      "attention.kv_lora_rank": 32,
      expert_count: 16,
      expert_used_count: 4,
      expert_shared_count: 1,
      expert_gating_func: 2,
      expert_group_count: 4,
      expert_group_used_count: 2,
      expert_weights_norm: true,
      expert_weights_scale: 2.5,
      "rope.scaling.yarn_log_multiplier": Math.fround(0.1),
    },
  },
  "glm-dsa-topk8": {
    arch: "glm-dsa",
    name: "tiny-glm-dsa-topk8-random",
    tensors: { F32: 67 },
    fileType: 0,
    hp: {
      embedding_length: 64,
      block_count: 3,
      "attention.head_count": 4,
      "attention.q_lora_rank": 48,
      expert_count: 8,
      expert_used_count: 3,
      expert_shared_count: 1,
      expert_gating_func: 2,
      expert_weights_norm: true,
      "rope.freq_base": 1e6,
      "attention.indexer.head_count": 16,
      "attention.indexer.key_length": 64,
      "attention.indexer.top_k": 8,
      "rope.scaling.yarn_log_multiplier": Math.fround(0.0707),
    },
  },
  "ds2-v3-mixed-q": {
    arch: "deepseek2",
    name: "tiny-ds2-mixed-base-random",
    tensors: { Q4_K: 17, Q6_K: 6, Q8_0: 12, F32: 17 },
    fileType: 15,
    hp: {
      embedding_length: 256,
      block_count: 3,
      leading_dense_block_count: 1,
      "attention.q_lora_rank": 64,
      "attention.kv_lora_rank": 64,
      "rope.dimension_count": 16,
      "attention.key_length_mla": 48,
      "attention.value_length_mla": 24,
      "attention.key_length": 80,
      "attention.value_length": 64,
      feed_forward_length: 512,
      expert_count: 8,
      expert_used_count: 2,
      expert_shared_count: 1,
      expert_feed_forward_length: 256,
      expert_group_count: 2,
      expert_group_used_count: 1,
    },
  },
};

function scalarOf(v: GGUFValue | undefined): unknown {
  return isGGUFArray(v as GGUFValue) ? "array" : v;
}

describe("reading the fixture models", () => {
  for (const model of MODEL_NAMES) {
    describe(model, () => {
      const exp = EXPECT[model];
      const file = GGUFFile.open(fixture(model));
      const shard = file.shards[0];

      it("has the expected header and general metadata", () => {
        assert.equal(file.shards.length, 1);
        assert.equal(shard.version, 3);
        assert.equal(shard.alignment, 32);
        assert.equal(shard.fileSize, statSync(fixture(model)).size);
        assert.equal(file.metadata.requireString("general.architecture"), exp.arch);
        assert.equal(file.metadata.requireString("general.name"), exp.name);
        assert.equal(file.metadata.requireInteger("general.file_type"), exp.fileType);
        assert.equal(file.metadata.entries.get("general.architecture")!.type, GGUFValueType.STRING);
      });

      it("has the README's hyper-parameters", () => {
        for (const [k, v] of Object.entries(exp.hp)) {
          const key = `${exp.arch}.${k}`;
          const got = scalarOf(file.metadata.raw(key));
          if (typeof v === "number" && !Number.isInteger(v)) assert.equal(got, Math.fround(v), key);
          else assert.equal(got, v, key);
        }
        assert.equal(
          file.metadata.entries.get(`${exp.arch}.attention.layer_norm_rms_epsilon`)!.type,
          GGUFValueType.FLOAT32,
        );
        assert.equal(file.metadata.number(`${exp.arch}.attention.layer_norm_rms_epsilon`), Math.fround(1e-6));
      });

      it("has the tokenizer described in the README", () => {
        const tokens = file.metadata.stringArray("tokenizer.ggml.tokens")!;
        assert.equal(tokens.length, 300);
        assert.equal(tokens[0], "<｜begin▁of▁sentence｜>");
        assert.equal(tokens[1], "<｜end▁of▁sentence｜>");
        assert.equal(file.metadata.stringArray("tokenizer.ggml.merges")!.length, 42);
        assert.equal(file.metadata.requireString("tokenizer.ggml.model"), "gpt2");
        assert.equal(
          file.metadata.requireString("tokenizer.ggml.pre"),
          exp.arch === "glm-dsa" ? "glm4" : "deepseek-v3",
        );
        assert.equal(file.metadata.requireInteger("tokenizer.ggml.bos_token_id"), 0);
        assert.equal(file.metadata.requireInteger("tokenizer.ggml.eos_token_id"), 1);
        assert.equal(file.metadata.bool("tokenizer.ggml.add_bos_token"), true);
        const types = file.metadata.array("tokenizer.ggml.token_type")!;
        assert.equal(types.elementType, GGUFValueType.INT32);
        assert.deepEqual([...types.values.slice(0, 3)], [3, 3, 1]);
      });

      it("has tensors of the expected types, shapes and layout", () => {
        const counts: Record<string, number> = {};
        for (const t of file.tensors.values()) counts[typeName(t.type)] = (counts[typeName(t.type)] ?? 0) + 1;
        assert.deepEqual(counts, exp.tensors);

        const E = file.metadata.requireInteger(`${exp.arch}.embedding_length`);
        assert.deepEqual(file.tensor("token_embd.weight").ne, [E, 300]);
        assert.deepEqual(file.tensor("output.weight").ne, [E, 300]);
        assert.deepEqual(file.tensor("output_norm.weight").ne, [E]);
        assert.equal(file.tensor("output_norm.weight").type, GGMLType.F32);
        const X = file.metadata.requireInteger(`${exp.arch}.expert_count`);
        const Fe = file.metadata.requireInteger(`${exp.arch}.expert_feed_forward_length`);
        const lead = file.metadata.requireInteger(`${exp.arch}.leading_dense_block_count`);
        assert.deepEqual(file.tensor(`blk.${lead}.ffn_gate_exps.weight`).ne, [E, Fe, X]);
        assert.deepEqual(file.tensor(`blk.${lead}.ffn_down_exps.weight`).ne, [Fe, E, X]);
        assert.deepEqual(file.tensor(`blk.${lead}.ffn_gate_inp.weight`).ne, [E, X]);
        if (model === "ds2-lite") assert.ok(file.tensors.has("blk.0.attn_q.weight"));
        else assert.ok(file.tensors.has("blk.0.attn_q_a.weight"));
        if (model === "ds2-v3-mixed-q") {
          assert.equal(file.tensor("token_embd.weight").type, GGMLType.Q4_K);
          assert.equal(file.tensor("output.weight").type, GGMLType.Q6_K);
          assert.equal(file.tensor("blk.0.attn_k_b.weight").type, GGMLType.Q8_0);
          assert.equal(file.tensor("blk.1.ffn_gate_inp.weight").type, GGMLType.F32);
        }

        // Offsets: aligned, in file order, packed with only alignment padding, the last one ending at the end of the file.
        let expectOffset = 0;
        for (const t of shard.tensors) {
          const tr = typeTraits(t.type)!;
          assert.equal(t.nbytes, (t.ne.reduce((a, b) => a * b, 1) / tr.blockSize) * tr.typeSize, t.name);
          assert.equal(t.relativeOffset, expectOffset, t.name);
          assert.equal(t.offset, shard.dataOffset + t.relativeOffset);
          assert.equal(t.relativeOffset % 32, 0);
          expectOffset = t.relativeOffset + t.nbytes;
          expectOffset += (32 - (expectOffset % 32)) % 32;
        }
        assert.equal(shard.dataOffset + expectOffset, shard.fileSize);
        assert.equal(shard.dataOffset % 32, 0);
      });

      it("reads tensor bytes and sub-ranges", () => {
        const t = file.tensor("output_norm.weight");
        const all = file.readBytes(t);
        assert.equal(all.length, t.nbytes);
        const f = new Float32Array(all.buffer, all.byteOffset, all.length / 4);
        // norms are 1 + 0.1·N(0,1)
        const mean = f.reduce((a, b) => a + b, 0) / f.length;
        assert.ok(mean > 0.9 && mean < 1.1, `mean ${mean}`);
        assert.deepEqual(file.readBytes(t, 8, 16), all.subarray(8, 24));
        assert.equal(file.readBytes(t, t.nbytes, 0).length, 0);
        file.close();
      });
    });
  }
});

describe("agreement with node-llama-cpp's GGUF parser", () => {
  for (const model of MODEL_NAMES) {
    it(model, async () => {
      const { readGgufFileInfo } = await import("node-llama-cpp");
      const theirs = await readGgufFileInfo(fixture(model), { logWarnings: false });
      const ours = readShard(fixture(model));
      // node-llama-cpp nests metadata by dotted key; flatten it.
      const flat = new Map<string, unknown>();
      const walk = (prefix: string, o: unknown): void => {
        if (o !== null && typeof o === "object" && !Array.isArray(o)) {
          for (const [k, v] of Object.entries(o as Record<string, unknown>))
            walk(prefix === "" ? k : `${prefix}.${k}`, v);
        } else flat.set(prefix, o);
      };
      walk("", theirs.metadata);
      assert.deepEqual([...flat.keys()].sort(), [...ours.metadata.keys()].sort());
      for (const [k, e] of ours.metadata) {
        const v = isGGUFArray(e.value) ? (plainValue(e.value) as { values: unknown }).values : e.value;
        assert.deepEqual(v, flat.get(k), k);
      }
      const ti = theirs.tensorInfo!;
      assert.equal(ti.length, ours.tensors.length);
      ti.forEach((t, i) => {
        const o = ours.tensors[i];
        assert.equal(o.name, t.name);
        assert.deepEqual(o.ne, t.dimensions.map(Number));
        assert.equal(o.type, t.ggmlType);
        assert.equal(o.relativeOffset, Number(t.offset));
        assert.equal(o.offset, Number(t.fileOffset));
      });
    });
  }
});
