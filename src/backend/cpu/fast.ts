/**
 * The fast CPU backend: WebAssembly SIMD matrix kernels (src/backend/cpu/wasm/kernels.as) over weights kept in shared
 * WebAssembly memories ("arenas", SharedArrayBuffers of at most 4 GiB each), run in parallel by a pool of
 * worker_threads. The main thread quantizes the activations, hands out row ranges (or, for the transposed product,
 * token ranges), does its own share and waits on an Atomics counter: the forward stays synchronous.
 *
 * Numerics: quantized weights use integer dot products against activations quantized to 8 bits (kept as i16) per
 * block, ggml-style (Q8_K: one scale per 256 values for K quants and IQ4_XS; Q8_0: one per 32 for Q8_0, Q4_0, Q5_0,
 * IQ4_NL); F32/F16 weights use f32 activations; sums are f32. Types without a fast kernel (and odd shapes) fall back
 * to the plain kernels, per call.
 */
import { Worker, MessageChannel } from "node:worker_threads";
import { availableParallelism } from "node:os";
import type { GGUFFile } from "../../gguf/file.js";
import type { TensorInfo } from "../../gguf/reader.js";
import type { ModelConfig } from "../../model/config.js";
import type { LatentRows, Projections } from "../../model/mla.js";
import type { AttentionWeights } from "../../model/weights.js";
import { fastAbsorbed, fastMha } from "./attention.js";
import { plainKernels, type MatKernels } from "./kernels.js";
import type { Vec } from "./ops.js";
import type { QMatrix } from "./qmatrix.js";
import { KERNELS_WASM_BASE64 } from "./wasm/kernels.wasm.js";

interface KernelExports {
  typeClass(type: number): number;
  blockValues(type: number): number;
  scratchBytes(cols: number): number;
  quantize(cls: number, x: number, n: number, cols: number, xStride: number, aq: number, ad: number, as: number): void;
  matmul(type: number, w: number, rowBytes: number, r0: number, r1: number, cols: number, n: number, x: number, xStride: number, aq: number, ad: number, as: number, y: number, yStride: number, S: number, tc: number): void;
  matmulT(type: number, w: number, rowBytes: number, rows: number, cols: number, t0: number, t1: number, x: number, xStride: number, y: number, yStride: number, S: number): void;
}

const PAGE = 65536;
const MAX_PAGES = 65536;
/** bytes below this offset are never handed out */
const RESERVED = PAGE;
/** activations + outputs of one call are cut into token chunks that fit this many bytes */
const WORK_CAP = 48 << 20;
/** below this many multiply-adds a product runs on the calling thread alone */
const PARALLEL_MIN = 1 << 17;
/** tokens per chunk inside the kernel (activations of a chunk stay in cache while rows stream by) */
const TOKEN_TILE = 64;
const SPIN = 20000;

// control words
const GEN = 0;
const DONE = 1;
// job words (Float64)
const OP_MATMUL = 1;
const OP_MATMUL_T = 2;
const OP_ATTACH = 3;
const OP_EXIT = 4;

/** pointers can exceed 2³¹: no 32-bit bitwise arithmetic on them */
function align64(x: number): number {
  return Math.ceil(x / 64) * 64;
}

let wasmModule: WebAssembly.Module | undefined;
function kernelModule(): WebAssembly.Module {
  wasmModule ??= new WebAssembly.Module(Buffer.from(KERNELS_WASM_BASE64, "base64"));
  return wasmModule;
}

function instantiate(memory: WebAssembly.Memory): KernelExports {
  return new WebAssembly.Instance(kernelModule(), { env: { memory } }).exports as unknown as KernelExports;
}

/** One shared wasm memory with a bump allocator for weights and a work area for a call's activations and outputs. */
class Arena {
  readonly memory: WebAssembly.Memory;
  readonly k: KernelExports;
  top = RESERVED;
  workPtr = 0;
  workSize = 0;
  private f32View: Float32Array;

