import type { DeepSeek2 } from "../model/deepseek2.js";
import type { AttentionPath } from "../model/mla.js";
import { LatentCache } from "../model/cache.js";

export const DEFAULT_PREFILL_CHUNK = 256;

export interface EvaluateOptions {
  readonly path: AttentionPath;
  /** prefill chunk length: longer prompts run in chunks over the cache */
  readonly chunk?: number;
  readonly onProgress?: (done: number, total: number) => void;
}

/**
 * Logits after every position of `tokens` (row i: next-token logits given tokens[0..i]), computed on one path:
 * reference (whole sequence, no cache), prefill (chunks over a latent cache) or decode (one token at a time).
 */
export function evaluateAll(model: DeepSeek2, tokens: readonly number[], opts: EvaluateOptions): Float32Array[] {
  const V = model.config.nVocab;
  const rows: Float32Array[] = [];
  const take = (logits: Float32Array): void => {
    for (let i = 0; i < logits.length / V; i++) rows.push(logits.subarray(i * V, (i + 1) * V));
    opts.onProgress?.(rows.length, tokens.length);
  };
  if (opts.path === "reference") {
    take(model.forward(tokens, undefined, { path: "reference", logits: "all" }));
    return rows;
  }
  const cache = new LatentCache(model.config);
  const step = opts.path === "decode" ? 1 : Math.max(1, opts.chunk ?? DEFAULT_PREFILL_CHUNK);
  for (let i = 0; i < tokens.length; i += step) {
    take(model.forward(tokens.slice(i, i + step), cache, { path: opts.path, logits: "all" }));
  }
  return rows;
}

/** log-softmax of one logits row, in float64. */
export function logSoftmaxRow(logits: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i] - lse;
  return out;
}
