// The opt-in 8-bit-activation kernels (CpuBackend activations "q8", kernels.as quantize8/dotQ4K8/dotQ4K8x24/dotQ4K8u24/dotQ5_08/
// dotQ5R8/dotQ6KR8) against a plain TypeScript model of the same 8-bit math: the activations rounded as ggml's Q8_K/Q8_0 (f32
// scale amax/127, nearest even), exact integer sums, the same f32 operations in the same order. Results must be equal
// bit for bit. Inputs are fresh random numbers each run (the seed is in the messages).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend, relaxedSimdAvailable } from "../../src/backend/cpu/fast.js";
import { GGMLType } from "../../src/gguf/types.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { fillRandom, Rng } from "../../src/synth/random-blocks.js";
import { rowBytes } from "../../src/quant/index.js";
import { f16ToF32 } from "../../src/quant/f16.js";
import { scaleMinK4 } from "../../src/quant/kquants.js";
import { loadModel } from "../../src/runtime/load.js";
import { LatentCache } from "../../src/model/cache.js";

const fr = Math.fround;
const noRelaxed = relaxedSimdAvailable() ? false : "this V8 has no relaxed SIMD";
const q8 = new CpuBackend({ threads: 2, activations: "q8", kernels: "wasm" });
const q8one = new CpuBackend({ threads: 1, activations: "q8", kernels: "wasm" });
// without the Q5_0R copies: Q5_0 products read the Q5_0 blocks (dotQ5_08)
const q8nocopy = new CpuBackend({
  threads: 2,
  activations: "q8",
  kernels: "wasm",
  copyHeadroom: Number.POSITIVE_INFINITY,
});
after(() => {
  q8.close();
  q8one.close();
  q8nocopy.close();
});

/** round half to even, as f32x4.nearest */
function nearest(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** one token's 8-bit activations: i8 values, an f32 scale per block of bv (as quantize8) */
function quant8(x: Float64Array, bv: number): { q: Int8Array; d: Float32Array } {
  const nb = x.length / bv;
  const q = new Int8Array(x.length);
  const d = new Float32Array(nb);
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let i = b * bv; i < (b + 1) * bv; i++) amax = Math.max(amax, Math.abs(fr(x[i])));
    d[b] = fr(amax / 127);
    const id = d[b] !== 0 ? fr(1 / d[b]) : 0;
    for (let i = b * bv; i < (b + 1) * bv; i++) q[i] = Math.max(-128, Math.min(127, nearest(fr(fr(x[i]) * id))));
  }
  return { q, d };
}

const u16 = (w: Uint8Array, o: number): number => w[o] | (w[o + 1] << 8);

/** Q4_K row · 8-bit activations: Σi = Σ_j sc_j·Σ a·nibble, Σm = Σ_j m_j·Σ a; acc += Σi·(d·da) − Σm·(dmin·da) */
function modelQ4K(w: Uint8Array, o: number, nb: number, a: { q: Int8Array; d: Float32Array }): number {
  const pair = new Int32Array(2);
  let acc = 0;
  for (let b = 0; b < nb; b++) {
    const p = o + b * 144;
    let si = 0;
    let sm = 0;
    for (let j = 0; j < 8; j++) {
      scaleMinK4(j, w, p + 4, pair);
      let s = 0;
      let sa = 0;
      for (let i = 0; i < 32; i++) {
        const byte = w[p + 16 + (j >> 1) * 32 + i];
        const nib = j % 2 === 0 ? byte & 15 : byte >> 4;
        const av = a.q[b * 256 + j * 32 + i];
        s += av * nib;
        sa += av;
      }
      si += pair[0] * s;
      sm += pair[1] * sa;
    }
    const da = a.d[b];
    const t0 = fr(fr(si) * fr(f16ToF32(u16(w, p)) * da));
    const t3 = fr(fr(sm) * fr(f16ToF32(u16(w, p + 2)) * da));
    acc = fr(acc + fr(t0 - t3));
  }
  return acc;
}

/** Q5_0 row: per block Σ a·(q − 16), acc += Σ·(d·da) */
function modelQ5_0(w: Uint8Array, o: number, nb: number, a: { q: Int8Array; d: Float32Array }): number {
  let acc = 0;
  for (let b = 0; b < nb; b++) {
    const p = o + b * 22;
    const qh = (w[p + 2] | (w[p + 3] << 8) | (w[p + 4] << 16) | (w[p + 5] << 24)) >>> 0;
    let s = 0;
    for (let j = 0; j < 16; j++) {
      const lo = (w[p + 6 + j] & 15) | (((qh >>> j) & 1) << 4);
      const hi = (w[p + 6 + j] >> 4) | (((qh >>> (j + 16)) & 1) << 4);
      s += a.q[b * 32 + j] * (lo - 16) + a.q[b * 32 + 16 + j] * (hi - 16);
    }
    acc = fr(acc + fr(fr(s) * fr(f16ToF32(u16(w, p)) * a.d[b])));
  }
  return acc;
}

