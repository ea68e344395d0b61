// CpuBackend.releaseWeights: after it, matrices read into the arenas take the released memory (the arenas do not
// grow layer after layer, as a streamed pass reads them), and products over them are right — Q6_K too, whose
// repacked copies for small products are dropped with the weights.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { CpuBackend } from "../../src/backend/cpu/fast.js";
import { plainKernels } from "../../src/model/kernels.js";
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { GGMLType, typeName } from "../../src/gguf/types.js";
import { fillRandom, Rng } from "../../src/synth/random-blocks.js";
import { rowBytes } from "../../src/quant/index.js";

const backend = new CpuBackend({ threads: 2 });
after(() => backend.close());

/** A random matrix whose bytes live in the backend's arenas (as `adopt` puts a file's matrices there). */
function inArena(type: number, rows: number, cols: number, rng: Rng): QMatrix {
  const data = backend.allocWeight(rowBytes(type, cols) * rows);
  fillRandom(type, data, rows * cols, 0.5, rng);
  return new QMatrix(`${typeName(type)} ${rows}x${cols}`, type, cols, rows, data);
}

test("layer after layer with releaseWeights between: the arenas stay one layer's size, products match the plain kernels", () => {
  const rng = new Rng(7, "release-weights");
  let firstBytes = 0;
  for (let layer = 0; layer < 6; layer++) {
    backend.releaseWeights();
    const mats = [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.F32].map((t, i) =>
      inArena(t, 257 + i, 512, rng),
    );
    for (const n of [1, 2, 5]) {
      const x = Float64Array.from({ length: n * 512 }, () => rng.u32() / 4294967296 - 0.5);
      for (const m of mats) {
        const want = new Float64Array(n * m.rows);
        const got = new Float64Array(n * m.rows);
        plainKernels.matmul(m, x, n, 512, want, m.rows);
        backend.matmul(m, x, n, 512, got, m.rows);
        for (let i = 0; i < want.length; i++)
          assert.ok(
            Math.abs(got[i] - want[i]) <= 2e-3 * (1 + Math.abs(want[i])),
            `layer ${layer} ${m.name} n=${n} [${i}]`,
          );
      }
    }
    if (layer === 0) firstBytes = backend.bytes;
    // the same sizes again take the same room (a work area may grow once, geometrically)
    else
      assert.ok(
        backend.bytes <= firstBytes * 1.6,
        `layer ${layer}: ${backend.bytes} bytes vs ${firstBytes} after the first`,
      );
  }
});
