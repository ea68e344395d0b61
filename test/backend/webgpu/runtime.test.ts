// GpuRuntime plumbing: reads through reused staging buffers (sizes, offsets, concurrent reads) and recorded runs
// replayed in pieces, against values computed here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { copyRows } from "../../../src/backend/webgpu/kernels/rows/rows.js";
import { f32, gpuOrSkip, Rng } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({});

test("reads of varied sizes and offsets, sequential and concurrent, return the right bytes", { skip }, async () => {
  const rng = new Rng(5);
  const data = rng.f32(5000);
  const b = rt!.upload(data);
  for (const [off, n] of [
    [0, 1],
    [3, 17],
    [100, 4096],
    [0, 5000],
    [4999, 1],
    [7, 4001],
  ] as const) {
    const got = await rt!.readF32(b, off, n);
    assert.deepEqual(Array.from(got), Array.from(data.subarray(off, off + n)), `read ${off}+${n}`);
  }
  const bytes = new Uint8Array(await rt!.read(b, 4, 7));
  assert.deepEqual(Array.from(bytes), Array.from(new Uint8Array(data.buffer, 4, 7)));
  const [a, c] = await Promise.all([rt!.readF32(b, 0, 300), rt!.readF32(b, 300, 300)]);
  assert.deepEqual(Array.from(a), Array.from(data.subarray(0, 300)));
  assert.deepEqual(Array.from(c), Array.from(data.subarray(300, 600)));
});

test("a recorded run replays with the same results, in one submission or in pieces", { skip }, async () => {
  for (const submitEvery of [1000, 2, 1]) {
    const r = new GpuRuntime(rt!.info, { submitEvery });
    const rng = new Rng(submitEvery);
    const x = rng.f64(64);
    const xb = f32(r, x);
    const y = r.buffer(64 * 4);
    // y = x, then y += x five times: 6x
    const run = (): void => {
      copyRows(r, xb, y, { n: 4, width: 16 });
      for (let i = 0; i < 5; i++) copyRows(r, xb, y, { n: 4, width: 16 }, true);
    };
    r.beginRecording();
    run();
    const rec = r.endRecording();
    assert.ok(rec !== undefined && rec.items.length === 6);
    const want = Array.from(Float32Array.from(x), (v) => Math.fround(v) * 6);
    const first = await r.readF32(y);
    first.forEach((v, i) => assert.ok(Math.abs(v - want[i]) < 1e-5, `recorded run ${i}`));
    await r.readF32(r.upload(new Float32Array(64)), 0, 1); // something else in between
    r.write(y, 0, new Float32Array(64));
    const d0 = r.stats.dispatches;
    r.replay(rec!);
    assert.equal(r.stats.dispatches - d0, 6);
    const again = await r.readF32(y);
    again.forEach((v, i) =>
      assert.ok(Math.abs(v - want[i]) < 1e-5, `replay (pieces of ${submitEvery}) ${i}: ${v} vs ${want[i]}`),
    );
  }
});

test("no recording under --check-writes (its fills and counts are not replayable)", { skip }, () => {
  const r = new GpuRuntime(rt!.info, { checkWrites: true });
  r.beginRecording();
  copyRows(r, f32(r, new Float64Array(8)), r.buffer(32), { n: 1, width: 8 });
  assert.equal(r.endRecording(), undefined);
});

test("timeItems: every recorded dispatch timed alone, with its label and code size; the recorded parameters are used", {
  skip: skip || !rt!.info.features.has("timestamp-query"),
}, async () => {
  const r = new GpuRuntime(rt!.info, { passTiming: true });
  const rng = new Rng(9);
  const x = rng.f64(64);
  const xb = f32(r, x);
  const y = r.buffer(64 * 4);
  r.beginRecording();
  copyRows(r, xb, y, { n: 4, width: 16 });
  copyRows(r, xb, y, { n: 4, width: 16 }, true);
  const rec = r.endRecording()!;
  await r.sync();
  assert.deepEqual(
    rec.items.map((it) => it.label),
    ["copy", "add"],
  );
  r.write(y, 0, new Float32Array(64));
  const times = await r.timeItems(rec, 3);
  assert.equal(times.length, 2);
  // (≥ 0, not > 0: Dawn's timestamps come in steps, 65.5 µs on the H200, and this tiny copy timed 0 there)
  for (const t of times) assert.ok(Number.isFinite(t.us) && t.us >= 0, `${t.label}: ${t.us} µs`);
  // and each kernel's WGSL length (a kernel of its own, compiled by the recording's dispatches)
  for (const t of times) assert.ok(t.codeChars > 100, `${t.label}: ${t.codeChars} characters of WGSL`);
  // item 1 accumulated three times onto the copy of item 0: x + 3x (the recorded parameters, acc for the second)
  const got = await r.readF32(y);
  got.forEach((v, i) =>
    assert.ok(Math.abs(v - 4 * Math.fround(x[i])) < 1e-5, `y[${i}] = ${v}, want ${4 * Math.fround(x[i])}`),
  );
});

