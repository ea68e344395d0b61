/**
 * Attention of the prefill and decode paths as matrix products on the fast backend (dense causal keys only; a
 * KeySelection keeps the plain loops). Keys and values of one head (prefill) or the shared latent (absorbed decode)
 * are written as f32 rows straight into the backend's shared memory and multiplied there with f32 activations.
 */
import { GGMLType } from "../../gguf/types.js";
import type { ModelConfig } from "../../model/config.js";
import type { LatentRows, Projections } from "../../model/mla.js";
import type { AttentionWeights } from "../../model/weights.js";
import type { CpuBackend } from "./fast.js";
import { QMatrix } from "./qmatrix.js";
import type { Product } from "./kernels.js";
import { attendAbsorbed } from "../../model/mla.js";

/** scaled softmax of rows [n × T] over their first pos0+i+1 keys (causal) or all T; the rest set to 0 */
function softmaxRows(s: Float64Array, n: number, T: number, pos0: number, scale: number, causal: boolean): void {
  for (let i = 0; i < n; i++) {
    const o = i * T;
    const nk = causal ? pos0 + i + 1 : T;
    let max = -Infinity;
    for (let j = 0; j < nk; j++) {
      const v = s[o + j]! * scale;
      s[o + j] = v;
      if (v > max) max = v;
    }
    let sum = 0;
    for (let j = 0; j < nk; j++) {
      const e = Math.exp(s[o + j]! - max);
      s[o + j] = e;
      sum += e;
    }
    const inv = 1 / sum;
    for (let j = 0; j < nk; j++) s[o + j]! *= inv;
    s.fill(0, o + nk, o + T);
  }
}

function f32Matrix(view: Float32Array, rows: number, cols: number, name: string): QMatrix {
  return new QMatrix(name, GGMLType.F32, cols, rows, new Uint8Array(view.buffer, view.byteOffset, rows * cols * 4));
}

/** Decompressed causal MHA (see mla.ts mha): per head scores = K_h·q, softmax, o_h = V_hᵀ·p. Returns o [n × H·V]. */
export function fastMha(be: CpuBackend, cfg: ModelConfig, pr: Projections, n: number, pos0: number, kNope: Float64Array, v: Float64Array, lat: LatentRows): Float64Array {
  const { nHead: H, qkNope: P, qkRope: R, vHead: V } = cfg;
  const D = P + R;
  const T = pos0 + n;
  const o = new Float64Array(n * H * V);
  const s = new Float64Array(n * T);
  for (let h = 0; h < H; h++) {
    const K = be.sharedF32(0, T * D);
    const Vh = be.sharedF32(1, T * V);
    for (let u = 0; u < T; u++) {
      const ko = (u * H + h) * P;
      for (let p = 0; p < P; p++) K[u * D + p] = kNope[ko + p]!;
      for (let r = 0; r < R; r++) K[u * D + P + r] = lat.kPe[u * R + r]!;
      const vo = (u * H + h) * V;
      for (let d = 0; d < V; d++) Vh[u * V + d] = v[vo + d]!;
    }
    be.matmul(f32Matrix(K, T, D, "K"), pr.q.subarray(h * D), n, H * D, s, T);
    softmaxRows(s, n, T, pos0, cfg.kqScale, true);
    be.matmulT(f32Matrix(Vh, T, V, "V"), s, n, T, o.subarray(h * V), H * V);
  }
  return o;
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
