/**
 * The native CPU kernels (native/cpu/, a Node addon built at install by scripts/build-native.mjs): the WebAssembly
 * kernels' exact integer products and transposed f32 product for Q4_K, Q6_K, Q8_0 and Q5_0 weights and their two
 * attention kernels, compiled for the installing machine's AVX-512, with the WebAssembly kernels' results bit for bit.
 * Where the addon was not built (no compiler, a CPU without AVX-512, another architecture) or
 * `LATENT_CPU_KERNELS=wasm` is set, the backend runs WebAssembly alone.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import type { KernelExports } from "./kernel-exports.js";

/** a kernel's WebAssembly signature with the shared memory's base address first */
type WithBase<F> = F extends (...args: infer A) => infer R ? (base: number, ...args: A) => R : never;

export interface NativeKernels {
  /** level: 2 = AVX-512 + VNNI, 1 = AVX-512, 0 = built without vector kernels; usable: this CPU runs what was built */
  info(): { level: number; usable: boolean };
  /** the ggml type ids the native products take (Q4_K, Q6_K, Q8_0, Q5_0) */
  types(): number[];
  /** the address of the view's first byte (a shared WebAssembly memory's buffer) */
  base(view: Uint8Array): number;
  /** kernels.as's kernels of the same names: the same arguments (scratch offsets unused), the same result bits */
  matmul: WithBase<KernelExports["matmul"]>;
  matmulT: WithBase<KernelExports["matmulT"]>;
  attnAbsorbed: WithBase<KernelExports["attnAbsorbed"]>;
  attnPrefill: WithBase<KernelExports["attnPrefill"]>;
}

/** Which kernels run the CPU backend's exact integer products: "native" where the addon is usable, else "wasm". */
export type CpuKernels = "native" | "wasm";

/**
 * Where the build puts the addon (the package root's native/build), from src/backend/cpu or dist/backend/cpu. A
 * function, not a constant: this module is also bundled for the browser page, where nothing of node:url may run.
 */
export function nativeAddonPath(): string {
  return fileURLToPath(new URL("../../../native/build/Release/latent_cpu.node", import.meta.url));
}

let loaded: { kernels?: NativeKernels; why: string } | undefined;

/**
 * The native kernels, or undefined with the reason (`nativeUnavailableReason`): not built, not loadable, built
 * without AVX-512, this CPU lacks what was built for, or LATENT_CPU_KERNELS=wasm.
 */
export function loadNativeKernels(): NativeKernels | undefined {
  if (loaded === undefined) loaded = tryLoad();
  return loaded.kernels;
}

export function nativeUnavailableReason(): string {
  loadNativeKernels();
  return loaded?.why ?? "";
}

function tryLoad(): { kernels?: NativeKernels; why: string } {
  if (process.env.LATENT_CPU_KERNELS === "wasm") return { why: "LATENT_CPU_KERNELS=wasm" };
  const path = nativeAddonPath();
  if (!existsSync(path)) return { why: `not built (${path}; npm run build:native)` };
  try {
    const k = createRequire(import.meta.url)(path) as NativeKernels;
    const info = k.info();
    if (info.level === 0) return { why: "built without AVX-512 (the compiler or CPU of the build lacked it)" };
    if (!info.usable) return { why: "built for an instruction set this CPU lacks" };
    return { kernels: k, why: "" };
  } catch (e) {
    return { why: `cannot load ${path}: ${(e as Error).message}` };
  }
}
