/**
 * The WebGPU backend's public face: what the library, the runtime's loader, the CLI and the browser page use. Kernels,
 * the fused graph's parts and the tuning's details stay behind it (tests and benches import them directly).
 */
export {
  adapterName,
  deviceDescriptor,
  NoGpuError,
  requestGpuDevice,
  type GpuDeviceInfo,
  type GpuDeviceOptions,
} from "./core/device.js";
export { GPU_ACTIVATIONS, GpuRuntime, type GpuActivations, type RuntimeOptions } from "./core/runtime.js";
export type { KernelTuning } from "./core/tuning.js";
export { GpuModel } from "./graph/gpu-model.js";
export {
  FusedGpuModel,
  fusedUnsupported,
  type FusedOptions,
  type GpuHostStats,
  type WarmStats,
} from "./engine/fused.js";
export { WebGPUKernels } from "./engine/kernels.js";
