// latent doctor on the bundled trained model: healthy; a copy with one corrupted layer is not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, openSync, closeSync, writeSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { doctorMain } from "../../src/cli/doctor.js";
import { DEMO_MODEL } from "../../src/cli/demo.js";

async function doctor(path: string): Promise<{ code: number; out: string }> {
  let out = "";
  const code = await doctorMain([path], { out: (t) => void (out += t), err: (t) => void (out += t), tty: false });
  return { code, out };
}

test("latent doctor: the bundled model is healthy; with layer 2's kv_a projection corrupted (NaN) it is not", async () => {
  const ok = await doctor(DEMO_MODEL);
  assert.equal(ok.code, 0, ok.out);
  assert.match(ok.out, /verdict: healthy/);

  const dir = mkdtempSync(join(tmpdir(), "latent-demo-doctor-"));
  try {
    const bad = join(dir, "corrupt.gguf");
    copyFileSync(DEMO_MODEL, bad);
    const f = GGUFFile.open(bad);
    const info = f.tensor("blk.2.attn_kv_a_mqa.weight");
    const at = info.offset; // absolute offset in the file
    const nan = Buffer.alloc(256);
    for (let i = 0; i < nan.length; i += 2) nan.writeUInt16LE(0x7e00, i); // F16 NaN
    const fd = openSync(bad, "r+");
    try {
      writeSync(fd, nan, 0, nan.length, at + 1024);
    } finally {
      closeSync(fd);
    }
    const r = await doctor(bad);
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /blk\.2\.attn_kv_a_mqa\.weight/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