  constructor(
    readonly index: number,
    private readonly onBuffer: (buf: ArrayBufferLike, a: Arena) => void,
  ) {
    this.memory = new WebAssembly.Memory({ initial: 256, maximum: MAX_PAGES, shared: true });
    this.k = instantiate(this.memory);
    this.f32View = new Float32Array(this.memory.buffer);
    onBuffer(this.memory.buffer, this);
  }

  get capacity(): number {
    return MAX_PAGES * PAGE - PAGE;
  }

  canFit(bytes: number): boolean {
    return this.top + bytes + 64 <= this.capacity;
  }

  private ensure(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end <= have) return;
    const want = Math.min(MAX_PAGES, Math.max(Math.ceil(end / PAGE), Math.ceil(have / PAGE) + 256));
    this.memory.grow(want - have / PAGE);
    this.f32View = new Float32Array(this.memory.buffer);
    this.onBuffer(this.memory.buffer, this);
  }

  /** `bytes` bytes, 64-aligned, as a view (weights: never freed) */
  alloc(bytes: number): Uint8Array {
    const ptr = align64(this.top);
    if (ptr + bytes > this.capacity) throw new Error(`arena ${this.index} full`);
    this.ensure(ptr + bytes);
    this.top = ptr + bytes;
    return new Uint8Array(this.memory.buffer, ptr, bytes);
  }

  /** the work area, at least `bytes` long (grown by bumping: the old one is left behind) */
  work(bytes: number): number {
    if (bytes > this.workSize) {
      const size = Math.max(bytes, 1 << 20);
      const ptr = align64(this.top);
      if (ptr + size > this.capacity) throw new Error(`arena ${this.index}: no room for a ${size}-byte work area`);
      this.ensure(ptr + size);
      this.top = ptr + size;
      this.workPtr = ptr;
      this.workSize = size;
    }
    return this.workPtr;
  }

  get f32(): Float32Array {
    if (this.f32View.length * 4 !== this.memory.buffer.byteLength) this.f32View = new Float32Array(this.memory.buffer);
    return this.f32View;
  }
}

const WORKER_SOURCE = String.raw`
const { workerData, receiveMessageOnPort } = require("node:worker_threads");
const { module, ctl, job, index, threads, port, spin } = workerData;
const C = new Int32Array(ctl);
const P = new Float64Array(job);
const inst = [];
let gen = 0;
for (;;) {
  let s = 0;
  while (Atomics.load(C, 0) === gen) {
    if (++s > spin) Atomics.wait(C, 0, gen, 50);
  }
  gen = Atomics.load(C, 0);
  const op = P[0];
  if (op === 4) break;
  if (op === 3) {
    const want = P[1];
    while (inst.length < want) {
      const m = receiveMessageOnPort(port);
      if (m !== undefined) inst.push(new WebAssembly.Instance(module, { env: { memory: m.message } }).exports);
    }
  } else {
    const k = inst[P[1]];
    const S = P[16] + index * P[17];
    if (op === 1) {
      const rows = P[5];
      const r0 = Math.floor((rows * index) / threads), r1 = Math.floor((rows * (index + 1)) / threads);
      if (r1 > r0) k.matmul(P[2], P[3], P[4], r0, r1, P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13], P[14], S, P[15]);
    } else if (op === 2) {
      const n = P[7];
      const t0 = Math.floor((n * index) / threads), t1 = Math.floor((n * (index + 1)) / threads);
      if (t1 > t0) k.matmulT(P[2], P[3], P[4], P[5], P[6], t0, t1, P[8], P[9], P[13], P[14], S);
    }
  }
  Atomics.add(C, 1, 1);
  Atomics.notify(C, 1);
}
`;

/** worker_threads sharing the arenas; thread 0 is the caller. */
class Pool {
  private readonly ctl = new Int32Array(new SharedArrayBuffer(64));
  readonly job = new Float64Array(new SharedArrayBuffer(32 * 8));
  private readonly workers: Worker[] = [];
  private readonly ports: MessageChannel[] = [];
  private attached = 0;

