/**
 * GGUF header reading. The parser itself lives in `shard.ts` (browser-safe, over any ByteSource); this module adds
 * `readShard(path)` for a file on disk (Node).
 */
import { FileSource } from "./source-node.js";
import { parseShard, type GGUFShard, type ReadOptions } from "./shard.js";
import { Metadata } from "./metadata.js";

export * from "./shard.js";

/** Parse the header of one .gguf file without reading tensor data. */
export function readShard(path: string, opts: ReadOptions = {}): GGUFShard {
  const source = new FileSource(path);
  try {
    return parseShard(source, opts);
  } finally {
    source.close();
  }
}

export { Metadata };
