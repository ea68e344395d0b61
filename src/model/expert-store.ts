/**
 * Routed experts read from the file on demand, for models larger than memory: the weights of each MoE layer's routed
 * experts stay on disk and whole experts (gate, up, down) are read into a bounded cache of slots, least recently used
 * first out, when the router has chosen them. Everything else stays resident (weights.ts).
 *
 * An expert's slice of a stacked tensor {cols, rows, E} is contiguous (expert e at e·slice), so each matrix of a
 * missing expert is one read at its own offset; the reads of one request go out in file order, through an ExpertReader:
 * here on the calling thread, or (runtime/expert-reader.ts) on a reader thread while the caller computes.
 */
import type { GGUFFile } from "../gguf/gguf-file.js";
import type { TensorInfo } from "../gguf/shard.js";
import { GGMLType } from "../gguf/types.js";
import { QMatrix } from "../tensor/qmatrix.js";
import { ModelConfigError } from "../util/errors.js";
import type { ModelConfig } from "./config.js";
import type { ExpertRegistry, ExpertRequest, ExpertTensors, StreamedExperts, SwiGLU } from "./weights.js";

/** Memory that matrix products can read: plain buffers, or the fast CPU backend's shared memory. */
export interface ExpertSlots {
  /** `bytes` fresh bytes, kept for the store's lifetime */
  alloc(bytes: number): Uint8Array;
  /** the slot is about to hold another expert: drop anything derived from its old bytes (repacked copies) */
  reuse?(slot: Uint8Array): void;
}

/** plain buffers, shared so that a reader thread can fill them */
export const plainSlots: ExpertSlots = { alloc: (bytes) => new Uint8Array(new SharedArrayBuffer(bytes)) };

/** One read: bytes [start, start + dst.length) of a tensor's data into dst. */
export interface ExpertRead {
  readonly info: TensorInfo;
  readonly start: number;
  readonly dst: Uint8Array;
}

/** How a request's reads are done. */
export interface ExpertReader {
  /** start the reads (in the order given); the function returned waits for all of them (throws when one failed) */
  start(reads: readonly ExpertRead[]): () => void;
  close?(): void;
}

/** Reads on the calling thread, at once. */
export function syncReader(file: GGUFFile): ExpertReader {
  return {
    start(reads) {
      for (const r of reads) file.readRangeInto(r.info, r.start, r.dst);
      return () => {};
    },
  };
}

/** One matrix of one expert: where it lies in the file, where it goes in a slot. */
interface MatrixPart {
  readonly info: TensorInfo;
  /** bytes of one expert's slice */
  readonly bytes: number;
  /** offset inside a slot (64-aligned) */
  readonly at: number;
  readonly cols: number;
  readonly rows: number;
}

/** A MoE layer's routed experts as parts: [gate, up, down] or, fused, [gate_up, down]. */
interface LayerParts {
  readonly parts: readonly MatrixPart[];
  readonly fused: boolean;
  readonly nFF: number;
  readonly nExperts: number;
}

export interface ExpertStoreStats {
  /** experts asked for that were in the cache */
  hits: number;
  /** experts read from the file */
  misses: number;
  /** read calls (one per matrix of a missing expert) */
  reads: number;
  bytesRead: number;
  /** wall time the caller spent blocked on reads (not hidden behind its products) */
  readMs: number;
  /** experts dropped to make room */
  evictions: number;
}

interface Entry {
  readonly slot: Uint8Array;
  readonly ffn: SwiGLU;
}

const ALIGN = 64;
const up64 = (x: number): number => Math.ceil(x / ALIGN) * ALIGN;

/** A bounded LRU cache of whole routed experts over the file's MoE layers. */
export class ExpertStore implements ExpertRegistry {
  private readonly layers = new Map<number, LayerParts>();
  private readonly cache = new Map<string, Entry>();
  private readonly free: Uint8Array[] = [];
  private made = 0;
  private slotSize = 0;
  readonly stats: ExpertStoreStats = { hits: 0, misses: 0, reads: 0, bytesRead: 0, readMs: 0, evictions: 0 };

  private pending: (() => void) | undefined;

  constructor(
    file: GGUFFile,
    /** most experts held at once (≥ 1) */
    readonly capacity: number,
    private readonly slots: ExpertSlots = plainSlots,
    private readonly reader: ExpertReader = syncReader(file),
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError(`an expert cache needs room for at least one expert, got ${capacity}`);
  }

