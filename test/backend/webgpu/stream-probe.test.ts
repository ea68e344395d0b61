// The batch-1 bound probe (kernel-bench --probe): x split into three int8 pieces for its dp4a kernel reconstructs x
// to 24 bits of each group's largest value, with the group's Σx; every probe kernel compiles on the adapter. (Its
// numbers check — probe kernels against the wide kernel — needs 32-lane subgroups and runs with the probe itself.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { aluWGSL, rowsWGSL, xPieces, type ProbeMode } from "../../../src/backend/webgpu/stream-probe.js";
import { gpuOrSkip, Rng } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();

function piece(words: Uint32Array, g: number, p: number, i: number): number {
  return ((words[g * 14 + p * 4 + (i >> 2)]! >>> (8 * (i & 3))) << 24) >> 24;
}

test("x in three int8 pieces: s·(p0·2^16 + p1·2^8 + p2) within 2^-23 of each group's largest |x|, and Σx", () => {
  const rng = new Rng(5);
  const x = Float32Array.from({ length: 160 }, (_, i) => (i < 16 ? 0 : (rng.f64(1)[0]! - 0.5) * 10 ** ((i % 7) - 3)));
  x[40] = 123456.5;
  const words = xPieces(x);
  const f = new Float32Array(words.buffer);
  for (let g = 0; g < x.length / 16; g++) {
    let max = 0;
    let sum = 0;
    for (let i = 0; i < 16; i++) {
      max = Math.max(max, Math.abs(x[16 * g + i]!));
      sum += x[16 * g + i]!;
    }
    for (let i = 0; i < 16; i++) {
      const v = f[g * 14 + 12]! * (piece(words, g, 0, i) * 65536 + piece(words, g, 1, i) * 256 + piece(words, g, 2, i));
      assert.ok(Math.abs(v - x[16 * g + i]!) <= max * 2 ** -23, `group ${g} element ${i}: ${v} vs ${x[16 * g + i]}`);
    }
    assert.ok(Math.abs(f[g * 14 + 13]! - sum) <= 1e-6 * Math.max(1, Math.abs(sum)));
  }
  // an all-zero group has scale 0 and zero pieces
  assert.equal(f[12], 0);
  for (let p = 0; p < 3; p++) for (let i = 0; i < 16; i++) assert.equal(piece(words, 0, p, i), 0);
});

test("every probe kernel compiles", { skip }, async () => {
  const device = rt!.info.device;
  const modes: ProbeMode[] = ["read", "lite", "scales", "nibbles", "math", "dp4a", "dp4a-lds"];
  const codes = [...modes.map((m) => rowsWGSL(m)), rowsWGSL("dp4a-lds", 128), aluWGSL("dp4a"), aluWGSL("fma")];
  for (const code of codes) {
    const messages = (await device.createShaderModule({ code }).getCompilationInfo()).messages.filter((m) => m.type === "error");
    assert.deepEqual(messages.map((m) => m.message), []);
  }
});
