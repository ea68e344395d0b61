import assert from "node:assert/strict";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { GGUFFile } from "../../src/gguf/file.js";
import { Metadata } from "../../src/gguf/metadata.js";
import { GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { LatentError } from "../../src/util/errors.js";
import { buildVocab, CORPUS, FIXTURE_DIR, randomTexts, rng, type TestVocab } from "../helpers/tokenizer-fixtures.js";

const UNICODE_TEXTS: readonly string[] = [
  "",
  "plain ascii text",
  "我爱自然语言处理，今天天气很好。",
  "日本語のテキスト、ひらがなカタカナ。한국어 텍스트입니다.",
  "😀👍🏽👨‍👩‍👧‍👦🇯🇵❤️✨🚀",
  "Café naïve résumé e\u0301 a\u0308 Größe Straße",
  "1 22 333 4444 55555 1234567890 3.14159 ١٢٣",
  "   \t\t\n\n\n   \r\n  \u00a0\u3000",
  "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
  "Привет мир Καλημέρα مرحبا नमस्ते",
  "\u{10400}\u{1e900}\u{1f600}\u{20000}",
  "lone surrogate-free ∀x∈ℝ ½ Ⅻ",
  CORPUS,
];

function tokenizerOf(
  vocab: TestVocab,
  pre: string,
  extra: Partial<ConstructorParameters<typeof Tokenizer>[0]> = {},
): Tokenizer {
  return new Tokenizer({
    tokens: vocab.tokens,
    tokenTypes: vocab.types,
    merges: vocab.merges,
    pre,
    bosId: 0,
    eosId: 1,
    addBos: true,
    ...extra,
  });
}

function metaOf(entries: Record<string, GGUFMetadataEntry>): Metadata {
  return new Metadata(new Map(Object.entries(entries)));
}

describe("Tokenizer", () => {
  let vocab: TestVocab;
  before(() => {
    vocab = buildVocab(4000);
  });

  test("decode(encode(text)) is the text, for every pre-tokenizer and varied Unicode", () => {
    for (const pre of ["deepseek-llm", "deepseek-v3", "glm4", "kimi-k2"]) {
      const tok = tokenizerOf(vocab, pre);
      for (const text of [...UNICODE_TEXTS, ...randomTexts(200, 11)]) {
        const ids = tok.encode(text, { addSpecial: false });
        assert.equal(tok.decode(ids), text, `${pre}: ${JSON.stringify(text)}`);
      }
    }
  });

  test("kit model round trip (300-token vocabulary)", () => {
    const file = GGUFFile.open(join(FIXTURE_DIR, "ds2-v3.gguf"));
    const tok = Tokenizer.fromMetadata(file.metadata);
    file.close();
    assert.equal(tok.vocabSize, 300);
    assert.equal(tok.bosId, 0);
    assert.equal(tok.eosId, 1);
    assert.equal(tok.tokenText(0), "<｜begin▁of▁sentence｜>");
    for (const text of UNICODE_TEXTS) assert.equal(tok.decode(tok.encode(text, { addSpecial: false })), text);
    assert.deepEqual(tok.encode("hi").slice(0, 1), [0], "add_bos_token = true adds BOS");
    assert.ok(tok.isEndOfGeneration(1));
    assert.ok(!tok.isEndOfGeneration(0));
  });

  test("merges are used: common words become few tokens", () => {
    const tok = tokenizerOf(vocab, "deepseek-v3");
    const ids = tok.encode(" the quick brown fox", { addSpecial: false });
    assert.ok(ids.length <= 8, `got ${ids.length} tokens`);
    assert.ok(tok.encode(CORPUS, { addSpecial: false }).length < Buffer.byteLength(CORPUS) / 2);
  });

  test("BOS / EOS follow add_bos_token / add_eos_token and addSpecial", () => {
    const tok = tokenizerOf(vocab, "deepseek-v3", { addEos: true });
    const ids = tok.encode("Hello");
    assert.equal(ids[0], 0);
    assert.equal(ids[ids.length - 1], 1);
    assert.deepEqual(tok.encode("Hello", { addSpecial: false }), ids.slice(1, -1));
    assert.deepEqual(tok.encode(""), [0, 1]);
    assert.deepEqual(tok.encode("", { addSpecial: false }), []);
    const noBos = tokenizerOf(vocab, "deepseek-v3", { bosId: undefined, addBos: true });
    assert.throws(() => noBos.encode("x"), LatentError);
  });

  test("special tokens: control tokens only with parseSpecial, user-defined always, longest match first", () => {
    const tok = tokenizerOf(vocab, "deepseek-v3");
    const id = (t: string): number => tok.tokenId(t)!;
    const text = "<｜User｜>hi<think>x</think><｜end▁of▁sentence｜>";
    const on = tok.encode(text, { addSpecial: false, parseSpecial: true });
    assert.equal(on[0], id("<｜User｜>"));
    assert.ok(on.includes(id("<think>")) && on.includes(id("</think>")));
    assert.equal(on[on.length - 1], id("<｜end▁of▁sentence｜>"));
    const off = tok.encode(text, { addSpecial: false, parseSpecial: false });
    assert.ok(
      !off.includes(id("<｜User｜>")) && !off.includes(id("<｜end▁of▁sentence｜>")),
      "control tokens stay text",
    );
    assert.ok(
      off.includes(id("<think>")) && off.includes(id("</think>")),
      "user-defined tokens are always split out (llama.cpp)",
    );
    assert.equal(tok.decode(off), text);
    assert.equal(tok.decode(on), text);
    // "</think>" must not be split as "<" + ... + "think>": the longer token wins where both could match
    const nested = tok.encode("</think><think>", { addSpecial: false });
    assert.deepEqual(nested, [id("</think>"), id("<think>")]);
  });

  test("decode can drop control tokens", () => {
    const tok = tokenizerOf(vocab, "deepseek-v3");
    const ids = tok.encode("<｜User｜>hi<｜Assistant｜>", { addSpecial: true, parseSpecial: true });
    assert.equal(tok.decode(ids), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
    assert.equal(tok.decode(ids, { skipSpecial: true }), "hi");
  });

  test("streaming decoder holds incomplete UTF-8 and equals decode", () => {
    // a byte-only vocabulary: every multi-byte character arrives over several tokens
    const bytesOnly: TestVocab = {
      tokens: vocab.tokens.slice(0, 14 + 256),
      types: vocab.types.slice(0, 14 + 256),
      merges: [],
    };
    for (const v of [bytesOnly, vocab]) {
      const tok = tokenizerOf(v, "deepseek-v3");
      for (const text of [...UNICODE_TEXTS, ...randomTexts(100, 5)]) {
        const ids = tok.encode(text, { addSpecial: false });
        const dec = tok.createDecoder();
        const pieces = ids.map((i) => dec.push(i));
        assert.equal(pieces.join("") + dec.flush(), text);
        for (const p of pieces) assert.ok(!p.includes("\ufffd"), `a partial character leaked: ${JSON.stringify(p)}`);
      }
    }
    const tok = tokenizerOf(bytesOnly, "deepseek-v3");
    const ids = tok.encode("😀", { addSpecial: false });
    assert.equal(ids.length, 4);
    const dec = tok.createDecoder();
    assert.deepEqual(
      ids.map((i) => dec.push(i)),
      ["", "", "", "😀"],
    );
    // an unfinished sequence comes out as U+FFFD on flush, and the decoder is reset
    const d2 = tok.createDecoder();
    assert.equal(d2.push(ids[0]), "");
    assert.equal(d2.flush(), "\ufffd");
    assert.equal(d2.push(tok.encode("a", { addSpecial: false })[0]), "a");
  });

  test("isEndOfGeneration: eos, eot, eom and the end-of-turn names", () => {
    const glm = tokenizerOf(vocab, "glm4", {
      bosId: undefined,
      addBos: false,
      eosId: vocab.tokens.indexOf("<|endoftext|>"),
    });
    for (const t of ["<|endoftext|>", "<|user|>", "<|observation|>", "<｜end▁of▁sentence｜>"])
      assert.ok(glm.isEndOfGeneration(glm.tokenId(t)!), t);
    for (const t of ["<|assistant|>", "[gMASK]", "<think>", "Ġthe"]) {
      const i = glm.tokenId(t);
      if (i !== undefined) assert.ok(!glm.isEndOfGeneration(i), t);
    }
    const ds = tokenizerOf(vocab, "deepseek-v3", { eotId: 2 });
    assert.ok(ds.isEndOfGeneration(1) && ds.isEndOfGeneration(2));
  });

  test("fromMetadata reads the GGUF keys and rejects what it cannot tokenize", () => {
    const base: Record<string, GGUFMetadataEntry> = {
      "tokenizer.ggml.model": { type: GGUFValueType.STRING, value: "gpt2" },
      "tokenizer.ggml.pre": { type: GGUFValueType.STRING, value: "glm4" },
      "tokenizer.ggml.tokens": {
        type: GGUFValueType.ARRAY,
        value: { elementType: GGUFValueType.STRING, values: vocab.tokens },
      },
      "tokenizer.ggml.token_type": {
        type: GGUFValueType.ARRAY,
        value: { elementType: GGUFValueType.INT32, values: vocab.types },
      },
      "tokenizer.ggml.merges": {
        type: GGUFValueType.ARRAY,
        value: { elementType: GGUFValueType.STRING, values: vocab.merges },
      },
      "tokenizer.ggml.eos_token_id": { type: GGUFValueType.UINT32, value: 10 },
      "tokenizer.ggml.eot_token_id": { type: GGUFValueType.UINT32, value: 7 },
      "tokenizer.ggml.padding_token_id": { type: GGUFValueType.UINT32, value: 10 },
      "tokenizer.chat_template": {
        type: GGUFValueType.STRING,
        value: "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
      },
    };
    const tok = Tokenizer.fromMetadata(metaOf(base));
    assert.equal(tok.pre, "glm4");
    assert.equal(tok.bosId, undefined);
    assert.equal(tok.addBos, false);
    assert.equal(tok.eotId, 7);
    assert.equal(tok.paddingId, 10);
    assert.equal(tok.encode("hi", { addSpecial: true }).length, tok.encode("hi", { addSpecial: false }).length);
    const withModel = (model: string): Metadata =>
      metaOf({ ...base, "tokenizer.ggml.model": { type: GGUFValueType.STRING, value: model } });
    assert.throws(
      () => Tokenizer.fromMetadata(withModel("llama")),
      /tokenizer\.ggml\.model = "llama" is not supported/,
    );
    const withPre = (pre: string): Metadata =>
      metaOf({ ...base, "tokenizer.ggml.pre": { type: GGUFValueType.STRING, value: pre } });
    assert.throws(
      () => Tokenizer.fromMetadata(withPre("qwen2")),
      /unsupported pre-tokenizer tokenizer\.ggml\.pre = "qwen2"/,
    );
    assert.throws(() => Tokenizer.fromMetadata(withPre("default")), /"default"/);
    const { ["tokenizer.ggml.merges"]: _m, ...noMerges } = base;
    assert.throws(() => Tokenizer.fromMetadata(metaOf(noMerges)), /merges/);
    const badId = metaOf({ ...base, "tokenizer.ggml.eos_token_id": { type: GGUFValueType.UINT32, value: 1 << 20 } });
    assert.throws(() => Tokenizer.fromMetadata(badId), /outside the vocabulary/);
  });

  test("lone surrogates are encoded as U+FFFD (as the UTF-8 handed to llama.cpp)", () => {
    const tok = tokenizerOf(vocab, "deepseek-v3");
    assert.deepEqual(tok.encode("a\ud800b", { addSpecial: false }), tok.encode("a\ufffdb", { addSpecial: false }));
  });

  test("speed: 100k characters with a 150k-token vocabulary", (t) => {
    const big = bigVocab(vocab, 150_000);
    for (const pre of ["deepseek-v3", "glm4", "deepseek-llm"]) {
      const t0 = performance.now();
      const tok = tokenizerOf(big, pre);
      const t1 = performance.now();
      const r = rng(9);
      let text = "";
      while (text.length < 100_000) text += r() < 0.5 ? CORPUS : randomTexts(20, Math.floor(r() * 1e6)).join(" ");
      text = text.slice(0, 100_000);
      const t2 = performance.now();
      const ids = tok.encode(text, { addSpecial: false });
      const t3 = performance.now();
      const long = "a".repeat(100_000) + "我".repeat(30_000) + " ".repeat(50_000);
      const ids2 = tok.encode(long, { addSpecial: false });
      const t4 = performance.now();
      assert.equal(tok.decode(ids), text);
      assert.equal(tok.decode(ids2), long);
      t.diagnostic(
        `${pre}: build ${(t1 - t0).toFixed(0)} ms, 100k mixed chars ${(t3 - t2).toFixed(0)} ms cold (${ids.length} tokens), 180k-char runs ${(t4 - t3).toFixed(0)} ms`,
      );
      assert.ok(t3 - t2 < 3000, `encode took ${t3 - t2} ms`);
      assert.ok(t4 - t3 < 3000, `encode of long runs took ${t4 - t3} ms`);
    }
  });
});

/** The learned vocabulary padded to n tokens with filler merges of existing tokens (deterministic). */
function bigVocab(v: TestVocab, n: number): TestVocab {
  const tokens = [...v.tokens];
  const types = [...v.types];
  const merges = [...v.merges];
  const seen = new Set(tokens);
  const normal = tokens.filter((_, i) => v.types[i] === 1);
  const r = rng(1234);
  while (tokens.length < n) {
    const a = normal[Math.floor(r() * normal.length)];
    const b = normal[Math.floor(r() * normal.length)];
    const ab = a + b;
    if (seen.has(ab)) continue;
    seen.add(ab);
    tokens.push(ab);
    types.push(1);
    merges.push(`${a} ${b}`);
  }
  return { tokens, types, merges };
}