  /** stop the reader (a thread, when it has one) */
  close(): void {
    this.reader.close?.();
  }

  /** bytes of the largest expert added so far (every slot has this size) */
  get slotBytes(): number {
    return this.slotSize;
  }

  /** experts cached now */
  get cached(): number {
    return this.cache.size;
  }

  /** Register layer `il`'s stacked expert tensors (before any acquire); returns the layer's handle. */
  addLayer(il: number, t: ExpertTensors, nExperts: number, nFF: number): StreamedExperts {
    if (this.made > 0) throw new Error("expert layers must be added before the first acquire");
    const fused = t.gateUp !== undefined;
    const infos = fused ? [t.gateUp!, t.down] : [t.gate!, t.up!, t.down];
    let at = 0;
    const parts = infos.map((info) => {
      if (info.nbytes % nExperts !== 0)
        throw new ModelConfigError(`tensor "${info.name}": ${info.nbytes} bytes do not split into ${nExperts} experts`);
      const part = { info, bytes: info.nbytes / nExperts, at, cols: info.ne[0], rows: info.ne[1] };
      at = up64(at + part.bytes);
      return part;
    });
    this.slotSize = Math.max(this.slotSize, at);
    this.layers.set(il, { parts, fused, nFF, nExperts });
    return {
      capacity: this.capacity,
      isCached: (e) => this.cache.has(`${il}:${e}`),
      request: (ids) => this.request(il, ids),
    };
  }

  /** Layer `il`'s experts `ids`, all read: `request(…).wait()`. */
  acquire(il: number, ids: readonly number[]): SwiGLU[] {
    return this.request(il, ids).wait();
  }

  /**
   * Layer `il`'s experts `ids`: hits are usable at once, misses start being read (in file order) into free or least
   * recently used slots; `wait` returns all of them. A request before the previous one was waited for waits for it.
   */
  request(il: number, ids: readonly number[]): ExpertRequest {
    this.pending?.();
    const layer = this.layers.get(il);
    if (layer === undefined) throw new Error(`layer ${il} has no streamed experts`);
    if (ids.length > this.capacity)
      throw new Error(`${ids.length} experts asked for at once; the cache holds ${this.capacity}`);
    const keys = ids.map((e) => {
      if (!Number.isInteger(e) || e < 0 || e >= layer.nExperts) throw new RangeError(`no expert ${e} in layer ${il}`);
      return `${il}:${e}`;
    });
    const wanted = new Set(keys);
    if (wanted.size !== keys.length) throw new Error(`experts asked for twice: ${ids.join(", ")}`);
    const out: (SwiGLU | undefined)[] = keys.map((key) => {
      const hit = this.cache.get(key);
      if (hit === undefined) return undefined;
      this.cache.delete(key); // re-insert: Map order is recency order
      this.cache.set(key, hit);
      this.stats.hits++;
      return hit.ffn;
    });
    const reads: { info: TensorInfo; start: number; dst: Uint8Array }[] = [];
    const fills: { i: number; slot: Uint8Array }[] = [];
    out.forEach((ffn, i) => {
      if (ffn !== undefined) return;
      const slot = this.takeSlot(wanted);
      for (const p of layer.parts)
        reads.push({ info: p.info, start: ids[i] * p.bytes, dst: slot.subarray(p.at, p.at + p.bytes) });
      fills.push({ i, slot });
    });
    const cached = [...out];
    if (reads.length === 0) return { cached, wait: () => out as SwiGLU[] };
    reads.sort((a, b) => a.info.shard - b.info.shard || a.info.offset + a.start - (b.info.offset + b.start));
    for (const { i, slot } of fills) {
      const ffn = expertOf(layer, ids[i], slot);
      this.cache.set(keys[i], { slot, ffn });
      out[i] = ffn;
      this.stats.misses++;
    }
    let done = false;
    const t0 = performance.now();
    let finish: () => void;
    try {
      finish = this.reader.start(reads);
    } catch (e) {
      this.forget(fills.map(({ i }) => keys[i]));
      throw e;
    }
    this.stats.readMs += performance.now() - t0;
    const wait = (): SwiGLU[] => {
      if (!done) {
        done = true;
        this.pending = undefined;
        const t1 = performance.now();
        try {
          finish();
        } catch (e) {
          this.forget(fills.map(({ i }) => keys[i])); // their slots hold partial bytes
          throw e;
        } finally {
          this.stats.readMs += performance.now() - t1;
        }
        for (const r of reads) {
          this.stats.reads++;
          this.stats.bytesRead += r.dst.length;
        }
      }
      return out as SwiGLU[];
    };
    this.pending = wait;
    return { cached, wait };
  }

