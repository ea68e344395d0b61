/**
 * How full the CPU backend's arenas are after loading a model, a 512-token prefill and a few decode steps (weights,
 * repacked copies, work areas): which room is left for more copies. Not a test.
 *
 *   node --import tsx bench/arena-room.ts MODEL.gguf [--activations exact|q8]
 */
import type { CpuActivations } from "../src/backend/cpu/fast.js";
import { LatentCache } from "../src/model/cache.js";
import { loadModel } from "../src/runtime/load.js";

const i = process.argv.indexOf("--activations");
const activations = i > 0 ? (process.argv[i + 1] as CpuActivations) : undefined;
const { model, config, backend } = loadModel(process.argv[2], undefined, {
  backend: "cpu",
  threads: 2,
  ...(activations === undefined ? {} : { cpuActivations: activations }),
});
// biome-ignore lint/suspicious/noExplicitAny: private fields, read for this report only
const arenas = (backend as any).arenas as { index: number; top: number; capacity: number; workSize: number }[];
const show = (what: string): void => {
  const gib = (x: number): string => (x / 2 ** 30).toFixed(3);
  for (const a of arenas)
    console.log(`${what}: arena ${a.index} top ${gib(a.top)} GiB of ${gib(a.capacity)}, work ${gib(a.workSize)} GiB`);
};
show("loaded");
const tokens = Array.from({ length: 512 }, (_, t) => 10 + ((t * 7919) % (config.nVocab - 10)));
const cache = new LatentCache(config, 600);
model.forward(tokens, cache, { path: "prefill", logits: "last" });
show("prefill 512");
for (let t = 0; t < 8; t++) model.forward([tokens[t]], cache, { path: "decode", logits: "last" });
show("decode 8");
backend?.close();
