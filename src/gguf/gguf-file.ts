/**
 * A model as one GGUF, possibly split across shards, read through ByteSources (browser-safe: no Node-only imports).
 * `file.ts` subclasses it with `GGUFFile.open(path)` for files on disk.
 */
import { GGUFError } from "../util/errors.js";
import { isGGUFArray, Metadata } from "./metadata.js";
import type { GGUFValue } from "./types.js";
import { parseShard, type GGUFShard, type ReadOptions, type TensorInfo } from "./shard.js";
import { NotFetchedError, PrefetchedSource, ShortReadError, type AsyncByteSource, type ByteSource } from "./source.js";

/** A `split.*` key of one shard as a non-negative integer, naming the shard on error. */
export function splitKey(shard: GGUFShard, key: string): number | undefined {
  try {
    return new Metadata(shard.metadata).integer(key);
  } catch (e) {
    if (e instanceof GGUFError) throw new GGUFError(`${shard.path}: ${e.message}`);
    throw e;
  }
}

function sameValue(a: GGUFValue, b: GGUFValue): boolean {
  if (isGGUFArray(a) || isGGUFArray(b)) {
    if (!isGGUFArray(a) || !isGGUFArray(b) || a.elementType !== b.elementType || a.values.length !== b.values.length)
      return false;
    return a.values.every((v, i) => sameValue(v, b.values[i]));
  }
  return a === b || (Number.isNaN(a) && Number.isNaN(b));
}

/**
 * Every key a later shard declares besides split.* (gguf-split writes none; other tools repeat the model's metadata in
 * every shard) must equal the first shard's: else the shards come from different models.
 */
function checkSameModel(first: GGUFShard, later: GGUFShard): void {
  for (const [key, entry] of later.metadata) {
    if (key.startsWith("split.") || key === "general.alignment") continue;
    const mine = first.metadata.get(key);
    if (mine === undefined) continue;
    if (!sameValue(mine.value, entry.value)) {
      throw new GGUFError(
        `${later.path}: ${key} differs from ${first.path} (${describeValue(entry.value)} vs ${describeValue(mine.value)}): the shards come from different models`,
      );
    }
  }
}

function describeValue(v: GGUFValue): string {
  if (isGGUFArray(v)) return `an array of ${v.values.length}`;
  const s = typeof v === "bigint" ? v.toString() : JSON.stringify(v);
  return s.length > 60 ? `${s.slice(0, 57)}…` : s;
}

/** Progress of GGUFFile.load: bytes fetched so far, and the total it will fetch once the headers are known. */
export interface FetchProgress {
  readonly phase: "header" | "tensors";
  readonly bytes: number;
  /** bytes it means to fetch (headers so far + all tensor data); grows while headers are read */
  readonly total: number;
}

export interface LoadOptions extends ReadOptions {
  /** first header prefix fetched per shard (default 1 MiB); it doubles while the parser needs more */
  readonly headerBytes?: number;
  /** adjacent tensors are fetched together in requests of up to this many bytes (default 16 MiB) */
  readonly requestBytes?: number;
  /** requests in flight at once (default 4) */
  readonly concurrency?: number;
  readonly onFetch?: (p: FetchProgress) => void;
}

/**
 * A model as one GGUF, possibly split across shards: metadata from the first shard, one name → (shard, offset) index.
 * Tensor data is read on demand through each shard's ByteSource; nothing but headers is read at open.
 */
export class GGUFFile {
  protected constructor(
    readonly shards: readonly GGUFShard[],
    readonly metadata: Metadata,
    readonly tensors: ReadonlyMap<string, TensorInfo>,
    private readonly sources: readonly ByteSource[],
  ) {}

  get paths(): string[] {
    return this.shards.map((s) => s.path);
  }

  /**
   * A model from the sources of all its shards (one source for a single-file model), in any order: split models are
   * put in `split.no` order. Parses every header now; tensor data is read through the sources later.
   */
  static fromSources(sources: readonly ByteSource[], opts: ReadOptions = {}): GGUFFile {
    if (sources.length === 0) throw new GGUFError("no GGUF source given");
    const shards = sources.map((s) => parseShard(s, opts));
    return GGUFFile.fromParsed(shards, sources);
  }

