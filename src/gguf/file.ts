import { closeSync, existsSync, openSync, readSync } from "node:fs";
import { basename } from "node:path";
import { GGUFError } from "../util/errors.js";
import { Metadata } from "./metadata.js";
import { readShard, type GGUFShard, type ReadOptions, type TensorInfo } from "./reader.js";

/** A `split.*` key of one shard as a non-negative integer, naming the shard on error. */
function splitKey(shard: GGUFShard, key: string): number | undefined {
  try {
    return new Metadata(shard.metadata).integer(key);
  } catch (e) {
    if (e instanceof GGUFError) throw new GGUFError(`${shard.path}: ${e.message}`);
    throw e;
  }
}

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** `prefix-00001-of-00003.gguf` → prefix, 1-based index, count; undefined when the name has no split suffix. */
export function parseSplitPath(path: string): { prefix: string; index: number; count: number } | undefined {
  const m = SPLIT_RE.exec(path);
  if (m === null) return undefined;
  return { prefix: m[1]!, index: Number(m[2]), count: Number(m[3]) };
}

export function splitPath(prefix: string, index: number, count: number): string {
  return `${prefix}-${String(index).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`;
}

/**
 * A model as one GGUF, possibly split across shards: metadata from the first shard, one name → (shard, offset) index.
 * Tensor data is read on demand; nothing but headers is read at open.
 */
export class GGUFFile {
  private readonly fds: (number | undefined)[];

  private constructor(
    readonly shards: readonly GGUFShard[],
    readonly metadata: Metadata,
    readonly tensors: ReadonlyMap<string, TensorInfo>,
  ) {
    this.fds = shards.map(() => undefined);
  }

  get paths(): string[] {
    return this.shards.map((s) => s.path);
  }

  /**
   * Open a .gguf file, or any shard of a split model (its siblings are found from the name, as llama.cpp does).
   * A file without `split.count` (or with 1) is a single-file model whatever its name.
   */
  static open(path: string, opts: ReadOptions = {}): GGUFFile {
    const first = readShard(path, opts);
    const count = splitKey(first, "split.count");
    if (count === undefined || count <= 1) return GGUFFile.assemble([first]);
    const fromName = parseSplitPath(path);
    if (fromName === undefined) {
      throw new GGUFError(`${path}: split.count = ${count}, but the name does not follow <prefix>-NNNNN-of-NNNNN.gguf, so its sibling shards cannot be found`);
    }
    if (fromName.count !== count) {
      throw new GGUFError(`${path}: the name says ${fromName.count} shards, split.count says ${count}`);
    }
    const shards: GGUFShard[] = [];
    for (let i = 1; i <= count; i++) {
      const p = splitPath(fromName.prefix, i, count);
      if (i === fromName.index) {
        shards.push(first);
        continue;
      }
      if (!existsSync(p)) throw new GGUFError(`missing shard ${i} of ${count}: ${p} does not exist (opened ${basename(path)})`);
      shards.push(readShard(p, opts));
    }
    return GGUFFile.assemble(shards);
  }

  private static assemble(shards: GGUFShard[]): GGUFFile {
    const count = shards.length;
    const tensors = new Map<string, TensorInfo>();
    const total = count > 1 ? splitKey(shards[0]!, "split.tensors.count") : undefined;
    shards.forEach((shard, i) => {
      if (count > 1) {
        const no = splitKey(shard, "split.no");
        if (no !== i) throw new GGUFError(`${shard.path}: split.no = ${String(no)}, expected ${i} (shard ${i + 1} of ${count})`);
        const c = splitKey(shard, "split.count");
        if (c !== count) throw new GGUFError(`${shard.path}: split.count = ${String(c)}, expected ${count}`);
        const t = splitKey(shard, "split.tensors.count");
        if (t !== total) throw new GGUFError(`${shard.path}: split.tensors.count = ${String(t)}, but the first shard says ${String(total)}`);
      }
      for (const t of shard.tensors) {
        const prev = tensors.get(t.name);
        if (prev !== undefined) {
          throw new GGUFError(`tensor "${t.name}" appears in both ${shards[prev.shard]!.path} and ${shard.path}`);
        }
        tensors.set(t.name, { ...t, shard: i });
      }
    });
    if (total !== undefined && total !== tensors.size) {
      throw new GGUFError(`${shards[0]!.path}: split.tensors.count = ${total}, but the ${count} shards hold ${tensors.size} tensors`);
    }
    return new GGUFFile(shards, new Metadata(shards[0]!.metadata), tensors);
  }

  tensor(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (t === undefined) throw new GGUFError(`tensor "${name}" not found in ${this.shards[0]!.path}`);
    return t;
  }

  /** Read `length` bytes of a tensor starting at byte `start` of its data. */
  readBytes(info: TensorInfo, start = 0, length = info.nbytes - start): Uint8Array {
    if (!Number.isInteger(start) || !Number.isInteger(length) || start < 0 || length < 0 || start + length > info.nbytes) {
      throw new GGUFError(`read of bytes [${start}, ${start + length}) outside tensor "${info.name}" (${info.nbytes} bytes)`);
    }
    const fd = this.fd(info.shard);
    const out = new Uint8Array(length);
    let got = 0;
    while (got < length) {
      let r: number;
      try {
        r = readSync(fd, out, got, length - got, info.offset + start + got);
      } catch (e) {
        throw new GGUFError(`${this.shards[info.shard]!.path}: read error in tensor "${info.name}": ${(e as Error).message}`);
      }
      if (r === 0) throw new GGUFError(`${this.shards[info.shard]!.path}: unexpected end of file reading tensor "${info.name}"`);
      got += r;
    }
    return out;
  }

  private fd(shard: number): number {
    let fd = this.fds[shard];
    if (fd === undefined) {
      try {
        fd = openSync(this.shards[shard]!.path, "r");
      } catch (e) {
        throw new GGUFError(`cannot reopen ${this.shards[shard]!.path}: ${(e as Error).message}`);
      }
      this.fds[shard] = fd;
    }
    return fd;
  }

  close(): void {
    for (let i = 0; i < this.fds.length; i++) {
      const fd = this.fds[i];
      if (fd !== undefined) closeSync(fd);
      this.fds[i] = undefined;
    }
  }
}
