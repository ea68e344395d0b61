import type { MatKernels } from "./kernels.js";
import type { MatProducts } from "../tensor/products.js";
import { rmsNorm, softmaxInPlace, type Vec } from "../tensor/ops.js";
import type { ModelConfig } from "./config.js";
import type { Rope } from "./rope.js";
import type { AttentionWeights } from "./weights.js";
import type { AttentionPath, KeySelection, LatentRows, Projections } from "./mla-types.js";

export type { AttentionPath, KeySelection, LatentRows, Projections } from "./mla-types.js";

/**
 * Multi-head Latent Attention (DeepSeek-V2 §2.1). Symbols: H heads, P = qk_nope, R = qk_rope, V = v_head,
 * L = kv_lora_rank, Lq = q_lora_rank. Per token the cache keeps only the latent [c (L) | k_pe (R)].
 *
 * Three ways to compute the same attention (AttentionPath):
 * - reference: the definition — K/V decompressed with the HF kv_b_proj for the whole sequence, plain causal MHA, float64.
 * - prefill:   batched MHA over a chunk; K/V of every cached position decompressed with W_UK (attn_k_b) and W_UV (attn_v_b).
 * - decode:    absorbed MQA — q_abs,h = W_UK,hᵀ q_nope,h scores directly against the latent c; the weighted sum of c
 *              is projected by W_UV,h afterwards. Scale stays mscale²/√(P+R).
 */

/** q, c, k_pe for n tokens at positions `pos[t]` from the attention-normed inputs x [n × Hd]. */
export function project(
  w: AttentionWeights,
  cfg: ModelConfig,
  rope: Rope,
  x: Float64Array,
  n: number,
  pos: ArrayLike<number>,
  k: MatKernels,
): Projections {
  const { nEmbd: Hd, nHead: H, qkNope: P, qkRope: R, kvLoraRank: L, qLoraRank: Lq } = cfg;
  const D = P + R;
  const q = new Float64Array(n * H * D);
  let qr: Float64Array | undefined;
  if (w.qA !== undefined) {
    qr = new Float64Array(n * Lq);
    k.matmul(w.qA, x, n, Hd, qr, Lq);
    for (let t = 0; t < n; t++) rmsNorm(qr, t * Lq, w.qANorm!, cfg.rmsEps, qr, t * Lq);
    k.matmul(w.qB!, qr, n, Lq, q, H * D);
  } else {
    k.matmul(w.q!, x, n, Hd, q, H * D);
  }
  const kv = new Float64Array(n * (L + R));
  k.matmul(w.kvA, x, n, Hd, kv, L + R);
  const c = new Float64Array(n * L);
  const kPe = new Float64Array(n * R);
  for (let t = 0; t < n; t++) {
    rmsNorm(kv, t * (L + R), w.kvANorm, cfg.rmsEps, c, t * L);
    kPe.set(kv.subarray(t * (L + R) + L, (t + 1) * (L + R)), t * R);
    rope.apply(kPe, t * R, pos[t]);
    for (let h = 0; h < H; h++) rope.apply(q, (t * H + h) * D + P, pos[t]);
  }
  return { q, c, kPe, qr };
}

/** Rows [start, start+n) of a batch's projections (views, no copy). */
export function sliceProjections(pr: Projections, cfg: ModelConfig, start: number, n: number): Projections {
  const { nHead: H, qkNope: P, qkRope: R, kvLoraRank: L, qLoraRank: Lq } = cfg;
  const D = P + R;
  return {
    q: pr.q.subarray(start * H * D, (start + n) * H * D),
    c: pr.c.subarray(start * L, (start + n) * L),
    kPe: pr.kPe.subarray(start * R, (start + n) * R),
    qr: pr.qr?.subarray(start * Lq, (start + n) * Lq),
  };
}

function keysOf(sel: KeySelection | undefined, i: number, pos: number): readonly number[] | number {
  return sel?.(i, pos) ?? pos + 1;
}

