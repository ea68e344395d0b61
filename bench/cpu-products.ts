/**
 * Single products on the CPU backend, native kernels against WebAssembly, alternating: random blocks of each type the
 * native kernels take, one token (decode) and many (a prompt chunk), the matrix larger than the caches so weights
 * stream from memory as in a model. Prints the median GMAC/s and GB/s of weights per kernel set.
 *
 *   node --import tsx bench/cpu-products.ts [--threads 1] [--rounds 5] [--tokens 1,64]
 */
import { CpuBackend } from "../src/backend/cpu/fast.js";
import { loadNativeKernels, nativeUnavailableReason } from "../src/backend/cpu/native.js";
import { GGMLType, typeName } from "../src/gguf/types.js";
import { Rng } from "../src/synth/random-blocks.js";
import { randomMatrix } from "../test/helpers/random-matrix.js";

function flag(name: string, dflt: string): string {
  const i = process.argv.indexOf(name);
  return i > 0 ? (process.argv[i + 1] ?? dflt) : dflt;
}
const threads = Number(flag("--threads", "1"));
const rounds = Number(flag("--rounds", "5"));
const tokenCounts = flag("--tokens", "1,64").split(",").map(Number);
if (loadNativeKernels() === undefined) {
  console.error(`native kernels unavailable: ${nativeUnavailableReason()}`);
  process.exit(1);
}
// [type, rows, cols]: an expert's gate (Q4_K), down (Q5_0, Q8_0) and the output matrix's shape (Q6_K)
const CASES: readonly [number, number, number][] = [
  [GGMLType.Q4_K, 32768, 2048],
  [GGMLType.Q6_K, 16384, 2048],
  [GGMLType.Q5_0, 32768, 1408],
  [GGMLType.Q8_0, 16384, 2048],
];
const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const sets = (["native", "wasm"] as const).map((kernels) => ({ kernels, be: new CpuBackend({ threads, kernels }) }));
const rng = new Rng(1, "cpu-products");
for (const [type, rows, cols] of CASES) {
  const w = randomMatrix(type, rows, cols, rng);
  for (const n of tokenCounts) {
    const x = Float64Array.from({ length: n * cols }, () => rng.uniform() - 0.5);
    const y = new Float64Array(n * rows);
    const times = new Map<string, number[]>(sets.map((s) => [s.kernels, []]));
    for (const s of sets) s.be.matmul(w, x, n, cols, y, rows); // first use: weights into the arena
    const reps = n === 1 ? 10 : 2;
    for (let r = 0; r < rounds; r++)
      for (const s of sets) {
        const t0 = performance.now();
        for (let i = 0; i < reps; i++) s.be.matmul(w, x, n, cols, y, rows);
        times.get(s.kernels)?.push((performance.now() - t0) / 1000 / reps);
      }
    const line = sets.map((s) => {
      const t = median(times.get(s.kernels) ?? []);
      return `${s.kernels} ${((rows * cols * n) / t / 1e9).toFixed(1)} GMAC/s (${(w.data.length / t / 1e9).toFixed(1)} GB/s)`;
    });
    console.log(
      `${typeName(type)} ${rows}×${cols}, ${n} token${n > 1 ? "s" : ""}, ${threads} thread(s): ${line.join(", ")}`,
    );
  }
}
for (const s of sets) s.be.close();
