/// <reference types="@webgpu/types" />
/**
 * Worker side of WebGPUKernels: owns the device and the resident weights; answers each product through shared
 * memory (the caller blocks on Atomics.wait, so the model's synchronous MatKernels contract holds).
 */
import { parentPort, workerData } from "node:worker_threads";
import { requestGpuDevice } from "../core/device.js";
import { GpuMatrix, matmul, matmulT } from "../kernels/matmul/matrix.js";
import { GpuRuntime } from "../core/runtime.js";
import type { KernelRequest, WorkerInit } from "./kernels.js";
import { answer } from "../core/blocking-worker.js";

const init = workerData as WorkerInit;
let data = new Float32Array(init.data);
const matrices = new Map<number, GpuMatrix>();
let rt: GpuRuntime | undefined;
let xBuf: GPUBuffer | undefined;
let yBuf: GPUBuffer | undefined;

function done(status: 1 | 2, message = ""): void {
  answer(init.channel, status, message);
}

function scratch(buf: GPUBuffer | undefined, floats: number, label: string): GPUBuffer {
  if (buf !== undefined && buf.size >= floats * 4) return buf;
  buf?.destroy();
  return rt!.buffer(Math.max(1024, floats * 4 * 1.5), label);
}

async function handle(req: KernelRequest): Promise<void> {
  switch (req.op) {
    case "init": {
      const info = await requestGpuDevice();
      rt = new GpuRuntime(info, {
        checkWrites: init.checkWrites,
        maxBindingBytes: init.maxBindingBytes,
        activations: init.activations,
      });
      done(1, info.adapterInfo);
      return;
    }
    case "upload":
      matrices.set(req.id, GpuMatrix.upload(rt!, req.name, req.type, req.cols, req.rows, req.bytes));
      return; // no answer: uploads are fire-and-forget, ordered before later products
    case "data":
      data = new Float32Array(req.buffer);
      return;
    case "matmul":
    case "matmulT": {
      const m = matrices.get(req.id)!;
      const inW = req.op === "matmul" ? m.cols : m.rows;
      const outW = req.op === "matmul" ? m.rows : m.cols;
      xBuf = scratch(xBuf, req.n * inW, "x");
      yBuf = scratch(yBuf, req.n * outW, "y");
      rt!.write(xBuf, 0, data.subarray(0, req.n * inW));
      const args = { n: req.n, xStride: inW, yStride: outW };
      if (req.op === "matmul") matmul(rt!, m, xBuf, yBuf, args);
      else matmulT(rt!, m, xBuf, yBuf, args);
      const out = new Float32Array(await rt!.read(yBuf, 0, req.n * outW * 4));
      data.set(out, 0);
      done(1);
      return;
    }
    case "close":
      for (const m of matrices.values()) m.destroy();
      matrices.clear();
      xBuf?.destroy();
      yBuf?.destroy();
      rt?.device.destroy();
      done(1);
      return;
  }
}

let queue = Promise.resolve();
parentPort!.on("message", (req: KernelRequest) => {
  queue = queue
    .then(() => handle(req))
    .catch((e: unknown) => done(2, e instanceof Error ? `${e.name}: ${e.message}` : String(e)));
});
