/**
 * Where a GGUF's bytes come from. The parser and `GGUFFile.readBytes` read through a `ByteSource` (synchronous, random
 * access): a file on disk in Node (`source-node.ts`, the only module here that touches `node:fs`), bytes in memory, or
 * byte ranges fetched ahead of time. In a browser reads are asynchronous (a `File`/`Blob` slice, an HTTP range
 * request): an `AsyncByteSource` is turned into a `PrefetchedSource` by fetching the header prefix (grown while the
 * parser asks for more) and then each tensor's byte range — a GGUF is read lazily by range, never as one whole blob.
 *
 * This module is browser-safe: no Node-only imports.
 */
import { GGUFError } from "../util/errors.js";

/** Random-access, synchronous bytes of one GGUF shard. */
export interface ByteSource {
  /** what error messages call it: a path, a file name, a URL */
  readonly name: string;
  /** total size in bytes */
  readonly size: number;
  /**
   * Exactly `length` bytes from `offset`. The result may be a view of memory the source owns: do not write to it.
   * Throws ShortReadError when the bytes are not there (a file that shrank), NotFetchedError when a prefetched source
   * lacks the range, or another error for an I/O failure.
   */
  read(offset: number, length: number): Uint8Array;
  /** optional: read `dst.length` bytes from `offset` straight into `dst` (no intermediate buffer); same errors as read */
  readInto?(offset: number, dst: Uint8Array): void;
  /** release the handle, if any (a later read may reopen it) */
  close?(): void;
}

/** The source ends before the requested range does (a file truncated after it was opened). */
export class ShortReadError extends GGUFError {
  constructor(
    readonly source: string,
    /** first offset that could not be read */
    readonly at: number,
  ) {
    super(`${source}: unexpected end of file at offset ${at}`);
  }
}

/** A prefetched source does not hold the requested range: fetch [offset, offset + length) first. */
export class NotFetchedError extends GGUFError {
  constructor(
    readonly source: string,
    readonly offset: number,
    readonly length: number,
  ) {
    super(`${source}: bytes [${offset}, ${offset + length}) were not fetched`);
  }
}

function checkRange(name: string, size: number, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new GGUFError(`${name}: invalid read of ${length} bytes at offset ${offset}`);
  }
  if (offset + length > size) throw new ShortReadError(name, Math.max(offset, size));
}

/** A whole GGUF in memory (an ArrayBuffer from a fetch, a test fixture). Reads are views: no copy. */
export class MemorySource implements ByteSource {
  readonly size: number;
  constructor(
    readonly bytes: Uint8Array,
    readonly name = "<memory>",
  ) {
    this.size = bytes.length;
  }
  read(offset: number, length: number): Uint8Array {
    checkRange(this.name, this.size, offset, length);
    return this.bytes.subarray(offset, offset + length);
  }
}

/**
 * Some byte ranges of a larger source, fetched ahead of time: reads inside one fetched range are views, reads of
 * anything else throw NotFetchedError. Ranges are kept sorted and may not overlap.
 */
export class PrefetchedSource implements ByteSource {
  private starts: number[] = [];
  private chunks: Uint8Array[] = [];

  constructor(
    readonly name: string,
    readonly size: number,
  ) {}

  /** bytes held */
  get held(): number {
    return this.chunks.reduce((s, c) => s + c.length, 0);
  }

  /**
   * Add the bytes at [offset, offset + bytes.length). A range that overlaps ranges already held is merged with them
   * into one (the new bytes win); ranges that merely touch stay apart, so a read must fall inside one added range.
   */
  add(offset: number, bytes: Uint8Array): void {
    let start = offset;
    let end = offset + bytes.length;
    const keepS: number[] = [];
    const keepC: Uint8Array[] = [];
    const merged: { s: number; c: Uint8Array }[] = [];
    for (let i = 0; i < this.starts.length; i++) {
      const s = this.starts[i];
      const c = this.chunks[i];
      if (s + c.length <= offset || s >= offset + bytes.length) {
        keepS.push(s);
        keepC.push(c);
      } else {
        merged.push({ s, c });
        start = Math.min(start, s);
        end = Math.max(end, s + c.length);
      }
    }
    let chunk = bytes;
    if (merged.length > 0 && (start !== offset || end !== offset + bytes.length)) {
      chunk = new Uint8Array(end - start);
      for (const m of merged) chunk.set(m.c, m.s - start);
      chunk.set(bytes, offset - start);
    }
    let at = keepS.findIndex((s) => s > start);
    if (at < 0) at = keepS.length;
    keepS.splice(at, 0, start);
    keepC.splice(at, 0, chunk);
    this.starts = keepS;
    this.chunks = keepC;
  }

