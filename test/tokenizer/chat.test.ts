import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { renderChatTemplate, Tokenizer } from "../../src/tokenizer/index.js";
import { LatentError } from "../../src/util/errors.js";
import { buildVocab, type TestVocab } from "../helpers/tokenizer-fixtures.js";

/** DeepSeek-V3 style (abridged from the released template: system prompt first, BOS emitted by the template). */
const DEEPSEEK_V3_TEMPLATE = `{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- set ns.is_tool = false -%}{%- set content = message['content'] -%}{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] -%}{%- endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}`;

/** GLM-4.x style: [gMASK]<sop>, role markers, thinking switch. */
const GLM_TEMPLATE = `[gMASK]<sop>{%- for m in messages -%}{%- if m.role == 'system' -%}<|system|>
{{ m.content }}{%- elif m.role == 'user' -%}<|user|>
{{ m.content }}{%- elif m.role == 'assistant' -%}<|assistant|>
<think></think>
{{ m.content }}{%- elif m.role == 'tool' -%}<|observation|>
{{ m.content }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>{%- if enable_thinking is defined and not enable_thinking %}
<think></think>{%- endif -%}{%- endif -%}`;

const MESSAGES = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "What is 2+2?" },
  { role: "assistant", content: "<think>easy</think>4" },
  { role: "user", content: "And 3+3?" },
];

describe("chat templates", () => {
  let vocab: TestVocab;
  before(() => {
    vocab = buildVocab(1000);
  });

  test("DeepSeek-V3 template renders and encodes without a double BOS", () => {
    const tok = new Tokenizer({
      tokens: vocab.tokens,
      tokenTypes: vocab.types,
      merges: vocab.merges,
      pre: "deepseek-v3",
      bosId: 0,
      eosId: 1,
      addBos: true,
      chatTemplate: DEEPSEEK_V3_TEMPLATE,
    });
    const text = tok.renderChat(MESSAGES, { addGenerationPrompt: true });
    assert.equal(
      text,
      "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜>",
    );
    const ids = tok.encodeChat(MESSAGES);
    assert.equal(ids[0], 0);
    assert.notEqual(ids[1], 0, "double BOS");
    assert.equal(ids.filter((i) => i === 0).length, 1);
    assert.equal(ids[ids.length - 1], tok.tokenId("<｜Assistant｜>"));
    assert.equal(ids.filter((i) => i === tok.tokenId("<｜User｜>")).length, 2, "control tokens parsed");
    assert.equal(tok.decode(ids), text);
    // a rendered text without the BOS text gets BOS added (add_bos_token = true)
    const noBos = tok.renderChat(MESSAGES, { bosToken: "" });
    assert.ok(!noBos.startsWith("<｜begin▁of▁sentence｜>"));
    const ids2 = tok.encodePrompt(noBos);
    assert.equal(ids2[0], 0);
    assert.deepEqual(ids2, ids);
    // without a generation prompt
    assert.ok(!tok.renderChat(MESSAGES.slice(0, 3), { addGenerationPrompt: false }).endsWith("<｜Assistant｜>"));
  });

  test("GLM template: [gMASK]<sop> from the template, no BOS added, variables pass through", () => {
    const id = (t: string): number => vocab.tokens.indexOf(t);
    const tok = new Tokenizer({
      tokens: vocab.tokens,
      tokenTypes: vocab.types,
      merges: vocab.merges,
      pre: "glm4",
      eosId: id("<|endoftext|>"),
      eotId: id("<|user|>"),
      eomId: id("<|observation|>"),
      chatTemplate: GLM_TEMPLATE,
    });
    const text = tok.renderChat(MESSAGES.slice(0, 2), { variables: { enable_thinking: false } });
    assert.equal(
      text,
      "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nWhat is 2+2?<|assistant|><think></think>",
    ); // trim_blocks eats the newline after the tag, as in transformers
    const ids = tok.encodeChat(MESSAGES.slice(0, 2), { variables: { enable_thinking: false } });
    assert.deepEqual(ids.slice(0, 3), [id("[gMASK]"), id("<sop>"), id("<|system|>")]);
    assert.equal(ids.filter((i) => i === id("[gMASK]")).length, 1);
    assert.equal(tok.decode(ids), text);
    assert.ok(tok.isEndOfGeneration(id("<|user|>")) && tok.isEndOfGeneration(id("<|observation|>")));
    const thinking = tok.renderChat(MESSAGES.slice(0, 2));
    assert.ok(thinking.endsWith("<|assistant|>"));
  });

  test("a model without a chat template is a clear error; a broken template too", () => {
    const tok = new Tokenizer({
      tokens: vocab.tokens,
      tokenTypes: vocab.types,
      merges: vocab.merges,
      pre: "deepseek-v3",
    });
    assert.throws(
      () => tok.renderChat(MESSAGES),
      (e: unknown) => e instanceof LatentError && /no tokenizer\.chat_template/.test(e.message),
    );
    assert.throws(() => renderChatTemplate("{% for %}", MESSAGES), LatentError);
    assert.throws(() => renderChatTemplate("{{ raise_exception('nope') }}", MESSAGES), /nope/);
  });
});
