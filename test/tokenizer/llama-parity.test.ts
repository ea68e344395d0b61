/**
 * Token ids equal to llama.cpp's (node-llama-cpp 3.21.1, run in a child process) on:
 * - test GGUFs with a learned ~4000-merge byte-level vocabulary, one per pre-tokenizer;
 * - the five tiny kit models.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { rmSync } from "node:fs";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGUFValueType } from "../../src/gguf/types.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { PreTokenizer, PRE_TOKENIZER_REGEXES } from "../../src/tokenizer/pretokenize.js";
import {
  buildVocab,
  CORPUS,
  FIXTURE_DIR,
  llamaTokenizeJobs,
  randomTexts,
  tempDir,
  writeTokenizerGGUF,
  type TestVocab,
} from "../helpers/tokenizer-fixtures.js";

const HAND_TEXTS: readonly string[] = [
  "",
  " ",
  "  ",
  "\n",
  "\n\n\n",
  " \n \n",
  "\r\n\r\n",
  "\t\t  \t",
  "Hello world",
  " Hello  world   ",
  "hello\n\nworld\n",
  "It's I'M we'll THEY'VE you'D she'S 'tis ''s",
  "1 12 123 1234 12345 123456 1234567",
  "3.14159 1,000,000 -42 +7 1e-10 0x1F",
  "abc123def456 x86_64 GPT-4o",
  "a.b,c;d:e!f?g",
  "...!!!???",
  " (hello) [world] {foo} <bar>",
  "'hello' \"world\" `code`",
  "$100 & 50% #tag @user ~home ^caret |pipe \\back/slash",
  "def f(x):\n    return x ** 2\n\n\nprint(f(3))\n",
  "    four spaces\n\ttab\n        eight",
  "if (a<=b && c!=d) { x->y = z[0]; }",
  "我爱自然语言处理。",
  "今天天气很好，我们去公园散步吧！",
  "日本語のテキスト、ひらがなカタカナ。",
  "한국어 텍스트입니다.",
  "Привет, мир! Как дела?",
  "Καλημέρα κόσμε",
  "مرحبا بالعالم ١٢٣",
  "नमस्ते दुनिया",
  "Café naïve résumé façade",
  "e\u0301 a\u0308 c\u0327 combining",
  "😀 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️",
  "emoji😀in😃text",
  "ＡＢＣ　ｄｅｆ！？１２３",
  "non\u00a0breaking\u3000ideographic\u2003em\u0085nel\u2028ls",
  "zero\u200bwidth\ufeffbom",
  "\u{10400}\u{10428} Deseret \u{104b0} Osage \u{1e900} Adlam",
  "ῐΐ ΐ Ώ ι Ω K Kelvin",
  "µ ƻ ǅ ʔ ʰ",
  "mixed中文and英文123数字",
  "   leading and trailing   ",
  "a\n b\n  c\n   d",
  "x  \n  y",
  "tab\t\tsep\t",
  "☃★♥♦✓✗→←↑↓",
  "∀x∈ℝ: x²≥0, ∑ᵢaᵢ=π",
  "½ ¾ ⅓ Ⅻ ①②③ ²³",
  "https://example.com/a?b=c&d=e#f",
  "<|user|> is not special here <｜end▁of▁sentence｜>",
];

const SPECIAL_TEXTS: readonly string[] = [
  "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
  "<｜User｜>What is 2+2?<｜Assistant｜><think>\nfour\n</think>4<｜end▁of▁sentence｜>",
  "[gMASK]<sop><|system|>\nYou are helpful.<|user|>\nhi<|assistant|>\n<think></think>hello<|observation|>",
  "<think><think></think></think>",
  "text <|endoftext|> more",
  "partial <｜User and <think without close and <|user| too",
  '<tool▁call>{"name": "f"}<tool▁call>',
  "back<｜User｜><｜User｜>to<｜Assistant｜>back",
];

const PRES = ["deepseek-llm", "deepseek-v3", "glm4", "chatglm-bpe", "kimi-k2"] as const;

describe("llama.cpp parity: learned vocabulary, every pre-tokenizer", () => {
  let dir = "";
  let vocab: TestVocab;
  const texts = [...HAND_TEXTS, ...CORPUS.split("\n"), CORPUS, CORPUS.repeat(3), ...randomTexts(500, 1)];
  const paths = new Map<string, string>();
  const tokenizers = new Map<string, Tokenizer>();
  const refs = new Map<string, number[][]>();
  const specialTexts = [...SPECIAL_TEXTS, ...HAND_TEXTS];

  before(() => {
    dir = tempDir();
    vocab = buildVocab(4000);
    assert.ok(vocab.merges.length >= 4000, `learned ${vocab.merges.length} merges`);
    for (const pre of PRES) {
      const path = join(dir, `${pre}.gguf`);
      const glm = pre === "glm4" || pre === "chatglm-bpe";
      writeTokenizerGGUF(
        path,
        pre,
        vocab,
        glm
          ? {
              "tokenizer.ggml.eot_token_id": { type: GGUFValueType.UINT32, value: vocab.tokens.indexOf("<|user|>") },
              "tokenizer.ggml.eom_token_id": {
                type: GGUFValueType.UINT32,
                value: vocab.tokens.indexOf("<|observation|>"),
              },
              "tokenizer.ggml.unknown_token_id": {
                type: GGUFValueType.UINT32,
                value: vocab.tokens.indexOf("<|endoftext|>"),
              },
            }
          : {},
      );
      paths.set(pre, path);
      const file = GGUFFile.open(path);
      tokenizers.set(pre, Tokenizer.fromMetadata(file.metadata));
      file.close();
    }
    const jobs = PRES.flatMap((pre) => [
      { model: paths.get(pre)!, texts },
      { model: paths.get(pre)!, texts: specialTexts },
    ]);
    const res = llamaTokenizeJobs(jobs, dir);
    PRES.forEach((pre, i) => {
      refs.set(pre, res[2 * i].ids);
      refs.set(`${pre}/special`, res[2 * i + 1].idsSpecial);
      refs.set(`${pre}/nospecial`, res[2 * i + 1].ids);
    });
  });

  after(() => {
    if (dir !== "") rmSync(dir, { recursive: true, force: true });
  });

  for (const pre of PRES) {
    test(`${pre}: ${texts.length} texts tokenize to llama.cpp's ids`, (t) => {
      const tok = tokenizers.get(pre)!;
      const ref = refs.get(pre)!;
      let ok = 0;
      const bad: string[] = [];
      texts.forEach((text, i) => {
        const mine = tok.encode(text, { addSpecial: false });
        if (JSON.stringify(mine) === JSON.stringify(ref[i])) ok++;
        else if (bad.length < 5)
          bad.push(`${JSON.stringify(text)}\n  latent ${JSON.stringify(mine)}\n  llama  ${JSON.stringify(ref[i])}`);
      });
      t.diagnostic(`${pre}: ${ok}/${texts.length} texts identical`);
      assert.equal(ok, texts.length, bad.join("\n"));
    });

    test(`${pre}: special tokens split as llama.cpp does (parse_special on and off)`, () => {
      const tok = tokenizers.get(pre)!;
      const refOn = refs.get(`${pre}/special`)!;
      const refOff = refs.get(`${pre}/nospecial`)!;
      specialTexts.forEach((text, i) => {
        assert.deepEqual(tok.encode(text, { addSpecial: false, parseSpecial: true }), refOn[i], JSON.stringify(text));
        assert.deepEqual(tok.encode(text, { addSpecial: false, parseSpecial: false }), refOff[i], JSON.stringify(text));
      });
    });
  }

  test("the tests can fail: another pre-tokenizer's regex list gives different ids", (t) => {
    const tokens = vocab.tokens;
    for (const pre of ["deepseek-llm", "deepseek-v3", "glm4"] as const) {
      const ref = refs.get(pre)!;
      for (const other of ["deepseek-llm", "deepseek-v3", "glm4"] as const) {
        if (other === pre) continue;
        const wrong = new Tokenizer({ tokens, tokenTypes: vocab.types, merges: vocab.merges, pre: other });
        let differ = 0;
        texts.forEach((text, i) => {
          if (JSON.stringify(wrong.encode(text, { addSpecial: false })) !== JSON.stringify(ref[i])) differ++;
        });
        t.diagnostic(`${pre} file tokenized with ${other}'s regexes: ${differ}/${texts.length} texts differ`);
        assert.ok(differ >= texts.length / 10, `${pre} vs ${other}: only ${differ} texts differ`);
      }
    }
  });
});

describe("llama.cpp parity: the five kit models", () => {
  const models = ["ds2-lite", "ds2-qlora-softmax", "ds2-v3", "ds2-v3-mixed-q", "glm-dsa-topk8"];
  const texts = [...HAND_TEXTS, ...SPECIAL_TEXTS, ...randomTexts(100, 2)];
  let dir = "";
  let refs: { ids: number[][]; idsSpecial: number[][] }[] = [];
  before(() => {
    dir = tempDir();
    refs = llamaTokenizeJobs(
      models.map((m) => ({ model: join(FIXTURE_DIR, `${m}.gguf`), texts })),
      dir,
    );
  });
  after(() => {
    if (dir !== "") rmSync(dir, { recursive: true, force: true });
  });
  models.forEach((m, k) => {
    test(`${m}.gguf: ${texts.length} texts, parse_special off and on`, () => {
      const file = GGUFFile.open(join(FIXTURE_DIR, `${m}.gguf`));
      const tok = Tokenizer.fromMetadata(file.metadata);
      file.close();
      texts.forEach((text, i) => {
        assert.deepEqual(tok.encode(text, { addSpecial: false }), refs[k].ids[i], JSON.stringify(text));
        assert.deepEqual(
          tok.encode(text, { addSpecial: false, parseSpecial: true }),
          refs[k].idsSpecial[i],
          JSON.stringify(text),
        );
      });
    });
  });
});

describe("pre-tokenizer internals", () => {
  test("the ported llama3 splitter (glm4) equals the glm4 regex run through the generic regex path", () => {
    const regexes = PRE_TOKENIZER_REGEXES["glm4"];
    const custom = new PreTokenizer("glm4", regexes);
    const generic = new PreTokenizer("glm4", regexes, { generic: true });
    for (const text of [...HAND_TEXTS, ...randomTexts(300, 3)]) {
      assert.deepEqual(custom.splitText(text), generic.splitText(text), JSON.stringify(text));
    }
  });

  test("deepseek-v3 pieces of a sample", () => {
    const p = PreTokenizer.forPre("deepseek-v3");
    assert.deepEqual(p.splitText("Hello, world! 12345 我爱你 don't"), [
      "Hello",
      ",",
      " world",
      "!",
      " ",
      "123",
      "45",
      " ",
      "我爱你",
      " don",
      "'t",
    ]);
  });

  test("deepseek-llm pieces of a sample", () => {
    const p = PreTokenizer.forPre("deepseek-llm");
    assert.deepEqual(p.splitText("Hello, world!\n12345 我爱你  "), [
      "Hello",
      ",",
      " world",
      "!",
      "\n",
      "12345",
      " ",
      "我爱你",
      "  ",
    ]);
  });

  test("glm4 pieces of a sample", () => {
    const p = PreTokenizer.forPre("glm4");
    assert.deepEqual(p.splitText("Hello, WORLD'S 12345\n\n  x"), [
      "Hello",
      ",",
      " WORLD",
      "'S",
      " ",
      "123",
      "45",
      "\n\n",
      " ",
      " x",
    ]);
  });
});
