/**
 * The fast CPU backend: WebAssembly SIMD matrix kernels (src/backend/cpu/wasm/kernels.as) over weights kept in shared
 * WebAssembly memories ("arenas", SharedArrayBuffers of at most 4 GiB each), run in parallel by a pool of
 * worker_threads. The main thread quantizes the activations, hands out row ranges (or, for the transposed product,
 * token ranges), does its own share and waits on an Atomics counter: the forward stays synchronous. Where the native
 * addon is built (native.ts), its AVX-512 kernels take the products of their types and the attention, on the same
 * memory with the same arguments, and give the same bits.
 *
 * Numerics: quantized weights use integer dot products against activations quantized per block to integers kept as
 * i16 (|q| ≤ 8191 with one scale per 256 values for K quants and IQ4_XS; ≤ 32767 with one per 32 for Q8_0, Q4_0,
 * Q5_0, IQ4_NL; q8 mode: one int8); F32/F16 weights use f32 activations; sums are f32. Types without a fast kernel
 * (and odd shapes) fall back to the plain kernels, per call.
 */
import { Worker, MessageChannel } from "node:worker_threads";
import { availableParallelism } from "node:os";
import { setFlagsFromString } from "node:v8";
import type { GGUFFile } from "../../gguf/file.js";
import type { TensorInfo } from "../../gguf/reader.js";
import type { ModelConfig } from "../../model/config.js";
import type { LatentRows, Projections } from "../../model/mla-types.js";
import type { AttentionWeights } from "../../model/weights.js";
import { fastAbsorbed, fastMha } from "./attention.js";
import { fastSwigluMany, type PlacedProduct, type SwigluRows } from "./swiglu.js";
import type { GatedFFN, MatKernels } from "../../model/kernels.js";
import { swigluManyByProducts } from "../../model/moe.js";
import { plainProducts, type Product } from "../../tensor/products.js";
import type { Vec } from "../../tensor/ops.js";
import type { QMatrix } from "../../tensor/qmatrix.js";
import { KERNELS_WASM_BASE64 } from "./wasm/kernels.wasm.js";
import { KERNELS_Q8_WASM_BASE64 } from "./wasm/kernels-q8.wasm.js";
import type { KernelExports } from "./kernel-exports.js";
import {
  type CpuKernels,
  loadNativeKernels,
  nativeAddonPath,
  type NativeKernels,
  nativeUnavailableReason,
} from "./native.js";

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
/** kernel type of Q6_K repacked for single-token products (kernels.as Q6_KR) */
const Q6_KR = 1014;
/** at most this many bytes of repacked Q6_K copies (the output matrix of most models fits) */
const Q6KR_BUDGET = 1 << 30;
/** kernel type of Q5_0 cut to u8 values (kernels.as Q5_0R), a copy made in q8 mode, read with 8-bit activations */
const Q5_0R = 1006;
/**
 * a Q5_0R copy is made only where its arena keeps this much room free afterwards (work areas grow later: attention
 * over a growing cache, longer prompts); without room the product reads the Q5_0 blocks (the same results)
 */
const COPY_HEADROOM = 256 << 20; // CpuBackendOptions.copyHeadroom's default
/** added to a kernel type for its 8-bit-activation kernel (kernels.as Q8ACT; q8 mode) */
const Q8ACT = 4096;
/** the types with an 8-bit-activation kernel: Q4_K, Q5_0 and Q6_K repacked (Q8_0's weights use all of i8: exact path) */
const Q8_TYPES = new Set([12, 6, Q6_KR]);
/** products of at most this many tokens (decode) use the 8-bit-activation kernels in q8 mode … */
const Q8_MAX_TOKENS = 2;
/** … except these types, which use them for any token count (Q4_K: two rows × four tokens for more than two) */
const Q8_ANY_TOKENS = new Set([12]);

type Resolved = [Product, number, number, number];

// control words
const GEN = 0;
const DONE = 1;
// job words (Float64)
const OP_MATMUL = 1;
const OP_MATMUL_T = 2;
const OP_ATTACH = 3;
const OP_EXIT = 4;
const OP_MANY = 5;
const OP_ATTN = 6;
const OP_PREFILL = 7;
const OP_SWIGLU = 8;
/** jobs are cut into at most this many units per thread (claimed dynamically) */
const PIECES_PER_THREAD = 4;
/** job word: how many units the job is cut into (threads claim units one at a time) */
const UNITS = 30;
/** control words: the claim word (generation tag in the top 12 bits, next unit in the low 20) and units completed */
const CLAIM = 2;
const COMPLETED = 3;
/** control word: set when a unit of the current job threw */
const FAILED = 4;
/** OP_MANY: segment g (one unit) at P[SEG0 + g·SEG] */
const SEG0 = 32;
const MAX_THREADS = 64;
const SEG = 18;
const MAX_SEGS = 1024;

/** n rows of `width` values from src (row t at srcAt + t·srcStride) to dst (at dstAt + t·dstStride), converting types */
function copyRows(
  src: Vec | Float32Array,
  srcAt: number,
  srcStride: number,
  dst: Vec | Float32Array,
  dstAt: number,
  dstStride: number,
  n: number,
  width: number,
): void {
  for (let t = 0; t < n; t++) {
    const from = srcAt + t * srcStride;
    dst.set(src.subarray(from, from + width), dstAt + t * dstStride);
  }
}

/** pointers can exceed 2³¹: no 32-bit bitwise arithmetic on them */
function align64(x: number): number {
  return Math.ceil(x / 64) * 64;
}

/**
 * How the CPU backend quantizes activations for its integer dots. "exact" (default): 14/16-bit integers, log-probs
 * within ~1e-4 of the reference on F32 weights. "q8": for products with Q4_K weights (any token count) and products of
 * one or two tokens (decode) with Q5_0 and Q6_K weights, one int8 per value (ggml's Q8_K/Q8_0 rounding) dotted with
 * WebAssembly relaxed SIMD
 * (`i16x8.relaxed_dot_i8x16_i7x16_s`); faster, at the cost of the activations' 8-bit rounding (docs/cpu-backend.md).
 */
export type CpuActivations = "exact" | "q8";

export const CPU_ACTIVATIONS: readonly CpuActivations[] = ["exact", "q8"];

