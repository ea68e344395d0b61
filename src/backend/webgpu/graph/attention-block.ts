/// <reference types="@webgpu/types" />
/**
 * One layer's MLA attention block of the fused graph, `h += W_o · MLA(attn_norm(h))` (src/model/deepseek2.ts
 * `attention`): the projections into A0, the latent cache write with rope, the absorbed queries, DSA's key selection,
 * the attention kernels over the latent cache and the output projection added to the residual.
 */
import { attention, kvCacheWrite } from "../kernels/attention/attention.js";
import { attentionFused } from "../kernels/attention/fused.js";
import { attnFusedShape } from "../kernels/attention/select.js";
import { dsaSelect } from "../kernels/dsa/dsa.js";
import { fusable, matmul } from "../kernels/matmul/matrix.js";
import { copyU32, layerNorm, rope, ropeTo, scatterRows } from "../kernels/rows/rows.js";
import { ATTN_CHUNK } from "../kernels/attention/attention.wgsl.js";
import type { StepEncoding } from "./step-encoding.js";
import type { GpuLayer } from "./weights.js";

/** h += W_o · MLA(attn_norm(h)) for the step's tokens. */
export function encodeAttention(s: StepEncoding, l: GpuLayer): void {
  // "attn_norm", then "q" / "latent" / "k_pe" into A0
  const oCombine = encodeProjections(s, l);
  // the latent cache write and the absorbed queries (DSA: the keys they may see); one token may run fused to o
  const attended = encodeQueries(s, l);
  // "attn_out": o = W_UV · softmax(q·k) v over the latent cache
  if (!attended) attendLatent(s, l);
  // "o_proj": h += W_o · o (with a pending combine added to h here when the norm fused into A0's product took it)
  const { rt, c, b, n } = s;
  matmul(rt, l.o, b.o!, b.h!, {
    n,
    xStride: c.nHead * c.vHead,
    yStride: c.nEmbd,
    acc: true,
    ...(oCombine ? { fuse: { addCombine: s.combineArgs } } : {}),
  });
  if (oCombine) s.combinePending = false;
}

/**
 * attn_norm(h), then A0 = [q or the q-LoRA latent | c | k_pe] per token: one product when the two matrices stack, with
 * the norm (and a pending combine) inside it in small steps. Returns whether W_o must add the pending combine to h.
 */
function encodeProjections(s: StepEncoding, l: GpuLayer): boolean {
  const { rt, c, b, n } = s;
  const Hd = c.nEmbd;
  const S0 = s.a0Stride;
  const attnFused =
    s.fusion.fuseAttnNorm &&
    b.metaBase === undefined &&
    l.qkvA !== undefined &&
    fusable(rt, l.qkvA, n, false) &&
    (!s.combinePending || fusable(rt, l.o, n, false));
  const oCombine = attnFused && s.combinePending;
  if (!attnFused) s.normH(l.attnNorm, b.x!);
  if (attnFused)
    matmul(rt, l.qkvA!, b.h!, b.a0!, {
      n,
      xStride: Hd,
      yStride: S0,
      fuse: { norm: { g: l.attnNorm, eps: c.rmsEps, ...(oCombine ? { combine: s.combineArgs } : {}) } },
    });
  else if (l.qkvA !== undefined) matmul(rt, l.qkvA, b.x!, b.a0!, { n, xStride: Hd, yStride: S0 });
  else {
    matmul(rt, (l.qA ?? l.q)!, b.x!, b.a0!, { n, xStride: Hd, yStride: S0 });
    matmul(rt, l.kvA!, b.x!, b.a0!, { n, xStride: Hd, yStride: S0, yOff: S0 - c.kvLoraRank - c.qkRope });
  }
  return oCombine;
}

/**
 * From A0: the cache write, the queries (from the normed q-LoRA latent, or already in A0), DSA's key selection and the
 * absorbed queries [q_abs (L) | q_pe (R)] per head in QABS. Returns whether the one-token fused attention also wrote o.
 */
