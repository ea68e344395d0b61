import { JsonState } from "./recognizer.js";
import type { SchemaNode } from "./schema.js";

/**
 * A rule on which tokens a sequence may choose next (constrained decoding). The sampler asks `allows` of its likeliest
 * candidates first and tells `accept` the one it chose.
 */
export interface TokenConstraint {
  allows(token: number): boolean;
  accept(token: number): void;
}

/** What a JSON constraint needs of a tokenizer: each token's bytes and which tokens end generation. */
export interface TokenPieces {
  readonly vocabSize: number;
  tokenBytes(id: number, skipSpecial?: boolean): Uint8Array;
  isEndOfGeneration(id: number): boolean;
}

/** A vocabulary's decoded bytes, computed once per tokenizer (a vocabulary is ~100k tokens: too many to decode per request). */
interface Vocab {
  readonly pieces: readonly Uint8Array[];
  readonly eog: ReadonlySet<number>;
}
const vocabs = new WeakMap<TokenPieces, Vocab>();

function vocabOf(tokenizer: TokenPieces): Vocab {
  let v = vocabs.get(tokenizer);
  if (v === undefined) {
    const pieces: Uint8Array[] = [];
    const eog = new Set<number>();
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      // control tokens decode to nothing: they could never advance the value, so they are never allowed
      pieces.push(tokenizer.tokenBytes(id, true));
      if (tokenizer.isEndOfGeneration(id)) eog.add(id);
    }
    v = { pieces, eog };
    vocabs.set(tokenizer, v);
  }
  return v;
}

/**
 * Tokens whose bytes keep the text a viable prefix of a JSON value matching `node`; an end-of-generation token only
 * once the value is complete. Answers are cached for the current step (the sampler may ask again after a rejection).
 */
export class JsonConstraint implements TokenConstraint {
  private readonly vocab: Vocab;
  private state: JsonState;
  /** token → state after it, for this step (null: not allowed) */
  private readonly tried = new Map<number, JsonState | null>();
  /**
   * byte → 1 may come next, 2 may not, 0 not asked yet, for this step: most tokens of a vocabulary are refused by
   * their first byte, which costs one lookup instead of a walk over the token's bytes (a whole-vocabulary mask
   * between JSON tokens went from ~100 ms to a few on a 100k vocabulary)
   */
  private readonly firstBytes = new Uint8Array(256);

  constructor(tokenizer: TokenPieces, node: SchemaNode) {
    this.vocab = vocabOf(tokenizer);
    this.state = JsonState.start(node);
  }

  allows(token: number): boolean {
    if (this.vocab.eog.has(token)) return this.state.complete;
    return this.after(token) !== null;
  }

  accept(token: number): void {
    if (this.vocab.eog.has(token)) return;
    const next = this.after(token);
    if (next === null) throw new Error(`token ${token} does not continue the JSON value`);
    this.state = next;
    this.tried.clear();
    this.firstBytes.fill(0);
  }

  /** Whether the text accepted so far is a complete value. */
  get complete(): boolean {
    return this.state.complete;
  }

  private mayStartWith(byte: number): boolean {
    if (this.firstBytes[byte] === 0) this.firstBytes[byte] = this.state.feed(Uint8Array.of(byte)) !== null ? 1 : 2;
    return this.firstBytes[byte] === 1;
  }

  private after(token: number): JsonState | null {
    const first = this.vocab.pieces[token]?.[0];
    if (first === undefined || !this.mayStartWith(first)) return null;
    let next = this.tried.get(token);
    if (next === undefined) {
      next = this.state.feed(this.vocab.pieces[token]);
      this.tried.set(token, next);
    }
    return next;
  }
}
