/**
 * Test vocabularies big enough to exercise the pre-tokenizers: byte-level BPE merges learned from a multilingual
 * corpus, written into tiny GGUFs (metadata + tensors of ds2-v3.gguf, tokenizer keys replaced, token_embd/output
 * resized) that llama.cpp loads, so its tokenizer can be the oracle.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { writeGGUF, type TensorToWrite } from "../../src/gguf/writer.js";
import { BYTE_TO_CHAR } from "../../src/tokenizer/unicode.js";
import { uniforms } from "./rng.js";

export const FIXTURE_DIR = new URL("../fixtures/models/", import.meta.url).pathname;
export const REPO_ROOT = new URL("../../", import.meta.url).pathname;

/** Multilingual training text: prose, code, numbers, whitespace runs, CJK, Hangul, kana, Cyrillic, Greek, Arabic, emoji. */
export const CORPUS = `
The quick brown fox jumps over the lazy dog. It's a well-known pangram; we've used it, they'll use it, I'd say you're right.
In 2024, the model processed 1,234,567 tokens in 3.14 seconds — that's 393,174.2 tokens/s!!! Isn't it?
DON'T SHOUT. I'M FINE. WE'LL SEE. THEY'VE GONE. YOU'RE LATE. HE'D KNOW.
    Indented line with four spaces.
		Two tabs, then text.
Trailing spaces here:     
Windows line\r\nendings\r\nhere.

def fibonacci(n: int) -> int:
    if n <= 1:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

const x = {a: 1, "b": [2, 3], c: null}; // comment
for (let i = 0; i < 100; i++) { sum += arr[i] * 2; }
if (a != b && c >= d || e === f) { console.log(\`value: \${x}\`); }
#include <stdio.h>
int main(void) { printf("hello, world\\n"); return 0; }
SELECT id, name FROM users WHERE age > 21 ORDER BY name;
https://example.com/path/to/page?query=value&other=123#anchor
user@example.org, 192.168.0.1, 0xDEADBEEF, 3.1415926535, 1e-10, -42, +7
Größe, Straße, Mädchen, Übung. Café, naïve, résumé, crème brûlée, façade, jalapeño, São Paulo.
Le cœur a ses raisons que la raison ne connaît point. ¿Dónde está la biblioteca? ¡Hola!
Съешь же ещё этих мягких французских булок, да выпей чаю. Москва — столица России.
Ξεσκεπάζω τὴν ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε! αβγδεζηθικλμνξοπρστυφχψω
我爱自然语言处理。今天天气很好，我们去公园散步吧！人工智能正在改变世界。中文分词是一个重要的问题。
日本語のテキストです。ひらがなとカタカナ、そして漢字を使います。東京は日本の首都です。コンピューター
한국어 텍스트입니다. 안녕하세요! 대한민국의 수도는 서울입니다. 감사합니다.
مرحبا بالعالم. اللغة العربية جميلة. ١٢٣٤٥٦٧٨٩٠
नमस्ते दुनिया। हिन्दी भाषा। ท่านสบายดีไหม
Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️ ✨🚀🔥 — fun!
Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = π ≈ 3.14159; √2 ≈ 1.41421; α+β=γ; ½ ¾ ⅓ Ⅻ ①②③
Full-width: ＡＢＣ　ｄｅｆ！？（テスト）１２３
Numbers: 1 22 333 4444 55555 666666 7777777 88888888 999999999 1234567890 3.5 0.001 100%
Mixed: abc123def 42nd 3rd 1st 2nd x86_64 utf-8 GPT-4o v1.2.3 2023-01-15T10:30:00Z
Punctuation runs: ... !!! ??? --- *** ### /// ((())) [[[]]] {{{}}} <<<>>> ''' """ \`\`\`
The the THE tHe. is is is. and and and. of of of. to to to. in in in.
`;

/** The corpus plus random mixed-script texts, so that a few thousand merges exist to be learned. */
function TRAINING_TEXT(): string {
  return CORPUS + "\n" + randomTexts(400, 7).join("\n");
}

/** Special tokens of the test vocabulary: [text, token_type]. */
export const TEST_SPECIALS: readonly (readonly [string, number])[] = [
  ["<｜begin▁of▁sentence｜>", 3],
  ["<｜end▁of▁sentence｜>", 3],
  ["<｜User｜>", 3],
  ["<｜Assistant｜>", 3],
  ["[gMASK]", 3],
  ["<sop>", 3],
  ["<|system|>", 3],
  ["<|user|>", 3],
  ["<|assistant|>", 3],
  ["<|observation|>", 3],
  ["<|endoftext|>", 3],
  ["<think>", 4],
  ["</think>", 4],
  ["<tool▁call>", 4],
];

function byteLevel(s: string): string {
  let out = "";
  for (const b of Buffer.from(s, "utf8")) out += BYTE_TO_CHAR[b];
  return out;
}

/**
 * Learn byte-level BPE merges. The corpus is split loosely (whitespace-prefixed non-space runs, and whitespace runs),
 * so merges cross the boundaries the real pre-tokenizers draw (letters/digits/punctuation/CJK): which regex splits
 * where then changes the ids.
 */