function encodeQueries(s: StepEncoding, l: GpuLayer): boolean {
  const { rt, c, b, n, table } = s;
  const { nHead: H, qkNope: P, qkRope: R, kvLoraRank: L } = c;
  const D = P + R;
  const fused = fusedAttention(s, l);
  if (c.qLoraRank === 0) {
    if (fused !== undefined) {
      fused(b.a0!);
      return true;
    }
    // the queries already in A0: the cache write (and q_pe into columns [L, L+R) of QABS) and q_abs (columns [0, L))
    // read A0 and write apart
    s.together(() => {
      writeCache(s, l);
      absorbQueries(s, l, b.a0!, s.a0Stride);
    });
    if (b.metaBase !== undefined) selectKeys(s, l);
    return false;
  }
  // the queries from the normed latent into Q
  writeCache(s, l);
  matmul(rt, l.qB!, b.a0!, b.q!, { n, xStride: s.a0Stride, yStride: H * D });
  if (b.metaBase !== undefined) selectKeys(s, l);
  if (fused !== undefined) {
    fused(b.q!);
    return true;
  }
  absorbQueries(s, l, b.q!, H * D);
  ropeTo(rt, table, R, b.q!, b.pos!, b.qAbs!, {
    n,
    heads: H,
    xOff: P,
    tokStride: H * D,
    headStride: D,
    yOff: L,
    yTok: H * (L + R),
    yHead: L + R,
  });
  return false;
}

/**
 * Cache rows: RMSNorm(c)·g and rope(k_pe), written at (slot, pos); in the same dispatch, the q-LoRA latent's norm, or
 * (queries already in A0) q_pe roped straight into the absorbed queries [q_abs (L) | q_pe (R)] per head.
 */
function writeCache(s: StepEncoding, l: GpuLayer): void {
  const { rt, c, b, n } = s;
  const { nHead: H, qkNope: P, qkRope: R, kvLoraRank: L } = c;
  const qRope = { y: b.qAbs!, heads: H, qpOff: P, qHead: P + R, yOff: L, yTok: H * (L + R), yHead: L + R };
  const qSide = c.qLoraRank > 0 ? { qNorm: { g: l.qANorm!, dim: c.qLoraRank } } : { qRope };
  const S0 = s.a0Stride;
  const rows = { n, L, kvOff: S0 - L - R, stride: S0, ...qSide };
  kvCacheWrite(rt, b.a0!, l.kvANorm, s.table, R, b.pos!, b.rowIdx!, l.cacheC, l.cacheK, rows, c.rmsEps);
}

/** q_abs = W_UKᵀ q_nope per head into columns [0, L) of QABS (q_pe is roped into the rest apart). */
function absorbQueries(s: StepEncoding, l: GpuLayer, q: GPUBuffer, qStride: number): void {
  const { nHead: H, qkNope: P, qkRope: R, kvLoraRank: L } = s.c;
  matmul(s.rt, l.kB, q, s.b.qAbs!, {
    n: s.n,
    xStride: qStride,
    yStride: H * (L + R),
    batch: { count: H, xBatch: P + R, yBatch: L + R },
  });
}

/**
 * One token, no DSA: absorb, attention and W_UV as one dispatch from the queries (A0 or Q), with the cache write too
 * without q-LoRA; past one chunk of keys as two, the keys split over the workgroups (tune.attnFuse, default on GPUs;
 * attention/fused.ts). Undefined where it does not apply.
 */
function fusedAttention(s: StepEncoding, l: GpuLayer): ((q: GPUBuffer) => void) | undefined {
  const { rt, c, b, n, table } = s;
  const { nHead: H, qkNope: P, qkRope: R, vHead: V, kvLoraRank: L } = c;
  if (n !== 1 || b.metaBase !== undefined) return undefined;
  const lora = c.qLoraRank > 0;
  const shape = attnFusedShape(rt, l.kB, l.vB, { heads: H, P, R, L, V, maxKeys: s.maxKeys, lora });
  if (shape === undefined) return undefined;
  const args = { scale: c.kqScale, eps: c.rmsEps, pageSize: s.pageSize, kvOff: s.a0Stride - L - R };
  const bufs = {
    kB: l.kB,
    vB: l.vB,
    g: l.kvANorm,
    table,
    pos: b.pos!,
    rowIdx: b.rowIdx!,
    cacheC: l.cacheC,
    cacheK: l.cacheK,
    meta: b.meta!,
    sel: b.sel!,
    o: b.o!,
    part: b.attnPart!,
  };
  return (q) => attentionFused(rt, shape, { a0: q, ...bufs }, args);
}

