/**
 * The attention family's selection, the one module of it that reads the tuning (RuntimeOptions.tune): whether a step
 * takes the wide decode kernel and its plan, and the one-token fused kernel's shape. The launchers (attention.ts,
 * fused.ts) take these choices as they are.
 */
import type { GpuRuntime } from "../../core/runtime.js";
import type { KernelTuning } from "../../core/tuning.js";
import type { GpuMatrix } from "../matmul/matrix.js";
import { ATTN_CHUNK } from "./attention.wgsl.js";
import { attnFusedBytes, attnFusedChunk, type AttnFusedShape } from "./fused.wgsl.js";
import { attnTiledBytes, attnTiledGroup } from "./tiled.wgsl.js";
import {
  ATTN_WIDE_MAX_Q,
  ATTN_WIDE_MAX_SPLITS,
  ATTN_WIDE_MIN_SPLIT_KEYS,
  ATTN_WIDE_ROWS,
  ATTN_WIDE_THREADS,
  type AttnWidePlan,
} from "./wide.wgsl.js";

// the wide kernel's defaults (tune.attnHeads, attnTile, attnSplitFrom, attnWgs): 4 heads a workgroup, tiles of 32 keys,
// keys split over workgroups past 256 (one chunk), aiming for about one workgroup per SM of a large GPU
const DEFAULT_HEADS = 4;
const DEFAULT_TILE = 32;
const DEFAULT_SPLIT_FROM = 256;
const DEFAULT_WGS = 128;

/**
 * The wide kernel's shape for a step (undefined: it does not apply). `sg` is the device's fixed subgroup size; the
 * result depends on maxKeys only through its ATTN_CHUNK count.
 */
export function attnWidePlan(
  tune: KernelTuning,
  sg: number,
  nq: number,
  heads: number,
  maxKeys: number,
): AttnWidePlan | undefined {
  if (nq < 1 || nq > ATTN_WIDE_MAX_Q || heads < 1 || sg < 4 || sg > 64 || ATTN_WIDE_THREADS % sg !== 0)
    return undefined;
  const group = Math.min(heads, Math.max(1, Math.min(8, Math.floor(tune.attnHeads ?? DEFAULT_HEADS))));
  const subgroups = ATTN_WIDE_THREADS / sg;
  const perSubgroup = Math.max(1, Math.min(8, Math.round((tune.attnTile ?? DEFAULT_TILE) / subgroups)));
  const tile = perSubgroup * subgroups;
  const keys = Math.max(1, Math.ceil(maxKeys / ATTN_CHUNK)) * ATTN_CHUNK;
  const workgroups = nq * Math.ceil(heads / group);
  let splits = 1;
  if (keys > (tune.attnSplitFrom ?? DEFAULT_SPLIT_FROM)) {
    const fill = Math.ceil((tune.attnWgs ?? DEFAULT_WGS) / workgroups);
    splits = Math.max(1, Math.min(ATTN_WIDE_MAX_SPLITS, keys / ATTN_WIDE_MIN_SPLIT_KEYS, fill));
  }
  splits = Math.max(splits, Math.ceil(keys / ATTN_WIDE_ROWS));
  if (splits > ATTN_WIDE_MAX_SPLITS) return undefined;
  const splitKeys = Math.ceil(Math.ceil(keys / splits) / tile) * tile;
  if (splitKeys > ATTN_WIDE_ROWS) return undefined;
  return { group, tile, splits: Math.ceil(keys / splitKeys), splitKeys };
}

/**
 * The wide decode kernel's plan for nq queries of `heads` heads over maxKeys keys on a device of fixed subgroup size
 * sg, or undefined where it is not taken (the attn knob; by default past one chunk of keys) or does not apply.
 */