const modules = new Map<CpuActivations, WebAssembly.Module>();
export function kernelModule(mode: CpuActivations): WebAssembly.Module {
  let m = modules.get(mode);
  if (m === undefined) {
    const b64 = mode === "q8" ? KERNELS_Q8_WASM_BASE64 : KERNELS_WASM_BASE64;
    m = new WebAssembly.Module(Buffer.from(b64, "base64"));
    modules.set(mode, m);
  }
  return m;
}

function instantiate(module: WebAssembly.Module, memory: WebAssembly.Memory, native?: NativeKernels): KernelExports {
  const k = new WebAssembly.Instance(module, { env: { memory } }).exports as unknown as KernelExports;
  return native === undefined ? k : mainUnits.withNative(k, native, memory, native.types());
}

/** the V8 flag behind which Node 20 compiles relaxed SIMD (set in every worker of a q8 pool too) */
const RELAXED_FLAG = "--experimental-wasm-relaxed-simd";

/** a module of one function returning i16x8.relaxed_dot_i8x16_i7x16_s(0, 0): valid only where relaxed SIMD is */
const RELAXED_PROBE = new Uint8Array([
  ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00], // magic, version
  ...[0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b], // type: () → v128
  ...[0x03, 0x02, 0x01, 0x00], // one function of type 0
  ...[0x0a, 0x2b, 0x01, 0x29, 0x00], // code: one body of 41 bytes, no locals
  ...[0xfd, 0x0c, ...new Array<number>(16).fill(0)], // v128.const 0
  ...[0xfd, 0x0c, ...new Array<number>(16).fill(0)], // v128.const 0
  ...[0xfd, 0x92, 0x02, 0x0b], // i16x8.relaxed_dot_i8x16_i7x16_s, end
]);

/**
 * Whether this V8 runs the q8 kernels: sets the relaxed-SIMD flag (Node 20 needs it; later V8s ship the feature and
 * ignore it), then validates a tiny relaxed module and compiles the q8 kernels. Never throws.
 */
export function relaxedSimdAvailable(): boolean {
  try {
    setFlagsFromString(RELAXED_FLAG);
    if (!WebAssembly.validate(RELAXED_PROBE)) return false;
    kernelModule("q8");
    return true;
  } catch {
    return false;
  }
}

/** One shared wasm memory with a bump allocator for weights and a work area for a call's activations and outputs. */
export class Arena {
  readonly memory: WebAssembly.Memory;
  readonly k: KernelExports;
  top = RESERVED;
  workPtr = 0;
  workSize = 0;
  private f32View: Float32Array;

  constructor(
    readonly index: number,
    private readonly onBuffer: (buf: ArrayBufferLike, a: Arena) => void,
    module: WebAssembly.Module = kernelModule("exact"),
    native?: NativeKernels,
  ) {
    this.memory = new WebAssembly.Memory({ initial: 256, maximum: MAX_PAGES, shared: true });
    this.k = instantiate(module, this.memory, native);
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
      // grow geometrically: callers whose need creeps up (attention over a growing cache) must not leave a trail
      const ptr = align64(this.top);
      const size = Math.max(bytes, Math.min(Math.max(Math.ceil(this.workSize * 1.5), 1 << 20), this.capacity - ptr));
      if (ptr + size > this.capacity) throw new Error(`arena ${this.index}: no room for a ${size}-byte work area`);
      this.ensure(ptr + size);
      this.top = ptr + size;
      this.workPtr = ptr;
      this.workSize = size;
    }
    return this.workPtr;
  }

  /** forget every allocation (weights and the work area); the memory stays, for the next ones */
  reset(): void {
    this.top = RESERVED;
    this.workPtr = 0;
    this.workSize = 0;
  }

  /** the largest work area `work` can hand out now */
  get workRoom(): number {
    return Math.max(this.workSize, this.capacity - align64(this.top));
  }

  get f32(): Float32Array {
    if (this.f32View.length * 4 !== this.memory.buffer.byteLength) this.f32View = new Float32Array(this.memory.buffer);
    return this.f32View;
  }
}

/**
 * One unit of a job (JavaScript source shared by the workers and the caller, so both cut the work the same way):
 * a row range of a product (OP_MATMUL; even boundaries keep row pairs together), a token range (OP_MATMUL_T), one
 * segment (OP_MANY), four heads (OP_ATTN), one head (OP_PREFILL) or one row range of a SwiGLU (OP_SWIGLU). `index` picks the thread's scratch.
 */
