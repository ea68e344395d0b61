// The seam between generated text and a chat answer (src/server/chat-output.ts): the plan a template and request give,
// the non-streamed message (reasoning_content, tool_calls, finish_reason), the streamed deltas adding up to it for
// every cut, and chat_template_kwargs checking (src/server/template-kwargs.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { ApiError } from "../../src/server/http.js";
import {
  chatChoice,
  ChatDeltaStream,
  messagesForTemplate,
  planChatOutput,
  type ChatOutputPlan,
} from "../../src/server/chat-output.js";
import { chatTemplateKwargsField, MAX_TEMPLATE_KWARGS_CHARS } from "../../src/server/template-kwargs.js";
import { renderChatTemplate } from "../../src/tokenizer/chat.js";

// the parts of DeepSeek-V3.1's and GLM-4.5's templates the plan reads
const DS_TEMPLATE =
  "{% if thinking %}<｜Assistant｜><think>{% else %}<｜Assistant｜></think>{% endif %}{{'<｜tool▁call▁begin｜>' + tc.name + '<｜tool▁sep｜>'}}";
const GLM_TEMPLATE =
  "<|assistant|>{% if not enable_thinking %}<think></think>{% endif %}<tool_call>{{ tc.name }}<arg_key>{{ k }}</arg_key>";
const PLAIN_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}";
const TOOLS = [
  {
    type: "function",
    function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
  },
];
const DS_CALL =
  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>';

test("plan: reasoning split where the template thinks, from the prompt's end; tools need a known format", () => {
  const thinking = planChatOutput({
    reasoningFormat: "deepseek",
    template: DS_TEMPLATE,
    promptTail: "<｜Assistant｜><think>",
    tools: undefined,
  });
  assert.deepEqual(thinking.reasoning, { startsInReasoning: true });
  assert.equal(thinking.toolFormat, undefined);
  assert.equal(thinking.controlTokenText, true);
  assert.deepEqual(
    planChatOutput({
      reasoningFormat: "deepseek",
      template: DS_TEMPLATE,
      promptTail: "<｜Assistant｜></think>",
      tools: undefined,
    }).reasoning,
    { startsInReasoning: false },
  );
  assert.equal(
    planChatOutput({ reasoningFormat: "none", template: DS_TEMPLATE, promptTail: "<think>", tools: undefined })
      .reasoning,
    undefined,
  );
  const plain = planChatOutput({
    reasoningFormat: "deepseek",
    template: PLAIN_TEMPLATE,
    promptTail: "<think>",
    tools: [],
  });
  assert.deepEqual(
    { reasoning: plain.reasoning, toolFormat: plain.toolFormat, controlTokenText: plain.controlTokenText },
    { reasoning: undefined, toolFormat: undefined, controlTokenText: false },
  );
  assert.equal(
    planChatOutput({ reasoningFormat: "deepseek", template: GLM_TEMPLATE, promptTail: "", tools: TOOLS }).toolFormat,
    "glm",
  );
  assert.throws(
    () => planChatOutput({ reasoningFormat: "deepseek", template: PLAIN_TEMPLATE, promptTail: "", tools: TOOLS }),
    (e: unknown) => e instanceof ApiError && e.status === 400 && e.param === "tools",
  );
});

const R1: ChatOutputPlan = planChatOutput({
  reasoningFormat: "deepseek",
  template: DS_TEMPLATE,
  promptTail: "<think>\n",
  tools: TOOLS,
});

test("message: reasoning_content, tool_calls and finish_reason tool_calls; content null beside calls", () => {
  const text = "I need the weather.</think>\n\n" + DS_CALL;
  const { message, finish_reason } = chatChoice(text, R1, "stop");
  assert.equal(finish_reason, "tool_calls");
  assert.equal(message.content, null);
  assert.equal(message.reasoning_content, "I need the weather.");
  assert.equal(message.tool_calls?.length, 1);
  assert.deepEqual(message.tool_calls![0].function, { name: "get_weather", arguments: '{"city": "Paris"}' });
  assert.match(message.tool_calls![0].id, /^call_[0-9a-f]{24}$/);
  // a call inside the reasoning is thinking about a call, not one
  const inReasoning = chatChoice(DS_CALL + "</think>Sunny.", R1, "length");
  assert.deepEqual(inReasoning, {
    message: { role: "assistant", content: "Sunny.", reasoning_content: DS_CALL },
    finish_reason: "length",
  });
  // no reasoning section: no reasoning_content field
  const none = planChatOutput({
    reasoningFormat: "none",
    template: DS_TEMPLATE,
    promptTail: "<think>",
    tools: undefined,
  });
  assert.deepEqual(chatChoice("a</think>b", none, "stop"), {
    message: { role: "assistant", content: "a</think>b" },
    finish_reason: "stop",
  });
  // parallel_tool_calls: false keeps the first call
  const twoCalls = DS_CALL.replace("<｜tool▁calls▁end｜>", DS_CALL.slice("<｜tool▁calls▁begin｜>".length));
  assert.equal(chatChoice("r</think>" + twoCalls, R1, "stop").message.tool_calls?.length, 2);
  assert.equal(
    chatChoice("r</think>" + twoCalls, { ...R1, parallelToolCalls: false }, "stop").message.tool_calls?.length,
    1,
  );
  // malformed calls stay content, the finish reason is the scheduler's
  const bad = chatChoice("r</think>" + DS_CALL.replace('"Paris"', "Paris"), R1, "stop");
  assert.equal(bad.finish_reason, "stop");
  assert.equal(bad.message.tool_calls, undefined);
  assert.equal(bad.message.content, DS_CALL.replace('"Paris"', "Paris"));
});

