import type { Vec } from "../tensor/ops.js";

/**
 * The values Multi-head Latent Attention passes between its stages (mla.ts) and to the kernels that implement them.
 * Symbols: H heads, P = qk_nope, R = qk_rope, L = kv_lora_rank, Lq = q_lora_rank.
 */

/** reference: the definition (decompressed K/V); prefill: batched MHA over a chunk; decode: absorbed MQA */
export type AttentionPath = "reference" | "prefill" | "decode";

/** Latent rows for positions [0, length): c [length × L], kPe [length × R] (k_pe already roped). */
export interface LatentRows {
  readonly c: Vec | Float32Array;
  readonly kPe: Vec | Float32Array;
  readonly length: number;
}

/** Per-token projections of a chunk of n tokens. */
export interface Projections {
  /** [n × H × (P+R)], per head [q_nope | q_pe] with q_pe roped */
  readonly q: Float64Array;
  /** [n × L] normalized latent */
  readonly c: Float64Array;
  /** [n × R] roped shared rope key */
  readonly kPe: Float64Array;
  /** [n × Lq] normalized q-LoRA latent (the DSA indexer reads it), undefined without q-LoRA */
  readonly qr: Float64Array | undefined;
}

/** Keys a query may attend to: undefined = every causal key (0..pos), else an explicit sorted list (DSA top-k). */
export type KeySelection = (queryIndex: number, pos: number) => readonly number[] | undefined;
