import { performance } from "node:perf_hooks";
import { LatentCache } from "../src/model/cache.js";
import { loadModel } from "../src/runtime/load.js";
const path = process.argv[2];
const n = Number(process.argv[3] ?? 512);
const threads = Number(process.argv[4] ?? 2);
const reps = Number(process.argv[5] ?? 1);
const { model, config, backend } = loadModel(path, undefined, { backend: "cpu", threads });
let s = 12345;
const tokens = Array.from({ length: n }, () => {
  s = (s * 1103515245 + 12345) >>> 0;
  return 10 + (s % (config.nVocab - 10));
});
model.forward(tokens.slice(0, 16), new LatentCache(config, 32), { path: "prefill", logits: "last" });
for (let r = 0; r < reps; r++) {
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  model.forward(tokens, new LatentCache(config, n + 4), { path: "prefill", logits: "last" });
  const dt = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  const cpu = (c.user + c.system) / 1e6;
  console.log(
    `prefill ${n}: ${dt.toFixed(2)} s = ${(n / dt).toFixed(1)} tok/s; cpu ${cpu.toFixed(2)} s = ${(n / cpu).toFixed(1)} tok/cpu-s`,
  );
}
backend?.close();
