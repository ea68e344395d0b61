/// <reference types="@webgpu/types" />
/**
 * The WebGPU runtime under the kernels: pipelines cached by WGSL source, buffers, one open compute pass per
 * submission, per-dispatch uniforms packed into one ring buffer, bind groups reused when nothing changed, and the
 * `--check-writes` debug mode (every declared output range is filled with a NaN sentinel before its kernel runs and
 * counted after it: any sentinel left is an output the kernel was supposed to write and did not).
 */
import { LatentError } from "../../../util/errors.js";
import type { GpuDeviceInfo } from "./device.js";
import type { KernelTuning } from "./tuning.js";
import { combinedGrid, combineKernels, parseKernel, type CombinedKernel, type ParsedKernel } from "./wgsl-combine.js";

/** A kernel left part of its declared output unwritten (--check-writes). */
export class UnwrittenOutputError extends LatentError {}

/**
 * The GPU refused or lost work (a validation error, out of memory, a lost device). WebGPU reports these asynchronously
 * and otherwise carries on: the failed commands do nothing and reads return whatever the buffers held, so every read
 * after the failure throws this instead of handing back numbers that were never computed.
 */
export class GpuFailedError extends LatentError {}

/** Byte range of a buffer a kernel promises to write completely. */
export interface OutRange {
  readonly buffer: GPUBuffer;
  readonly offset: number;
  readonly size: number;
}

/** How the GPU's products take their activations (RuntimeOptions.activations). */
export type GpuActivations = "exact" | "int15" | "q8";
export const GPU_ACTIVATIONS: readonly GpuActivations[] = ["exact", "int15", "q8"];

export interface RuntimeOptions {
  /** fill outputs with NaN before each dispatch and verify they were fully written after */
  readonly checkWrites?: boolean;
  /** bind at most this many bytes of a tensor at once (default: the device limit); tests lower it to force pieces */
  readonly maxBindingBytes?: number;
  /**
   * matrix-vector kernel: "subgroup" (rows reduced with subgroupAdd; needs a fixed subgroup size), "shared"
   * (several rows per workgroup, one workgroup-memory reduction), "coalesced" (each thread reads four
   * consecutive elements, a subgroup one contiguous stretch of the row, x as vec4; rows reduced with subgroupAdd where the subgroup size is fixed, else in workgroup memory; falls
   * back to subgroup/shared for unaligned x); default: coalesced
   */
  readonly matvec?: "coalesced" | "subgroup" | "shared";
  /**
   * time every dispatch on the GPU (timestamp queries; each dispatch in its own compute pass, so the step is slower
   * than without): `profile()` returns GPU ms per kernel label, digits folded to "#"
   */
  readonly profile?: boolean;
  /**
   * time every compute pass on the GPU (one timestamp pair per pass; no extra passes): `profile()` reports them under
   * the label "(pass)" — the GPU time of a whole step when a step is one pass
   */
  readonly passTiming?: boolean;
  /** replayed steps are submitted in pieces of this many dispatches (default 96; Infinity: one submission) */
  readonly submitEvery?: number;
  /** kernel shape overrides, for measuring alternatives (bench --tune) */
  readonly tune?: KernelTuning;
  /**
   * "exact" (default): activations stay f32. "q8", opt-in: the register-tiled and row-tiled products (prompt chunks,
   * batched decode steps' expert lists and products of ≥ 32 tokens) and the plain products of 5–8 tokens quantize
   * their activations to int8 per 32 values, as ggml's q8_1, and run on integer dot products (gemm-q8.wgsl.ts,
   * rowtile-q8.wgsl.ts, vec-q8.wgsl.ts) — faster, and the logits move by the KL documented in docs/webgpu.md.
   * "int15", opt-in: the row-tiled products only, on activations in two int8 pieces (15 bits per 32 values, the CPU
   * backend's precision class; rowtile-q8.wgsl.ts) — batched decode from ~22 sequences faster, logits within ~1e-3
   */
  readonly activations?: GpuActivations;
  /**
   * run the dispatches of a together() block as one combined dispatch where they can be (default true; never in profile
   * mode). Kernels of different workgroup sizes combine only when the smaller one needs no whole workgroup (no barriers
   * or subgroup operations): the wide kernel (128 threads) and the coalesced / latent-cache kernels (256) do not
   */
  readonly fuse?: boolean;
}

/** A dispatch held back by together(). */
interface HeldDispatch {
  readonly label: string;
  readonly code: string;
  readonly buffers: readonly GPUBuffer[];
  readonly params: Uint32Array;
  readonly groups: readonly [number, number, number];
  readonly outputs: readonly OutRange[];
}

/** A recorded run of dispatches (see GpuRuntime.record) that replay() encodes again without rebuilding anything. */
export interface Recording {
  /** label: the dispatch's kernel label (digits folded to "#"), for timeItems */
  readonly items: readonly {
    readonly pipeline: GPUComputePipeline;
    readonly bindGroup: GPUBindGroup;
    readonly groups: readonly [number, number, number];
    readonly label: string;
  }[];
  /** the uniform ring's bytes [0, used) as recorded */
  readonly uniforms: Uint8Array;
}

