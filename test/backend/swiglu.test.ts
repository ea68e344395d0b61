// The fast SwiGLU path of the CPU backend (src/backend/cpu/swiglu.ts: gate/up products, silu ⊙ up, down products
// and the weighted sums all in shared memory) against (a) the composition of the same backend's products with f64
// activations in between (moe.ts swigluManyByProducts: same kernels per row, same f64 additions, so the results agree
// to f32 rounding of h) and (b) the plain float64 reference, on fresh random weights and inputs: routed FFNs with token
// subsets and weights, an all-token FFN (shared expert), mixed weight classes, 1…70 tokens, 1–3 threads, the
// work area cut into token ranges, and a type without a kernel (fallback).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { fastSwigluMany } from "../../src/backend/cpu/swiglu.js";
import { plainKernels, type GatedFFN } from "../../src/model/kernels.js";
import { swigluManyByProducts } from "../../src/model/moe.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { Rng } from "../../src/synth/random-blocks.js";
import { randomMatrix } from "../helpers/random-matrix.js";

const backends = [new CpuBackend({ threads: 1 }), new CpuBackend({ threads: 2 }), new CpuBackend({ threads: 3 })];
after(() => backends.forEach((b) => b.close()));

function uniform(rng: Rng): number {
  return (rng.u32() / 4294967296) * 2 - 1;
}

/** routed FFNs (random token subsets, ascending, with weights), then one FFN over all tokens */
function randomFfns(types: readonly [number, number, number], dim: number, F: number, n: number, rng: Rng): GatedFFN[] {
  const ffns: GatedFFN[] = [];
  for (let e = 0; e < 5; e++) {
    const tokens: number[] = [];
    for (let t = 0; t < n; t++) if (rng.u32() % 3 === 0 || (e === 0 && t === n - 1)) tokens.push(t);
    if (tokens.length === 0) continue;
    ffns.push({
      gate: randomMatrix(types[0], F, dim, rng),
      up: randomMatrix(types[1], F, dim, rng),
      down: randomMatrix(types[2], dim, F, rng),
      tokens,
      scale: tokens.map(() => 0.1 + Math.abs(uniform(rng))),
    });
  }
  ffns.push({
    gate: randomMatrix(types[0], F, dim, rng),
    up: randomMatrix(types[1], F, dim, rng),
    down: randomMatrix(types[2], dim, F, rng),
  });
  return ffns;
}

function maxAbs(v: Float64Array): number {
  return v.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
}

function maxDiff(a: Float64Array, b: Float64Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

const CASES: readonly [types: [number, number, number], dim: number, F: number][] = [
  [[GGMLType.Q4_K, GGMLType.Q4_K, GGMLType.Q5_0], 512, 352], // the Q4_K_M expert types (down cols not a 256 multiple)
  [[GGMLType.F32, GGMLType.F32, GGMLType.F32], 96, 40], // f32 activations throughout
  [[GGMLType.Q8_0, GGMLType.Q6_K, GGMLType.IQ4_XS], 768, 256], // gate and up of different classes
  [[GGMLType.F16, GGMLType.Q4_0, GGMLType.Q4_K], 256, 512],
];

for (const [types, dim, F] of CASES) {
  test(`fast SwiGLU FFNs equal the products path and the reference: ${types.map(typeName).join("/")} ${dim}×${F}`, () => {
    const rng = new Rng(7, types.map(typeName).join());
    for (const n of [1, 3, 37, 70]) {
      const ffns = randomFfns(types, dim, F, n, rng);
      const x = new Float64Array(n * dim).map(() => uniform(rng));
      const base = new Float64Array(n * dim).map(() => uniform(rng)); // swigluMany adds into out
      const ref = base.slice();
      swigluManyByProducts(ffns, x, n, dim, ref, plainKernels);
      const scale = maxAbs(ref);
      for (const be of backends) {
        const viaProducts = base.slice();
        swigluManyByProducts(ffns, x, n, dim, viaProducts, be);
        const fast = base.slice();
        be.swigluMany(ffns, x, n, dim, fast);
        const what = `n=${n} threads=${be.threads}`;
        assert.ok(
          maxDiff(fast, viaProducts) <= 1e-6 * scale,
          `${what}: fast vs products ${maxDiff(fast, viaProducts)}`,
        );
        // quantized activations: a few 1e-3 of the largest output; f32 weights: f32 rounding only
        const tol = types[0] === GGMLType.F32 ? 1e-5 * scale : 1e-2 * scale;
        assert.ok(maxDiff(fast, ref) <= tol, `${what}: fast vs reference ${maxDiff(fast, ref)} > ${tol}`);
        assert.ok(maxDiff(fast, base) > 1e-3 * scale, `${what}: the FFNs added nothing`);
      }
    }
  });
}

test("fast SwiGLU: a work area cut into token ranges gives the same sums bit for bit; no room takes the products path", () => {
  const rng = new Rng(11, "split");
  const n = 45;
  const dim = 512;
  const ffns = randomFfns([GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q8_0], dim, 256, n, rng);
  const x = new Float64Array(n * dim).map(() => uniform(rng));
  for (const be of backends) {
    const whole = new Float64Array(n * dim);
    assert.equal(fastSwigluMany(be, ffns, x, n, dim, whole), true);
    const cut = new Float64Array(n * dim);
    assert.equal(fastSwigluMany(be, ffns, x, n, dim, cut, 1 << 16), true); // far below one call's need: ~6 ranges
    assert.deepEqual(cut, whole);
    // no room for even one token's work area: each token goes the products path (same products, f64 in between)
    const tiny = new Float64Array(n * dim);
    assert.equal(fastSwigluMany(be, ffns, x, n, dim, tiny, 1), true);
    assert.ok(maxDiff(tiny, whole) <= 1e-6 * maxAbs(whole), `products path per token: ${maxDiff(tiny, whole)}`);
    assert.equal(fastSwigluMany(be, ffns, x.subarray(0, dim), 1, dim, new Float64Array(dim), 1), false);
  }
});

test("fast SwiGLU: a matrix without a kernel takes the products path", () => {
  const rng = new Rng(13, "fallback");
  const n = 9;
  const dim = 256;
  const ffns = randomFfns([GGMLType.Q2_K, GGMLType.Q4_K, GGMLType.Q4_K], dim, 256, n, rng);
  const x = new Float64Array(n * dim).map(() => uniform(rng));
  const ref = new Float64Array(n * dim);
  swigluManyByProducts(ffns, x, n, dim, ref, plainKernels);
  const be = backends[1];
  assert.equal(fastSwigluMany(be, ffns, x, n, dim, new Float64Array(n * dim)), false);
  const out = new Float64Array(n * dim);
  be.swigluMany(ffns, x, n, dim, out);
  assert.ok(maxDiff(out, ref) <= 1e-2 * maxAbs(ref), `fallback vs reference ${maxDiff(out, ref)}`);
  assert.ok((be.fallbacks.get(`type ${GGMLType.Q2_K}`) ?? 0) > 0);
});
