// Reasoning, chat_template_kwargs and tools through the real server with the official openai client, on the demo
// model: once with its own template (no thinking, no tool format), once with a template that thinks when
// `thinking` is set (DeepSeek-V3.1's switch) and writes DeepSeek-V3.1 tool calls. The demo model writes KJV verse, never
// a tag, so where the prompt ends in an open <think> its whole answer is reasoning — which shows the kwargs reached the
// template and the split ran; the tool-call answers themselves are the unit tests' (reasoning-chat-output.test.ts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import OpenAI from "openai";
import { loadModel } from "../../src/runtime/load.js";
import { Metadata } from "../../src/gguf/metadata.js";
import { startServer, type RunningServer, type ServedModel } from "../../src/server/server.js";

const loaded = loadModel(join(import.meta.dirname, "..", "..", "models", "latent-demo-kjv.gguf"));
const MODEL = "demo";
const THINKING_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}<｜User｜>{{ message['content'] }}" +
  "{% elif message['role'] == 'assistant' %}<｜Assistant｜>{{ message['content'] or '' }}" +
  "{% for tc in message['tool_calls'] or [] %}<｜tool▁call▁begin｜>{{ tc['function']['name'] }}<｜tool▁sep｜>{{ tc['function']['arguments'] }}<｜tool▁call▁end｜>{% endfor %}<｜end▁of▁sentence｜>{% endif %}{% endfor %}" +
  "{% if tools %}{% for t in tools %}{{ t['function']['name'] }} {% endfor %}{% endif %}" +
  "{% if add_generation_prompt %}<｜Assistant｜>{% if thinking %}<think>\n{% else %}</think>{% endif %}{% endif %}";

/** The demo model with another chat template. */
function withTemplate(template: string): ServedModel {
  const entries = new Map(loaded.file.metadata.entries);
  const old = entries.get("tokenizer.chat_template")!;
  entries.set("tokenizer.chat_template", { ...old, value: template });
  return { file: { metadata: new Metadata(entries) }, config: loaded.config, model: loaded.model };
}

const servers: RunningServer[] = [];
let plain: OpenAI;
let thinking: OpenAI;
let thinkingRaw: OpenAI;

async function clientOf(options: Parameters<typeof startServer>[0]): Promise<OpenAI> {
  const server = await startServer({ port: 0, modelId: MODEL, maxBatch: 2, ...options });
  servers.push(server);
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 30_000 });
}

before(async () => {
  plain = await clientOf({ loaded });
  thinking = await clientOf({ loaded: withTemplate(THINKING_TEMPLATE) });
  thinkingRaw = await clientOf({ loaded: withTemplate(THINKING_TEMPLATE), reasoningFormat: "none" });
});
after(async () => {
  for (const s of servers) await s.close();
});

type Message = OpenAI.ChatCompletionMessage & { reasoning_content?: string };
const ask = (client: OpenAI, extra: Record<string, unknown>) =>
  client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Who made the heaven?" }], max_tokens: 6, temperature: 0, ignore_eos: true, ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);

test("the demo model's own template: chat_template_kwargs accepted, plain content, no reasoning_content; tools refused (no tool format)", async () => {
  const r = await ask(plain, { chat_template_kwargs: { enable_thinking: false } });
  const m = r.choices[0]!.message as Message;
  assert.equal(typeof m.content, "string");
  assert.ok(m.content!.length > 0);
  assert.equal("reasoning_content" in m, false);
  assert.equal(m.tool_calls, undefined);
  assert.equal(r.choices[0]!.finish_reason, "length");
  const tool = { type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } };
  await assert.rejects(ask(plain, { tools: [tool] }), (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "tools");
  await assert.rejects(ask(plain, { chat_template_kwargs: { messages: [] } }), (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "chat_template_kwargs");
  await assert.rejects(ask(plain, { chat_template_kwargs: "thinking" }), (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "chat_template_kwargs");
});

test("thinking: true opens <think> in the prompt, so the answer is reasoning_content; false leaves it content; none keeps it raw", async () => {
  const on = await ask(thinking, { chat_template_kwargs: { thinking: true } });
  const off = await ask(thinking, { chat_template_kwargs: { thinking: false } });
  const raw = await ask(thinkingRaw, { chat_template_kwargs: { thinking: true } });
  // the prompt ends in "<think>\n" only when `thinking` reached the template: the split shows it did
  const mOn = on.choices[0]!.message as Message;
  const mOff = off.choices[0]!.message as Message;
  const mRaw = raw.choices[0]!.message as Message;
  assert.ok(mOn.reasoning_content !== undefined && mOn.reasoning_content.length > 0, JSON.stringify(mOn));
  assert.equal(mOn.content, "");
  assert.equal("reasoning_content" in mOff, false);
  assert.ok(mOff.content!.length > 0);
  assert.equal(mRaw.content, mOn.reasoning_content, "--reasoning-format none: the same text, in content");
  assert.equal("reasoning_content" in mRaw, false);
});

test("streamed: deltas carry reasoning_content adding up to the non-streamed answer", async () => {
  const whole = (await ask(thinking, { chat_template_kwargs: { thinking: true } })).choices[0]!.message as Message;
  const stream = await thinking.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Who made the heaven?" }], max_tokens: 6, temperature: 0, ignore_eos: true, stream: true, chat_template_kwargs: { thinking: true } } as OpenAI.ChatCompletionCreateParamsStreaming);
  let reasoning = "";
  let content = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta as (OpenAI.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string }) | undefined;
    reasoning += d?.reasoning_content ?? "";
    content += d?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(reasoning, whole.reasoning_content);
  assert.equal(content, "");
  assert.equal(finish, "length");
});

test("tools with tool_choice auto reach the template and are looked for; an answer without calls keeps its finish reason", async () => {
  const tool = { type: "function", function: { name: "lookup_verse", parameters: { type: "object", properties: { book: { type: "string" } } } } };
  const withTools = await ask(thinking, { tools: [tool], tool_choice: "auto", chat_template_kwargs: { thinking: false } });
  const without = await ask(thinking, { chat_template_kwargs: { thinking: false } });
  const m = withTools.choices[0]!.message;
  assert.equal(m.tool_calls, undefined);
  assert.equal(withTools.choices[0]!.finish_reason, "length");
  assert.ok(withTools.usage!.prompt_tokens > without.usage!.prompt_tokens, "the tool's name is in the prompt");
  const none = await ask(thinking, { tools: [tool], tool_choice: "none", chat_template_kwargs: { thinking: false } });
  assert.equal(none.usage!.prompt_tokens, without.usage!.prompt_tokens, "tool_choice none: the tools are not shown");
  await assert.rejects(ask(thinking, { tools: [tool], tool_choice: "required" }), (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice");
  await assert.rejects(ask(thinking, { tools: [{ type: "function" }] }), (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "tools");
});