/** A NaN with a payload arithmetic never produces. */
export const SENTINEL = 0x7fc0dead;
const UNIFORM_SLOT = 256;
const UNIFORM_RING = 256 * 1024;
const STORAGE = 0x80; // GPUBufferUsage.STORAGE
const COPY_SRC = 0x04;
const COPY_DST = 0x08;
const UNIFORM = 0x40;
const MAP_READ = 0x01;

const FILL_WGSL = /* wgsl */ `
struct P { off: u32, n: u32, v: u32, _p: u32 }
@group(0) @binding(0) var<storage, read_write> B: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i < p.n) { B[p.off + i] = p.v; }
}`;

const COUNT_WGSL = /* wgsl */ `
struct P { off: u32, n: u32, v: u32, slot: u32 }
@group(0) @binding(0) var<storage, read_write> B: array<u32>;
@group(0) @binding(1) var<storage, read_write> C: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i < p.n && B[p.off + i] == p.v) { atomicAdd(&C[p.slot], 1u); }
}`;

export interface RuntimeStats {
  dispatches: number;
  submits: number;
  /** host time spent encoding dispatches (ms; with replay's own submissions) */
  encodeMs: number;
  /** host time spent in finish() + queue.submit() (ms): where Dawn translates the passes for the driver */
  submitMs: number;
}

export class GpuRuntime {
  readonly device: GPUDevice;
  readonly maxBindingBytes: number;
  readonly checkWrites: boolean;
  /** the matrix-vector kernel in use (RuntimeOptions.matvec, resolved) */
  readonly matvec: "coalesced" | "subgroup" | "shared";
  readonly stats: RuntimeStats = { dispatches: 0, submits: 0, encodeMs: 0, submitMs: 0 };
  /** bytes of the storage buffers made through buffer() (and upload()) so far, destroyed ones included */
  bufferBytes = 0;
  private readonly pipelines = new Map<string, GPUComputePipeline>();
  /** each compiled pipeline's WGSL length (timeItems) */
  private readonly codeChars = new WeakMap<GPUComputePipeline, number>();
  private readonly bindGroups = new Map<string, GPUBindGroup>();
  private readonly objectIds = new WeakMap<object, number>();
  private syncBuf: GPUBuffer | undefined;
  private nextBufferId = 1;
  private encoder: GPUCommandEncoder | undefined;
  private pass: GPUComputePassEncoder | undefined;
  private readonly uniforms: GPUBuffer;
  private readonly uniformHost = new ArrayBuffer(UNIFORM_RING);
  private uniformUsed = 0;
  private counters: GPUBuffer | undefined;
  private checks: { label: string; words: number }[] = [];
  private readonly maxCheckSlots = 4096;
  private readonly profiling: boolean;
  private querySet: GPUQuerySet | undefined;
  private queryLabels: string[] = [];
  private readonly maxQueries = 4096;
  private readonly profileMs = new Map<string, { ms: number; count: number }>();
  /** the earliest start and latest end of the timed passes resolved since passSpan() (GPU timestamps, ns) */
  private span: { first?: bigint; last?: bigint } = {};
  private readonly passTiming: boolean;
  readonly submitEvery: number;
  readonly tune: KernelTuning;
  readonly activations: GpuActivations;
  private recording: Recording["items"][number][] | undefined;
  private recordingBroken = false;
  private lastPipeline: GPUComputePipeline | undefined;
  private readonly stagingFree: GPUBuffer[] = [];
  /** whether together() combines (RuntimeOptions.fuse, off in profile mode) */
  readonly fuse: boolean;
  private held: HeldDispatch[] | undefined;
  private readonly scratches = new Map<string, GPUBuffer>();
  private readonly retiredScratch: GPUBuffer[] = [];
  /** combined kernels by held kernels and shared-buffer pattern (null: cannot be combined) */
  private readonly combinations = new Map<string, CombinedKernel | null>();
  private readonly codeIds = new Map<string, number>();
  /** while collectPipelines runs: the kernels its dispatches would use (nothing is encoded) */
  private collecting: Set<string> | undefined;

