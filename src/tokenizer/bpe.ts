/**
 * Byte-level BPE merge loop, as llama.cpp's `llm_tokenizer_bpe_session::tokenize` runs it: every byte starts as one
 * symbol, the adjacent pair with the lowest merge rank is merged first (ties: leftmost), until no pair has a rank.
 *
 * Strings are interned to integers: vocabulary entries keep their token id, other strings met in the merge list get
 * ids from `nVocab` up. A merge is a (left id, right id) → rank hash lookup, and rank → result id.
 */
import { BYTE_TO_CHAR } from "./unicode.js";

interface Bigram {
  rank: number;
  left: number;
  right: number;
  leftId: number;
  rightId: number;
}

function less(a: Bigram, b: Bigram): boolean {
  return a.rank < b.rank || (a.rank === b.rank && a.left < b.left);
}

/** Minimal binary heap on (rank, left). */
class BigramHeap {
  private readonly items: Bigram[] = [];

  get size(): number {
    return this.items.length;
  }

  push(b: Bigram): void {
    const items = this.items;
    let i = items.length;
    items.push(b);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(b, items[p])) break;
      items[i] = items[p];
      i = p;
    }
    items[i] = b;
  }

  pop(): Bigram {
    const items = this.items;
    const top = items[0];
    const last = items.pop()!;
    const n = items.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = r < n && less(items[r], items[l]) ? r : l;
        if (!less(items[c], last)) break;
        items[i] = items[c];
        i = c;
      }
      items[i] = last;
    }
    return top;
  }
}

/** Open-addressing hash table (int32 pair → int32), far faster than a Map keyed by non-Smi numbers or strings. */
class PairTable {
  private readonly mask: number;
  private readonly ka: Int32Array;
  private readonly kb: Int32Array;
  private readonly vals: Int32Array;

  constructor(capacity: number) {
    let size = 16;
    while (size < capacity * 2) size *= 2;
    this.mask = size - 1;
    this.ka = new Int32Array(size).fill(-1);
    this.kb = new Int32Array(size);
    this.vals = new Int32Array(size);
  }

  private slot(a: number, b: number): number {
    return (Math.imul(a, 0x9e3779b1) ^ Math.imul(b + 0x7f4a7c15, 0x85ebca77)) & this.mask;
  }

  /** set if absent (returns false when the key was already there) */
  add(a: number, b: number, v: number): boolean {
    for (let i = this.slot(a, b); ; i = (i + 1) & this.mask) {
      const k = this.ka[i];
      if (k === -1) {
        this.ka[i] = a;
        this.kb[i] = b;
        this.vals[i] = v;
        return true;
      }
      if (k === a && this.kb[i] === b) return false;
    }
  }

  /** -1 when absent */
  get(a: number, b: number): number {
    for (let i = this.slot(a, b); ; i = (i + 1) & this.mask) {
      const k = this.ka[i];
      if (k === -1) return -1;
      if (k === a && this.kb[i] === b) return this.vals[i];
    }
  }
}

export class BpeModel {
  /** strings that are not vocabulary entries (merge parts/results, byte chars missing from the vocabulary), ids from nVocab up */
  private readonly extra = new Map<string, number>();
  private readonly extraText: string[] = [];
  /** (left id, right id) → rank */
  private readonly ranks: PairTable;
  /** rank → result id */
  private readonly results: Int32Array;
  /** char code of a byte-level char → its id */
  private readonly charIds: Int32Array;
  private readonly nVocab: number;

  constructor(
    nVocab: number,
    merges: readonly string[],
    private readonly textToToken: ReadonlyMap<string, number>,
  ) {
    this.nVocab = nVocab;
    const idOf = (s: string): number => {
      let id = textToToken.get(s) ?? this.extra.get(s);
      if (id === undefined) {
        id = nVocab + this.extraText.length;
        this.extra.set(s, id);
        this.extraText.push(s);
      }
      return id;
    };
    this.charIds = new Int32Array(0x144).fill(-1);
    for (let b = 0; b < 256; b++) this.charIds[BYTE_TO_CHAR[b].charCodeAt(0)] = idOf(BYTE_TO_CHAR[b]);
    this.ranks = new PairTable(merges.length);
    this.results = new Int32Array(merges.length);
    for (let rank = 0; rank < merges.length; rank++) {
      const m = merges[rank];
      const pos = m.indexOf(" ", 1);
      if (pos < 0) continue;
      const a = m.slice(0, pos);
      const b = m.slice(pos + 1);
      // llama.cpp: bpe_ranks.emplace keeps the first rank of a repeated pair
      this.ranks.add(idOf(a), idOf(b), rank);
      this.results[rank] = idOf(a + b);
    }
  }

  private textOf(id: number): string {
    return id >= this.nVocab ? this.extraText[id - this.nVocab] : "";
  }
  /** Token ids of one pre-tokenized piece, given as GPT-2 byte-level characters (one char per byte). */
  encodeWord(word: string, out: number[]): void {
    const n = word.length;
    if (n === 0) return;
    const ids = new Int32Array(n);
    const charIds = this.charIds;
    for (let i = 0; i < n; i++) ids[i] = charIds[word.charCodeAt(i)];
    if (n > 1) this.merge(ids, n);
    this.emit(ids, out);
  }

  private merge(ids: Int32Array, n: number): void {
    const prev = new Int32Array(n);
    const next = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const heap = new BigramHeap();
    const ranks = this.ranks;
    const tryAdd = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const lid = ids[left];
      const rid = ids[right];
      if (lid < 0 || rid < 0) return;
      const rank = ranks.get(lid, rid);
      if (rank < 0) return;
      heap.push({ rank, left, right, leftId: lid, rightId: rid });
    };
    for (let i = 1; i < n; i++) tryAdd(i - 1, i);
    while (heap.size > 0) {
      const b = heap.pop();
      // outdated: one side was merged away or changed since the bigram was queued
      if (ids[b.left] !== b.leftId || ids[b.right] !== b.rightId || next[b.left] !== b.right) continue;
      ids[b.left] = this.results[b.rank];
      ids[b.right] = -2; // removed
      const rn = next[b.right];
      next[b.left] = rn;
      if (rn >= 0) prev[rn] = b.left;
      tryAdd(prev[b.left], b.left);
      tryAdd(b.left, rn);
    }
  }

  private emit(ids: Int32Array, out: number[]): void {
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (id === -2) continue;
      if (id >= 0 && id < this.nVocab) {
        out.push(id);
        continue;
      }
      // llama.cpp: a symbol that is not a token falls back to its single *ASCII* byte-level chars that are tokens
      const text = id >= 0 ? this.textOf(id) : "";
      for (let k = 0; k < text.length; k++) {
        const c = text.charCodeAt(k);
        if (c >= 0x80) continue;
        const t = this.textToToken.get(text[k]);
        if (t !== undefined) out.push(t);
      }
    }
  }
}