test("collectPipelines dry-runs an encoding (nothing encoded or counted) and names the kernels not compiled yet, combined ones as together() combines them; precompile compiles them all", {
  skip,
}, async () => {
  const r = new GpuRuntime(rt!.info, {});
  const rng = new Rng(12);
  const x = rng.f64(64);
  const xb = f32(r, x);
  const y = r.buffer(64 * 4);
  // y[0..32) = 2x, y[32..64) = x: a copy and an add apart, then two copies combined
  const run = (): void => {
    r.together(() => {
      copyRows(r, xb, y, { n: 1, width: 32 });
      copyRows(r, xb, y, { n: 1, width: 32, xOff: 32, yOff: 32 });
    });
    copyRows(r, xb, y, { n: 1, width: 32 }, true);
  };
  const codes = r.collectPipelines(run);
  assert.equal(r.stats.dispatches, 0);
  assert.equal(r.pipelineCount, 0);
  assert.equal(codes.length, 2, "the combined copies and the add");
  assert.ok(codes.every((c) => c.includes("@compute")));
  assert.throws(() => r.collectPipelines(() => r.collectPipelines(run)), /does not nest/);
  const done: number[] = [];
  await r.precompile([...codes, codes[0]], (d, total) => {
    assert.equal(total, 2);
    done.push(d);
  });
  assert.deepEqual(done.sort(), [1, 2]);
  assert.equal(r.pipelineCount, 2);
  assert.deepEqual(r.collectPipelines(run), [], "nothing left to compile");
  run();
  assert.equal(r.pipelineCount, 2, "the real run compiles nothing more");
  assert.equal(r.stats.dispatches, 2);
  const got = await r.readF32(y);
  got.forEach((v, i) => assert.ok(Math.abs(v - Math.fround(x[i]) * (i < 32 ? 2 : 1)) < 1e-6, `y[${i}] = ${v}`));
});

test("together(): a combined kernel is reused only for the same kernels with the same buffers shared — one output buffer for both copies, then two, then one again", {
  skip,
}, async () => {
  const r = new GpuRuntime(rt!.info, {});
  r.device.pushErrorScope("validation");
  const rng = new Rng(13);
  const x = rng.f64(64);
  const xb = f32(r, x);
  const shared = r.buffer(64 * 4);
  const apart = [r.buffer(32 * 4), r.buffer(32 * 4)];
  const pair = (y0: GPUBuffer, y1: GPUBuffer, yOff1: number): void =>
    r.together(() => {
      copyRows(r, xb, y0, { n: 1, width: 32 });
      copyRows(r, xb, y1, { n: 1, width: 32, xOff: 32, yOff: yOff1 });
    });
  for (let round = 0; round < 2; round++) {
    for (const b of [shared, ...apart]) r.write(b, 0, new Float32Array(b.size / 4));
    const d0 = r.stats.dispatches;
    pair(shared, shared, 32);
    pair(apart[0], apart[1], 0);
    assert.equal(r.stats.dispatches - d0, 2, "each pair one combined dispatch");
    const got = [...(await r.readF32(shared)), ...(await r.readF32(apart[0])), ...(await r.readF32(apart[1]))];
    const want = [...x, ...x].map((v) => Math.fround(v));
    got.forEach((v, i) => assert.equal(v, want[i], `round ${round}, word ${i}`));
  }
  assert.equal((await r.device.popErrorScope())?.message, undefined);
});
