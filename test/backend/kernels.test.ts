// Parity of the fast CPU kernels (WebAssembly SIMD, worker pool) with the plain reference kernels on fresh random
// weights (random quant blocks of every supported type) and random activations: several shapes, odd row counts,
// n = 1 and n > 1, strided inputs/outputs, single- and multi-threaded.
//
// Tolerance. matmul with quantized weights quantizes each activation block by rounding to nearest with d = amax/Q
// (Q = 8191 per 256 values for K quants and IQ4_XS, Q = 32767 per 32 values for the 32-blocks), so
// |Δx_c| ≤ d/2 = amax_block(c)/(2Q); the product's error is then bounded by
//   Σ_c |W[r][c]|·amax_block(c)/(2Q)  +  f32 accumulation (1e-5·Σ_c |W[r][c]·x[c]|).
// F32/F16 weights and every transposed product use f32 activations: error ≤ 1e-5·Σ|W·x| + 1e-6.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { plainKernels } from "../../src/model/kernels.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { Rng } from "../../src/synth/random-blocks.js";
import { randomMatrix } from "../helpers/random-matrix.js";

const TYPES = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.Q4_0,
  GGMLType.Q5_0,
  GGMLType.Q8_0,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
];
const K_CLASS = new Set<number>([GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.IQ4_XS]);
const SHAPES: readonly [rows: number, cols: number, n: number][] = [
  [1, 256, 1],
  [7, 512, 1],
  [33, 768, 3],
  [129, 1024, 1],
  [301, 2048, 5],
  [64, 1536, 70], // more tokens than the kernel's token tile
];

// the default kernels (native where built) on 1–3 threads, and WebAssembly's alone
const backends = [
  new CpuBackend({ threads: 1 }),
  new CpuBackend({ threads: 2 }),
  new CpuBackend({ threads: 3 }),
  new CpuBackend({ threads: 2, kernels: "wasm" }),
];
after(() => backends.forEach((b) => b.close()));

function randomVec(len: number, rng: Rng): Float64Array {
  // mixed magnitudes: some blocks tiny, some large, a few zeros
  const v = new Float64Array(len);
  for (let i = 0; i < len; i++) {
    const u = (rng.u32() / 4294967296) * 2 - 1;
    const scale = Math.floor(i / 32) % 5 === 3 ? 0.01 : Math.floor(i / 32) % 7 === 2 ? 20 : 1;
    v[i] = i % 97 === 5 ? 0 : u * scale;
  }
  return v;
}

export const measured = new Map<string, number>();

