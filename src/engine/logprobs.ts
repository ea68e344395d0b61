import { NonFiniteError, UsageError } from "../util/errors.js";

/**
 * Throw a NonFiniteError naming the first entry that is NaN or +Infinity (both make a distribution meaningless).
 * -Infinity is allowed: it means "probability zero" (a masked token).
 */
export function checkLogits(logits: Float32Array | Float64Array): void {
  if (logits.length === 0) throw new UsageError("logits vector is empty");
  for (let i = 0; i < logits.length; i++) {
    const x = logits[i];
    if (Number.isNaN(x)) throw new NonFiniteError(`logits contain NaN at position ${i} (token id ${i})`);
    if (x === Infinity) throw new NonFiniteError(`logits contain +Infinity at position ${i} (token id ${i})`);
  }
}

/**
 * The row's argmax (ties to the lowest id), its max and the log-softmax shift max + log Σ exp(x − max): two passes, the
 * first also validating (NonFiniteError naming the first NaN or +Infinity, or when no logit is finite — as checkLogits).
 */
function softmaxShift(logits: Float32Array | Float64Array): { best: number; shift: number } {
  const n = logits.length;
  if (n === 0) throw new UsageError("logits vector is empty");
  let best = 0;
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    const x = logits[i];
    if (x > max) {
      max = x;
      best = i;
    } else if (!(x <= max)) {
      // NaN (x > max and x <= max both false), or +Infinity after an earlier +Infinity
      checkLogits(logits);
    }
  }
  if (max === Infinity) checkLogits(logits);
  if (max === -Infinity) throw new NonFiniteError("all logits are -Infinity: no token has non-zero probability");
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(logits[i] - max);
  return { best, shift: max + Math.log(sum) };
}

/**
 * The greedy choice and its log-probability: argmax(logits) (ties to the lowest id) and log_softmax(logits) there —
 * equal to logSoftmax(logits)[argmax], without writing the float64 row (a 102400-entry row took 6.2 ms through
 * logSoftmax, a host-sampled step of a 32-sequence batch ~200 ms; this takes 1.4). Throws as logSoftmax does.
 */
export function greedyLogprob(logits: Float32Array | Float64Array): { token: number; logprob: number } {
  const { best, shift } = softmaxShift(logits);
  return { token: best, logprob: logits[best] - shift };
}

/**
 * log(softmax(logits)) in float64, stably: shift by the max, sum exp in float64, subtract log of the sum.
 * -Infinity logits give -Infinity log-probabilities. Throws NonFiniteError on NaN/+Infinity or when no logit is finite.
 */
export function logSoftmax(logits: Float32Array | Float64Array): Float64Array {
  return logSoftmaxInto(logits, new Float64Array(logits.length));
}

/**
 * logSoftmax written into `out` (at least as long as the row; returned, cut to it). Writing a freshly allocated
 * 800 KB row costs ~2–4 ms of page faults; a reused one 0.2 ms.
 */
export function logSoftmaxInto(logits: Float32Array | Float64Array, out: Float64Array): Float64Array {
  const n = logits.length;
  if (out.length < n) throw new RangeError(`logSoftmaxInto: ${out.length} entries for a row of ${n}`);
  const { shift } = softmaxShift(logits);
  const row = out.length === n ? out : out.subarray(0, n);
  for (let i = 0; i < n; i++) row[i] = logits[i] - shift;
  return row;
}

/** True when (va, a) ranks strictly before (vb, b): larger value first, ties to the lower id. */
function before(va: number, a: number, vb: number, b: number): boolean {
  return va > vb || (va === vb && a < b);
}

/**
 * Ids of the k largest entries of `values`, best first (descending value, ties broken by lower id).
 * Partial selection with a size-k binary heap whose root is the worst kept entry: O(n log k), no full sort.
 */
export function topIds(values: ArrayLike<number>, k: number): number[] {
  const n = values.length;
  k = Math.min(Math.max(0, Math.floor(k)), n);
  if (k === 0) return [];
  const heap: number[] = [];
  const worse = (a: number, b: number): boolean => before(values[b], b, values[a], a); // a ranks after b
  const siftDown = (i: number): void => {
    for (;;) {
      const l = 2 * i + 1,
        r = l + 1;
      let w = i;
      if (l < heap.length && worse(heap[l], heap[w])) w = l;
      if (r < heap.length && worse(heap[r], heap[w])) w = r;
      if (w === i) return;
      [heap[i], heap[w]] = [heap[w], heap[i]];
      i = w;
    }
  };
  for (let id = 0; id < n; id++) {
    if (heap.length < k) {
      heap.push(id);
      for (let i = heap.length - 1; i > 0; ) {
        const p = (i - 1) >> 1;
        if (!worse(heap[i], heap[p])) break;
        [heap[i], heap[p]] = [heap[p], heap[i]];
        i = p;
      }
    } else if (before(values[id], id, values[heap[0]], heap[0])) {
      heap[0] = id;
      siftDown(0);
    }
  }
  return heap.sort((a, b) => (before(values[a], a, values[b], b) ? -1 : 1));
}

/** The k most likely tokens as [id, logprob] pairs, sorted by descending logprob, ties broken by lower id. */
export function topLogprobs(logprobs: Float64Array | Float32Array, k: number): [number, number][] {
  return topIds(logprobs, k).map((id) => [id, logprobs[id]]);
}
