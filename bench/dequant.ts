/** Dequantization throughput (MB/s of float32 output) on realistic matrix rows. Not a test: run via bench/run.ts. */
import { performance } from "node:perf_hooks";
import { typeByName } from "../src/gguf/types.js";
import { dequantizeRow, quantize, rowBytes } from "../src/quant/index.js";
import type { BenchResult } from "./run.js";

const COLS = 4096;
const ROWS = 1024;
const REPS = 5;

/** Random block bytes with sane f16 scales: quantize random floats where a quantizer exists, else random bytes. */
function makeData(type: number): Uint8Array {
  const n = COLS * 64;
  const src = new Float32Array(n);
  let s = 0x9e3779b9;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    src[i] = ((s >>> 0) / 4294967296 - 0.5) * 0.1;
  }
  let rows: Uint8Array;
  try {
    rows = quantize(type, src, COLS);
  } catch {
    rows = new Uint8Array(rowBytes(type, COLS) * 64);
    for (let i = 0; i < rows.length; i++) rows[i] = (i * 2654435761) >>> 24;
  }
  // tile 64 distinct rows up to ROWS
  const rb = rowBytes(type, COLS);
  const all = new Uint8Array(rb * ROWS);
  for (let r = 0; r < ROWS; r++) all.set(rows.subarray((r % 64) * rb, ((r % 64) + 1) * rb), r * rb);
  return all;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

export function run(): BenchResult[] {
  const names = [
    "Q4_K",
    "Q6_K",
    "Q8_0",
    "IQ4_XS",
    "Q4_0",
    "Q5_K",
    "Q2_K",
    "Q3_K",
    "IQ4_NL",
    "F16",
    "BF16",
    "MXFP4",
    "IQ2_XXS",
    "IQ3_S",
    "IQ1_M",
  ];
  const out = new Float32Array(COLS);
  const results: BenchResult[] = [];
  for (const name of names) {
    const type = typeByName(name)!;
    const data = makeData(type);
    const rb = rowBytes(type, COLS);
    const once = (): number => {
      const t0 = performance.now();
      for (let r = 0; r < ROWS; r++) dequantizeRow(type, data, r * rb, out, 0, COLS);
      return performance.now() - t0;
    };
    once(); // warm-up (JIT)
    const times: number[] = [];
    for (let i = 0; i < REPS; i++) times.push(once());
    const ms = median(times);
    const mbs = (COLS * ROWS * 4) / 1e6 / (ms / 1000);
    results.push({
      name: `dequant ${name} ${COLS}x${ROWS}`,
      value: mbs,
      unit: "MB/s f32",
      extra: {
        medianMs: Number(ms.toFixed(3)),
        reps: REPS,
        // the best repetition: less sensitive to a loaded machine than the median
        bestMBs: Number(((COLS * ROWS * 4) / 1e6 / (Math.min(...times) / 1000)).toFixed(0)),
      },
    });
  }
  return results;
}
