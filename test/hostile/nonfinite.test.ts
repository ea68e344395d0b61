// NaN/±Inf weights are refused at load, naming the tensor (or loaded with a warning when the caller allows them).
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { allTypes, typeName, typeTraits } from "../../src/gguf/types.js";
import { canDequantize, canQuantize, dequantize, quantize } from "../../src/quant/index.js";
import { f16ScaleOffsets, findNonFinite } from "../../src/model/nonfinite.js";
import { loadModel } from "../../src/runtime/load.js";
import { GGUFError } from "../../src/util/errors.js";
import { find, rewriteGGUF, setValues, values } from "../helpers/gguf-rewrite.js";
import { tempDir } from "../gguf/helpers.js";

const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const tmp = tempDir("latent-hostile-nonfinite-");
after(tmp.cleanup);

function randomValues(n: number, seed: number): Float32Array {
  let s = seed;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1103515245 + 12345) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2;
  });
}

describe("findNonFinite", () => {
  it("finds a NaN or Inf wherever the decoder would produce one, in every decodable type", () => {
    const n = 512;
    let checked = 0;
    for (const type of allTypes()) {
      if (!canDequantize(type)) continue;
      const { typeSize, blockSize } = typeTraits(type)!;
      const scales = f16ScaleOffsets(type);
      let clean: Uint8Array;
      if (canQuantize(type)) clean = quantize(type, randomValues(n, type + 1), n);
      else if (scales !== undefined) {
        // random blocks with every scale the table names set to 1.0: finite exactly when the table is right
        clean = Uint8Array.from(randomValues((n / blockSize) * typeSize, type + 7), (x) =>
          Math.floor((x + 1) * 127.99),
        );
        for (let o = 0; o < clean.length; o += typeSize) for (const s of scales) clean.set([0x00, 0x3c], o + s);
      } else continue;
      assert.ok(dequantize(type, clean, n).every(Number.isFinite), `${typeName(type)}: clean data decodes non-finite`);
      assert.equal(findNonFinite(type, clean, n), undefined, `${typeName(type)}: clean data flagged`);
      // Corrupt each byte of the second block (or element) in turn: the scan must flag exactly the corruptions that
      // make the dequantized values non-finite.
      for (let at = typeSize; at < 2 * typeSize; at++) {
        for (const pair of [
          [0x00, 0x7e],
          [0x00, 0x7c],
          [0xff, 0xff],
          [0x80, 0x7f],
        ]) {
          const bad = clean.slice();
          bad[at] = pair[0];
          if (at + 1 < bad.length) bad[at + 1] = pair[1];
          const decoded = dequantize(type, bad, n);
          const nonFinite = decoded.some((x) => !Number.isFinite(x));
          const found = findNonFinite(type, bad, n);
          assert.equal(
            found !== undefined,
            nonFinite,
            `${typeName(type)}: bytes ${pair.join(",")} at ${at}: decoder non-finite ${nonFinite}, scan ${JSON.stringify(found)}`,
          );
          if (found !== undefined) checked++;
        }
      }
    }
    assert.ok(checked > 20, `only ${checked} corruptions produced non-finite values`);
  });
});

describe("load-time scan", { timeout: 30_000 }, () => {
  const nanPath = join(tmp.dir, "nan.gguf");
  rewriteGGUF(DEMO, nanPath, {
    tensors: (list) => {
      const t = find(list, "blk.3.ffn_up_exps.weight");
      const v = values(t);
      v[12345] = NaN;
      setValues(t, v);
    },
  });
  const infPath = join(tmp.dir, "inf.gguf");
  rewriteGGUF(DEMO, infPath, {
    tensors: (list) => {
      const t = find(list, "output_norm.weight");
      const v = values(t);
      v[7] = -Infinity;
      setValues(t, v);
    },
  });

  it("refuses a NaN or Inf weight with an error naming the tensor, on every backend", () => {
    for (const backend of ["reference", "cpu"] as const) {
      assert.throws(
        () => loadModel(nanPath, undefined, { backend, threads: 2 }),
        (e: unknown) => e instanceof GGUFError && /"blk\.3\.ffn_up_exps\.weight".*NaN/.test(e.message),
        backend,
      );
      assert.throws(
        () => loadModel(infPath, undefined, { backend, threads: 2 }),
        (e: unknown) => e instanceof GGUFError && /"output_norm\.weight".*element 7/.test(e.message),
        backend,
      );
    }
  });

  it("with onNonFinite, loads and reports each bad tensor", () => {
    const seen: string[] = [];
    const m = loadModel(nanPath, undefined, { onNonFinite: (msg) => seen.push(msg) });
    assert.equal(m.config.nLayer, 6);
    assert.equal(seen.length, 1);
    assert.match(seen[0], /blk\.3\.ffn_up_exps\.weight/);
    m.file.close();
  });
});
