/**
 * `FusedGpuModel`: the fused WebGPU pipeline (GpuModel: every layer of a step in one recorded, replayed pass) behind
 * the engine's synchronous forward(tokens, cache, opts), so `generate` — and `latent run --backend webgpu` — drive it
 * like any model. The device, the weights and the latent cache live in a worker thread that loads the model from its
 * file itself (the caller keeps only the config); each forward call blocks until the worker has the step's logits.
 * One sequence (GPU cache slot 0): a forward on a new cache object starts that sequence over at position 0.
 */
import type { ModelConfig } from "../../model/config.js";
import type { LatentStore } from "../../engine/latent-cache.js";
import { LatentError } from "../../util/errors.js";
import { BlockingWorker, newChannel, type BlockingChannel } from "./blocking-worker.js";
import { NoGpuError } from "./device.js";

export type FusedRequest =
  | { op: "device" }
  | { op: "load"; path: string; context: number; maxTokens: number }
  | { op: "logits"; buffer: SharedArrayBuffer }
  | { op: "step"; tokens: number[]; pos0: number; all: boolean }
  | { op: "close" };

export interface FusedInit {
  readonly channel: BlockingChannel;
  readonly logits: SharedArrayBuffer;
  readonly checkWrites: boolean;
}

export interface FusedOptions {
  /** positions of the GPU latent cache (the sequence's whole length) */
  readonly context: number;
  /** most tokens in one step (prefill chunk) */
  readonly maxTokens: number;
  readonly checkWrites?: boolean;
  /** ms to wait for one answer (loading a large model counts as one; default 10 min) */
  readonly timeoutMs?: number;
}

/** Why a model cannot take the fused pipeline (undefined: it can). */
export function fusedUnsupported(config: ModelConfig): string | undefined {
  if (config.arch !== "deepseek2") return `${config.arch} models are not wired into the fused pipeline yet`;
  if (config.indexer !== undefined) return "DSA (sparse attention) is not wired into the fused pipeline yet";
  if (config.faults !== undefined) return "the fused pipeline does not implement the test-only fault hooks";
  return undefined;
}

export class FusedGpuModel {
  readonly config: ModelConfig;
  /** the adapter's name */
  readonly adapter: string;
  private readonly worker: BlockingWorker<FusedRequest>;
  private logits: Float32Array;
  private readonly positions = new WeakMap<LatentStore, number>();
  private loaded = false;

  /** Start the worker and its device (no weights yet: see load). NoGpuError when there is no adapter. */
  constructor(config: ModelConfig, private readonly opts: FusedOptions) {
    const why = fusedUnsupported(config);
    if (why !== undefined) throw new LatentError(why);
    this.config = { ...config, contextLength: Math.min(config.contextLength, opts.context) };
    const logits = new SharedArrayBuffer(config.nVocab * 4);
    this.logits = new Float32Array(logits);
    const init: Omit<FusedInit, "channel"> = { logits, checkWrites: opts.checkWrites === true };
    this.worker = new BlockingWorker<FusedRequest>("fused-worker", newChannel(), init, opts.timeoutMs ?? 600_000);
    try {
      this.adapter = this.worker.call({ op: "device" });
    } catch (e) {
      this.worker.terminate();
      throw e instanceof LatentError ? new NoGpuError(e.message) : e;
    }
  }

  /** Load the model's weights from `path` in the worker and upload them (blocks until they are on the GPU). */
  load(path: string): void {
    this.worker.call({ op: "load", path, context: this.config.contextLength, maxTokens: this.opts.maxTokens });
    this.loaded = true;
  }

  /** The engine's forward pass: prefill/decode steps of the sequence whose cache is `cache` (positions tracked here). */
  forward(tokens: readonly number[], cache: LatentStore | undefined, opts: { readonly path: string; readonly logits: "all" | "last" }): Float32Array {
    if (!this.loaded) throw new LatentError("FusedGpuModel: load() the weights first");
    if (cache === undefined || opts.path === "reference") throw new LatentError("the fused WebGPU pipeline runs the cached prefill/decode paths, not the reference path");
    if (tokens.length === 0) return new Float32Array(0);
    const pos0 = this.positions.get(cache) ?? 0;
    if (pos0 + tokens.length > this.config.contextLength) {
      throw new LatentError(`context full: ${pos0 + tokens.length} positions exceed the GPU cache's ${this.config.contextLength}`);
    }
    const all = opts.logits === "all";
    const rows = all ? tokens.length : 1;
    const V = this.config.nVocab;
    if (rows * V > this.logits.length) {
      const buffer = new SharedArrayBuffer(rows * V * 4);
      this.logits = new Float32Array(buffer);
      this.worker.post({ op: "logits", buffer });
    }
    this.worker.call({ op: "step", tokens: [...tokens], pos0, all });
    this.positions.set(cache, pos0 + tokens.length);
    return this.logits.slice(0, rows * V);
  }

  /** Drain the worker, release the device, end the thread. */
  close(): Promise<number> {
    return this.worker.close({ op: "close" });
  }
}
