// Parity of the CPU backend's attention kernels with plain float64 loops on fresh random inputs. Absorbed decode
// (CpuBackend.absorbedAttention: scores, softmax and the weighted latent sum in wasm, heads split across threads):
// head counts that are not multiples of the kernel's groups of 4 and 2, latent widths with tails (not multiples of
// 16 or 4), one key and long caches, cache rows in shared memory (in place) and on the JS heap (copied), 1–3 threads.
// Causal prefill MHA (CpuBackend.prefillAttention): one and many queries, groups of 4 with remainders, with and without
// cached positions before the chunk (pos0), odd head and value widths.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { Rng } from "../../src/synth/random-blocks.js";

// the default kernels (native where built) on 1–3 threads, and WebAssembly's alone
const backends = [
  new CpuBackend({ threads: 1 }),
  new CpuBackend({ threads: 2 }),
  new CpuBackend({ threads: 3 }),
  new CpuBackend({ threads: 2, kernels: "wasm" }),
];
after(() => backends.forEach((b) => b.close()));

function plainAttention(
  C: ArrayLike<number>,
  K: ArrayLike<number>,
  T: number,
  L: number,
  R: number,
  qc: Float64Array,
  qp: Float64Array,
  H: number,
  scale: number,
): Float64Array {
  const out = new Float64Array(H * L);
  const s = new Float64Array(T);
  for (let h = 0; h < H; h++) {
    let mx = -Infinity;
    for (let t = 0; t < T; t++) {
      let v = 0;
      for (let c = 0; c < L; c++) v += C[t * L + c] * qc[h * L + c];
      for (let r = 0; r < R; r++) v += K[t * R + r] * qp[h * R + r];
      s[t] = v * scale;
      mx = Math.max(mx, s[t]);
    }
    let sum = 0;
    for (let t = 0; t < T; t++) sum += s[t] = Math.exp(s[t] - mx);
    for (let t = 0; t < T; t++) for (let c = 0; c < L; c++) out[h * L + c] += (s[t] / sum) * C[t * L + c];
  }
  return out;
}

const SHAPES: readonly [H: number, T: number, L: number, R: number][] = [
  [1, 1, 16, 4],
  [3, 17, 7, 1],
  [5, 64, 33, 3],
  [16, 300, 512, 64],
  [7, 1000, 50, 8],
  [16, 2, 512, 64],
];

for (const [H, T, L, R] of SHAPES) {
  test(`absorbedAttention H=${H} T=${T} L=${L} R=${R}: equals the float64 loop (1–3 threads, heap and in-place rows)`, () => {
    const rng = new Rng(H * 1000 + T, "attention");
    const draw = (n: number, a: number): Float64Array =>
      Float64Array.from({ length: n }, () => (rng.uniform() * 2 - 1) * a);
    const C32 = Float32Array.from(draw(T * L, 1));
    const K32 = Float32Array.from(draw(T * R, 1));
    const qc = draw(H * L, 4 / Math.sqrt(L));
    const qp = draw(H * R, 4 / Math.sqrt(R));
    const scale = 0.9;
    const want = plainAttention(C32, K32, T, L, R, qc, qp, H, scale);
    for (const be of backends) {
      const inArena = be.sharedF32(7, T * L);
      inArena.set(C32);
      for (const [label, C, K] of [
        ["heap f32", C32, K32],
        ["heap f64", Float64Array.from(C32), Float64Array.from(K32)],
        ["in place", inArena, K32],
      ] as const) {
        const got = be.absorbedAttention(C, K, T, L, R, qc, qp, H, scale);
        let worst = 0;
        for (let i = 0; i < H * L; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
        assert.ok(worst <= 2e-5, `${be.name} ${label}: max |Δ| ${worst}`);
      }
    }
  });
}

function plainPrefill(
  q: Float64Array,
  kNope: Float64Array,
  kPe: Float64Array,
  v: Float64Array,
  n: number,
  pos0: number,
  H: number,
  P: number,
  R: number,
  V: number,
  scale: number,
): Float64Array {
  const D = P + R;
  const o = new Float64Array(n * H * V);
  for (let i = 0; i < n; i++) {
    const nk = pos0 + i + 1;
    for (let h = 0; h < H; h++) {
      const s = new Float64Array(nk);
      let mx = -Infinity;
      for (let u = 0; u < nk; u++) {
        let x = 0;
        for (let p = 0; p < P; p++) x += q[(i * H + h) * D + p] * kNope[(u * H + h) * P + p];
        for (let r = 0; r < R; r++) x += q[(i * H + h) * D + P + r] * kPe[u * R + r];
        s[u] = x * scale;
        mx = Math.max(mx, s[u]);
      }
      let sum = 0;
      for (let u = 0; u < nk; u++) sum += s[u] = Math.exp(s[u] - mx);
      for (let u = 0; u < nk; u++)
        for (let d = 0; d < V; d++) o[(i * H + h) * V + d] += (s[u] / sum) * v[(u * H + h) * V + d];
    }
  }
  return o;
}

const PREFILL: readonly [n: number, pos0: number, H: number, P: number, R: number, V: number][] = [
  [1, 0, 1, 16, 4, 16],
  [1, 9, 3, 7, 1, 5],
  [5, 0, 2, 33, 3, 20],
  [6, 11, 5, 12, 8, 17],
  [37, 0, 16, 128, 64, 128],
  [64, 100, 4, 48, 16, 32],
];

for (const [n, pos0, H, P, R, V] of PREFILL) {
  test(`prefillAttention n=${n} pos0=${pos0} H=${H} P=${P} R=${R} V=${V}: equals the causal float64 loop (1–3 threads)`, () => {
    const rng = new Rng(n * 7919 + pos0 * 31 + H, "prefill-attention");
    const T = pos0 + n;
    const draw = (len: number, a: number): Float64Array =>
      Float64Array.from({ length: len }, () => Math.fround((rng.uniform() * 2 - 1) * a));
    const q = draw(n * H * (P + R), 3 / Math.sqrt(P + R));
    const kNope = draw(T * H * P, 1);
    const kPe = draw(T * R, 1);
    const v = draw(T * H * V, 1);
    const want = plainPrefill(q, kNope, kPe, v, n, pos0, H, P, R, V, 0.8);
    for (const be of backends) {
      const got = be.prefillAttention(q, kNope, Float32Array.from(kPe), v, n, pos0, H, P, R, V, 0.8);
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
      assert.ok(worst <= 2e-5, `${be.name}: max |Δ| ${worst}`);
    }
  });
}
