import { evaluateAll, logSoftmaxRow } from "../../src/engine/evaluate.js";
import type { DeepSeek2 } from "../../src/model/deepseek2.js";
import type { AttentionPath } from "../../src/model/mla.js";

/** log-softmax rows of every position on one path. */
export function logprobRows(
  model: DeepSeek2,
  tokens: readonly number[],
  path: AttentionPath,
  chunk?: number,
): Float64Array[] {
  return evaluateAll(model, tokens, { path, chunk }).map((r) => logSoftmaxRow(r));
}

/** log-softmax of each row of a [rows × V] logits block (a forward pass's output). */
export function rowLogprobs(rows: Float32Array, V: number): Float64Array[] {
  const out: Float64Array[] = [];
  for (let r = 0; r * V < rows.length; r++) out.push(logSoftmaxRow(rows.subarray(r * V, (r + 1) * V)));
  return out;
}

/** log_softmax of `row` at `id` in float64, NaN entries left out (the GPU's argmax and draws never choose nor count them). */
export function logprobAt(row: Float32Array, id: number): number {
  let max = -Infinity;
  for (const v of row) if (v > max) max = v;
  let sum = 0;
  for (const v of row) if (!Number.isNaN(v)) sum += Math.exp(v - max);
  return row[id] - max - Math.log(sum);
}

export { maxAbsDiff } from "./measure.js";

export function argmax(row: ArrayLike<number | null>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if ((row[i] ?? -Infinity) > (row[best] ?? -Infinity)) best = i;
  return best;
}