  constructor(
    readonly info: GpuDeviceInfo,
    opts: RuntimeOptions = {},
  ) {
    this.device = info.device;
    this.checkWrites = opts.checkWrites === true;
    const sgOk = info.subgroupSize !== undefined && info.subgroupSize >= 4 && info.subgroupSize <= 64;
    if (opts.matvec === "subgroup" && !sgOk)
      throw new LatentError('matvec "subgroup" needs the subgroups feature with one fixed subgroup size');
    this.matvec = opts.matvec ?? "coalesced";
    this.profiling = opts.profile === true;
    this.passTiming = opts.passTiming === true && !this.profiling;
    this.submitEvery = Math.max(1, opts.submitEvery ?? 96);
    this.tune = opts.tune ?? {};
    this.activations = opts.activations ?? "exact";
    if (!GPU_ACTIVATIONS.includes(this.activations))
      throw new LatentError(
        `activations must be ${GPU_ACTIVATIONS.slice(0, -1).join(", ")} or ${GPU_ACTIVATIONS.at(-1)}, got "${String(this.activations)}"`,
      );
    this.fuse = opts.fuse !== false && !this.profiling;
    if (this.passTiming && !info.features.has("timestamp-query"))
      throw new LatentError("passTiming: the device has no timestamp-query");
    if (this.profiling && !info.features.has("timestamp-query"))
      throw new LatentError("profile: the device has no timestamp-query");
    const limit = info.limits.maxStorageBufferBindingSize;
    this.maxBindingBytes = Math.min(limit, opts.maxBindingBytes ?? limit) & ~255;
    this.uniforms = this.device.createBuffer({ size: UNIFORM_RING, usage: UNIFORM | COPY_DST, label: "uniform ring" });
    this.device.addEventListener("uncapturederror", (ev) => {
      const error = (ev as GPUUncapturedErrorEvent).error;
      this.failures++;
      this.failure ??= `${error.constructor.name}: ${error.message}`;
    });
    void this.device.lost.then((info) => {
      if (info.reason !== "destroyed") this.failure ??= `the device was lost (${info.reason}): ${info.message}`;
    });
  }

  /** the first error the GPU reported (and how many followed), or undefined while none has */
  private failure: string | undefined;
  private failures = 0;

  /** Throws GpuFailedError once the GPU has reported an error: the results of anything since are not valid. */
  checkFailure(): void {
    if (this.failure === undefined) return;
    const first = this.failure.split("\n").filter((l) => l.trim() !== "");
    const more = this.failures > 1 ? ` (and ${this.failures - 1} more errors)` : "";
    const hint = /out of memory/i.test(this.failure)
      ? " — the GPU ran out of memory: use a smaller context, batch or prompt chunk"
      : "";
    throw new GpuFailedError(
      `the GPU reported an error, so results computed since are not valid${hint}: ${first.slice(0, 3).join(" ")}${more}`,
    );
  }

  /** Compute pipeline for a WGSL source (entry point `main`), compiled once. */
  pipeline(code: string): GPUComputePipeline {
    let p = this.pipelines.get(code);
    if (p === undefined) {
      const module = this.device.createShaderModule({ code });
      p = this.device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
      this.pipelines.set(code, p);
      this.codeChars.set(p, code.length);
    }
    return p;
  }

  /**
   * The kernels not compiled yet that the dispatches `fn` makes would use — combined ones as together() would combine
   * them — with nothing encoded, submitted or counted: a dry run of an encoding, for precompile(). Uploads `fn` makes
   * (tables made on first use) do happen.
   */
  collectPipelines(fn: () => void): string[] {
    if (this.collecting !== undefined) throw new LatentError("collectPipelines() does not nest");
    const seen = (this.collecting = new Set<string>());
    try {
      fn();
    } finally {
      this.collecting = undefined;
    }
    return [...seen].filter((code) => !this.pipelines.has(code));
  }

  /**
   * Compile pipelines before their first dispatch, all requested at once (createComputePipelineAsync: the
   * implementation may compile them in parallel), so that a step never waits for the driver's compiler. `onDone`
   * after each one. A kernel that fails to compile rejects with its error.
   */
  async precompile(codes: readonly string[], onDone?: (done: number, total: number) => void): Promise<void> {
    const todo = [...new Set(codes)].filter((code) => !this.pipelines.has(code));
    let done = 0;
    await Promise.all(
      todo.map(async (code) => {
        const module = this.device.createShaderModule({ code });
        const p = await this.device.createComputePipelineAsync({
          layout: "auto",
          compute: { module, entryPoint: "main" },
        });
        this.pipelines.set(code, p);
        this.codeChars.set(p, code.length);
        onDone?.(++done, todo.length);
      }),
    );
  }

  /** how many pipelines are compiled */
  get pipelineCount(): number {
    return this.pipelines.size;
  }

  /** A storage buffer of at least `bytes` (rounded up to 16: kernels may bind it as array<vec4f>). */
  buffer(bytes: number, label?: string, usage = STORAGE | COPY_SRC | COPY_DST): GPUBuffer {
    const size = Math.max(16, Math.ceil(bytes / 16) * 16);
    if (size > this.info.limits.maxBufferSize)
      throw new LatentError(`buffer ${label ?? ""} of ${size} bytes exceeds the device's maxBufferSize`);
    this.bufferBytes += size;
    return this.device.createBuffer({ size, usage, label });
  }

