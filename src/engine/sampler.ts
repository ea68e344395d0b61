import { UsageError } from "../util/errors.js";
import { greedyLogprob, logSoftmaxInto, topIds, topLogprobs } from "./logprobs.js";
import { LogitAdjuster, type LogitAdjustOptions } from "./logit-adjust.js";
import type { TokenConstraint } from "./json/constraint.js";

/** Sampling settings; the LogitAdjustOptions (logit bias, penalties) change the row before filtering and drawing. */
export interface SamplerOptions extends LogitAdjustOptions {
  /** 0 → greedy (argmax, ties to the lowest id). Default 1. */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = off. Default 0. */
  topK?: number;
  /** Nucleus: keep the smallest most-likely prefix whose mass reaches topP; 1 = off. Default 1. */
  topP?: number;
  /** Keep tokens with p >= minP * p_max; 0 = off. Default 0. */
  minP?: number;
  /** Safe integer seed: same seed + same logits → same tokens. Default: a random seed from Web Crypto. */
  seed?: number;
  /** Return this many top alternatives (under the unmodified distribution) with each sample. Default none. */
  logprobs?: number;
  /** Only tokens it allows are chosen (constrained decoding, e.g. JSON output); stateful, so one per sequence. */
  constraint?: TokenConstraint;
}

/**
 * Candidates a constrained sampler rejects before it computes the whole mask: the likeliest tokens are almost always
 * allowed, and asking the constraint about every token of the vocabulary costs far more than a few redraws.
 */
export const CONSTRAINT_TRIES = 16;

export interface SampleResult {
  token: number;
  /** Log-probability of `token` under the unmodified distribution, log_softmax(raw logits) (OpenAI semantics). */
  logprob: number;
  /** Top-N [id, logprob] alternatives under the unmodified distribution, when `logprobs` was requested. */
  top?: [number, number][];
}

/** xoshiro128** PRNG, state seeded from the 53-bit seed through splitmix32. */
class Xoshiro128 {
  private s = new Uint32Array(4);
  constructor(seed: number) {
    let x = (seed >>> 0) ^ Math.imul(Math.floor(seed / 2 ** 32) >>> 0, 0x9e3779b9);
    for (let i = 0; i < 4; i++) {
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      this.s[i] = z ^ (z >>> 16);
    }
  }
  nextU32(): number {
    const s = this.s;
    const r = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return r;
  }
  /** Uniform double in [0, 1) with 53 random bits. */
  next(): number {
    return ((this.nextU32() >>> 5) * 67108864 + (this.nextU32() >>> 6)) / 9007199254740992;
  }
}
function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** Most top-k a model's device filters by when it draws tokens (Sampler.drawsOnDevice): larger ones sample on the host. */
export const DEVICE_DRAW_TOPK_MAX = 64;

/** log-probabilities of the row being sampled: one buffer for all samplers (sampling is synchronous) */
let scratch = new Float64Array(0);
/**
 * the draw's weights, likewise: a fresh 800 KB array per row (a whole vocabulary, temperature only) cost ~3 ms of page
 * faults, more than the rest of the draw
 */
let weights = new Float64Array(0);
/** log-probabilities of the adjusted row (logit bias, penalties) that tokens are chosen from */
let adjustedScratch = new Float64Array(0);

/**
 * Samples one token from a full-vocabulary logits vector.
 *
 * Order (llama.cpp's common default chain): top-k → top-p → min-p → temperature → draw. A logit bias or a penalty
 * (LogitAdjustOptions) first changes the row (LogitAdjuster); the filters and the draw then act on the changed row.
 * The filters act on the temperature-1 distribution softmax(logits), renormalized over what the previous filter kept
 * (top-p's mass is measured within the top-k set; min-p is relative to the max probability, so renormalizing does
 * not change it). Each filter keeps a most-likely prefix (ties broken toward the lower id) and always keeps the top
 * token. Temperature then rescales the survivors: p_i ∝ exp(logit_i / T). temperature = 0 is greedy argmax.
 *
 * The returned `logprob` is that of the chosen token under the UNMODIFIED distribution log_softmax(raw logits),
 * not under the truncated/tempered one, matching the OpenAI API's `logprobs`.
 */
export class Sampler {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
  readonly seed: number;
  readonly logprobs: number;
  private rng: Xoshiro128;
  private readonly adjuster: LogitAdjuster;
  private readonly constraint: TokenConstraint | undefined;
  /** logit bias, a penalty or a constraint is on: every row is adjusted on the host before the choice */
  readonly adjustsLogits: boolean;

