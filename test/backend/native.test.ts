// The native CPU kernels (native/cpu/, AVX-512) against the WebAssembly kernels they stand in for: every product must
// be the same bits — random quant blocks of each native type (fresh each run; the seed is in the messages), odd row
// counts, one to many tokens, block counts that are and are not multiples of the kernels' groups, 1 and 2 threads —
// plus blocks at the extremes of each type's integer range (Q6_K's block sums pass 2³¹) and a model's logits.
// Where the addon is not built the tests skip, except under LATENT_REQUIRE_NATIVE=1 (CI), where that fails.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { loadNativeKernels, nativeUnavailableReason } from "../../src/backend/cpu/native.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { Rng } from "../../src/synth/random-blocks.js";
import { rowBytes } from "../../src/quant/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { LatentCache } from "../../src/model/cache.js";
import { randomMatrix } from "../helpers/random-matrix.js";

const native = loadNativeKernels();
const skip = native === undefined ? `native kernels unavailable: ${nativeUnavailableReason()}` : false;

test("native kernels are built where CI requires them", { skip: process.env.LATENT_REQUIRE_NATIVE !== "1" }, () => {
  assert.ok(native !== undefined, `LATENT_REQUIRE_NATIVE=1 but ${nativeUnavailableReason()}`);
});

const backends =
  native === undefined
    ? []
    : [1, 2].flatMap((threads) => [
        [new CpuBackend({ threads, kernels: "native" }), new CpuBackend({ threads, kernels: "wasm" })] as const,
      ]);
after(() => backends.forEach(([a, b]) => (a.close(), b.close())));

function randomActs(len: number, rng: Rng): Float64Array {
  const v = new Float64Array(len);
  for (let i = 0; i < len; i++) {
    const u = (rng.u32() / 4294967296) * 2 - 1;
    const scale = Math.floor(i / 32) % 5 === 3 ? 1e-3 : Math.floor(i / 32) % 7 === 2 ? 30 : 1;
    v[i] = i % 89 === 5 ? 0 : u * scale;
  }
  return v;
}

function sameBits(a: Float64Array, b: Float64Array, what: string): void {
  for (let i = 0; i < a.length; i++)
    if (!Object.is(a[i], b[i])) assert.fail(`${what}: output ${i} is ${a[i]} native, ${b[i]} WebAssembly`);
}

const TYPES = [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.Q5_0];
// rows × cols × tokens: one row to more than the row group, block counts 1, 3, 5, 9, 44, 65 (K) / 8 … 72 (32 class)
const SHAPES: readonly [rows: number, cols: number, n: number][] = [
  [1, 256, 1],
  [3, 768, 2],
  [4, 1280, 3],
  [5, 2304, 1],
  [7, 256, 5],
  [9, 1024, 8],
  [33, 2304, 4],
  [130, 512, 1],
  [6, 16640, 2],
  [11, 1536, 70],
];

// the 32 class also takes 1408 columns (44 blocks) and a head's short rows (1–4 blocks: one reduction for four rows)
const SHORT_ROWS: readonly [rows: number, cols: number, n: number][] = [
  [17, 1408, 3],
  [2, 1408, 1],
  [130, 128, 1],
  [5, 96, 2],
  [9, 32, 1],
  [4, 64, 1],
  [7, 160, 1],
];

for (const type of TYPES) {
  test(`native ${typeName(type)} products and transposed products equal the WebAssembly kernels' bit for bit`, {
    skip,
  }, () => {
    const seed = Math.floor(Math.random() * 2 ** 31);
    const rng = new Rng(seed, `native-${typeName(type)}`);
    const shapes = type === GGMLType.Q5_0 || type === GGMLType.Q8_0 ? [...SHAPES, ...SHORT_ROWS] : SHAPES;
    for (const [rows, cols, n] of shapes) {
      const w = randomMatrix(type, rows, cols, rng);
      const xStride = cols + 5;
      const yStride = rows + 3;
      const x = randomActs(n * xStride, rng);
      for (const [nat, wasm] of backends) {
        const a = new Float64Array(n * yStride).fill(7);
        const b = new Float64Array(n * yStride).fill(7);
        nat.matmul(w, x, n, xStride, a, yStride);
        wasm.matmul(w, x, n, xStride, b, yStride);
        sameBits(a, b, `seed ${seed}, ${w.name} × ${n} tokens, ${nat.name}`);
        // the transposed product: f32 activations over the rows (some exactly 0: rows skipped), outputs over the columns
        const xt = randomActs(n * (rows + 2), rng);
        const at = new Float64Array(n * (cols + 1)).fill(7);
        const bt = new Float64Array(n * (cols + 1)).fill(7);
        nat.matmulT(w, xt, n, rows + 2, at, cols + 1);
        wasm.matmulT(w, xt, n, rows + 2, bt, cols + 1);
        sameBits(at, bt, `seed ${seed}, ${w.name} transposed × ${n} tokens, ${nat.name}`);
      }
    }
  });
}