  constructor(readonly threads: number) {
    for (let i = 1; i < threads; i++) {
      const ch = new MessageChannel();
      const w = new Worker(WORKER_SOURCE, {
        eval: true,
        execArgv: [],
        workerData: { module: kernelModule(), ctl: this.ctl.buffer, job: this.job.buffer, index: i, threads, port: ch.port2, spin: SPIN },
        transferList: [ch.port2],
      });
      w.unref();
      this.workers.push(w);
      this.ports.push(ch);
    }
  }

  /** make sure every worker has an instance over each memory (in order) */
  attach(memories: readonly WebAssembly.Memory[]): void {
    if (this.workers.length === 0 || memories.length <= this.attached) return;
    for (let a = this.attached; a < memories.length; a++) for (const ch of this.ports) ch.port1.postMessage(memories[a]);
    this.attached = memories.length;
    this.job[0] = OP_ATTACH;
    this.job[1] = memories.length;
    this.dispatch(() => {});
  }

  /** run the job in `job` on every worker while `own` runs here; returns when all are done */
  dispatch(own: () => void): void {
    const T = this.workers.length;
    if (T === 0) {
      own();
      return;
    }
    Atomics.store(this.ctl, DONE, 0);
    Atomics.add(this.ctl, GEN, 1);
    Atomics.notify(this.ctl, GEN);
    own();
    let s = 0;
    for (;;) {
      const d = Atomics.load(this.ctl, DONE);
      if (d >= T) break;
      if (++s > SPIN) Atomics.wait(this.ctl, DONE, d, 50);
    }
  }

  close(): void {
    if (this.workers.length === 0) return;
    this.job[0] = OP_EXIT;
    Atomics.add(this.ctl, GEN, 1);
    Atomics.notify(this.ctl, GEN);
    for (const ch of this.ports) ch.port1.close();
    this.workers.length = 0;
  }
}

export interface CpuBackendOptions {
  /** threads including the caller's (default: available parallelism) */
  readonly threads?: number;
}

/** Weights in shared wasm memory + the worker pool: a `MatKernels` for `model.kernels`. */
export class CpuBackend implements MatKernels {
  readonly name: string;
  readonly threads: number;
  private readonly arenas: Arena[] = [];
  private readonly byBuffer = new WeakMap<ArrayBufferLike, Arena>();
  /** matrices copied in on first use: source buffer → byteOffset:length → [arena, ptr] */
  private readonly lazy = new WeakMap<ArrayBufferLike, Map<string, [Arena, number]>>();
  private readonly pool: Pool;
  /** calls that fell back to the plain kernels, by reason (diagnostics) */
  readonly fallbacks = new Map<string, number>();

  constructor(opts: CpuBackendOptions = {}) {
    this.threads = Math.max(1, Math.floor(opts.threads ?? availableParallelism()));
    this.name = `wasm-simd×${this.threads}`;
    this.pool = new Pool(this.threads);
  }

  /** whether `type` has a fast kernel */
  static supports(type: number): boolean {
    return [0, 1, 2, 6, 8, 12, 13, 14, 20, 23].includes(type);
  }

  /** total bytes held in the arenas */
  get bytes(): number {
    return this.arenas.reduce((s, a) => s + a.top, 0);
  }

  private newArena(): Arena {
    const a = new Arena(this.arenas.length, (buf, ar) => this.byBuffer.set(buf, ar));
    this.arenas.push(a);
    return a;
  }

  /** `bytes` bytes of shared memory for a weight (64-aligned) */
  allocWeight(bytes: number): Uint8Array {
    let a = this.arenas.find((x) => x.canFit(bytes + (64 << 20)));
    if (a === undefined) {
      a = this.newArena();
      if (!a.canFit(bytes)) throw new Error(`a ${bytes}-byte tensor does not fit a 4 GiB wasm memory`);
    }
    return a.alloc(bytes);
  }

  /**
   * The file, seen through a wrapper whose `readBytes` puts every matrix (≥ 2 dims) straight into shared memory, so
   * loadWeights' QMatrix objects point into the arenas. Vectors stay on the JS heap.
   */
  adopt(file: GGUFFile): GGUFFile {
    const wrapped = Object.create(file) as GGUFFile;
    const self = this;
    wrapped.readBytes = function (info: TensorInfo, start?: number, length?: number): Uint8Array {
      const data = file.readBytes(info, start, length);
      const rows = info.ne.slice(1).reduce((p, x) => p * x, 1);
      if (start !== undefined || rows < 2 || !CpuBackend.supports(info.type)) return data;
      const view = self.allocWeight(data.length);
      view.set(data);
      return view;
    };
    return wrapped;
  }

