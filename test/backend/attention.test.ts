// Parity of the CPU backend's absorbed-decode attention kernel (CpuBackend.absorbedAttention: scores, softmax and
// the weighted latent sum in wasm, heads split across threads) with a plain float64 loop, on fresh random inputs:
// head counts that are not multiples of the kernel's groups of 4 and 2, latent widths with tails (not multiples of
// 16 or 4), one key and long caches, cache rows in shared memory (in place) and on the JS heap (copied), 1–3 threads.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { Rng } from "../../src/model/random-blocks.js";

const backends = [new CpuBackend({ threads: 1 }), new CpuBackend({ threads: 2 }), new CpuBackend({ threads: 3 })];
after(() => backends.forEach((b) => b.close()));

function plainAttention(C: ArrayLike<number>, K: ArrayLike<number>, T: number, L: number, R: number, qc: Float64Array, qp: Float64Array, H: number, scale: number): Float64Array {
  const out = new Float64Array(H * L);
  const s = new Float64Array(T);
  for (let h = 0; h < H; h++) {
    let mx = -Infinity;
    for (let t = 0; t < T; t++) {
      let v = 0;
      for (let c = 0; c < L; c++) v += C[t * L + c]! * qc[h * L + c]!;
      for (let r = 0; r < R; r++) v += K[t * R + r]! * qp[h * R + r]!;
      s[t] = v * scale;
      mx = Math.max(mx, s[t]!);
    }
    let sum = 0;
    for (let t = 0; t < T; t++) sum += s[t] = Math.exp(s[t]! - mx);
    for (let t = 0; t < T; t++) for (let c = 0; c < L; c++) out[h * L + c] += (s[t]! / sum) * C[t * L + c]!;
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
    const draw = (n: number, a: number): Float64Array => Float64Array.from({ length: n }, () => (rng.uniform() * 2 - 1) * a);
    const C32 = Float32Array.from(draw(T * L, 1));
    const K32 = Float32Array.from(draw(T * R, 1));
    const qc = draw(H * L, 4 / Math.sqrt(L));
    const qp = draw(H * R, 4 / Math.sqrt(R));
    const scale = 0.9;
    const want = plainAttention(C32, K32, T, L, R, qc, qp, H, scale);
    for (const be of backends) {
      const inArena = be.sharedF32(7, T * L);
      inArena.set(C32);
      for (const [label, C, K] of [["heap f32", C32, K32], ["heap f64", Float64Array.from(C32), Float64Array.from(K32)], ["in place", inArena, K32]] as const) {
        const got = be.absorbedAttention(C, K, T, L, R, qc, qp, H, scale);
        let worst = 0;
        for (let i = 0; i < H * L; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
        assert.ok(worst <= 2e-5, `${be.name} ${label}: max |Δ| ${worst}`);
      }
    }
  });
}
