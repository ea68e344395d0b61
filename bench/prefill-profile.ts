/**
 * Prefill alone: `n` random tokens in one forward pass (after a 16-token warm-up), wall and CPU time per repetition.
 *
 *   node --import tsx bench/prefill-profile.ts MODEL.gguf [n 512] [threads 2] [reps 1] [--activations exact|q8]
 */
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import type { CpuActivations } from "../src/backend/cpu/fast.js";
import { LatentCache } from "../src/model/cache.js";
import { loadModel } from "../src/runtime/load.js";

/** the value of `--name V` (and the arguments without the pair) */
function flag(argv: string[], name: string): [string | undefined, string[]] {
  const i = argv.indexOf(name);
  return i > 0 ? [argv[i + 1], argv.filter((_, j) => j !== i && j !== i + 1)] : [undefined, argv];
}
const [activations, args] = flag(process.argv, "--activations");
const path = args[2];
const n = Number(args[3] ?? 512);
const threads = Number(args[4] ?? 2);
const reps = Number(args[5] ?? 1);
const { model, config, backend } = loadModel(path, undefined, {
  backend: "cpu",
  threads,
  ...(activations === undefined ? {} : { cpuActivations: activations as CpuActivations }),
});
let s = 12345;
const tokens = Array.from({ length: n }, () => {
  s = (s * 1103515245 + 12345) >>> 0;
  return 10 + (s % (config.nVocab - 10));
});
model.forward(tokens.slice(0, 16), new LatentCache(config, 32), { path: "prefill", logits: "last" });
for (let r = 0; r < reps; r++) {
  const load = loadavg()[0];
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  model.forward(tokens, new LatentCache(config, n + 4), { path: "prefill", logits: "last" });
  const dt = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  const cpu = (c.user + c.system) / 1e6;
  console.log(
    `prefill ${n} (activations ${backend?.activations}): ${dt.toFixed(2)} s = ${(n / dt).toFixed(1)} tok/s; cpu ${cpu.toFixed(2)} s = ${(n / cpu).toFixed(1)} tok/cpu-s; load ${load.toFixed(2)}`,
  );
}
backend?.close();
