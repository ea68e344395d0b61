/**
 * A valid GPT-2 byte-level BPE vocabulary of any size for synthesized models: control tokens, the 256 byte tokens,
 * merges learned from a small built-in English text, then filler merges of existing tokens up to n_vocab.
 * Every merge's result is a token and every token beyond the bytes and the controls comes from exactly one merge.
 * Deterministic (independent of the weight seed) and fast: 129280 tokens take well under a second.
 */
import { UsageError } from "../util/errors.js";
import type { TokenizerPre } from "./presets.js";
import { BYTE_TO_CHAR } from "../tokenizer/unicode.js";

export const TOKEN_NORMAL = 1;
export const TOKEN_CONTROL = 3;

export interface SynthTokenizer {
  readonly tokens: string[];
  readonly types: number[];
  readonly merges: string[];
  readonly bos: number;
  readonly eos: number;
  /** GLM only: end of turn `<|user|>`, end of message `<|observation|>`, unknown/padding `<|endoftext|>` */
  readonly eot?: number;
  readonly eom?: number;
  readonly unk?: number;
  readonly pad?: number;
  readonly addBos: boolean;
  readonly chatTemplate: string;
}

const TEXT = `The quick brown fox jumps over the lazy dog. A model reads the text one token at a time and predicts the next
one. Attention lets every position look back at the tokens that came before it, and the mixture of experts sends
each token to a few of many small networks. In the morning the engineers ran the tests again; the numbers were the
same as the night before, which was exactly what they wanted to see. Where there is a question, there is often an
answer that is simpler than expected. They wrote the weights to a file, opened it again and checked every shape.
It was a long day, but the results were good and the team went home early. Reading and writing are the two things
that this program does most of the time: it reads the model from the disk, writes the answer to the screen, and
then waits for the next request from the user. Numbers such as 1, 2, 3, 10, 42, 100 and 2048 appear in the text too.
"Hello," she said, "how are you today?" He answered that he was fine and asked about the weather in the city.`;

/** Learn up to `max` BPE merges from TEXT (byte-level, words with their leading space). */
function learnMerges(b2u: readonly string[], max: number): [string, string][] {
  const counts = new Map<string, number>();
  const bytes = new TextEncoder();
  for (const m of TEXT.replace(/\s+/g, " ").match(/ ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+/g) ?? []) {
    const w = [...bytes.encode(m)].map((b) => b2u[b]).join("\u0000");
    counts.set(w, (counts.get(w) ?? 0) + 1);
  }
  let words = [...counts].map(([w, c]) => ({ syms: w.split("\u0000"), c }));
  const merges: [string, string][] = [];
  while (merges.length < max) {
    const pairs = new Map<string, number>();
    for (const { syms, c } of words) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const k = syms[i] + "\u0000" + syms[i + 1];
        pairs.set(k, (pairs.get(k) ?? 0) + c);
      }
    }
    let best = "";
    let bestCount = 1;
    for (const [k, c] of pairs) if (c > bestCount || (c === bestCount && c > 1 && k < best)) [best, bestCount] = [k, c];
    if (best === "") break;
    const [a, b] = best.split("\u0000") as [string, string];
    merges.push([a, b]);
    words = words.map(({ syms, c }) => {
      const out: string[] = [];
      for (let i = 0; i < syms.length; i++) {
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(syms[i]);
      }
      return { syms: out, c };
    });
  }
  return merges;
}

const DEEPSEEK_V3_TEMPLATE =
  "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}" +
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'] }}" +
  "{% elif message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}" +
  "{% elif message['role'] == 'assistant' %}{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}" +
  "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}";

const DEEPSEEK_V2_TEMPLATE =
  "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}" +
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}" +
  "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}" +
  "{% elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

const GLM_TEMPLATE =
  "[gMASK]<sop>{% for message in messages %}{% if message['role'] == 'system' %}<|system|>\n{{ message['content'] }}" +
  "{% elif message['role'] == 'user' %}<|user|>\n{{ message['content'] }}" +
  "{% elif message['role'] == 'assistant' %}<|assistant|>\n{{ message['content'] }}" +
  "{% elif message['role'] == 'tool' %}<|observation|>\n{{ message['content'] }}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

