/**
 * `WebGPUKernels`: the engine's MatKernels on the GPU. Weights are uploaded once (at `upload(weights)` or on first
 * use) and stay resident in their GGUF block layout; activations travel per call. The model's forward pass is
 * synchronous, so the device lives in a worker thread and each product blocks on Atomics.wait until the worker has
 * the result in shared memory — the simplest whole-model GPU path (every matrix product of prefill and decode on the
 * GPU; attention, norms and routing stay on the CPU). The fused, asynchronous per-step pipeline is gpu-model.ts.
 */
import type { MatKernels } from "../../../model/kernels.js";
import type { Vec } from "../../../tensor/ops.js";
import type { QMatrix } from "../../../tensor/qmatrix.js";
import type { ModelWeights } from "../../../model/weights.js";
import { LatentError } from "../../../util/errors.js";
import { NoGpuError } from "../core/device.js";
import { gpuSupports } from "../kernels/quant.wgsl.js";
import { BlockingWorker, newChannel, type BlockingChannel } from "../core/blocking-worker.js";
import type { GpuActivations } from "../core/runtime.js";

export type KernelRequest =
  | { op: "init" }
  | { op: "upload"; id: number; name: string; type: number; cols: number; rows: number; bytes: Uint8Array }
  | { op: "data"; buffer: SharedArrayBuffer }
  | { op: "matmul" | "matmulT"; id: number; n: number }
  | { op: "close" };

export interface WorkerInit {
  readonly channel: BlockingChannel;
  readonly data: SharedArrayBuffer;
  readonly checkWrites: boolean;
  readonly maxBindingBytes: number | undefined;
  readonly activations: GpuActivations;
}

export interface WebGPUKernelOptions {
  readonly checkWrites?: boolean;
  readonly maxBindingBytes?: number;
  /** RuntimeOptions.activations (default exact) */
  readonly activations?: GpuActivations;
  /** ms to wait for the device (default 60 s) */
  readonly timeoutMs?: number;
}

export class WebGPUKernels implements MatKernels {
  /** "webgpu", or "webgpu q8" with activations q8 */
  readonly name: string;
  readonly adapter: string;
  private readonly worker: BlockingWorker<KernelRequest>;
  private data: Float32Array;
  private readonly ids = new WeakMap<QMatrix, number>();
  private nextId = 1;
  /** products run on the GPU */
  calls = 0;

  constructor(opts: WebGPUKernelOptions = {}) {
    this.name =
      opts.activations === "exact" || opts.activations === undefined ? "webgpu" : `webgpu ${opts.activations}`;
    const data = new SharedArrayBuffer(1 << 20);
    this.data = new Float32Array(data);
    const channel = newChannel();
    this.worker = new BlockingWorker<KernelRequest>(
      "kernel-worker",
      channel,
      {
        data,
        checkWrites: opts.checkWrites === true,
        maxBindingBytes: opts.maxBindingBytes,
        activations: opts.activations ?? "exact",
      },
      opts.timeoutMs ?? 60_000,
      import.meta.url,
    );
    try {
      this.adapter = this.worker.call({ op: "init" });
    } catch (e) {
      this.worker.terminate();
      throw e instanceof LatentError ? new NoGpuError(e.message) : e;
    }
  }

  private idOf(w: QMatrix): number {
    let id = this.ids.get(w);
    if (id === undefined) {
      if (!gpuSupports(w.type)) throw new LatentError(`${w.name}: the WebGPU backend cannot read this weight type`);
      id = this.nextId++;
      this.ids.set(w, id);
      // a copy: the worker keeps its own bytes only until they are on the GPU
      this.worker.post({
        op: "upload",
        id,
        name: w.name,
        type: w.type,
        cols: w.cols,
        rows: w.rows,
        bytes: w.data.slice(),
      });
    }
    return id;
  }

  /** Upload every matrix of a model now (else each is uploaded on first use). */
  upload(weights: ModelWeights): void {
    const all: QMatrix[] = [weights.output];
    for (const l of weights.layers) {
      const a = l.attn;
      for (const m of [a.q, a.qA, a.qB, a.kvA, a.o, ...a.kB, ...a.vB, a.indexer?.qB, a.indexer?.k, a.indexer?.proj])
        if (m !== undefined) all.push(m);
      for (const f of [l.dense, l.moe?.shared, ...(l.moe?.experts ?? [])])
        if (f !== undefined) all.push(f.gate, f.up, f.down);
      if (l.moe !== undefined) all.push(l.moe.router);
    }
    for (const m of all) this.idOf(m);
  }

  private ensureData(floats: number): void {
    if (floats <= this.data.length) return;
    const buffer = new SharedArrayBuffer(2 ** Math.ceil(Math.log2(floats * 4)));
    this.data = new Float32Array(buffer);
    this.worker.post({ op: "data", buffer });
  }

  private run(op: "matmul" | "matmulT", w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    if (n === 0) return;
    const inW = op === "matmul" ? w.cols : w.rows;
    const outW = op === "matmul" ? w.rows : w.cols;
    const id = this.idOf(w);
    this.ensureData(Math.max(n * inW, n * outW));
    const d = this.data;
    for (let t = 0; t < n; t++) for (let c = 0; c < inW; c++) d[t * inW + c] = x[t * xStride + c];
    this.worker.call({ op, id, n });
    for (let t = 0; t < n; t++) for (let r = 0; r < outW; r++) y[t * yStride + r] = d[t * outW + r];
    this.calls++;
  }

  matmul(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    this.run("matmul", w, x, n, xStride, y, yStride);
  }

  matmulT(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    this.run("matmulT", w, x, n, xStride, y, yStride);
  }

  /** Drain the worker's queue (uploads are fire-and-forget), release the device, then end the thread. */
  close(): Promise<number> {
    return this.worker.close({ op: "close" });
  }
}
