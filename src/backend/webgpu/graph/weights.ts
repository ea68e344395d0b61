/// <reference types="@webgpu/types" />
/**
 * A model's weights resident on the GPU for the fused graph: each layer's matrices uploaded in their GGUF blocks
 * (stacked where two products read the same input, experts as one stacked tensor), its norms' weights and its caches.
 */
import type { ModelConfig } from "../../../model/config.js";
import type { LayerWeights, SwiGLU } from "../../../model/weights.js";
import type { QMatrix } from "../../../tensor/qmatrix.js";
import { GGMLType } from "../../../gguf/types.js";
import type { GpuRuntime } from "../core/runtime.js";
import { GpuMatrix } from "../kernels/matmul/matrix.js";

/** Bytes of `mats` (equal shapes) as one stacked tensor: a view when they are contiguous, else a copy. */
function stacked(mats: readonly QMatrix[]): Uint8Array {
  const first = mats[0].data;
  const each = first.byteLength;
  const contiguous = mats.every(
    (m, i) =>
      m.data.buffer === first.buffer && m.data.byteOffset === first.byteOffset + i * each && m.data.byteLength === each,
  );
  if (contiguous) return new Uint8Array(first.buffer, first.byteOffset, each * mats.length);
  const out = new Uint8Array(each * mats.length);
  mats.forEach((m, i) => out.set(m.data, i * each));
  return out;
}

export function upload(rt: GpuRuntime, m: QMatrix): GpuMatrix {
  return GpuMatrix.upload(rt, m.name, m.type, m.cols, m.rows, m.data);
}

/**
 * foldNorm(m, g) made on first call. The closure holds only the router and the norm's weights: holding the layer
 * would keep every expert's host copy alive after the upload.
 */
function foldLater(rt: GpuRuntime, m: QMatrix, g: Float32Array): () => GpuMatrix {
  let folded: GpuMatrix | undefined;
  return () => (folded ??= foldNorm(rt, m, g));
}

/** An F32 matrix with its columns scaled by g (a norm's weights folded in: W·(g ⊙ x) = (W·diag(g))·x). */
function foldNorm(rt: GpuRuntime, m: QMatrix, g: Float32Array): GpuMatrix {
  const w = new Float32Array(m.data.slice().buffer, 0, m.rows * m.cols);
  for (let r = 0; r < m.rows; r++) for (let j = 0; j < m.cols; j++) w[r * m.cols + j] *= g[j];
  return GpuMatrix.upload(rt, `${m.name} (ffn_norm folded)`, GGMLType.F32, m.cols, m.rows, new Uint8Array(w.buffer));
}

/** Whether two matrices read the same input in one type: their rows can be one product. */
function stackable(a: QMatrix | undefined, b: QMatrix): boolean {
  return a !== undefined && a.type === b.type && a.cols === b.cols;
}

/** One matrix of the rows of `mats` (same type and width), in order. */
function uploadRows(rt: GpuRuntime, mats: readonly QMatrix[], name: string): GpuMatrix {
  const bytes = new Uint8Array(mats.reduce((s, m) => s + m.data.byteLength, 0));
  let at = 0;
  for (const m of mats) {
    bytes.set(m.data, at);
    at += m.data.byteLength;
  }
  return GpuMatrix.upload(
    rt,
    name,
    mats[0].type,
    mats[0].cols,
    mats.reduce((s, m) => s + m.rows, 0),
    bytes,
  );
}

function uploadStack(rt: GpuRuntime, mats: readonly QMatrix[], name: string): GpuMatrix {
  const m = mats[0];
  return GpuMatrix.upload(rt, name, m.type, m.cols, m.rows, stacked(mats), mats.length);
}

export interface GpuFFN {
  gate: GpuMatrix;
  up: GpuMatrix;
  down: GpuMatrix;
}

export interface GpuLayer {
  attnNorm: GPUBuffer;
  /** [q (or the q-LoRA latent) ; kv_a] stacked into one product when both have one type: the rows of A0 in one dispatch */
  qkvA: GpuMatrix | undefined;
  q: GpuMatrix | undefined;
  qA: GpuMatrix | undefined;
  qANorm: GPUBuffer | undefined;
  qB: GpuMatrix | undefined;
  kvA: GpuMatrix | undefined;
  kvANorm: GPUBuffer;
  kB: GpuMatrix;
  vB: GpuMatrix;
  o: GpuMatrix;
  ffnNorm: GPUBuffer;
  dense: GpuFFN | undefined;
  router: GpuMatrix | undefined;
  /**
   * the F32 router with ffn_norm's weights folded into its columns, z = (W·diag(g))·h / rms(h) needing no normed x
   * (normFuse): made on first use (a V3-sized model would hold ~0.4 GB more for it), undefined for other router types
   */
  routerNormed: (() => GpuMatrix) | undefined;
  bias: GPUBuffer | undefined;
  experts: GpuFFN | undefined;
  shared: GpuFFN | undefined;
  cacheC: GPUBuffer;
  cacheK: GPUBuffer;
  /** DSA (glm-dsa): the lightning indexer's weights and its key cache [slots·context × D_idx] */
  indexer:
    | { qB: GpuMatrix; k: GpuMatrix; kNormW: GPUBuffer; kNormB: GPUBuffer; proj: GpuMatrix; cache: GPUBuffer }
    | undefined;
}