  private locate(w: QMatrix): [Arena, number] {
    const buf = w.data.buffer;
    const a = this.byBuffer.get(buf);
    if (a !== undefined) return [a, w.data.byteOffset];
    let m = this.lazy.get(buf);
    if (m === undefined) this.lazy.set(buf, (m = new Map()));
    const key = `${w.data.byteOffset}:${w.data.length}`;
    let hit = m.get(key);
    if (hit === undefined) {
      const view = this.allocWeight(w.data.length);
      view.set(w.data);
      hit = [this.byBuffer.get(view.buffer)!, view.byteOffset];
      m.set(key, hit);
    }
    return hit;
  }

  private fallback(reason: string): void {
    this.fallbacks.set(reason, (this.fallbacks.get(reason) ?? 0) + 1);
  }

  private usable(w: QMatrix): boolean {
    if (!CpuBackend.supports(w.type)) {
      this.fallback(`type ${w.type}`);
      return false;
    }
    const cls = w.type <= 1 ? 0 : w.type === 12 || w.type === 13 || w.type === 14 || w.type === 23 ? 2 : 1;
    const bv = cls === 2 ? 256 : cls === 1 ? 32 : 1;
    if (w.cols % bv !== 0) {
      this.fallback(`cols ${w.cols} of type ${w.type}`);
      return false;
    }
    return true;
  }

  matmul(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    if (n <= 0 || w.rows === 0) return;
    if (!this.usable(w)) return plainKernels.matmul(w, x, n, xStride, y, yStride);
    const [arena, wp] = this.locate(w);
    this.pool.attach(this.arenas.map((a) => a.memory));
    const k = arena.k;
    const { cols, rows, type } = w;
    const cls = k.typeClass(type);
    const bv = k.blockValues(type);
    const nb = cols / bv;
    const T = this.threads;
    const sBytes = align64(k.scratchBytes(cols));
    const perTok = (cls === 0 ? cols * 4 : cols * 4 + cols * 2 + nb * 4 + nb * 32) + rows * 4 + 64;
    const chunk = Math.max(1, Math.min(n, Math.floor(WORK_CAP / perTok)));
    const base = arena.work(sBytes * T + chunk * perTok + 1024);
    const xp = base + sBytes * T;
    const aqp = align64(xp + chunk * cols * 4);
    const adp = align64(aqp + chunk * cols * 2);
    const asp = align64(adp + chunk * nb * 4);
    const yp = cls === 0 ? aqp : align64(asp + chunk * nb * 32);
    for (let t0 = 0; t0 < n; t0 += chunk) {
      const m = Math.min(chunk, n - t0);
      const f = arena.f32;
      const xo = xp >>> 2;
      for (let t = 0; t < m; t++) {
        const src = (t0 + t) * xStride;
        const dst = xo + t * cols;
        for (let c = 0; c < cols; c++) f[dst + c] = x[src + c]!;
      }
      if (cls !== 0) k.quantize(cls, xp, m, cols, cols, aqp, adp, asp);
      const J = this.pool.job;
      J[0] = OP_MATMUL;
      J[1] = arena.index;
      J[2] = type;
      J[3] = wp;
      J[4] = w.rowBytes;
      J[5] = rows;
      J[6] = cols;
      J[7] = m;
      J[8] = xp;
      J[9] = cols;
      J[10] = aqp;
      J[11] = adp;
      J[12] = asp;
      J[13] = yp;
      J[14] = rows;
      J[15] = TOKEN_TILE;
      J[16] = base;
      J[17] = sBytes;
      const r1 = Math.floor(rows / T);
      if (T === 1 || rows * cols * m < PARALLEL_MIN || rows < 2 * T) {
        k.matmul(type, wp, w.rowBytes, 0, rows, cols, m, xp, cols, aqp, adp, asp, yp, rows, base, TOKEN_TILE);
      } else {
        this.pool.dispatch(() => k.matmul(type, wp, w.rowBytes, 0, r1, cols, m, xp, cols, aqp, adp, asp, yp, rows, base, TOKEN_TILE));
      }
      const g = arena.f32;
      const yo = yp >>> 2;
      for (let t = 0; t < m; t++) {
        const dst = (t0 + t) * yStride;
        const src = yo + t * rows;
        for (let r = 0; r < rows; r++) y[dst + r] = g[src + r]!;
      }
    }
  }

