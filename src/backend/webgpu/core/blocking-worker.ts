/**
 * A worker thread that owns a GPU device, driven synchronously: the caller posts a request and blocks on
 * Atomics.wait until the worker answers through shared memory (a status word and a message), so synchronous code —
 * the model's forward pass — can drive the asynchronous WebGPU API. Used by WebGPUKernels (one matrix product per
 * call) and FusedGpuModel (one whole step per call).
 */
import { Worker } from "node:worker_threads";
import { LatentError } from "../../../util/errors.js";

/** Shared memory of one caller ↔ worker pair; the worker gets it as part of its workerData. */
export interface BlockingChannel {
  /** Int32 status word: 0 while waiting, 1 done, 2 failed, 3 the thread could not start (stays so) */
  readonly control: SharedArrayBuffer;
  /** u32 length + UTF-8 text (the answer, or the error) */
  readonly message: SharedArrayBuffer;
}

export function newChannel(): BlockingChannel {
  return { control: new SharedArrayBuffer(4), message: new SharedArrayBuffer(4096) };
}

/** The status word of a worker that could not start: every call fails with its reason. */
const DEAD = 3;

/** Worker side: answer the blocked caller (status 1 = done, 2 = failed, 3 = could not start) with an optional text. */
export function answer(ch: BlockingChannel, status: 1 | 2 | 3, text = ""): void {
  const bytes = new TextEncoder().encode(text.slice(0, 4000));
  const room = ch.message.byteLength - 4;
  new Uint8Array(ch.message).set(bytes.subarray(0, room), 4);
  new DataView(ch.message).setUint32(0, Math.min(bytes.length, room), true);
  const ctl = new Int32Array(ch.control);
  Atomics.store(ctl, 0, status);
  Atomics.notify(ctl, 0);
}

/**
 * The worker `name` (a module beside `from`, the caller's import.meta.url; by default beside this one: compiled JS, or
 * TypeScript through tsx's loader in tests), started from a small
 * string boot that imports it. The boot answers the blocked caller itself when the module cannot load — a missing
 * package, or a flag the thread inherited that a module entry refuses (`node --input-type=module -e …` makes a
 * file-entry worker exit before any of its code runs) — so that the first call fails at once with the reason instead of
 * waiting out its timeout.
 */
function spawn(name: string, workerData: { readonly channel: BlockingChannel }, from?: string): Worker {
  // a computed path, not a literal: bundlers (Vite) would try to resolve `new URL(literal, import.meta.url)` as an asset
  const here = import.meta.url;
  const ts = here.endsWith(".ts");
  const url = new URL("./" + name + (ts ? ".ts" : ".js"), from ?? here).href;
  const self = new URL("./blocking-worker" + (ts ? ".ts" : ".js"), here).href;
  const boot = `(async () => {
  const { workerData } = await import("node:worker_threads");
  const reason = (e) => (e instanceof Error ? e.name + ": " + e.message : String(e));
  try {
    ${ts ? 'const { register } = await import("tsx/esm/api"); register();' : ""}
    const { answer } = await import(${JSON.stringify(self)});
    // an error nothing caught (a callback's, outside any request) ends the thread: say so to the caller
    const died = (e) => { answer(workerData.channel, ${DEAD}, ${JSON.stringify(`the ${name} thread died: `)} + reason(e)); process.exit(1); };
    process.on("uncaughtException", died);
    process.on("unhandledRejection", died);
    try {
      await import(${JSON.stringify(url)});
    } catch (e) {
      answer(workerData.channel, ${DEAD}, ${JSON.stringify(`the ${name} thread failed to start: `)} + reason(e));
    }
  } catch (e) {
    console.error(${JSON.stringify(`the ${name} thread failed to start: `)} + reason(e));
  }
})();`;
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
    /** the import.meta.url that `name` is relative to (default: this module's) */
    from?: string,
  ) {
    this.ctl = new Int32Array(channel.control);
    this.worker = spawn(name, { ...workerData, channel }, from);
    this.worker.unref();
  }

  /**
   * Post a request and block until the worker answers; returns its text, throws LatentError with its error. With
   * `onTick`, the wait is cut in 100 ms slices and onTick runs after each (progress of a long call).
   */
  call(req: Req, onTick?: () => void): string {
    // (an exchange, not a store: a thread that failed to start between two calls must not be overwritten)
    if (Atomics.exchange(this.ctl, 0, 0) === DEAD) {
      Atomics.store(this.ctl, 0, DEAD);
      throw new LatentError(`webgpu: ${this.text()}`);
    }
    this.worker.postMessage(req);
    const deadline = Date.now() + this.timeoutMs;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) throw new LatentError(`webgpu worker: no answer to ${req.op} within ${this.timeoutMs} ms`);
      if (Atomics.wait(this.ctl, 0, 0, onTick === undefined ? left : Math.min(left, 100)) !== "timed-out") break;
      onTick?.();
    }
    const status = Atomics.load(this.ctl, 0);
    const text = this.text();
    if (status === DEAD) throw new LatentError(`webgpu: ${text}`);
    new DataView(this.channel.message).setUint32(0, 0, true);
    if (status === 2) throw new LatentError(`webgpu: ${text}`);
    return text;
  }

  private text(): string {
    const len = new DataView(this.channel.message).getUint32(0, true);
    return new TextDecoder().decode(new Uint8Array(this.channel.message, 4, len).slice());
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
