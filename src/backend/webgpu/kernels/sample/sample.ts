/// <reference types="@webgpu/types" />
/** Launchers of the samplers on the GPU: the argmax (greedy) and the draws (temperature, top-k, top-p, min-p), with their scratch sizes. */
import { LatentError } from "../../../../util/errors.js";
import { f32bits, type GpuRuntime } from "../../core/runtime.js";
import { argmaxWGSL as argmaxSource, ARGMAX_SLICE } from "./argmax.wgsl.js";
import { memoWGSL } from "../../core/wgsl-memo.js";
import { NUCLEUS_ROUNDS, NUCLEUS_ROW_WORDS, nucleusWGSL as nucleusSource } from "./nucleus.wgsl.js";
import {
  DRAW_WORDS,
  SAMPLE_TOPK_CAP,
  SAMPLE_TOPK_MAX,
  sampleTopKWGSL as sampleTopKSource,
  sampleWGSL as sampleSource,
} from "./sample.wgsl.js";
import type { PickDraw } from "../../../../engine/device-picks.js";

export { DRAW_WORDS };

const argmaxWGSL = memoWGSL(argmaxSource);
const sampleWGSL = memoWGSL(sampleSource);
const sampleTopKWGSL = memoWGSL(sampleTopKSource);
const nucleusWGSL = memoWGSL(nucleusSource);

/** Words of the scratch sampleRows needs for n rows of `width`: two vec4u per slice of a row (sample.wgsl.ts). */
export function sampleScratchWords(n: number, width: number): number {
  return 8 * n * Math.ceil(width / ARGMAX_SLICE);
}

/** The draws buffer's words for these rows' draws (DRAW_WORDS each: see sampleRows). */
export function drawWords(draws: readonly PickDraw[]): Uint32Array {
  return Uint32Array.from(
    draws.flatMap((d) => [
      f32bits(d.temperature > 0 ? 1 / d.temperature : 0),
      d.key >>> 0,
      d.topK ?? 0,
      f32bits(d.topP ?? 1),
      f32bits(d.minP ?? 0),
      0,
      0,
      0,
    ]),
  );
}

/** Words of the candidates buffer sampleRows needs for top-k rows: SAMPLE_TOPK_MAX (x, id) pairs per slice of a row. */
export function sampleTopKWords(n: number, width: number): number {
  return 2 * SAMPLE_TOPK_MAX * n * Math.ceil(width / ARGMAX_SLICE);
}

/** Words of the scratch sampleRows needs for n rows' top-p and min-p without top-k (nucleus.wgsl.ts). */
export function sampleNucleusWords(n: number): number {
  return n * NUCLEUS_ROW_WORDS;
}

/** Whether sampleRows draws top-k rows of this width (its merge holds a row's candidates in workgroup memory). */
export function sampleTopKFits(width: number): boolean {
  return Math.ceil(width / ARGMAX_SLICE) * SAMPLE_TOPK_MAX <= SAMPLE_TOPK_CAP;
}

/**
 * ids[t] = a token drawn from softmax(x_t / T_t) by the Gumbel-max trick (sample.wgsl.ts), or argmax(x_t) where 1/T_t
 * is 0, for rows t of x [n × width]; `draws` holds per row DRAW_WORDS words — (1/T as f32 bits, a 32-bit key, top-k,
 * top-p as f32 bits), (min-p as f32 bits, 0, 0, 0) — the key drawn from the request's seeded sampler. With `cand`
 * (sampleTopKWords), rows with top-k 1..SAMPLE_TOPK_MAX are drawn after top-k → top-p → min-p as the host Sampler
 * filters (sampleTopKWGSL; two more dispatches); with `nucleus` (sampleNucleusWords, zeroed when made), rows without
 * top-k are drawn after top-p → min-p (nucleus.wgsl.ts; seven more dispatches); without them those filters are ignored.
 * logprobs[t] = log_softmax(x_t) at ids[t] (NaN where the host sampler would refuse the row). Two dispatches, as
 * argmaxRows, or more.
 */
