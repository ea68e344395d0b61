/**
 * Ground truth for models larger than memory: the forward pass with one layer's weights in memory at a time, read
 * from disk (any shard of a split model) as the pass reaches it, the embedding rows of the prompts' tokens only, and
 * the output head in row blocks. Every sequence goes through a layer while it is in memory, so the file is read once.
 *
 * Two kernel sets:
 * - "reference" (default): the plain kernels on the reference path, the same operations in the same order as
 *   DeepSeek2.forwardBatch with path "reference", so the logits are identical to the in-memory reference's.
 * - "cpu": the CPU backend's WebAssembly kernels on the prefill path (each sequence one chunk over a float32 latent
 *   cache), as the in-memory CPU backend computes it. One backend for the pass: a layer's matrices are read straight
 *   into its arenas, and released (CpuBackend.releaseWeights) before the next layer is read into the same memory.
 */
import type { GGUFFile } from "../gguf/file.js";
import { plainKernels, type MatKernels } from "../model/kernels.js";
import { rmsNorm } from "../tensor/ops.js";
import { QMatrix } from "../tensor/qmatrix.js";
import { dequantizeRow, rowBytes, dequantize } from "../quant/index.js";
import type { ModelConfig } from "../model/config.js";
import { LatentCache } from "../model/cache.js";
import { attendPrefill, attendReference, project } from "../model/mla.js";
import { moe, swiglu } from "../model/moe.js";
import { Rope } from "../model/rope.js";
import { Indexer } from "../model/dsa.js";
import { loadLayerWeights, type LayerWeights } from "../model/weights.js";
import { CpuBackend } from "../backend/cpu/fast.js";
import { LatentError } from "../util/errors.js";

export type StreamedKernels = "reference" | "cpu";

export interface LowMemoryReport {
  readonly tokens: number;
  readonly layers: number;
  /** kernels of the pass */
  readonly kernels: StreamedKernels;
  /** peak resident set size of the process (bytes), as the OS reports it */
  readonly peakRssBytes: number;
  /** bytes of all tensors in the file (what a full load holds) */
  readonly modelBytes: number;
  /** largest single layer's tensor bytes (what streaming holds at once) */
  readonly largestLayerBytes: number;
  readonly ms: number;
  /** top-5 [id, logit] after the last position of the last sequence */
  readonly lastTop5: readonly (readonly [number, number])[];
}

/** Where the pass is, after each layer: for progress lines and an estimate of the time left. */
export interface LayerProgress {
  /** layers done (1..layers) */
  readonly done: number;
  readonly layers: number;
  /** tokens of all sequences */
  readonly tokens: number;
  readonly elapsedMs: number;
  /** the time left, by the bytes of the layers still to read (layers differ: dense, MoE) at the pace so far */
  readonly etaMs: number;
}

export interface StreamedOptions {
  readonly kernels?: StreamedKernels;
  /** threads of the CPU kernels, the caller's included (default: available parallelism) */
  readonly threads?: number;
  readonly onLayer?: (p: LayerProgress) => void;
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
  opts: StreamedOptions = {},
): { logits: Float32Array; report: LowMemoryReport } {
  const r = streamedLogits(file, c, [tokens], opts);
  return { logits: r.logits[0], report: r.report };
}

/** Logits [n_i × n_vocab] of each sequence (positions from 0, no shared context), streaming layers from disk once. */
export function streamedLogits(
  file: GGUFFile,
  c: ModelConfig,
  seqs: readonly (readonly number[])[],
  opts: StreamedOptions = {},
): { logits: Float32Array[]; report: LowMemoryReport } {
  const t0 = performance.now();
  const kernels = opts.kernels ?? "reference";
  if (seqs.length === 0 || seqs.some((s) => s.length === 0))
    throw new LatentError("the streamed reference needs at least one token per sequence");
  const rope = Rope.forConfig(c);
  const total = seqs.reduce((a, s) => a + s.length, 0);
  const hs = seqs.map((s) => embed(file, c, s));

  const bytesOf = Array.from({ length: c.nLayer }, (_, il) => layerBytes(file, il));
  const allLayers = bytesOf.reduce((a, b) => a + b, 0);
  let doneBytes = 0;
  let logits: Float32Array[];
  const backend =
    kernels === "cpu" ? new CpuBackend(opts.threads !== undefined ? { threads: opts.threads } : {}) : undefined;
  try {
    for (let il = 0; il < c.nLayer; il++) {
      backend?.releaseWeights(); // the previous layer's matrices: their memory takes this layer's
      const lw = loadLayerWeights(backend?.adopt(file) ?? file, c, il);
      const indexer =
        c.indexer !== undefined && lw.attn.indexer !== undefined
          ? new Indexer(lw.attn.indexer, c.indexer, c, rope)
          : undefined;
      for (let s = 0; s < seqs.length; s++) layer(lw, c, rope, indexer, hs[s], seqs[s].length, backend ?? plainKernels);
      doneBytes += bytesOf[il];
      const elapsedMs = performance.now() - t0;
      opts.onLayer?.({
        done: il + 1,
        layers: c.nLayer,
        tokens: total,
        elapsedMs,
        etaMs: doneBytes > 0 ? (elapsedMs * (allLayers - doneBytes)) / doneBytes : 0,
      });
    }
    backend?.releaseWeights();
    logits = head(file, c, hs, backend);
  } finally {
    backend?.close();
  }

  const V = c.nVocab;
  const lastSeq = logits[logits.length - 1];
  const last = lastSeq.subarray(lastSeq.length - V);
  const ids = Array.from(last.keys())
    .sort((a, b) => last[b] - last[a] || a - b)
    .slice(0, 5);
  let modelBytes = 0;
  for (const t of file.tensors.values()) modelBytes += t.nbytes;
  return {
    logits,
    report: {
      tokens: total,
      layers: c.nLayer,
      kernels,
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      modelBytes,
      largestLayerBytes: Math.max(0, ...bytesOf),
      ms: Math.round(performance.now() - t0),
      lastTop5: ids.map((id) => [id, last[id]] as const),
    },
  };
}