  /**
   * A storage buffer of at least `bytes` kept under `name`, for what a kernel passes to the next one within a step
   * (e.g. a product's quantized x): the same buffer every call until a larger one is asked for, which replaces it
   * (sizes doubling); a replaced one stays alive, since recorded steps may still bind it. Undefined past the device's
   * binding limit.
   */
  scratch(name: string, bytes: number): GPUBuffer | undefined {
    if (bytes > this.maxBindingBytes) return undefined;
    const have = this.scratches.get(name);
    if (have !== undefined && have.size >= bytes) return have;
    const size = Math.min(this.maxBindingBytes, Math.max(bytes, 2 * (have?.size ?? 0)));
    const buf = this.buffer(size, `scratch ${name}`);
    if (have !== undefined) this.retiredScratch.push(have);
    this.scratches.set(name, buf);
    return buf;
  }

  /** Whether dispatches are being held for together() (a pass whose output a held kernel reads cannot run there). */
  get holding(): boolean {
    return this.held !== undefined;
  }

  /** A storage buffer holding `data` (padded to 4 bytes). */
  upload(data: ArrayBufferView, label?: string): GPUBuffer {
    const buf = this.buffer(data.byteLength, label);
    this.write(buf, 0, data);
    return buf;
  }

  /** queue.writeBuffer, padding the tail to 4 bytes; ordered before the next submission. */
  write(buf: GPUBuffer, offset: number, data: ArrayBufferView): void {
    let bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (!(bytes.buffer instanceof ArrayBuffer)) bytes = bytes.slice(); // Dawn takes no SharedArrayBuffer
    const whole = bytes.byteLength & ~3;
    const CHUNK = 64 << 20;
    for (let at = 0; at < whole; at += CHUNK) {
      const n = Math.min(CHUNK, whole - at);
      this.device.queue.writeBuffer(buf, offset + at, bytes.buffer, bytes.byteOffset + at, n);
    }
    if (whole < bytes.byteLength) {
      const tail = new Uint8Array(4);
      tail.set(bytes.subarray(whole));
      this.device.queue.writeBuffer(buf, offset + whole, tail);
    }
  }

  private id(obj: object): number {
    let id = this.objectIds.get(obj);
    if (id === undefined) this.objectIds.set(obj, (id = this.nextBufferId++));
    return id;
  }

  private ensurePass(): GPUComputePassEncoder {
    this.encoder ??= this.device.createCommandEncoder();
    if (this.pass === undefined) {
      this.lastPipeline = undefined;
      if (this.passTiming && this.queryLabels.length * 2 < this.maxQueries) {
        this.querySet ??= this.device.createQuerySet({ type: "timestamp", count: this.maxQueries });
        const q = this.queryLabels.length * 2;
        this.queryLabels.push("(pass)");
        this.pass = this.encoder.beginComputePass({
          timestampWrites: { querySet: this.querySet, beginningOfPassWriteIndex: q, endOfPassWriteIndex: q + 1 },
        });
      } else this.pass = this.encoder.beginComputePass();
    }
    return this.pass;
  }

  /**
   * Start recording: every dispatch from here to endRecording() is also kept (pipeline, bind group, grid) with the
   * uniform bytes it wrote, so that replay() can encode the same run again at the cost of the encoder calls alone.
   * Starts on an empty uniform ring (pending work is submitted first). Not with checkWrites or profile.
   */
  beginRecording(): void {
    if (this.uniformUsed > 0) this.submit();
    this.recording = this.checkWrites || this.profiling ? undefined : [];
    this.recordingBroken = this.recording === undefined;
  }

  /** The run recorded since beginRecording(), or undefined when it cannot be replayed (a submission in between, debug modes). */
  endRecording(): Recording | undefined {
    const items = this.recording;
    this.recording = undefined;
    if (items === undefined || this.recordingBroken) return undefined;
    return { items, uniforms: new Uint8Array(this.uniformHost, 0, this.uniformUsed).slice() };
  }

  /**
   * Encode a recorded run again (same buffers, same parameters), submitted in pieces of `submitEvery` dispatches so
   * that the GPU starts on the first piece while the host still encodes (and Dawn translates) the next ones.
   */
  replay(rec: Recording, submitEvery: number = this.submitEvery): void {
    const t0 = performance.now();
    if (this.uniformUsed > 0 || rec.uniforms.byteLength > UNIFORM_RING) this.submit();
    let pass = this.ensurePass();
    // the first submission writes every slot of the run; later pieces find them in place (queue order)
    this.restoreUniforms(rec);
    let last = this.lastPipeline;
    // a short first piece: the GPU starts sooner (none with submitEvery Infinity, one submission; `Infinity >> 2` is 0,
    // which once made the first piece an empty submission)
    let inPiece = Number.isFinite(submitEvery)
      ? Math.max(0, submitEvery - Math.max(16, Math.floor(submitEvery / 4)))
      : 0;
    for (const it of rec.items) {
      if (inPiece === submitEvery) {
        this.submit();
        pass = this.ensurePass();
        last = undefined;
        inPiece = 0;
      }
      inPiece++;
      if (it.pipeline !== last) pass.setPipeline((last = it.pipeline));
      pass.setBindGroup(0, it.bindGroup);
      pass.dispatchWorkgroups(it.groups[0], it.groups[1], it.groups[2]);
    }
    this.lastPipeline = last;
    this.stats.dispatches += rec.items.length;
    this.stats.encodeMs += performance.now() - t0;
  }

