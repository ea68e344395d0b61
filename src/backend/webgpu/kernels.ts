/**
 * `WebGPUKernels`: the engine's MatKernels on the GPU. Weights are uploaded once (at `upload(weights)` or on first
 * use) and stay resident in their GGUF block layout; activations travel per call. The model's forward pass is
 * synchronous, so the device lives in a worker thread and each product blocks on Atomics.wait until the worker has
 * the result in shared memory — the simplest whole-model GPU path (every matrix product of prefill and decode on the
 * GPU; attention, norms and routing stay on the CPU). The fused, asynchronous per-step pipeline is gpu-model.ts.
 */
import { Worker } from "node:worker_threads";
import type { MatKernels } from "../cpu/kernels.js";
import type { Vec } from "../cpu/ops.js";
import type { QMatrix } from "../cpu/qmatrix.js";
import type { ModelWeights } from "../../model/weights.js";
import { LatentError } from "../../util/errors.js";
import { NoGpuError } from "./device.js";
import { gpuSupports } from "./wgsl-quant.js";

export type KernelRequest =
  | { op: "init" }
  | { op: "upload"; id: number; name: string; type: number; cols: number; rows: number; bytes: Uint8Array }
  | { op: "data"; buffer: SharedArrayBuffer }
  | { op: "matmul" | "matmulT"; id: number; n: number }
  | { op: "stats" }
  | { op: "close" };

export interface WorkerInit {
  readonly control: SharedArrayBuffer;
  readonly data: SharedArrayBuffer;
  readonly message: SharedArrayBuffer;
  readonly checkWrites: boolean;
  readonly maxBindingBytes: number | undefined;
}

export interface WebGPUKernelOptions {
  readonly checkWrites?: boolean;
  readonly maxBindingBytes?: number;
  /** ms to wait for the device (default 60 s) */
  readonly timeoutMs?: number;
}

/** The worker: compiled JS directly; from TypeScript sources (tests, tsx) through tsx's loader. */
function spawnWorker(workerData: WorkerInit): Worker {
  if (!import.meta.url.endsWith(".ts")) return new Worker(new URL("./kernel-worker.js", import.meta.url), { workerData });
  const url = new URL("./kernel-worker.ts", import.meta.url).href;
  const boot = `(async () => { const { register } = await import("tsx/esm/api"); register(); await import(${JSON.stringify(url)}); })();`;
  return new Worker(boot, { eval: true, workerData });
}

export class WebGPUKernels implements MatKernels {
  readonly name = "webgpu";
  readonly adapter: string;
  private readonly worker: Worker;
  private readonly ctl: Int32Array;
  private readonly message: SharedArrayBuffer;
  private data: Float32Array;
  private readonly ids = new WeakMap<QMatrix, number>();
  private nextId = 1;
  private readonly timeoutMs: number;
  /** products run on the GPU */
  calls = 0;
  private closed = false;

  constructor(opts: WebGPUKernelOptions = {}) {
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    const control = new SharedArrayBuffer(4);
    const data = new SharedArrayBuffer(1 << 20);
    this.message = new SharedArrayBuffer(4096);
    this.ctl = new Int32Array(control);
    this.data = new Float32Array(data);
    const init: WorkerInit = { control, data, message: this.message, checkWrites: opts.checkWrites === true, maxBindingBytes: opts.maxBindingBytes };
    this.worker = spawnWorker(init);
    this.worker.unref();
    try {
      this.adapter = this.call({ op: "init" });
    } catch (e) {
      void this.worker.terminate();
      throw e instanceof LatentError ? new NoGpuError(e.message) : e;
    }
  }

  /** Post a request and block until the worker answers; returns the worker's message. */
  private call(req: KernelRequest): string {
    Atomics.store(this.ctl, 0, 0);
    this.worker.postMessage(req);
    const r = Atomics.wait(this.ctl, 0, 0, this.timeoutMs);
    if (r === "timed-out") throw new LatentError(`webgpu worker: no answer to ${req.op} within ${this.timeoutMs} ms`);
    const status = Atomics.load(this.ctl, 0);
    const len = new DataView(this.message).getUint32(0, true);
    const text = new TextDecoder().decode(new Uint8Array(this.message, 4, len).slice());
    new DataView(this.message).setUint32(0, 0, true);
    if (status === 2) throw new LatentError(`webgpu: ${text}`);
    return text;
  }

  private idOf(w: QMatrix): number {
    let id = this.ids.get(w);
    if (id === undefined) {
      if (!gpuSupports(w.type)) throw new LatentError(`${w.name}: the WebGPU backend cannot read this weight type`);
      id = this.nextId++;
      this.ids.set(w, id);
      // a copy: the worker keeps its own bytes only until they are on the GPU
      this.worker.postMessage({ op: "upload", id, name: w.name, type: w.type, cols: w.cols, rows: w.rows, bytes: w.data.slice() } satisfies KernelRequest);
    }
    return id;
  }

  /** Upload every matrix of a model now (else each is uploaded on first use). */
  upload(weights: ModelWeights): void {
    const all: QMatrix[] = [weights.output];
    for (const l of weights.layers) {
      const a = l.attn;
      for (const m of [a.q, a.qA, a.qB, a.kvA, a.o, ...a.kB, ...a.vB, a.indexer?.qB, a.indexer?.k, a.indexer?.proj]) if (m !== undefined) all.push(m);
      for (const f of [l.dense, l.moe?.shared, ...(l.moe?.experts ?? [])]) if (f !== undefined) all.push(f.gate, f.up, f.down);
      if (l.moe !== undefined) all.push(l.moe.router);
    }
    for (const m of all) this.idOf(m);
  }

  private ensureData(floats: number): void {
    if (floats <= this.data.length) return;
    const buffer = new SharedArrayBuffer(2 ** Math.ceil(Math.log2(floats * 4)));
    this.data = new Float32Array(buffer);
    this.worker.postMessage({ op: "data", buffer } satisfies KernelRequest);
  }

  private run(op: "matmul" | "matmulT", w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    if (n === 0) return;
    const inW = op === "matmul" ? w.cols : w.rows;
    const outW = op === "matmul" ? w.rows : w.cols;
    const id = this.idOf(w);
    this.ensureData(Math.max(n * inW, n * outW));
    const d = this.data;
    for (let t = 0; t < n; t++) for (let c = 0; c < inW; c++) d[t * inW + c] = x[t * xStride + c]!;
    this.call({ op, id, n });
    for (let t = 0; t < n; t++) for (let r = 0; r < outW; r++) y[t * yStride + r] = d[t * outW + r]!;
    this.calls++;
  }

  matmul(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    this.run("matmul", w, x, n, xStride, y, yStride);
  }

  matmulT(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    this.run("matmulT", w, x, n, xStride, y, yStride);
  }

  /**
   * Drain the worker's queue (uploads are fire-and-forget), release the device, then end the thread. Terminating a
   * worker while it is inside Dawn aborts the whole process, so the worker must be idle first.
   */
  close(): Promise<number> {
    if (this.closed) return Promise.resolve(0);
    this.closed = true;
    try {
      this.call({ op: "close" });
    } catch {
      // a worker that does not answer is ended anyway
    }
    return this.worker.terminate();
  }
}