/**
 * Decompressed MHA for n queries at positions pos0.., given per-position per-head k_nope [T × H × P] and
 * v [T × H × V] for T = pos0 + n positions, and the latent rows' k_pe. Returns o [n × H·V].
 */
function mha(
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  kNope: Float64Array,
  v: Float64Array,
  lat: LatentRows,
  sel: KeySelection | undefined,
  k?: MatKernels,
): Float64Array {
  if (k?.mha !== undefined && sel === undefined) return k.mha(cfg, pr, n, pos0, kNope, v, lat); // fast backend
  const { nHead: H, qkNope: P, qkRope: R, vHead: V } = cfg;
  const D = P + R;
  const o = new Float64Array(n * H * V);
  const scores = new Float64Array(pos0 + n);
  for (let i = 0; i < n; i++) {
    const pos = pos0 + i;
    const keys = keysOf(sel, i, pos);
    const nk = typeof keys === "number" ? keys : keys.length;
    for (let h = 0; h < H; h++) {
      const qo = (i * H + h) * D;
      for (let j = 0; j < nk; j++) {
        const u = typeof keys === "number" ? j : keys[j];
        let s = 0;
        const ko = (u * H + h) * P;
        for (let p = 0; p < P; p++) s += pr.q[qo + p] * kNope[ko + p];
        for (let r = 0; r < R; r++) s += pr.q[qo + P + r] * lat.kPe[u * R + r];
        scores[j] = s * cfg.kqScale;
      }
      softmaxInPlace(scores, 0, nk);
      const oo = (i * H + h) * V;
      for (let j = 0; j < nk; j++) {
        const u = typeof keys === "number" ? j : keys[j];
        const pj = scores[j];
        const vo = (u * H + h) * V;
        for (let d = 0; d < V; d++) o[oo + d] += pj * v[vo + d];
      }
    }
  }
  return o;
}

/** The definition: K/V from the HF kv_b_proj over all T positions of `lat`, then plain causal MHA. */
export function attendReference(
  w: AttentionWeights,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  lat: LatentRows,
  sel: KeySelection | undefined,
  k: MatKernels,
): Float64Array {
  const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = cfg;
  const T = lat.length;
  const kv = new Float64Array(T * H * (P + V));
  k.matmul(w.kvB(), lat.c as Vec, T, L, kv, H * (P + V));
  const kNope = new Float64Array(T * H * P);
  const v = new Float64Array(T * H * V);
  for (let u = 0; u < T; u++) {
    for (let h = 0; h < H; h++) {
      const base = (u * H + h) * (P + V);
      kNope.set(kv.subarray(base, base + P), (u * H + h) * P);
      v.set(kv.subarray(base + P, base + P + V), (u * H + h) * V);
    }
  }
  return mha(cfg, pr, n, pos0, kNope, v, lat, sel);
}

/** Prefill: decompress every cached position with W_UK (attn_k_b, transposed product) and W_UV (attn_v_b), then MHA. */
export function attendPrefill(
  w: AttentionWeights,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  lat: LatentRows,
  sel: KeySelection | undefined,
  k: MatKernels,
): Float64Array {
  const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = cfg;
  const T = lat.length;
  const kNope = new Float64Array(T * H * P);
  const v = new Float64Array(T * H * V);
  const kh = new Float64Array(T * P);
  const vh = new Float64Array(T * V);
  const c = lat.c instanceof Float64Array ? lat.c : Float64Array.from(lat.c.subarray(0, T * L));
  for (let h = 0; h < H; h++) {
    k.matmulT(w.kB[h], c, T, L, kh, P);
    k.matmul(w.vB[h], c, T, L, vh, V);
    for (let u = 0; u < T; u++) {
      kNope.set(kh.subarray(u * P, (u + 1) * P), (u * H + h) * P);
      v.set(vh.subarray(u * V, (u + 1) * V), (u * H + h) * V);
    }
  }
  return mha(cfg, pr, n, pos0, kNope, v, lat, sel, k);
}

