/**
 * Byte-level BPE merge loop, as llama.cpp's `llm_tokenizer_bpe_session::tokenize` runs it: every byte starts as one
 * symbol, the adjacent pair with the lowest merge rank is merged first (ties: leftmost), until no pair has a rank.
 *
 * Strings are interned to integers: vocabulary entries keep their token id, other strings met in the merge list get
 * ids from `nVocab` up. A merge is a (left id, right id) → (rank, result id) table lookup.
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
      if (!less(b, items[p]!)) break;
      items[i] = items[p]!;
      i = p;
    }
    items[i] = b;
  }

  pop(): Bigram {
    const items = this.items;
    const top = items[0]!;
    const last = items.pop()!;
    const n = items.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = r < n && less(items[r]!, items[l]!) ? r : l;
        if (!less(items[c]!, last)) break;
        items[i] = items[c]!;
        i = c;
      }
      items[i] = last;
    }
    return top;
  }
}

export class BpeModel {
  /** text → id (vocabulary ids first, then extra interned strings) */
  private readonly intern = new Map<string, number>();
  private readonly internText: string[] = [];
  private readonly stride: number;
  /** (left * stride + right) → rank */
  private readonly ranks = new Map<number, number>();
  /** rank → result id */
  private readonly results: Int32Array;
  /** char code of a byte-level char → its interned id */
  private readonly charIds: Int32Array;
  private readonly nVocab: number;

  constructor(
    tokens: readonly string[],
    merges: readonly string[],
    private readonly textToToken: ReadonlyMap<string, number>,
  ) {
    const nVocab = tokens.length;
    for (let i = 0; i < nVocab; i++) this.internText.push(tokens[i]!);
    for (const [text, id] of textToToken) this.intern.set(text, id);
    const idOf = (s: string): number => {
      let id = this.intern.get(s);
      if (id === undefined) {
        id = this.internText.length;
        this.intern.set(s, id);
        this.internText.push(s);
      }
      return id;
    };
    this.charIds = new Int32Array(0x144).fill(-1);
    for (let b = 0; b < 256; b++) this.charIds[BYTE_TO_CHAR[b]!.charCodeAt(0)] = idOf(BYTE_TO_CHAR[b]!);
    const parsed: [number, number, number][] = [];
    for (const m of merges) {
      const pos = m.indexOf(" ", 1);
      if (pos < 0) continue;
      const a = m.slice(0, pos);
      const b = m.slice(pos + 1);
      parsed.push([idOf(a), idOf(b), idOf(a + b)]);
    }
    this.stride = this.internText.length;
    this.results = new Int32Array(parsed.length);
    parsed.forEach(([a, b, r], rank) => {
      const key = a * this.stride + b;
      if (!this.ranks.has(key)) this.ranks.set(key, rank); // llama.cpp: bpe_ranks.emplace keeps the first
      this.results[rank] = r;
    });
    this.nVocab = nVocab;
  }

  /** Token ids of one pre-tokenized piece, given as GPT-2 byte-level characters (one char per byte). */
  encodeWord(word: string, out: number[]): void {
    const n = word.length;
    if (n === 0) return;
    const ids = new Int32Array(n);
    const charIds = this.charIds;
    for (let i = 0; i < n; i++) ids[i] = charIds[word.charCodeAt(i)]!;
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
    const stride = this.stride;
    const ranks = this.ranks;
    const tryAdd = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const lid = ids[left]!;
      const rid = ids[right]!;
      if (lid < 0 || rid < 0) return;
      const rank = ranks.get(lid * stride + rid);
      if (rank === undefined) return;
      heap.push({ rank, left, right, leftId: lid, rightId: rid });
    };
    for (let i = 1; i < n; i++) tryAdd(i - 1, i);
    while (heap.size > 0) {
      const b = heap.pop();
      // outdated: one side was merged away or changed since the bigram was queued
      if (ids[b.left] !== b.leftId || ids[b.right] !== b.rightId || next[b.left] !== b.right) continue;
      ids[b.left] = this.results[b.rank]!;
      ids[b.right] = -2; // removed
      const rn = next[b.right]!;
      next[b.left] = rn;
      if (rn >= 0) prev[rn] = b.left;
      tryAdd(prev[b.left]!, b.left);
      tryAdd(b.left, rn);
    }
  }

  private emit(ids: Int32Array, out: number[]): void {
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (id === -2) continue;
      if (id >= 0 && id < this.nVocab) {
        out.push(id);
        continue;
      }
      // llama.cpp: a symbol that is not a token falls back to its single *ASCII* byte-level chars that are tokens
      const text = id >= 0 ? this.internText[id]! : "";
      for (let k = 0; k < text.length; k++) {
        const c = text.charCodeAt(k);
        if (c >= 0x80) continue;
        const t = this.textToToken.get(text[k]!);
        if (t !== undefined) out.push(t);
      }
    }
  }
}