for (const type of TYPES) {
  test(`fast matmul/matmulT match the plain kernels: ${typeName(type)}`, () => {
    const rng = new Rng(42, typeName(type));
    const quantAct = type !== GGMLType.F32 && type !== GGMLType.F16;
    const bv = K_CLASS.has(type) ? 256 : 32;
    const Q = K_CLASS.has(type) ? 8191 : 32767;
    let worst = 0;
    let worstT = 0;
    let cases = 0;
    for (const [rows, cols, n] of SHAPES) {
      const w = randomMatrix(type, rows, cols, rng);
      const wf = w.toF32();
      const xStride = cols + 3;
      const yStride = rows + 2;
      const x = randomVec(n * xStride, rng);
      const ref = new Float64Array(n * yStride).fill(7);
      plainKernels.matmul(w, x, n, xStride, ref, yStride);
      for (const be of backends) {
        const y = new Float64Array(n * yStride).fill(7);
        be.matmul(w, x, n, xStride, y, yStride);
        for (let t = 0; t < n; t++) {
          for (let r = 0; r < rows; r++) {
            let bound = 0;
            let mag = 0;
            for (let b = 0; b < cols; b += bv) {
              let amax = 0;
              for (let c = b; c < b + bv; c++) amax = Math.max(amax, Math.abs(x[t * xStride + c]));
              for (let c = b; c < b + bv; c++) {
                bound += (Math.abs(wf[r * cols + c]) * amax) / (2 * Q);
                mag += Math.abs(wf[r * cols + c] * x[t * xStride + c]);
              }
            }
            const tol = (quantAct ? bound * 1.0001 : 0) + 1e-5 * mag + 1e-6;
            const err = Math.abs(y[t * yStride + r] - ref[t * yStride + r]);
            assert.ok(err <= tol, `${be.name} ${rows}x${cols} n=${n} t=${t} r=${r}: |Δ| = ${err} > ${tol}`);
            worst = Math.max(worst, err / Math.max(mag, 1e-9));
          }
          for (let r = rows; r < yStride; r++) assert.equal(y[t * yStride + r], 7, "writes outside the output rows");
        }
        cases++;
      }
      // transposed product: x has `rows` values per token
      const xt = randomVec(n * (rows + 1), rng);
      const refT = new Float64Array(n * (cols + 1)).fill(7);
      plainKernels.matmulT(w, xt, n, rows + 1, refT, cols + 1);
      for (const be of backends) {
        const yT = new Float64Array(n * (cols + 1)).fill(7);
        be.matmulT(w, xt, n, rows + 1, yT, cols + 1);
        for (let t = 0; t < n; t++) {
          for (let c = 0; c < cols; c++) {
            let mag = 0;
            for (let r = 0; r < rows; r++) mag += Math.abs(wf[r * cols + c] * xt[t * (rows + 1) + r]);
            const err = Math.abs(yT[t * (cols + 1) + c] - refT[t * (cols + 1) + c]);
            assert.ok(err <= 1e-5 * mag + 1e-6, `${be.name} ᵀ ${rows}x${cols} n=${n}: |Δ| = ${err}`);
            worstT = Math.max(worstT, err / Math.max(mag, 1e-9));
          }
          assert.equal(yT[t * (cols + 1) + cols], 7);
        }
        cases++;
      }
    }
    console.log(
      `# ${typeName(type)}: ${cases} products, max |Δ|/Σ|w·x| matmul ${worst.toExponential(2)}, matmulT ${worstT.toExponential(2)}`,
    );
  });
}

test("types without a fast kernel fall back to the plain kernels; F32 takes any width", () => {
  const rng = new Rng(5, "fallback");
  const be = backends[1];
  for (const [type, cols] of [
    [GGMLType.Q2_K, 256],
    [GGMLType.BF16, 64],
    [GGMLType.F32, 13],
  ] as const) {
    const w = randomMatrix(type, 5, cols, rng);
    const x = randomVec(2 * cols, rng);
    const a = new Float64Array(10);
    const b = new Float64Array(10);
    plainKernels.matmul(w, x, 2, cols, a, 5);
    be.matmul(w, x, 2, cols, b, 5);
    if (type === GGMLType.Q2_K || type === GGMLType.BF16) assert.deepEqual(b, a);
    else for (let i = 0; i < 10; i++) assert.ok(Math.abs(a[i] - b[i]) <= 1e-5 * (1 + Math.abs(a[i])));
  }
  assert.ok([...be.fallbacks.keys()].some((k) => k.startsWith("type")));
});

test("weights placed in shared memory are used in place; other matrices are copied in once", () => {
  const be = new CpuBackend({ threads: 2 });
  try {
    const rng = new Rng(9, "place");
    const src = randomMatrix(GGMLType.Q4_K, 40, 512, rng);
    const placed = be.allocWeight(src.data.length);
    placed.set(src.data);
    const w = new QMatrix("placed", GGMLType.Q4_K, 512, 40, placed);
    const before = be.bytes;
    const x = randomVec(512, rng);
    const a = new Float64Array(40);
    const b = new Float64Array(40);
    be.matmul(w, x, 1, 512, a, 40);
    const afterFirst = be.bytes;
    be.matmul(src, x, 1, 512, b, 40);
    const afterLazy = be.bytes;
    be.matmul(src, x, 1, 512, b, 40);
    assert.deepEqual(a, b);
    assert.ok(afterLazy > afterFirst, "the heap matrix was copied in");
    assert.equal(be.bytes, afterLazy, "and only once");
    assert.ok(afterFirst - before < 4 << 20, "the placed matrix was not copied (only a work area may be added)");
    // expert slices of a placed stacked tensor run in place too
    const slice = w.slice(8, 16);
    const c = new Float64Array(16);
    be.matmul(slice, x, 1, 512, c, 16);
    assert.deepEqual(c, a.subarray(8, 24));
    assert.equal(be.bytes, afterLazy);
  } finally {
    be.close();
  }
});

