// A/B of two versions of some source files on whole runs, alternating processes: before each run the files named
// (paths relative to the repository) are copied from directory A or B (same relative paths) into the working copy,
// which is restored at the end. Every run's "= N tok/s" figures are collected; the best of a run counts. Usage:
//   node research/cpu-relaxed/ab-files.mjs DIR_A DIR_B FILE[,FILE…] ROUNDS -- COMMAND ARGS…
// e.g. … A B src/backend/cpu/fast.ts,src/backend/cpu/wasm/kernels-q8.wasm.ts 3 -- node --import tsx
//      bench/prefill-profile.ts /tmp/v2l8.gguf 512 2 2 --activations q8
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const sep = process.argv.indexOf("--");
const [dirA, dirB, files, rounds] = process.argv.slice(2, sep);
const [cmd, ...args] = process.argv.slice(sep + 1);
const root = fileURLToPath(new URL("../..", import.meta.url));
const list = files.split(",");
const saved = list.map((f) => readFileSync(join(root, f)));
const res = { A: [], B: [] };
const med = (v) => {
  const s = [...v].sort((x, y) => x - y);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
try {
  for (let r = 0; r < Number(rounds); r++) {
    for (const side of r % 2 ? ["B", "A"] : ["A", "B"]) {
      for (const f of list) copyFileSync(join(side === "A" ? dirA : dirB, f), join(root, f));
      const l0 = loadavg()[0];
      const out = execFileSync(cmd, args, { cwd: root, encoding: "utf8" });
      const v = [...out.matchAll(/= ([\d.]+) tok\/s/g)].map((m) => Number(m[1]));
      res[side].push(Math.max(...v));
      console.log(`round ${r + 1} ${side}: ${v.join(", ")} tok/s (load ${l0.toFixed(2)} → ${loadavg()[0].toFixed(2)})`);
    }
  }
} finally {
  list.forEach((f, i) => writeFileSync(join(root, f), saved[i]));
}
const ratio = res.B.map((x, i) => x / res.A[i]);
console.log(
  `A median ${med(res.A).toFixed(2)}, B median ${med(res.B).toFixed(2)} tok/s; B/A per round ${ratio.map((x) => x.toFixed(3)).join(", ")} (median ${med(ratio).toFixed(3)})`,
);