/** Absorbed decode: MQA of q_abs = W_UKᵀ q_nope against the latent, value = c, then W_UV per head. */
export function attendAbsorbed(
  w: AttentionWeights,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  pos0: number,
  lat: LatentRows,
  sel: KeySelection | undefined,
  k: MatKernels,
): Float64Array {
  if (k.absorbed !== undefined && sel === undefined) return k.absorbed(w, cfg, pr, n, pos0, lat); // fast backend
  const qAbs = absorbQueries(w, cfg, pr, n, k);
  return projectValues(w, cfg, latentAttention(cfg, pr, qAbs, n, pos0, lat, sel), n, k);
}

/** q_abs,h = W_UK,hᵀ q_nope,h for n queries and H heads: [n × H × L]. */
export function absorbQueries(
  w: AttentionWeights,
  cfg: ModelConfig,
  pr: Projections,
  n: number,
  k: MatProducts,
): Float64Array {
  const { nHead: H, qkNope: P, qkRope: R, kvLoraRank: L } = cfg;
  const D = P + R;
  const qAbs = new Float64Array(n * H * L);
  for (let i = 0; i < n; i++) {
    for (let h = 0; h < H; h++) {
      const qo = (i * H + h) * D;
      const at = (i * H + h) * L;
      k.matmul(w.kB[h], pr.q.subarray(qo, qo + P), 1, P, qAbs.subarray(at, at + L), L);
    }
  }
  return qAbs;
}

/**
 * MQA of the absorbed queries qAbs [n × H × L] (with each head's q_pe) over the latent rows: scores against c and
 * k_pe, softmax, then the weighted sum of c per query and head: [n × H × L].
 */
export function latentAttention(
  cfg: ModelConfig,
  pr: Projections,
  qAbs: Float64Array,
  n: number,
  pos0: number,
  lat: LatentRows,
  sel: KeySelection | undefined,
): Float64Array {
  const { nHead: H, qkNope: P, qkRope: R, kvLoraRank: L } = cfg;
  const D = P + R;
  const out = new Float64Array(n * H * L);
  const scores = new Float64Array(pos0 + n);
  for (let i = 0; i < n; i++) {
    const pos = pos0 + i;
    const keys = keysOf(sel, i, pos);
    const nk = typeof keys === "number" ? keys : keys.length;
    for (let h = 0; h < H; h++) {
      const qo = (i * H + h) * D;
      const ao = (i * H + h) * L;
      for (let j = 0; j < nk; j++) {
        const u = typeof keys === "number" ? j : keys[j];
        let s = 0;
        for (let l = 0; l < L; l++) s += qAbs[ao + l] * lat.c[u * L + l];
        for (let r = 0; r < R; r++) s += pr.q[qo + P + r] * lat.kPe[u * R + r];
        scores[j] = s * cfg.kqScale;
      }
      softmaxInPlace(scores, 0, nk);
      for (let j = 0; j < nk; j++) {
        const u = typeof keys === "number" ? j : keys[j];
        const pj = scores[j];
        for (let l = 0; l < L; l++) out[ao + l] += pj * lat.c[u * L + l];
      }
    }
  }
  return out;
}

/** o_h = W_UV,h · (Σ p c)_h for n queries and H heads: latOut [n × H × L] → o [n × H·V]. */
export function projectValues(
  w: AttentionWeights,
  cfg: ModelConfig,
  latOut: Float64Array,
  n: number,
  k: MatProducts,
): Float64Array {
  const { nHead: H, vHead: V, kvLoraRank: L } = cfg;
  const o = new Float64Array(n * H * V);
  for (let i = 0; i < n; i++) {
    for (let h = 0; h < H; h++) {
      const at = (i * H + h) * L;
      k.matmul(w.vB[h], latOut.subarray(at, at + L), 1, L, o.subarray((i * H + h) * V, (i * H + h + 1) * V), V);
    }
  }
  return o;
}

export const ATTENTION: Record<AttentionPath, typeof attendReference> = {
  reference: attendReference,
  prefill: attendPrefill,
  decode: attendAbsorbed,
};