test("matmulMany: one dispatch for many products equals one matmul per product (mixed types, shared inputs, fallbacks)", () => {
  const rng = new Rng(11, "many");
  const specs: readonly [type: number, rows: number, cols: number, n: number][] = [
    [GGMLType.Q4_K, 70, 512, 1],
    [GGMLType.Q4_K, 33, 512, 1],
    [GGMLType.Q5_0, 129, 256, 1],
    [GGMLType.Q8_0, 5, 1024, 2],
    [GGMLType.Q6_K, 301, 512, 1],
    [GGMLType.Q6_K, 17, 256, 3],
    [GGMLType.F32, 40, 96, 4],
    [GGMLType.Q2_K, 9, 256, 1],
    [GGMLType.IQ4_XS, 64, 512, 5],
    [GGMLType.Q4_0, 1, 64, 1],
  ];
  const mats = specs.map(([type, rows, cols]) => randomMatrix(type, rows, cols, rng));
  // products 0 and 1 share one input object (as an expert's gate and up do); the rest have their own
  const xs = specs.map(([, , cols, n], i) => (i === 1 ? undefined : randomVec(n * (cols + 1), rng)));
  const xOf = (i: number): Float64Array => xs[i === 1 ? 0 : i]!;
  for (const be of backends) {
    const want = specs.map(([, rows, cols, n], i) => {
      const y = new Float64Array(n * (rows + 2)).fill(7);
      be.matmul(mats[i], xOf(i), n, cols + 1, y, rows + 2);
      return y;
    });
    const got = specs.map(([, rows, , n]) => new Float64Array(n * (rows + 2)).fill(7));
    be.matmulMany(
      specs.map(([, rows, cols, n], i) => ({
        w: mats[i],
        x: xOf(i),
        n,
        xStride: cols + 1,
        y: got[i],
        yStride: rows + 2,
      })),
    );
    specs.forEach(([type], i) => assert.deepEqual(got[i], want[i], `${be.name} product ${i} (${typeName(type)})`));
  }
});

test("Q6_K single-token products use a repacked copy; a slice starting where a whole matrix starts gets its own", () => {
  const rng = new Rng(13, "q6kr");
  const w = randomMatrix(GGMLType.Q6_K, 96, 512, rng);
  const x = randomVec(512, rng);
  const ref = new Float64Array(96);
  plainKernels.matmul(w, x, 1, 512, ref, 96);
  const be = new CpuBackend({ threads: 2 });
  try {
    const head = new Float64Array(10);
    be.matmul(w.slice(0, 10), x, 1, 512, head, 10);
    const all = new Float64Array(96);
    be.matmul(w, x, 1, 512, all, 96);
    const three = new Float64Array(3 * 96);
    const x3 = new Float64Array(3 * 512);
    for (let t = 0; t < 3; t++) x3.set(x, t * 512);
    be.matmul(w, x3, 3, 512, three, 96); // n = 3: the unpacking kernel on the original blocks
    let mag = 0;
    for (let i = 0; i < 96; i++) mag = Math.max(mag, Math.abs(ref[i]));
    for (let r = 0; r < 96; r++) {
      assert.ok(Math.abs(all[r] - ref[r]) <= 1e-3 * mag, `row ${r}: ${all[r]} vs ${ref[r]}`);
      assert.ok(Math.abs(three[r] - all[r]) <= 1e-5 * mag, `row ${r}: repacked ${all[r]} vs unpacked ${three[r]}`);
      if (r < 10) assert.equal(head[r], all[r]);
    }
  } finally {
    be.close();
  }
});