const UNIT_SOURCE = String.raw`
function runUnit(inst, P, u, index) {
  const op = P[0], nu = P[${UNITS}];
  const k = inst[P[1]];
  if (op === 1) {
    const rows = P[5], half = Math.ceil(rows / 2);
    const r0 = Math.min(rows, 2 * Math.floor((half * u) / nu));
    const r1 = u + 1 === nu ? rows : Math.min(rows, 2 * Math.floor((half * (u + 1)) / nu));
    if (r1 > r0) k.matmul(P[2], P[3], P[4], r0, r1, P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13], P[14], P[16] + index * P[17], P[15]);
  } else if (op === 2) {
    const n = P[7];
    const t0 = Math.floor((n * u) / nu), t1 = Math.floor((n * (u + 1)) / nu);
    if (t1 > t0) k.matmulT(P[2], P[3], P[4], P[5], P[6], t0, t1, P[8], P[9], P[13], P[14], P[16] + index * P[17]);
  } else if (op === 5) {
    const o = ${SEG0} + u * ${SEG};
    inst[P[o]].matmul(P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5], P[o + 6], P[o + 7], P[o + 8], P[o + 9], P[o + 10], P[o + 11], P[o + 12], P[o + 13], P[o + 14], P[o + 15] + index * P[o + 16], P[o + 17]);
  } else if (op === 6) {
    const h0 = 4 * u, h1 = Math.min(P[9], h0 + 4);
    k.attnAbsorbed(P[2], P[3], P[4], P[5], P[6], P[7], P[8], h0, h1, P[10], P[11] + index * P[12], P[13]);
  } else if (op === 7) {
    k.attnPrefill(P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11], u, u + 1, P[12], P[13] + index * P[14], P[15]);
  } else if (op === 8) {
    const o = ${SEG0} + u * ${SEG};
    inst[P[o]].swigluQuant(P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5], P[o + 6], P[o + 7], P[o + 8], P[o + 9]);
  }
}
// The instance's exports with matmul and matmulT sent to the native kernels for their types, and attention to the native kernels (the same arguments after the memory's
// base address, which never moves: a shared memory reserves its maximum). Without native kernels, the exports.
function withNative(k, nat, memory, types) {
  if (!nat) return k;
  const base = nat.base(new Uint8Array(memory.buffer));
  const wasm = k.matmul;
  const wasmT = k.matmulT;
  return Object.assign({}, k, {
    matmul(type, w, rowBytes, r0, r1, cols, n, x, xStride, aq, ad, as, y, yStride, S, tc) {
      if (types.includes(type)) nat.matmul(base, type, w, rowBytes, r0, r1, cols, n, x, xStride, aq, ad, as, y, yStride, S, tc);
      else wasm(type, w, rowBytes, r0, r1, cols, n, x, xStride, aq, ad, as, y, yStride, S, tc);
    },
    matmulT(type, w, rowBytes, rows, cols, t0, t1, x, xStride, y, yStride, S) {
      if (types.includes(type)) nat.matmulT(base, type, w, rowBytes, rows, cols, t0, t1, x, xStride, y, yStride, S);
      else wasmT(type, w, rowBytes, rows, cols, t0, t1, x, xStride, y, yStride, S);
    },
    attnAbsorbed(C, K, T, L, R, qc, qp, h0, h1, scale, sc, out) {
      nat.attnAbsorbed(base, C, K, T, L, R, qc, qp, h0, h1, scale, sc, out);
    },
    attnPrefill(kNope, kPe, v, q, n, pos0, H, P, R, V, h0, h1, scale, sc, out) {
      nat.attnPrefill(base, kNope, kPe, v, q, n, pos0, H, P, R, V, h0, h1, scale, sc, out);
    },
  });
}
// Claim units of the job tagged with tag until none is left. A thread that wakes late (tag moved on) claims nothing, so it
// can never run a unit with another job's parameters; the caller waits for units completed, not for every thread.
function claimAll(C, P, inst, index, tag) {
  const nu = P[${UNITS}];
  for (;;) {
    const w = Atomics.load(C, ${CLAIM});
    if ((w & -1048576) !== tag) return;
    const u = w & 0xfffff;
    if (u >= nu) return;
    if (Atomics.compareExchange(C, ${CLAIM}, w, w + 1) !== w) continue;
    // a unit that throws (a kernel's trap, a native kernel without memory) still counts as completed, with the job
    // marked failed: the caller then throws instead of waiting forever for a thread that died
    try {
      runUnit(inst, P, u, index);
    } catch (e) {
      Atomics.store(C, ${FAILED}, 1);
      if (index === 0) failure = e;
    }
    Atomics.add(C, ${COMPLETED}, 1);
    Atomics.notify(C, ${COMPLETED});
  }
}
let failure;
function takeFailure() {
  const e = failure;
  failure = undefined;
  return e;
}
`;

type UnitFns = {
  claimAll(C: Int32Array, P: Float64Array, inst: readonly KernelExports[], index: number, tag: number): void;
  /** what a unit of the caller's threw in the last job (undefined when none did), cleared */
  takeFailure(): unknown;
  withNative(k: KernelExports, nat: NativeKernels, memory: WebAssembly.Memory, types: readonly number[]): KernelExports;
};
const mainUnits = new Function(`${UNIT_SOURCE}; return { claimAll, withNative, takeFailure };`)() as UnitFns;

const WORKER_SOURCE = String.raw`
const { workerData, receiveMessageOnPort } = require("node:worker_threads");
const { module, ctl, job, index, port, spin, flags, nativePath } = workerData;
const nat = nativePath ? require(nativePath) : null;
const nativeTypes = nat ? nat.types() : [];
// the q8 kernels' module is compiled with relaxed SIMD: its V8 flag, set here too before any instance is made
if (flags) require("node:v8").setFlagsFromString(flags);
const C = new Int32Array(ctl);
const P = new Float64Array(job);
const inst = [];
${UNIT_SOURCE}
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
      if (m !== undefined)
        inst.push(withNative(new WebAssembly.Instance(module, { env: { memory: m.message } }).exports, nat, m.message, nativeTypes));
    }
    Atomics.add(C, 1, 1);
    Atomics.notify(C, 1);
  } else {
    claimAll(C, P, inst, index, (gen & 0xfff) << 20);
  }
}
`;

/** worker_threads sharing the arenas; thread 0 is the caller. Exported for the pool's own tests. */
export class Pool {
  private readonly ctl = new Int32Array(new SharedArrayBuffer(64));
  readonly job = new Float64Array(new SharedArrayBuffer((SEG0 + MAX_SEGS * SEG) * 8));
  private readonly workers: Worker[] = [];
  private readonly ports: MessageChannel[] = [];
  attached = 0;

