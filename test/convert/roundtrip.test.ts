// latent convert by round trip: synth GGUF → HF checkpoint (test/convert/hf-export.ts) → convert → the same
// tensors, config, tokenizer and logits; plus quantized output types and clear errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync, readFileSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { parseConfig } from "../../src/model/config.js";
import { loadModel } from "../../src/runtime/load.js";
import { planTensors } from "../../src/synth/synthesize.js";
import { convertHf, ConvertError } from "../../src/convert/index.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { bf16ToF32, f32ToBF16 } from "../../src/quant/f16.js";
import { synthConfig, synthModel, randomTokens, type SynthCase } from "../helpers/synth.js";
import { exportHf, hfConfigOf, safetensorsBytes } from "./hf-export.js";

const CASES: SynthCase[] = [
  { label: "v3", base: "tiny", over: {} },
  {
    label: "v2-lite-softmax",
    base: "tiny",
    over: { q_lora: 0, gating: "softmax", w_norm: false, w_scale: 1, exp_bias: false, pre: "deepseek-llm", yarn: null },
  },
  { label: "glm47-flash-like", base: "tiny", over: { pre: "glm4", yarn: null, groups: 0, groups_used: 0 } },
  { label: "glm-dsa", base: "tiny-glm", over: {} },
];

