/**
 * Writes a DeepSeek-V2-Lite-shaped FP8 checkpoint (F8_E4M3 weights + F32 weight_scale_inv per 128×128 block, BF16
 * embeddings, head, router and norms) of random values, tensor by tensor in 16 MB pieces: never more than one piece in
 * memory, so checkpoints of many GB can be made on a small machine to measure `latent convert`'s peak memory.
 *   npx tsx bench/fp8-checkpoint.ts OUT_DIR [--layers N]
 *   /usr/bin/time -v node bin/latent.mjs convert OUT_DIR -o out.gguf --type Q8_0
 * The tokenizer is the demo model's (vocabulary 4096).
 */
import { closeSync, copyFileSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { DEMO_MODEL } from "../src/cli/demo.js";
import { E4M3_TABLE } from "../src/convert/fp8.js";
import { DEMO_HF_CONFIG, writeHfCheckpoint } from "../test/helpers/hf-checkpoint.js";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { layers: { type: "string" } } });
const out = positionals[0];
if (out === undefined) throw new Error("usage: bench/fp8-checkpoint.ts OUT_DIR [--layers N]");
const layers = Number(values.layers ?? 4);
// DeepSeek-V2-Lite's shapes (no q-LoRA, 64 experts of 1408, 2 shared) with the demo tokenizer's vocabulary
const H = 2048;
const heads = 16;
const [P, R, V, L] = [128, 64, 128, 512];
const [E, Fe, shared, dense] = [64, 1408, 2, 10944];
const vocab = 4096;
const config = {
  ...DEMO_HF_CONFIG,
  hidden_size: H,
  num_attention_heads: heads,
  num_key_value_heads: heads,
  qk_nope_head_dim: P,
  qk_rope_head_dim: R,
  qk_head_dim: P + R,
  head_dim: R,
  v_head_dim: V,
  kv_lora_rank: L,
  q_lora_rank: null,
  intermediate_size: dense,
  moe_intermediate_size: Fe,
  n_routed_experts: E,
  n_shared_experts: shared,
  num_experts_per_tok: 6,
  first_k_dense_replace: 1,
  num_hidden_layers: layers,
  num_nextn_predict_layers: 0,
  vocab_size: vocab,
  quantization_config: {
    activation_scheme: "dynamic",
    fmt: "e4m3",
    quant_method: "fp8",
    weight_block_size: [128, 128],
  },
};

type Kind = "fp8" | "bf16-ones" | "bf16";
const tensors: { name: string; shape: number[]; kind: Kind }[] = [];
const fp8 = (name: string, shape: number[]): void => {
  tensors.push({ name, shape, kind: "fp8" });
  tensors.push({
    name: `${name}_scale_inv`,
    shape: [Math.ceil(shape[0] / 128), Math.ceil(shape[1] / 128)],
    kind: "fp8",
  });
};
tensors.push({ name: "model.embed_tokens.weight", shape: [vocab, H], kind: "bf16" });
tensors.push({ name: "lm_head.weight", shape: [vocab, H], kind: "bf16" });
tensors.push({ name: "model.norm.weight", shape: [H], kind: "bf16-ones" });
for (let il = 0; il < layers; il++) {
  const p = `model.layers.${il}.`;
  tensors.push({ name: `${p}input_layernorm.weight`, shape: [H], kind: "bf16-ones" });
  tensors.push({ name: `${p}post_attention_layernorm.weight`, shape: [H], kind: "bf16-ones" });
  tensors.push({ name: `${p}self_attn.kv_a_layernorm.weight`, shape: [L], kind: "bf16-ones" });
  fp8(`${p}self_attn.q_proj.weight`, [heads * (P + R), H]);
  fp8(`${p}self_attn.kv_a_proj_with_mqa.weight`, [L + R, H]);
  fp8(`${p}self_attn.kv_b_proj.weight`, [heads * (P + V), L]);
  fp8(`${p}self_attn.o_proj.weight`, [H, heads * V]);
  const mlp = (q: string, f: number): void => {
    fp8(`${q}gate_proj.weight`, [f, H]);
    fp8(`${q}up_proj.weight`, [f, H]);
    fp8(`${q}down_proj.weight`, [H, f]);
  };
  if (il === 0) mlp(`${p}mlp.`, dense);
  else {
    tensors.push({ name: `${p}mlp.gate.weight`, shape: [E, H], kind: "bf16" });
    for (let e = 0; e < E; e++) mlp(`${p}mlp.experts.${e}.`, Fe);
    mlp(`${p}mlp.shared_experts.`, Fe * shared);
  }
}
const dtypeOf = (t: (typeof tensors)[number]): string =>
  t.kind !== "fp8" ? "BF16" : t.name.endsWith("_scale_inv") ? "F32" : "F8_E4M3";
const SIZE: Record<string, number> = { BF16: 2, F32: 4, F8_E4M3: 1 };
const header: Record<string, unknown> = {};
let at = 0;
for (const t of tensors) {
  const n = t.shape.reduce((a, d) => a * d, 1) * SIZE[dtypeOf(t)];
  header[t.name] = { dtype: dtypeOf(t), shape: t.shape, data_offsets: [at, at + n] };
  at += n;
}
let json = JSON.stringify(header);
json += " ".repeat((8 - ((json.length + 8) % 8)) % 8);

// tokenizer files: the demo model's, from its BF16 export
mkdirSync(out, { recursive: true });
const tmp = mkdtempSync(join(tmpdir(), "latent-fp8-ckpt-"));
try {
  writeHfCheckpoint(DEMO_MODEL, tmp, { dtype: "BF16" });
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(tmp, f), join(out, f));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
writeFileSync(join(out, "config.json"), JSON.stringify(config, null, 2));

// E4M3 bytes of magnitude ≤ 2 (exponent ≤ 7), random sign; scales 1/64; BF16 values in ±1/32
const small = [...E4M3_TABLE.keys()].filter((b) => b < 0x80 && Math.abs(E4M3_TABLE[b]) <= 2);
let seed = 0x9e3779b9;
const next = (): number => {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return seed >>> 0;
};
const fd = openSync(join(out, "model.safetensors"), "w");
try {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, len);
  writeSync(fd, Buffer.from(json, "utf8"));
  const PIECE = 16 << 20;
  for (const t of tensors) {
    const dtype = dtypeOf(t);
    let left = t.shape.reduce((a, d) => a * d, 1);
    while (left > 0) {
      const n = Math.min(left, PIECE / SIZE[dtype]);
      const b = Buffer.alloc(n * SIZE[dtype]);
      if (dtype === "F8_E4M3") for (let i = 0; i < n; i++) b[i] = small[next() % small.length] | (next() & 0x80);
      else if (dtype === "F32") for (let i = 0; i < n; i++) b.writeFloatLE(1 / 64, i * 4);
      else if (t.kind === "bf16-ones") for (let i = 0; i < n; i++) b.writeUInt16LE(0x3f80, i * 2);
      else for (let i = 0; i < n; i++) b.writeUInt16LE(0x3c00 + (next() % 0x100) + (next() & 0x8000), i * 2);
      writeSync(fd, b);
      left -= n;
    }
  }
} finally {
  closeSync(fd);
}
console.log(`wrote ${out}: ${tensors.length} tensors, ${(at / 1e9).toFixed(2)} GB of weights, ${layers} layers`);
