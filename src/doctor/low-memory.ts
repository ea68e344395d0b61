/**
 * Ground truth for models larger than memory: the reference forward pass with one layer's weights in memory at a
 * time, read from disk (any shard of a split model) as the pass reaches it, the embedding rows of the prompt's tokens
 * only, and the output head in row blocks. Same operations in the same order as DeepSeek2.forwardBatch on the
 * reference path, so the logits are identical to the normal path's.
 */
import type { GGUFFile } from "../gguf/file.js";
import { plainKernels } from "../model/kernels.js";
import { rmsNorm } from "../tensor/ops.js";
import { QMatrix } from "../tensor/qmatrix.js";
import { dequantizeRow, rowBytes, dequantize } from "../quant/index.js";
import type { ModelConfig } from "../model/config.js";
import { attendReference, project } from "../model/mla.js";
import { moe, swiglu } from "../model/moe.js";
import { Rope } from "../model/rope.js";
import { Indexer } from "../model/dsa.js";
import { loadLayerWeights } from "../model/weights.js";
import { LatentError } from "../util/errors.js";

export interface LowMemoryReport {
  readonly tokens: number;
  readonly layers: number;
  /** peak resident set size of the process (bytes), as the OS reports it */
  readonly peakRssBytes: number;
  /** bytes of all tensors in the file (what a full load holds) */
  readonly modelBytes: number;
  /** largest single layer's tensor bytes (what streaming holds at once) */
  readonly largestLayerBytes: number;
  readonly ms: number;
  /** top-5 [id, logit] after the last position */
  readonly lastTop5: readonly (readonly [number, number])[];
}

function layerBytes(file: GGUFFile, il: number): number {
  let b = 0;
  const p = `blk.${il}.`;
  for (const t of file.tensors.values()) if (t.name.startsWith(p)) b += t.nbytes;
  return b;
}

/** Reference logits [n × n_vocab] of `tokens`, streaming layers from disk. */
export function lowMemoryLogits(
  file: GGUFFile,
  c: ModelConfig,
  tokens: readonly number[],
  onLayer?: (il: number) => void,
): { logits: Float32Array; report: LowMemoryReport } {
  const t0 = performance.now();
  const k = plainKernels;
  const Hd = c.nEmbd;
  const n = tokens.length;
  if (n === 0) throw new LatentError("low-memory reference needs at least one token");
  const rope = Rope.forConfig(c);
  const positions = tokens.map((_, i) => i);

  // Embedding rows of the prompt's tokens only.
  const embd = file.tensor("token_embd.weight");
  const erb = rowBytes(embd.type, Hd);
  const h = new Float64Array(n * Hd);
  const row = new Float32Array(Hd);
  tokens.forEach((tok, t) => {
    if (!Number.isInteger(tok) || tok < 0 || tok >= c.nVocab)
      throw new LatentError(`token id ${tok} is outside the vocabulary (0..${c.nVocab - 1})`);
    dequantizeRow(embd.type, file.readBytes(embd, tok * erb, erb), 0, row, 0, Hd, embd.name);
    h.set(row, t * Hd);
  });

  const x = new Float64Array(n * Hd);
  const ffnOut = new Float64Array(n * Hd);
  let largest = 0;
  for (let il = 0; il < c.nLayer; il++) {
    largest = Math.max(largest, layerBytes(file, il));
    let lw: ReturnType<typeof loadLayerWeights> | undefined = loadLayerWeights(file, c, il);
    for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, lw.attn.norm, c.rmsEps, x, t * Hd);
    const pr = project(lw.attn, c, rope, x, n, positions, k);
    let sel: ReturnType<Indexer["select"]> | undefined;
    if (c.indexer !== undefined && lw.attn.indexer !== undefined && pr.qr !== undefined) {
      const idx = new Indexer(lw.attn.indexer, c.indexer, c, rope);
      sel = idx.select(x, pr.qr, n, 0, { k: idx.keys(x, n, 0, k), length: n }, k);
    }
    const o = attendReference(lw.attn, c, pr, n, 0, { c: pr.c, kPe: pr.kPe, length: n }, sel, k);
    const attnOut = new Float64Array(n * Hd);
    k.matmul(lw.attn.o, o, n, c.nHead * c.vHead, attnOut, Hd);
    for (let i = 0; i < n * Hd; i++) h[i] += attnOut[i];
    for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, lw.ffnNorm, c.rmsEps, x, t * Hd);
    if (lw.dense !== undefined) swiglu(lw.dense, x, n, Hd, ffnOut, false, undefined, k);
    else moe(lw.moe!, c, x, n, ffnOut, k);
    for (let i = 0; i < n * Hd; i++) h[i] += ffnOut[i];
    lw = undefined; // the layer's weights become garbage here
    onLayer?.(il);
  }

  const normInfo = file.tensor("output_norm.weight");
  const outNorm = dequantize(normInfo.type, file.readBytes(normInfo), Hd, normInfo.name);
  const hn = new Float64Array(n * Hd);
  for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, outNorm, c.rmsEps, hn, t * Hd);
  const head = file.tensors.get("output.weight") ?? embd;
  const hrb = rowBytes(head.type, Hd);
  const block = Math.max(1, Math.floor((16 << 20) / hrb));
  const logits = new Float32Array(n * c.nVocab);
  const part = new Float64Array(n * block);
  for (let r0 = 0; r0 < c.nVocab; r0 += block) {
    const nr = Math.min(block, c.nVocab - r0);
    const m = new QMatrix(`${head.name}[${r0}..]`, head.type, Hd, nr, file.readBytes(head, r0 * hrb, nr * hrb));
    k.matmul(m, hn, n, Hd, part, nr);
    for (let t = 0; t < n; t++) for (let r = 0; r < nr; r++) logits[t * c.nVocab + r0 + r] = part[t * nr + r];
  }

  const last = logits.subarray((n - 1) * c.nVocab);
  const ids = Array.from(last.keys())
    .sort((a, b) => last[b] - last[a] || a - b)
    .slice(0, 5);
  let modelBytes = 0;
  for (const t of file.tensors.values()) modelBytes += t.nbytes;
  return {
    logits,
    report: {
      tokens: n,
      layers: c.nLayer,
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      modelBytes,
      largestLayerBytes: largest,
      ms: Math.round(performance.now() - t0),
      lastTop5: ids.map((id) => [id, last[id]] as const),
    },
  };
}