  /** Parsed shards and their sources (same order) → a model; split shards are sorted by `split.no` and checked. */
  protected static fromParsed(shards: readonly GGUFShard[], sources: readonly ByteSource[]): GGUFFile {
    const count = splitKey(shards[0], "split.count");
    if (count === undefined || count <= 1) {
      if (shards.length > 1)
        throw new GGUFError(
          `${shards[0].path}: ${shards.length} files given, but it is not a split model (no split.count > 1)`,
        );
      return GGUFFile.assemble(shards, sources);
    }
    if (shards.length !== count) {
      throw new GGUFError(
        `${shards[0].path}: split.count = ${count}, but ${shards.length} shard${shards.length === 1 ? " was" : "s were"} given`,
      );
    }
    const order = shards.map((s, i) => ({ no: splitKey(s, "split.no") ?? -1, i })).sort((a, b) => a.no - b.no);
    return GGUFFile.assemble(
      order.map((o) => shards[o.i]),
      order.map((o) => sources[o.i]),
    );
  }

  /** Shards in order (shard i has split.no = i) → one tensor index; every split key is checked. */
  protected static assemble(shards: readonly GGUFShard[], sources: readonly ByteSource[]): GGUFFile {
    const count = shards.length;
    const tensors = new Map<string, TensorInfo>();
    const total = count > 1 ? splitKey(shards[0], "split.tensors.count") : undefined;
    shards.forEach((shard, i) => {
      if (count > 1) {
        const no = splitKey(shard, "split.no");
        if (no !== i)
          throw new GGUFError(`${shard.path}: split.no = ${String(no)}, expected ${i} (shard ${i + 1} of ${count})`);
        const c = splitKey(shard, "split.count");
        if (c !== count) throw new GGUFError(`${shard.path}: split.count = ${String(c)}, expected ${count}`);
        const t = splitKey(shard, "split.tensors.count");
        if (t !== total)
          throw new GGUFError(
            `${shard.path}: split.tensors.count = ${String(t)}, but the first shard says ${String(total)}`,
          );
        if (i > 0) checkSameModel(shards[0], shard);
      }
      for (const t of shard.tensors) {
        const prev = tensors.get(t.name);
        if (prev !== undefined) {
          throw new GGUFError(`tensor "${t.name}" appears in both ${shards[prev.shard].path} and ${shard.path}`);
        }
        tensors.set(t.name, { ...t, shard: i });
      }
    });
    if (total !== undefined && total !== tensors.size) {
      throw new GGUFError(
        `${shards[0].path}: split.tensors.count = ${total}, but the ${count} shards hold ${tensors.size} tensors`,
      );
    }
    return new this(shards, new Metadata(shards[0].metadata), tensors, sources);
  }