export function attnWideChoice(
  rt: GpuRuntime,
  sg: number,
  a: { readonly nq: number; readonly heads: number; readonly maxKeys: number },
): AttnWidePlan | undefined {
  // by default only past one chunk of keys, where the chunked kernel splits too. Measured on a large GPU (v2-lite batch 1,
  // whole step): decoding from 512 keys, GPU 5.20 → 3.65 ms per step with this kernel, from 4096 keys 6.04 → 4.18 ms;
  // at 17–50 keys it cost time instead (3.43 vs 3.23 ms: 4 workgroups for 16 heads where the chunked kernel has 16)
  const wide = rt.tune.attn ?? (a.maxKeys > ATTN_CHUNK ? 1 : 0);
  return wide === 1 ? attnWidePlan(rt.tune, sg, a.nq, a.heads, a.maxKeys) : undefined;
}

export interface AttnFusedDims {
  readonly heads: number;
  readonly P: number;
  readonly R: number;
  readonly L: number;
  readonly V: number;
  /** keys of the step's query (at most) */
  readonly maxKeys: number;
  /** q-LoRA: the queries come from their own product (Q) and the step's cache write has written the token's key */
  readonly lora?: boolean;
}

/**
 * The kernel's shape where it takes this step (tune.attnFuse = 1, by default on GPUs: subgroups ≥ 32; a fixed subgroup
 * size, one piece each, ≤ ATTN_CHUNK keys), else undefined.
 */
export function attnFusedShape(
  rt: GpuRuntime,
  kB: GpuMatrix,
  vB: GpuMatrix,
  d: AttnFusedDims,
): AttnFusedShape | undefined {
  const sg = rt.info.subgroupSize;
  if (sg === undefined || sg < 4 || sg > 64 || 256 % sg !== 0 || (rt.tune.attnFuse ?? (sg >= 32 ? 1 : 0)) !== 1)
    return undefined;
  // past one chunk of keys: the key-split form (two dispatches), unless tune.attnFuseLong = 0
  const keySplit = d.maxKeys > ATTN_CHUNK;
  if ((keySplit && rt.tune.attnFuseLong === 0) || d.R % 2 !== 0 || d.P % 4 !== 0 || d.L % 4 !== 0) return undefined;
  if (kB.pieces.length !== 1 || vB.pieces.length !== 1 || kB.items < d.heads || vB.items < d.heads) return undefined;
  if (kB.cols !== d.P || kB.rows !== d.L || vB.cols !== d.L || vB.rows !== d.V) return undefined;
  if (d.P % attnFusedChunk(kB.type, d.P) !== 0 || d.L % attnFusedChunk(vB.type, d.L) !== 0) return undefined;
  const wide = sg >= 32;
  const clamp = (v: number | undefined, lo: number, hi: number, def: number): number =>
    Math.max(lo, Math.min(hi, Math.floor(v ?? def)));
  // about 128 workgroups (about one per SM of a large GPU; V2-Lite's 16 heads: 8 each), each head's absorb redone by each of its
  // own; on CPU adapters 2
  const split = Math.min(d.V, clamp(rt.tune.attnFuseSplit, 1, 16, wide ? Math.round(128 / d.heads) : 2));
  const keys = clamp(rt.tune.attnFuseKeys, 1, 4, wide ? 2 : 1);
  // one chunk step a turn, in a pipelined loop: on a large GPU (v2-lite batch 1, same call) the step took 3.07 ms on the
  // GPU with 1 (then not pipelined), 3.12 with 2 and 3.48 with 8 unrolled (kernel code fetched again every layer:
  // matmul/select.ts, UNROLL), against 3.18 without the fused kernel
  const unroll = clamp(rt.tune.attnFuseUnroll, 1, 16, 1);
  // subgroups a workgroup (tune.attnFuseSubgroups): on GPUs 16 where their partial latents fit in workgroup memory (v2-lite
  // batch 1, same call: GPU 2.58 / 2.58 ms a step against 2.67 / 2.67 with 8 and 3.04 with 4; with
  // ~128 workgroups, one an SM, more threads hide more of each one's latency), else 8 (at most 256 threads)
  const limit = rt.info.limits.maxComputeWorkgroupStorageSize;
  const base: AttnFusedShape = {
    heads: d.heads,
    P: d.P,
    R: d.R,
    L: d.L,
    V: d.V,
    typeK: kB.type,
    typeV: vB.type,
    sg,
    split,
    keys,
    unroll,
    own: d.lora !== true,
    ...(keySplit ? { keySplit } : {}),
  };
  const asked = rt.tune.attnFuseSubgroups;
  const maxThreads = rt.info.limits.maxComputeInvocationsPerWorkgroup ?? 256;
  const subgroups = asked !== undefined ? clamp(asked, 1, Math.floor(1024 / sg), 8) : wide ? 16 : undefined;
  if (subgroups !== undefined) {
    const wider: AttnFusedShape = { ...base, threads: subgroups * sg };
    if (attnFusedBytes(wider) <= limit && subgroups * sg <= maxThreads) return wider;
    if (asked !== undefined) return undefined;
  }
  return attnFusedBytes(base) <= limit ? base : undefined;
}

