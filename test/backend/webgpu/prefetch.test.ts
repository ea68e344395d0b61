// The L2 prefetch kernel reads what it promises: one word of every 32-byte sector of each buffer, to the last sector,
// each buffer by its own workgroups. Its loads are observable only through the store they decide: a workgroup whose
// OR of words equals `never` writes it to the sink, so a marked word that is read shows up there and one that is not
// (the second half of a sector) does not.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { prefetchL2 } from "../../../src/backend/webgpu/ops.js";
import { PREFETCH_SECTORS, PREFETCH_THREADS } from "../../../src/backend/webgpu/wgsl-ops.js";
import { gpuOrSkip, Rng } from "./helpers.js";

const { rt, skip } = await gpuOrSkip({});
after(() => rt?.device.destroy());

const NEVER = 0x5a5a1234;

test("prefetchL2 reads word 0 of every sector of every buffer (several buffers, odd sizes, one and many workgroups each)", { skip }, async () => {
  const rng = new Rng(4);
  const perGroup = PREFETCH_THREADS * PREFETCH_SECTORS;
  // sizes in sectors: under one workgroup, exactly one, one more, several and a ragged tail
  const sectors = [5, perGroup, perGroup + 1, 3 * perGroup + 77, 1, 2 * perGroup - 3, 13];
  const bufs = sectors.map((n) => rt!.buffer(n * 32));
  const sink = rt!.buffer(16);
  const zero = (b: GPUBuffer): void => rt!.write(b, 0, new Uint32Array(b.size / 4));
  const run = async (k: number, mark: { buf: number; word: number } | undefined): Promise<number> => {
    for (const b of bufs) zero(b);
    zero(sink);
    if (mark !== undefined) rt!.write(bufs[mark.buf]!, mark.word * 4, Uint32Array.of(NEVER));
    prefetchL2(rt!, bufs.slice(0, k), sink, NEVER);
    return new Uint32Array(await rt!.read(sink, 0, 4))[0]!;
  };
  assert.equal(await run(7, undefined), 0, "all zero: no store");
  for (let k = 1; k <= 7; k++) {
    for (let i = 0; i < k; i++) {
      const n = sectors[i]!;
      // the first, the last and a random sector's first word (8 words a sector) are read
      for (const s of [0, n - 1, rng.int(0, n)]) assert.equal(await run(k, { buf: i, word: 8 * s }), NEVER, `${k} buffers: buffer ${i}, sector ${s} of ${n}`);
      // the sector's second half is not (one word a sector brings the sector into L2)
      assert.equal(await run(k, { buf: i, word: 8 * (n - 1) + 4 }), 0, `${k} buffers: buffer ${i}, second half of sector ${n - 1}`);
    }
  }
  assert.throws(() => prefetchL2(rt!, [...bufs, bufs[0]!], sink), /at most 7 buffers/);
  for (const b of [...bufs, sink]) b.destroy();
});
