// Decode with exact against q8 activations (CpuBackend `activations`), alternating processes of
// bench/cpu-decode-profile.ts (each loads the model; best of its reps), the order swapped every round. Usage:
//   node research/cpu-relaxed/ab-q8.mjs MODEL.gguf [rounds 5] [steps 32] [threads 2] [prompt 16] [reps 2]
import { execFileSync } from "node:child_process";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";

const [model, rounds = "5", steps = "32", threads = "2", prompt = "16", reps = "2"] = process.argv.slice(2);
const root = fileURLToPath(new URL("../..", import.meta.url));
const res = { exact: [], q8: [] };
const loads = [];
for (let r = 0; r < Number(rounds); r++) {
  for (const mode of r % 2 ? ["q8", "exact"] : ["exact", "q8"]) {
    loads.push(loadavg()[0]);
    const out = execFileSync(
      process.execPath,
      ["--import", "tsx", "bench/cpu-decode-profile.ts", model, steps, threads, prompt, reps, "--activations", mode],
      { cwd: root, encoding: "utf8" },
    );
    if (!out.includes(`activations ${mode}`)) throw new Error(`the ${mode} run did not use ${mode}:\n${out}`);
    const v = [...out.matchAll(/= ([\d.]+) tok\/s/g)].map((m) => Number(m[1]));
    res[mode].push(Math.max(...v));
    console.log(`round ${r + 1} ${mode}: ${v.join(", ")} tok/s (load ${loadavg()[0].toFixed(2)})`);
  }
}
const med = (xs) => {
  const v = [...xs].sort((x, y) => x - y);
  return v.length % 2 ? v[v.length >> 1] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const ratio = res.q8.map((x, i) => x / res.exact[i]);
console.log(
  `exact median ${med(res.exact).toFixed(2)} tok/s, q8 median ${med(res.q8).toFixed(2)} tok/s, q8/exact median of rounds ${med(ratio).toFixed(3)}× (${ratio.map((x) => x.toFixed(3)).join(" ")}); load average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`,
);
