// A worker thread that cannot start (its module does not load) fails the first call at once with the reason, and
// every later call the same way, instead of blocking until the call's timeout. No GPU needed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { BlockingWorker, newChannel } from "../../../src/backend/webgpu/core/blocking-worker.js";

test("a worker whose module cannot load fails its calls at once, naming the reason", () => {
  const w = new BlockingWorker<{ op: string }>("no-such-worker", newChannel(), {}, 60_000);
  const t0 = Date.now();
  assert.throws(() => w.call({ op: "device" }), /the no-such-worker thread failed to start: .*no-such-worker/);
  assert.ok(Date.now() - t0 < 30_000, `${Date.now() - t0} ms`);
  // sticky: a later call fails the same way without waiting
  const t1 = Date.now();
  assert.throws(() => w.call({ op: "device" }), /failed to start/);
  assert.ok(Date.now() - t1 < 1_000);
  w.terminate();
});

test("a worker that dies of an uncaught error fails the waiting call at once, naming the error", () => {
  // (a path relative to this test: the from argument)
  const w = new BlockingWorker<{ op: string }>(
    "../../fixtures/workers/dies-later",
    newChannel(),
    {},
    60_000,
    import.meta.url,
  );
  const t0 = Date.now();
  assert.throws(
    () => w.call({ op: "step" }),
    /the \.\.\/\.\.\/fixtures\/workers\/dies-later thread died: Error: boom outside any request/,
  );
  assert.ok(Date.now() - t0 < 30_000, `${Date.now() - t0} ms`);
  assert.throws(() => w.call({ op: "step" }), /died/);
  w.terminate();
});