/** Q6_K row (what its repacked copy holds): per block Σ_g sc_g·Σ a·(q − 32), acc += Σ·(d·da) */
function modelQ6K(w: Uint8Array, o: number, nb: number, a: { q: Int8Array; d: Float32Array }): number {
  let acc = 0;
  for (let b = 0; b < nb; b++) {
    const p = o + b * 210;
    const q = new Int32Array(256);
    for (let nh = 0; nh < 2; nh++) {
      for (let j = 0; j < 32; j++) {
        const x = w[p + nh * 64 + j];
        const y = w[p + nh * 64 + 32 + j];
        const h = w[p + 128 + nh * 32 + j];
        q[nh * 128 + j] = ((x & 15) | ((h & 3) << 4)) - 32;
        q[nh * 128 + 32 + j] = ((y & 15) | (((h >> 2) & 3) << 4)) - 32;
        q[nh * 128 + 64 + j] = ((x >> 4) | (((h >> 4) & 3) << 4)) - 32;
        q[nh * 128 + 96 + j] = ((y >> 4) | (((h >> 6) & 3) << 4)) - 32;
      }
    }
    let s = 0;
    for (let g = 0; g < 16; g++) {
      const sc = (w[p + 192 + g] << 24) >> 24;
      let sg = 0;
      for (let i = 0; i < 16; i++) sg += a.q[b * 256 + g * 16 + i] * q[g * 16 + i];
      s += sc * sg;
    }
    acc = fr(acc + fr(fr(s) * fr(f16ToF32(u16(w, p + 208)) * a.d[b])));
  }
  return acc;
}

// Q4_K takes 8-bit activations for any token count (more than two: two rows × four tokens, dotQ4K8x24, and from
// eight tokens on rows cut once per chunk, dotQ4K8u24); token counts 3, 5, 9 and 13 leave remainders of the
// four-token groups, the odd row count a row without a partner
const CASES = [
  {
    type: GGMLType.Q4_K,
    name: "Q4_K",
    bv: 256,
    bytes: 144,
    model: modelQ4K,
    blocks: [1, 3, 5, 9],
    tokens: [1, 2, 3, 5, 9, 13],
  },
  // Q5_0 (products of one or two tokens) from its Q5_0R copy (dotQ5R8) and without one (dotQ5_08)
  { type: GGMLType.Q5_0, name: "Q5_0", bv: 32, bytes: 22, model: modelQ5_0, blocks: [1, 3, 7, 13, 44], tokens: [1, 2] },
  {
    type: GGMLType.Q6_K,
    name: "Q6_K (repacked)",
    bv: 256,
    bytes: 210,
    model: modelQ6K,
    blocks: [1, 3, 7],
    tokens: [1, 2],
  },
];

for (const c of CASES) {
  for (const nb of c.blocks) {
    for (const n of c.tokens) {
      test(`q8 ${c.name}: ${nb} blocks per row, ${n} token(s), 1 and 2 threads equal the 8-bit model and each token alone bit for bit`, {
        skip: noRelaxed,
      }, () => {
        const seed = Math.floor(Math.random() * 2 ** 31);
        const rng = new Rng(seed, `q8-${c.name}-${nb}-${n}`);
        const cols = nb * c.bv;
        const rows = 2 * Math.ceil((1 << 17) / cols) + 1; // enough work for the threads to split it, odd
        const data = new Uint8Array(rowBytes(c.type, cols) * rows);
        fillRandom(c.type, data, rows * cols, 0.5, rng);
        const w = new QMatrix("w", c.type, cols, rows, data);
        const x = new Float64Array(n * cols);
        // a wide range of magnitudes inside a block, every fifth block zero
        for (let i = 0; i < x.length; i++)
          x[i] = (rng.uniform() - 0.5) * (1 + (i % 23)) * (Math.floor(i / c.bv) % 5 === 4 ? 0 : 1);
        // each token's first block: scale exactly 1 and two ties that nearest-even rounds down in magnitude
        for (let t = 0; t < n; t++) x.set([127, 2.5, -3.5], t * cols);
        const want = new Float64Array(n * rows);
        for (let t = 0; t < n; t++) {
          const a = quant8(x.subarray(t * cols, (t + 1) * cols), c.bv);
          for (let r = 0; r < rows; r++) want[t * rows + r] = c.model(data, r * w.rowBytes, nb, a);
        }
        for (const be of c.type === GGMLType.Q5_0 ? [q8, q8one, q8nocopy] : [q8, q8one]) {
          const y = new Float64Array(n * rows);
          be.matmul(w, x, n, cols, y, rows);
          for (let i = 0; i < y.length; i++)
            if (y[i] !== want[i])
              assert.fail(`seed ${seed}, ${be.name}: output ${i} is ${y[i]}, the model says ${want[i]}`);
          // batch invariance: each token alone (the single-token kernel) gives the same bits
          if (n > 1) {
            for (let t = 0; t < n; t++) {
              const y1 = new Float64Array(rows);
              be.matmul(w, x.subarray(t * cols, (t + 1) * cols), 1, cols, y1, rows);
              for (let r = 0; r < rows; r++)
                if (y1[r] !== y[t * rows + r])
                  assert.fail(
                    `seed ${seed}, ${be.name}: token ${t} row ${r} alone is ${y1[r]}, in the batch ${y[t * rows + r]}`,
                  );
            }
          }
        }
      });
    }
  }
}

