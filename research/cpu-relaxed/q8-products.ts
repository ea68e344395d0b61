/**
 * Products of `tokens` tokens (default 1), exact against q8 activations, in one process on one thread: a CpuBackend of each mode,
 * alternating matrix by matrix; GMAC/s medians of the rounds and the median per-round ratio. Matrices are random,
 * shaped as in a v2-lite Q4_K_M file (expert gate/up Q4_K 1408×2048, expert down Q5_0 2048×1408, the output head's
 * Q6_K ×2048, here 16384 rows). The first product of each (and the Q6_K repack) runs before timing.
 *
 * With more than two tokens the Q6_K shape is left out (its products then take the exact path in both modes).
 *
 *   node --import tsx research/cpu-relaxed/q8-products.ts [rounds 9] [reps 20] [tokens 1]
 */
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { GGMLType } from "../../src/gguf/types.js";
import { rowBytes } from "../../src/quant/index.js";
import { fillRandom, Rng } from "../../src/synth/random-blocks.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";

const rounds = Number(process.argv[2] ?? 9);
const reps = Number(process.argv[3] ?? 20);
const tokens = Number(process.argv[4] ?? 1);
const backends = { exact: new CpuBackend({ threads: 1 }), q8: new CpuBackend({ threads: 1, activations: "q8" }) };
const rng = new Rng(1, "q8-products");
const shapes = [
  { name: "Q4_K 1408×2048", type: GGMLType.Q4_K, rows: 1408, cols: 2048 },
  { name: "Q5_0 2048×1408", type: GGMLType.Q5_0, rows: 2048, cols: 1408 },
  { name: "Q6_K 16384×2048", type: GGMLType.Q6_K, rows: 16384, cols: 2048 },
];
const med = (xs: number[]): number => {
  const v = [...xs].sort((a, b) => a - b);
  return v.length % 2 ? v[v.length >> 1] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const loads: number[] = [];
for (const s of shapes.filter((s) => tokens <= 2 || s.type !== GGMLType.Q6_K)) {
  const data = new Uint8Array(rowBytes(s.type, s.cols) * s.rows);
  fillRandom(s.type, data, s.rows * s.cols, 0.5, rng);
  // each backend reads its own copy (copied into its arena at first use)
  const w = {
    exact: new QMatrix("w", s.type, s.cols, s.rows, data),
    q8: new QMatrix("w", s.type, s.cols, s.rows, data.slice()),
  };
  const x = new Float64Array(tokens * s.cols).map(() => rng.uniform() - 0.5);
  const y = new Float64Array(tokens * s.rows);
  const rate = { exact: [] as number[], q8: [] as number[] };
  const ratio: number[] = [];
  for (const m of ["exact", "q8"] as const) backends[m].matmul(w[m], x, tokens, s.cols, y, s.rows);
  for (let r = 0; r < rounds; r++) {
    loads.push(loadavg()[0]);
    const got = { exact: 0, q8: 0 };
    for (const m of r % 2 ? (["q8", "exact"] as const) : (["exact", "q8"] as const)) {
      const t0 = performance.now();
      for (let i = 0; i < reps; i++) backends[m].matmul(w[m], x, tokens, s.cols, y, s.rows);
      got[m] = (reps * tokens * s.rows * s.cols) / ((performance.now() - t0) * 1e6);
      rate[m].push(got[m]);
    }
    ratio.push(got.q8 / got.exact);
  }
  console.log(
    `${s.name}, ${tokens} token(s): exact ${med(rate.exact).toFixed(2)} GMAC/s, q8 ${med(rate.q8).toFixed(2)} GMAC/s, q8/exact median ${med(ratio).toFixed(3)}× (${Math.min(...ratio).toFixed(2)}–${Math.max(...ratio).toFixed(2)})`,
  );
}
console.log(`load average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`);
for (const b of Object.values(backends)) b.close();