export function learnMerges(corpus: string, nMerges: number): string[] {
  const counts = new Map<string, number>();
  for (const m of corpus.matchAll(/\s?\S+|\s+/gu)) {
    const w = byteLevel(m[0]);
    counts.set(w, (counts.get(w) ?? 0) + 1);
  }
  const words: { syms: string[]; n: number }[] = [...counts].map(([w, n]) => ({ syms: [...w], n }));
  const pairCount = new Map<string, number>();
  const pairWords = new Map<string, Set<number>>();
  // max-heap on (count desc, pair asc), lazily invalidated
  const heap: [number, string][] = [];
  const better = (a: [number, string], b: [number, string]): boolean => a[0] > b[0] || (a[0] === b[0] && a[1] < b[1]);
  const push = (e: [number, string]): void => {
    let i = heap.length;
    heap.push(e);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!better(e, heap[p])) break;
      heap[i] = heap[p];
      i = p;
    }
    heap[i] = e;
  };
  const pop = (): [number, string] => {
    const top = heap[0];
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= heap.length) break;
        const r = l + 1;
        const c = r < heap.length && better(heap[r], heap[l]) ? r : l;
        if (!better(heap[c], last)) break;
        heap[i] = heap[c];
        i = c;
      }
      heap[i] = last;
    }
    return top;
  };
  const touched = new Set<string>();
  const account = (wi: number, sign: number): void => {
    const { syms, n } = words[wi];
    for (let i = 0; i + 1 < syms.length; i++) {
      const k = syms[i] + " " + syms[i + 1];
      pairCount.set(k, (pairCount.get(k) ?? 0) + sign * n);
      let set = pairWords.get(k);
      if (set === undefined) pairWords.set(k, (set = new Set()));
      if (sign > 0) set.add(wi);
      touched.add(k);
    }
  };
  const flush = (): void => {
    for (const k of touched) {
      const c = pairCount.get(k)!;
      if (c > 0) push([c, k]);
    }
    touched.clear();
  };
  words.forEach((_, wi) => account(wi, 1));
  flush();
  const merges: string[] = [];
  while (merges.length < nMerges && heap.length > 0) {
    const [c, best] = pop();
    if (pairCount.get(best) !== c || c <= 0) continue;
    merges.push(best);
    const sp = best.indexOf(" ");
    const a = best.slice(0, sp);
    const b = best.slice(sp + 1);
    for (const wi of [...pairWords.get(best)!]) {
      const w = words[wi];
      account(wi, -1);
      const s = w.syms;
      const out: string[] = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(s[i]);
      }
      w.syms = out;
      account(wi, 1);
    }
    pairWords.delete(best);
    flush();
  }
  return merges;
}

export interface TestVocab {
  readonly tokens: string[];
  readonly types: number[];
  readonly merges: string[];
}

/** specials (ids 0..) + the 256 byte tokens + one token per merge. */
export function buildVocab(nMerges: number): TestVocab {
  const tokens: string[] = [];
  const types: number[] = [];
  for (const [t, ty] of TEST_SPECIALS) {
    tokens.push(t);
    types.push(ty);
  }
  for (let b = 0; b < 256; b++) {
    tokens.push(BYTE_TO_CHAR[b]);
    types.push(1);
  }
  const merges = learnMerges(TRAINING_TEXT(), nMerges);
  const seen = new Set(tokens);
  for (const m of merges) {
    const t = m.replace(" ", "");
    if (seen.has(t)) continue;
    seen.add(t);
    tokens.push(t);
    types.push(1);
  }
  return { tokens, types, merges };
}

function u32(value: number): GGUFMetadataEntry {
  return { type: GGUFValueType.UINT32, value };
}

/** Write a GGUF: ds2-v3.gguf with the given tokenizer (pre, vocab, special ids) and resized embeddings. */
export function writeTokenizerGGUF(
  path: string,
  pre: string,
  vocab: TestVocab,
  extra: Record<string, GGUFMetadataEntry> = {},
): void {
  const base = GGUFFile.open(join(FIXTURE_DIR, "ds2-v3.gguf"));
  try {
    const meta = new Map<string, GGUFMetadataEntry>();
    for (const [k, v] of base.metadata.entries) {
      if (k.startsWith("tokenizer.")) continue;
      meta.set(k, v);
    }
    const n = vocab.tokens.length;
    if (meta.has("deepseek2.vocab_size")) meta.set("deepseek2.vocab_size", u32(n));
    meta.set("tokenizer.ggml.model", { type: GGUFValueType.STRING, value: "gpt2" });
    meta.set("tokenizer.ggml.pre", { type: GGUFValueType.STRING, value: pre });
    meta.set("tokenizer.ggml.tokens", {
      type: GGUFValueType.ARRAY,
      value: { elementType: GGUFValueType.STRING, values: vocab.tokens },
    });
    meta.set("tokenizer.ggml.token_type", {
      type: GGUFValueType.ARRAY,
      value: { elementType: GGUFValueType.INT32, values: vocab.types },
    });
    meta.set("tokenizer.ggml.merges", {
      type: GGUFValueType.ARRAY,
      value: { elementType: GGUFValueType.STRING, values: vocab.merges },
    });
    meta.set("tokenizer.ggml.bos_token_id", u32(0));
    meta.set("tokenizer.ggml.eos_token_id", u32(1));
    meta.set("tokenizer.ggml.add_bos_token", { type: GGUFValueType.BOOL, value: true });
    for (const [k, v] of Object.entries(extra)) meta.set(k, v);
    const tensors: TensorToWrite[] = [];
    for (const info of base.tensors.values()) {
      if (info.name === "token_embd.weight" || info.name === "output.weight") {
        const ne0 = info.ne[0];
        const data = new Float32Array(ne0 * n);
        for (let i = 0; i < data.length; i++) data[i] = Math.sin(i * 0.37) * 0.1;
        tensors.push({ name: info.name, ne: [ne0, n], type: GGMLType.F32, data: new Uint8Array(data.buffer) });
      } else {
        tensors.push({ name: info.name, ne: info.ne, type: info.type, data: base.readBytes(info) });
      }
    }
    writeGGUF(path, meta, tensors);
  } finally {
    base.close();
  }
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), "latent-tok-"));
}