const DEEPSEEK_HEAD = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"];
const DEEPSEEK_TAIL = ["<｜User｜>", "<｜Assistant｜>"];
const GLM_TAIL = [
  "<|endoftext|>",
  "[MASK]",
  "[gMASK]",
  "[sMASK]",
  "<sop>",
  "<eop>",
  "<|system|>",
  "<|user|>",
  "<|assistant|>",
  "<|observation|>",
];

/** Number of control tokens the layout for `pre` needs (n_vocab must be at least this + 256). */
export function controlTokenCount(pre: TokenizerPre): number {
  return pre === "glm4" ? GLM_TAIL.length : DEEPSEEK_HEAD.length + DEEPSEEK_TAIL.length;
}

/** xorshift32: a tiny deterministic generator for filler merges. */
function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

/**
 * DeepSeek layout: BOS 0, EOS 1, pad 2, bytes 3–258, merged tokens, then `<｜User｜>` `<｜Assistant｜>`.
 * GLM layout: bytes 0–255, merged tokens, then `<|endoftext|>` … `<|observation|>` (BOS = `[gMASK]`), as GLM's own vocab.
 */
export function synthTokenizer(nVocab: number, pre: TokenizerPre): SynthTokenizer {
  const glm = pre === "glm4";
  const head = glm ? [] : DEEPSEEK_HEAD;
  const tail = glm ? GLM_TAIL : DEEPSEEK_TAIL;
  const nMerges = nVocab - head.length - tail.length - 256;
  if (!Number.isInteger(nVocab) || nMerges < 0) {
    throw new UsageError(
      `synth config: n_vocab must be at least ${head.length + tail.length + 256} for tokenizer "${pre}" (control tokens + 256 bytes), got ${nVocab}`,
    );
  }
  const b2u = BYTE_TO_CHAR;
  const tokens: string[] = [...head, ...b2u];
  const types: number[] = [...head.map(() => TOKEN_CONTROL), ...b2u.map(() => TOKEN_NORMAL)];
  const known = new Set<string>([...tokens, ...tail]);
  const merges: string[] = [];
  const add = (a: string, b: string): void => {
    tokens.push(a + b);
    types.push(TOKEN_NORMAL);
    known.add(a + b);
    merges.push(`${a} ${b}`);
  };
  for (const [a, b] of learnMerges(b2u, Math.min(nMerges, 1500))) add(a, b);
  // filler: a random existing token + a short token; lengths grow only logarithmically with the vocabulary
  const rand = xorshift(0x5eed1234);
  const firstMerged = head.length + 256;
  const short: string[] = [];
  for (let c = 0x61; c <= 0x7a; c++) short.push(String.fromCharCode(c));
  short.push(b2u[0x20], "e", "t", "a", "o", "n");
  for (let i = firstMerged; i < tokens.length && short.length < 300; i++)
    if (tokens[i].length <= 3) short.push(tokens[i]);
  while (merges.length < nMerges) {
    const a = tokens[head.length + Math.floor(rand() * (tokens.length - head.length))];
    const b = short[Math.floor(rand() * short.length)];
    if (!known.has(a + b)) add(a, b);
  }
  for (const t of tail) {
    tokens.push(t);
    types.push(TOKEN_CONTROL);
  }
  if (glm) {
    const id = (t: string): number => tokens.indexOf(t, nVocab - tail.length);
    return {
      tokens,
      types,
      merges,
      bos: id("[gMASK]"),
      eos: id("<|endoftext|>"),
      eot: id("<|user|>"),
      eom: id("<|observation|>"),
      unk: id("<|endoftext|>"),
      pad: id("<|endoftext|>"),
      addBos: false,
      chatTemplate: GLM_TEMPLATE,
    };
  }
  return {
    tokens,
    types,
    merges,
    bos: 0,
    eos: 1,
    pad: 2,
    addBos: true,
    chatTemplate: pre === "deepseek-llm" ? DEEPSEEK_V2_TEMPLATE : DEEPSEEK_V3_TEMPLATE,
  };
}