  /** Drop entries whose reads failed; their slots go back to the free list. */
  private forget(keys: readonly string[]): void {
    for (const key of keys) {
      const e = this.cache.get(key);
      if (e === undefined) continue;
      this.cache.delete(key);
      this.free.push(e.slot);
      this.stats.misses--;
    }
  }

  /** A slot for a missing expert: a free one, a new one while under capacity, else the least recently used entry's. */
  private takeSlot(wanted: ReadonlySet<string>): Uint8Array {
    let slot = this.free.pop();
    if (slot === undefined && this.made < this.capacity) {
      this.made++;
      return this.slots.alloc(this.slotSize);
    }
    if (slot === undefined) {
      for (const [key, e] of this.cache) {
        if (wanted.has(key)) continue;
        this.cache.delete(key);
        this.stats.evictions++;
        slot = e.slot;
        break;
      }
    }
    if (slot === undefined) throw new Error("expert cache: no slot to evict (more experts asked for than it holds)");
    this.slots.reuse?.(slot);
    return slot;
  }
}

function expertOf(layer: LayerParts, e: number, slot: Uint8Array): SwiGLU {
  const m = (p: MatrixPart, first: number, rows: number, role: string): QMatrix => {
    const rowBytes = p.bytes / p.rows;
    return new QMatrix(
      `${p.info.name}[${role}expert ${e}]`,
      p.info.type,
      p.cols,
      rows,
      slot.subarray(p.at + first * rowBytes, p.at + (first + rows) * rowBytes),
    );
  };
  const F = layer.nFF;
  if (layer.fused) {
    const [gu, down] = layer.parts;
    return { gate: m(gu, 0, F, "gate "), up: m(gu, F, F, "up "), down: m(down, 0, down.rows, "") };
  }
  const [gate, up, down] = layer.parts;
  return { gate: m(gate, 0, gate.rows, ""), up: m(up, 0, up.rows, ""), down: m(down, 0, down.rows, "") };
}

/** How a file's bytes split between the routed experts and everything else (what streaming keeps resident). */
export interface ExpertFootprint {
  readonly totalBytes: number;
  /** bytes of the routed experts' stacked tensors */
  readonly expertBytes: number;
  /** everything else: attention, dense FFNs, shared experts, router, norms, embeddings, output */
  readonly residentBytes: number;
  /** bytes of one expert of the largest layer (a cache slot) */
  readonly slotBytes: number;
  /** of which Q6_K (the fast CPU backend keeps a repacked copy, 276/210 as large, for one-token products) */
  readonly slotQ6KBytes: number;
  /** routed experts in the file (MoE layers × experts) */
  readonly experts: number;
}

const BLOCK = /^blk\.(\d+)\./;
const EXPERT_TENSOR = /^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_exps\.weight$/;

/** The loaded bytes by role, from tensor infos alone (nothing is read); layers past the main ones (MTP) are not loaded. */
export function expertFootprint(file: GGUFFile, c: ModelConfig): ExpertFootprint {
  let totalBytes = 0;
  let expertBytes = 0;
  const slot = new Map<number, { bytes: number; q6k: number }>();
  for (const info of file.tensors.values()) {
    const layer = BLOCK.exec(info.name);
    if (layer !== null && Number(layer[1]) >= c.nLayer) continue; // MTP layers are never loaded
    totalBytes += info.nbytes;
    const m = EXPERT_TENSOR.exec(info.name);
    if (m === null || c.nExpert === 0) continue;
    expertBytes += info.nbytes;
    const each = info.nbytes / c.nExpert;
    const s = slot.get(Number(m[1])) ?? { bytes: 0, q6k: 0 };
    s.bytes += up64(each);
    if (info.type === GGMLType.Q6_K) s.q6k += each;
    slot.set(Number(m[1]), s);
  }
  let slotBytes = 0;
  let slotQ6KBytes = 0;
  for (const s of slot.values()) {
    slotBytes = Math.max(slotBytes, s.bytes);
    slotQ6KBytes = Math.max(slotQ6KBytes, s.q6k);
  }
  return {
    totalBytes,
    expertBytes,
    residentBytes: totalBytes - expertBytes,
    slotBytes,
    slotQ6KBytes,
    experts: slot.size * c.nExpert,
  };
}
