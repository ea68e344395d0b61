/// <reference types="@webgpu/types" />
/**
 * Probe of the tensor cores through Dawn's experimental subgroup matrices: int8 GEMMs checked exactly against the CPU,
 * then timed at the decode shapes. `node --import tsx research/mma/mma-probe.ts [--json out.json] [--quick] [--dawn "toggles"]`
 * (--dawn replaces the default "enable-dawn-features=allow_unsafe_apis", e.g. to add ",disable_robustness"); exits 0 with
 * a "not offered" line where the adapter lacks the feature (lavapipe, most machines).
 *
 * What the syntax is (research, 2026-11; the kernels are in mma-kernels.ts):
 * - Device: `create(["enable-dawn-features=allow_unsafe_apis"])`, feature "chromium-experimental-subgroup-matrix"
 *   (needs "subgroups"). JS: `adapter.info.subgroupMatrixConfigs`: [{componentType, resultComponentType, M, N, K}]
 *   ("u8" "i8" "f16" "f32" "u32" "i32"). Sources: gpuweb proposals/subgroup-matrix.md (API section); the strings
 *   "subgroupMatrixConfigs", "GPUSubgroupMatrixConfig" in our dawn.node (webgpu@0.6.2).
 * - WGSL: `enable chromium_experimental_subgroup_matrix;` types `subgroup_matrix_left<T, K, M>` (M rows × K cols),
 *   `subgroup_matrix_right<T, N, K>`, `subgroup_matrix_result<T, N, M>` (note: columns first); i8/u8 only as matrix
 *   components. `subgroupMatrixMultiplyAccumulate(l, r, acc) -> acc`; `Acc()` is the zero matrix.
 *   Sources: dawn docs/dawn/features/subgroup_matrix.md; dawn test/tint/builtins/gen/*subgroupMatrix*; wgsl.def.
 * - Load/store, two generations:
 *   (old) `subgroupMatrixLoad<T>(&arr, offset, col_major: bool, stride)`, `subgroupMatrixStore(&arr, off, m, col_major, stride)`
 *         (dawn wgsl.def at 0013a853; llama.cpp ggml-webgpu mul_mat_subgroup_matrix.wgsl), stride "in elements of the
 *         component type" (old gpuweb proposal text);
 *   (new) `subgroupMatrixLoad<T, row_major|col_major>(&arr, offset, stride)`, `subgroupMatrixStore<col_major>(&arr, off, m, stride)`,
 *         offset and stride counted in elements of the ARRAY (gpuweb PR #6275, 2026-06; dawn
 *         src/dawn/tests/end2end/SubgroupMatrixTests.cpp: 8-bit stride K/4, offset K·M/4). Our dawn.node carries a Tint
 *         assert "subgroupMatrixLoad ... ExplicitTemplateParams().Length() == 2", so the new form is expected; the probe
 *         compiles both and runs the units both ways.
 * - 8-bit storage: i8 matrices load from array<i32>, u8 from array<u32>, 4 values per word, little-endian (Dawn's test
 *   memcpy's int8_t bytes into the buffer). Vulkan (VK_KHR_cooperative_matrix) wants offset and stride aligned to
 *   16 bytes (row of 32 int8 = 32 bytes).
 * - Calls must be in subgroup-uniform control flow; offsets from subgroup_id trip the uniformity analysis, so
 *   `diagnostic(off, chromium.subgroup_matrix_uniformity);` (as llama.cpp and ORT do). `@builtin(subgroup_id)` with
 *   `enable subgroups;` (Dawn's test); workgroup_size.x must be a multiple of subgroupMaxSize (32 here).
 * Guessed, settled by the run: which load/store form compiles, the units of offset/stride, that subgroup_id exists.
 * Then the two GGUF weight-scale schemes of mma-scaled.ts (rescale after every 32 of K, or every 256 with two weight pieces).
 */
import { writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import {
  checkScaled,
  period,
  scaledCols,
  scaledFits,
  scaledName,
  scaledRows,
  scaledShared,
  scaledWGSL,
  type ScaledKernel,
  type Scheme,
} from "./mma-scaled.js";
import {
  colsPerGroup,
  combineThree,
  F32_GEMM_WGSL,
  gemmI8,
  kernelName,
  mmaWGSL,
  packI8,
  PIECE_SHIFT,
  rngI8,
  rowsPerGroup,
  shapeFits,
  splitThree,
  type MajorSyntax,
  type MmaKernel,
} from "./mma-kernels.js";

const FEATURE = "chromium-experimental-subgroup-matrix";
interface SgConfig {
  componentType: string;
  resultComponentType: string;
  M: number;
  N: number;
  K: number;
}
interface Compiled {
  pipeline?: GPUComputePipeline;
  messages: string[];
}
export interface ProbeReport {
  adapter: string;
  offered: boolean;
  features: string[];
  subgroupSizes?: [number, number];
  configs: SgConfig[];
  compile: { what: string; ok: boolean; messages: string[]; code?: string }[];
  chosen?: { syntax: MajorSyntax; offUnit: number; strideUnit: number; sgid: string };
  checks: { kernel: string; pieces: number; shape: string; ok: boolean; detail: string }[];
  timings: { kernel: string; pieces: number; M: number; N: number; K: number; us: number; tops: number }[];
  errors: string[];
}

const keep: GPU[] = [];
async function gpuEntry(flags: string[]): Promise<GPU> {
  const mod = (await import("webgpu")) as unknown as { create(flags: string[]): GPU; globals: object };
  for (const [k, v] of Object.entries(mod.globals))
    if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
  const gpu = mod.create(flags);
  keep.push(gpu);
  return gpu;
}

export class Gpu {
  constructor(readonly dev: GPUDevice) {}
  buffer(bytes: number, data?: ArrayBufferView, uniform = false): GPUBuffer {
    const b = this.dev.createBuffer({
      size: Math.max(16, Math.ceil(bytes / 16) * 16),
      usage:
        (uniform ? GPUBufferUsage.UNIFORM : GPUBufferUsage.STORAGE) | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    if (data !== undefined) this.dev.queue.writeBuffer(b, 0, data.buffer, data.byteOffset, data.byteLength);
    return b;
  }
  params(M: number, N: number, K: number, d = 0): GPUBuffer {
    return this.buffer(16, new Uint32Array([M, N, K, d]), true);
  }
  async compile(code: string, label: string): Promise<Compiled> {
    this.dev.pushErrorScope("validation");
    const module = this.dev.createShaderModule({ code, label });
    const messages = (await module.getCompilationInfo()).messages
      .filter((m) => m.type !== "info")
      .map((m) => `${m.type} at ${m.lineNum}:${m.linePos}: ${m.message}`);
    let pipeline: GPUComputePipeline | undefined;
    try {
      pipeline = await this.dev.createComputePipelineAsync({
        label,
        layout: "auto",
        compute: { module, entryPoint: "main" },
      });
    } catch (e) {
      messages.push(`pipeline: ${(e as Error).message}`);
    }
    const err = await this.dev.popErrorScope();
    if (err !== null) messages.push(`validation: ${err.message}`);
    return err === null && pipeline !== undefined ? { pipeline, messages } : { messages };
  }
  bind(pipe: GPUComputePipeline, bufs: GPUBuffer[]): GPUBindGroup {
    return this.dev.createBindGroup({
      layout: pipe.getBindGroupLayout(0),
      entries: bufs.map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
  }
  encodeDispatches(
    pass: GPUComputePassEncoder,
    pipe: GPUComputePipeline,
    bg: GPUBindGroup,
    grid: [number, number],
    reps: number,
  ): void {
    pass.setPipeline(pipe);
    pass.setBindGroup(0, bg);
    for (let i = 0; i < reps; i++) pass.dispatchWorkgroups(grid[0], grid[1]);
  }
  async run(pipe: GPUComputePipeline, bufs: GPUBuffer[], grid: [number, number]): Promise<void> {
    const enc = this.dev.createCommandEncoder();
    const pass = enc.beginComputePass();
    this.encodeDispatches(pass, pipe, this.bind(pipe, bufs), grid, 1);
    pass.end();
    this.dev.queue.submit([enc.finish()]);
    await this.dev.queue.onSubmittedWorkDone();
  }
  async read(src: GPUBuffer, bytes: number): Promise<ArrayBuffer> {
    const dst = this.dev.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const enc = this.dev.createCommandEncoder();
    enc.copyBufferToBuffer(src, 0, dst, 0, bytes);
    this.dev.queue.submit([enc.finish()]);
    await dst.mapAsync(GPUMapMode.READ);
    const out = dst.getMappedRange().slice(0);
    dst.destroy();
    return out;
  }
  /** random words (mode 0) or floats in [−0.5, 0.5) (mode 1), made on the GPU */
  private fillPipe?: GPUComputePipeline;
  async fill(bytes: number, mode: number, seed: number): Promise<GPUBuffer> {
    this.fillPipe ??= (await this.compile(FILL_WGSL, "fill")).pipeline!;
    const b = this.buffer(bytes);
    const groups = Math.ceil(bytes / 4 / 256);
    await this.run(
      this.fillPipe,
      [b, this.params(bytes / 4, seed, mode)],
      [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    );
    return b;
  }
  /** µs per dispatch: `reps` dispatches in one pass between two timestamps, best of three, after ~120 ms of copies */
  async time(pipe: GPUComputePipeline, bufs: GPUBuffer[], grid: [number, number]): Promise<number> {
    const bg = this.bind(pipe, bufs);
    const qs = this.dev.createQuerySet({ type: "timestamp", count: 2 });
    const res = this.dev.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
    const pass1 = async (reps: number): Promise<number> => {
      const enc = this.dev.createCommandEncoder();
      const pass = enc.beginComputePass({
        timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 },
      });
      this.encodeDispatches(pass, pipe, bg, grid, reps);
      pass.end();
      enc.resolveQuerySet(qs, 0, 2, res, 0);
      this.dev.queue.submit([enc.finish()]);
      const t = new BigUint64Array(await this.read(res, 16));
      return Number(t[1] - t[0]) / 1000 / reps;
    };
    this.warmSrc ??= this.buffer(256 << 20);
    this.warmDst ??= this.buffer(256 << 20);
    const t0 = performance.now();
    do {
      const enc = this.dev.createCommandEncoder();
      for (let i = 0; i < 10; i++) enc.copyBufferToBuffer(this.warmSrc, 0, this.warmDst, 0, 256 << 20);
      this.dev.queue.submit([enc.finish()]);
      await this.dev.queue.onSubmittedWorkDone();
    } while (performance.now() - t0 < 120);
    const reps = Math.max(3, Math.min(400, Math.round(20000 / Math.max(1, await pass1(3)))));
    let best = Infinity;
    for (let r = 0; r < 3; r++) best = Math.min(best, await pass1(reps));
    qs.destroy();
    res.destroy();
    return best;
  }
  private warmSrc?: GPUBuffer;
  private warmDst?: GPUBuffer;
}

const FILL_WGSL = /* wgsl */ `
struct Params { n: u32, seed: u32, mode: u32, _pad: u32 }
@group(0) @binding(0) var<storage, read_write> Y: array<u32>;
@group(0) @binding(1) var<uniform> p: Params;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n) { return; }
  var h = i * 0x9E3779B9u + p.seed * 0x85EBCA6Bu + 1u;
  h ^= h >> 16u; h *= 0x7FEB352Du; h ^= h >> 15u; h *= 0x846CA68Bu; h ^= h >> 16u;
  Y[i] = select(h, bitcast<u32>(f32(h & 0xffffu) / 65536.0 - 0.5), p.mode == 1u);
}`;

/** Runs kernel `k` once at M×N×K on random data and compares with the CPU: exact for i32, f32-rounding bound for pieces = 3. */
export async function check(
  g: Gpu,
  pipe: GPUComputePipeline,
  k: MmaKernel,
  M: number,
  N: number,
  K: number,
  seed: number,
): Promise<{ ok: boolean; detail: string }> {
  const A = rngI8(M * K, seed);
  const Bp: Int8Array[] = [];
  if (k.pieces === 1) Bp.push(rngI8(N * K, seed + 1));
  else {
    const raw = new Uint32Array(rngI8(N * K * 4, seed + 2).buffer);
    Bp.push(...splitThree(Int32Array.from(raw, (w) => (w & 0x3fffff) - 2 ** 21)));
  }
  const Bcat = new Int8Array(k.pieces * N * K);
  Bp.forEach((b, i) => Bcat.set(b, i * N * K));
  const S = Float32Array.from({ length: M + N }, (_, i) => 0.5 + ((i * 37) % 101) / 101);
  const out = g.buffer(M * N * 4);
  const bufs = [
    g.buffer(M * K, packI8(A)),
    g.buffer(Bcat.length, packI8(Bcat)),
    out,
    g.params(M, N, K),
    ...(k.pieces === 3 ? [g.buffer(S.byteLength, S)] : []),
  ];
  await g.run(pipe, bufs, [Math.ceil(M / rowsPerGroup(k)), N / colsPerGroup(k)]);
  const got = await g.read(out, M * N * 4);
  const refs = Bp.map((b) => gemmI8(A, b, M, N, K));
  let bad = 0;
  let first = "";
  for (let n = 0; n < N; n++)
    for (let m = 0; m < M; m++) {
      const i = n * M + m;
      let ok: boolean;
      let want: number;
      let have: number;
      if (k.pieces === 1) {
        want = refs[0][i];
        have = new Int32Array(got)[i];
        ok = want === have;
      } else {
        const sc = S[m] * S[M + n];
        want = combineThree(refs[0][i], refs[1][i], refs[2][i]) * sc;
        have = new Float32Array(got)[i];
        ok =
          Math.abs(have - want) <=
          1e-6 *
            (Math.abs(refs[0][i]) * 2 ** PIECE_SHIFT[0] +
              Math.abs(refs[1][i]) * 2 ** PIECE_SHIFT[1] +
              Math.abs(refs[2][i])) *
            sc +
            1e-6;
      }
      if (!ok && bad++ === 0) first = `first mismatch at m=${m} n=${n}: got ${have}, want ${want}`;
    }
  bufs.forEach((b) => b.destroy());
  return { ok: bad === 0, detail: bad === 0 ? "exact" : `${bad} of ${M * N} wrong; ${first}` };
}

export async function runMmaProbe(
  opts: { json?: string; quick?: boolean; dawnFlags?: string[]; log?: (s: string) => void } = {},
): Promise<ProbeReport> {
  const log = opts.log ?? ((s: string) => console.log(s));
  const rep: ProbeReport = {
    adapter: "none",
    offered: false,
    features: [],
    configs: [],
    compile: [],
    checks: [],
    timings: [],
    errors: [],
  };
  const done = (): ProbeReport => {
    if (opts.json !== undefined) writeFileSync(opts.json, JSON.stringify(rep, null, 1));
    return rep;
  };
  const gpu = await gpuEntry(opts.dawnFlags ?? ["enable-dawn-features=allow_unsafe_apis"]);
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (adapter === null) {
    rep.errors.push("no WebGPU adapter");
    log(
      "no WebGPU adapter (on a machine without a GPU: lavapipe, and XDG_RUNTIME_DIR=/tmp); subgroup matrix: not offered",
    );
    return done();
  }
  const ai = adapter.info as GPUAdapterInfo & {
    subgroupMinSize?: number;
    subgroupMaxSize?: number;
    subgroupMatrixConfigs?: readonly SgConfig[];
  };
  rep.adapter = [ai.vendor, ai.architecture, ai.device, ai.description].filter((s) => s !== "").join(" ");
  rep.features = [...adapter.features].sort();
  if (ai.subgroupMinSize !== undefined && ai.subgroupMaxSize !== undefined)
    rep.subgroupSizes = [ai.subgroupMinSize, ai.subgroupMaxSize];
  rep.offered = adapter.features.has(FEATURE);
  log(
    `adapter: ${rep.adapter}; subgroup sizes ${rep.subgroupSizes?.join("–") ?? "?"}\nfeatures: ${rep.features.join(" ")}`,
  );
  if (!rep.offered) {
    log(`subgroup matrix: not offered (the adapter lacks "${FEATURE}"); nothing to probe`);
    return done();
  }
  const readConfigs = (info: GPUAdapterInfo, where: string): void => {
    try {
      const cs = (info as GPUAdapterInfo & { subgroupMatrixConfigs?: readonly SgConfig[] }).subgroupMatrixConfigs ?? [];
      if (rep.configs.length === 0)
        rep.configs = cs.map((c) => ({
          componentType: c.componentType,
          resultComponentType: c.resultComponentType,
          M: c.M,
          N: c.N,
          K: c.K,
        }));
    } catch (e) {
      rep.errors.push(`${where}.subgroupMatrixConfigs: ${(e as Error).message}`);
    }
  };
  readConfigs(ai, "adapter.info");
  const l = adapter.limits;
  const dev = await adapter.requestDevice({
    requiredFeatures: [FEATURE, "subgroups", "timestamp-query"].filter((f) =>
      adapter.features.has(f),
    ) as GPUFeatureName[],
    requiredLimits: {
      maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
      maxBufferSize: l.maxBufferSize,
      maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
    },
  });
  dev.addEventListener("uncapturederror", (ev) =>
    rep.errors.push(`uncaptured: ${(ev as GPUUncapturedErrorEvent).error.message}`),
  );
  void dev.lost.then((i) => i.reason !== "destroyed" && rep.errors.push(`device lost: ${i.message}`));
  readConfigs(dev.adapterInfo, "device.adapterInfo");
  log(
    `subgroup matrix configs: ${rep.configs.map((c) => `${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`).join(", ") || "(none readable)"}`,
  );
  const g = new Gpu(dev);
  const tns = [16, 8].filter(
    (n) =>
      rep.configs.length === 0 ||
      rep.configs.some(
        (c) => c.componentType === "i8" && c.resultComponentType === "i32" && c.M === 16 && c.K === 32 && c.N === n,
      ),
  ) as (16 | 8)[];
  if (tns.length === 0) {
    log("no i8→i32 16×N×32 config: nothing to probe");
    return done();
  }
  const compile = async (k: MmaKernel, what: string): Promise<GPUComputePipeline | undefined> => {
    const c = await g.compile(mmaWGSL(k), what);
    rep.compile.push({
      what,
      ok: c.pipeline !== undefined,
      messages: c.messages,
      ...(c.pipeline === undefined ? { code: mmaWGSL(k) } : {}),
    });
    log(
      `compile ${what}: ${c.pipeline !== undefined ? "ok" : "FAILED"}${c.messages.length > 0 ? `\n    ${c.messages.join("\n    ")}` : ""}`,
    );
    return c.pipeline;
  };
  // 1. which load/store form compiles; 2. whether subgroup_id exists; 3. the offset/stride units (exact results)
  let base: MmaKernel = {
    syntax: "template",
    offUnit: 1,
    strideUnit: 1,
    sgid: "index",
    tn: tns[0],
    sg: 1,
    sm: 2,
    sn: 4,
    staged: false,
    pieces: 1,
  };
  const forms: MajorSyntax[] = [];
  for (const syntax of ["template", "bool"] as const)
    if ((await compile({ ...base, syntax }, `load/store form "${syntax}"`)) !== undefined) forms.push(syntax);
  if (forms.length === 0) return done();
  base = { ...base, syntax: forms[0] };
  const sgid: MmaKernel["sgid"] =
    (await compile({ ...base, sg: 4, sm: 1, sgid: "builtin" }, "@builtin(subgroup_id)")) !== undefined
      ? "builtin"
      : "index";
  let found = false;
  for (const [offUnit, strideUnit] of [
    [1, 1],
    [4, 4],
    [1, 4],
    [4, 1],
  ] as const) {
    const k = { ...base, offUnit, strideUnit };
    const pipe = await compile(k, `units offset×${offUnit} stride×${strideUnit}`);
    if (pipe === undefined) continue;
    const r = await check(g, pipe, k, 64, 64, 256, 7);
    rep.checks.push({ kernel: `${kernelName(k)} units ${offUnit}/${strideUnit}`, pieces: 1, shape: "64×64×256", ...r });
    log(`  units offset×${offUnit} stride×${strideUnit}: ${r.detail}`);
    if (r.ok) {
      base = k;
      found = true;
      break;
    }
  }
  if (!found) {
    log("no reading of the units gives the exact product: stopping before the timings");
    return done();
  }
  rep.chosen = { syntax: base.syntax, offUnit: base.offUnit, strideUnit: base.strideUnit, sgid };
  log(
    `chosen: form "${base.syntax}", offset unit ${base.offUnit}, stride unit ${base.strideUnit} (int8 per unit), subgroup index from ${sgid}`,
  );
  // 4. the kernel variants, each checked at a plain and a partial-tile shape, one and three pieces
  const variants: MmaKernel[] = [
    { ...base, sgid, sg: 1, sm: 2, sn: 4, tn: tns[0] },
    { ...base, sgid, sg: 4, sm: 1, sn: 4, tn: tns[0] },
    { ...base, sgid, sg: 4, sm: 2, sn: 4, tn: tns[0] },
    { ...base, sgid, sg: 4, sm: 1, sn: 4, tn: tns[0], staged: true },
    { ...base, sgid, sg: 4, sm: 2, sn: 4, tn: tns[0], staged: true },
    ...(tns.includes(8) ? [{ ...base, sgid, sg: 4, sm: 1, sn: 8, tn: 8 as const }] : []),
  ];
  const good: { k: MmaKernel; pipe: GPUComputePipeline }[] = [];
  for (const v of variants)
    for (const pieces of [1, 3] as const) {
      const k = { ...v, pieces };
      const pipe = await compile(k, `${kernelName(k)} ×${pieces}`);
      if (pipe === undefined) continue;
      let ok = true;
      for (const [M, N, K] of [
        [64, 64, 256],
        [224, 128, 384],
      ] as const) {
        if (!shapeFits(k, M, N, K)) continue;
        const r = await check(g, pipe, k, M, N, K, M + K);
        rep.checks.push({ kernel: kernelName(k), pieces, shape: `${M}×${N}×${K}`, ...r });
        log(`  check ${kernelName(k)} ×${pieces} at ${M}×${N}×${K}: ${r.detail}`);
        ok &&= r.ok;
      }
      if (ok) good.push({ k, pipe });
    }
  // 4b. GGUF-style weight scales: rescale after every 32 of K, or (two weight pieces) every 256; the largest staging
  // step and then the most tiles per store round that fit the device's workgroup memory
  const scaled: { k: ScaledKernel; pipe: GPUComputePipeline }[] = [];
  for (const scheme of ["per32", "per256"] as Scheme[])
    for (const sn of [4, 1]) {
      const fits = ([128, 64, 32] as const)
        .filter((stageK) => period({ scheme }) % stageK === 0)
        .flatMap((stageK) =>
          [sn, 2, 1]
            .filter((jr) => sn % jr === 0)
            .map(
              (jr): ScaledKernel => ({
                syntax: base.syntax,
                offUnit: base.offUnit,
                strideUnit: base.strideUnit,
                sgid,
                tn: tns[0],
                sg: 4,
                sm: 1,
                sn,
                scheme,
                stageK,
                jr,
              }),
            ),
        )
        .find((k) => scaledShared(k) <= dev.limits.maxComputeWorkgroupStorageSize);
      if (fits === undefined) continue;
      const c = await g.compile(scaledWGSL(fits), scaledName(fits));
      rep.compile.push({
        what: scaledName(fits),
        ok: c.pipeline !== undefined,
        messages: c.messages,
        ...(c.pipeline === undefined ? { code: scaledWGSL(fits) } : {}),
      });
      log(
        `compile ${scaledName(fits)}: ${c.pipeline !== undefined ? "ok" : "FAILED"}${c.messages.length > 0 ? `\n    ${c.messages.join("\n    ")}` : ""}`,
      );
      if (c.pipeline === undefined) continue;
      let ok = true;
      for (const [M, N, K] of [
        [64, 64, 512],
        [224, 128, 768],
      ] as const) {
        if (!scaledFits(fits, M, N, K)) continue;
        const r = await checkScaled(g, c.pipeline, fits, M, N, K, M + K);
        rep.checks.push({ kernel: scaledName(fits), pieces: 3, shape: `${M}×${N}×${K}`, ...r });
        log(`  check ${scaledName(fits)} at ${M}×${N}×${K}: ${r.detail}`);
        ok &&= r.ok;
      }
      if (ok) scaled.push({ k: fits, pipe: c.pipeline });
    }
  // 5. timings at the decode shapes (and N = 512), with a plain f32 GEMM beside them
  if (!dev.features.has("timestamp-query")) {
    log("no timestamp-query: no timings");
    return done();
  }
  const f32 = (await g.compile(F32_GEMM_WGSL, "f32 gemm")).pipeline;
  const shapes = [2816, 2048, 3648, 102400].map((M) => [M, 2048]).concat([[2048, 1408]]);
  const Ns = opts.quick === true ? [64] : [64, 512];
  const table: string[] = [];
  for (const [M, K] of shapes as [number, number][])
    for (const N of Ns) {
      const A = await g.fill(M * K, 0, 1);
      const B = await g.fill(3 * N * K, 0, 2);
      const C = g.buffer(M * N * 4);
      const S = await g.fill((M + N) * 4, 1, 3);
      const best = [Infinity, Infinity];
      const names = ["", ""];
      for (const { k, pipe } of good) {
        if (!shapeFits(k, M, N, K)) continue;
        const us = await g.time(
          pipe,
          [A, B, C, g.params(M, N, K), ...(k.pieces === 3 ? [S] : [])],
          [Math.ceil(M / rowsPerGroup(k)), N / colsPerGroup(k)],
        );
        const tops = (2 * M * N * K * k.pieces) / us / 1e6;
        rep.timings.push({ kernel: kernelName(k), pieces: k.pieces, M, N, K, us, tops });
        log(`  ${M}×${N}×${K} ${kernelName(k)} ×${k.pieces}: ${us.toFixed(2)} µs, ${tops.toFixed(1)} TOPS`);
        const slot = k.pieces === 1 ? 0 : 1;
        if (us < best[slot]) [best[slot], names[slot]] = [us, kernelName(k)];
      }
      const A2 = await g.fill(2 * M * K, 0, 6);
      const S2 = await g.fill((M * (K / 32) + N) * 4, 1, 7);
      const cols: string[] = [];
      for (const scheme of ["per32", "per256"] as Scheme[]) {
        let sb = Infinity;
        let sname = K % period({ scheme }) === 0 ? "no kernel" : `skipped: K % ${period({ scheme })} ≠ 0`;
        for (const { k, pipe } of scaled) {
          if (k.scheme !== scheme || !scaledFits(k, M, N, K)) continue;
          const us = await g.time(
            pipe,
            [A2, B, C, g.params(M, N, K), S2],
            [Math.ceil(M / scaledRows(k)), N / scaledCols(k)],
          );
          const tops = (2 * M * N * K * (scheme === "per32" ? 3 : 6)) / us / 1e6;
          rep.timings.push({ kernel: scaledName(k), pieces: 3, M, N, K, us, tops });
          log(`  ${M}×${N}×${K} ${scaledName(k)}: ${us.toFixed(2)} µs, ${tops.toFixed(1)} TOPS`);
          if (us < sb) [sb, sname] = [us, scaledName(k)];
        }
        cols.push(Number.isFinite(sb) ? `${sb.toFixed(1)} (×${(sb / best[1]).toFixed(2)}) ${sname}` : sname);
      }
      [A2, S2].forEach((b) => b.destroy());
      let f32us = NaN;
      if (f32 !== undefined) {
        const Af = await g.fill(M * K * 4, 1, 4);
        const Bf = await g.fill(N * K * 4, 1, 5);
        f32us = await g.time(f32, [Af, Bf, C, g.params(M, N, K)], [M / 64, N / 64]);
        rep.timings.push({ kernel: "f32 gemm", pieces: 1, M, N, K, us: f32us, tops: (2 * M * N * K) / f32us / 1e6 });
        Af.destroy();
        Bf.destroy();
      }
      const fl = 2 * M * N * K;
      table.push(
        `| ${M}×${N}×${K} | ${best[0].toFixed(1)} (${(fl / best[0] / 1e6).toFixed(0)}) ${names[0]} | ${best[1].toFixed(1)} (×${(best[1] / best[0]).toFixed(2)}) ${names[1]} | ${cols.join(" | ")} | ${f32us.toFixed(1)} (${(fl / f32us / 1e6).toFixed(1)}) |`,
      );
      [A, B, C, S].forEach((b) => b.destroy());
    }
  log(
    `\n| M×N×K | int8 µs (TOPS) best kernel | three pieces µs (× one) | rescale per 32 µs (× three pieces) | rescale per 256 µs (× three pieces) | plain f32 µs (TFLOP/s) |\n| --- | --- | --- | --- | --- | --- |\n${table.join("\n")}`,
  );
  if (rep.errors.length > 0) log(`errors:\n  ${rep.errors.join("\n  ")}`);
  dev.destroy();
  return done();
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const args = process.argv.slice(2);
  const json = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
  const dawn = args.includes("--dawn") ? args[args.indexOf("--dawn") + 1] : undefined;
  await runMmaProbe({
    ...(json !== undefined ? { json } : {}),
    ...(dawn !== undefined ? { dawnFlags: dawn.split(" ") } : {}),
    quick: args.includes("--quick"),
  });
  process.exit(0);
}
