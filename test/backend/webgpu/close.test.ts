// Closing WebGPUKernels while uploads are still queued (they are fire-and-forget) must drain the worker first:
// terminating a worker thread inside a Dawn call aborts the whole process (seen in CI as SIGABRT in createBuffer).
// Runs in a child process so that an abort fails this test instead of killing the runner.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { gpuOrSkip } from "./helpers.js";
import { CASES, synthModel } from "../../helpers/synth.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();

const CHILD = `
const { loadModel } = await import(${JSON.stringify(new URL("../../../src/runtime/load.ts", import.meta.url).href)});
const { WebGPUKernels } = await import(${JSON.stringify(new URL("../../../src/backend/webgpu/engine/kernels.ts", import.meta.url).href)});
const { model } = loadModel(process.argv[1]);
for (let i = 0; i < 3; i++) {
  const k = new WebGPUKernels();
  k.upload(model.weights);
  await k.close();
}
console.log("closed");
`;

test("close() right after queuing every upload: no abort, the process ends normally", { skip }, () => {
  const m = synthModel(CASES[0], 3);
  try {
    const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", CHILD, m.path], {
      encoding: "utf8",
      env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" },
      timeout: 120_000,
    });
    assert.equal(r.signal, null, `child ended by ${r.signal}: ${r.stderr.slice(-2000)}`);
    assert.equal(r.status, 0, r.stderr.slice(-2000));
    assert.match(r.stdout, /closed/);
  } finally {
    m.cleanup();
  }
});
