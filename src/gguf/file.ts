import { existsSync } from "node:fs";
import { basename } from "node:path";
import { GGUFError } from "../util/errors.js";
import { GGUFFile as SourcedGGUFFile, splitKey } from "./gguf-file.js";
import { FileSource } from "./source-node.js";
import { parseShard, type GGUFShard, type ReadOptions } from "./shard.js";

export type { FetchProgress, LoadOptions } from "./gguf-file.js";

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** `prefix-00001-of-00003.gguf` → prefix, 1-based index, count; undefined when the name has no split suffix. */
export function parseSplitPath(path: string): { prefix: string; index: number; count: number } | undefined {
  const m = SPLIT_RE.exec(path);
  if (m === null) return undefined;
  return { prefix: m[1], index: Number(m[2]), count: Number(m[3]) };
}

export function splitPath(prefix: string, index: number, count: number): string {
  return `${prefix}-${String(index).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`;
}

/** Parse one shard on disk; the file is closed again (reopened on the first tensor read). */
function openShard(path: string, opts: ReadOptions): { shard: GGUFShard; source: FileSource } {
  const source = new FileSource(path);
  try {
    return { shard: parseShard(source, opts), source };
  } finally {
    source.close();
  }
}

/**
 * A model as one GGUF, possibly split across shards: metadata from the first shard, one name → (shard, offset) index.
 * Tensor data is read on demand; nothing but headers is read at open. This is the Node face of the browser-safe
 * class in gguf-file.ts (`fromSources`, `load`), adding `open(path)` for files on disk.
 */
export class GGUFFile extends SourcedGGUFFile {
  /**
   * Open a .gguf file, or any shard of a split model (its siblings are found from the name, as llama.cpp does).
   * A file without `split.count` (or with 1) is a single-file model whatever its name.
   */
  static open(path: string, opts: ReadOptions = {}): GGUFFile {
    const first = openShard(path, opts);
    const count = splitKey(first.shard, "split.count");
    if (count === undefined || count <= 1) return GGUFFile.assemble([first.shard], [first.source]);
    const fromName = parseSplitPath(path);
    if (fromName === undefined) {
      throw new GGUFError(
        `${path}: split.count = ${count}, but the name does not follow <prefix>-NNNNN-of-NNNNN.gguf, so its sibling shards cannot be found`,
      );
    }
    if (fromName.count !== count) {
      throw new GGUFError(`${path}: the name says ${fromName.count} shards, split.count says ${count}`);
    }
    const shards: GGUFShard[] = [];
    const sources: FileSource[] = [];
    for (let i = 1; i <= count; i++) {
      const p = splitPath(fromName.prefix, i, count);
      if (i === fromName.index) {
        shards.push(first.shard);
        sources.push(first.source);
        continue;
      }
      if (!existsSync(p))
        throw new GGUFError(`missing shard ${i} of ${count}: ${p} does not exist (opened ${basename(path)})`);
      const s = openShard(p, opts);
      shards.push(s.shard);
      sources.push(s.source);
    }
    return GGUFFile.assemble(shards, sources);
  }
}