  /**
   * GPU µs per dispatch of every item of a recorded step run alone: the item dispatched `reps` times back to back in
   * one timed pass (its uniforms as recorded), one pass and one wait per item. The items rewrite their outputs (and
   * accumulate into some), so the buffers' contents are garbage afterwards: for benchmarks, after the measured steps.
   * Needs passTiming. Each item also gives its kernel's WGSL length in characters (code size counts inside a step:
   * BENCHMARKS.md, WebGPU).
   */
  async timeItems(rec: Recording, reps: number): Promise<{ label: string; us: number; codeChars: number }[]> {
    if (!this.passTiming) throw new LatentError("timeItems needs RuntimeOptions.passTiming");
    if (rec.uniforms.byteLength > UNIFORM_RING)
      throw new LatentError("the recording's parameters exceed the uniform ring");
    this.submit();
    await this.sync();
    // the recorded parameters into the ring once; nothing else takes a slot while the items run
    this.restoreUniforms(rec);
    const out: { label: string; us: number; codeChars: number }[] = [];
    for (const it of rec.items) {
      this.profile(true);
      const pass = this.ensurePass();
      pass.setPipeline(it.pipeline);
      for (let r = 0; r < reps; r++) {
        pass.setBindGroup(0, it.bindGroup);
        pass.dispatchWorkgroups(it.groups[0], it.groups[1], it.groups[2]);
      }
      this.submit();
      await this.sync();
      const ms = this.profile(true).find((e) => e.label === "(pass)")?.ms ?? Number.NaN;
      out.push({ label: it.label, us: (ms * 1000) / reps, codeChars: this.codeChars.get(it.pipeline) ?? 0 });
    }
    this.lastPipeline = undefined;
    return out;
  }

  /** The ring's slots as a recording left them, written with the next submission. */
  private restoreUniforms(rec: Recording): void {
    new Uint8Array(this.uniformHost, 0, rec.uniforms.byteLength).set(rec.uniforms);
    this.uniformUsed = rec.uniforms.byteLength;
  }

  /** Reserve a uniform slot for `params` (u32 words; write floats with f32bits). */
  private uniformSlot(params: Uint32Array): number {
    if (params.byteLength > UNIFORM_SLOT)
      throw new LatentError(`kernel parameters of ${params.byteLength} bytes exceed ${UNIFORM_SLOT}`);
    if (this.uniformUsed + UNIFORM_SLOT > UNIFORM_RING) {
      this.recordingBroken = true;
      this.submit();
    }
    const at = this.uniformUsed;
    new Uint32Array(this.uniformHost, at, params.length).set(params);
    this.uniformUsed += UNIFORM_SLOT;
    return at;
  }

  /**
   * Record one dispatch: storage `buffers` at bindings 0..k-1 (whole buffers), the parameter block at binding k
   * (uniform), `groups` workgroups. `outputs` name what the kernel must write completely (checked with --check-writes).
   */
  dispatch(
    label: string,
    code: string,
    buffers: readonly GPUBuffer[],
    params: Uint32Array,
    groups: readonly [number, number?, number?],
    outputs: readonly OutRange[] = [],
  ): void {
    const t0 = performance.now();
    const [gx, gy = 1, gz = 1] = groups;
    if (gx === 0 || gy === 0 || gz === 0) return;
    const maxG = this.info.limits.maxComputeWorkgroupsPerDimension;
    if (gx > maxG || gy > maxG || gz > maxG)
      throw new LatentError(`${label}: ${gx}×${gy}×${gz} workgroups exceed ${maxG} per dimension`);
    if (this.held !== undefined) {
      this.held.push({ label, code, buffers, params, groups: [gx, gy, gz], outputs });
      return;
    }
    if (this.collecting !== undefined) {
      this.collecting.add(code);
      return;
    }
    // room for this dispatch's uniform slots (and its check-writes fills and counts) before a profile pass opens
    if (this.uniformUsed + UNIFORM_SLOT * (1 + (this.checkWrites ? 2 * outputs.length + 1 : 0)) > UNIFORM_RING) {
      this.recordingBroken = true;
      this.submit();
    }
    if (this.checkWrites) for (const o of outputs) this.fillWords(o, SENTINEL);
    if (this.profiling && this.queryLabels.length * 2 < this.maxQueries) {
      this.querySet ??= this.device.createQuerySet({ type: "timestamp", count: this.maxQueries });
      const q = this.queryLabels.length * 2;
      this.queryLabels.push(label.replace(/\d+/g, "#"));
      this.pass?.end();
      this.encoder ??= this.device.createCommandEncoder();
      this.pass = this.encoder.beginComputePass({
        timestampWrites: { querySet: this.querySet, beginningOfPassWriteIndex: q, endOfPassWriteIndex: q + 1 },
      });
      this.lastPipeline = undefined;
      this.encode(label, code, buffers, params, [gx, gy, gz]);
      this.pass.end();
      this.pass = undefined;
    } else this.encode(label, code, buffers, params, [gx, gy, gz]);
    if (this.checkWrites) for (const o of outputs) this.countSentinels(label, o);
    this.stats.dispatches++;
    this.stats.encodeMs += performance.now() - t0;
  }