  constructor(options: SamplerOptions = {}) {
    const { temperature = 1, topK = 0, topP = 1, minP = 0, logprobs = 0 } = options;
    if (!Number.isFinite(temperature) || temperature < 0)
      throw new UsageError(`temperature must be a finite number >= 0, got ${temperature}`);
    if (!Number.isInteger(topK) || topK < 0)
      throw new UsageError(`topK must be an integer >= 0 (0 = off), got ${topK}`);
    if (!(topP > 0 && topP <= 1)) throw new UsageError(`topP must be in (0, 1] (1 = off), got ${topP}`);
    if (!(minP >= 0 && minP < 1)) throw new UsageError(`minP must be in [0, 1) (0 = off), got ${minP}`);
    if (!Number.isInteger(logprobs) || logprobs < 0)
      throw new UsageError(`logprobs must be an integer >= 0, got ${logprobs}`);
    const seed = options.seed ?? globalThis.crypto.getRandomValues(new Uint32Array(1))[0];
    if (!Number.isSafeInteger(seed)) throw new UsageError(`seed must be a safe integer, got ${seed}`);
    this.temperature = temperature;
    this.topK = topK;
    this.topP = topP;
    this.minP = minP;
    this.seed = seed;
    this.logprobs = logprobs;
    this.rng = new Xoshiro128(seed);
    this.adjuster = new LogitAdjuster(options);
    this.constraint = options.constraint;
    this.adjustsLogits = this.adjuster.active || this.constraint !== undefined;
  }

  /** Whether this sampler picks the argmax (ties to the lowest id) of every logits row: temperature 0. */
  isGreedy(): boolean {
    return this.temperature === 0;
  }

  /** Whether a model's device may choose this sampler's tokens greedily (argmax of the unadjusted row). */
  picksGreedyOnDevice(): boolean {
    return this.isGreedy() && this.logprobs === 0 && !this.adjustsLogits;
  }

  /**
   * Whether a model's device may draw this sampler's tokens (PickDraw): a temperature alone — no top-k, top-p or
   * min-p — or, where the device filters (`filtered`), also any top-p and min-p with top-k 0 or 1..DEVICE_DRAW_TOPK_MAX;
   * no top logprobs either way.
   */
  drawsOnDevice(filtered = false): boolean {
    if (!(this.temperature > 0) || this.logprobs !== 0 || this.adjustsLogits) return false;
    if (this.topK === 0) return filtered || (this.topP >= 1 && this.minP <= 0);
    return filtered && this.topK <= DEVICE_DRAW_TOPK_MAX;
  }

  /** A draw on a model's device of this sampler's next token: its settings and a fresh key (drawKey). */
  deviceDraw(): { temperature: number; topK: number; topP: number; minP: number; key: number } {
    return { temperature: this.temperature, topK: this.topK, topP: this.topP, minP: this.minP, key: this.drawKey() };
  }

  /** The 32-bit key of one draw made on a model's device, from this sampler's seeded generator. */
  drawKey(): number {
    return this.rng.nextU32();
  }

  /** Pick the next token. Throws UsageError naming the position of a NaN logit. */
  sample(logits: Float32Array | Float64Array): SampleResult {
    if (this.adjustsLogits) return this.sampleAdjusted(logits);
    if (this.isGreedy() && this.logprobs === 0) return greedyLogprob(logits); // validates as logSoftmax does
    // validates (NaN / +Infinity / all -Infinity); into a row reused by every sampler (sample() keeps none of it)
    if (scratch.length < logits.length) scratch = new Float64Array(logits.length);
    const lp = logSoftmaxInto(logits, scratch);
    const token = this.isGreedy() ? argmax(logits) : this.draw(lp, this.kept(lp));
    const result: SampleResult = { token, logprob: lp[token] };
    if (this.logprobs > 0) result.top = topLogprobs(lp, this.logprobs);
    return result;
  }

  /**
   * As sample, choosing from the adjusted row (bias, penalties) with the same filters and draw; the logprobs stay
   * those of the unmodified row, as without adjustments.
   */
  private sampleAdjusted(logits: Float32Array | Float64Array): SampleResult {
    if (scratch.length < logits.length) scratch = new Float64Array(logits.length);
    if (adjustedScratch.length < logits.length) adjustedScratch = new Float64Array(logits.length);
    const lp = logSoftmaxInto(logits, scratch);
    const row = this.adjuster.apply(logits);
    // throws when every token is banned (all -Infinity)
    const token =
      this.constraint !== undefined
        ? this.chooseAllowed(row, this.constraint)
        : this.choose(logSoftmaxInto(row, adjustedScratch));
    this.adjuster.observe(token);
    this.constraint?.accept(token);
    const result: SampleResult = { token, logprob: lp[token] };
    if (this.logprobs > 0) result.top = topLogprobs(lp, this.logprobs);
    return result;
  }

  /** The greedy choice or a draw from a log-softmax row, with this sampler's filters. */
  private choose(adjusted: Float64Array): number {
    return this.isGreedy() ? argmax(adjusted) : this.draw(adjusted, this.kept(adjusted));
  }

