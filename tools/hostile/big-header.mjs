#!/usr/bin/env node
// Write a GGUF whose header is one huge metadata array (no tensors), to measure the header parser's memory:
//   node tools/hostile/big-header.mjs OUT.gguf u8|f32|str MEGABYTES
//   /usr/bin/time -v node bin/latent.mjs inspect OUT.gguf      # "Maximum resident set size"
import { openSync, writeSync, closeSync } from "node:fs";

const [out, kind, mbArg] = process.argv.slice(2);
if (out === undefined || !["u8", "f32", "str"].includes(kind ?? "") || !(Number(mbArg) > 0)) {
  console.error("usage: big-header.mjs OUT.gguf u8|f32|str MEGABYTES");
  process.exit(2);
}
const bytes = Math.round(Number(mbArg) * 1e6);
const fd = openSync(out, "w");
let pos = 0;
const put = (b) => {
  writeSync(fd, b, 0, b.length, pos);
  pos += b.length;
};
const u32 = (v) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const u64 = (v) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};
const gstr = (s) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
put(Buffer.from("GGUF"));
put(u32(3));
put(u64(0)); // tensors
put(u64(2)); // keys
put(gstr("general.architecture"));
put(u32(8));
put(gstr("hostile"));
put(gstr("hostile.big"));
put(u32(9));
const CHUNK = 1 << 24;
if (kind === "u8") {
  put(u32(0));
  put(u64(bytes));
  for (let left = bytes; left > 0; left -= CHUNK) put(Buffer.alloc(Math.min(CHUNK, left), 7));
} else if (kind === "f32") {
  const n = Math.floor(bytes / 4);
  put(u32(6));
  put(u64(n));
  for (let left = n; left > 0; left -= CHUNK / 4) {
    const b = Buffer.alloc(4 * Math.min(CHUNK / 4, left));
    for (let i = 0; i < b.length; i += 4) b.writeFloatLE(0.5, i);
    put(b);
  }
} else {
  // strings of 8 bytes: 16 bytes each with the length
  const n = Math.floor(bytes / 16);
  put(u32(8));
  put(u64(n));
  const one = gstr("tok_abcd");
  const per = CHUNK / 16;
  for (let left = n; left > 0; left -= per) put(Buffer.concat(Array(Math.min(per, left)).fill(one)));
}
closeSync(fd);
console.log(`${out}: ${pos} bytes`);
