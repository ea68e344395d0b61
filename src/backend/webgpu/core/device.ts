/// <reference types="@webgpu/types" />
/**
 * WebGPU device acquisition behind one small interface: in Node the `webgpu` npm package (Google's Dawn), in a
 * browser `navigator.gpu`. Nothing is downloaded at run time; a machine without an adapter gets a clear error.
 */
import { LatentError } from "../../../util/errors.js";

/** An adapter's name from its info ("unknown adapter" when it gives none). */
export function adapterName(info: GPUAdapterInfo): string {
  const name = [info.vendor, info.architecture, info.device, info.description]
    .filter((s) => s !== undefined && s !== "")
    .join(" ");
  return name === "" ? "unknown adapter" : name;
}

/** What the kernels ask of a device: the adapter's full storage/workgroup limits and the optional features they use. */
export function deviceDescriptor(adapter: GPUAdapter): GPUDeviceDescriptor {
  const l = adapter.limits;
  return {
    requiredFeatures: ["subgroups", "timestamp-query"].filter((f) => adapter.features.has(f)) as GPUFeatureName[],
    requiredLimits: {
      maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
      maxBufferSize: l.maxBufferSize,
      maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: l.maxComputeWorkgroupSizeX,
      maxStorageBuffersPerShaderStage: l.maxStorageBuffersPerShaderStage,
    },
  };
}

/** No WebGPU adapter (or device) could be created. */
export class NoGpuError extends LatentError {}

export interface GpuDeviceInfo {
  readonly device: GPUDevice;
  /** the GPU entry point; held so that Dawn's instance outlives the device (collecting it crashes Dawn) */
  readonly gpu: GPU;
  readonly adapterInfo: string;
  readonly features: ReadonlySet<string>;
  /** the subgroup size when the device has `subgroups` and one fixed size (min = max), else undefined */
  readonly subgroupSize?: number;
  readonly limits: {
    readonly maxStorageBufferBindingSize: number;
    readonly maxBufferSize: number;
    readonly maxComputeWorkgroupStorageSize: number;
    readonly maxComputeWorkgroupsPerDimension: number;
    readonly maxStorageBuffersPerShaderStage: number;
    /** (absent in hand-made infos: 256, WebGPU's default) */
    readonly maxComputeInvocationsPerWorkgroup?: number;
  };
}

export interface GpuDeviceOptions {
  /** Dawn toggles for `create()` in Node, e.g. "enable-dawn-features=allow_unsafe_apis" */
  readonly dawnFlags?: readonly string[];
  readonly powerPreference?: GPUPowerPreference;
}

interface NavigatorLike {
  readonly gpu?: GPU;
}

async function gpuEntry(opts: GpuDeviceOptions): Promise<GPU> {
  const nav = (globalThis as { navigator?: NavigatorLike }).navigator;
  if (nav?.gpu !== undefined) return nav.gpu;
  if (typeof process === "undefined" || process.versions?.node === undefined) {
    throw new NoGpuError("this browser exposes no navigator.gpu (WebGPU is off or unsupported)");
  }
  let mod: { create(flags: string[]): GPU; globals: object };
  try {
    // a computed specifier: bundlers leave Dawn (Node-only) out of a browser build, where navigator.gpu answers first
    const dawn = "webgpu";
    mod = (await import(/* @vite-ignore */ dawn)) as unknown as { create(flags: string[]): GPU; globals: object };
  } catch (e) {
    throw new NoGpuError(`cannot load the "webgpu" package (Dawn for Node): ${(e as Error).message}`);
  }
  // GPUBufferUsage, GPUMapMode, GPUShaderStage … as globals, as in a browser
  for (const [k, v] of Object.entries(mod.globals)) {
    if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
  }
  const gpu = mod.create([...(opts.dawnFlags ?? [])]);
  keepAlive.push(gpu);
  return gpu;
}

/** Dawn instances created by this process: never collected (see GpuDeviceInfo.gpu). */
const keepAlive: GPU[] = [];

/** A new device with the adapter's full storage limits and the optional features the kernels can use. */
export async function requestGpuDevice(opts: GpuDeviceOptions = {}): Promise<GpuDeviceInfo> {
  const gpu = await gpuEntry(opts);
  const adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference ?? "high-performance" });
  if (adapter === null) {
    throw new NoGpuError(
      "no WebGPU adapter: on a machine without a GPU install Mesa 25's lavapipe (bash scripts/install-lavapipe.sh) and export XDG_RUNTIME_DIR=/tmp",
    );
  }
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice(deviceDescriptor(adapter));
  } catch (e) {
    throw new NoGpuError(`the WebGPU adapter refused a device: ${(e as Error).message}`);
  }
  const sg = adapter.info as GPUAdapterInfo & { subgroupMinSize?: number; subgroupMaxSize?: number };
  const features = new Set([...device.features]);
  const fixedSg =
    features.has("subgroups") && sg.subgroupMinSize !== undefined && sg.subgroupMinSize === sg.subgroupMaxSize
      ? sg.subgroupMinSize
      : undefined;
  return {
    device,
    gpu,
    adapterInfo: adapterName(adapter.info),
    features,
    ...(fixedSg !== undefined ? { subgroupSize: fixedSg } : {}),
    limits: {
      maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
      maxBufferSize: device.limits.maxBufferSize,
      maxComputeWorkgroupStorageSize: device.limits.maxComputeWorkgroupStorageSize,
      maxComputeWorkgroupsPerDimension: device.limits.maxComputeWorkgroupsPerDimension,
      maxStorageBuffersPerShaderStage: device.limits.maxStorageBuffersPerShaderStage,
      maxComputeInvocationsPerWorkgroup: device.limits.maxComputeInvocationsPerWorkgroup,
    },
  };
}