  private encode(
    label: string,
    code: string,
    buffers: readonly GPUBuffer[],
    params: Uint32Array,
    groups: readonly [number, number, number],
  ): void {
    const pipeline = this.pipeline(code);
    // the slot first: a full ring submits (and ends the pass)
    const at = this.uniformSlot(params);
    this.encodeBound(label, pipeline, [...buffers, at], groups);
  }

  /** One dispatch of `pipeline` with `resources` at bindings 0.. (a buffer, or the offset of a uniform ring slot). */
  private encodeBound(
    label: string,
    pipeline: GPUComputePipeline,
    resources: readonly (GPUBuffer | number)[],
    groups: readonly [number, number, number],
  ): void {
    const pass = this.ensurePass();
    const key = `${this.id(pipeline)}|${resources.map((r) => (typeof r === "number" ? `u${r}` : this.id(r))).join(",")}`;
    let bg = this.bindGroups.get(key);
    if (bg === undefined) {
      const limit = this.info.limits.maxStorageBufferBindingSize;
      for (const r of resources)
        if (typeof r !== "number" && r.size > limit)
          throw new LatentError(
            `${label}: buffer "${r.label}" of ${r.size} bytes is bound whole, past the device's maxStorageBufferBindingSize (${limit})`,
          );
      const entries: GPUBindGroupEntry[] = resources.map((r, i) => ({
        binding: i,
        resource: typeof r === "number" ? { buffer: this.uniforms, offset: r, size: UNIFORM_SLOT } : { buffer: r },
      }));
      bg = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
      if (this.bindGroups.size > 50000) this.bindGroups.clear();
      this.bindGroups.set(key, bg);
    }
    if (pipeline !== this.lastPipeline) pass.setPipeline(pipeline);
    this.lastPipeline = pipeline;
    pass.setBindGroup(0, bg);
    pass.dispatchWorkgroups(groups[0], groups[1], groups[2]);
    this.recording?.push({ pipeline, bindGroup: bg, groups, label: label.replace(/\d+/g, "#") });
  }

  /**
   * Run the dispatches `fn` makes as one dispatch of a combined kernel where they can be combined (see
   * wgsl-combine.ts), else one by one as usual. The caller promises they are independent: none reads what another
   * writes. Does not nest.
   */
  together(fn: () => void): void {
    if (this.held !== undefined) throw new LatentError("together() does not nest");
    if (!this.fuse) return fn();
    const held: HeldDispatch[] = (this.held = []);
    try {
      fn();
    } finally {
      this.held = undefined;
    }
    if (held.length >= 2 && this.dispatchCombined(held)) return;
    for (const d of held) this.dispatch(d.label, d.code, d.buffers, d.params, d.groups, d.outputs);
  }

  /**
   * The combined kernel of held dispatches (undefined: they cannot be combined), built once per kernels and pattern of
   * shared buffers (all combineKernels looks at: its bindings name parts and buffer indices, not buffers).
   */
  private combination(held: readonly HeldDispatch[]): CombinedKernel | undefined {
    const first = new Map<object, number>();
    let at = 0;
    const shared = held
      .map((d) => d.buffers.map((b) => (first.has(b) ? first.get(b)! : (first.set(b, at), at++))).join(","))
      .join(";");
    const key = `${held.map((d) => this.codeId(d.code)).join(",")}|${shared}`;
    if (this.combinations.has(key)) return this.combinations.get(key) ?? undefined;
    const kernels = held.map((d) => parseKernel(d.code));
    const limits = this.device.limits;
    const combined = kernels.some((k) => k === undefined)
      ? undefined
      : combineKernels(
          held.map((d, j) => ({ kernel: kernels[j] as ParsedKernel, buffers: d.buffers })),
          {
            maxStorageBuffersPerShaderStage: limits.maxStorageBuffersPerShaderStage,
            maxUniformBuffersPerShaderStage: limits.maxUniformBuffersPerShaderStage,
            maxBindingsPerBindGroup: limits.maxBindingsPerBindGroup,
            maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
          },
        );
    if (this.combinations.size >= 4096) this.combinations.clear();
    this.combinations.set(key, combined ?? null);
    return combined;
  }

