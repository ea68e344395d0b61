// A/B of two builds of the CPU kernels on decode: alternates bench/cpu-decode-profile.ts runs with kernels.wasm.ts
// swapped between A and B (the working copy is restored at the end). Usage:
//   node research/cpu-relaxed/ab.mjs A.wasm.ts B.wasm.ts MODEL.gguf [rounds 5] [steps 32] [threads 2] [prompt 64]
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";

const [a, b, model, rounds = "5", steps = "32", threads = "2", prompt = "64"] = process.argv.slice(2);
const root = fileURLToPath(new URL("../..", import.meta.url));
const target = `${root}src/backend/cpu/wasm/kernels.wasm.ts`;
const saved = readFileSync(target);
const res = { A: [], B: [] };
const loads = [];
try {
  for (let r = 0; r < Number(rounds); r++) {
    for (const side of r % 2 ? ["B", "A"] : ["A", "B"]) {
      copyFileSync(side === "A" ? a : b, target);
      loads.push(loadavg()[0]);
      const out = execFileSync(
        process.execPath,
        ["--import", "tsx", "bench/cpu-decode-profile.ts", model, steps, threads, prompt, "2"],
        { cwd: root, encoding: "utf8" },
      );
      const v = [...out.matchAll(/= ([\d.]+) tok\/s/g)].map((m) => Number(m[1]));
      const best = Math.max(...v);
      res[side].push(best);
      console.log(`round ${r + 1} ${side}: ${v.join(", ")} tok/s (load ${loadavg()[0].toFixed(2)})`);
    }
  }
} finally {
  writeFileSync(target, saved);
}
const med = (xs) => {
  const v = [...xs].sort((x, y) => x - y);
  return v.length % 2 ? v[v.length >> 1] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const ratio = res.B.map((x, i) => x / res.A[i]);
console.log(
  `A median ${med(res.A).toFixed(2)} tok/s, B median ${med(res.B).toFixed(2)} tok/s, B/A median of rounds ${med(ratio).toFixed(3)}× (${ratio.map((x) => x.toFixed(3)).join(" ")}); load average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`,
);
