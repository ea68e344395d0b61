import type { StreamingDecoder } from "../tokenizer/index.js";

/** What one token released: its text, and the stop string it completed (the text is then cut before it). */
export interface TextPiece {
  readonly piece: string;
  readonly hit?: string;
}

/**
 * Generated text, released as tokens arrive: an incomplete UTF-8 tail (the decoder's) and any suffix that may start a
 * stop string are held back until a later token settles them; a completed stop string cuts the text before it.
 */
export class TextStream {
  /** everything decoded so far (complete characters), cut before a stop string once one is hit */
  text = "";
  /** text[0, emitted) has been released */
  emitted = 0;
  private readonly stops: readonly string[];

  constructor(
    private readonly decoder: StreamingDecoder,
    stops: readonly string[] = [],
  ) {
    this.stops = stops.filter((s) => s.length > 0);
  }

  push(id: number): TextPiece {
    const before = this.text.length;
    this.text += this.decoder.push(id);
    let release = this.text.length;
    let hit: string | undefined;
    if (this.stops.length > 0) {
      let at = -1;
      // a stop string can only end in the new text: search from where it could have begun
      for (const stop of this.stops) {
        const i = this.text.indexOf(stop, Math.max(0, before - stop.length + 1));
        if (i >= 0 && (at < 0 || i < at)) {
          at = i;
          hit = stop;
        }
      }
      if (hit !== undefined) {
        this.text = this.text.slice(0, at);
        release = at;
      } else release = this.text.length - this.heldBack();
    }
    const piece = this.text.slice(this.emitted, Math.max(this.emitted, release));
    this.emitted = Math.max(this.emitted, release);
    return hit !== undefined ? { piece, hit } : { piece };
  }

  /** Length of the longest suffix of the text that is a proper prefix of a stop string: that much must wait. */
  private heldBack(): number {
    let hold = 0;
    const s = this.text;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, s.length); k > hold; k--) {
        if (s.endsWith(stop.slice(0, k))) {
          hold = k;
          break;
        }
      }
    }
    return hold;
  }

  /**
   * The end: the tail not yet released. Unless a stop string cut the text (`stopped`), the held-back text belongs to
   * it: a partial stop-string match, and an incomplete UTF-8 sequence (as U+FFFD, the decoder's flush).
   */
  end(stopped: boolean): string {
    if (!stopped) this.text += this.decoder.flush();
    const tail = this.text.slice(this.emitted);
    this.emitted = this.text.length;
    return tail;
  }
}

/** What a request's text and stop conditions need of a tokenizer. */
export interface TextTokenizer {
  isEndOfGeneration(id: number): boolean;
  createDecoder(opts?: { skipSpecial?: boolean }): StreamingDecoder;
}

/** A request's conditions for ending besides its limits, and how its text is written. */
export interface StopOptions {
  /** stop when the generated text contains one of these (cut before it) */
  readonly stop?: readonly string[];
  /** further token ids that end generation, besides the tokenizer's end-of-generation set */
  readonly stopTokens?: readonly number[];
  /** generate past end-of-generation tokens and stop ids (they are then ordinary tokens) */
  readonly ignoreEog?: boolean;
  /** write the text of control tokens; default false (dropped from the text) */
  readonly special?: boolean;
}

/** One request's generated text (a TextStream over the tokenizer's decoder) and the token ids that end it. */
export class GeneratedText extends TextStream {
  private readonly stopTokens: ReadonlySet<number>;
  private readonly ignoreEog: boolean;

  constructor(
    private readonly tokenizer: TextTokenizer,
    opts: StopOptions,
  ) {
    super(tokenizer.createDecoder({ skipSpecial: !(opts.special ?? false) }), opts.stop ?? []);
    this.stopTokens = new Set(opts.stopTokens ?? []);
    this.ignoreEog = opts.ignoreEog ?? false;
  }

  /** Whether `id` ends generation instead of being emitted: an end-of-generation token or a stop id, unless ignoreEog. */
  endsBefore(id: number): boolean {
    return !this.ignoreEog && (this.tokenizer.isEndOfGeneration(id) || this.stopTokens.has(id));
  }
}
