/**
 * Micro-benchmark of one MoE layer on the CPU backend: routed experts + shared experts of layer `--layer` of a model
 * for `--tokens` random tokens, the fast SwiGLU path (CpuBackend.swigluMany: everything between the products in
 * shared memory) against the composition of `matmulMany` products with f64 activations in between, interleaved in
 * one process over the same weights; prints each side's best and median time. Not a test.
 *
 *   npx tsx bench/cpu-moe.ts MODEL.gguf [--tokens 512] [--threads 1] [--reps 7] [--layer 1]
 */
import { performance } from "node:perf_hooks";
import { loadModel } from "../src/runtime/load.js";
import { mixExperts, routeTokens, routerLogitsOf, swigluManyByProducts } from "../src/model/moe.js";
import type { CpuBackend } from "../src/backend/cpu/fast.js";
import type { MatKernels } from "../src/model/kernels.js";
import { parseArgs } from "node:util";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    tokens: { type: "string" },
    threads: { type: "string" },
    reps: { type: "string" },
    layer: { type: "string" },
  },
});
const path = positionals[0];
const n = Number(values.tokens ?? 512);
const threads = Number(values.threads ?? 1);
const reps = Number(values.reps ?? 7);
const layer = Number(values.layer ?? 1);
const { model, config, backend } = loadModel(path, undefined, { backend: "cpu", threads });
const be = backend as unknown as CpuBackend;
const w = model.weights.layers[layer].moe;
if (w === undefined) throw new Error(`layer ${layer} has no MoE`);
const Hd = config.nEmbd;
const x = new Float64Array(n * Hd).map(() => Math.random() * 2 - 1);
const routes = routeTokens(routerLogitsOf(w, config, x, n, be), n, config, w.bias);
const byProducts: MatKernels = {
  name: "products",
  matmul: be.matmul.bind(be),
  matmulT: be.matmulT.bind(be),
  swigluMany: (ffns, xx, nn, dim, out) => swigluManyByProducts(ffns, xx, nn, dim, out, be),
};
const outs = [new Float64Array(n * Hd), new Float64Array(n * Hd)];
const times: number[][] = [[], []];
const sides: MatKernels[] = [be, byProducts];
for (let r = 0; r < reps + 1; r++) {
  for (let s = 0; s < 2; s++) {
    const t0 = performance.now();
    mixExperts(w, config, routes, x, n, outs[s], sides[s]);
    if (r > 0) times[s].push(performance.now() - t0);
  }
}
let maxDiff = 0;
for (let i = 0; i < outs[0].length; i++) maxDiff = Math.max(maxDiff, Math.abs(outs[0][i] - outs[1][i]));
const stat = (v: number[]): string => {
  const s = [...v].sort((a, b) => a - b);
  return `best ${s[0].toFixed(1)} ms, median ${s[s.length >> 1].toFixed(1)} ms`;
};
console.log(`MoE layer ${layer}, ${n} tokens, ${threads} thread(s), ${reps} interleaved reps`);
console.log(`  fast SwiGLU path:        ${stat(times[0])}`);
console.log(`  products + f64 between:  ${stat(times[1])}`);
console.log(`  max |difference| of the outputs: ${maxDiff.toExponential(2)}`);
backend?.close();
