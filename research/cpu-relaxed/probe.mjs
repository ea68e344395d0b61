// Is each relaxed integer dot exact on this V8 (for i7 second operands), in each compiler tier? Run it three ways:
//   node research/cpu-relaxed/probe.mjs; node --liftoff-only …/probe.mjs; node --no-liftoff …/probe.mjs
// (build first: node research/cpu-relaxed/build.mjs)
import { readFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--experimental-wasm-relaxed-simd");
const memory = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
const bytes = readFileSync(new URL("probe.wasm", import.meta.url));
const { instance } = await WebAssembly.instantiate(bytes, { env: { memory, abort() {} } });
const { exports } = instance;
const a = [-128, 127, -1, 5, 100, -100, 3, -3, -128, -128, 127, 127, 0, 1, -7, 9];
const b = [15, 15, 1, 2, 127, 127, 0, 15, 127, 127, 127, 127, 3, 3, 15, 15];
const c = [1000, -2000, 3000, 7];
new Int8Array(memory.buffer, 0, 16).set(a);
new Int8Array(memory.buffer, 16, 16).set(b);
new Int32Array(memory.buffer, 32, 4).set(c);
exports.probe(0, 16, 32, 64);
const want16 = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => a[2 * i] * b[2 * i] + a[2 * i + 1] * b[2 * i + 1]);
const want32 = [0, 1, 2, 3].map((i) => c[i] + want16[2 * i] + want16[2 * i + 1]);
const got16 = [...new Int16Array(memory.buffer, 64, 8)];
const got32 = [...new Int32Array(memory.buffer, 80, 4)];
const same = (x, y) => x.every((v, i) => v === y[i]);
console.log(`i16x8.relaxed_dot_i8x16_i7x16_s      ${same(got16, want16) ? "exact" : "WRONG"}: ${got16.join(" ")}`);
console.log(
  `i32x4.relaxed_dot_i8x16_i7x16_add_s  ${same(got32, want32) ? "exact" : "WRONG"}: ${got32.join(" ")} (want ${want32.join(" ")})`,
);
