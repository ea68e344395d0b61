// A weight matrix of random GGUF blocks (synth's block filler): what the CPU kernel parity tests multiply.
import { QMatrix } from "../../src/tensor/qmatrix.js";
import { typeName } from "../../src/gguf/types.js";
import { fillRandom, type Rng } from "../../src/synth/random-blocks.js";
import { rowBytes } from "../../src/quant/index.js";

export function randomMatrix(type: number, rows: number, cols: number, rng: Rng): QMatrix {
  const data = new Uint8Array(rowBytes(type, cols) * rows);
  fillRandom(type, data, rows * cols, 0.5, rng);
  return new QMatrix(`${typeName(type)} ${rows}x${cols}`, type, cols, rows, data);
}