/** a matrix whose every block sits at its type's extreme: the largest |weight · scale| the format holds */
function extremeMatrix(type: number, rows: number, cols: number, sign: number): QMatrix {
  const rb = rowBytes(type, cols);
  const data = new Uint8Array(rb * rows);
  const f16one = 0x3c00;
  if (type === GGMLType.Q6_K) {
    // q = 0 → −32, every scale −128: each product is +4096 (or −4096 × −8191 with negative activations)
    for (let o = 0; o < data.length; o += 210) {
      data.fill(0, o, o + 192);
      data.fill(sign > 0 ? 0x80 : 0x7f, o + 192, o + 208);
      data[o + 208] = f16one & 0xff;
      data[o + 209] = f16one >> 8;
    }
  } else if (type === GGMLType.Q4_K) {
    // nibbles 15, scales and mins 63
    for (let o = 0; o < data.length; o += 144) {
      data[o] = f16one & 0xff;
      data[o + 1] = f16one >> 8;
      data[o + 2] = f16one & 0xff;
      data[o + 3] = f16one >> 8;
      data.fill(0xff, o + 4, o + 16);
      data.fill(0xff, o + 16, o + 144);
    }
  } else if (type === GGMLType.Q8_0) {
    for (let o = 0; o < data.length; o += 34) {
      data[o] = f16one & 0xff;
      data[o + 1] = f16one >> 8;
      data.fill(sign > 0 ? 0x80 : 0x7f, o + 2, o + 34);
    }
  } else {
    for (let o = 0; o < data.length; o += 22) {
      data[o] = f16one & 0xff;
      data[o + 1] = f16one >> 8;
      data.fill(0, o + 2, o + 22); // every value −16
    }
  }
  return new QMatrix(`${typeName(type)} extreme`, type, cols, rows, data);
}

test("native products at each type's integer extremes (Q6_K block sums beyond 2³¹) equal WebAssembly's", {
  skip,
}, () => {
  for (const type of TYPES) {
    for (const sign of [1, -1]) {
      const rows = 5;
      const cols = 1024;
      const w = extremeMatrix(type, rows, cols, sign);
      for (const n of [1, 2, 5]) {
        const x = new Float64Array(n * cols).fill(sign > 0 ? 1 : -1);
        for (const [nat, wasm] of backends) {
          const a = new Float64Array(n * rows);
          const b = new Float64Array(n * rows);
          nat.matmul(w, x, n, cols, a, rows);
          wasm.matmul(w, x, n, cols, b, rows);
          sameBits(a, b, `${w.name} sign ${sign}, ${n} tokens, ${nat.name}`);
          if (type === GGMLType.Q6_K)
            assert.ok(Math.abs(a[0]) > 2 ** 31 / 8191, `Q6_K extreme: ${a[0]} is not past 2³¹ in integers`);
        }
      }
    }
  }
});

test("a quantized model on the cpu backend: native kernels give WebAssembly's logits bit for bit", { skip }, () => {
  const path = new URL("../fixtures/models/ds2-v3-mixed-q.gguf", import.meta.url).pathname;
  const run = (cpuKernels: "native" | "wasm") => {
    const { model, config, backend } = loadModel(path, undefined, { backend: "cpu", threads: 2, cpuKernels });
    try {
      assert.equal(backend?.kernels, cpuKernels);
      const cache = new LatentCache(config);
      const out = [model.forward([1, 7, 3, 11, 5, 2, 8], cache, { path: "prefill", logits: "all" })];
      for (const t of [2, 9, 4]) out.push(model.forward([t], cache, { path: "decode", logits: "last" }));
      return out;
    } finally {
      backend?.close();
    }
  };
  assert.deepEqual(run("native"), run("wasm"));
});

