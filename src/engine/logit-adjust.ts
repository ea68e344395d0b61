import { UsageError } from "../util/errors.js";

/** Changes made to a logits row before the sampler's filters and draw (OpenAI's and vLLM's request fields). */
export interface LogitAdjustOptions {
  /** token id → bias added to its logit; a bias of -100 bans the token (its logit becomes -Infinity) */
  readonly logitBias?: ReadonlyMap<number, number>;
  /** OpenAI: logit[t] -= presencePenalty when t was generated at least once. 0 = off */
  readonly presencePenalty?: number;
  /** OpenAI: logit[t] -= frequencyPenalty × (times t was generated). 0 = off */
  readonly frequencyPenalty?: number;
  /** HF/vLLM: for t in prompt or output, logit /= p when > 0, else logit *= p. 1 = off */
  readonly repetitionPenalty?: number;
  /** the prompt's ids, which the repetition penalty counts as seen */
  readonly promptTokens?: readonly number[];
}

/** The bias that bans a token, as OpenAI documents ("-100 should result in a ban"). */
export const BAN_BIAS = -100;

/**
 * Applies logit_bias, then the repetition penalty, then the frequency and presence penalties — vLLM's order
 * (logits processors, then apply_all_penalties) — to a copy of each row; `observe` counts each generated token.
 * Frequency and presence count generated tokens only; repetition counts prompt and generated tokens.
 */
export class LogitAdjuster {
  private readonly bias: readonly [number, number][];
  private readonly presence: number;
  private readonly frequency: number;
  private readonly repetition: number;
  /** generated token → count */
  private readonly counts = new Map<number, number>();
  /** prompt or generated tokens (repetition penalty) */
  private readonly seen = new Set<number>();
  private row = new Float64Array(0);

  constructor(o: LogitAdjustOptions) {
    this.presence = o.presencePenalty ?? 0;
    this.frequency = o.frequencyPenalty ?? 0;
    this.repetition = o.repetitionPenalty ?? 1;
    if (!Number.isFinite(this.presence)) throw new UsageError(`presencePenalty must be finite, got ${this.presence}`);
    if (!Number.isFinite(this.frequency))
      throw new UsageError(`frequencyPenalty must be finite, got ${this.frequency}`);
    if (!(Number.isFinite(this.repetition) && this.repetition > 0))
      throw new UsageError(`repetitionPenalty must be a finite number > 0, got ${this.repetition}`);
    this.bias = [...(o.logitBias ?? new Map<number, number>())];
    for (const [id, b] of this.bias) {
      if (!Number.isSafeInteger(id) || id < 0) throw new UsageError(`logitBias: ${id} is not a token id`);
      if (!Number.isFinite(b)) throw new UsageError(`logitBias[${id}] must be finite, got ${b}`);
    }
    if (this.repetition !== 1) for (const t of o.promptTokens ?? []) this.seen.add(t);
  }

  /** Whether any adjustment is on (otherwise rows pass unchanged and the device may choose tokens). */
  get active(): boolean {
    return this.bias.length > 0 || this.presence !== 0 || this.frequency !== 0 || this.repetition !== 1;
  }

  /** The adjusted copy of `logits` (a buffer reused by the next call). */
  apply(logits: Float32Array | Float64Array): Float64Array {
    if (this.row.length !== logits.length) this.row = new Float64Array(logits.length);
    const row = this.row;
    row.set(logits);
    for (const [id, b] of this.bias) {
      if (id >= row.length) throw new UsageError(`logitBias: token id ${id} is outside the vocabulary (${row.length})`);
      row[id] = b <= BAN_BIAS ? -Infinity : row[id] + b;
    }
    const p = this.repetition;
    if (p !== 1) {
      for (const t of this.seen) {
        if (t >= row.length) continue;
        const x = row[t];
        row[t] = x > 0 ? x / p : x * p;
      }
    }
    if (this.presence !== 0 || this.frequency !== 0) {
      for (const [t, n] of this.counts) if (t < row.length) row[t] = row[t] - this.frequency * n - this.presence;
    }
    return row;
  }

  /** A token was generated. */
  observe(token: number): void {
    this.counts.set(token, (this.counts.get(token) ?? 0) + 1);
    if (this.repetition !== 1) this.seen.add(token);
  }
}