function uploadFFN(rt: GpuRuntime, s: SwiGLU): GpuFFN {
  return { gate: upload(rt, s.gate), up: upload(rt, s.up), down: upload(rt, s.down) };
}

/** Layer `il`'s routed experts on the GPU, each of gate, up and down stacked into one tensor [experts × rows × cols]. */
export function uploadExperts(rt: GpuRuntime, experts: readonly SwiGLU[], il: number): GpuFFN {
  const stack = (part: "gate" | "up" | "down"): GpuMatrix =>
    uploadStack(
      rt,
      experts.map((e) => e[part]),
      `blk.${il}.ffn_${part}_exps`,
    );
  return { gate: stack("gate"), up: stack("up"), down: stack("down") };
}

/**
 * Layer `il`'s weights on the GPU, with latent (and DSA key) caches of `cacheRows` rows; without `withExperts` its
 * routed experts stay in host memory (an expert cache streams them: graph/expert-cache.ts).
 */
export function uploadLayer(
  rt: GpuRuntime,
  c: ModelConfig,
  lw: LayerWeights,
  il: number,
  cacheRows: number,
  withExperts = true,
): GpuLayer {
  const f32 = (v: Float32Array, label: string): GPUBuffer => rt.upload(v, label);
  const ffn = (s: SwiGLU): GpuFFN => uploadFFN(rt, s);
  const { kvLoraRank: L, qkRope: R } = c;
  const a = lw.attn;
  const m = lw.moe;
  const layer: GpuLayer = {
    attnNorm: f32(a.norm, `blk.${il}.attn_norm`),
    qkvA: stackable(a.qA ?? a.q, a.kvA) ? uploadRows(rt, [(a.qA ?? a.q)!, a.kvA], `blk.${il}.attn_q_kv_a`) : undefined,
    q: a.q && !stackable(a.q, a.kvA) ? upload(rt, a.q) : undefined,
    qA: a.qA && !stackable(a.qA, a.kvA) ? upload(rt, a.qA) : undefined,
    qANorm: a.qANorm && f32(a.qANorm, "q_a_norm"),
    qB: a.qB && upload(rt, a.qB),
    kvA: stackable(a.qA ?? a.q, a.kvA) ? undefined : upload(rt, a.kvA),
    kvANorm: f32(a.kvANorm, "kv_a_norm"),
    kB: uploadStack(rt, a.kB, `blk.${il}.attn_k_b`),
    vB: uploadStack(rt, a.vB, `blk.${il}.attn_v_b`),
    o: upload(rt, a.o),
    ffnNorm: f32(lw.ffnNorm, "ffn_norm"),
    dense: lw.dense && ffn(lw.dense),
    router: m && upload(rt, m.router),
    routerNormed: m && m.router.type === GGMLType.F32 ? foldLater(rt, m.router, lw.ffnNorm) : undefined,
    bias: m?.bias && f32(m.bias, "exp_probs_b"),
    experts: m && withExperts ? uploadExperts(rt, m.experts, il) : undefined,
    shared: m?.shared && ffn(m.shared),
    cacheC: rt.buffer(cacheRows * L * 4, `blk.${il}.cache_c`),
    cacheK: rt.buffer(cacheRows * R * 4, `blk.${il}.cache_kpe`),
    indexer: a.indexer &&
      c.indexer && {
        qB: upload(rt, a.indexer.qB),
        k: upload(rt, a.indexer.k),
        kNormW: f32(a.indexer.kNormW, "indexer.k_norm"),
        kNormB: f32(a.indexer.kNormB, "indexer.k_norm_b"),
        proj: upload(rt, a.indexer.proj),
        cache: rt.buffer(cacheRows * c.indexer.headDim * 4, `blk.${il}.cache_indexer`),
      },
  };
  return layer;
}

/** Bytes of a layer's matrices on the GPU. */
export function layerWeightBytes(layer: GpuLayer): number {
  let bytes = 0;
  for (const g of [
    layer.qkvA,
    layer.q,
    layer.qA,
    layer.qB,
    layer.kvA,
    layer.kB,
    layer.vB,
    layer.o,
    layer.router,
    layer.dense?.gate,
    layer.dense?.up,
    layer.dense?.down,
    layer.experts?.gate,
    layer.experts?.up,
    layer.experts?.down,
    layer.shared?.gate,
    layer.shared?.up,
    layer.shared?.down,
    layer.indexer?.qB,
    layer.indexer?.k,
    layer.indexer?.proj,
  ])
    bytes += g?.bytes ?? 0;
  return bytes;
}