test("stream: the deltas of every cut add up to the non-streamed message", () => {
  const texts = [
    "Hmm.</think>\n\nLet me look." + DS_CALL,
    "plain answer </think> x",
    "<think>a</think>b" + DS_CALL.slice(0, 50),
  ];
  for (const text of texts) {
    const whole = chatChoice(text, R1, "stop");
    for (let i = 0; i <= text.length; i++) {
      const s = new ChatDeltaStream(R1);
      const deltas = [s.push(text.slice(0, i)), s.push(text.slice(i)), s.finish()];
      const sum = (k: "reasoning_content" | "content"): string => deltas.map((d) => d[k] ?? "").join("");
      const calls = deltas.flatMap((d) => d.tool_calls ?? []);
      assert.equal(sum("reasoning_content"), whole.message.reasoning_content ?? "", JSON.stringify({ text, i }));
      assert.equal(sum("content"), whole.message.content ?? "", JSON.stringify({ text, i }));
      assert.deepEqual(
        calls.map((c) => [c.index, c.function]),
        (whole.message.tool_calls ?? []).map((c, index) => [index, c.function]),
      );
      assert.equal(s.finishReason("stop"), whole.finish_reason);
      for (const d of deltas)
        for (const v of [d.content, d.reasoning_content]) assert.notEqual(v, "", "no empty fields in a delta");
    }
  }
});

test("stream without reasoning or tools passes the text through", () => {
  const plain = planChatOutput({
    reasoningFormat: "deepseek",
    template: PLAIN_TEMPLATE,
    promptTail: "",
    tools: undefined,
  });
  const s = new ChatDeltaStream(plain);
  assert.deepEqual(s.push("<think>"), { content: "<think>" });
  assert.deepEqual(s.push(""), {});
  assert.deepEqual(s.finish(), {});
  assert.equal(s.finishReason("length"), "length");
});

function refusedKwargs(value: unknown, message: RegExp): void {
  assert.throws(
    () => chatTemplateKwargsField({ chat_template_kwargs: value }),
    (e: unknown) =>
      e instanceof ApiError && e.status === 400 && e.param === "chat_template_kwargs" && message.test(e.message),
    JSON.stringify(value)?.slice(0, 80),
  );
}

test("chat_template_kwargs: JSON variables accepted, reserved names, bad names and oversize values refused", () => {
  assert.equal(chatTemplateKwargsField({}), undefined);
  assert.equal(chatTemplateKwargsField({ chat_template_kwargs: null }), undefined);
  const ok = { enable_thinking: false, thinking: true, style: { a: [1, "x", null] }, n: 2.5 };
  assert.deepEqual(chatTemplateKwargsField({ chat_template_kwargs: ok }), ok);
  refusedKwargs([true], /must be an object/);
  refusedKwargs("enable_thinking", /must be an object/);
  for (const name of [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "range",
    "raise_exception",
  ])
    refusedKwargs({ [name]: 1 }, /set by the server/);
  refusedKwargs(JSON.parse('{"__proto__": {"x": 1}}'), /reserved/);
  refusedKwargs({ "not a name": 1 }, /not a template variable name/);
  refusedKwargs({ "1st": 1 }, /not a template variable name/);
  refusedKwargs({ big: "x".repeat(MAX_TEMPLATE_KWARGS_CHARS) }, /characters as JSON/);
  let deep: unknown = 1;
  for (let i = 0; i < 40; i++) deep = [deep];
  refusedKwargs({ deep }, /nested more than/);
  refusedKwargs({ f: () => 1 }, /JSON value/);
  refusedKwargs({ n: Infinity }, /finite/);
  // a client's names come back escaped and cut: one short printable line
  refusedKwargs({ ["\u001b]0;x\u0007" + "k".repeat(500)]: 1 }, /^[^\u0000-\u001f]{0,200}$/);
  refusedKwargs(
    { ok: { ["\u202e" + "k".repeat(500)]: Infinity } },
    /^'chat_template_kwargs\.ok\.\\u202ek+…' must be a finite number$/,
  );
});

test("the variables reach the template beside the server's own", () => {
  const template =
    "{{ messages[0].content }}|{% if enable_thinking %}<think>{% else %}</think>{% endif %}|{{ style.tone }}";
  const messages = [{ role: "user", content: "hi" }];
  const variables = chatTemplateKwargsField({
    chat_template_kwargs: { enable_thinking: true, style: { tone: "dry" } },
  });
  assert.equal(renderChatTemplate(template, messages, { variables: variables! }), "hi|<think>|dry");
  assert.equal(renderChatTemplate(template, messages, { variables: { enable_thinking: false } }), "hi|</think>|");
});

test("past tool calls: GLM's template gets the arguments as an object, others the string; a non-object is a 400", () => {
  const glm =
    "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set tc = tc.function %}<tool_call>{{ tc.name }}{% for k, v in tc.arguments.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>{% endfor %}</tool_call>{% endfor %}{% endfor %}";
  const history = [
    { role: "user", content: "weather?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_0", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
      ],
    },
  ];
  assert.equal(
    renderChatTemplate(glm, messagesForTemplate(history, glm)),
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
  );
  assert.equal(messagesForTemplate(history, DS_TEMPLATE), history, "DeepSeek's template writes the string");
  const bad = [
    { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "f", arguments: "[1]" } }] },
  ];
  assert.throws(
    () => messagesForTemplate(bad, glm),
    (e: unknown) => e instanceof ApiError && e.param === "messages" && /tool_calls\[0\]/.test(e.message),
  );
});
