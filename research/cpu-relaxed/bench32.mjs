// Micro-benchmark: single-token Q5_0 dot (2048 rows × 1408 columns, a v2-lite expert's down matrix), the engine's
// kernel against the swizzled fifth-bit version. node research/cpu-relaxed/build.mjs && node research/cpu-relaxed/bench32.mjs [rounds]
import { readFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--experimental-wasm-relaxed-simd");
const bytes = readFileSync(new URL("dot.wasm", import.meta.url));
const ROWS = 2048;
const COLS = 1408;
const NB = COLS / 32;
const ROWB = NB * 22;
const MATB = ROWS * ROWB;
const NMAT = 64;
const memory = new WebAssembly.Memory({ initial: 4096, maximum: 65536, shared: true });
const { exports: k } = await WebAssembly.instantiate(await WebAssembly.compile(bytes), { env: { memory, abort() {} } });
const u8 = new Uint8Array(memory.buffer);
const dv = new DataView(memory.buffer);
let seed = 777;
const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
const W = 1 << 20;
for (let i = 0; i < MATB * NMAT; i++) u8[W + i] = (rnd() * 256) | 0;
for (let m = 0; m < NMAT * ROWS * NB; m++) dv.setUint16(W + m * 22, 0x1000 + ((rnd() * 0x800) | 0), true);
const AQ = 64;
const AD = AQ + COLS * 2 + 64;
const Y = AD + NB * 4 + 64;
for (let b = 0; b < NB; b++) dv.setFloat32(AD + b * 4, 1e-4 * (1 + rnd()), true);
for (let i = 0; i < COLS; i++) dv.setInt16(AQ + i * 2, Math.round((rnd() * 2 - 1) * 32767), true);
dv.setInt16(AQ, 32767, true);
dv.setInt16(AQ + 2, -32767, true);
const names = ["engine (bits by splat/compare, i16)", "swizzled bits (i8), widened"];
const y = (kind, m) => {
  k.matvec32(kind, W + m * MATB, ROWB, ROWS, COLS, AQ, AD, Y);
  return new Float32Array(memory.buffer, Y, ROWS).slice();
};
const ref = y(0, 0);
const o = y(1, 0);
let diff = 0;
for (let r = 0; r < ROWS; r++) if (o[r] !== ref[r]) diff++;
console.log(`swizzled: ${diff} of ${ROWS} rows differ from the engine kernel`);
const rounds = Number(process.argv[2] ?? 11);
for (const mode of ["hot", "stream"]) {
  const reps = mode === "hot" ? 40 : NMAT;
  const res = names.map(() => []);
  for (let r = 0; r < rounds; r++) {
    for (const kind of r % 2 ? [1, 0] : [0, 1]) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < reps; i++) k.matvec32(kind, W + (mode === "hot" ? 0 : i) * MATB, ROWB, ROWS, COLS, AQ, AD, Y);
      const s = Number(process.hrtime.bigint() - t0) / 1e9;
      res[kind].push((reps * ROWS * COLS) / s / 1e9);
    }
  }
  for (let kind = 0; kind < names.length; kind++) {
    const v = res[kind].slice().sort((a, b) => a - b);
    console.log(
      `${mode.padEnd(6)} ${names[kind].padEnd(38)} median ${v[v.length >> 1].toFixed(2)} GMAC/s, best ${v[v.length - 1].toFixed(2)} (${rounds} rounds)`,
    );
  }
  const ratio = res[1].map((v, i) => v / res[0][i]).sort((a, b) => a - b);
  console.log(`${mode.padEnd(6)} swizzled / engine: median of rounds ${ratio[ratio.length >> 1].toFixed(3)}×`);
}
