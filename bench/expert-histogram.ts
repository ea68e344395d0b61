/// <reference types="@webgpu/types" />
/**
 * How a prompt spreads over the routed experts on the WebGPU backend: after one prefill step of N tokens (the WebGPU
 * bench's prompt), the last MoE layer's expert lists read back, with the tiles of 16, 32 and 64 pairs they make.
 * `node --import tsx bench/expert-histogram.ts MODEL.gguf [N] [--activations q8]` (from a compiled tree:
 * `node dist-gpu/bench/expert-histogram.js …`).
 */
import { loadModel } from "../src/runtime/load.js";
import { requestGpuDevice } from "../src/backend/webgpu/core/device.js";
import { GpuModel } from "../src/backend/webgpu/graph/gpu-model.js";
import { GpuRuntime, type GpuActivations } from "../src/backend/webgpu/core/runtime.js";

const args = process.argv.slice(2);
const path = args[0];
if (path === undefined) {
  console.error("usage: expert-histogram.ts MODEL.gguf [N] [--activations q8]");
  process.exit(2);
}
const n = Number(args[1] !== undefined && !args[1].startsWith("--") ? args[1] : 512);
const at = args.indexOf("--activations");
const activations = (at >= 0 ? args[at + 1] : "exact") as GpuActivations;
const info = await requestGpuDevice({});
const rt = new GpuRuntime(info, { activations });
const { model, config: c } = loadModel(path);
if (c.nExpert === 0) {
  console.error(`${path}: no routed experts`);
  process.exit(1);
}
const g = new GpuModel(rt, model, { slots: 1, context: n + 8, maxTokens: n });
const prompt = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % c.nVocab);
await g.prefill(0, prompt);
// the lists buffer starts with (offset, count) per expert (EXPERT_LISTS_WGSL)
const lists = (g as unknown as { b: Record<string, GPUBuffer> }).b.elist;
const words = new Uint32Array(await rt.read(lists, 0, 2 * c.nExpert * 4));
const counts = Array.from({ length: c.nExpert }, (_, e) => words[2 * e + 1]);
const sorted = [...counts].sort((a, b) => b - a);
const pairs = counts.reduce((a, k) => a + k, 0);
console.log(
  `${pairs} pairs over ${c.nExpert} experts: ${counts.filter((k) => k > 0).length} used, ${counts.filter((k) => k === 0).length} with none; busiest ${sorted.slice(0, 16).join(" ")}; median ${sorted[sorted.length >> 1]}`,
);
for (const T of [16, 32, 64]) {
  const tiles = counts.reduce((a, k) => a + Math.ceil(k / T), 0);
  console.log(
    `tiles of ${T}: ${tiles} (${((pairs / (tiles * T)) * 100).toFixed(1)} % full), at most ${Math.ceil(sorted[0] / T)} for one expert`,
  );
}
rt.device.destroy();
process.exit(0);