  matmulT(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    if (n <= 0) return;
    if (!this.usable(w)) return plainKernels.matmulT(w, x, n, xStride, y, yStride);
    const [arena, wp] = this.locate(w);
    this.pool.attach(this.arenas.map((a) => a.memory));
    const k = arena.k;
    const { cols, rows, type } = w;
    const T = this.threads;
    const sBytes = align64(k.scratchBytes(cols));
    const perTok = rows * 4 + cols * 4 + 64;
    const chunk = Math.max(1, Math.min(n, Math.floor(WORK_CAP / perTok)));
    const base = arena.work(sBytes * T + chunk * perTok + 1024);
    const xp = base + sBytes * T;
    const yp = align64(xp + chunk * rows * 4);
    for (let t0 = 0; t0 < n; t0 += chunk) {
      const m = Math.min(chunk, n - t0);
      const f = arena.f32;
      const xo = xp >>> 2;
      for (let t = 0; t < m; t++) {
        const src = (t0 + t) * xStride;
        const dst = xo + t * rows;
        for (let r = 0; r < rows; r++) f[dst + r] = x[src + r]!;
      }
      const J = this.pool.job;
      J[0] = OP_MATMUL_T;
      J[1] = arena.index;
      J[2] = type;
      J[3] = wp;
      J[4] = w.rowBytes;
      J[5] = rows;
      J[6] = cols;
      J[7] = m;
      J[8] = xp;
      J[9] = rows;
      J[13] = yp;
      J[14] = cols;
      J[16] = base;
      J[17] = sBytes;
      if (T === 1 || m < T || rows * cols * m < PARALLEL_MIN) {
        k.matmulT(type, wp, w.rowBytes, rows, cols, 0, m, xp, rows, yp, cols, base);
      } else {
        const t1 = Math.floor(m / T);
        this.pool.dispatch(() => k.matmulT(type, wp, w.rowBytes, rows, cols, 0, t1, xp, rows, yp, cols, base));
      }
      const g = arena.f32;
      const yo = yp >>> 2;
      for (let t = 0; t < m; t++) {
        const dst = (t0 + t) * yStride;
        const src = yo + t * cols;
        for (let c = 0; c < cols; c++) y[dst + c] = g[src + c]!;
      }
    }
  }

  private readonly shared = new Map<number, Float32Array>();

  /** a reusable f32 buffer of at least `len` values in shared memory (slot = which one); valid until the next call */
  sharedF32(slot: number, len: number): Float32Array {
    const have = this.shared.get(slot);
    if (have !== undefined && have.length >= len) return have.subarray(0, len);
    const cap = Math.max(len, Math.ceil((have?.length ?? 0) * 1.5), 1 << 16);
    const view = this.allocWeight(cap * 4);
    const f = new Float32Array(view.buffer, view.byteOffset, cap);
    this.shared.set(slot, f);
    return f.subarray(0, len);
  }

  mha(cfg: ModelConfig, pr: Projections, n: number, pos0: number, kNope: Float64Array, v: Float64Array, lat: LatentRows): Float64Array {
    return fastMha(this, cfg, pr, n, pos0, kNope, v, lat);
  }

  absorbed(w: AttentionWeights, cfg: ModelConfig, pr: Projections, n: number, pos0: number, lat: LatentRows): Float64Array {
    return fastAbsorbed(this, w, cfg, pr, n, pos0, lat);
  }

  /** stop the workers (the arenas stay usable single-threaded) */
  close(): void {
    this.pool.close();
  }
}
