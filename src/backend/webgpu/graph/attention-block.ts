/// <reference types="@webgpu/types" />
/**
 * One layer's MLA attention block of the fused graph, `h += W_o · MLA(attn_norm(h))` (src/model/deepseek2.ts
 * `attention`): the projections into A0, the latent cache write with rope, the absorbed queries, DSA's key selection,
 * the attention kernels over the latent cache and the output projection added to the residual.
 */
import { attention, kvCacheWrite } from "../kernels/attention/attention.js";
import { attentionFused, attnFusedShape } from "../kernels/attention/fused.js";
import { dsaSelect } from "../kernels/dsa/dsa.js";
import { fusable, matmul } from "../kernels/matmul/matrix.js";
import { copyU32, layerNorm, rope, ropeTo, scatterRows } from "../kernels/rows/rows.js";
import { ATTN_CHUNK } from "../kernels/attention/attention.wgsl.js";
import type { StepEncoding } from "./step-encoding.js";
import type { GpuLayer } from "./weights.js";

/** h += W_o · MLA(attn_norm(h)) for the step's tokens. */
export function encodeAttention(s: StepEncoding, l: GpuLayer): void {
  const { rt, c, b, n, table } = s;
  const { nEmbd: Hd, nHead: H, qkNope: P, qkRope: R, vHead: V, kvLoraRank: L, qLoraRank: Lq } = c;
  const D = P + R;
  const S0 = s.a0Stride;
  const F0 = S0 - L - R;
  const attnFused =
    s.fuseAttnNorm &&
    b.metaBase === undefined &&
    l.qkvA !== undefined &&
    fusable(rt, l.qkvA, n, false) &&
    (!s.combinePending || fusable(rt, l.o, n, false));
  const oCombine = attnFused && s.combinePending;
  // attn_norm, then "q" / "latent" / "k_pe": A0 = [q or the q-LoRA latent (F0) | c | k_pe] per token, one product when
  // the two matrices stack
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
    matmul(rt, l.kvA!, b.x!, b.a0!, { n, xStride: Hd, yStride: S0, yOff: F0 });
  }
  // cache rows: RMSNorm(c)·g and rope(k_pe), written at (slot, pos); in the same dispatch, the q-LoRA latent's norm,
  // or (queries already in A0) q_pe roped straight into the absorbed queries [q_abs (L) | q_pe (R)] per head
  const lora = c.qLoraRank > 0;
  const qRope = { y: b.qAbs!, heads: H, qpOff: P, qHead: D, yOff: L, yTok: H * (L + R), yHead: L + R };
  const cacheWrite = (): void =>
    kvCacheWrite(
      rt,
      b.a0!,
      l.kvANorm,
      table,
      R,
      b.pos!,
      b.rowIdx!,
      l.cacheC,
      l.cacheK,
      { n, L, kvOff: F0, stride: S0, ...(lora ? { qNorm: { g: l.qANorm!, dim: Lq } } : { qRope }) },
      c.rmsEps,
    );
  // absorbed queries [q_abs (L) | q_pe (R)] per head: q_abs = W_UKᵀ q_nope (q_pe roped straight into place)
  const absorb = (q: GPUBuffer, qStride: number): void =>
    matmul(rt, l.kB, q, b.qAbs!, {
      n,
      xStride: qStride,
      yStride: H * (L + R),
      batch: { count: H, xBatch: D, yBatch: L + R },
    });
  // one token, no DSA: absorb, attention and W_UV as one dispatch, with the cache write too without q-LoRA; past one
  // chunk of keys as two, the keys split over the workgroups (tune.attnFuse, default on GPUs; attention/fused.ts)
  const fusedAttn =
    n === 1 && b.metaBase === undefined
      ? attnFusedShape(rt, l.kB, l.vB, { heads: H, P, R, L, V, maxKeys: s.maxKeys, lora })
      : undefined;
  const fusedArgs = { scale: c.kqScale, eps: c.rmsEps, pageSize: s.pageSize, kvOff: F0 };
  const fusedBufs = {
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
  if (fusedAttn !== undefined && !lora) {
    attentionFused(rt, fusedAttn, { a0: b.a0!, ...fusedBufs }, fusedArgs);
  } else if (lora) {
    // the queries from the normed latent into Q
    cacheWrite();
    matmul(rt, l.qB!, b.a0!, b.q!, { n, xStride: S0, yStride: H * D });
    if (b.metaBase !== undefined) selectKeys(s, l);
    if (fusedAttn !== undefined) attentionFused(rt, fusedAttn, { a0: b.q!, ...fusedBufs }, fusedArgs);
    else {
      absorb(b.q!, H * D);
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
    }
  } else {
    // the queries already in A0: the cache write (and q_pe into columns [L, L+R) of QABS) and q_abs (columns [0, L))
    // read A0 and write apart
    s.together(() => {
      cacheWrite();
      absorb(b.a0!, S0);
    });
    if (b.metaBase !== undefined) selectKeys(s, l);
  }
  // "attn_out": o = W_UV · softmax(q·k) v over the latent cache (unless the fused attention wrote it)
  if (fusedAttn === undefined) attendLatent(s, l);
  // "o_proj": h += W_o · o (with a pending combine added to h here when the norm took none)
  matmul(rt, l.o, b.o!, b.h!, {
    n,
    xStride: H * V,
    yStride: Hd,
    acc: true,
    ...(oCombine ? { fuse: { addCombine: s.combineArgs } } : {}),
  });
  if (oCombine) s.combinePending = false;
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
    maxKeys: s.maxKeys,
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
