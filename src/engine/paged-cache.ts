import { createHash } from "node:crypto";
import { LatentError } from "../util/errors.js";
import type { ModelConfig } from "../model/config.js";
import type { LatentRows } from "../model/mla.js";
import type { IndexerKeys } from "../model/dsa.js";
import type { LatentStore } from "../model/cache.js";

export const DEFAULT_PAGE_SIZE = 16;

export interface PagePoolOptions {
  /** positions per page (default 16) */
  readonly pageSize?: number;
  /** pages in the pool: the KV capacity in positions is numPages × pageSize */
  readonly numPages: number;
}

export interface PagePoolStats {
  readonly pageSize: number;
  readonly totalPages: number;
  /** pages held by at least one sequence */
  readonly pagesInUse: number;
  /** pages nobody holds that keep a cached prefix (evictable, LRU) */
  readonly pagesCached: number;
  /** pages on the free list (never written or evicted) */
  readonly pagesFree: number;
  /** full pages found in the prefix cache when a sequence started */
  readonly prefixHits: number;
  /** full prompt pages looked up in the prefix cache */
  readonly prefixQueries: number;
  /** cached pages evicted to make room */
  readonly evictions: number;
}

/** Chained content hash of a full page: the hash of the previous page and the page's token ids. */
export function pageHash(prev: string, tokens: readonly number[]): string {
  const h = createHash("sha256");
  h.update(prev);
  h.update(new Uint8Array(Int32Array.from(tokens).buffer));
  return h.digest("base64");
}

/** Chained hashes of the full pages of `tokens` (page i covers tokens [i·P, (i+1)·P)). */
export function pageHashes(
  tokens: readonly number[],
  pageSize: number,
  pages = Math.floor(tokens.length / pageSize),
): string[] {
  const out: string[] = [];
  let prev = "";
  for (let i = 0; i < pages; i++) {
    prev = pageHash(prev, tokens.slice(i * pageSize, (i + 1) * pageSize));
    out.push(prev);
  }
  return out;
}

/**
 * A shared pool of fixed-size pages of latent rows: per layer and page, `pageSize` rows of c (L floats), k_pe (R)
 * and, for glm-dsa, the DSA indexer key (D_idx). Sequences (PagedSequence) hold pages through a block table.
 *
 * Pages are reference counted. A full page may be published under the chained hash of every token up to its end:
 * a later sequence whose prompt starts with the same tokens takes it instead of recomputing (prefix caching). When
 * the last holder lets go, a published page stays in the cache (LRU order) until the free list runs dry and it is
 * evicted; an unpublished page goes straight back to the free list.
 */
export class PagePool {
  readonly pageSize: number;
  readonly numPages: number;
  readonly L: number;
  readonly R: number;
  readonly D: number;
  private readonly c: Float32Array[];
  private readonly kPe: Float32Array[];
  private readonly ik: Float32Array[];
  private readonly refs: Int32Array;
  private readonly hashOf: (string | undefined)[];
  private readonly byHash = new Map<string, number>();
  /** unreferenced published pages, least recently used first (Map keeps insertion order) */
  private readonly lru = new Map<number, true>();
  private readonly free: number[] = [];
  private inUse = 0;
  private hits = 0;
  private queries = 0;
  private evicted = 0;
  /** scratch rows that latent()/indexerKeys() gather a sequence's pages into (reused; valid until the next call) */
  private scratchC = new Float32Array(0);
  private scratchKPe = new Float32Array(0);
  private scratchIk = new Float32Array(0);

  constructor(
    readonly config: ModelConfig,
    opts: PagePoolOptions,
  ) {
    const P = opts.pageSize ?? DEFAULT_PAGE_SIZE;
    if (!Number.isInteger(P) || P < 1) throw new LatentError(`page size must be an integer ≥ 1, got ${P}`);
    if (!Number.isInteger(opts.numPages) || opts.numPages < 1)
      throw new LatentError(`the page pool needs at least one page, got ${opts.numPages}`);
    this.pageSize = P;
    this.numPages = opts.numPages;
    this.L = config.kvLoraRank;
    this.R = config.qkRope;
    this.D = config.indexer?.headDim ?? 0;
    const rows = this.numPages * P;
    this.c = Array.from({ length: config.nLayer }, () => new Float32Array(rows * this.L));
    this.kPe = Array.from({ length: config.nLayer }, () => new Float32Array(rows * this.R));
    this.ik = Array.from({ length: config.nLayer }, () => new Float32Array(rows * this.D));
    this.refs = new Int32Array(this.numPages);
    this.hashOf = new Array<string | undefined>(this.numPages).fill(undefined);
    for (let p = this.numPages - 1; p >= 0; p--) this.free.push(p);
  }

  /** Bytes of latent storage the pool holds. */
  bytes(): number {
    let b = 0;
    for (const a of [...this.c, ...this.kPe, ...this.ik]) b += a.byteLength;
    return b;
  }

  /** Pages that could be handed out now: free plus evictable cached ones. */
  get available(): number {
    return this.free.length + this.lru.size;
  }