export function sampleRows(
  rt: GpuRuntime,
  x: GPUBuffer,
  draws: GPUBuffer,
  ids: GPUBuffer,
  logprobs: GPUBuffer,
  part: GPUBuffer,
  a: { n: number; width: number; xOff?: number; xStride?: number; cand?: GPUBuffer; nucleus?: GPUBuffer },
): void {
  const slices = Math.ceil(a.width / ARGMAX_SLICE);
  if (a.cand !== undefined && !sampleTopKFits(a.width))
    throw new LatentError(
      `top-k draws on the GPU take rows of up to ${(SAMPLE_TOPK_CAP / SAMPLE_TOPK_MAX) * ARGMAX_SLICE} logits, not ${a.width}`,
    );
  if (a.nucleus !== undefined && a.nucleus.size < 4 * sampleNucleusWords(a.n))
    throw new LatentError(
      `top-p draws of ${a.n} rows need a scratch of ${4 * sampleNucleusWords(a.n)} bytes, not ${a.nucleus.size}`,
    );
  // bits of the ids a row's slices span (the top-k selection's second key)
  const idBits = Math.max(1, Math.ceil(Math.log2(slices * ARGMAX_SLICE)));
  const params = new Uint32Array([a.n, a.width, a.xOff ?? 0, a.xStride ?? a.width, slices, idBits, 0, 0]);
  rt.dispatch(
    "sample slices",
    sampleWGSL("slices"),
    [x, draws, part],
    params,
    [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)],
    [{ buffer: part, offset: 0, size: a.n * slices * 32 }],
  );
  const rowGrid = [Math.min(a.n, 65535), Math.ceil(a.n / 65535)] as const;
  const sliceGrid = [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)] as const;
  const merge = (): void =>
    rt.dispatch("sample merge", sampleWGSL("merge"), [part, ids, logprobs], params, rowGrid, [
      { buffer: ids, offset: 0, size: a.n * 4 },
      { buffer: logprobs, offset: 0, size: a.n * 4 },
    ]);
  merge();
  if (a.nucleus !== undefined) {
    // top-p's cut over four rounds and min-p's, each nucleus row's draw among what they keep into its slices'
    // candidates, then the merge again (the other rows' candidates unchanged: the same ids and log-probabilities)
    for (let r = 0; r < NUCLEUS_ROUNDS; r++) {
      const round = params.slice();
      round[6] = r;
      rt.dispatch("sample nucleus round", nucleusWGSL("round"), [x, draws, part, a.nucleus], round, sliceGrid);
    }
    rt.dispatch("sample nucleus cut", nucleusWGSL("cut"), [x, draws, part, a.nucleus], params, rowGrid);
    rt.dispatch("sample nucleus draw", nucleusWGSL("draw"), [x, draws, a.nucleus, part], params, sliceGrid);
    merge();
  }
  if (a.cand === undefined) return;
  // (rows without top-k write nothing here: no completeness check on these outputs)
  rt.dispatch("sample topk slices", sampleTopKWGSL("slices"), [x, draws, a.cand], params, [
    slices,
    Math.min(a.n, 65535),
    Math.ceil(a.n / 65535),
  ]);
  rt.dispatch("sample topk merge", sampleTopKWGSL("merge"), [a.cand, part, draws, ids, logprobs], params, [
    Math.min(a.n, 65535),
    Math.ceil(a.n / 65535),
  ]);
}

/** Words of the scratch argmaxRows needs for n rows of `width`: per slice of a row its best (value, index) and Σ exp. */
export function argmaxScratchWords(n: number, width: number): number {
  return 4 * n * Math.ceil(width / ARGMAX_SLICE);
}

/**
 * ids[t] = argmax of row t of x [n × width] (greedy sampling on the GPU; lowest id on ties, NaN never chosen, as the
 * CPU sampler; a row of only NaN → 0), and with `logprobs` ([n] f32) logprobs[t] = log_softmax of row t at ids[t]
 * (as the sampler's logprob; see argmaxWGSL for non-finite rows): the best and Σ exp(x − best) of every slice of a
 * row into `part` (argmaxScratchWords), then per row the best of those and the log-sum-exp over them. Two dispatches.
 */
export function argmaxRows(
  rt: GpuRuntime,
  x: GPUBuffer,
  ids: GPUBuffer,
  part: GPUBuffer,
  a: { n: number; width: number; xOff?: number; xStride?: number; logprobs?: GPUBuffer },
): void {
  const slices = Math.ceil(a.width / ARGMAX_SLICE);
  const params = new Uint32Array([a.n, a.width, a.xOff ?? 0, a.xStride ?? a.width, slices, 0, 0, 0]);
  rt.dispatch(
    "argmax slices",
    argmaxWGSL("slices"),
    [x, part],
    params,
    [slices, Math.min(a.n, 65535), Math.ceil(a.n / 65535)],
    [{ buffer: part, offset: 0, size: a.n * slices * 16 }],
  );
  const lp = a.logprobs;
  rt.dispatch(
    "argmax merge",
    argmaxWGSL("merge", lp !== undefined),
    lp !== undefined ? [part, ids, lp] : [part, ids],
    params,
    [Math.min(a.n, 65535), Math.ceil(a.n / 65535)],
    [
      { buffer: ids, offset: 0, size: a.n * 4 },
      ...(lp !== undefined ? [{ buffer: lp, offset: 0, size: a.n * 4 }] : []),
    ],
  );
}
