/**
 * Attention of the prefill and decode paths on the fast backend (dense causal keys only; a KeySelection keeps the
 * plain loops): wasm kernels over f32 rows in shared memory (CpuBackend.prefillAttention / absorbedAttention).
 */
import type { ModelConfig } from "../../model/config.js";
import type { LatentRows, Projections } from "../../model/mla.js";
import type { AttentionWeights } from "../../model/weights.js";
import type { CpuBackend } from "./fast.js";
import type { Product } from "../../model/kernels.js";
import { attendAbsorbed } from "../../model/mla.js";

/** Decompressed causal MHA (see mla.ts mha): per head scores = K_h·q, causal softmax, o_h = V_hᵀ·p, in one wasm kernel. Returns o [n × H·V]. */
export function fastMha(be: CpuBackend, cfg: ModelConfig, pr: Projections, n: number, pos0: number, kNope: Float64Array, v: Float64Array, lat: LatentRows): Float64Array {
  const { nHead: H, qkNope: P, qkRope: R, vHead: V } = cfg;
  return be.prefillAttention(pr.q, kNope, lat.kPe, v, n, pos0, H, P, R, V, cfg.kqScale);
}

/**
 * Absorbed decode (see mla.ts attendAbsorbed) with all heads at once: the latent rows c and k_pe are the keys of every
 * head (MQA), queries [W_UK,hᵀ q_nope,h | q_pe,h]; scores = C·q_c + K_pe·q_pe, softmax and the weighted latent sum
 * Cᵀ·p run in one wasm kernel per head group (CpuBackend.absorbedAttention). The per-head W_UK and W_UV products go
 * out as one `matmulMany` each.
 * Models carrying TEST-ONLY faults that touch this path (mla.ts hooks) take the plain loops over the fast products.
 */
export function fastAbsorbed(be: CpuBackend, w: AttentionWeights, cfg: ModelConfig, pr: Projections, n: number, pos0: number, lat: LatentRows): Float64Array {
  if (cfg.faults?.swapKvB === true || cfg.faults?.fp16AbsorbedQuery === true) return attendAbsorbed(w, cfg, pr, n, pos0, lat, undefined, be.productsOnly);
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
      heads.push({ w: w.kB[h]!, x: pr.q.subarray(qo, qo + P), n: 1, xStride: P, y: qc.subarray(h * L, (h + 1) * L), yStride: L });
      qp.set(pr.q.subarray(qo + P, qo + D), h * R);
    }
    be.matmulMany(heads);
    const lo = be.absorbedAttention(lat.c, lat.kPe, T, L, R, qc, qp, H, cfg.kqScale);
    const outs: Product[] = [];
    for (let h = 0; h < H; h++) outs.push({ w: w.vB[h]!, x: lo.subarray(h * L, (h + 1) * L), n: 1, xStride: L, y: o.subarray((i * H + h) * V, (i * H + h + 1) * V), yStride: V });
    be.matmulMany(outs);
  }
  return o;
}