  stats(): PagePoolStats {
    return {
      pageSize: this.pageSize,
      totalPages: this.numPages,
      pagesInUse: this.inUse,
      pagesCached: this.lru.size,
      pagesFree: this.free.length,
      prefixHits: this.hits,
      prefixQueries: this.queries,
      evictions: this.evicted,
    };
  }

  /** A fresh private page (refcount 1), evicting the least recently used cached page if needed; undefined when none. */
  allocate(): number | undefined {
    let p = this.free.pop();
    if (p === undefined) {
      const first = this.lru.keys().next();
      if (first.done === true) return undefined;
      p = first.value;
      this.lru.delete(p);
      this.byHash.delete(this.hashOf[p]!);
      this.hashOf[p] = undefined;
      this.evicted++;
    }
    this.refs[p] = 1;
    this.inUse++;
    return p;
  }

  /** Take a reference to the published page with this hash, if cached. */
  lookup(hash: string): number | undefined {
    const p = this.byHash.get(hash);
    if (p === undefined) return undefined;
    this.retain(p);
    return p;
  }

  /** Count prefix-cache lookups (for the stats): `queried` full pages looked up, `hit` of them found. */
  countPrefix(queried: number, hit: number): void {
    this.queries += queried;
    this.hits += hit;
  }

  retain(p: number): void {
    if (this.refs[p] === 0) {
      this.lru.delete(p);
      this.inUse++;
    }
    this.refs[p]++;
  }

  release(p: number): void {
    const r = this.refs[p];
    if (r <= 0) throw new LatentError(`page ${p} released more often than taken`);
    this.refs[p] = r - 1;
    if (r > 1) return;
    this.inUse--;
    if (this.hashOf[p] !== undefined) this.lru.set(p, true);
    else this.free.push(p);
  }

  /** Publish a full page under its chained hash (no-op when that hash already names another page). */
  publish(p: number, hash: string): void {
    if (this.hashOf[p] !== undefined || this.byHash.has(hash)) return;
    this.hashOf[p] = hash;
    this.byHash.set(hash, p);
  }

  refCount(p: number): number {
    return this.refs[p];
  }

  /** Write rows [from, from + n) of a chunk for one layer at in-page slots of the given pages. */
  write(
    layer: number,
    page: number,
    slot: number,
    c: Float64Array,
    kPe: Float64Array,
    ik: Float64Array | undefined,
    row: number,
    n: number,
  ): void {
    const at = page * this.pageSize + slot;
    this.c[layer].set(c.subarray(row * this.L, (row + n) * this.L), at * this.L);
    this.kPe[layer].set(kPe.subarray(row * this.R, (row + n) * this.R), at * this.R);
    if (ik !== undefined && this.D > 0) this.ik[layer].set(ik.subarray(row * this.D, (row + n) * this.D), at * this.D);
  }

  /** Gather the rows of positions [0, length) through a block table into the shared scratch buffers. */
  gather(layer: number, table: readonly number[], length: number): LatentRows {
    if (this.scratchC.length < length * this.L) this.scratchC = new Float32Array(grow(length) * this.L);
    if (this.scratchKPe.length < length * this.R) this.scratchKPe = new Float32Array(grow(length) * this.R);
    copyRows(this.c[layer], this.scratchC, table, length, this.pageSize, this.L);
    copyRows(this.kPe[layer], this.scratchKPe, table, length, this.pageSize, this.R);
    return { c: this.scratchC, kPe: this.scratchKPe, length };
  }

  gatherIndexerKeys(layer: number, table: readonly number[], length: number): IndexerKeys {
    if (this.scratchIk.length < length * this.D) this.scratchIk = new Float32Array(grow(length) * this.D);
    copyRows(this.ik[layer], this.scratchIk, table, length, this.pageSize, this.D);
    return { k: this.scratchIk, length };
  }
}

function grow(n: number): number {
  return Math.max(64, 2 ** Math.ceil(Math.log2(n)));
}

function copyRows(
  src: Float32Array,
  dst: Float32Array,
  table: readonly number[],
  length: number,
  P: number,
  W: number,
): void {
  if (W === 0) return;
  for (let i = 0, pos = 0; pos < length; i++, pos += P) {
    const n = Math.min(P, length - pos);
    const from = table[i] * P * W;
    dst.set(src.subarray(from, from + n * W), pos * W);
  }
}

/**
 * One sequence's view of the pool: a block table of pages covering positions [0, length). The scheduler reserves
 * pages for a chunk before the forward pass (`reserve`), passes the sequence as the chunk's LatentStore, and
 * releases everything when the sequence ends or is preempted (`free`).
 */
export class PagedSequence implements LatentStore {
  /** page of each block of pageSize positions */
  readonly table: number[] = [];
  length = 0;
  /** token ids of positions [0, length + pending) — what the chained page hashes are made of */
  private readonly tokens: number[] = [];
  /** chained hashes of the full pages published or adopted so far */
  private readonly hashes: string[] = [];
  private freed = false;
  /** full pages looked up / found by adoptPrefix (the caller counts them in the pool's stats once it keeps them) */
  prefixLookup = { queried: 0, hit: 0 };

