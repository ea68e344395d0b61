/**
 * The fused GPU pipeline for a CLI command (`run`, `serve`): opened when `--backend webgpu|auto` and the model allow it,
 * or the backend the command loads with instead. For auto, no GPU, a software adapter or a model the GPU cannot load
 * all mean "cpu" — decided here once, so the ordinary load does not probe the GPU again.
 */
import { existsSync } from "node:fs";
import { GGUFFile } from "../gguf/file.js";
import { parseConfig, type ModelConfig } from "../model/config.js";
import { isSoftwareAdapter, type BackendChoice } from "../runtime/load.js";
import { FusedGpuModel, fusedUnsupported, NoGpuError, type FusedOptions } from "../backend/webgpu/index.js";
import { UsageError } from "../util/errors.js";
import { printable } from "../util/printable.js";
import { loadBar, positionsBar, type CliIO } from "./common.js";

export type FusedOpen =
  | { readonly fused: FusedGpuModel; readonly file: GGUFFile; readonly config: ModelConfig }
  | { readonly fused: undefined; readonly backend: BackendChoice };

/**
 * `options` sizes the pipeline for this command once the model's config (and metadata) are known; `onLoaded` is told
 * the fraction of the weights on the GPU (`serve`'s /health reports it while loading).
 */
export function openFusedForCli(
  path: string,
  backend: "webgpu" | "auto",
  io: CliIO,
  options: (config: ModelConfig, file: GGUFFile) => FusedOptions,
  onLoaded?: (fraction: number) => void,
): FusedOpen {
  if (!existsSync(path)) throw new UsageError(`model file not found: ${path}`);
  const file = GGUFFile.open(path);
  file.close(); // the worker reads the weights; metadata and tensor infos stay in memory
  const config = parseConfig(file.metadata, file.tensors.get("token_embd.weight")?.ne[1]);
  const why = fusedUnsupported(config);
  if (why !== undefined) {
    if (backend === "webgpu") io.err(`fused pipeline: ${why}; running the matrix products on the GPU instead\n`);
    return { fused: undefined, backend };
  }
  let fused: FusedGpuModel;
  try {
    fused = new FusedGpuModel(config, options(config, file));
  } catch (e) {
    if (e instanceof NoGpuError && backend === "auto") return { fused: undefined, backend: "cpu" };
    throw e;
  }
  if (backend === "auto" && isSoftwareAdapter(fused.adapter)) {
    void fused.close();
    return { fused: undefined, backend: "cpu" };
  }
  if (io.tty) io.err(`loading ${path} for ${fused.adapter}…\n`);
  const bar = loadBar(io);
  const compileBar = positionsBar(io, "compiling GPU kernels", "kernels");
  let compiling = false;
  try {
    fused.load(path, (done, total, phase) => {
      if (phase === "load") {
        onLoaded?.(total > 0 ? done / total : 0);
        return bar.update(done, total);
      }
      if (!compiling) bar.stop();
      compiling = true;
      compileBar.update(done, total);
    });
  } catch (e) {
    void fused.close();
    if (backend === "webgpu") throw e;
    // auto: a model the GPU cannot take (e.g. a weight type without a WGSL kernel) runs on the CPU instead
    io.err(`${printable((e as Error).message)}; using the cpu backend\n`);
    return { fused: undefined, backend: "cpu" };
  } finally {
    if (!compiling) bar.stop();
    compileBar.stop();
  }
  return { fused, file, config: fused.config };
}
