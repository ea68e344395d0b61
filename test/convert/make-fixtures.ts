// Refresh test/convert/fixtures/ from a tools/train-demo/train.py output directory:
//   node --import tsx test/convert/make-fixtures.ts OUT
// probe logits are cut to, per position, the 32 largest logits plus every 32nd vocabulary id (the full rows are
// 1.2 MB); greedy.json and tokenizer-cases.json are copied.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

interface Probe {
  text: string;
  tokens: number[];
  shape: [number, number];
  logits_f32_base64: string;
}
const src = process.argv[2];
if (src === undefined) throw new Error("usage: make-fixtures.ts OUT");
const dst = new URL("./fixtures/", import.meta.url).pathname;
mkdirSync(dst, { recursive: true });
const probe = JSON.parse(readFileSync(join(src, "probe.json"), "utf8")) as { probes: Probe[] } & Record<
  string,
  unknown
>;
const probes = probe.probes.map((p) => {
  const buf = Buffer.from(p.logits_f32_base64, "base64");
  const all = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  const [n, V] = p.shape;
  const rows = [];
  for (let i = 0; i < n; i++) {
    const row = all.subarray(i * V, (i + 1) * V);
    const top = [...row.keys()].sort((a, b) => row[b] - row[a]).slice(0, 32);
    const ids = [...new Set([...top, ...Array.from({ length: V / 32 }, (_, k) => k * 32)])].sort((a, b) => a - b);
    rows.push({ ids, logits: ids.map((id) => Number(row[id].toPrecision(8))) });
  }
  return { text: p.text, tokens: p.tokens, vocab: V, rows };
});
const { probes: _p, ...rest } = probe;
writeFileSync(
  join(dst, "demo-probe.json"),
  JSON.stringify({ ...rest, source: "tools/train-demo/train.py (transformers 5.17, fp32, CPU, eager)", probes }),
);
copyFileSync(join(src, "greedy.json"), join(dst, "demo-greedy.json"));
copyFileSync(join(src, "tokenizer-cases.json"), join(dst, "demo-tokenizer-cases.json"));
console.log(`wrote ${dst}`);
