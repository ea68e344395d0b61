import { evaluateAll, logSoftmaxRow } from "../../src/engine/evaluate.js";
import type { DeepSeek2 } from "../../src/model/deepseek2.js";
import type { AttentionPath } from "../../src/model/mla.js";

/** log-softmax rows of every position on one path. */
export function logprobRows(model: DeepSeek2, tokens: readonly number[], path: AttentionPath, chunk?: number): Float64Array[] {
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
  for (const v of row) if (v === v) sum += Math.exp(v - max);
  return row[id]! - max - Math.log(sum);
}

/** max |a − b| over all rows and ids (null in b = underflowed probability: skipped when a is also < −80). */
export function maxAbsDiff(a: readonly ArrayLike<number>[], b: readonly ArrayLike<number | null>[]): number {
  if (a.length !== b.length) throw new Error(`row counts differ: ${a.length} vs ${b.length}`);
  let m = 0;
  a.forEach((row, i) => {
    const other = b[i]!;
    if (row.length !== other.length) throw new Error(`row ${i}: lengths differ: ${row.length} vs ${other.length}`);
    for (let v = 0; v < row.length; v++) {
      const y = other[v];
      if (y === null || y === undefined) {
        if (row[v]! > -80) m = Math.max(m, Infinity);
        continue;
      }
      const d = Math.abs(row[v]! - y);
      if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
    }
  });
  return m;
}

export function argmax(row: ArrayLike<number | null>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if ((row[i] ?? -Infinity) > (row[best] ?? -Infinity)) best = i;
  return best;
}
