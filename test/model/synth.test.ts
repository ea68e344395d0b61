import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { tensorBytes } from "../../src/gguf/writer.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { dequantize } from "../../src/quant/index.js";
import { preset, PRESET_NAMES, validateConfig, withOverrides, type SynthConfig } from "../../src/synth/presets.js";
import { planTensors, synthesize, tensorSpecs } from "../../src/synth/synthesize.js";
import { fillRandom, RANDOM_TYPES, Rng } from "../../src/synth/random-blocks.js";
import { synthTokenizer } from "../../src/synth/tokenizer.js";
import { fallbackType } from "../../src/synth/types.js";
import { synthCommand } from "../../src/cli/synth.js";

const ORACLE = new URL("../helpers/oracle-logprobs.mjs", import.meta.url).pathname;

function tmp(): { dir: string; done: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "latent-synth-test-"));
  return { dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The reference's shape table (mla-models.md §3), written out independently of tensorSpecs. */
function expectedShapes(c: SynthConfig, legacy: boolean): Map<string, number[]> {
  const E = c.n_embd,
    H = c.n_head,
    P = c.nope,
    R = c.rope,
    V = c.v_head,
    L = c.kv_lora,
    Lq = c.q_lora;
  const X = c.n_expert,
    F = c.n_ff_exp,
    S = c.n_shared;
  const m = new Map<string, number[]>([
    ["token_embd.weight", [E, c.n_vocab]],
    ["output_norm.weight", [E]],
    ["output.weight", [E, c.n_vocab]],
  ]);
  for (let i = 0; i < c.n_layer + c.nextn; i++) {
    const b = `blk.${i}.`;
    m.set(b + "attn_norm.weight", [E]);
    if (Lq > 0) {
      m.set(b + "attn_q_a.weight", [E, Lq]);
      m.set(b + "attn_q_a_norm.weight", [Lq]);
      m.set(b + "attn_q_b.weight", [Lq, H * (P + R)]);
    } else m.set(b + "attn_q.weight", [E, H * (P + R)]);
    m.set(b + "attn_kv_a_mqa.weight", [E, L + R]);
    m.set(b + "attn_kv_a_norm.weight", [L]);
    if (legacy) m.set(b + "attn_kv_b.weight", [L, H * (P + V)]);
    else {
      m.set(b + "attn_k_b.weight", [P, L, H]);
      m.set(b + "attn_v_b.weight", [L, V, H]);
    }
    m.set(b + "attn_output.weight", [H * V, E]);
    m.set(b + "ffn_norm.weight", [E]);
    if (c.indexer) {
      const { heads, dim } = c.indexer;
      m.set(b + "indexer.k_norm.weight", [dim]);
      m.set(b + "indexer.k_norm.bias", [dim]);
      m.set(b + "indexer.proj.weight", [E, heads]);
      m.set(b + "indexer.attn_k.weight", [E, dim]);
      m.set(b + "indexer.attn_q_b.weight", [Lq, heads * dim]);
    }
    if (i < c.n_dense) {
      m.set(b + "ffn_gate.weight", [E, c.n_ff]);
      m.set(b + "ffn_up.weight", [E, c.n_ff]);
      m.set(b + "ffn_down.weight", [c.n_ff, E]);
    } else {
      m.set(b + "ffn_gate_inp.weight", [E, X]);
      if (c.exp_bias) m.set(b + "exp_probs_b.bias", [X]);
      m.set(b + "ffn_gate_exps.weight", [E, F, X]);
      m.set(b + "ffn_up_exps.weight", [E, F, X]);
      m.set(b + "ffn_down_exps.weight", [F, E, X]);
      if (S > 0) {
        m.set(b + "ffn_gate_shexp.weight", [E, F * S]);
        m.set(b + "ffn_up_shexp.weight", [E, F * S]);
        m.set(b + "ffn_down_shexp.weight", [F * S, E]);
      }
    }
    if (i >= c.n_layer) {
      m.set(b + "nextn.eh_proj.weight", [2 * E, E]);
      for (const n of ["enorm", "hnorm", "shared_head_norm"]) m.set(`${b}nextn.${n}.weight`, [E]);
    }
  }
  return m;
}

const REQUIRED_KEYS = [
  "context_length",
  "embedding_length",
  "block_count",
  "feed_forward_length",
  "attention.head_count",
  "attention.head_count_kv",
  "attention.key_length",
  "attention.value_length",
  "attention.layer_norm_rms_epsilon",
  "attention.q_lora_rank",
  "attention.kv_lora_rank",
  "rope.dimension_count",
  "rope.freq_base",
  "leading_dense_block_count",
  "expert_feed_forward_length",
  "expert_count",
  "expert_used_count",
  "expert_shared_count",
  "expert_weights_scale",
  "expert_weights_norm",
  "expert_gating_func",
  "vocab_size",
];

function checkFile(paths: string[], cfg: SynthConfig, legacy: boolean): GGUFFile {
  const f = GGUFFile.open(paths[0]);
  const want = expectedShapes(cfg, legacy);
  assert.deepEqual([...f.tensors.keys()].sort(), [...want.keys()].sort());
  for (const [name, ne] of want) assert.deepEqual([...f.tensor(name).ne], ne, name);
  const a = cfg.arch;
  const md = f.metadata;
  assert.equal(md.string("general.architecture"), a);
  for (const k of REQUIRED_KEYS) assert.ok(md.has(`${a}.${k}`), `missing ${a}.${k}`);
  for (const k of ["model", "pre", "tokens", "token_type", "merges", "bos_token_id", "eos_token_id"])
    assert.ok(md.has(`tokenizer.ggml.${k}`), k);
  assert.ok(md.has("tokenizer.chat_template"));
  assert.equal(md.integer(`${a}.block_count`), cfg.n_layer + cfg.nextn);
  assert.equal(md.stringArray("tokenizer.ggml.tokens")!.length, cfg.n_vocab);
  if (legacy) {
    assert.equal(md.integer(`${a}.attention.head_count_kv`), cfg.n_head);
    assert.equal(md.integer(`${a}.attention.key_length`), cfg.nope + cfg.rope);
    assert.equal(md.integer(`${a}.attention.value_length`), cfg.v_head);
    assert.ok(!md.has(`${a}.attention.key_length_mla`) && !md.has(`${a}.attention.value_length_mla`));
  } else {
    assert.equal(md.integer(`${a}.attention.head_count_kv`), 1);
    assert.equal(md.integer(`${a}.attention.key_length`), cfg.kv_lora + cfg.rope);
    assert.equal(md.integer(`${a}.attention.value_length`), cfg.kv_lora);
    assert.equal(md.integer(`${a}.attention.key_length_mla`), cfg.nope + cfg.rope);
    assert.equal(md.integer(`${a}.attention.value_length_mla`), cfg.v_head);
  }
  if (a === "glm-dsa") {
    for (const k of ["head_count", "key_length", "top_k"]) assert.ok(md.has(`glm-dsa.attention.indexer.${k}`), k);
    assert.equal(md.integer("glm-dsa.nextn_predict_layers"), cfg.nextn);
  }
  return f;
}

/** llama.cpp evaluates the tokens; returns its log-prob rows. */
function llamaLogprobs(path: string, tokens: number[]): (number | null)[][] {
  const out = execFileSync(process.execPath, [ORACLE, path, "--tokens", tokens.join(","), "--quiet", "--digits", "6"], {
    encoding: "utf8",
    timeout: 120_000,
    maxBuffer: 1 << 28,
  });
  return (JSON.parse(out) as { cases: { logprobs: (number | null)[][] }[] }).cases[0].logprobs;
}

function assertFiniteRows(rows: (number | null)[][], nVocab: number, label: string): void {
  for (const row of rows) {
    assert.equal(row.length, nVocab, label);
    for (const v of row) assert.ok(v !== null && Number.isFinite(v) && v <= 0, `${label}: log-prob ${String(v)}`);
  }
}

test("tiny presets (both arches, both generations) write the reference shapes and keys", () => {
  const t = tmp();
  try {
    for (const [arch, legacy] of [
      ["deepseek2", false],
      ["deepseek2", true],
      ["glm-dsa", false],
    ] as const) {
      const cfg = preset("tiny", arch);
      const paths = synthesize(cfg, { out: join(t.dir, `${arch}-${legacy}.gguf`), legacyKvB: legacy });
      assert.equal(paths.length, 1);
      const f = checkFile(paths, cfg, legacy);
      for (const info of f.tensors.values()) assert.equal(info.type, GGMLType.F32, info.name);
      f.close();
    }
  } finally {
    t.done();
  }
});

test("every preset plans the reference shapes; small ones (layers 1–2) are written and re-read", () => {
  const t = tmp();
  try {
    for (const name of PRESET_NAMES) {
      for (const layers of [1, 2]) {
        const cfg = withOverrides(preset(name), { n_layer: layers });
        validateConfig(cfg);
        assert.ok(cfg.n_dense < cfg.n_layer, `${name}: an MoE layer is kept`);
        const plan = planTensors(cfg, { type: "Q4_K_M" });
        const want = expectedShapes(cfg, false);
        assert.deepEqual(plan.map((p) => p.name).sort(), [...want.keys()].sort(), name);
        for (const p of plan) assert.deepEqual([...p.ne], want.get(p.name), `${name} ${p.name}`);
        const legacyPlan = cfg.arch === "deepseek2" ? tensorSpecs(cfg, true) : [];
        for (const p of legacyPlan)
          assert.deepEqual([...p.ne], expectedShapes(cfg, true).get(p.name), `${name} legacy ${p.name}`);
      }
    }
    // real-shape deepseek2 / glm-dsa layers with a small vocabulary are quick to write
    for (const name of ["v2-lite", "glm47-flash"]) {
      const cfg = withOverrides(preset(name), { n_layer: 1, n_vocab: 1000 });
      const paths = synthesize(cfg, { out: join(t.dir, `${name}.gguf`), type: "Q4_K_M" });
      checkFile(paths, cfg, false).close();
    }
  } finally {
    t.done();
  }
});

test("preset hyper-parameters match the reference configurations", () => {
  const v2 = preset("v2-lite"),
    v3 = preset("v3"),
    fl = preset("glm47-flash"),
    g5 = preset("glm5");
  assert.deepEqual(
    [
      v2.n_layer,
      v2.n_embd,
      v2.n_head,
      v2.q_lora,
      v2.kv_lora,
      v2.nope,
      v2.rope,
      v2.v_head,
      v2.n_expert,
      v2.n_used,
      v2.n_shared,
      v2.n_ff_exp,
      v2.n_ff,
      v2.n_vocab,
    ],
    [27, 2048, 16, 0, 512, 128, 64, 128, 64, 6, 2, 1408, 10944, 102400],
  );
  assert.deepEqual(
    [
      v3.n_layer,
      v3.n_embd,
      v3.n_head,
      v3.q_lora,
      v3.n_expert,
      v3.n_used,
      v3.n_dense,
      v3.groups,
      v3.groups_used,
      v3.n_vocab,
      v3.gating,
    ],
    [61, 7168, 128, 1536, 256, 8, 3, 8, 4, 129280, "sigmoid"],
  );
  assert.deepEqual(
    [
      fl.arch,
      fl.n_layer,
      fl.n_head,
      fl.q_lora,
      fl.nope,
      fl.v_head,
      fl.n_expert,
      fl.n_used,
      fl.w_scale,
      fl.n_vocab,
      fl.pre,
    ],
    ["deepseek2", 47, 20, 768, 192, 256, 64, 4, 1.8, 154880, "glm4"],
  );
  assert.deepEqual(
    [
      g5.arch,
      g5.n_layer,
      g5.nextn,
      g5.n_embd,
      g5.n_head,
      g5.q_lora,
      g5.indexer?.heads,
      g5.indexer?.dim,
      g5.indexer?.top_k,
    ],
    ["glm-dsa", 78, 1, 6144, 64, 2048, 32, 128, 2048],
  );
  assert.equal(preset("v2-lite").pre, "deepseek-llm");
  assert.equal(preset("v3").pre, "deepseek-v3");
  assert.throws(() => preset("v3", "glm-dsa"), /deepseek2/);
  assert.throws(() => preset("nope"), /unknown preset/);
});

test("invalid configs are rejected with the field named", () => {
  const base = preset("tiny");
  const cases: [Partial<SynthConfig>, RegExp][] = [
    [{ n_used: 9 }, /n_used/],
    [{ rope: 7 }, /rope/],
    [{ n_embd: 0 }, /n_embd/],
    [{ groups: 3 }, /groups/],
    [{ n_dense: 5 }, /n_dense/],
    [{ indexer: { heads: 4, dim: 64, top_k: 8 } }, /indexer/],
    [{ nextn: 1 }, /nextn/],
    [{ gating: "relu" as "softmax" }, /gating/],
    [{ yarn: { factor: Number.NaN, orig_ctx: 4096, mscale_all_dim: 1 } }, /yarn\.factor/],
    [{ n_vocab: 100 }, /n_vocab/],
  ];
  for (const [over, re] of cases) assert.throws(() => planTensors({ ...base, ...over }), re, JSON.stringify(over));
  const glm = preset("tiny", "glm-dsa");
  assert.throws(() => planTensors({ ...glm, indexer: { heads: 4, dim: 96, top_k: 8 } }), /indexer\.dim/);
  assert.throws(() => planTensors({ ...glm, q_lora: 0 }), /q_lora/);
  assert.throws(() => planTensors(glm, { legacyKvB: true }), /legacy/);
  assert.throws(() => planTensors(base, { type: "Q9_K" }), /unknown --type/);
});

test("odd configs (no q-LoRA, V ≠ P, odd dims, no shared expert) write and re-read", () => {
  const t = tmp();
  try {
    const cfg = withOverrides(preset("tiny"), {
      q_lora: 0,
      n_head: 3,
      n_embd: 40,
      kv_lora: 24,
      nope: 12,
      rope: 6,
      v_head: 20,
      n_ff: 56,
      n_ff_exp: 24,
      n_expert: 6,
      n_used: 2,
      n_shared: 0,
      groups: 0,
      groups_used: 0,
      exp_bias: false,
      gating: "softmax",
      yarn: null,
      n_vocab: 300,
    });
    for (const type of ["F32", "Q4_K_M", "Q8_0"]) {
      const paths = synthesize(cfg, { out: join(t.dir, `odd-${type}.gguf`), type });
      checkFile(paths, cfg, false).close();
    }
  } finally {
    t.done();
  }
});

test("llama.cpp's fallbacks and mix rules pick the per-tensor types", () => {
  assert.equal(fallbackType(GGMLType.Q4_K, 128), GGMLType.Q5_0);
  assert.equal(fallbackType(GGMLType.Q5_K, 1408), GGMLType.Q5_1);
  assert.equal(fallbackType(GGMLType.Q6_K, 192), GGMLType.Q8_0);
  assert.equal(fallbackType(GGMLType.IQ4_XS, 96), GGMLType.IQ4_NL);
  assert.equal(fallbackType(GGMLType.Q2_K, 64), GGMLType.Q4_0);
  assert.equal(fallbackType(GGMLType.Q3_K, 24), GGMLType.F16);
  assert.equal(fallbackType(GGMLType.Q8_0, 48), GGMLType.F16);
  assert.equal(fallbackType(GGMLType.Q4_K, 512), GGMLType.Q4_K);

  const types = (cfg: SynthConfig, type: string, legacyKvB = false): Map<string, string> =>
    new Map(planTensors(cfg, { type, legacyKvB }).map((p) => [p.name, typeName(p.type)]));
  // V2-Lite Q4_K_M: k_b (ne0 = 128) → Q5_0, FFNs of 1408 / 10944 → Q5_0 or (ffn_down, more bits) Q8_0, output Q6_K
  const v2 = types(withOverrides(preset("v2-lite"), { n_layer: 27 }), "Q4_K_M");
  assert.equal(v2.get("token_embd.weight"), "Q4_K");
  assert.equal(v2.get("output.weight"), "Q6_K");
  assert.equal(v2.get("blk.0.attn_q.weight"), "Q4_K");
  assert.equal(v2.get("blk.0.attn_k_b.weight"), "Q5_0");
  assert.equal(v2.get("blk.0.attn_v_b.weight"), "Q4_K");
  assert.equal(v2.get("blk.0.ffn_down.weight"), "Q8_0"); // use_more_bits(0) → Q6_K → 10944 % 256 → Q8_0
  assert.equal(v2.get("blk.0.ffn_up.weight"), "Q4_K"); // ne0 = n_embd
  assert.equal(v2.get("blk.5.ffn_down_exps.weight"), "Q8_0"); // (5 − 3) % 3 == 2 → more bits
  assert.equal(v2.get("blk.4.ffn_down_exps.weight"), "Q5_0");
  assert.equal(v2.get("blk.4.ffn_gate_exps.weight"), "Q4_K");
  assert.equal(v2.get("blk.4.ffn_gate_inp.weight"), "F32");
  assert.equal(v2.get("blk.4.attn_norm.weight"), "F32");
  // legacy kv_b is attention-v-like: Q6_K for the more-bits layers
  const leg = types(withOverrides(preset("v2-lite"), { n_layer: 27 }), "Q4_K_M", true);
  assert.equal(leg.get("blk.0.attn_kv_b.weight"), "Q6_K");
  assert.equal(leg.get("blk.4.attn_kv_b.weight"), "Q4_K");
  // tiny (8 experts, odd dims): output ne0 64 → Q8_0, k_b ne0 24 → F16, attn_output Q5_K (8 experts) → 80 → F16
  const tiny = types(preset("tiny"), "Q4_K_M");
  assert.equal(tiny.get("output.weight"), "Q8_0");
  assert.equal(tiny.get("token_embd.weight"), "Q5_0");
  assert.equal(tiny.get("blk.0.attn_k_b.weight"), "F16");
  assert.equal(tiny.get("blk.0.attn_output.weight"), "F16");
  assert.equal(tiny.get("blk.1.exp_probs_b.bias"), "F32");
  // GLM-5: indexer.proj stays F32 (converter), the MTP layer is quantized like a layer
  const g5 = types(withOverrides(preset("glm5"), { n_layer: 2 }), "Q4_K_M");
  assert.equal(g5.get("blk.0.indexer.proj.weight"), "F32");
  assert.equal(g5.get("blk.0.indexer.attn_k.weight"), "Q4_K");
  assert.equal(g5.get("blk.2.nextn.eh_proj.weight"), "Q4_K");
  assert.equal(g5.get("blk.0.attn_k_b.weight"), "Q5_0");
  // F16: matrices F16, router / norms / biases F32
  const f16 = types(preset("tiny"), "F16");
  assert.equal(f16.get("blk.1.ffn_gate_exps.weight"), "F16");
  assert.equal(f16.get("blk.1.ffn_gate_inp.weight"), "F32");
  // pure: no mix rules
  const pure = new Map(
    planTensors(withOverrides(preset("v2-lite"), { n_layer: 2 }), { type: "Q4_K_M", pure: true }).map((p) => [
      p.name,
      typeName(p.type),
    ]),
  );
  assert.equal(pure.get("output.weight"), "Q4_K");
  assert.equal(pure.get("blk.0.ffn_down.weight"), "Q5_0");
});

test("random blocks decode to the target std with zero mean and no NaN/Inf, for every type", () => {
  const rng = new Rng(7, "blocks");
  const n = 256 * 64;
  for (const type of RANDOM_TYPES) {
    for (const std of [1, 0.02, 1 / Math.sqrt(18432)]) {
      const bytes = new Uint8Array(tensorBytes([n], type));
      fillRandom(type, bytes, n, std, rng);
      const x = dequantize(type, bytes, n);
      let s = 0,
        s2 = 0;
      for (const v of x) {
        assert.ok(Number.isFinite(v), `${typeName(type)}: ${v}`);
        s += v;
        s2 += v * v;
      }
      const mean = s / n;
      const sd = Math.sqrt(s2 / n - mean * mean);
      assert.ok(sd > std / 1.15 && sd < std * 1.15, `${typeName(type)} std ${sd} vs ${std}`);
      assert.ok(Math.abs(mean) < 0.05 * std, `${typeName(type)} mean ${mean} vs std ${std}`);
    }
  }
});

test("matrices of a synthesized file have std ≈ 1/√fan_in after dequantization", () => {
  const t = tmp();
  try {
    const cfg = withOverrides(preset("tiny"), { n_embd: 256, n_ff: 512, n_ff_exp: 256, q_lora: 256, kv_lora: 256 });
    for (const type of ["Q4_K_M", "Q2_K", "IQ4_XS", "Q6_K", "BF16"]) {
      const [path] = synthesize(cfg, { out: join(t.dir, `${type}.gguf`), type, seed: 3 });
      const f = GGUFFile.open(path!);
      for (const info of f.tensors.values()) {
        const n = info.ne.reduce((a, b) => a * b, 1);
        const x = dequantize(info.type, f.readBytes(info), n);
        let s2 = 0;
        for (const v of x) s2 += v * v;
        const rms = Math.sqrt(s2 / n);
        const want =
          info.name.endsWith("_norm.weight") || info.name.includes("norm.weight")
            ? Math.sqrt(1.01)
            : info.name.endsWith(".bias")
              ? 0.1
              : info.name === "token_embd.weight"
                ? 1
                : info.name === "output.weight" || info.name.includes("ffn_gate_inp")
                  ? 2 / Math.sqrt(256)
                  : 1 / Math.sqrt(info.ne[0]);
        assert.ok(
          rms > want / 1.5 && rms < want * 1.5,
          `${type} ${info.name} (${typeName(info.type)}): rms ${rms} vs ${want}`,
        );
      }
      f.close();
    }
  } finally {
    t.done();
  }
});

test("same seed → byte-identical file, different seed → different weights; split shards hold the same tensors", () => {
  const t = tmp();
  try {
    const cfg = preset("tiny", "glm-dsa");
    const a = synthesize(cfg, { out: join(t.dir, "a.gguf"), seed: 5, type: "Q4_K_M" });
    const b = synthesize(cfg, { out: join(t.dir, "b.gguf"), seed: 5, type: "Q4_K_M" });
    const c = synthesize(cfg, { out: join(t.dir, "c.gguf"), seed: 6, type: "Q4_K_M" });
    assert.ok(readFileSync(a[0]).equals(readFileSync(b[0])));
    assert.ok(!readFileSync(a[0]).equals(readFileSync(c[0])));
    const shards = synthesize(cfg, { out: join(t.dir, "s.gguf"), seed: 5, type: "Q4_K_M", split: 3 });
    assert.equal(shards.length, 3);
    assert.deepEqual(
      readdirSync(t.dir)
        .filter((n) => n.startsWith("s-"))
        .sort(),
      ["s-00001-of-00003.gguf", "s-00002-of-00003.gguf", "s-00003-of-00003.gguf"],
    );
    const whole = GGUFFile.open(a[0]);
    const split = checkFile(shards, cfg, false);
    assert.equal(split.shards.length, 3);
    for (const [name, info] of whole.tensors) {
      const other = split.tensor(name);
      assert.equal(other.type, info.type, name);
      assert.ok(Buffer.from(split.readBytes(other)).equals(Buffer.from(whole.readBytes(info))), name);
    }
    whole.close();
    split.close();
  } finally {
    t.done();
  }
});

test("tokenizer: every merge makes a token, every merged token has its merge; 129280 tokens are quick", () => {
  for (const [n, pre] of [
    [400, "deepseek-v3"],
    [129280, "deepseek-v3"],
    [3000, "glm4"],
    [261, "deepseek-llm"],
  ] as const) {
    const t0 = performance.now();
    const tok = synthTokenizer(n, pre);
    const ms = performance.now() - t0;
    assert.ok(ms < 5000, `${n} tokens took ${ms} ms`);
    assert.equal(tok.tokens.length, n);
    assert.equal(tok.types.length, n);
    assert.equal(new Set(tok.tokens).size, n, "tokens are unique");
    const ids = new Map(tok.tokens.map((t, i) => [t, i]));
    const made = new Set<string>();
    for (const m of tok.merges) {
      const sp = m.indexOf(" ", 1);
      const [l, r] = [m.slice(0, sp), m.slice(sp + 1)];
      assert.ok(ids.has(l) && ids.has(r) && ids.has(l + r), m);
      assert.ok(ids.get(l)! < ids.get(l + r)! && ids.get(r)! < ids.get(l + r)!, `merge ${m} uses later tokens`);
      made.add(l + r);
    }
    const control = tok.types.filter((x) => x === 3).length;
    assert.equal(tok.merges.length, n - 256 - control);
    assert.equal(made.size, tok.merges.length);
    assert.equal(tok.types[tok.bos], 3);
    assert.equal(tok.types[tok.eos], 3);
  }
  const glm = synthTokenizer(300, "glm4");
  assert.deepEqual(
    [glm.tokens[glm.bos], glm.tokens[glm.eos], glm.tokens[glm.eot!], glm.tokens[glm.eom!]],
    ["[gMASK]", "<|endoftext|>", "<|user|>", "<|observation|>"],
  );
});

test("llama.cpp loads and runs the tiny presets (F32, Q8_0, Q4_K_M, K-quants at n_embd 256, legacy kv_b)", () => {
  const t = tmp();
  try {
    const big = { n_embd: 256, n_ff: 512, n_ff_exp: 256, q_lora: 256, kv_lora: 256 };
    const runs: [string, SynthConfig, string, boolean][] = [
      ["ds2-F32", preset("tiny"), "F32", false],
      ["ds2-Q8_0", preset("tiny"), "Q8_0", false],
      ["ds2-legacy", preset("tiny"), "F32", true],
      ["ds2-256-Q4_K_M", withOverrides(preset("tiny"), big), "Q4_K_M", false],
      ["glm-F32", preset("tiny", "glm-dsa"), "F32", false],
      ["glm-Q4_K_M", preset("tiny", "glm-dsa"), "Q4_K_M", false],
      ["glm-256-Q6_K", withOverrides(preset("tiny", "glm-dsa"), big), "Q6_K", false],
    ];
    for (const [label, cfg, type, legacyKvB] of runs) {
      const [path] = synthesize(cfg, { out: join(t.dir, `${label}.gguf`), type, legacyKvB, seed: 11 });
      const bos = synthTokenizer(cfg.n_vocab, cfg.pre).bos;
      const rows = llamaLogprobs(path!, [bos, 300, 17, 42, 99, 250, 5, 380]);
      assert.equal(rows.length, 8);
      assertFiniteRows(rows, cfg.n_vocab, label);
    }
  } finally {
    t.done();
  }
});

test("latent synth CLI writes a model", async () => {
  const t = tmp();
  try {
    const out = join(t.dir, "cli.gguf");
    await synthCommand.run([
      "--preset",
      "tiny",
      "--arch",
      "glm-dsa",
      "--layers",
      "1",
      "--type",
      "Q8_0",
      "--seed",
      "3",
      "--set",
      "n_vocab=300",
      "-o",
      out,
    ]);
    const f = GGUFFile.open(out);
    assert.equal(f.metadata.integer("glm-dsa.block_count"), 2);
    assert.equal(f.metadata.integer("general.file_type"), 7);
    assert.equal(f.metadata.stringArray("tokenizer.ggml.tokens")!.length, 300);
    f.close();
    await assert.rejects(synthCommand.run(["--preset", "tiny", "--type", "Q9", "-o", out]), /unknown --type/);
    await assert.rejects(synthCommand.run(["--preset", "v3", "--layers", "0", "-o", out]), /--layers/);
  } finally {
    t.done();
  }
});
