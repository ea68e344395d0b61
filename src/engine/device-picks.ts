/**
 * The one contract for choosing the next token on a model's device instead of sampling its logits on the host: a
 * greedy argmax or a draw by a key (PickDraw), for one step (forwardBatchPicks) or for a chain of steps fed back on the
 * device (decodeGreedy, decodeGreedyBatch). generate.ts, the scheduler and the backends all speak it.
 */
import type { LatentStore } from "../model/cache.js";
import type { SequenceChunk } from "../model/deepseek2.js";
import type { Sampler } from "./sampler.js";

/**
 * A token drawn on the model's device from softmax(row / temperature), by a 32-bit key the sequence's sampler drew
 * (Sampler.drawKey): the same seed gives the same tokens on that device, not the host sampler's.
 */
export interface PickDraw {
  readonly temperature: number;
  readonly key: number;
  /** the host Sampler's filters, applied before the draw as it applies them (models with `picksDrawFiltered`): top-k 0 = off */
  readonly topK?: number;
  readonly topP?: number;
  readonly minP?: number;
}

/** A choice made on the model's device: the token and its log-probability (NaN where the host sampler would refuse the row). */
export interface GreedyPick {
  readonly token: number;
  readonly logprob: number;
}

/** What a chain of steps chose: `tokens[s]` and its log-probability `logprobs[s]` per step. */
export interface GreedyChunk {
  readonly tokens: readonly number[];
  readonly logprobs: readonly number[];
}

/**
 * Which draws a model's device makes besides the greedy argmax. Every entry point below makes greedy choices; the
 * flags say where PickDraws are taken too.
 */
export interface DevicePicks {
  /** forwardBatchPicks takes PickDraws (a temperature alone, unless `picksDrawFiltered`) */
  readonly picksDraw?: boolean;
  /** the chained entry points (decodeGreedy, decodeGreedyBatch) take PickDraws, a key a step */
  readonly chainsDraws?: boolean;
  /** the PickDraws may carry the host Sampler's filters: any top-p and min-p with top-k 0 or 1..DEVICE_DRAW_TOPK_MAX */
  readonly picksDrawFiltered?: boolean;
}

/** A model that can take greedy (or drawn) decode steps itself, each step's token fed to the next without the host. */
export interface GreedyChainModel extends DevicePicks {
  /**
   * `steps` greedy decode steps over `cache`: step s feeds the id chosen by step s − 1 (step 0: `token`) at position
   * cache.length + s and chooses the next id by argmax of its logits (ties to the lowest id, NaN never chosen: the
   * sampler's greedy) — or, with `draws` (one a step, models with `chainsDraws`), by draws[s]. Returns the `steps`
   * chosen ids with their logprobs (log_softmax of the step's logits at the id, as the sampler's SampleResult.logprob)
   * and advances the cache by `steps`, as that many forward([token], cache) calls would (the last id returned is not
   * in the cache yet).
   */
  decodeGreedy(token: number, cache: LatentStore, steps: number, draws?: readonly PickDraw[]): GreedyChunk;
}

/** The same for a batch of sequences (the scheduler's models); both entry points optional. */
export interface BatchDevicePicks extends DevicePicks {
  /**
   * `steps` greedy decode steps of every sequence chained on the model's device: sequence i feeds `token` at position
   * cache.length, then each step's argmax (ties to the lowest id, NaN never chosen) at the next position. Returns per
   * sequence the `steps` chosen ids and their logprobs (NaN where the step's logits hold NaN or +Infinity or are all
   * −Infinity) and advances each cache by `steps`: the same as `steps` forwardBatch calls of one-token decode chunks
   * sampled greedily. Paged caches have their pages for all `steps` positions reserved by the caller. With `draws`
   * [steps × sequences, step-major] (models with `chainsDraws`) each step's token of a sequence is drawn as
   * forwardBatchPicks draws a PickDraw (temperature 0: greedy).
   */
  decodeGreedyBatch?(
    seqs: readonly { readonly token: number; readonly cache: LatentStore }[],
    steps: number,
    draws?: readonly PickDraw[],
  ): GreedyChunk[];
  /**
   * forwardBatch, except that a chunk with `picks[i]` (logits "last") gets its last row's choice computed on the
   * model's device instead of the row — `true`: the greedy one, argmax (ties to the lowest id, NaN never chosen); a
   * PickDraw (models with `picksDraw`): a token drawn from softmax(row / temperature) by the draw's key — with its
   * logprob (NaN where the row holds NaN or +Infinity or is all −Infinity), so that such sequences need no logits read
   * back or sampled.
   */
  forwardBatchPicks?(
    seqs: readonly SequenceChunk[],
    picks: readonly (boolean | PickDraw)[],
  ): (Float32Array | GreedyPick)[];
}

/**
 * Steps in the first chain after a host-sampled step (generate's, the scheduler's); each following chain doubles up to
 * the caller's cap: short first, so that a stop soon after the prompt wastes few device steps.
 */
export const CHAIN_FIRST_STEPS = 4;

/** How a sampler's next token may be chosen on a device: its argmax, a draw (PickDraw), or not at all (on the host). */
export type DeviceChoice = "greedy" | "draw" | undefined;

/**
 * Whether `device` can choose `sampler`'s tokens: greedy when the sampler's greedy needs nothing but the argmax (no
 * top logprobs, no logit adjustments); a draw when the device takes PickDraws where they are asked of it — `chain`:
 * decodeGreedy / decodeGreedyBatch (chainsDraws), else forwardBatchPicks (picksDraw) — and filters as the sampler does.
 */
export function deviceChoice(sampler: Sampler, device: DevicePicks, where: "pick" | "chain"): DeviceChoice {
  if (sampler.picksGreedyOnDevice()) return "greedy";
  const draws = where === "chain" ? device.chainsDraws : device.picksDraw;
  return draws === true && sampler.drawsOnDevice(device.picksDrawFiltered === true) ? "draw" : undefined;
}
