// WebGPU reports validation errors, out-of-memory and lost devices asynchronously and carries on, so a failed
// command leaves its outputs unwritten and a read returns stale bytes. GpuRuntime turns every read after such an error
// into GpuFailedError. Each case uses a device of its own: the failure is sticky for the device's runtime.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GpuFailedError, GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { gpuOrSkip } from "./helpers.js";
import { requestGpuDevice } from "../../../src/backend/webgpu/core/device.js";

const { skip } = await gpuOrSkip({});

const ADD_ONE = /* wgsl */ `
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> p: vec4u;
@compute @workgroup_size(1) fn main() { Y[p.x] = X[p.x] + 1.0; }`;

async function freshRuntime(): Promise<GpuRuntime> {
  return new GpuRuntime(await requestGpuDevice(), {});
}

test("a dispatch over a destroyed buffer: the next read throws GpuFailedError naming the error", { skip }, async () => {
  const rt = await freshRuntime();
  try {
    const x = rt.upload(new Float32Array([1, 2, 3, 4]), "x");
    const y = rt.buffer(16, "y");
    rt.dispatch("add one", ADD_ONE, [x, y], new Uint32Array([2, 0, 0, 0]), [1]);
    assert.deepEqual(Array.from(await rt.readF32(y, 0, 4)), [0, 0, 4, 0], "the working dispatch before the fault");
    x.destroy();
    rt.dispatch("add one", ADD_ONE, [x, y], new Uint32Array([1, 0, 0, 0]), [1]);
    await assert.rejects(rt.readF32(y, 0, 4), (e: unknown) => {
      assert.ok(e instanceof GpuFailedError, String(e));
      assert.match(e.message, /GPUValidationError/);
      assert.match(e.message, /destroyed/i);
      return true;
    });
    // sticky: a later read of a buffer no failed command touched throws too (the device state is unknown)
    await assert.rejects(rt.sync(), GpuFailedError);
  } finally {
    rt.device.destroy();
  }
});

test("a buffer bound whole past maxStorageBufferBindingSize is refused when encoded, naming it", { skip }, async () => {
  const rt = await freshRuntime();
  try {
    const limit = rt.info.limits.maxStorageBufferBindingSize;
    if (limit + 16 > rt.info.limits.maxBufferSize) return; // this device cannot make such a buffer at all
    // a fake GPUBuffer of that size: creating a real one would allocate it; the check reads only size and label
    const big = { size: limit + 16, label: "scores" } as unknown as GPUBuffer;
    const y = rt.buffer(16, "y");
    assert.throws(
      () => rt.dispatch("attention", ADD_ONE, [big, y], new Uint32Array(4), [1]),
      /attention: buffer "scores" of \d+ bytes is bound whole, past the device's maxStorageBufferBindingSize/,
    );
  } finally {
    rt.device.destroy();
  }
});

test("a healthy runtime reads without error (the check does not fire on its own)", { skip }, async () => {
  const rt = await freshRuntime();
  try {
    const x = rt.upload(new Float32Array([5, 6]), "x");
    const y = rt.buffer(8, "y");
    rt.dispatch("add one", ADD_ONE, [x, y], new Uint32Array([1, 0, 0, 0]), [1]);
    assert.deepEqual(Array.from(await rt.readF32(y, 0, 2)), [0, 7]);
    rt.checkFailure();
  } finally {
    rt.device.destroy();
  }
});
