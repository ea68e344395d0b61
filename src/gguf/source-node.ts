/** A GGUF shard on disk as a ByteSource (Node only: the browser bundle never imports this module). */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { GGUFError } from "../util/errors.js";
import { ShortReadError, type ByteSource } from "./source.js";

/** Most bytes one read takes: Node refuses a length past 2^31 − 1 (a V3 or GLM-5 expert tensor is larger). */
export const READ_CHUNK = 1 << 30;

/** Fill `dst` from file position `offset` in reads of at most `chunk` bytes; ShortReadError when the file ends first. */
export function readFully(fd: number, dst: Uint8Array, offset: number, name: string, chunk = READ_CHUNK): void {
  let got = 0;
  while (got < dst.length) {
    const r = readSync(fd, dst, got, Math.min(dst.length - got, chunk), offset + got);
    if (r === 0) throw new ShortReadError(name, offset + got);
    got += r;
  }
}

/** A regular file read with positional reads; the descriptor is opened at construction and reopened after close(). */
export class FileSource implements ByteSource {
  private fd: number | undefined;
  readonly size: number;

  /** Throws GGUFError "<path>: no such file", "<path>: not a regular file", "cannot open <path>: …". */
  constructor(readonly name: string) {
    let fd: number;
    try {
      fd = openSync(name, "r");
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") throw new GGUFError(`${name}: no such file`);
      throw new GGUFError(`cannot open ${name}: ${(e as Error).message}`);
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw new GGUFError(`${name}: not a regular file`);
      this.size = st.size;
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    this.fd = fd;
  }

  private handle(): number {
    if (this.fd === undefined) {
      try {
        this.fd = openSync(this.name, "r");
      } catch (e) {
        throw new GGUFError(`cannot reopen ${this.name}: ${(e as Error).message}`);
      }
    }
    return this.fd;
  }

  /** A fresh buffer (the caller may keep it); ShortReadError when the file ends first (it shrank since the open). */
  read(offset: number, length: number): Uint8Array {
    const out = new Uint8Array(length);
    this.readInto(offset, out);
    return out;
  }

  readInto(offset: number, dst: Uint8Array): void {
    readFully(this.handle(), dst, offset, this.name);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
