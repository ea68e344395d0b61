/**
 * Which backend `--backend` means on this machine, and why, said before the model loads: "webgpu: NVIDIA H200",
 * "cpu: no WebGPU adapter".
 *
 * `webgpu` (Dawn for Node) is an optional dependency: the CPU path needs none of it, so a missing package makes `auto`
 * pick cpu and makes `--backend webgpu` fail with one line naming the install command.
 *
 * For `auto` the adapter is probed in a child process: Dawn writes warnings straight to the process's stderr when it
 * enumerates adapters (a software Vulkan adapter's reduced limits, a missing ICD), which no Node code can intercept.
 * In a child they are captured and dropped, and a machine without a GPU never loads Dawn into the server at all.
 */
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { LatentError } from "../util/errors.js";
import { isSoftwareAdapter, type BackendChoice } from "./load.js";

/** `--backend webgpu` without the optional `webgpu` package installed. */
export class WebgpuMissingError extends LatentError {}

export interface BackendDecision {
  /** what to load with: "webgpu" only where a hardware adapter was found (auto) or asked for */
  readonly backend: "cpu" | "reference" | "webgpu";
  /** one line for the startup log: the backend, a colon, why */
  readonly reason: string;
}

/** What the probe of the adapter found: its name, or why there is none. */
export type AdapterProbe = { readonly adapter: string; readonly details?: string } | { readonly none: string };

/** The places where the machine is asked (tests replace them to simulate a missing package or another GPU). */
export interface BackendSeams {
  /** the `webgpu` package's entry file, or undefined when it is not installed */
  readonly resolveWebgpu?: () => string | undefined;
  /** the first adapter WebGPU offers, given the package's entry file */
  readonly probeAdapter?: (entry: string) => AdapterProbe;
}

export const WEBGPU_INSTALL_HINT = 'the webgpu backend needs the optional "webgpu" package: npm install webgpu';

/**
 * How this process finds the package and probes the adapter. Tests replace its members (and restore them) to run the
 * CLI as on a machine without the package; decideBackend's `seams` argument overrides them per call.
 */
export const webgpuProbe: { resolveWebgpu: () => string | undefined; probeAdapter: (entry: string) => AdapterProbe } = {
  resolveWebgpu: resolveWebgpuPackage,
  probeAdapter: probeAdapterInChild,
};

export function decideBackend(choice: BackendChoice, seams: BackendSeams = {}): BackendDecision {
  if (choice === "cpu" || choice === "reference")
    return { backend: choice, reason: `${choice}: chosen with --backend` };
  const entry = (seams.resolveWebgpu ?? webgpuProbe.resolveWebgpu)();
  if (entry === undefined) {
    if (choice === "webgpu") throw new WebgpuMissingError(WEBGPU_INSTALL_HINT);
    return {
      backend: "cpu",
      reason: 'cpu: the optional "webgpu" package is not installed (npm install webgpu to use a GPU)',
    };
  }
  if (choice === "webgpu") return { backend: "webgpu", reason: "webgpu: chosen with --backend" };
  const found = (seams.probeAdapter ?? webgpuProbe.probeAdapter)(entry);
  if ("none" in found) return { backend: "cpu", reason: `cpu: ${found.none}` };
  if (isSoftwareAdapter(`${found.adapter} ${found.details ?? ""}`))
    return { backend: "cpu", reason: `cpu: the only WebGPU adapter is a software one (${found.adapter})` };
  return { backend: "webgpu", reason: `webgpu: ${found.adapter}` };
}

export function resolveWebgpuPackage(): string | undefined {
  try {
    return createRequire(import.meta.url).resolve("webgpu");
  } catch {
    return undefined;
  }
}

/** Ask Dawn for a high-performance adapter in a child process; its stderr (Dawn's warnings) is dropped. */
function probeAdapterInChild(entry: string): AdapterProbe {
  const script = `
const mod = await import(${JSON.stringify(pathToFileURL(entry).href)});
const gpu = mod.create([]);
const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
const info = adapter === null ? undefined : adapter.info;
const parts = info === undefined ? [] : [info.vendor, info.architecture, info.device, info.description].filter((s) => typeof s === "string" && s !== "");
const name = info !== undefined && typeof info.description === "string" && info.description !== "" ? info.description : parts.join(" ") || "unnamed adapter";
process.stdout.write(JSON.stringify(adapter === null ? { none: "no WebGPU adapter" } : { adapter: name, details: parts.join(" ") }));
process.exit(0);`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    timeout: 30_000,
    stdio: ["ignore", "pipe", "pipe"],
  });
  try {
    const parsed = JSON.parse(child.stdout) as AdapterProbe;
    if (
      ("adapter" in parsed && typeof parsed.adapter === "string") ||
      ("none" in parsed && typeof parsed.none === "string")
    )
      return parsed;
  } catch {
    // no JSON: the probe crashed or timed out (reported below)
  }
  return {
    none:
      child.error !== undefined
        ? `the WebGPU probe failed (${child.error.message})`
        : "no WebGPU adapter (the probe could not start Dawn)",
  };
}
