/**
 * A worker thread that owns a GPU device, driven synchronously: the caller posts a request and blocks on
 * Atomics.wait until the worker answers through shared memory (a status word and a message), so synchronous code —
 * the model's forward pass — can drive the asynchronous WebGPU API. Used by WebGPUKernels (one matrix product per
 * call) and FusedGpuModel (one whole step per call).
 */
import { Worker } from "node:worker_threads";
import { LatentError } from "../../util/errors.js";

/** Shared memory of one caller ↔ worker pair; the worker gets it as part of its workerData. */
export interface BlockingChannel {
  /** Int32 status word: 0 while waiting, 1 done, 2 failed */
  readonly control: SharedArrayBuffer;
  /** u32 length + UTF-8 text (the answer, or the error) */
  readonly message: SharedArrayBuffer;
}

export function newChannel(): BlockingChannel {
  return { control: new SharedArrayBuffer(4), message: new SharedArrayBuffer(4096) };
}

/** Worker side: answer the blocked caller (status 1 = done, 2 = failed) with an optional text. */
export function answer(ch: BlockingChannel, status: 1 | 2, text = ""): void {
  const bytes = new TextEncoder().encode(text.slice(0, 4000));
  const room = ch.message.byteLength - 4;
  new Uint8Array(ch.message).set(bytes.subarray(0, room), 4);
  new DataView(ch.message).setUint32(0, Math.min(bytes.length, room), true);
  const ctl = new Int32Array(ch.control);
  Atomics.store(ctl, 0, status);
  Atomics.notify(ctl, 0);
}

/** The worker `name` (a sibling module): compiled JS directly; from TypeScript sources (tests, tsx) through tsx's loader. */
function spawn(name: string, workerData: unknown): Worker {
  // a computed path, not a literal: bundlers (Vite) would try to resolve `new URL(literal, import.meta.url)` as an asset
  const here = import.meta.url;
  if (!here.endsWith(".ts")) return new Worker(new URL("./" + name + ".js", here), { workerData });
  const url = new URL("./" + name + ".ts", here).href;
  const boot = `(async () => { const { register } = await import("tsx/esm/api"); register(); await import(${JSON.stringify(url)}); })();`;
  return new Worker(boot, { eval: true, workerData });
}

export class BlockingWorker<Req extends { readonly op: string }> {
  private readonly worker: Worker;
  private readonly ctl: Int32Array;
  private closed = false;

  constructor(
    name: string,
    private readonly channel: BlockingChannel,
    workerData: object,
    private readonly timeoutMs: number,
  ) {
    this.ctl = new Int32Array(channel.control);
    this.worker = spawn(name, { ...workerData, channel });
    this.worker.unref();
  }

  /**
   * Post a request and block until the worker answers; returns its text, throws LatentError with its error. With
   * `onTick`, the wait is cut in 100 ms slices and onTick runs after each (progress of a long call).
   */
  call(req: Req, onTick?: () => void): string {
    Atomics.store(this.ctl, 0, 0);
    this.worker.postMessage(req);
    const deadline = Date.now() + this.timeoutMs;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) throw new LatentError(`webgpu worker: no answer to ${req.op} within ${this.timeoutMs} ms`);
      if (Atomics.wait(this.ctl, 0, 0, onTick === undefined ? left : Math.min(left, 100)) !== "timed-out") break;
      onTick?.();
    }
    const status = Atomics.load(this.ctl, 0);
    const len = new DataView(this.channel.message).getUint32(0, true);
    const text = new TextDecoder().decode(new Uint8Array(this.channel.message, 4, len).slice());
    new DataView(this.channel.message).setUint32(0, 0, true);
    if (status === 2) throw new LatentError(`webgpu: ${text}`);
    return text;
  }

  /** Post a request that gets no answer (ordered before later calls). */
  post(req: Req): void {
    this.worker.postMessage(req);
  }

  /**
   * Drain the worker's queue with `closing` (the worker releases its device and answers), then end the thread.
   * Terminating a worker while it is inside Dawn aborts the whole process, so the worker must be idle first.
   */
  close(closing: Req): Promise<number> {
    if (this.closed) return Promise.resolve(0);
    this.closed = true;
    try {
      this.call(closing);
    } catch {
      // a worker that does not answer is ended anyway
    }
    return this.worker.terminate();
  }

  /** End the thread without draining (only when it is known to be idle, e.g. after a failed init). */
  terminate(): void {
    this.closed = true;
    void this.worker.terminate();
  }
}