test("q8 activations fall back to exact where the native kernels run, and say so", { skip }, () => {
  const notes: string[] = [];
  const be = new CpuBackend({ threads: 1, activations: "q8", onNote: (l) => notes.push(l) });
  try {
    assert.equal(be.kernels, "native");
    assert.equal(be.activations, "exact");
    assert.match(notes.join("\n"), /q8: the native kernels run exact activations faster; using exact/);
  } finally {
    be.close();
  }
});

test("kernels must be native or wasm", () => {
  assert.throws(() => new CpuBackend({ threads: 1, kernels: "cuda" as "wasm" }), /native or wasm/);
});

// attention: head counts off the groups of four (the g < 4 path), widths with tails of 1–15 (lanes of four and
// eight, blocks of sixteen columns), one key to long caches (blocks of four keys with remainders), large scores
// (softmax weights near 0 and 1, exp's range) and masked keys in prefill
const ABSORBED: readonly [H: number, T: number, L: number, R: number, scale: number][] = [
  [1, 1, 16, 4, 0.9],
  [3, 17, 7, 1, 1.3],
  [5, 64, 33, 3, 0.7],
  [16, 301, 512, 64, 0.12],
  [7, 1000, 50, 8, 2.5],
  [16, 2, 512, 64, 40],
  [4, 130, 129, 9, 0.5],
];

test("native absorbed attention equals the WebAssembly kernel's bit for bit", { skip }, () => {
  const seed = Math.floor(Math.random() * 2 ** 31);
  const rng = new Rng(seed, "native-absorbed");
  const draw = (n: number, a: number) => Float64Array.from({ length: n }, () => (rng.uniform() * 2 - 1) * a);
  for (const [H, T, L, R, scale] of ABSORBED) {
    const C = Float32Array.from(draw(T * L, 1));
    const K = Float32Array.from(draw(T * R, 1));
    const qc = draw(H * L, 4 / Math.sqrt(L));
    const qp = draw(H * R, 4 / Math.sqrt(R));
    for (const [nat, wasm] of backends) {
      const a = nat.absorbedAttention(C, K, T, L, R, qc, qp, H, scale);
      const b = wasm.absorbedAttention(C, K, T, L, R, qc, qp, H, scale);
      sameBits(Float64Array.from(a), Float64Array.from(b), `seed ${seed}, H=${H} T=${T} L=${L} R=${R}, ${nat.name}`);
    }
  }
});

const PREFILL: readonly [n: number, pos0: number, H: number, P: number, R: number, V: number][] = [
  [1, 0, 1, 16, 4, 16],
  [1, 9, 3, 7, 1, 5],
  [5, 0, 2, 33, 3, 20],
  [6, 11, 5, 12, 8, 17],
  [37, 0, 16, 128, 64, 128],
  [64, 100, 4, 48, 16, 32],
  [9, 3, 3, 129, 11, 130],
];

test("native prefill attention equals the WebAssembly kernel's bit for bit", { skip }, () => {
  const seed = Math.floor(Math.random() * 2 ** 31);
  const rng = new Rng(seed, "native-prefill");
  for (const [n, pos0, H, P, R, V] of PREFILL) {
    const T = pos0 + n;
    const draw = (len: number, a: number) =>
      Float64Array.from({ length: len }, () => Math.fround((rng.uniform() * 2 - 1) * a));
    const q = draw(n * H * (P + R), 6 / Math.sqrt(P + R));
    const kNope = draw(T * H * P, 1);
    const kPe = Float32Array.from(draw(T * R, 1));
    const v = draw(T * H * V, 1);
    for (const [nat, wasm] of backends) {
      const a = nat.prefillAttention(q, kNope, kPe, v, n, pos0, H, P, R, V, 0.8);
      const b = wasm.prefillAttention(q, kNope, kPe, v, n, pos0, H, P, R, V, 0.8);
      sameBits(
        Float64Array.from(a),
        Float64Array.from(b),
        `seed ${seed}, n=${n} pos0=${pos0} H=${H} P=${P} R=${R} V=${V}, ${nat.name}`,
      );
    }
  }
});
