// A/B of two builds of the q8 module (kernels-q8.wasm.ts files) in one process, on one shared memory: products with
// 8-bit activations (the types + Q8ACT; Q5_0R: the u8 copy of Q5_0), Q5_0 exact (Q5_0e) and Q8_0 of random matrices shaped as a v2-lite Q4_K_M file's, rounds
// alternating A and B matrix by matrix; checks that both give the same bits. Usage:
//   [TC_A=64] [TC_B=64] node research/cpu-relaxed/q8-ab.mjs A.wasm.ts B.wasm.ts [rounds 9] [n 1] [only: comma-separated names]
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--experimental-wasm-relaxed-simd");
const [fa, fb, roundsArg = "9", nArg = "1", only] = process.argv.slice(2);
const rounds = Number(roundsArg);
const n = Number(nArg);
const load = (f) => {
  const s = readFileSync(f, "utf8");
  const b64 = [...s.matchAll(/"([A-Za-z0-9+/=]+)"/g)].map((m) => m[1]).join("");
  return new WebAssembly.Module(Buffer.from(b64, "base64"));
};
const Q8ACT = 4096;
// tokens per chunk inside the kernel for A and B (the backend's TOKEN_TILE is 64)
const TC_A = Number(process.env.TC_A ?? 64);
const TC_B = Number(process.env.TC_B ?? 64);
// type (with Q8ACT for the 8-bit kernels), block bytes, block values, offsets of f16 scales, rows, cols, matrices
let T = [
  {
    name: "Q4_K",
    type: 12 + Q8ACT,
    bb: 144,
    bv: 256,
    f16: [0, 2],
    rows: 1408,
    cols: 2048,
    mats: Number(process.env.MATS ?? 24),
  },
  { name: "Q5_0", type: 6 + Q8ACT, bb: 22, bv: 32, f16: [0], rows: 2048, cols: 1408, mats: 24 },
  { name: "Q5_0R", type: 6, bb: 22, bv: 32, f16: [0], rows: 2048, cols: 1408, mats: 24, q5r: true },
  { name: "Q5_0e", type: 6, bb: 22, bv: 32, f16: [0], rows: 2048, cols: 1408, mats: 24 },
  { name: "Q8_0", type: 8, bb: 34, bv: 32, f16: [0], rows: 2048, cols: 1408, mats: 24 },
  {
    name: "Q6_KR",
    type: 14,
    bb: 210,
    bv: 256,
    f16: [208],
    rows: 8192,
    cols: 2048,
    mats: Number(process.env.MATS6 ?? 2),
    repack: true,
  },
];
if (only) T = T.filter((t) => only.split(",").includes(t.name));
let total = 64 << 20;
for (const t of T)
  total +=
    ((t.rows * t.cols) / t.bv) * t.bb * t.mats * (t.repack ? 2.4 : t.q5r ? 2.7 : 1) +
    n * t.cols * 16 +
    n * t.rows * 4 +
    (1 << 20);