  /** A number for a kernel source (its pipeline's key), for short keys of combinations. */
  private codeId(code: string): number {
    let id = this.codeIds.get(code);
    if (id === undefined) this.codeIds.set(code, (id = this.codeIds.size));
    return id;
  }

  /** Encode held dispatches as one; false (nothing encoded) when they cannot be combined. */
  private dispatchCombined(held: readonly HeldDispatch[]): boolean {
    const t0 = performance.now();
    const combined = this.combination(held);
    if (combined === undefined) return false;
    if (this.collecting !== undefined) {
      this.collecting.add(combined.code);
      return true;
    }
    const outputs = held.flatMap((d) => d.outputs.map((o) => ({ label: `${d.label} (together)`, o })));
    // every slot of this dispatch in one ring: a submission between them would overwrite the first ones
    if (
      this.uniformUsed + UNIFORM_SLOT * (held.length + 1 + (this.checkWrites ? 2 * outputs.length + 1 : 0)) >
      UNIFORM_RING
    ) {
      this.recordingBroken = true;
      this.submit();
    }
    if (this.checkWrites) for (const { o } of outputs) this.fillWords(o, SENTINEL);
    const pipeline = this.pipeline(combined.code);
    const slots = held.map((d) => this.uniformSlot(d.params));
    const grid = combinedGrid(
      held.map((d) => d.groups),
      this.info.limits.maxComputeWorkgroupsPerDimension,
    );
    const gridSlot = this.uniformSlot(grid.words);
    const resources = combined.bindings.map((b) =>
      "grids" in b ? gridSlot : "params" in b ? slots[b.part] : held[b.part].buffers[b.index],
    );
    this.encodeBound(held.map((d) => d.label).join(" ∥ "), pipeline, resources, grid.groups);
    if (this.checkWrites) for (const { label, o } of outputs) this.countSentinels(label, o);
    this.stats.dispatches++;
    this.stats.encodeMs += performance.now() - t0;
    return true;
  }

  private grid(words: number): [number, number, number] {
    const groups = Math.ceil(words / 256);
    const gx = Math.min(groups, 65535);
    return [gx, Math.ceil(groups / gx), 1];
  }

  /** Fill a byte range (4-aligned) with a u32 value. */
  fillWords(o: OutRange, value: number): void {
    if (o.offset % 4 !== 0 || o.size % 4 !== 0) throw new LatentError("fill ranges must be 4-byte aligned");
    const words = o.size / 4;
    if (words === 0) return;
    const g = this.grid(words);
    this.encode("fill", FILL_WGSL, [o.buffer], new Uint32Array([o.offset / 4, words, value >>> 0, 0]), [g[0], g[1], 1]);
  }

  private countSentinels(label: string, o: OutRange): void {
    const words = o.size / 4;
    if (words === 0) return;
    if (this.counters === undefined) this.counters = this.buffer(this.maxCheckSlots * 4, "check-writes counters");
    if (this.checks.length === this.maxCheckSlots)
      throw new LatentError("--check-writes: too many dispatches in one submission; call sync() more often");
    const slot = this.checks.length;
    if (slot === 0) this.fillWords({ buffer: this.counters, offset: 0, size: this.maxCheckSlots * 4 }, 0);
    this.checks.push({ label, words });
    const g = this.grid(words);
    this.encode(
      "count",
      COUNT_WGSL,
      [o.buffer, this.counters],
      new Uint32Array([o.offset / 4, words, SENTINEL, slot]),
      [g[0], g[1], 1],
    );
  }