test("q8: Q8_0 keeps the exact path, and Q5_0 products of 3 or more tokens use exact activations", () => {
  const exact = new CpuBackend({ threads: 1 });
  try {
    const rng = new Rng(Math.floor(Math.random() * 2 ** 31), "q8-exact-types");
    for (const [type, cols, n] of [
      [GGMLType.Q8_0, 96, 1],
      [GGMLType.Q5_0, 96, 4],
    ] as const) {
      const rows = 9;
      const data = new Uint8Array(rowBytes(type, cols) * rows);
      fillRandom(type, data, rows * cols, 0.5, rng);
      const w = new QMatrix("w", type, cols, rows, data);
      const x = new Float64Array(n * cols).map(() => rng.uniform() - 0.5);
      const [a, b] = [new Float64Array(n * rows), new Float64Array(n * rows)];
      q8one.matmul(w, x, n, cols, a, rows);
      exact.matmul(w, x, n, cols, b, rows);
      assert.deepEqual(a, b, `type ${type}, n = ${n}`);
    }
  } finally {
    exact.close();
  }
});

test("q8 without relaxed SIMD: one line on stderr's channel, then the exact path", () => {
  const notes: string[] = [];
  const be = new CpuBackend({
    threads: 1,
    activations: "q8",
    kernels: "wasm",
    relaxedSimd: () => false,
    onNote: (l) => notes.push(l),
  });
  const exact = new CpuBackend({ threads: 1 });
  try {
    assert.equal(be.activations, "exact");
    assert.equal(notes.length, 1);
    assert.match(notes[0], /relaxed SIMD is not available.*exact/);
    const rng = new Rng(5, "q8-fallback");
    const cols = 512;
    const rows = 7;
    const data = new Uint8Array(rowBytes(GGMLType.Q4_K, cols) * rows);
    fillRandom(GGMLType.Q4_K, data, rows * cols, 0.5, rng);
    const w = new QMatrix("w", GGMLType.Q4_K, cols, rows, data);
    const x = new Float64Array(cols).map(() => rng.uniform() - 0.5);
    const [a, b] = [new Float64Array(rows), new Float64Array(rows)];
    be.matmul(w, x, 1, cols, a, rows);
    exact.matmul(w, x, 1, cols, b, rows);
    assert.deepEqual(a, b);
  } finally {
    be.close();
    exact.close();
  }
});

test("activations must be exact or q8", () => {
  assert.throws(() => new CpuBackend({ threads: 1, activations: "q4" as "q8" }), /exact or q8/);
});

test("a model on the cpu backend: activations 'exact' gives the default logits bit for bit, q8 stays close", {
  skip: noRelaxed,
}, () => {
  const path = new URL("../fixtures/models/ds2-v3-mixed-q.gguf", import.meta.url).pathname;
  const run = (activations?: "exact" | "q8") => {
    const { model, config, backend } = loadModel(path, undefined, {
      backend: "cpu",
      threads: 2,
      cpuKernels: "wasm", // q8's kernels are WebAssembly's (with the native kernels q8 falls back to exact)
      ...(activations === undefined ? {} : { cpuActivations: activations }),
    });
    try {
      assert.equal(backend?.activations, activations ?? "exact");
      const cache = new LatentCache(config);
      const prompt = [1, 7, 3, 11, 5];
      const out = [model.forward(prompt, cache, { path: "prefill", logits: "last" })];
      for (const t of [2, 9, 4]) out.push(model.forward([t], cache, { path: "decode", logits: "last" }));
      return out;
    } finally {
      backend?.close();
    }
  };
  const dflt = run();
  assert.deepEqual(run("exact"), dflt);
  const q = run("q8");
  let differs = false;
  q.forEach((l, s) => {
    const ref = dflt[s];
    for (let i = 0; i < l.length; i++) {
      if (l[i] !== ref[i]) differs = true;
      assert.ok(Math.abs(l[i] - ref[i]) < 0.5, `step ${s}, logit ${i}: ${l[i]} vs ${ref[i]}`);
    }
  });
  assert.ok(differs, "q8 mode changed nothing: its kernels did not run");
});
