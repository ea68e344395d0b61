/** Plain CPU kernels of the reference engine. Activations are float64; weights arrive as dequantized float32 rows. */

export type Vec = Float64Array;

export function dot(a: ArrayLike<number>, aOff: number, b: ArrayLike<number>, bOff: number, n: number): number {
  let s = 0;
  for (let i = 0; i < n; i++) s += a[aOff + i] * b[bOff + i];
  return s;
}

/** out = x / rms(x) · w (RMSNorm); x and out may alias. */
export function rmsNorm(
  x: Vec,
  xOff: number,
  w: Float32Array,
  eps: number,
  out: Vec,
  outOff: number,
  n = w.length,
): void {
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[xOff + i] * x[xOff + i];
  const inv = 1 / Math.sqrt(ss / n + eps);
  for (let i = 0; i < n; i++) out[outOff + i] = x[xOff + i] * inv * w[i];
}

/** LayerNorm with weight and bias; x and out may alias. */
export function layerNorm(
  x: Vec,
  xOff: number,
  w: Float32Array,
  b: Float32Array,
  eps: number,
  out: Vec,
  outOff: number,
  n = w.length,
): void {
  let mean = 0;
  for (let i = 0; i < n; i++) mean += x[xOff + i];
  mean /= n;
  let v = 0;
  for (let i = 0; i < n; i++) {
    const d = x[xOff + i] - mean;
    v += d * d;
  }
  const inv = 1 / Math.sqrt(v / n + eps);
  for (let i = 0; i < n; i++) out[outOff + i] = (x[xOff + i] - mean) * inv * w[i] + b[i];
}

export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

export function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

/** In-place softmax over x[off .. off+n); entries of −Infinity get probability 0. */
export function softmaxInPlace(x: Vec, off: number, n: number): void {
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (x[off + i] > max) max = x[off + i];
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const e = x[off + i] === -Infinity ? 0 : Math.exp(x[off + i] - max);
    x[off + i] = e;
    sum += e;
  }
  for (let i = 0; i < n; i++) x[off + i] /= sum;
}

/** Indices of the k largest values (ties → lower index first), in descending order of value. */
export function topK(values: ArrayLike<number>, k: number): number[] {
  const idx: number[] = [];
  for (let i = 0; i < values.length; i++) idx.push(i);
  idx.sort((a, b) => values[b] - values[a] || a - b);
  return idx.slice(0, k);
}