  /** Copy `bytes` (a multiple of 4) between buffers after everything encoded so far, in queue order (ends the open pass). */
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): void {
    if (this.collecting !== undefined) return;
    if (this.recording !== undefined) this.recordingBroken = true;
    // copies in a row share the gap between passes (no empty pass between them)
    this.pass?.end();
    this.pass = undefined;
    this.encoder ??= this.device.createCommandEncoder();
    this.encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
  }

  /** Submit everything recorded so far. */
  submit(): void {
    if (this.collecting !== undefined) return;
    if (this.encoder === undefined) return;
    if (this.recording !== undefined) this.recordingBroken = true;
    this.pass?.end();
    this.pass = undefined;
    const t0 = performance.now();
    if (this.uniformUsed > 0) this.device.queue.writeBuffer(this.uniforms, 0, this.uniformHost, 0, this.uniformUsed);
    this.uniformUsed = 0;
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = undefined;
    this.stats.submits++;
    this.stats.submitMs += performance.now() - t0;
  }

  /** Copy bytes [offset, offset+size) of a buffer back to the host (submits pending work first). */
  async read(buf: GPUBuffer, offset = 0, size = buf.size - offset): Promise<ArrayBuffer> {
    const staging = this.staging(Math.ceil(size / 4) * 4);
    // no empty pass when none is open (with passTiming it would be one more timed pass)
    this.pass?.end();
    this.pass = undefined;
    this.encoder ??= this.device.createCommandEncoder();
    this.encoder.copyBufferToBuffer(buf, offset, staging, 0, Math.ceil(size / 4) * 4);
    const labels = this.queryLabels;
    let queryStaging: GPUBuffer | undefined;
    if (labels.length > 0) {
      const bytes = labels.length * 16;
      const resolved = this.device.createBuffer({ size: bytes, usage: 0x200 | COPY_SRC }); // QUERY_RESOLVE
      queryStaging = this.device.createBuffer({ size: bytes, usage: MAP_READ | COPY_DST });
      this.encoder!.resolveQuerySet(this.querySet!, 0, labels.length * 2, resolved, 0);
      this.encoder!.copyBufferToBuffer(resolved, 0, queryStaging, 0, bytes);
      this.queryLabels = [];
    }
    const checks = this.checks;
    let counterStaging: GPUBuffer | undefined;
    if (checks.length > 0) {
      counterStaging = this.device.createBuffer({ size: checks.length * 4, usage: MAP_READ | COPY_DST });
      this.encoder!.copyBufferToBuffer(this.counters!, 0, counterStaging, 0, checks.length * 4);
      this.checks = [];
    }
    this.submit();
    try {
      await staging.mapAsync(1);
    } catch (e) {
      this.checkFailure();
      throw e;
    }
    this.checkFailure();
    const out = staging.getMappedRange(0, Math.ceil(size / 4) * 4).slice(0, size);
    staging.unmap();
    this.stagingFree.push(staging);
    if (queryStaging !== undefined) {
      await queryStaging.mapAsync(1);
      const ts = new BigUint64Array(queryStaging.getMappedRange().slice(0));
      queryStaging.unmap();
      queryStaging.destroy();
      labels.forEach((l, i) => {
        const ns = ts[2 * i + 1] > ts[2 * i] ? Number(ts[2 * i + 1] - ts[2 * i]) : 0;
        const [begin, end] = [ts[2 * i], ts[2 * i + 1]];
        if (begin > 0n) {
          if (this.span.first === undefined || begin < this.span.first) this.span.first = begin;
          if (this.span.last === undefined || end > this.span.last) this.span.last = end;
        }
        const e = this.profileMs.get(l) ?? { ms: 0, count: 0 };
        e.ms += ns / 1e6;
        e.count++;
        this.profileMs.set(l, e);
      });
    }
    if (counterStaging !== undefined) {
      await counterStaging.mapAsync(1);
      const counts = new Uint32Array(counterStaging.getMappedRange().slice(0));
      counterStaging.unmap();
      counterStaging.destroy();
      const bad = checks.map((c, i) => ({ ...c, left: counts[i] })).filter((c) => c.left > 0);
      if (bad.length > 0) {
        throw new UnwrittenOutputError(
          `--check-writes: ${bad.map((b) => `${b.label} left ${b.left} of ${b.words} output values unwritten`).join("; ")}`,
        );
      }
    }
    return out;
  }

  /**
   * A MAP_READ staging buffer of at least `bytes`, reused across reads (a fresh one per read cost an allocation and its
   * zero fill every step: 26 MB of logits at batch 64); read() returns it to the free list once unmapped.
   */
  private staging(bytes: number): GPUBuffer {
    const size = Math.max(256, 2 ** Math.ceil(Math.log2(bytes)));
    const i = this.stagingFree.findIndex((b) => b.size === size);
    if (i >= 0) return this.stagingFree.splice(i, 1)[0];
    if (this.stagingFree.length > 8) this.stagingFree.shift()!.destroy();
    return this.device.createBuffer({ size, usage: MAP_READ | COPY_DST, label: "staging" });
  }

  /**
   * GPU ms from the first timed pass's start to the last one's end since the last call (then reset), NaN without timed
   * passes: beside the passes' summed time, it shows how long the GPU idled between them (submissions, copies).
   */
  passSpan(): number {
    const { first, last } = this.span;
    this.span = {};
    return first !== undefined && last !== undefined && last > first ? Number(last - first) / 1e6 : Number.NaN;
  }

  /** GPU time per kernel label since the last reset (profile mode), largest first; `reset` clears it. */
  profile(reset = false): { label: string; ms: number; count: number }[] {
    const out = [...this.profileMs].map(([label, v]) => ({ label, ...v })).sort((a, b) => b.ms - a.ms);
    if (reset) this.profileMs.clear();
    return out;
  }

  /** Wait for all submitted work (and run the --check-writes verification). */
  async sync(): Promise<void> {
    this.syncBuf ??= this.buffer(16, "sync");
    await this.read(this.syncBuf, 0, 4);
  }

  async readF32(buf: GPUBuffer, offsetFloats = 0, count = buf.size / 4 - offsetFloats): Promise<Float32Array> {
    return new Float32Array(await this.read(buf, offsetFloats * 4, count * 4));
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** Bits of a float32, for parameter blocks. */
export function f32bits(x: number): number {
  f32[0] = x;
  return u32[0];
}
