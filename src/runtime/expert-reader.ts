/**
 * Expert reads on a reader thread (ExpertReader for model/expert-store.ts): the forward posts a request's reads and
 * goes on with the products of the experts it already has; `wait` blocks on an Atomics counter only for what is not
 * read yet. Slots must be SharedArrayBuffer memory (the cpu backend's arenas, plainSlots); any other destination is
 * read on the calling thread. A failed read is redone on the calling thread, which throws the file's own error.
 */
import { Worker } from "node:worker_threads";
import type { GGUFFile } from "../gguf/gguf-file.js";
import { syncReader, type ExpertRead, type ExpertReader } from "../model/expert-store.js";

const DONE = 0;
const FAILED = 1;

const READER_SOURCE = String.raw`
const { parentPort, workerData } = require("node:worker_threads");
const fs = require("node:fs");
const { paths, ctl } = workerData;
const C = new Int32Array(ctl);
const fds = new Map();
parentPort.on("message", (m) => {
  if (m === "close") {
    for (const fd of fds.values()) fs.closeSync(fd);
    parentPort.close();
    return;
  }
  try {
    for (const r of m) {
      let fd = fds.get(r.shard);
      if (fd === undefined) fds.set(r.shard, (fd = fs.openSync(paths[r.shard], "r")));
      const dst = new Uint8Array(r.buffer, r.byteOffset, r.length);
      for (let got = 0; got < r.length; ) {
        const n = fs.readSync(fd, dst, got, Math.min(r.length - got, 1 << 30), r.offset + got);
        if (n === 0) throw new Error("short read");
        got += n;
      }
    }
  } catch {
    Atomics.store(C, ${FAILED}, 1);
  }
  Atomics.add(C, ${DONE}, 1);
  Atomics.notify(C, ${DONE});
});
`;

export class ThreadReader implements ExpertReader {
  private readonly ctl = new Int32Array(new SharedArrayBuffer(8));
  private readonly worker: Worker;
  private readonly direct: ExpertReader;
  private issued = 0;

  constructor(file: GGUFFile) {
    this.direct = syncReader(file);
    this.worker = new Worker(READER_SOURCE, {
      eval: true,
      execArgv: [],
      workerData: { paths: file.shards.map((s) => s.path), ctl: this.ctl.buffer },
    });
    this.worker.unref();
  }

  start(reads: readonly ExpertRead[]): () => void {
    if (reads.length === 0) return () => {};
    if (reads.some((r) => !(r.dst.buffer instanceof SharedArrayBuffer))) return this.direct.start(reads);
    const ticket = ++this.issued;
    this.worker.postMessage(
      reads.map((r) => ({
        shard: r.info.shard,
        offset: r.info.offset + r.start,
        buffer: r.dst.buffer,
        byteOffset: r.dst.byteOffset,
        length: r.dst.length,
      })),
    );
    return () => {
      for (;;) {
        const d = Atomics.load(this.ctl, DONE);
        if (d >= ticket) break;
        Atomics.wait(this.ctl, DONE, d, 1000);
      }
      if (Atomics.exchange(this.ctl, FAILED, 0) !== 0) this.direct.start(reads); // the file's own error, or a retry
    };
  }

  close(): void {
    this.worker.postMessage("close");
  }
}
