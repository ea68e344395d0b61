// The CPU backend's work sharing: threads claim units of a job one at a time under a generation tag (fast.ts Pool.run).
// Thousands of consecutive parallel jobs (past the 4096-generation wrap of the tag) on 3 threads must give results
// bit-identical to one thread, for single products (row units), matmulMany (cost pieces) and attention (head units).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend, kernelModule, Pool } from "../../src/backend/cpu/fast.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { GGMLType } from "../../src/gguf/types.js";
import { fillRandom, Rng } from "../../src/synth/random-blocks.js";
import { rowBytes } from "../../src/quant/index.js";

const one = new CpuBackend({ threads: 1 });
const three = new CpuBackend({ threads: 3 });
after(() => [one, three].forEach((b) => b.close()));

function matrix(type: number, rows: number, cols: number, rng: Rng): QMatrix {
  const data = new Uint8Array(rowBytes(type, cols) * rows);
  fillRandom(type, data, rows * cols, 0.5, rng);
  return new QMatrix(`m${rows}`, type, cols, rows, data);
}

test("5000 consecutive parallel jobs on 3 threads equal 1 thread bit for bit (tag wraps at 4096)", () => {
  const rng = new Rng(3, "pool");
  const a = matrix(GGMLType.Q4_K, 130, 1024, rng); // 130·1024 ≥ 2¹⁷ multiply-adds: parallel
  const b = matrix(GGMLType.Q8_0, 67, 2048, rng);
  const x = Float64Array.from({ length: 2 * 2048 }, () => rng.uniform() - 0.5);
  const H = 5,
    T = 600,
    L = 64,
    R = 8; // 5·600·64 ≥ 2¹⁷: parallel
  const C = Float64Array.from({ length: T * L }, () => rng.uniform() - 0.5);
  const K = Float64Array.from({ length: T * R }, () => rng.uniform() - 0.5);
  const qc = Float64Array.from({ length: H * L }, () => rng.uniform() - 0.5);
  const qp = Float64Array.from({ length: H * R }, () => rng.uniform() - 0.5);
  const want = {
    a: new Float64Array(130),
    b: new Float64Array(2 * 67),
    attn: one.absorbedAttention(C, K, T, L, R, qc, qp, H, 0.5),
  };
  one.matmul(a, x, 1, 1024, want.a, 130);
  one.matmulMany([{ w: b, x, n: 2, xStride: 2048, y: want.b, yStride: 67 }]);
  const ya = new Float64Array(130);
  const yb = new Float64Array(2 * 67);
  for (let i = 0; i < 5000; i++) {
    const kind = i % 3;
    if (kind === 0) {
      three.matmul(a, x, 1, 1024, ya, 130);
      assert.deepEqual(ya, want.a, `job ${i}: matmul`);
    } else if (kind === 1) {
      three.matmulMany([{ w: b, x, n: 2, xStride: 2048, y: yb, yStride: 67 }]);
      assert.deepEqual(yb, want.b, `job ${i}: matmulMany`);
    } else if (i % 30 === 2) {
      assert.deepEqual(three.absorbedAttention(C, K, T, L, R, qc, qp, H, 0.5), want.attn, `job ${i}: attention`);
    }
  }
});

/**
 * The job words of a Q8_0 matmul (OP_MATMUL, arena 0): `rows` rows of 32 columns at byte `w`, one token, activations,
 * scales and outputs at fixed offsets past 64 KiB (fast.ts runUnit reads P[2..17]).
 */
function q8Job(w: number, rows: number): number[] {
  const aq = 65536,
    ad = aq + 64,
    as = aq + 128,
    y = aq + 256,
    S = 2 * 65536;
  return [1, 0, GGMLType.Q8_0, w, 34, rows, 32, 1, 0, 32, aq, ad, as, y, 64, 8, S, 4096];
}

test("a unit that throws fails the job with an error instead of leaving the caller waiting", {
  timeout: 60_000,
}, () => {
  const module = kernelModule("exact");
  const memory = new WebAssembly.Memory({ initial: 17, maximum: 64, shared: true });
  const inst = new WebAssembly.Instance(module, { env: { memory } }).exports as unknown as Parameters<
    Pool["run"]
  >[1][0];
  // 64 rows of one Q8_0 block (d = 1.0, random values) at 3·64 KiB, one token of i16 activations with scale 1
  const rng = new Rng(5, "pool-failure");
  const bytes = new Uint8Array(memory.buffer);
  const W = 3 * 65536;
  const q = Int8Array.from({ length: 64 * 32 }, () => (rng.u32() % 255) - 127);
  for (let r = 0; r < 64; r++) {
    bytes.set([0x00, 0x3c], W + r * 34);
    bytes.set(new Uint8Array(q.buffer, r * 32, 32), W + r * 34 + 2);
  }
  const a = Int16Array.from({ length: 32 }, () => (rng.u32() % 65535) - 32767);
  new Int16Array(memory.buffer, 65536, 32).set(a);
  new Float32Array(memory.buffer, 65536 + 64, 1)[0] = 1;
  const want = Array.from({ length: 64 }, (_, r) => Math.fround(a.reduce((t, v, i) => t + v * q[r * 32 + i], 0)));
  for (const threads of [1, 2, 3]) {
    const pool = new Pool(threads, module, "");
    try {
      pool.attach([memory]);
      // weights past the end of the memory: every unit traps, on the caller and in the workers
      pool.job.set(q8Job(60 * 65536, 64));
      assert.throws(() => pool.run(2 * threads, [inst]), /a CPU kernel failed/);
      // the pool still works afterwards: every row computed (exact integer sums, rounded once to f32)
      const y = new Float32Array(memory.buffer, 65536 + 256, 64);
      y.fill(Number.NaN);
      pool.job.set(q8Job(W, 64));
      pool.run(2 * threads, [inst]);
      assert.deepEqual(Array.from(y), want, `${threads} thread(s)`);
    } finally {
      pool.close();
    }
  }
});
