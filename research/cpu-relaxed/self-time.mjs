// Self time per function of a .cpuprofile, top N: node research/cpu-relaxed/self-time.mjs FILE [N]
import { readFileSync } from "node:fs";
const p = JSON.parse(readFileSync(process.argv[2], "utf8"));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const self = new Map();
let total = 0;
for (let i = 0; i < p.samples.length; i++) {
  const n = byId.get(p.samples[i]);
  const dt = p.timeDeltas[i] ?? 0;
  const key = `${n.callFrame.functionName || "(anon)"} ${n.callFrame.url.split("/").slice(-1)[0]}:${n.callFrame.lineNumber}`;
  self.set(key, (self.get(key) ?? 0) + dt);
  total += dt;
}
const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(process.argv[3] ?? 30));
console.log(`total ${(total / 1e6).toFixed(2)} s`);
for (const [k, v] of top)
  console.log(`${((100 * v) / total).toFixed(1).padStart(5)} %  ${(v / 1e6).toFixed(3)} s  ${k}`);
