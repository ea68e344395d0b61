// Micro-benchmark: single-token Q4_K dot, engine kernel (i16 lanes) vs relaxed-SIMD i8 kernels. Usage:
//   node research/cpu-relaxed/build.mjs && node research/cpu-relaxed/bench.mjs [rounds]
// Rows × cols = 1408 × 2048 (a v2-lite expert's gate/up). "hot": one matrix again and again (in cache);
// "stream": 64 such matrices in turn (104 MB, from DRAM, as decode reads the routed experts).
import { readFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--experimental-wasm-relaxed-simd");
const bytes = readFileSync(new URL("dot.wasm", import.meta.url));
const ROWS = 1408,
  COLS = 2048,
  NB = COLS / 256,
  ROWB = NB * 144,
  MATB = ROWS * ROWB,
  NMAT = Number(process.env.NMAT ?? 64);
// WOFF_MB: where the matrices start (MiB into the memory)
const W = Number(process.env.WOFF_MB ?? 1) * 2 ** 20;
const memory = new WebAssembly.Memory({
  initial: Math.ceil((W + MATB * NMAT + (2 << 20)) / 65536),
  maximum: 65536,
  shared: true,
});
const { exports: k } = await WebAssembly.instantiate(await WebAssembly.compile(bytes), { env: { memory, abort() {} } });
const u8 = new Uint8Array(memory.buffer);
const dv = new DataView(memory.buffer);
let seed = 12345;
const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
for (let i = 0; i < MATB * NMAT; i++) u8[W + i] = (rnd() * 256) | 0;
for (let m = 0; m < NMAT * ROWS * NB; m++) {
  const p = W + m * 144;
  dv.setUint16(p, 0x1000 + ((rnd() * 0x800) | 0), true); // small positive f16 d
  dv.setUint16(p + 2, 0x1000 + ((rnd() * 0x800) | 0), true);
}
const AQ = 64,
  A8 = AQ + COLS * 2 + 64,
  AD = A8 + COLS * 2 + 64,
  AS = AD + NB * 4 + 64,
  Y = AS + NB * 32 + 64;
for (let b = 0; b < NB; b++) {
  dv.setFloat32(AD + b * 4, 1e-3 * (1 + rnd()), true);
  for (let s = 0; s < 8; s++) {
    let sum = 0;
    for (let i = 0; i < 32; i++) {
      const v = Math.round((rnd() * 2 - 1) * 8191);
      dv.setInt16(AQ + (b * 256 + s * 32 + i) * 2, v, true);
      sum += v;
    }
    dv.setInt32(AS + (b * 8 + s) * 4, sum, true);
  }
}
// extremes too: ±8191 and values at the piece boundaries
for (const [i, v] of [
  [0, 8191],
  [1, -8191],
  [2, 127],
  [3, -128],
  [4, 128],
  [5, -129],
  [6, 255],
  [7, -256],
])
  dv.setInt16(AQ + i * 2, v, true);
k.split(AQ, COLS, A8);
// the engine's own module (src/backend/cpu/wasm/kernels.wasm.ts) on the same memory: its `matmul` for one token
const { KERNELS_WASM_BASE64 } = await import("../../src/backend/cpu/wasm/kernels.wasm.ts");
const eng = new WebAssembly.Instance(new WebAssembly.Module(Buffer.from(KERNELS_WASM_BASE64, "base64")), {
  env: { memory },
}).exports;
const S = Y + ROWS * 4 + 64;
const engineMatvec = (w) => eng.matmul(12, w, ROWB, 0, ROWS, COLS, 1, 0, COLS, AQ, AD, AS, Y, ROWS, S, 64);
const y = (kind, m) => {
  k.matvec(kind, W + m * MATB, ROWB, ROWS, COLS, AQ, A8, AD, AS, Y);
  return new Float32Array(memory.buffer, Y, ROWS).slice();
};
const ref = y(0, 0);
for (const kind of [1, 2, 3, 4]) {
  const o = y(kind, 0);
  let diff = 0;
  for (let r = 0; r < ROWS; r++) if (o[r] !== ref[r]) diff++;
  console.log(`kind ${kind}: ${diff} of ${ROWS} rows differ from the engine kernel`);
}
{
  engineMatvec(W);
  const o = new Float32Array(memory.buffer, Y, ROWS).slice();
  let diff = 0;
  for (let r = 0; r < ROWS; r++) if (o[r] !== ref[r]) diff++;
  console.log(`engine module: ${diff} of ${ROWS} rows differ from the copied kernel`);
}
const names = [
  "engine i16 (dot_i16x8_s)",
  "relaxed i16x8 (pmaddubsw + pmaddwd·sc)",
  "relaxed i32x4 dot_add",
  "i16, vector scales",
  "relaxed i16x8, vector scales",
  "engine module matmul",
];
const K = names.length;
const rounds = Number(process.argv[2] ?? 11);
for (const mode of ["hot", "stream"]) {
  const reps = mode === "hot" ? 40 : NMAT;
  const res = names.map(() => []);
  for (let r = 0; r < rounds; r++) {
    const order = [...names.keys()];
    for (const kind of r % 2 ? order.reverse() : order) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < reps; i++)
        k.matvec(kind, W + (mode === "hot" ? 0 : i) * MATB, ROWB, ROWS, COLS, AQ, A8, AD, AS, Y);
      const s = Number(process.hrtime.bigint() - t0) / 1e9;
      res[kind].push((reps * ROWS * COLS) / s / 1e9);
    }
  }
  for (let kind = 0; kind < K; kind++) {
    const v = res[kind].slice().sort((a, b) => a - b);
    console.log(
      `${mode.padEnd(6)} ${names[kind].padEnd(42)} median ${v[v.length >> 1].toFixed(2)} GMAC/s, best ${v[v.length - 1].toFixed(2)} (${rounds} rounds)`,
    );
  }
  for (const [x, y] of [
    [1, 0],
    [3, 0],
    [4, 3],
    [4, 0],
  ]) {
    const ratio = res[x].map((v, i) => v / res[y][i]).sort((a, b) => a - b);
    console.log(
      `${mode.padEnd(6)} ${names[x]} / ${names[y]}: median of rounds ${ratio[ratio.length >> 1].toFixed(3)}×`,
    );
  }
}