/** The embedding rows of `tokens` only, [n × Hd]. */
function embed(file: GGUFFile, c: ModelConfig, tokens: readonly number[]): Float64Array {
  const Hd = c.nEmbd;
  const embd = file.tensor("token_embd.weight");
  const erb = rowBytes(embd.type, Hd);
  const h = new Float64Array(tokens.length * Hd);
  const row = new Float32Array(Hd);
  tokens.forEach((tok, t) => {
    if (!Number.isInteger(tok) || tok < 0 || tok >= c.nVocab)
      throw new LatentError(`token id ${tok} is outside the vocabulary (0..${c.nVocab - 1})`);
    dequantizeRow(embd.type, file.readBytes(embd, tok * erb, erb), 0, row, 0, Hd, embd.name);
    h.set(row, t * Hd);
  });
  return h;
}

/**
 * One layer over one sequence of n tokens at positions 0..n-1, h updated in place. The plain kernels take the
 * reference path (latents in float64, no cache); fast kernels the prefill path over a float32 cache of this layer.
 */
function layer(
  lw: LayerWeights,
  c: ModelConfig,
  rope: Rope,
  indexer: Indexer | undefined,
  h: Float64Array,
  n: number,
  k: MatKernels,
): void {
  const Hd = c.nEmbd;
  const positions = Array.from({ length: n }, (_, i) => i);
  const x = new Float64Array(n * Hd);
  for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, lw.attn.norm, c.rmsEps, x, t * Hd);
  const pr = project(lw.attn, c, rope, x, n, positions, k);
  let o: Float64Array;
  if (k === plainKernels) {
    const sel =
      indexer !== undefined && pr.qr !== undefined
        ? indexer.select(x, pr.qr, n, 0, { k: indexer.keys(x, n, 0, k), length: n }, k)
        : undefined;
    o = attendReference(lw.attn, c, pr, n, 0, { c: pr.c, kPe: pr.kPe, length: n }, sel, k);
  } else {
    const cache = new LatentCache({ ...c, nLayer: 1 }, n);
    cache.append(0, pr.c, pr.kPe, indexer?.keys(x, n, 0, k));
    const sel =
      indexer !== undefined && pr.qr !== undefined
        ? indexer.select(x, pr.qr, n, 0, cache.indexerKeys(0, n), k)
        : undefined;
    o = attendPrefill(lw.attn, c, pr, n, 0, cache.latent(0, n), sel, k);
  }
  const attnOut = new Float64Array(n * Hd);
  k.matmul(lw.attn.o, o, n, c.nHead * c.vHead, attnOut, Hd);
  for (let i = 0; i < n * Hd; i++) h[i] += attnOut[i];
  for (let t = 0; t < n; t++) rmsNorm(h, t * Hd, lw.ffnNorm, c.rmsEps, x, t * Hd);
  const ffnOut = new Float64Array(n * Hd);
  if (lw.dense !== undefined) swiglu(lw.dense, x, n, Hd, ffnOut, false, undefined, k);
  else moe(lw.moe!, c, x, n, ffnOut, k);
  for (let i = 0; i < n * Hd; i++) h[i] += ffnOut[i];
}

/**
 * output · output_norm(h) of every sequence. Plain kernels: the head in row blocks of 16 MB. CPU kernels: the whole
 * head in the backend's arenas (as the in-memory backend holds it; a head is smaller than a layer of these models).
 */
function head(
  file: GGUFFile,
  c: ModelConfig,
  hs: readonly Float64Array[],
  backend: CpuBackend | undefined,
): Float32Array[] {
  const Hd = c.nEmbd;
  const V = c.nVocab;
  const normInfo = file.tensor("output_norm.weight");
  const outNorm = dequantize(normInfo.type, file.readBytes(normInfo), Hd, normInfo.name);
  const ns = hs.map((h) => h.length / Hd);
  const n = ns.reduce((a, b) => a + b, 0);
  const hn = new Float64Array(n * Hd);
  let at = 0;
  for (const h of hs) for (let t = 0; t < h.length / Hd; t++) rmsNorm(h, t * Hd, outNorm, c.rmsEps, hn, at++ * Hd);
  const info = file.tensors.get("output.weight") ?? file.tensor("token_embd.weight");
  const logits64 = new Float64Array(n * V);
  if (backend !== undefined) {
    backend.matmul(
      new QMatrix(info.name, info.type, Hd, V, backend.adopt(file).readBytes(info)),
      hn,
      n,
      Hd,
      logits64,
      V,
    );
  } else {
    const hrb = rowBytes(info.type, Hd);
    const block = Math.max(1, Math.floor((16 << 20) / hrb));
    const part = new Float64Array(n * block);
    for (let r0 = 0; r0 < V; r0 += block) {
      const nr = Math.min(block, V - r0);
      const m = new QMatrix(`${info.name}[${r0}..]`, info.type, Hd, nr, file.readBytes(info, r0 * hrb, nr * hrb));
      plainKernels.matmul(m, hn, n, Hd, part, nr);
      for (let t = 0; t < n; t++) for (let r = 0; r < nr; r++) logits64[t * V + r0 + r] = part[t * nr + r];
    }
  }
  const out: Float32Array[] = [];
  at = 0;
  for (const m of ns) {
    out.push(Float32Array.from(logits64.subarray(at * V, (at + m) * V)));
    at += m;
  }
  return out;
}
