// A synthesized tiny model on the fused WebGPU pipeline over GPU caches that mirror a page pool: what the scheduler's
// and the server's fused-pipeline tests start from.
import type { LoadedModel } from "../../src/runtime/load.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { FusedGpuModel } from "../../src/backend/webgpu/index.js";
import { CASES, synthModel } from "./synth.js";

export interface PagedFused {
  readonly synth: { readonly path: string; cleanup(): void };
  readonly loaded: LoadedModel;
  readonly tok: Tokenizer;
  readonly fused: FusedGpuModel;
  readonly pageSize: number;
  readonly numPages: number;
}

/** CASES[0] synthesized with `seed`, loaded (CPU reference too) and on the fused pipeline: `slots` × 48 positions, steps of ≤ 8 tokens, `numPages` pages of 4. */
export function pagedFusedModel(seed: number, slots: number, numPages: number): PagedFused {
  const synth = synthModel(CASES[0], seed);
  const loaded = loadModel(synth.path);
  const tok = Tokenizer.fromMetadata(loaded.file.metadata);
  const pageSize = 4;
  const fused = new FusedGpuModel(loaded.config, { slots, context: 48, maxTokens: 8, pages: { pageSize, numPages } });
  try {
    fused.load(synth.path);
  } catch (e) {
    void fused.close();
    synth.cleanup();
    throw e;
  }
  return { synth, loaded, tok, fused, pageSize, numPages };
}
