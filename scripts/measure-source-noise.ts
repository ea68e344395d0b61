// Measures the quantization noise per GGUF type that `latent doctor --source` allows (src/doctor/source-noise.ts):
// every 2-D+ weight of the demo model and random Gaussian / Laplace / Student-t(3) matrices are encoded in the
// type with latent's reference quantizers (ggml's, no importance matrix), decoded, and compared with the input:
// rel = RMS(decoded − input) / RMS(input), and the least-squares gain α = <decoded, input> / <input, input>.
// Usage: node --import tsx scripts/measure-source-noise.ts [model.gguf]
import { GGUFFile } from "../src/gguf/file.js";
import { GGMLType, typeName, typeTraits } from "../src/gguf/types.js";
import { dequantize, quantize } from "../src/quant/index.js";
import { quantizeFp8Blocks, dequantizeFp8 } from "../src/convert/fp8.js";
import { DEMO_MODEL } from "../src/cli/demo.js";

const TYPES = [
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q6_K,
  GGMLType.Q5_K,
  GGMLType.Q5_1,
  GGMLType.Q5_0,
  GGMLType.Q4_K,
  GGMLType.Q4_1,
  GGMLType.Q4_0,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
  GGMLType.Q3_K,
  GGMLType.Q2_K,
];

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function gaussian(r: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
}

function measure(src: Float32Array, dec: Float32Array): { rel: number; alpha: number } {
  let d2 = 0,
    s2 = 0,
    gs = 0;
  for (let i = 0; i < src.length; i++) {
    d2 += (dec[i] - src[i]) ** 2;
    s2 += src[i] ** 2;
    gs += dec[i] * src[i];
  }
  return { rel: Math.sqrt(d2 / s2), alpha: gs / s2 };
}

const samples: { label: string; ne0: number; data: Float32Array }[] = [];
const file = GGUFFile.open(process.argv[2] ?? DEMO_MODEL);
for (const t of file.tensors.values()) {
  if (t.ne.length < 2) continue;
  samples.push({
    label: t.name,
    ne0: t.ne[0],
    data: dequantize(
      t.type,
      file.readBytes(t),
      t.ne.reduce((a, b) => a * b, 1),
    ),
  });
}
const r = rng(7);
for (const [kind, draw] of [
  ["gaussian", () => gaussian(r)],
  ["laplace", () => (r() < 0.5 ? 1 : -1) * -Math.log(1 - r())],
  ["student-t3", () => gaussian(r) / Math.sqrt((gaussian(r) ** 2 + gaussian(r) ** 2 + gaussian(r) ** 2) / 3)],
] as const) {
  samples.push({ label: `random ${kind} 256×512`, ne0: 512, data: Float32Array.from({ length: 256 * 512 }, draw) });
}

console.log("| type | tensors | median rel | max rel | max abs(α−1) |");
console.log("|---|---|---|---|---|");
const report = (name: string, rows: { rel: number; alpha: number }[]): void => {
  const rels = rows.map((x) => x.rel).sort((a, b) => a - b);
  const alpha = Math.max(...rows.map((x) => Math.abs(x.alpha - 1)));
  console.log(
    `| ${name} | ${rows.length} | ${rels[rels.length >> 1].toExponential(2)} | ${rels[rels.length - 1].toExponential(2)} | ${alpha.toExponential(2)} |`,
  );
};
for (const type of TYPES) {
  const block = typeTraits(type)!.blockSize;
  const rows = samples
    .filter((s) => s.ne0 % block === 0)
    .map((s) => measure(s.data, dequantize(type, quantize(type, s.data, s.ne0), s.data.length)));
  report(typeName(type), rows);
}
report(
  "F8_E4M3 (128×128 blocks)",
  samples.map((s) => {
    const shape = [s.data.length / s.ne0, s.ne0];
    const q = quantizeFp8Blocks(s.data, shape);
    return measure(s.data, dequantizeFp8(q.bytes, "F8_E4M3", shape, q.scale));
  }),
);
file.close();