const memory = new WebAssembly.Memory({ initial: Math.ceil(total / 65536), maximum: 65536, shared: true });
const A = new WebAssembly.Instance(load(fa), { env: { memory } }).exports;
const B = new WebAssembly.Instance(load(fb), { env: { memory } }).exports;
const u8 = new Uint8Array(memory.buffer);
const dv = new DataView(memory.buffer);
const f32 = new Float32Array(memory.buffer);
let seed = 4242;
const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
let top = 64 << 20;
const alloc = (bytes) => {
  const p = top;
  top += Math.ceil(bytes / 64) * 64 + 64;
  return p;
};
const S = 1 << 20; // scratch
for (const t of T) {
  const rowBytes = (t.cols / t.bv) * t.bb;
  t.w = alloc(rowBytes * t.rows * t.mats);
  for (let i = 0; i < rowBytes * t.rows * t.mats; i++) u8[t.w + i] = (rnd() * 256) | 0;
  for (let b = 0; b < (t.rows * t.cols * t.mats) / t.bv; b++)
    for (const o of t.f16) dv.setUint16(t.w + b * t.bb + o, 0x1000 + ((rnd() * 0x800) | 0), true);
  t.rowBytes = rowBytes;
  if (t.q5r) {
    // q8 mode's u8 copy of Q5_0 (made by B's module: A must have the kernel type too)
    const rb = (t.cols / 32) * 36;
    const dst = alloc(rb * t.rows * t.mats);
    B.repackQ5_0u8(t.w, t.rows * t.mats, t.cols, dst);
    t.w = dst;
    t.rowBytes = rb;
    t.type = 1006 + Q8ACT;
  }
  if (t.repack) {
    const rb = (t.cols / 256) * 276;
    const dst = alloc(rb * t.rows * t.mats);
    A.repackQ6K(t.w, t.rows * t.mats, t.cols, dst);
    A.unsignQ6KR(dst, t.rows * t.mats, t.cols);
    t.w = dst;
    t.rowBytes = rb;
    t.type = 1014 + Q8ACT;
  }
  const cls = A.typeClass(t.type);
  const nb = t.cols / (cls === 2 || cls === 4 ? 256 : 32);
  t.x = alloc(n * t.cols * 4);
  for (let i = 0; i < n * t.cols; i++) f32[(t.x >> 2) + i] = rnd() * 2 - 1;
  t.aq = alloc(n * t.cols * 2);
  t.ad = alloc(n * nb * 4);
  t.as = alloc(n * nb * 32);
  t.y = alloc(n * t.rows * 4);
  A.quantize(cls, t.x, n, t.cols, t.cols, t.aq, t.ad, t.as);
}
const run = (k, t, m) =>
  k.matmul(
    t.type,
    t.w + m * t.rowBytes * t.rows,
    t.rowBytes,
    0,
    t.rows,
    t.cols,
    n,
    t.x,
    t.cols,
    t.aq,
    t.ad,
    t.as,
    t.y,
    t.rows,
    S,
    k === B ? TC_B : TC_A,
  );
for (const t of T) {
  run(A, t, 0);
  const ya = f32.slice(t.y >> 2, (t.y >> 2) + n * t.rows);
  run(B, t, 0);
  const yb = f32.slice(t.y >> 2, (t.y >> 2) + n * t.rows);
  let diff = 0;
  for (let i = 0; i < ya.length; i++) if (!Object.is(ya[i], yb[i])) diff++;
  console.log(`${t.name}: ${diff} of ${ya.length} outputs differ between A and B`);
}
const med = (v) => [...v].sort((x, y) => x - y)[v.length >> 1];
const l0 = loadavg()[0];
for (const t of T) {
  const r = { A: [], B: [] };
  for (let i = 0; i < rounds; i++) {
    const ns = { A: 0n, B: 0n };
    for (let m = 0; m < t.mats; m++) {
      for (const side of (i * t.mats + m) % 2 ? ["B", "A"] : ["A", "B"]) {
        const t0 = process.hrtime.bigint();
        run(side === "A" ? A : B, t, m);
        ns[side] += process.hrtime.bigint() - t0;
      }
    }
    for (const side of ["A", "B"]) r[side].push((n * t.rows * t.cols * t.mats) / Number(ns[side]));
  }
  const ratio = r.B.map((x, i) => x / r.A[i]);
  console.log(
    `${t.name.padEnd(6)} ${t.rows}×${t.cols} n=${n}: A median ${med(r.A).toFixed(2)} (best ${Math.max(...r.A).toFixed(2)}), B median ${med(r.B).toFixed(2)} (best ${Math.max(...r.B).toFixed(2)}) GMAC/s; B/A median of rounds ${med(ratio).toFixed(3)}× (min ${Math.min(...ratio).toFixed(3)}, max ${Math.max(...ratio).toFixed(3)})`,
  );
}
console.log(`load average ${l0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`);