/** The tiled latent kernel's plan: G heads a workgroup, keys split over `splits` workgroups of splitKeys each. */
export interface AttnTiledPlan {
  readonly group: number;
  readonly splits: number;
  readonly splitKeys: number;
}

/** Queries from which a step takes the tiled latent kernel by default (prompt chunks; tune.attnTiledFrom). */
export const ATTN_TILED_FROM = 128;
/** The most keys one workgroup of the tiled kernel walks (longer key lists are split). */
export const ATTN_TILED_MAX_KEYS = 4096;
/** Workgroups the tiled kernel's key splits aim for (about two a multiprocessor of a large GPU; tune.attnTiledWgs). */
const ATTN_TILED_WGS = 256;

/**
 * The tiled latent kernel's plan for nq queries of `heads` heads over maxKeys keys, or undefined where it is not taken
 * (tune.attnTiled = 0, fewer queries than tune.attnTiledFrom, not even 4 heads' tiles in the workgroup memory). The keys are split
 * over workgroups (in whole chunks of ATTN_CHUNK, so the plan depends on maxKeys only through its chunks) while the
 * queries' head groups make fewer than ATTN_TILED_WGS workgroups, and past ATTN_TILED_MAX_KEYS keys.
 */
export function attnTiledChoice(
  rt: GpuRuntime,
  a: { readonly nq: number; readonly heads: number; readonly maxKeys: number },
): AttnTiledPlan | undefined {
  const tune = rt.tune;
  if (tune.attnTiled === 0 || a.nq < 1 || a.heads < 1) return undefined;
  if (tune.attnTiled !== 1 && a.nq < (tune.attnTiledFrom ?? ATTN_TILED_FROM)) return undefined;
  // (fewer heads a workgroup where the device's workgroup memory does not hold the tiles of the natural group)
  let group = attnTiledGroup(a.heads);
  while (group > 4 && attnTiledBytes(group) > rt.info.limits.maxComputeWorkgroupStorageSize) group /= 2;
  if (attnTiledBytes(group) > rt.info.limits.maxComputeWorkgroupStorageSize) return undefined;
  const chunks = Math.max(1, Math.ceil(a.maxKeys / ATTN_CHUNK));
  const workgroups = a.nq * Math.ceil(a.heads / group);
  const fill = Math.ceil((tune.attnTiledWgs ?? ATTN_TILED_WGS) / workgroups);
  // and no workgroup walks more than ATTN_TILED_MAX_KEYS keys: a step's one long-context query (a decode token among
  // prompt chunks) would otherwise hold the dispatch alone
  const want = Math.max(1, Math.min(chunks, Math.max(fill, Math.ceil(chunks / (ATTN_TILED_MAX_KEYS / ATTN_CHUNK)))));
  const splitKeys = Math.ceil(chunks / want) * ATTN_CHUNK;
  return { group, splits: Math.ceil((chunks * ATTN_CHUNK) / splitKeys), splitKeys };
}