/** llama.cpp's ids for each text (child process; add_special = false). */
export function llamaTokenize(modelPath: string, texts: readonly string[], special: boolean, dir: string): number[][] {
  const file = join(dir, `texts-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(texts));
  const out = execFileSync(
    process.execPath,
    [join(REPO_ROOT, "test/helpers/llama-tokenize.mjs"), modelPath, file, ...(special ? ["--special"] : [])],
    {
      cwd: REPO_ROOT,
      maxBuffer: 1 << 28,
    },
  );
  return (JSON.parse(out.toString("utf8")) as { ids: number[][] }).ids;
}

export interface LlamaIds {
  readonly ids: number[][];
  readonly idsSpecial: number[][];
}

/** llama.cpp's ids (parse_special off and on) for several models, from one child process (one library load). */
export function llamaTokenizeJobs(
  jobs: readonly { model: string; texts: readonly string[] }[],
  dir: string,
): LlamaIds[] {
  const file = join(dir, `jobs-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(jobs));
  const out = execFileSync(process.execPath, [join(REPO_ROOT, "test/helpers/llama-tokenize.mjs"), "--jobs", file], {
    cwd: REPO_ROOT,
    maxBuffer: 1 << 28,
  });
  return JSON.parse(out.toString("utf8")) as LlamaIds[];
}

/** Deterministic uniform draws (mulberry32). */
export { uniforms as rng };

const POOLS: readonly string[] = [
  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "0123456789",
  "٠١٢٣٤٥٦٧٨٩²³¹½¼⅓ⅫⅣ①②",
  " ",
  "  \t",
  "\n\r",
  "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  "‘’“”–—…·•€£¥©®™°±×÷≤≥≠∞∑√∫",
  "éèêëàâäôöûüçñßøåæœÉÀÇÑÖÜ",
  "\u0301\u0308\u0327\u0300", // combining marks
  "我爱自然语言处理中文分词人工智能世界天气公园東京漢字",
  "ひらがなカタカナテストコンピューターゟ゠ヿ",
  "한국어텍스트안녕하세요가힣ㄱㅎ",
  "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГД",
  "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔ",
  "مرحبابالعالم",
  "नमस्तेदुनिया",
  "😀😃👍🏽🚀🔥❤️✨🇯🇵",
  "\u00a0\u3000\u2003\u0085\u2028\ufeff\u200b\u1680\u202f", // exotic whitespace / format chars
  "ＡＢＣｄｅｆ！？（）１２３",
  "\u{10400}\u{10428}\u{104b0}\u{1e900}\u{118a0}", // astral letters of the deepseek-llm class (Deseret, Osage, Adlam, Warang Citi)
  "µƻǅʔʰͰΆϴҀԱႠᏸᲐᴀᵫḀℂℇℊΩK℮ⅅↃⰀꙀꚀꜢꭰﬀﬓ", // edges of the deepseek-llm letter class
  "'s't're've'm'll'd'S'T'RE'VE'M'LL'D",
];

/** Random texts mixing scripts, digits, punctuation and whitespace; some are plain corpus slices. */
export function randomTexts(count: number, seed: number): string[] {
  const r = uniforms(seed);
  const corpusWords = CORPUS.split(/(\s+)/u).filter((w) => w.length > 0);
  const texts: string[] = [];
  for (let t = 0; t < count; t++) {
    const parts: string[] = [];
    const nParts = 1 + Math.floor(r() * 12);
    for (let p = 0; p < nParts; p++) {
      if (r() < 0.35) {
        parts.push(corpusWords[Math.floor(r() * corpusWords.length)]);
        continue;
      }
      const pool = [...POOLS[Math.floor(r() * POOLS.length)]];
      const len = 1 + Math.floor(r() * 6);
      for (let i = 0; i < len; i++) parts.push(pool[Math.floor(r() * pool.length)]);
    }
    texts.push(parts.join(""));
  }
  return texts;
}
