// --check-writes: a kernel that leaves part of its declared output unwritten is reported by name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { UnwrittenOutputError } from "../../../src/backend/webgpu/core/runtime.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({ checkWrites: true });

const HALF = /* wgsl */ `
struct P { n: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read_write> Y: array<f32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) { if (g.x < p.n) { Y[g.x] = 1.0; } }`;

test("--check-writes reports outputs a kernel did not write", { skip }, async () => {
  const y = rt!.buffer(64 * 4);
  rt!.dispatch("writes all", HALF, [y], new Uint32Array([64, 0, 0, 0]), [1], [{ buffer: y, offset: 0, size: 256 }]);
  await rt!.sync();
  rt!.dispatch("writes half", HALF, [y], new Uint32Array([32, 0, 0, 0]), [1], [{ buffer: y, offset: 0, size: 256 }]);
  await assert.rejects(
    rt!.sync(),
    (e: unknown) => e instanceof UnwrittenOutputError && /writes half left 32 of 64/.test(e.message),
  );
  // the runtime stays usable after a report
  rt!.dispatch("writes all", HALF, [y], new Uint32Array([64, 0, 0, 0]), [1], [{ buffer: y, offset: 0, size: 256 }]);
  await rt!.sync();
});
