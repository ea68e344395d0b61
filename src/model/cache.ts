import { LatentError } from "../util/errors.js";
import type { ModelConfig } from "./config.js";
import type { LatentRows } from "./mla-types.js";
import type { IndexerKeys } from "./dsa.js";

/** Growable float32 rows of fixed width. */
class Rows {
  data: Float32Array;
  constructor(
    readonly width: number,
    capacity: number,
  ) {
    this.data = new Float32Array(width * capacity);
  }
  ensure(rows: number): void {
    if (rows * this.width <= this.data.length) return;
    const next = new Float32Array(Math.max(rows, (this.data.length / this.width) * 2) * this.width);
    next.set(this.data);
    this.data = next;
  }
  write(at: number, values: ArrayLike<number>): void {
    this.ensure(at + values.length / this.width);
    this.data.set(values, at * this.width);
  }
}

/**
 * What the forward pass needs from a sequence's cache: positions [0, length) of latents per layer, appended one chunk
 * at a time (every layer appends the chunk, then `advance` moves `length`). The contiguous LatentCache below and the
 * server's paged cache implement it.
 */
export interface LatentStore {
  readonly length: number;
  /** store the chunk's rows of one layer at positions [length, length + n) */
  append(layer: number, c: Float64Array, kPe: Float64Array, indexerKeys: Float64Array | undefined): void;
  /** rows of positions [0, length) of one layer (after append: including the chunk) */
  latent(layer: number, length: number): LatentRows;
  indexerKeys(layer: number, length: number): IndexerKeys;
  /** all layers have appended n positions */
  advance(n: number): void;
  /** paged stores: the page ids holding positions [0, length + reserved) in order (a GPU pipeline mirrors the pool) */
  pages?(): readonly number[];
}

/**
 * The per-sequence MLA cache: per layer and position the latent c (L) and roped k_pe (R) — 576 floats for DeepSeek —
 * plus the DSA indexer key (D_idx) for glm-dsa. Stored as float32 (llama.cpp's F32 cache).
 */
export class LatentCache implements LatentStore {
  private readonly c: Rows[];
  private readonly kPe: Rows[];
  private readonly ik: Rows[];
  /** positions whose latents every layer holds */
  length = 0;

  constructor(
    readonly config: ModelConfig,
    initialCapacity = 64,
  ) {
    const n = config.nLayer;
    this.c = Array.from({ length: n }, () => new Rows(config.kvLoraRank, initialCapacity));
    this.kPe = Array.from({ length: n }, () => new Rows(config.qkRope, initialCapacity));
    this.ik = Array.from(
      { length: n },
      () => new Rows(config.indexer?.headDim ?? 0, config.indexer ? initialCapacity : 0),
    );
  }

  /** Append a chunk's latents for one layer at positions [length, length + n). */
  append(layer: number, c: Float64Array, kPe: Float64Array, indexerKeys: Float64Array | undefined): void {
    const at = this.length;
    if (at + c.length / this.config.kvLoraRank > this.config.contextLength) {
      throw new LatentError(
        `context full: ${at + c.length / this.config.kvLoraRank} positions exceed the model's context length ${this.config.contextLength}`,
      );
    }
    this.c[layer].write(at, c);
    this.kPe[layer].write(at, kPe);
    if (indexerKeys !== undefined) this.ik[layer].write(at, indexerKeys);
  }

  latent(layer: number, length: number): LatentRows {
    return { c: this.c[layer].data, kPe: this.kPe[layer].data, length };
  }

  indexerKeys(layer: number, length: number): IndexerKeys {
    return { k: this.ik[layer].data, length };
  }

  advance(n: number): void {
    this.length += n;
  }

  /** Drop positions ≥ n (e.g. to reuse a prompt prefix). */
  truncate(n: number): void {
    if (n < 0 || n > this.length) throw new LatentError(`cannot truncate a cache of ${this.length} positions to ${n}`);
    this.length = n;
  }

  bytes(): number {
    let b = 0;
    for (const r of [...this.c, ...this.kPe, ...this.ik]) b += r.data.byteLength;
    return b;
  }
}