  constructor(readonly pool: PagePool) {}

  /** Positions the block table can hold without new pages. */
  get capacity(): number {
    return this.table.length * this.pool.pageSize;
  }

  /**
   * Start from the longest cached prefix of `tokens` in whole pages, keeping at least `keepLast` tokens to compute
   * (the last prompt token must run to give logits). Only for an empty sequence. Returns the positions taken.
   */
  adoptPrefix(tokens: readonly number[], keepLast = 1): number {
    if (this.length !== 0 || this.table.length !== 0) throw new LatentError("adoptPrefix needs an empty sequence");
    const P = this.pool.pageSize;
    const maxPages = Math.floor(Math.max(0, tokens.length - keepLast) / P);
    let prev = "";
    let hit = 0;
    for (let i = 0; i < maxPages; i++) {
      const h = pageHash(prev, tokens.slice(i * P, (i + 1) * P));
      const p = this.pool.lookup(h);
      if (p === undefined) break;
      this.table.push(p);
      this.hashes.push(h);
      prev = h;
      hit++;
    }
    this.prefixLookup = { queried: maxPages, hit };
    this.length = hit * P;
    for (let i = 0; i < this.length; i++) this.tokens.push(tokens[i]);
    return this.length;
  }

  /**
   * Make room for `tokens` at positions [length, length + n): allocate the pages missing (evicting cached ones).
   * All or nothing: false (and no page taken) when the pool cannot supply them.
   */
  reserve(tokens: readonly number[]): boolean {
    if (this.freed) throw new LatentError("the sequence's pages were freed");
    const P = this.pool.pageSize;
    const need = Math.ceil((this.length + tokens.length) / P) - this.table.length;
    if (need > this.pool.available) return false;
    for (let i = 0; i < need; i++) this.table.push(this.pool.allocate()!);
    this.tokens.length = this.length;
    for (const t of tokens) this.tokens.push(t);
    return true;
  }

  /** Pages `reserve` would take for `n` more positions. */
  pagesNeeded(n: number): number {
    return Math.max(0, Math.ceil((this.length + n) / this.pool.pageSize) - this.table.length);
  }

  /**
   * Make room for `steps` chained decode positions whose inputs after `first` are not known yet (chosen on the
   * device): pages whose ids are unknown are not published until `record` names them. All or nothing, as `reserve`.
   */
  reserveChain(first: number, steps: number): boolean {
    if (this.pagesNeeded(steps) > this.pool.available) return false;
    this.reserve([first]);
    for (let i = this.pagesNeeded(steps); i > 0; i--) this.table.push(this.pool.allocate()!);
    return true;
  }

  /** The ids fed at the positions after those already known (a chain's inputs): publish the pages they complete. */
  record(tokens: readonly number[]): void {
    if (this.tokens.length + tokens.length > this.length)
      throw new LatentError(`paged cache: ${tokens.length} ids recorded past position ${this.length}`);
    for (const t of tokens) this.tokens.push(t);
    this.publishFull();
  }

  append(layer: number, c: Float64Array, kPe: Float64Array, indexerKeys: Float64Array | undefined): void {
    const n = c.length / this.pool.L;
    if (this.length + n > this.capacity)
      throw new LatentError(
        `paged cache: ${n} positions appended at ${this.length} but only ${this.capacity} reserved`,
      );
    const P = this.pool.pageSize;
    for (let row = 0; row < n; ) {
      const pos = this.length + row;
      const slot = pos % P;
      const take = Math.min(P - slot, n - row);
      const page = this.table[Math.floor(pos / P)];
      if (this.pool.refCount(page) !== 1) throw new LatentError(`paged cache: writing into shared page ${page}`);
      this.pool.write(layer, page, slot, c, kPe, indexerKeys, row, take);
      row += take;
    }
  }

  latent(layer: number, length: number): LatentRows {
    return this.pool.gather(layer, this.table, length);
  }

  indexerKeys(layer: number, length: number): IndexerKeys {
    return this.pool.gatherIndexerKeys(layer, this.table, length);
  }

  /** The page ids of this sequence, in position order (reserved ones included). */
  pages(): readonly number[] {
    return this.table.slice();
  }

  /** All layers hold n more positions: publish the pages this filled. */
  advance(n: number): void {
    this.length += n;
    this.publishFull();
  }

  /** Publish the full pages whose ids are all known (a chain's are not until `record`). */
  private publishFull(): void {
    const P = this.pool.pageSize;
    const full = Math.floor(Math.min(this.length, this.tokens.length) / P);
    for (let i = this.hashes.length; i < full; i++) {
      const h = pageHash(this.hashes[i - 1] ?? "", this.tokens.slice(i * P, (i + 1) * P));
      this.hashes.push(h);
      this.pool.publish(this.table[i], h);
    }
  }

  /** Give every page back (published ones stay cached until evicted). Idempotent. */
  free(): void {
    if (this.freed) return;
    this.freed = true;
    for (const p of this.table) this.pool.release(p);
    this.table.length = 0;
    this.length = 0;
  }
}