  /**
   * The choice from `row` (adjusted logits, overwritten) restricted to the tokens `constraint` allows: a rejected
   * token's logit becomes -Infinity and the choice is made again — for greedy the next best, for a draw a redraw from
   * the renormalized rest, which is exactly a draw from the restricted distribution. After CONSTRAINT_TRIES rejections
   * every token is checked at once.
   */
  private chooseAllowed(row: Float64Array, constraint: TokenConstraint): number {
    let left = 0; // tokens not banned: once all are rejected nothing is left to draw
    for (let t = 0; t < row.length; t++) if (row[t] !== -Infinity) left++;
    for (let tries = 0; tries < Math.min(CONSTRAINT_TRIES, left); tries++) {
      const token = this.isGreedy() ? argmax(row) : this.choose(logSoftmaxInto(row, adjustedScratch));
      if (row[token] === -Infinity) break;
      if (constraint.allows(token)) return token;
      row[token] = -Infinity;
    }
    let any = false;
    for (let t = 0; t < row.length; t++) {
      if (row[t] === -Infinity) continue;
      if (constraint.allows(t)) any = true;
      else row[t] = -Infinity;
    }
    if (!any)
      throw new UsageError(
        "no token can continue the constrained output (the JSON schema cannot be completed within the nesting bound, or every allowed token is banned)",
      );
    return this.choose(logSoftmaxInto(row, adjustedScratch));
  }

  /** Ids kept by top-k → top-p → min-p, for a log-softmax vector. Sorted most likely first when top-k or top-p is on. */
  candidates(lp: Float64Array): number[] {
    return this.kept(lp) ?? Array.from(lp.keys());
  }

  /** As `candidates`, but null for "the whole vocabulary". */
  private kept(lp: Float64Array): number[] | null {
    const { topK, topP, minP } = this;
    if (!(topK > 0 && topK < lp.length) && topP >= 1 && minP <= 0) return null;
    const lpMax = lp[argmax(lp)];
    // min-p as a log-prob threshold: p_i >= minP * p_max.
    const minLp = minP > 0 ? lpMax + Math.log(minP) : -Infinity;
    let ids: number[];
    let mass = 1; // mass of the set top-p renormalizes over
    if (topK > 0 && topK < lp.length) {
      ids = topIds(lp, topK);
      mass = 0;
      for (const id of ids) mass += Math.exp(lp[id]);
    } else if (topP < 1) {
      // Avoid sorting the whole vocabulary: gather (sorted) the ids above a falling threshold until they hold topP of
      // the mass, or the threshold reaches min-p's, whose set is then the shorter prefix.
      // (the mass above each cut summed in place; only the final set sorted: a flat 102400-entry row had taken 20–54 ms
      // sorting every candidate set)
      for (let step = 1; ; step++) {
        let cut = lpMax - 3 * step;
        if (cut <= minLp || step > 250) cut = minLp;
        let m = 0;
        for (let i = 0; i < lp.length; i++) if (lp[i] >= cut) m += Math.exp(lp[i]);
        if (m >= topP || cut === minLp) {
          ids = above(lp, cut);
          break;
        }
      }
    } else if (minP > 0) {
      ids = [];
      for (let i = 0; i < lp.length; i++) if (lp[i] >= minLp) ids.push(i);
      return ids;
    } else return null;
    let keep = ids.length;
    if (topP < 1) {
      let cum = 0;
      for (let i = 0; i < ids.length; i++) {
        cum += Math.exp(lp[ids[i]]);
        if (cum >= topP * mass) {
          keep = i + 1;
          break;
        }
      }
    }
    for (let i = 1; i < keep; i++)
      if (lp[ids[i]] < minLp) {
        keep = i;
        break;
      }
    return ids.slice(0, keep);
  }

  /** Draw from the kept ids (null = all) with temperature applied. */
  private draw(lp: Float64Array, ids: number[] | null): number {
    // exp((lp_i - lp_max) / T) ∝ exp(logit_i / T), since lp = logits - const; the max token is always kept.
    let top = -Infinity;
    for (let i = 0; i < lp.length; i++) if (lp[i] > top) top = lp[i];
    const n = ids ? ids.length : lp.length;
    if (weights.length < n) weights = new Float64Array(n);
    const w = weights;
    const T = this.temperature;
    let total = 0;
    // (the whole vocabulary in a loop of its own: one without the id lookup runs ~1.5× faster)
    if (ids) for (let i = 0; i < n; i++) total += w[i] = Math.exp((lp[ids[i]] - top) / T);
    else for (let i = 0; i < n; i++) total += w[i] = Math.exp((lp[i] - top) / T);
    let r = this.rng.next() * total;
    let last = 0;
    for (let i = 0; i < n; i++) {
      if (w[i] > 0) last = i;
      r -= w[i];
      if (r < 0) return ids ? ids[i] : i;
    }
    return ids ? ids[last] : last; // rounding fallback: last id with non-zero weight
  }
}

export function createSampler(options: SamplerOptions = {}): Sampler {
  return new Sampler(options);
}

/** Index of the largest entry, lowest index on ties. */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

/** Ids with lp >= cut, sorted by descending lp then ascending id. */
function above(lp: Float64Array, cut: number): number[] {
  const ids: number[] = [];
  for (let i = 0; i < lp.length; i++) if (lp[i] >= cut) ids.push(i);
  return ids.sort((a, b) => (lp[a] > lp[b] || (lp[a] === lp[b] && a < b) ? -1 : 1));
}
