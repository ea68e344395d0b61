/// <reference types="@webgpu/types" />
/** Launcher of the DSA indexer's scores and top-k selection. */
import { f32bits, type GpuRuntime } from "../../core/runtime.js";
import { memoWGSL } from "../../core/wgsl-memo.js";
import { dsaScoresBlocked } from "./select.js";
import {
  DSA_SCORES_THREAD_WGSL,
  DSA_SCORES_WGSL as scoresSource,
  SCORES_HEAD_GROUPS,
  SCORES_KEYS,
  TOPK_WGSL,
} from "./dsa.wgsl.js";

const DSA_SCORES_WGSL = memoWGSL(scoresSource);

export interface DsaArgs {
  readonly n: number;
  /** width of the score rows (≥ every query's key count) */
  readonly T: number;
  readonly Hi: number;
  readonly D: number;
  readonly topK: number;
  readonly kOff?: number;
  /** keys through page tables in SEL (META base = the table's offset); 0 = contiguous rows */
  readonly pageSize?: number;
}

/**
 * The DSA indexer's selection on the GPU: scores [n × T] from roped indexer queries q [n × Hi × D], head weights
 * w [n × Hi] and keys; then per query the top-k positions (ascending) into sel [n × topK], and META updated so that
 * the attention kernel reads only those keys (queries with ≤ topK keys stay dense).
 */
export function dsaSelect(
  rt: GpuRuntime,
  bufs: { q: GPUBuffer; w: GPUBuffer; keys: GPUBuffer; meta: GPUBuffer; scores: GPUBuffer; sel: GPUBuffer },
  a: DsaArgs,
): void {
  dsaScores(rt, bufs, a);
  dsaTopK(rt, bufs, a);
}

/**
 * The indexer scores [n × T] of `dsaSelect` (−3.4028234e38 past each query's key count): by key blocks through
 * workgroup memory, or with tune.dsaScores = 0 one thread per (key, query).
 */
export function dsaScores(
  rt: GpuRuntime,
  bufs: { q: GPUBuffer; w: GPUBuffer; keys: GPUBuffer; meta: GPUBuffer; scores: GPUBuffer; sel: GPUBuffer },
  a: DsaArgs,
): void {
  const wScale = 1 / Math.sqrt(a.Hi * a.D);
  const blocks = dsaScoresBlocked(rt);
  const code = blocks ? DSA_SCORES_WGSL(Math.ceil(a.Hi / SCORES_HEAD_GROUPS)) : DSA_SCORES_THREAD_WGSL;
  const groups: [number, number] = blocks ? [Math.ceil(a.T / SCORES_KEYS), a.n] : [Math.ceil(a.T / 64), a.n];
  rt.dispatch(
    "dsaScores",
    code,
    [bufs.q, bufs.w, bufs.keys, bufs.meta, bufs.scores, bufs.sel],
    new Uint32Array([a.n, a.T, a.Hi, a.D, f32bits(wScale), a.kOff ?? 0, a.pageSize ?? 0, 0]),
    groups,
    [{ buffer: bufs.scores, offset: 0, size: a.n * a.T * 4 }],
  );
}

/**
 * Per query i with META[i].y = nk > topK keys: the topK largest of scores[i·T .. i·T + nk) (ties to the lowest
 * position, masked scores never), ascending, into sel[i·topK ..], and META[i] pointing at them.
 */
export function dsaTopK(
  rt: GpuRuntime,
  bufs: { meta: GPUBuffer; scores: GPUBuffer; sel: GPUBuffer },
  a: { readonly n: number; readonly T: number; readonly topK: number },
): void {
  rt.dispatch("dsaTopK", TOPK_WGSL, [bufs.scores, bufs.meta, bufs.sel], new Uint32Array([a.n, a.T, a.topK, 0]), [a.n]);
}