/** o = W_UV · attention of the absorbed queries (QABS) over the layer's latent cache, through LO. */
function attendLatent(s: StepEncoding, l: GpuLayer): void {
  const { rt, c, b, n } = s;
  const { nHead: H, qkRope: R, vHead: V, kvLoraRank: L } = c;
  const bufs = {
    q: b.qAbs!,
    k1: l.cacheC,
    k2: l.cacheK,
    v: l.cacheC,
    meta: b.meta!,
    sel: b.sel!,
    o: b.lo!,
    part: b.part,
  };
  attention(rt, bufs, {
    nq: n,
    heads: H,
    d1: L,
    d2: R,
    dv: L,
    scale: c.kqScale,
    // under DSA a query attends its top_k selected keys at most, however long the context
    maxKeys: l.indexer !== undefined ? Math.min(s.maxKeys, c.indexer!.topK) : s.maxKeys,
    q: { off: 0, stride: H * (L + R), head: L + R, q2Off: L },
    k1: { off: 0, stride: L, head: 0 },
    k2: { off: 0, stride: R },
    v: { off: 0, stride: L, head: 0 },
    o: { off: 0, stride: H * L, head: L },
    pageSize: s.pageSize,
  });
  matmul(rt, l.vB, b.lo!, b.o!, { n, xStride: H * L, yStride: H * V, batch: { count: H, xBatch: L, yBatch: V } });
}

/**
 * DSA: the step's indexer keys into the layer's key cache, then the top_k keys of every query (src/model/dsa.ts) into
 * SEL with META pointing the attention at them. The selection rewrites META, so each layer starts from a copy.
 */
function selectKeys(s: StepEncoding, l: GpuLayer): void {
  const { rt, c, b, n, table } = s;
  copyU32(rt, b.metaBase!, b.meta!, 4 * n);
  const ix = l.indexer;
  const cfg = c.indexer!;
  if (ix === undefined) return; // a layer without an indexer attends densely
  const { nHead: Hi, headDim: Di, topK } = cfg;
  // keys: LayerNorm (eps 0, as llama.cpp reads none) and rope on the first R dims, written at (slot, pos)
  matmul(rt, ix.k, b.x!, b.kI!, { n, xStride: c.nEmbd, yStride: Di });
  layerNorm(rt, b.kI!, ix.kNormW, ix.kNormB, undefined, { n, dim: Di }, 0);
  rope(rt, table, c.qkRope, b.kI!, b.pos!, { n, heads: 1, xOff: 0, tokStride: Di, headStride: Di });
  scatterRows(rt, b.kI!, b.rowIdx!, ix.cache, { n, width: Di });
  // queries from the normed q-LoRA latent, head weights from x
  matmul(rt, ix.qB, b.a0!, b.qI!, { n, xStride: s.a0Stride, yStride: Hi * Di });
  rope(rt, table, c.qkRope, b.qI!, b.pos!, { n, heads: Hi, xOff: 0, tokStride: Hi * Di, headStride: Di });
  matmul(rt, ix.proj, b.x!, b.wI!, { n, xStride: c.nEmbd, yStride: Hi });
  // score rows as wide as the step's key chunks (fixed for a recorded step shape)
  const T = Math.max(1, Math.ceil(s.maxKeys / ATTN_CHUNK)) * ATTN_CHUNK;
  dsaSelect(
    rt,
    { q: b.qI!, w: b.wI!, keys: ix.cache, meta: b.meta!, scores: b.scores!, sel: b.sel! },
    { n, T, Hi, D: Di, topK, pageSize: s.pageSize },
  );
}