  /**
   * Fetch a model from asynchronous sources (browser `File`s, HTTP range requests): each shard's header prefix
   * (grown until it parses), then every tensor's byte range, adjacent tensors coalesced into requests. The result
   * holds exactly those ranges in memory and reads them synchronously like any other GGUFFile.
   */
  static async load(sources: readonly AsyncByteSource[], opts: LoadOptions = {}): Promise<GGUFFile> {
    if (sources.length === 0) throw new GGUFError("no GGUF source given");
    let fetched = 0;
    let total = 0;
    const report = (phase: FetchProgress["phase"]): void => opts.onFetch?.({ phase, bytes: fetched, total });
    const pre = sources.map((s) => new PrefetchedSource(s.name, s.size));
    const shards: GGUFShard[] = [];
    for (let k = 0; k < sources.length; k++) {
      const src = sources[k];
      const p = pre[k];
      let have = Math.min(src.size, Math.max(64, opts.headerBytes ?? 1 << 20));
      p.add(0, await src.read(0, have));
      fetched += have;
      total += have;
      report("header");
      for (;;) {
        try {
          shards.push(parseShard(p, opts));
          break;
        } catch (e) {
          if (!(e instanceof NotFetchedError) || have >= src.size) throw e;
          const want = Math.min(src.size, Math.max(have * 2, e.offset + e.length));
          const grown = new Uint8Array(want);
          grown.set(p.read(0, have));
          grown.set(await src.read(have, want - have), have);
          p.add(0, grown);
          fetched += want - have;
          total += want - have;
          have = want;
          report("header");
        }
      }
    }
    // tensor ranges not yet held, per shard, coalesced
    const maxReq = Math.max(1, opts.requestBytes ?? 16 << 20);
    const requests: { k: number; start: number; end: number }[] = [];
    shards.forEach((shard, k) => {
      const ranges = shard.tensors
        .filter((t) => t.nbytes > 0 && !pre[k].has(t.offset, t.nbytes))
        .map((t) => ({ start: t.offset, end: t.offset + t.nbytes }))
        .sort((a, b) => a.start - b.start);
      let cur: { k: number; start: number; end: number } | undefined;
      for (const r of ranges) {
        if (cur !== undefined && r.start - cur.end <= 4096 && r.end - cur.start <= maxReq)
          cur.end = Math.max(cur.end, r.end);
        else requests.push((cur = { k, start: r.start, end: r.end }));
      }
    });
    for (const r of requests) total += r.end - r.start;
    report("tensors");
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < requests.length) {
        const r = requests[next++];
        pre[r.k].add(r.start, await sources[r.k].read(r.start, r.end - r.start));
        fetched += r.end - r.start;
        report("tensors");
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.concurrency ?? 4, requests.length)) }, worker));
    return GGUFFile.fromParsed(shards, pre);
  }

  tensor(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (t === undefined) throw new GGUFError(`tensor "${name}" not found in ${this.shards[0].path}`);
    return t;
  }

  /** Read `length` bytes of a tensor starting at byte `start` of its data (may be a view: do not write to it). */
  readBytes(info: TensorInfo, start = 0, length = info.nbytes - start): Uint8Array {
    if (
      !Number.isInteger(start) ||
      !Number.isInteger(length) ||
      start < 0 ||
      length < 0 ||
      start + length > info.nbytes
    ) {
      throw new GGUFError(
        `read of bytes [${start}, ${start + length}) outside tensor "${info.name}" (${info.nbytes} bytes)`,
      );
    }
    return this.guarded(info, () => this.sources[info.shard].read(info.offset + start, length));
  }

  /** The whole tensor's bytes written into `dst` (exactly info.nbytes long): no intermediate copy when the source can. */
  readBytesInto(info: TensorInfo, dst: Uint8Array): void {
    if (dst.length !== info.nbytes)
      throw new GGUFError(`tensor "${info.name}": destination of ${dst.length} bytes for ${info.nbytes}`);
    this.readRangeInto(info, 0, dst);
  }

  /** Bytes [start, start + dst.length) of a tensor's data written into `dst` (one expert of a stacked tensor). */
  readRangeInto(info: TensorInfo, start: number, dst: Uint8Array): void {
    if (!Number.isInteger(start) || start < 0 || start + dst.length > info.nbytes)
      throw new GGUFError(
        `read of bytes [${start}, ${start + dst.length}) outside tensor "${info.name}" (${info.nbytes} bytes)`,
      );
    const src = this.sources[info.shard];
    const at = info.offset + start;
    this.guarded(info, () => (src.readInto !== undefined ? src.readInto(at, dst) : dst.set(src.read(at, dst.length))));
  }

  private guarded<T>(info: TensorInfo, read: () => T): T {
    const path = this.shards[info.shard].path;
    try {
      return read();
    } catch (e) {
      if (e instanceof ShortReadError)
        throw new GGUFError(`${path}: unexpected end of file reading tensor "${info.name}"`);
      if (e instanceof NotFetchedError) throw new GGUFError(`${path}: tensor "${info.name}" was not fetched`);
      if (e instanceof GGUFError) throw e;
      throw new GGUFError(`${path}: read error in tensor "${info.name}": ${(e as Error).message}`);
    }
  }

  close(): void {
    for (const s of this.sources) s.close?.();
  }
}
