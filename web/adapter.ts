// What the page makes of the browser's WebGPU adapter: a name for the header, whether it is a software rasterizer
// (SwiftShader, lavapipe/llvmpipe) and which backend to pick by default. Pure, so Node tests cover it (main.ts
// starts a Worker on import).

/** The GPUAdapterInfo fields the page reads (all optional: older browsers lack `info` or some of its fields). */
export interface AdapterFacts {
  readonly vendor?: string;
  readonly architecture?: string;
  readonly device?: string;
  readonly description?: string;
  /** GPUAdapterInfo.isFallbackAdapter (Chrome 131+), or the older GPUAdapter.isFallbackAdapter */
  readonly isFallbackAdapter?: boolean;
}

export interface AdapterVerdict {
  /** vendor, architecture, device and description that the browser reported, or "available" */
  readonly name: string;
  /** a CPU-emulated GPU: the engine's WebGPU forward pass runs far slower there than the CPU worker */
  readonly software: boolean;
  /** the backend the page selects until the user picks one */
  readonly defaultBackend: "cpu" | "webgpu";
}

// Chrome's SwiftShader reports vendor "google", architecture "swiftshader"; Mesa's lavapipe describes itself as
// "llvmpipe (LLVM …)"; softpipe and the generic "software" wording cover the rest of Mesa's and Dawn's CPU paths.
const SOFTWARE = /swiftshader|lavapipe|llvmpipe|softpipe|software/i;

/**
 * The engine's WebGPU forward pass on a software adapter against the plain kernels in the CPU worker (issue 34's
 * figure). Shown next to the adapter so a user knows why the page keeps the CPU worker.
 */
export const SOFTWARE_SLOWDOWN = "~75× slower than the CPU worker";

export function judgeAdapter(facts: AdapterFacts | undefined): AdapterVerdict {
  const parts = [facts?.vendor, facts?.architecture, facts?.device, facts?.description].filter(
    (x): x is string => x !== undefined && x !== "",
  );
  const software = facts?.isFallbackAdapter === true || parts.some((p) => SOFTWARE.test(p));
  return { name: [...new Set(parts)].join(" ") || "available", software, defaultBackend: software ? "cpu" : "webgpu" };
}