function tmp(): { dir: string; done: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "latent-convert-"));
  return { dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

function tensorBytes(f: GGUFFile, name: string): Uint8Array {
  return f.readBytes(f.tensor(name));
}

const TOKENIZER_KEYS = [
  "tokenizer.ggml.model",
  "tokenizer.ggml.pre",
  "tokenizer.ggml.tokens",
  "tokenizer.ggml.token_type",
  "tokenizer.ggml.merges",
  "tokenizer.ggml.bos_token_id",
  "tokenizer.ggml.eos_token_id",
  "tokenizer.ggml.eot_token_id",
  "tokenizer.ggml.eom_token_id",
  "tokenizer.ggml.unknown_token_id",
  "tokenizer.ggml.padding_token_id",
  "tokenizer.ggml.add_bos_token",
  "tokenizer.chat_template",
];

for (const c of CASES) {
  test(`round trip ${c.label}: GGUF → HF (F32 safetensors) → latent convert --type F32 is the same model`, () => {
    const m = synthModel(c, 3);
    const t = tmp();
    try {
      const orig = GGUFFile.open(m.path);
      exportHf(orig, hfConfigOf(synthConfig(c)), join(t.dir, "hf"));
      const out = join(t.dir, "out.gguf");
      convertHf(join(t.dir, "hf"), out, { type: "F32" });
      const conv = GGUFFile.open(out);
      assert.deepEqual([...conv.tensors.keys()].sort(), [...orig.tensors.keys()].sort());
      for (const [name, info] of orig.tensors) {
        const ci = conv.tensor(name);
        assert.deepEqual([...ci.ne], [...info.ne], name);
        assert.equal(ci.type, info.type, name);
        assert.ok(Buffer.from(tensorBytes(conv, name)).equals(Buffer.from(tensorBytes(orig, name))), `${name} bytes`);
      }
      assert.deepEqual(parseConfig(conv.metadata), parseConfig(orig.metadata));
      for (const k of TOKENIZER_KEYS) assert.deepEqual(conv.metadata.raw(k), orig.metadata.raw(k), k);
      for (const k of orig.metadata.keys()) {
        if (k.startsWith("general.") || k.startsWith("tokenizer.")) continue;
        if (k.includes("expert_group")) continue; // synth omits group keys for groups 0; HF's default n_group is 1
        assert.deepEqual(conv.metadata.raw(k), orig.metadata.raw(k), k);
      }
      const toks = randomTokens(12, 5, 0, synthConfig(c).n_vocab);
      const a = evaluateAll(loadModel(m.path).model, toks, { path: "prefill" });
      const b = evaluateAll(loadModel(out).model, toks, { path: "prefill" });
      a.forEach((row, i) => assert.deepEqual(b[i], row));
    } finally {
      t.done();
      m.cleanup();
    }
  });
}

test("round trip: BF16 and F16 sources, fused transformers-5 experts, shards and [a, b] merges give the same file", () => {
  const c = CASES[0];
  const m = synthModel(c, 4);
  const t = tmp();
  try {
    const orig = GGUFFile.open(m.path);
    exportHf(orig, hfConfigOf(synthConfig(c)), join(t.dir, "plain"));
    exportHf(orig, hfConfigOf(synthConfig(c)), join(t.dir, "fused"), {
      fusedExperts: true,
      shardTensors: 7,
      pairMerges: true,
    });
    convertHf(join(t.dir, "plain"), join(t.dir, "plain.gguf"), { type: "F32", name: "m" });
    convertHf(join(t.dir, "fused"), join(t.dir, "fused.gguf"), { type: "F32", name: "m" });
    assert.ok(
      readFileSync(join(t.dir, "plain.gguf")).equals(readFileSync(join(t.dir, "fused.gguf"))),
      "fused + sharded + pair merges → identical GGUF",
    );

    exportHf(orig, hfConfigOf(synthConfig(c)), join(t.dir, "bf16"), { dtype: "BF16" });
    convertHf(join(t.dir, "bf16"), join(t.dir, "bf16.gguf"), { type: "F32" });
    const conv = GGUFFile.open(join(t.dir, "bf16.gguf"));
    const name = "blk.1.ffn_gate_exps.weight";
    const o = new Float32Array(tensorBytes(orig, name).slice().buffer);
    const v = new Float32Array(tensorBytes(conv, name).slice().buffer);
    for (let i = 0; i < o.length; i++) assert.equal(v[i], bf16ToF32(f32ToBF16(o[i])));

    exportHf(orig, hfConfigOf(synthConfig(c)), join(t.dir, "f16"), { dtype: "F16" });
    convertHf(join(t.dir, "f16"), join(t.dir, "f16.gguf"), { type: "F16" });
    const f16 = GGUFFile.open(join(t.dir, "f16.gguf"));
    assert.equal(f16.tensor("blk.1.attn_q_b.weight").type, GGMLType.F16);
    assert.equal(f16.tensor("blk.1.ffn_norm.weight").type, GGMLType.F32);
    assert.equal(f16.tensor("blk.1.ffn_gate_inp.weight").type, GGMLType.F32);
  } finally {
    t.done();
    m.cleanup();
  }
});

for (const type of ["Q8_0", "Q4_K_M"]) {
  test(`convert --type ${type}: llama-quantize's per-tensor types (as synth plans them) and a loadable model`, () => {
    const c: SynthCase = { label: "q", base: "tiny", over: { n_embd: 256, n_ff: 256, n_ff_exp: 256 } };
    const m = synthModel(c, 5);
    const t = tmp();
    try {
      exportHf(GGUFFile.open(m.path), hfConfigOf(synthConfig(c)), join(t.dir, "hf"));
      const res = convertHf(join(t.dir, "hf"), join(t.dir, "q.gguf"), { type });
      const want = new Map(planTensors(synthConfig(c), { type }).map((p) => [p.name, p.type]));
      for (const tt of res.tensors) assert.equal(typeName(tt.type), typeName(want.get(tt.name)!), tt.name);
      const f = GGUFFile.open(join(t.dir, "q.gguf"));
      assert.equal(f.metadata.raw("general.quantization_version"), 2);
      const toks = randomTokens(6, 2, 0, synthConfig(c).n_vocab);
      const a = evaluateAll(loadModel(m.path).model, toks, { path: "prefill" });
      const b = evaluateAll(loadModel(join(t.dir, "q.gguf")).model, toks, { path: "prefill" });
      let maxd = 0;
      let scale = 0;
      a.forEach((row, i) =>
        row.forEach((x, j) => ((maxd = Math.max(maxd, Math.abs(x - b[i][j]))), (scale = Math.max(scale, Math.abs(x))))),
      );
      assert.ok(maxd < 0.25 * scale, `${type}: max |Δlogit| ${maxd} vs max |logit| ${scale}`);
    } finally {
      t.done();
      m.cleanup();
    }
  });
}

test("convert errors: unsupported architecture, dtype, missing files, truncated safetensors", () => {
  const c = CASES[0];
  const m = synthModel(c, 6);
  const t = tmp();
  const hf = join(t.dir, "hf");
  const out = join(t.dir, "x.gguf");
  try {
    exportHf(GGUFFile.open(m.path), hfConfigOf(synthConfig(c)), hf);
    const cfg = JSON.parse(readFileSync(join(hf, "config.json"), "utf8")) as Record<string, unknown>;
    writeFileSync(
      join(hf, "config.json"),
      JSON.stringify({ ...cfg, architectures: ["LlamaForCausalLM"], model_type: "llama" }),
    );
    assert.throws(
      () => convertHf(hf, out),
      (e: Error) => e instanceof ConvertError && /unsupported architecture LlamaForCausalLM/.test(e.message),
    );
    writeFileSync(join(hf, "config.json"), JSON.stringify({ ...cfg, rope_scaling: { type: "linear", factor: 2 } }));
    assert.throws(() => convertHf(hf, out), /rope type "linear" is not supported/);
    writeFileSync(join(hf, "config.json"), JSON.stringify(cfg));

    const st = readFileSync(join(hf, "model.safetensors"));
    writeFileSync(join(hf, "model.safetensors"), st.subarray(0, st.length - 100));
    assert.throws(() => convertHf(hf, out), /ends past the end of the file/);
    writeFileSync(
      join(hf, "model.safetensors"),
      safetensorsBytes([{ name: "model.embed_tokens.weight", dtype: "F8_E4M3", shape: [4], data: new Uint8Array(4) }]),
    );
    assert.throws(() => convertHf(hf, out), /dtype F8_E4M3 needs its scale, "model.embed_tokens.weight_scale_inv"/);
    writeFileSync(
      join(hf, "model.safetensors"),
      safetensorsBytes([{ name: "model.embed_tokens.weight", dtype: "I32", shape: [4], data: new Uint8Array(16) }]),
    );
    assert.throws(() => convertHf(hf, out), /dtype I32 is not supported/);
    unlinkSync(join(hf, "model.safetensors"));
    assert.throws(() => convertHf(hf, out), /no model\.safetensors or model\.safetensors\.index\.json/);
    writeFileSync(join(hf, "model.safetensors"), st);
    unlinkSync(join(hf, "tokenizer.json"));
    assert.throws(() => convertHf(hf, out), /no tokenizer\.json/);
    unlinkSync(join(hf, "config.json"));
    assert.throws(() => convertHf(hf, out), /no config\.json/);
  } finally {
    t.done();
    m.cleanup();
  }
});
