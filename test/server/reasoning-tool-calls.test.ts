// Tool calls parsed from generated text (src/server/tool-calls.ts): each model family's format as its chat template
// writes it, several calls, content around them, malformed sections left as content, the format picked from a
// template's markers, and the streamed gate adding up to the whole-text answer for every cut.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseToolCalls, toolCallFormatOf, ToolCallStream, type ToolCallFormat } from "../../src/server/tool-calls.js";

function ids(): () => string {
  let n = 0;
  return () => `call_${n++}`;
}
const fn = (id: string, name: string, args: string) => ({ id, type: "function", function: { name, arguments: args } });

const DS_V3 =
  'Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Tokyo"}\n```<｜tool▁call▁end｜>\n' +
  "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
const DS_V31 =
  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>noop<｜tool▁sep｜><｜tool▁call▁end｜><｜tool▁calls▁end｜>';
const GLM_45 =
  "I will look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>";
const GLM_47 =
  '<tool_call>search<arg_key>query</arg_key><arg_value>42</arg_value><arg_key>filters</arg_key><arg_value>{"lang": "en"}</arg_value></tool_call>';
const KIMI =
  '<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Beijing"}<|tool_call_end|>\n<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>\n<|tool_calls_section_end|>';

test("DeepSeek-V3/R1: fenced JSON after the name, several calls, content before", () => {
  assert.deepEqual(parseToolCalls(DS_V3, "deepseek", { newId: ids() }), {
    content: "Let me check.",
    toolCalls: [fn("call_0", "get_weather", '{"city": "Tokyo"}'), fn("call_1", "get_time", "{}")],
  });
});

test("DeepSeek-V3.1: NAME<sep>JSON, empty arguments are {}", () => {
  assert.deepEqual(parseToolCalls(DS_V31, "deepseek", { newId: ids() }), {
    content: "",
    toolCalls: [fn("call_0", "get_weather", '{"city": "Paris", "days": 2}'), fn("call_1", "noop", "{}")],
  });
  // the section end is optional: generation may stop (EOS) right after the last call
  const cut = DS_V31.slice(0, DS_V31.indexOf("<｜tool▁calls▁end｜>"));
  assert.equal(parseToolCalls(cut, "deepseek").toolCalls.length, 2);
});

test("GLM-4.5: arg_key/arg_value pairs typed by the tool schema, JSON when it parses otherwise", () => {
  const tools = [
    {
      type: "function",
      function: {
        name: "get_weather",
        parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "string" } } },
      },
    },
  ];
  assert.deepEqual(parseToolCalls(GLM_45, "glm", { newId: ids(), tools }), {
    content: "I will look.\n",
    toolCalls: [fn("call_0", "get_weather", '{"city":"Beijing","days":"3"}'), fn("call_1", "get_time", "{}")],
  });
  // without a schema "3" is the number 3
  assert.equal(parseToolCalls(GLM_45, "glm").toolCalls[0].function.arguments, '{"city":"Beijing","days":3}');
});

test("GLM-4.7/5: no newlines between the parts, JSON values", () => {
  assert.deepEqual(parseToolCalls(GLM_47 + " done", "glm", { newId: ids() }), {
    content: " done",
    toolCalls: [fn("call_0", "search", '{"query":42,"filters":{"lang":"en"}}')],
  });
});

test("Kimi-K2: functions.NAME:INDEX is the call's id", () => {
  assert.deepEqual(parseToolCalls("Sure. " + KIMI + " ok", "kimi"), {
    content: "Sure.  ok",
    toolCalls: [
      fn("functions.get_weather:0", "get_weather", '{"city": "Beijing"}'),
      fn("functions.get_time:1", "get_time", "{}"),
    ],
  });
});

test("malformed sections stay content, whole, with no calls", () => {
  const cases: [string, ToolCallFormat][] = [
    [DS_V31.replace('"Paris"', "Paris"), "deepseek"], // arguments not JSON
    [DS_V31.replace('{"city": "Paris", "days": 2}', "[1, 2]"), "deepseek"], // arguments not an object
    [DS_V31.slice(0, 60), "deepseek"], // cut off inside the first call
    [DS_V3.replace("<｜tool▁sep｜>get_weather", "get_weather"), "deepseek"], // no separator
    ["<｜tool▁calls▁begin｜>stray text<｜tool▁calls▁end｜>", "deepseek"],
    ["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bad name<｜tool▁sep｜>{}<｜tool▁call▁end｜>", "deepseek"],
    ["<tool_call>f<arg_key>a</arg_key>oops<arg_value>1</arg_value></tool_call>", "glm"],
    ["<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>", "glm"], // never closed
    ["<tool_call>\n</tool_call>", "glm"], // no name
    [KIMI.replace("functions.get_weather:0", "get_weather"), "kimi"], // no index
    [KIMI.replace('{"city": "Beijing"}', '{"city": '), "kimi"],
  ];
  for (const [text, format] of cases)
    assert.deepEqual(parseToolCalls(text, format), { content: text, toolCalls: [] }, text);
  assert.deepEqual(parseToolCalls("no calls here", "glm"), { content: "no calls here", toolCalls: [] });
  // one format's markers mean nothing in another's
  assert.deepEqual(parseToolCalls(KIMI, "deepseek"), { content: KIMI, toolCalls: [] });
});

test("the format is picked from the chat template's markers", () => {
  assert.equal(
    toolCallFormatOf("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>'}}"),
    "deepseek",
  );
  assert.equal(
    toolCallFormatOf("{{ '<tool_call>' + tc.name }}{% for k, v in args %}<arg_key>{{ k }}</arg_key>{% endfor %}"),
    "glm",
  );
  assert.equal(
    toolCallFormatOf("<|tool_calls_section_begin|>{% for tc in m.tool_calls %}<|tool_call_begin|>{{ tc.id }}"),
    "kimi",
  );
  assert.equal(toolCallFormatOf("{% for m in messages %}{{ m.content }}{% endfor %}"), undefined);
  assert.equal(
    toolCallFormatOf("<tool_call>{{ tool_call | tojson }}</tool_call>"),
    undefined,
    "Hermes-style JSON calls are another format",
  );
});

test("streamed: content before the section passes, the calls come at the end, every cut adds up", () => {
  const texts: [string, ToolCallFormat][] = [
    [DS_V3, "deepseek"],
    ["Hi " + KIMI + " bye", "kimi"],
    [GLM_45, "glm"],
    ["<tool_ca no call", "glm"],
    ["<｜tool▁calls▁begin｜>broken", "deepseek"],
  ];
  for (const [text, format] of texts) {
    const whole = parseToolCalls(text, format, { newId: ids() });
    for (let i = 0; i <= text.length; i++) {
      const s = new ToolCallStream(format, { newId: ids() });
      const early = s.push(text.slice(0, i)) + s.push(text.slice(i));
      const end = s.finish();
      assert.deepEqual({ content: early + end.content, toolCalls: end.toolCalls }, whole, JSON.stringify({ text, i }));
      if (whole.toolCalls.length > 0)
        assert.ok(!early.includes("tool"), `no tool-call text streamed as content: ${JSON.stringify(early)}`);
    }
  }
  const s = new ToolCallStream("glm");
  assert.equal(s.push("Looking <tool"), "Looking ");
  assert.equal(s.push("s> up"), "<tools> up", "a false alarm is released as soon as it cannot be the marker");
});
