/**
 * Single-token products of a loaded model's matrices on the CPU backend, one thread: GMAC/s per kind of matrix
 * (routed experts' gate of layer 1 and down of layers 1 and 4, attention q, the output head), each product on its own,
 * cycling over the 64 experts so that the weights come from memory as in decode. Not a test.
 *   node --import tsx research/cpu-relaxed/products.ts MODEL.gguf [reps 5]
 */
import { performance } from "node:perf_hooks";
import { loadModel } from "../../src/runtime/load.js";
import type { QMatrix } from "../../src/tensor/qmatrix.js";

const path = process.argv[2];
const reps = Number(process.argv[3] ?? 5);
const { model, backend } = loadModel(path, undefined, { backend: "cpu", threads: 1 });
if (backend === undefined) throw new Error("no cpu backend");
const W = model.weights;
const sets: [string, QMatrix[]][] = [];
for (const l of [1, 4]) {
  const moe = W.layers[l].moe;
  if (moe === undefined) continue;
  if (l === 1) sets.push([`L${l} experts gate`, moe.experts.map((e) => e.gate)]);
  sets.push([`L${l} experts down`, moe.experts.map((e) => e.down)]);
}
const q = W.layers[1].attn.q;
if (q !== undefined) sets.push(["L1 attn q", [q]]);
sets.push(["output head", [W.output]]);
for (const [name, ms] of sets) {
  const m0 = ms[0];
  const x = new Float64Array(m0.cols).map(() => Math.random() * 2 - 1);
  const y = new Float64Array(m0.rows);
  backend.matmul(m0, x, 1, m0.cols, y, m0.rows); // first use (the Q6_K head's repacked copy)
  const rates: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    let macs = 0;
    for (const m of ms) {
      backend.matmul(m, x, 1, m.cols, y, m.rows);
      macs += m.rows * m.cols;
    }
    rates.push(macs / ((performance.now() - t0) / 1000) / 1e9);
  }
  rates.sort((a, b) => a - b);
  console.log(
    `${name.padEnd(18)} ${m0.type} ${m0.rows}×${m0.cols} ×${ms.length}: median ${rates[rates.length >> 1].toFixed(2)} GMAC/s, best ${rates[rates.length - 1].toFixed(2)}`,
  );
}
backend.close();