  constructor(
    readonly threads: number,
    module: WebAssembly.Module,
    flags: string,
    private readonly spin = SPIN,
    nativePath = "",
  ) {
    for (let i = 1; i < threads; i++) {
      const ch = new MessageChannel();
      const w = new Worker(WORKER_SOURCE, {
        eval: true,
        execArgv: [],
        workerData: {
          module,
          flags,
          ctl: this.ctl.buffer,
          job: this.job.buffer,
          index: i,
          port: ch.port2,
          spin,
          nativePath,
        },
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
    for (let a = this.attached; a < memories.length; a++)
      for (const ch of this.ports) ch.port1.postMessage(memories[a]);
    this.attached = memories.length;
    this.job[0] = OP_ATTACH;
    this.job[1] = memories.length;
    const T = this.workers.length;
    Atomics.store(this.ctl, DONE, 0);
    Atomics.add(this.ctl, GEN, 1);
    Atomics.notify(this.ctl, GEN);
    let s = 0;
    for (;;) {
      const d = Atomics.load(this.ctl, DONE);
      if (d >= T) break;
      if (++s > SPIN) Atomics.wait(this.ctl, DONE, d, 50);
    }
  }

  /**
   * Run the job in `job`, cut into `units` units, on this thread and the workers: every thread claims units until none
   * is left (a descheduled worker's share is taken by the others); returns when all units are complete.
   */
  run(units: number, inst: readonly KernelExports[]): void {
    const C = this.ctl;
    this.job[UNITS] = units;
    const gen = (Atomics.load(C, GEN) + 1) | 0;
    const tag = (gen & 0xfff) << 20;
    Atomics.store(C, COMPLETED, 0);
    Atomics.store(C, FAILED, 0);
    Atomics.store(C, CLAIM, tag);
    if (this.workers.length > 0) {
      Atomics.store(C, GEN, gen);
      Atomics.notify(C, GEN);
    }
    mainUnits.claimAll(C, this.job, inst, 0, tag);
    let s = 0;
    for (;;) {
      const d = Atomics.load(C, COMPLETED);
      if (d >= units) break;
      if (++s > this.spin) Atomics.wait(C, COMPLETED, d, 50);
    }
    const mine = mainUnits.takeFailure();
    if (Atomics.load(C, FAILED) !== 0) {
      if (mine instanceof Error) throw new Error(`a CPU kernel failed: ${mine.message}`, { cause: mine });
      throw new Error("a CPU kernel failed in a worker thread");
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
  /**
   * activations of the integer dots (default "exact"); "q8" falls back to "exact", said once on stderr, without relaxed
   * SIMD and where the native kernels run (they are faster with exact activations than q8's relaxed-SIMD kernels)
   */
  readonly activations?: CpuActivations;
  /** whether relaxed SIMD can be used (default: `relaxedSimdAvailable`; tests replace it) */
  readonly relaxedSimd?: () => boolean;
  /** where the fallback line goes (default: stderr) */
  readonly onNote?: (line: string) => void;
  /**
   * q8 mode makes a Q5_0R copy of a Q5_0 matrix only where its arena keeps this many bytes free afterwards (default
   * 256 MiB: room for work areas that grow later); Infinity makes none (less memory; tests of the Q5_0 kernels)
   */
  readonly copyHeadroom?: number;
  /** iterations a waiting thread spins before it sleeps (Atomics.wait) */
  readonly spin?: number;
  /**
   * which kernels run the exact integer products of Q4_K, Q6_K, Q8_0 and Q5_0 weights (default "native" where the
   * addon is built and usable, said once on stderr otherwise; "wasm" always runs WebAssembly). Both give the same bits.
   */
  readonly kernels?: CpuKernels;
}

/** Weights in shared wasm memory + the worker pool: a `MatKernels` for `model.kernels`. */
export class CpuBackend implements MatKernels {
  readonly name: string;
  readonly threads: number;
  private readonly arenas: Arena[] = [];
  private readonly byBuffer = new WeakMap<ArrayBufferLike, Arena>();
  /** matrices copied in on first use: source buffer → byteOffset:length → [arena, ptr] */
  private lazy = new WeakMap<ArrayBufferLike, Map<string, [Arena, number]>>();
  private readonly pool: Pool;
  /** calls that fell back to the plain kernels, by reason (diagnostics) */
  readonly fallbacks = new Map<string, number>();

  /** the activations in effect ("q8" only when asked for and relaxed SIMD is available) */
  readonly activations: CpuActivations;
  /** see CpuBackendOptions.copyHeadroom */
  private readonly copyHeadroom: number;
  private readonly module: WebAssembly.Module;
  /** the kernels in effect for the exact integer products ("native" only where the addon is usable) */
  readonly kernels: CpuKernels;
  private readonly native?: NativeKernels;

  constructor(opts: CpuBackendOptions = {}) {
    this.threads = Math.min(MAX_THREADS, Math.max(1, Math.floor(opts.threads ?? availableParallelism())));
    const note = opts.onNote ?? ((line: string) => process.stderr.write(`${line}\n`));
    const want = opts.kernels ?? "native";
    if (want !== "native" && want !== "wasm") throw new Error(`kernels must be native or wasm, got "${String(want)}"`);
    this.native = want === "native" ? loadNativeKernels() : undefined;
    this.kernels = this.native === undefined ? "wasm" : "native";
    if (opts.kernels === "native" && this.native === undefined)
      note(`cpu kernels native: ${nativeUnavailableReason()}; using WebAssembly`);
    this.activations = CpuBackend.effectiveActivations(opts, this.native !== undefined, note);
    this.copyHeadroom = opts.copyHeadroom ?? COPY_HEADROOM;
    this.module = kernelModule(this.activations);
    this.name = `${this.kernels === "native" ? "native+wasm-simd" : "wasm-simd"}×${this.threads}${this.activations === "q8" ? " q8" : ""}`;
    this.pool = new Pool(
      this.threads,
      this.module,
      this.activations === "q8" ? RELAXED_FLAG : "",
      opts.spin ?? SPIN,
      this.native === undefined ? "" : nativeAddonPath(),
    );
  }

  private static effectiveActivations(
    opts: CpuBackendOptions,
    native: boolean,
    note: (line: string) => void,
  ): CpuActivations {
    const want = opts.activations ?? "exact";
    if (!CPU_ACTIVATIONS.includes(want)) throw new Error(`activations must be exact or q8, got "${String(want)}"`);
    if (want !== "q8") return want;
    // q8 exists for speed: the native kernels' exact products are faster than its relaxed-SIMD ones
    if (native)
      note(
        'cpu activations q8: the native kernels run exact activations faster; using exact (kernels "wasm" keeps q8)',
      );
    else if ((opts.relaxedSimd ?? relaxedSimdAvailable)()) return want;
    else note("cpu activations q8: WebAssembly relaxed SIMD is not available on this Node/V8; using exact activations");
    return "exact";
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
    const a = new Arena(this.arenas.length, (buf, ar) => this.byBuffer.set(buf, ar), this.module, this.native);
    this.arenas.push(a);
    this.inst.push(a.k);
    return a;
  }

  /** each arena's kernel instance on this thread, by arena index */
  private readonly inst: KernelExports[] = [];

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
    wrapped.readBytes = (info: TensorInfo, start?: number, length?: number): Uint8Array => {
      const rows = info.ne.slice(1).reduce((p, x) => p * x, 1);
      if (start !== undefined || length !== undefined || rows < 2 || !CpuBackend.supports(info.type))
        return file.readBytes(info, start, length);
      const view = this.allocWeight(info.nbytes);
      file.readBytesInto(info, view); // straight into shared memory: one copy, no 3 GB of intermediate buffers
      return view;
    };
    return wrapped;
  }

  /**
   * Drop every weight in the arenas; their memory is kept and reused (a wasm memory cannot shrink). A pass that streams
   * one layer's matrices at a time (doctor --low-memory) calls it between layers to hold one layer, not all of them.
   * Matrices read into the arenas before the call must not be used after it.
   */
  releaseWeights(): void {
    for (const a of this.arenas) a.reset();
    this.lazy = new WeakMap();
    this.q6kr.clear();
    this.q6krBytes = 0;
    this.q5r.clear();
    this.slots.clear();
    this.freeRepacks.clear();
  }

  /** repacked copies of Q6_K matrices for products of ≤ 2 tokens: "arena:ptr:rows" → ptr in the same arena (or 0: no room) */
  private readonly q6kr = new Map<string, number>();
  private q6krBytes = 0;

  /**
   * where and how a product with `n` tokens reads `w`: [arena, pointer, kernel type, row bytes]; in q8 mode the kernel
   * type of a product with an 8-bit kernel (decode; Q4_K at any token count) is its type + Q8ACT (then its activations are 8-bit: typeClass 3/4)
   */
  private resolve(w: QMatrix, n: number): [Arena, number, number, number] {
    if (this.activations === "q8" && w.type === 6 && n <= Q8_MAX_TOKENS) {
      const c = this.resolveQ5R(w);
      if (c !== undefined) return c;
    }
    const r = this.resolveExact(w, n);
    if (this.activations === "q8" && Q8_TYPES.has(r[2]) && (n <= Q8_MAX_TOKENS || Q8_ANY_TOKENS.has(r[2])))
      r[2] += Q8ACT;
    return r;
  }

  private resolveExact(w: QMatrix, n: number): [Arena, number, number, number] {
    const [a, wp] = this.locate(w);
    // the native kernels read Q6_K itself faster than the repacked copy (fewer bytes): no copy beside them
    if (w.type !== 14 || n > 2 || this.native !== undefined) return [a, wp, w.type, w.rowBytes];
    const key = `${a.index}:${wp}:${w.rows}`;
    let rp = this.q6kr.get(key);
    if (rp === undefined) {
      const bytes = (w.cols / 256) * 276 * w.rows;
      rp = this.reusedRepack(a, bytes) ?? 0;
      if (rp === 0 && this.q6krBytes + bytes <= Q6KR_BUDGET && a.canFit(bytes + 64)) {
        rp = a.alloc(bytes).byteOffset;
        this.q6krBytes += bytes;
      }
      if (rp !== 0) {
        a.k.repackQ6K(wp, w.rows, w.cols, rp);
        // q8 mode reads every repacked copy with 8-bit activations (all its products have ≤ 2 tokens): unsigned values
        if (this.activations === "q8") a.k.unsignQ6KR(rp, w.rows, w.cols);
      }
      this.q6kr.set(key, rp);
      this.slotOf(a, wp)?.repacks.push([key, rp, bytes]);
    }
    return rp === 0 ? [a, wp, w.type, w.rowBytes] : [a, rp, Q6_KR, (w.cols / 256) * 276];
  }

  /** q8 mode's Q5_0R copies (products of ≤ 2 tokens of a Q5_0 matrix read one when it exists): "arena:ptr:rows" → ptr (or 0: no room) */
  private readonly q5r = new Map<string, number>();

  /**
   * q8 mode: where the Q5_0R copy of Q5_0 matrix `w` is (made at first use in w's arena, while the arena keeps
   * copyHeadroom free), or undefined without one. In the copy a single-token dot only loads and dots: no fifth bits
   * to cut, 36 bytes per 32 values read instead of 22 (docs/cpu-backend.md).
   */
  private resolveQ5R(w: QMatrix): [Arena, number, number, number] | undefined {
    const [a, wp] = this.locate(w);
    const key = `${a.index}:${wp}:${w.rows}`;
    const rowBytes = (w.cols / 32) * 36;
    let rp = this.q5r.get(key);
    if (rp === undefined) {
      const bytes = rowBytes * w.rows;
      rp = this.reusedRepack(a, bytes) ?? 0;
      if (rp === 0 && a.canFit(bytes + this.copyHeadroom)) rp = a.alloc(bytes).byteOffset;
      if (rp !== 0) a.k.repackQ5_0u8(wp, w.rows, w.cols, rp);
      this.q5r.set(key, rp);
      this.slotOf(a, wp)?.repacks.push([key, rp, bytes]);
    }
    return rp === 0 ? undefined : [a, rp, Q5_0R + Q8ACT, rowBytes];
  }

  /** reusable memory: slots in arena order of allocation (so by pointer), and repacked copies of released slots */
  private readonly slots = new Map<Arena, { start: number; end: number; repacks: [string, number, number][] }[]>();
  private readonly freeRepacks = new Map<string, number[]>();

  /**
   * `bytes` bytes of shared memory whose content the caller may replace (a cache slot for weights read on demand):
   * call `releaseSlot` before each new content, so that copies derived from the old one are dropped.
   */
  allocSlot(bytes: number): Uint8Array {
    const view = this.allocWeight(bytes);
    const a = this.arenaOf(view.buffer)!;
    let list = this.slots.get(a);
    if (list === undefined) this.slots.set(a, (list = []));
    list.push({ start: view.byteOffset, end: view.byteOffset + bytes, repacks: [] });
    return view;
  }

  /** The slot's repacked copies are forgotten and their memory kept for the next repack of the same size. */
  releaseSlot(view: Uint8Array): void {
    const a = this.arenaOf(view.buffer);
    const slot = a === undefined ? undefined : this.slotOf(a, view.byteOffset);
    if (a === undefined || slot === undefined) throw new Error("releaseSlot: not a slot of this backend");
    for (const [key, rp, bytes] of slot.repacks) {
      this.q6kr.delete(key);
      this.q5r.delete(key);
      if (rp === 0) continue;
      const k = `${a.index}:${bytes}`;
      const free = this.freeRepacks.get(k);
      if (free === undefined) this.freeRepacks.set(k, [rp]);
      else free.push(rp);
    }
    slot.repacks = [];
  }

  private reusedRepack(a: Arena, bytes: number): number | undefined {
    return this.freeRepacks.get(`${a.index}:${bytes}`)?.pop();
  }

  /** the slot holding pointer p of arena a (binary search: slots are allocated at increasing pointers) */
  private slotOf(a: Arena, p: number): { start: number; end: number; repacks: [string, number, number][] } | undefined {
    const list = this.slots.get(a);
    if (list === undefined) return undefined;
    let lo = 0;
    let hi = list.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (p < list[mid].start) hi = mid - 1;
      else if (p >= list[mid].end) lo = mid + 1;
      else return list[mid];
    }
    return undefined;
  }

  /**
   * The arena whose memory `buf` is. V8 can hand out a new SharedArrayBuffer object for a shared memory that has not
   * grown (memory.grow(0) does; so, now and then, does something in a long run), so a buffer missing from the map is
   * looked up among the arenas' current buffers.
   */
  private arenaOf(buf: ArrayBufferLike): Arena | undefined {
    const a = this.byBuffer.get(buf);
    if (a !== undefined) return a;
    for (const x of this.arenas) {
      if (x.memory.buffer !== buf) continue;
      this.byBuffer.set(buf, x);
      return x;
    }
    return undefined;
  }

  private locate(w: QMatrix): [Arena, number] {
    const buf = w.data.buffer;
    const a = this.arenaOf(buf);
    if (a !== undefined) return [a, w.data.byteOffset];
    let m = this.lazy.get(buf);
    if (m === undefined) this.lazy.set(buf, (m = new Map()));
    const key = `${w.data.byteOffset}:${w.data.length}`;
    let hit = m.get(key);
    if (hit === undefined) {
      const view = this.allocWeight(w.data.length);
      view.set(w.data);
      hit = [this.arenaOf(view.buffer)!, view.byteOffset];
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
    if (!this.usable(w)) return plainProducts.matmul(w, x, n, xStride, y, yStride);
    const [arena, wp, type, rowBytes] = this.resolve(w, n);
    if (this.pool.attached < this.arenas.length) this.pool.attach(this.arenas.map((a) => a.memory));
    const k = arena.k;
    const { cols, rows } = w;
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
      copyRows(x, t0 * xStride, xStride, arena.f32, xp >>> 2, cols, m, cols);
      if (cls !== 0) k.quantize(cls, xp, m, cols, cols, aqp, adp, asp);
      const J = this.pool.job;
      J[0] = OP_MATMUL;
      J[1] = arena.index;
      J[2] = type;
      J[3] = wp;
      J[4] = rowBytes;
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
      if (T === 1 || rows * cols * m < PARALLEL_MIN || rows < 2 * T) {
        k.matmul(type, wp, rowBytes, 0, rows, cols, m, xp, cols, aqp, adp, asp, yp, rows, base, TOKEN_TILE);
      } else {
        this.pool.run(Math.min(Math.ceil(rows / 2), PIECES_PER_THREAD * T), this.inst);
      }
      copyRows(arena.f32, yp >>> 2, rows, y, t0 * yStride, yStride, m, rows);
    }
  }

  matmulT(w: QMatrix, x: Vec, n: number, xStride: number, y: Vec, yStride: number): void {
    if (n <= 0) return;
    if (!this.usable(w)) return plainProducts.matmulT(w, x, n, xStride, y, yStride);
    const [arena, wp] = this.locate(w);
    if (this.pool.attached < this.arenas.length) this.pool.attach(this.arenas.map((a) => a.memory));
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
      copyRows(x, t0 * xStride, xStride, arena.f32, xp >>> 2, rows, m, rows);
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
        this.pool.run(T, this.inst); // every unit unpacks all rows: one unit per thread
      }
      copyRows(arena.f32, yp >>> 2, cols, y, t0 * yStride, yStride, m, cols);
    }
  }

  /**
   * Several independent products y_i = W_i·x_i in one dispatch: rows of all of them are split across the threads by
   * cost (rows·cols·n), so hundreds of small products (per-head W_UK/W_UV, the experts of a token) cost one wake-up
   * each instead of one per product. Products whose x is the same object (same n, stride, cols, class) share one
   * quantization. Per-row results are those of `matmul`.
   */
  matmulMany(ps: readonly Product[]): void {
    const byArena = new Map<Arena, Resolved[]>();
    for (const p of ps) {
      if (p.n <= 0 || p.w.rows === 0) continue;
      if (!this.usable(p.w)) {
        plainProducts.matmul(p.w, p.x, p.n, p.xStride, p.y, p.yStride);
        continue;
      }
      const [a, wp, type, rowBytes] = this.resolve(p.w, p.n);
      let l = byArena.get(a);
      if (l === undefined) byArena.set(a, (l = []));
      l.push([p, wp, type, rowBytes]);
    }
    if (byArena.size === 0) return;
    if (this.pool.attached < this.arenas.length) this.pool.attach(this.arenas.map((a) => a.memory));
    for (const [arena, list] of byArena) this.manyIn(arena, list);
  }

  private manyIn(arena: Arena, list: readonly Resolved[]): void {
    const k = arena.k;
    const T = this.threads;
    let sBytes = 0;
    let need = 0;
    for (const [p] of list) {
      const { cols, rows } = p.w;
      sBytes = Math.max(sBytes, align64(k.scratchBytes(cols)));
      const nb = cols / k.blockValues(p.w.type);
      need += p.n * (cols * 4 + cols * 2 + nb * 4 + nb * 32 + rows * 4) + 5 * 64;
    }
    if (need > WORK_CAP || list.length + PIECES_PER_THREAD * T > MAX_SEGS) {
      for (const [p] of list) this.matmul(p.w, p.x, p.n, p.xStride, p.y, p.yStride);
      return;
    }
    const base = arena.work(sBytes * T + need + 1024);
    let at = base + sBytes * T;
    const f = arena.f32;
    // placement + activations
    const place: { xp: number; aqp: number; adp: number; asp: number; yp: number }[] = [];
    let prev: { p: Product; cls: number; xp: number; aqp: number; adp: number; asp: number } | undefined;
    for (const [p, , type] of list) {
      const { cols, rows } = p.w;
      const cls = k.typeClass(type);
      const nb = cols / k.blockValues(type);
      let xp: number, aqp: number, adp: number, asp: number;
      if (
        prev !== undefined &&
        prev.p.x === p.x &&
        prev.p.n === p.n &&
        prev.p.xStride === p.xStride &&
        prev.p.w.cols === cols &&
        prev.cls === cls
      ) {
        ({ xp, aqp, adp, asp } = prev);
      } else {
        xp = at;
        aqp = align64(xp + p.n * cols * 4);
        adp = align64(aqp + p.n * cols * 2);
        asp = align64(adp + p.n * nb * 4);
        at = align64(asp + p.n * nb * 32);
        copyRows(p.x, 0, p.xStride, f, xp >>> 2, cols, p.n, cols);
        if (cls !== 0) k.quantize(cls, xp, p.n, cols, cols, aqp, adp, asp);
        prev = { p, cls, xp, aqp, adp, asp };
      }
      const yp = at;
      at = align64(yp + p.n * rows * 4);
      place.push({ xp, aqp, adp, asp, yp });
    }
    this.runPlaced(
      arena,
      list.map(([p, wp, type, rowBytes], j) => ({
        type,
        wp,
        rowBytes,
        rows: p.w.rows,
        cols: p.w.cols,
        n: p.n,
        ...place[j],
      })),
      base,
      sBytes,
    );
    const h = arena.f32;
    list.forEach(([p], j) => {
      const yo = place[j].yp >>> 2;
      copyRows(h, yo, p.w.rows, p.y, 0, p.yStride, p.n, p.w.rows);
    });
  }

  /**
   * Gated FFNs (routed experts, shared experts, dense FFNs) with everything between the products kept in shared
   * memory (swiglu.ts); the generic composition of products when a matrix has no kernel or the matrices lie in
   * different arenas.
   */
  swigluMany(ffns: readonly GatedFFN[], x: Vec, n: number, dim: number, out: Vec): void {
    if (!fastSwigluMany(this, ffns, x, n, dim, out)) swigluManyByProducts(ffns, x, n, dim, out, this);
  }

  /** where each matrix is read for a product of ns[i] tokens, when all have kernels and lie in one arena */
  placeAll(
    ws: readonly QMatrix[],
    ns: readonly number[],
  ): { arena: Arena; at: [number, number, number][] } | undefined {
    let arena: Arena | undefined;
    const at: [number, number, number][] = [];
    for (let i = 0; i < ws.length; i++) {
      if (!this.usable(ws[i])) return undefined;
      const [a, wp, type, rowBytes] = this.resolve(ws[i], ns[i]);
      if (arena !== undefined && a !== arena) return undefined;
      arena = a;
      at.push([wp, type, rowBytes]);
    }
    if (arena === undefined) return undefined;
    if (this.pool.attached < this.arenas.length) this.pool.attach(this.arenas.map((x) => x.memory));
    return { arena, at };
  }

  /**
   * Products whose activations and outputs are already placed in `arena` (work area at `base`, `sBytes` of scratch per
   * thread), in one dispatch: piece i of K is the cost range [C·i/K, C·(i+1)/K) of all products' rows·cols·n (row
   * boundaries even, so row pairs stay together); the threads claim pieces one at a time.
   */
  runPlaced(arena: Arena, items: readonly PlacedProduct[], base: number, sBytes: number): void {
    const k = arena.k;
    const T = this.threads;
    const J = this.pool.job;
    let cost = 0;
    for (const p of items) cost += p.rows * p.cols * p.n;
    const K = cost < PARALLEL_MIN ? 1 : PIECES_PER_THREAD * T;
    let g = 0;
    for (let i = 0; i < K; i++) {
      const lo = (cost * i) / K;
      const hi = (cost * (i + 1)) / K;
      let c0 = 0;
      for (const p of items) {
        const u = p.cols * p.n;
        const c1 = c0 + p.rows * u;
        if (c1 > lo && c0 < hi) {
          const r0 = i === 0 ? 0 : Math.min(p.rows, Math.max(0, 2 * Math.round((lo - c0) / u / 2)));
          const r1 = i === K - 1 ? p.rows : Math.min(p.rows, Math.max(0, 2 * Math.round((hi - c0) / u / 2)));
          if (r1 > r0) {
            if (g >= MAX_SEGS) throw new Error(`more than ${MAX_SEGS} product segments in one dispatch`);
            J.set(
              [
                arena.index,
                p.type,
                p.wp,
                p.rowBytes,
                r0,
                r1,
                p.cols,
                p.n,
                p.xp,
                p.cols,
                p.aqp,
                p.adp,
                p.asp,
                p.yp,
                p.rows,
                base,
                sBytes,
                TOKEN_TILE,
              ],
              SEG0 + g * SEG,
            );
            g++;
          }
        }
        c0 = c1;
      }
    }
    J[0] = OP_MANY;
    J[1] = arena.index;
    if (K > 1) return this.pool.run(g, this.inst);
    for (let s = 0; s < g; s++) {
      const o = SEG0 + s * SEG;
      k.matmul(
        J[o + 1],
        J[o + 2],
        J[o + 3],
        J[o + 4],
        J[o + 5],
        J[o + 6],
        J[o + 7],
        J[o + 8],
        J[o + 9],
        J[o + 10],
        J[o + 11],
        J[o + 12],
        J[o + 13],
        J[o + 14],
        J[o + 15],
        J[o + 17],
      );
    }
  }

  /**
   * h = silu(g) ⊙ u (in place over g) and its quantization for the down product, for row ranges placed in `arena`
   * (kernels.as swigluQuant), cut into pieces of about equal size that the threads claim.
   */
  runSwiglu(arena: Arena, items: readonly SwigluRows[]): void {
    const k = arena.k;
    let total = 0;
    for (const p of items) total += p.rows * p.F;
    const K = total < 1 << 15 ? 1 : PIECES_PER_THREAD * this.threads;
    const per = Math.max(1, Math.ceil(total / K));
    const J = this.pool.job;
    let g = 0;
    for (const p of items) {
      const step = Math.max(1, Math.ceil(per / p.F));
      for (let r0 = 0; r0 < p.rows; r0 += step) {
        const r1 = Math.min(p.rows, r0 + step);
        if (K === 1) {
          k.swigluQuant(p.cls, p.g, p.u, r0, r1, p.F, p.aqp, p.adp, p.asp);
          continue;
        }
        if (g >= MAX_SEGS) throw new Error(`more than ${MAX_SEGS} SwiGLU segments in one dispatch`);
        J.set([arena.index, p.cls, p.g, p.u, r0, r1, p.F, p.aqp, p.adp, p.asp], SEG0 + g * SEG);
        g++;
      }
    }
    if (g === 0) return;
    J[0] = OP_SWIGLU;
    J[1] = arena.index;
    this.pool.run(g, this.inst);
  }

  /**
   * Absorbed MLA decode attention of H heads over T latent rows (mla.ts attendAbsorbed after the W_UK products):
   * per head s = scale·(C·qc_h + K·qp_h), p = softmax(s), lo_h = Cᵀ·p. C [T × L] and K [T × R] are f32 rows (used in
   * place when they live in an arena, else copied into the work area); qc [H × L], qp [H × R]; returns lo [H × L].
   * Heads are split across the threads.
   */
  absorbedAttention(
    C: Vec | Float32Array,
    K: Vec | Float32Array,
    T: number,
    L: number,
    R: number,
    qc: Vec,
    qp: Vec,
    H: number,
    scale: number,
  ): Float64Array {
    if (this.arenas.length === 0) this.newArena();
    const home = C instanceof Float32Array ? this.arenaOf(C.buffer) : undefined;
    const arena = home ?? this.arenas[0];
    if (this.pool.attached < this.arenas.length) this.pool.attach(this.arenas.map((a) => a.memory));
    const kIn = K instanceof Float32Array && this.arenaOf(K.buffer) === arena;
    const thr = T * H * L < PARALLEL_MIN ? 1 : Math.min(this.threads, H);
    const scBytes = align64((4 * T + 4) * 4);
    const cBytes = home === undefined ? align64(T * L * 4) : 0;
    const kBytes = kIn ? 0 : align64(T * R * 4);
    const need = cBytes + kBytes + align64(H * L * 4) * 2 + align64(H * R * 4) + scBytes * this.threads + 256;
    const base = arena.work(need);
    let at = base;
    const f = arena.f32;
    let cp = C.byteOffset;
    if (home === undefined) {
      cp = at;
      f.set(C.subarray(0, T * L), cp >>> 2);
      at += cBytes;
    }
    let kp = K.byteOffset;
    if (!kIn) {
      kp = at;
      f.set(K.subarray(0, T * R), kp >>> 2);
      at += kBytes;
    }
    const qcp = at;
    at += align64(H * L * 4);
    const qpp = at;
    at += align64(H * R * 4);
    const outp = at;
    at += align64(H * L * 4);
    const scp = at;
    f.set(qc.subarray(0, H * L), qcp >>> 2);
    f.set(qp.subarray(0, H * R), qpp >>> 2);
    const k = arena.k;
    if (thr === 1) {
      k.attnAbsorbed(cp, kp, T, L, R, qcp, qpp, 0, H, scale, scp, outp);
    } else {
      const J = this.pool.job;
      J[0] = OP_ATTN;
      J[1] = arena.index;
      J.set([cp, kp, T, L, R, qcp, qpp, H, scale, scp, scBytes, outp], 2);
      this.pool.run(Math.ceil(H / 4), this.inst);
    }
    return Float64Array.from(arena.f32.subarray(outp >>> 2, (outp >>> 2) + H * L));
  }

  /**
   * Causal prefill attention (mla.ts mha, dense keys) for n queries at positions pos0…: q [n × H × (P+R)], kNope
   * [T × H × P], kPe [T × R], v [T × H × V] with T = pos0 + n; returns o [n × H × V]. Inputs are staged as f32 in the
   * work area; heads are split across the threads.
   */
  prefillAttention(
    q: Vec,
    kNope: Vec,
    kPe: Vec | Float32Array,
    v: Vec,
    n: number,
    pos0: number,
    H: number,
    P: number,
    R: number,
    V: number,
    scale: number,
  ): Float64Array {
    if (this.arenas.length === 0) this.newArena();
    const arena = this.arenas[0];
    if (this.pool.attached < this.arenas.length) this.pool.attach(this.arenas.map((a) => a.memory));
    const T = pos0 + n;
    const D = P + R;
    const thr = n * T * H * D < PARALLEL_MIN ? 1 : Math.min(this.threads, H);
    const scBytes = align64((4 * T + 4) * 4);
    const sizes = [n * H * D, T * H * P, T * R, T * H * V, n * H * V].map((x) => align64(x * 4));
    const base = arena.work(sizes.reduce((a, b) => a + b, 0) + scBytes * this.threads + 64);
    const f = arena.f32;
    const ptrs: number[] = [];
    let at = base;
    for (const sz of sizes) {
      ptrs.push(at);
      at += sz;
    }
    const [qp, kp, rp, vp, op] = ptrs as [number, number, number, number, number];
    f.set(q.subarray(0, n * H * D), qp >>> 2);
    f.set(kNope.subarray(0, T * H * P), kp >>> 2);
    f.set(kPe.subarray(0, T * R), rp >>> 2);
    f.set(v.subarray(0, T * H * V), vp >>> 2);
    const scp = at;
    const k = arena.k;
    if (thr === 1) {
      k.attnPrefill(kp, rp, vp, qp, n, pos0, H, P, R, V, 0, H, scale, scp, op);
    } else {
      const J = this.pool.job;
      J[0] = OP_PREFILL;
      J[1] = arena.index;
      J.set([kp, rp, vp, qp, n, pos0, H, P, R, V, scale, scp, scBytes, op], 2);
      this.pool.run(H, this.inst);
    }
    return Float64Array.from(arena.f32.subarray(op >>> 2, (op >>> 2) + n * H * V));
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

  mha(
    cfg: ModelConfig,
    pr: Projections,
    n: number,
    pos0: number,
    kNope: Float64Array,
    v: Float64Array,
    lat: LatentRows,
  ): Float64Array {
    return fastMha(this, cfg, pr, n, pos0, kNope, v, lat);
  }

  absorbed(
    w: AttentionWeights,
    cfg: ModelConfig,
    pr: Projections,
    n: number,
    pos0: number,
    lat: LatentRows,
  ): Float64Array {
    return fastAbsorbed(this, w, cfg, pr, n, pos0, lat);
  }

  /** stop the workers (the arenas stay usable single-threaded) */
  close(): void {
    this.pool.close();
  }
}
