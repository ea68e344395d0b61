/**
 * The second half of `--source`: the GGUF's model and the source's model on the same prompts. The source model of
 * a checkpoint directory is the GGUF's architecture (its metadata) with the source's weights, written as a
 * temporary F32 GGUF in os.tmpdir() one tensor at a time; a source GGUF is loaded as it is.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../gguf/file.js";
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../gguf/types.js";
import { writeGGUF, type TensorToWrite } from "../gguf/writer.js";
import { parseConfig, type ModelConfig } from "../model/config.js";
import { DeepSeek2 } from "../model/deepseek2.js";
import { GlmDsa } from "../model/glm-dsa.js";
import { loadWeights } from "../model/weights.js";
import { evaluateAll, logSoftmaxRow } from "../engine/evaluate.js";
import type { Expected } from "./source-compare.js";
import type { GgufPart } from "./source-parts.js";

export interface LogitsComparison {
  readonly prompts: readonly { readonly label: string; readonly tokens: number }[];
  readonly positions: number;
  /** KL(source ‖ gguf) in nats, per position */
  readonly meanKL: number;
  readonly maxKL: number;
  readonly top1Agreement: number;
  readonly klTolerance: number;
  readonly top1Tolerance: number;
  readonly sourceModel: "temporary F32 GGUF from the checkpoint" | "the source GGUF";
}

export interface LogitsPrompt {
  readonly label: string;
  readonly tokens: readonly number[];
}

function modelOf(file: GGUFFile, c: ModelConfig): DeepSeek2 {
  const w = loadWeights(file, c);
  return c.arch === "glm-dsa" ? new GlmDsa(c, w) : new DeepSeek2(c, w);
}

/** KL(p ‖ q) of two logits rows, and whether their argmax agree. */
function klRow(p: Float32Array, q: Float32Array): { kl: number; top1: boolean } {
  const lp = logSoftmaxRow(p);
  const lq = logSoftmaxRow(q);
  let kl = 0;
  let ap = 0;
  let aq = 0;
  for (let i = 0; i < lp.length; i++) {
    kl += Math.exp(lp[i]) * (lp[i] - lq[i]);
    if (lp[i] > lp[ap]) ap = i;
    if (lq[i] > lq[aq]) aq = i;
  }
  return { kl: Math.max(0, kl), top1: ap === aq };
}

/** Write the source's weights in the GGUF's layout (names, shapes, order) as F32, with the GGUF's metadata. */
function writeSourceGguf(path: string, file: GGUFFile, parts: readonly GgufPart[], expected: Expected): void {
  const byTensor = new Map<string, GgufPart[]>();
  for (const p of parts) {
    if (!byTensor.has(p.tensor)) byTensor.set(p.tensor, []);
    byTensor.get(p.tensor)!.push(p);
  }
  const meta = new Map<string, GGUFMetadataEntry>(file.metadata.entries);
  meta.set("general.file_type", { type: GGUFValueType.UINT32, value: 0 });
  const tensors: TensorToWrite[] = [...file.tensors.values()].map((info) => ({
    name: info.name,
    ne: [...info.ne],
    type: GGMLType.F32,
    data: () => {
      const ps = byTensor.get(info.name) ?? [];
      const out = new Float32Array(info.ne.reduce((a, b) => a * b, 1));
      let off = 0;
      for (const p of ps) {
        out.set(expected.values(p), off);
        off += p.count;
      }
      return new Uint8Array(out.buffer);
    },
  }));
  writeGGUF(path, meta, tensors);
}

/**
 * Logits of the GGUF's model and of the source's model on `prompts`. `noise` is the largest expected relative
 * weight noise of the comparison (it sets the KL tolerance: quantized files legitimately move the logits).
 */
export function compareLogits(opts: {
  readonly file: GGUFFile;
  readonly config: ModelConfig;
  readonly parts: readonly GgufPart[];
  readonly expected: Expected;
  readonly sourceGguf?: GGUFFile;
  readonly prompts: readonly LogitsPrompt[];
  readonly noise: number;
}): LogitsComparison {
  const model = modelOf(opts.file, opts.config);
  let dir: string | undefined;
  let tmpFile: GGUFFile | undefined;
  try {
    let sourceModel: DeepSeek2;
    if (opts.sourceGguf !== undefined) {
      const sc = parseConfig(opts.sourceGguf.metadata, opts.sourceGguf.tensors.get("token_embd.weight")?.ne[1]);
      sourceModel = modelOf(opts.sourceGguf, sc);
    } else {
      dir = mkdtempSync(join(tmpdir(), "latent-doctor-source-"));
      const path = join(dir, "source-f32.gguf");
      writeSourceGguf(path, opts.file, opts.parts, opts.expected);
      tmpFile = GGUFFile.open(path);
      sourceModel = modelOf(tmpFile, opts.config);
    }
    let sum = 0;
    let max = 0;
    let agree = 0;
    let n = 0;
    for (const p of opts.prompts) {
      const a = evaluateAll(sourceModel, p.tokens, { path: "prefill", chunk: 64 });
      const b = evaluateAll(model, p.tokens, { path: "prefill", chunk: 64 });
      a.forEach((row, i) => {
        const { kl, top1 } = klRow(row, b[i]);
        sum += kl;
        max = Math.max(max, kl);
        if (top1) agree++;
        n++;
      });
    }
    const tol = logitsTolerance(opts.noise);
    return {
      prompts: opts.prompts.map((p) => ({ label: p.label, tokens: p.tokens.length })),
      positions: n,
      meanKL: n === 0 ? 0 : sum / n,
      maxKL: max,
      top1Agreement: n === 0 ? 1 : agree / n,
      klTolerance: tol.kl,
      top1Tolerance: tol.top1,
      sourceModel: opts.sourceGguf !== undefined ? "the source GGUF" : "temporary F32 GGUF from the checkpoint",
    };
  } finally {
    tmpFile?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Tolerance of the logits comparison from the largest expected relative weight noise `noise` (both sides' types in
 * quadrature). Calibrated on the demo model requantized to Q8_0 … Q2_K against BF16 and FP8 checkpoints
 * (docs/doctor.md, "Source comparison"): the measured mean KL stayed below 1.5·noise (Q2_K: 0.50 nats at noise
 * 0.34), top-1 agreement at 95 % or more up to Q5_K, 86 % at Q4_K, 40 % at Q2_K. Random-weight models are touchier (a glm-dsa synth model: KL 6.3e-3 and
 * top-1 96 % from BF16 rounding alone, noise 1.7e-3), hence the floor of 0.02 nats and the 0.9 start of top-1.
 */
export function logitsTolerance(noise: number): { kl: number; top1: number } {
  return { kl: Math.max(0.02, 4 * noise), top1: Math.max(0.3, 0.9 - 6 * noise) };
}
