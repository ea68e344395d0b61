// `latent convert` from FP8 checkpoints: every output type straight from FP8 gives the bytes of quantizing the FP8
// weights' exact values (as the F32 conversion holds them) — no other rounding on the way; compressed-tensors block
// scales give the DeepSeek layout's file; per-channel scales are applied; the demo model round-tripped through FP8
// keeps its predictions within a measured tolerance.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL } from "../../src/cli/demo.js";
import { convertHf } from "../../src/convert/index.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { dequantize, quantize } from "../../src/quant/index.js";
import { FILE_TYPE_NAMES } from "../../src/synth/types.js";
import { loadModel } from "../../src/runtime/load.js";
import { logSoftmaxRow } from "../../src/engine/evaluate.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { writeHfCheckpoint } from "../helpers/hf-checkpoint.js";
import { synthConfig, synthModel } from "../helpers/synth.js";
import { hfConfigOf } from "./hf-export.js";

const dir = mkdtempSync(join(tmpdir(), "latent-fp8-types-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function values(f: GGUFFile, name: string): Float32Array {
  const t = f.tensor(name);
  return dequantize(
    t.type,
    f.readBytes(t),
    t.ne.reduce((a, b) => a * b, 1),
  );
}

// a small model of the real layout (q-LoRA, MoE with shared experts, dense lead) with 256-wide rows, so every
// K-quant applies to most matrices
const tinyCase = {
  label: "fp8-types",
  base: "tiny",
  over: {
    n_embd: 256,
    q_lora: 256,
    kv_lora: 256,
    nope: 32,
    rope: 16,
    v_head: 32,
    n_ff: 512,
    n_ff_exp: 256,
    n_expert: 4,
    n_used: 2,
    groups: 0,
    groups_used: 0,
  },
} as const;
const tiny = synthModel(tinyCase, 31);
after(tiny.cleanup);
const tinyHf = writeHfCheckpoint(tiny.path, join(dir, "tiny-fp8"), { dtype: "FP8" }, hfConfigOf(synthConfig(tinyCase)));
const tinyF32 = join(dir, "tiny-f32.gguf");
convertHf(tinyHf, tinyF32, { type: "F32" });

const TYPES = FILE_TYPE_NAMES.filter((n) => !["F32", "Q3_K", "Q4_K", "Q5_K"].includes(n));

test(`every output type straight from FP8 (${TYPES.join(", ")}) = quantizing the F32 conversion's values`, () => {
  const ref = GGUFFile.open(tinyF32);
  try {
    for (const type of TYPES) {
      const out = join(dir, `tiny-${type}.gguf`);
      const res = convertHf(tinyHf, out, { type });
      const f = GGUFFile.open(out);
      try {
        assert.equal(f.tensors.size, ref.tensors.size, type);
        const used = new Set<string>();
        for (const [name, t] of f.tensors) {
          used.add(typeName(t.type));
          const want =
            t.type === GGMLType.F32 ? f32Bytes(values(ref, name)) : quantize(t.type, values(ref, name), t.ne[0]);
          assert.deepEqual(f.readBytes(t), want, `${type}: ${name} (${typeName(t.type)})`);
        }
        // the type asked for is what most matrices got (rows of 256 fit every block size)
        const base = type.replace(/_[SML]$/, "").replace(/^Q(\d)_K$/, "Q$1_K");
        assert.ok(used.has(base), `${type}: ${base} among ${[...used].join(" ")}`);
        assert.ok(res.tensors.some((t) => t.type !== GGMLType.F32));
      } finally {
        f.close();
      }
      // and it runs
      const m = loadModel(out);
      const logits = m.model.forward([1, 2, 3], undefined, { path: "reference", logits: "last" });
      assert.ok(logits.every(Number.isFinite), type);
    }
  } finally {
    ref.close();
  }
});

test("pieces of any size (one row, a few rows) give the same file as whole tensors", () => {
  for (const type of ["F32", "Q4_K_M"]) {
    const whole = join(dir, `whole-${type}.gguf`);
    convertHf(tinyHf, whole, { type });
    for (const pieceBytes of [1, 4 * 256 * 3]) {
      const pieces = join(dir, `pieces-${type}-${pieceBytes}.gguf`);
      convertHf(tinyHf, pieces, { type, pieceBytes });
      assert.deepEqual(readFileSync(pieces), readFileSync(whole), `${type}, pieces of ${pieceBytes} bytes`);
    }
  }
});

function f32Bytes(v: Float32Array): Uint8Array {
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

test("compressed-tensors FP8: block weight_scale gives the DeepSeek layout's file; per-channel scales within E4M3 noise", () => {
  const block = writeHfCheckpoint(
    tiny.path,
    join(dir, "tiny-ct-block"),
    { dtype: "FP8", fp8Layout: "ct-block" },
    hfConfigOf(synthConfig(tinyCase)),
  );
  const channel = writeHfCheckpoint(
    tiny.path,
    join(dir, "tiny-ct-channel"),
    { dtype: "FP8", fp8Layout: "ct-channel" },
    hfConfigOf(synthConfig(tinyCase)),
  );
  convertHf(block, join(dir, "ct-block.gguf"), { type: "F32" });
  convertHf(channel, join(dir, "ct-channel.gguf"), { type: "F32" });
  const ref = GGUFFile.open(tinyF32);
  const b = GGUFFile.open(join(dir, "ct-block.gguf"));
  const ch = GGUFFile.open(join(dir, "ct-channel.gguf"));
  const orig = GGUFFile.open(tiny.path);
  try {
    let scaled = 0;
    for (const name of ref.tensors.keys()) {
      assert.deepEqual(b.readBytes(b.tensor(name)), ref.readBytes(ref.tensor(name)), name);
      const a = values(orig, name);
      const c = values(ch, name);
      let d2 = 0;
      let s2 = 0;
      for (let i = 0; i < a.length; i++) {
        d2 += (c[i] - a[i]) ** 2;
        s2 += a[i] ** 2;
      }
      const rel = Math.sqrt(d2 / s2);
      assert.ok(rel < 0.04, `${name}: rel ${rel}`);
      if (rel > 1e-3) scaled++;
    }
    assert.ok(scaled > 10, `per-channel FP8 tensors: ${scaled}`);
  } finally {
    for (const f of [ref, b, ch, orig]) f.close();
  }
});

test("GLM-5 layout (glm-dsa; DeepSeek-style weight_scale_inv blocks on every linear weight, the DSA indexer's too)", () => {
  const glmCase = { label: "fp8-glm", base: "tiny-glm", over: {} } as const;
  const glm = synthModel(glmCase, 33);
  try {
    const hf = writeHfCheckpoint(glm.path, join(dir, "glm-fp8"), { dtype: "FP8" }, hfConfigOf(synthConfig(glmCase)));
    const out = join(dir, "glm-fp8.gguf");
    convertHf(hf, out, { type: "F32" });
    const orig = GGUFFile.open(glm.path);
    const conv = GGUFFile.open(out);
    try {
      let fp8 = 0;
      for (const name of conv.tensors.keys()) {
        const a = values(orig, name);
        const c = values(conv, name);
        let d2 = 0;
        let s2 = 0;
        for (let i = 0; i < a.length; i++) {
          d2 += (c[i] - a[i]) ** 2;
          s2 += a[i] ** 2;
        }
        const rel = Math.sqrt(d2 / Math.max(s2, 1e-30));
        assert.ok(rel < 0.04, `${name}: rel ${rel}`);
        if (rel > 1e-3) fp8++;
      }
      assert.ok([...conv.tensors.keys()].some((n) => n.includes("indexer")));
      assert.ok(fp8 > 10, `FP8 tensors: ${fp8}`);
      assert.ok(
        loadModel(out)
          .model.forward([1, 2, 3], undefined, { path: "reference", logits: "last" })
          .every(Number.isFinite),
      );
    } finally {
      orig.close();
      conv.close();
    }
  } finally {
    glm.cleanup();
  }
});

test("the demo model through FP8 (checkpoint → FP8 → GGUF): predictions within the measured FP8 tolerance", () => {
  const hf = writeHfCheckpoint(DEMO_MODEL, join(dir, "demo-fp8"), { dtype: "FP8" });
  const out = join(dir, "demo-fp8.gguf");
  convertHf(hf, out, { type: "F32" });
  const a = loadModel(DEMO_MODEL);
  const b = loadModel(out);
  const ids = Tokenizer.fromMetadata(a.file.metadata).encode(
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.",
  );
  const la = a.model.forward(ids, undefined, { path: "reference", logits: "all" });
  const lb = b.model.forward(ids, undefined, { path: "reference", logits: "all" });
  const V = a.config.nVocab;
  let kl = 0;
  let top1 = 0;
  let maxd = 0;
  for (let t = 0; t < ids.length; t++) {
    const ra = la.subarray(t * V, (t + 1) * V);
    const rb = lb.subarray(t * V, (t + 1) * V);
    const pa = logSoftmaxRow(ra);
    const pb = logSoftmaxRow(rb);
    for (let i = 0; i < V; i++) {
      kl += Math.exp(pa[i]) * (pa[i] - pb[i]);
      maxd = Math.max(maxd, Math.abs(ra[i] - rb[i]));
    }
    if (ra.indexOf(Math.max(...ra)) === rb.indexOf(Math.max(...rb))) top1++;
  }
  // measured (docs/convert.md): mean KL 2.0e-3 nats, max |Δ logit| 0.86 of logits up to 16.3, top-1 34/34
  assert.ok(kl / ids.length < 5e-3, `mean KL ${kl / ids.length}`);
  assert.ok(maxd < 2, `max |Δ logit| ${maxd}`);
  assert.ok(top1 >= ids.length - 1, `top-1 agreement ${top1}/${ids.length}`);
  // not a no-op: FP8 did change the logits
  assert.ok(kl > 1e-5);
});
