// The bundled trained model (models/latent-demo-kjv.gguf) against the transformers run that trained it
// (fixtures from tools/train-demo/train.py) and against llama.cpp.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType } from "../../src/gguf/types.js";
import { loadModel } from "../../src/runtime/load.js";
import { convertHf } from "../../src/convert/index.js";
import { evaluateAll, logSoftmaxRow } from "../../src/engine/evaluate.js";
import { generateSync } from "../../src/engine/generate.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { DEMO_MODEL, DEMO_PROMPT, runDemo } from "../../src/cli/demo.js";
import { oracleLogprobs } from "../helpers/oracle.js";
import { exportHf } from "./hf-export.js";

const fixture = (name: string): unknown =>
  JSON.parse(readFileSync(new URL(`./fixtures/${name}`, import.meta.url), "utf8"));
interface ProbeRow {
  ids: number[];
  logits: number[];
}
interface Probe {
  text: string;
  tokens: number[];
  vocab: number;
  rows: ProbeRow[];
}
const PROBES = (fixture("demo-probe.json") as { probes: Probe[] }).probes;
const GREEDY = fixture("demo-greedy.json") as { prompt: string; prompt_ids: number[]; ids: number[]; text: string }[];
const TOK_CASES = fixture("demo-tokenizer-cases.json") as { text: string; ids: number[] }[];
const HF_CONFIG = fixture("demo-config.json") as Record<string, unknown>;

/** max |latent − transformers| over the fixture's logits. */
function maxDiff(rows: Float32Array[], p: Probe): number {
  let d = 0;
  p.rows.forEach((r, i) => r.ids.forEach((id, k) => (d = Math.max(d, Math.abs(rows[i][id] - r.logits[k])))));
  return d;
}

test("bundled model: a deepseek2 F16 file of 8.9 M parameters with the trained tokenizer", () => {
  const f = GGUFFile.open(DEMO_MODEL);
  assert.equal(f.metadata.raw("general.architecture"), "deepseek2");
  assert.equal(f.metadata.raw("tokenizer.ggml.pre"), "deepseek-v3");
  const params = [...f.tensors.values()].reduce((s, t) => s + t.ne.reduce((a, b) => a * b, 1), 0);
  assert.equal(params, 8894848 + 5 * 8); // transformers' parameter count + the 5 MoE layers' expert bias (a buffer there)
  assert.equal(f.tensor("blk.1.ffn_gate_exps.weight").type, GGMLType.F16);
  assert.equal(f.tensor("blk.1.exp_probs_b.bias").type, GGMLType.F32);
});

test("bundled model: latent's logits match transformers' fp32 logits ≤ 1e-3 (prefill and decode paths)", () => {
  const { model } = loadModel(DEMO_MODEL);
  for (const p of PROBES) {
    for (const path of ["prefill", "decode"] as const) {
      const d = maxDiff(evaluateAll(model, p.tokens, { path }), p);
      assert.ok(d <= 1e-3, `${path} "${p.text.slice(0, 20)}…": max |Δlogit| ${d}`);
    }
  }
});

test("bundled model: tokenizer = the trained HF tokenizer; greedy text = transformers' greedy text", () => {
  const f = GGUFFile.open(DEMO_MODEL);
  const tok = Tokenizer.fromMetadata(f.metadata);
  for (const c of TOK_CASES)
    assert.deepEqual(tok.encode(c.text, { addSpecial: false, parseSpecial: true }), c.ids, JSON.stringify(c.text));
  for (const p of PROBES) assert.deepEqual(tok.encode(p.text), p.tokens);
  const { model } = loadModel(DEMO_MODEL);
  for (const g of GREEDY) {
    assert.deepEqual(tok.encodePrompt(g.prompt), g.prompt_ids);
    const res = generateSync(model, tok, g.prompt_ids, { temperature: 0, maxTokens: g.ids.length });
    assert.deepEqual(res.tokens, g.ids, g.prompt);
    assert.equal(res.text, g.text);
  }
});

test("bundled model → HF checkpoint (bf16) → latent convert --type F32: logits ≤ 1e-3 of transformers; llama.cpp agrees ≤ 1e-4", () => {
  const dir = mkdtempSync(join(tmpdir(), "latent-demo-"));
  try {
    exportHf(GGUFFile.open(DEMO_MODEL), HF_CONFIG, join(dir, "hf"), { dtype: "BF16" });
    const out = join(dir, "demo-f32.gguf");
    convertHf(join(dir, "hf"), out, { type: "F32" });
    const { model } = loadModel(out);
    const seqs = PROBES.map((p) => p.tokens);
    const lc = oracleLogprobs(out, seqs);
    PROBES.forEach((p, k) => {
      const rows = evaluateAll(model, p.tokens, { path: "prefill" });
      const d = maxDiff(rows, p);
      assert.ok(d <= 1e-3, `F32 "${p.text.slice(0, 20)}…": max |Δlogit| vs transformers ${d}`);
      let dl = 0;
      rows.forEach((r, i) =>
        logSoftmaxRow(r).forEach((v, j) => {
          const o = lc[k][i][j];
          if (o !== null && o !== undefined) dl = Math.max(dl, Math.abs(v - o));
        }),
      );
      assert.ok(dl <= 1e-4, `F32 "${p.text.slice(0, 20)}…": max |Δlogprob| latent vs llama.cpp ${dl}`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("latent demo: streams the prompt and a greedy continuation, reports tokens/s", async () => {
  let out = "";
  let err = "";
  await runDemo(["-n", "12", "--greedy-only", "--backend", "reference"], {
    out: (t) => void (out += t),
    err: (t) => void (err += t),
    tty: false,
  });
  assert.match(out, /--- greedy ---/);
  const g = GREEDY[0];
  assert.equal(g.prompt, DEMO_PROMPT);
  const tok = Tokenizer.fromMetadata(GGUFFile.open(DEMO_MODEL).metadata);
  assert.ok(out.includes(DEMO_PROMPT + tok.decode(g.ids.slice(0, 12))), out);
  assert.match(err, /latent-demo-kjv — deepseek2, 8\.9 M parameters/);
  assert.match(err, /generation [\d.]+ tokens\/s/);
  await assert.rejects(
    runDemo(["--model", "/nonexistent.gguf"], { out: () => {}, err: () => {}, tty: false }),
    /model file not found/,
  );
});
