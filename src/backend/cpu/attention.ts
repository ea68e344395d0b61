/**
 * Attention of the prefill and decode paths on the fast backend (dense causal keys only; a KeySelection keeps the
 * plain loops): wasm kernels over f32 rows in shared memory (CpuBackend.prefillAttention / absorbedAttention).
 */
import type { ModelConfig } from "../../model/config.js";
import type { LatentRows, Projections } from "../../model/mla-types.js";
import type { AttentionWeights } from "../../model/weights.js";
import type { Product } from "../../tensor/products.js";
import type { Vec } from "../../tensor/ops.js";

/** What the attention entry points need of the backend (CpuBackend implements it). */
export interface AttentionBackend {
  /** causal MHA of n queries at positions pos0.. over decompressed keys and values: o [n × H·V] */
  prefillAttention(
    q: Float64Array,
    kNope: Float64Array,
    kPe: Vec | Float32Array,
    v: Float64Array,
    n: number,
    pos0: number,
    H: number,
    P: number,
    R: number,
    V: number,
    scale: number,
  ): Float64Array;
  /** softmax(C·q_c + K_pe·q_pe)ᵀ·C per head over T latent rows: [H × L] */
  absorbedAttention(
    c: Vec | Float32Array,
    kPe: Vec | Float32Array,
    T: number,
    L: number,
    R: number,
    qc: Float64Array,
    qp: Float64Array,
    H: number,
    scale: number,
  ): Float64Array;
  matmulMany(ps: readonly Product[]): void;
}

/** Decompressed causal MHA (see mla.ts mha): per head scores = K_h·q, causal softmax, o_h = V_hᵀ·p, in one wasm kernel. Returns o [n × H·V]. */
export function fastMha(
  be: AttentionBackend,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  kNope: Float64Array,
  v: Float64Array,
  lat: LatentRows,
): Float64Array {
  const { nHead: H, qkNope: P, qkRope: R, vHead: V } = cfg;
  return be.prefillAttention(pr.q, kNope, lat.kPe, v, n, pos0, H, P, R, V, cfg.kqScale);
}

/**
 * Absorbed decode (see mla.ts attendAbsorbed) with all heads at once: the latent rows c and k_pe are the keys of every
 * head (MQA), queries [W_UK,hᵀ q_nope,h | q_pe,h]; scores = C·q_c + K_pe·q_pe, softmax and the weighted latent sum
 * Cᵀ·p run in one wasm kernel per head group (CpuBackend.absorbedAttention). The per-head W_UK and W_UV products go
 * out as one `matmulMany` each.
 */
export function fastAbsorbed(
  be: AttentionBackend,
  w: AttentionWeights,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  lat: LatentRows,
): Float64Array {
  const { nHead: H, qkNope: P, qkRope: R, vHead: V, kvLoraRank: L } = cfg;
  const D = P + R;
  const o = new Float64Array(n * H * V);
  const qc = new Float64Array(H * L);
  const qp = new Float64Array(H * R);
  for (let i = 0; i < n; i++) {
    const T = pos0 + i + 1;
    const heads: Product[] = [];
    for (let h = 0; h < H; h++) {
      const qo = (i * H + h) * D;
      heads.push({
        w: w.kB[h],
        x: pr.q.subarray(qo, qo + P),
        n: 1,
        xStride: P,
        y: qc.subarray(h * L, (h + 1) * L),
        yStride: L,
      });
      qp.set(pr.q.subarray(qo + P, qo + D), h * R);
    }
    be.matmulMany(heads);
    const lo = be.absorbedAttention(lat.c, lat.kPe, T, L, R, qc, qp, H, cfg.kqScale);
    const outs: Product[] = [];
    for (let h = 0; h < H; h++)
      outs.push({
        w: w.vB[h],
        x: lo.subarray(h * L, (h + 1) * L),
        n: 1,
        xStride: L,
        y: o.subarray((i * H + h) * V, (i * H + h + 1) * V),
        yStride: V,
      });
    be.matmulMany(outs);
  }
  return o;
}
