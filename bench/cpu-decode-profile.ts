/**
 * Decode alone, for profiles: a short prompt, then `steps` single-token decode steps, wall and CPU time.
 *
 *   node --import tsx bench/cpu-decode-profile.ts MODEL.gguf [steps 64] [threads 1] [prompt 64] [reps 1]
 *     [--activations exact|q8] [--profile OUT.cpuprofile]
 *
 * With `--profile OUT.cpuprofile` the main thread's decode steps (only they: not the load, the prompt, the warm-up)
 * are profiled through node:inspector; with 1 thread every kernel runs on the main thread and shows in it (function
 * names of the wasm kernels need `WASM_DEBUG=1 node scripts/build-wasm.mjs`). Not a test.
 */
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { performance } from "node:perf_hooks";
import type { CpuActivations } from "../src/backend/cpu/fast.js";
import { LatentCache } from "../src/model/cache.js";
import { argmax } from "../src/engine/sampler.js";
import { loadModel } from "../src/runtime/load.js";

/** the value of `--name V` (and the arguments without the pair) */
function flag(argv: string[], name: string): [string | undefined, string[]] {
  const i = argv.indexOf(name);
  return i > 0 ? [argv[i + 1], argv.filter((_, j) => j !== i && j !== i + 1)] : [undefined, argv];
}
const [profileOut, rest] = flag(process.argv, "--profile");
const [activations, args] = flag(rest, "--activations");
const path = args[2];
const steps = Number(args[3] ?? 64);
const threads = Number(args[4] ?? 1);
const nPrompt = Number(args[5] ?? 64);
const reps = Number(args[6] ?? 1);
const session = profileOut === undefined ? undefined : new Session();
const post = (method: string, params?: object): Promise<unknown> =>
  new Promise((resolve, reject) => {
    session?.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res)));
  });
const { model, config, backend } = loadModel(path, undefined, {
  backend: "cpu",
  threads,
  ...(activations === undefined ? {} : { cpuActivations: activations as CpuActivations }),
});
let s = 12345;
const prompt = Array.from({ length: nPrompt }, () => {
  s = (s * 1103515245 + 12345) >>> 0;
  return 10 + (s % (config.nVocab - 10));
});
const run = async (n: number, profile = false): Promise<{ wall: number; cpu: number }> => {
  const cache = new LatentCache(config, nPrompt + n);
  let next = argmax(model.forward(prompt, cache, { path: "prefill", logits: "last" }));
  if (profile) await post("Profiler.start");
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) next = argmax(model.forward([next], cache, { path: "decode", logits: "last" }));
  const c = process.cpuUsage(c0);
  if (profile) {
    const { profile: p } = (await post("Profiler.stop")) as { profile: object };
    writeFileSync(profileOut as string, JSON.stringify(p));
  }
  return { wall: (performance.now() - t0) / 1000, cpu: (c.user + c.system) / 1e6 };
};
if (session !== undefined) {
  session.connect();
  await post("Profiler.enable");
}
await run(4); // warm-up (JIT, the Q6_K output head's repacked copy)
for (let r = 0; r < reps; r++) {
  const { wall, cpu } = await run(steps, r === reps - 1 && session !== undefined);
  console.log(
    `decode ${steps} (${threads} thread${threads > 1 ? "s" : ""}, ${backend?.name}): ${wall.toFixed(2)} s = ${(steps / wall).toFixed(2)} tok/s; cpu ${cpu.toFixed(2)} s`,
  );
}
backend?.close();