  /** Whether [offset, offset + length) lies inside one fetched range. */
  has(offset: number, length: number): boolean {
    return this.find(offset, length) >= 0;
  }

  private find(offset: number, length: number): number {
    let lo = 0;
    let hi = this.starts.length - 1;
    let i = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (this.starts[mid] <= offset) {
        i = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (i < 0) return -1;
    return offset + length <= this.starts[i] + this.chunks[i].length ? i : -1;
  }

  read(offset: number, length: number): Uint8Array {
    checkRange(this.name, this.size, offset, length);
    const i = this.find(offset, length);
    if (i < 0) throw new NotFetchedError(this.name, offset, length);
    const rel = offset - this.starts[i];
    return this.chunks[i].subarray(rel, rel + length);
  }
}

/** Random-access bytes that arrive asynchronously: a `Blob`/`File`, an HTTP resource read by range requests. */
export interface AsyncByteSource {
  readonly name: string;
  readonly size: number;
  /** exactly `length` bytes from `offset` */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** Bytes in memory, as an AsyncByteSource. */
export function memoryAsyncSource(bytes: Uint8Array, name = "<memory>"): AsyncByteSource {
  const m = new MemorySource(bytes, name);
  return { name, size: m.size, read: (offset, length) => Promise.resolve(m.read(offset, length)) };
}

/** A browser `File` or `Blob`, read by `slice` (only the slices asked for are read). */
export function blobSource(blob: Blob, name = blob instanceof File ? blob.name : "<blob>"): AsyncByteSource {
  return {
    name,
    size: blob.size,
    async read(offset, length) {
      checkRange(name, blob.size, offset, length);
      const buf = await blob.slice(offset, offset + length).arrayBuffer();
      if (buf.byteLength !== length) throw new ShortReadError(name, offset + buf.byteLength);
      return new Uint8Array(buf);
    },
  };
}

export interface HttpSourceOptions {
  /** fetch to use (default: the global one) */
  readonly fetch?: typeof fetch;
  /** extra request headers (an Authorization header, …) */
  readonly headers?: Readonly<Record<string, string>>;
  readonly signal?: AbortSignal;
}

/**
 * A GGUF served over HTTP(S), read with `Range` requests. The size comes from the first request (`Range: bytes=0-0`,
 * answered 206 with `Content-Range: bytes 0-0/SIZE`). A server that ignores ranges (200 with the whole body) is an
 * error: the model would be downloaded whole for every read.
 */
export async function httpSource(url: string, opts: HttpSourceOptions = {}): Promise<AsyncByteSource> {
  const f = opts.fetch ?? globalThis.fetch.bind(globalThis);
  const get = async (offset: number, length: number): Promise<Response> => {
    let res: Response;
    try {
      res = await f(url, {
        headers: { ...(opts.headers ?? {}), Range: `bytes=${offset}-${offset + length - 1}` },
        signal: opts.signal,
      });
    } catch (e) {
      throw new GGUFError(`${url}: request failed: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (res.status === 200) {
      void res.body?.cancel();
      throw new GGUFError(
        `${url}: the server ignored the Range request (200 instead of 206); it must support byte ranges`,
      );
    }
    if (res.status !== 206) {
      void res.body?.cancel();
      throw new GGUFError(`${url}: HTTP ${res.status} ${res.statusText}`.trimEnd());
    }
    return res;
  };
  const first = await get(0, 1);
  const cr = first.headers.get("content-range") ?? "";
  await first.arrayBuffer();
  const m = /^bytes\s+\d+-\d+\/(\d+)$/i.exec(cr.trim());
  if (m === null) throw new GGUFError(`${url}: no usable Content-Range in the answer to a range request (got "${cr}")`);
  const size = Number(m[1]);
  const name = url;
  return {
    name,
    size,
    async read(offset, length) {
      checkRange(name, size, offset, length);
      if (length === 0) return new Uint8Array(0);
      const res = await get(offset, length);
      const buf = new Uint8Array(await res.arrayBuffer());
      if (buf.length !== length)
        throw new GGUFError(`${url}: asked for ${length} bytes at offset ${offset}, got ${buf.length}`);
      return buf;
    },
  };
}
