// Reasoning, chat_template_kwargs and tools through the real server with the official openai client, on the demo
// model: once with its own template (no thinking, no tool format), once with a template that thinks when
// `thinking` is set (DeepSeek-V3.1's switch) and writes DeepSeek-V3.1 tool calls. The demo model writes KJV verse, never
// a tag, so where the prompt ends in an open <think> its whole answer is reasoning — which shows the kwargs reached the
// template and the split ran. A last server runs the demo model with its logits steered to write a scripted answer
// (reasoning, then a DeepSeek-V3.1 tool call), to see tool_calls and finish_reason "tool_calls" reach the client.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import OpenAI from "openai";
import { loadModel } from "../../src/runtime/load.js";
import { Metadata } from "../../src/gguf/metadata.js";
import { startServer, type RunningServer, type ServedModel } from "../../src/server/server.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import type { BatchModel } from "../../src/engine/scheduler.js";
import type { SequenceChunk } from "../../src/model/deepseek2.js";
import { serveMain } from "../../src/cli/serve.js";
import { UsageError } from "../../src/util/errors.js";

const loaded = loadModel(join(import.meta.dirname, "..", "..", "models", "latent-demo-kjv.gguf"));
const MODEL = "demo";
const THINKING_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}<｜User｜>{{ message['content'] }}" +
  "{% elif message['role'] == 'assistant' %}<｜Assistant｜>{{ message['content'] or '' }}" +
  "{% for tc in message['tool_calls'] or [] %}<｜tool▁call▁begin｜>{{ tc['function']['name'] }}<｜tool▁sep｜>{{ tc['function']['arguments'] }}<｜tool▁call▁end｜>{% endfor %}<｜end▁of▁sentence｜>{% endif %}{% endfor %}" +
  "{% if tools %}{% for t in tools %}{{ t['function']['name'] }} {% endfor %}{% endif %}" +
  "{% if add_generation_prompt %}<｜Assistant｜>{% if thinking %}<think>\n{% else %}</think>{% endif %}{% endif %}";

/** The demo model with another chat template (and, for the scripted answer, another forward pass). */
function withTemplate(template: string, model: BatchModel = loaded.model): ServedModel {
  const entries = new Map(loaded.file.metadata.entries);
  const old = entries.get("tokenizer.chat_template")!;
  entries.set("tokenizer.chat_template", { ...old, value: template });
  return { file: { metadata: new Metadata(entries) }, config: loaded.config, model };
}

const tokenizer = Tokenizer.fromMetadata(loaded.file.metadata);
const SCRIPT =
  'Hmm, John.</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup_verse<｜tool▁sep｜>{"book": "John", "verse": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>';

/**
 * The demo model made to write SCRIPT and then its end-of-sequence token: each sequence's last logits row gets a large
 * logit on the script's next token (counted per cache: the prompt is one prefill chunk, then one token per step; prefix
 * caching is off on its server so that holds), greedy sampling does the rest. One step at a time: no chained decoding.
 */
function scriptedModel(ids: readonly number[], eos: number): BatchModel {
  const written = new WeakMap<object, number>();
  const V = loaded.config.nVocab;
  return {
    config: loaded.config,
    forwardBatch(seqs: readonly SequenceChunk[]): Float32Array[] {
      const outs = loaded.model.forwardBatch(seqs);
      seqs.forEach((q, i) => {
        if (q.cache === undefined || q.logits === "none") return;
        const n = q.tokens.length > 1 ? 0 : (written.get(q.cache) ?? 0) + 1;
        written.set(q.cache, n);
        const out = outs[i];
        out[out.length - V + (ids[n] ?? eos)] = 1e4;
      });
      return outs;
    },
  };
}

const servers: RunningServer[] = [];
let plain: OpenAI;
let thinking: OpenAI;
let thinkingRaw: OpenAI;
let scripted: OpenAI;

async function clientOf(options: Parameters<typeof startServer>[0]): Promise<OpenAI> {
  const server = await startServer({ port: 0, modelId: MODEL, maxBatch: 2, ...options });
  servers.push(server);
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 30_000 });
}

before(async () => {
  plain = await clientOf({ loaded });
  thinking = await clientOf({ loaded: withTemplate(THINKING_TEMPLATE) });
  thinkingRaw = await clientOf({ loaded: withTemplate(THINKING_TEMPLATE), reasoningFormat: "none" });
  const ids = tokenizer.encode(SCRIPT, { addSpecial: false, parseSpecial: true });
  assert.equal(tokenizer.decode(ids), SCRIPT);
  scripted = await clientOf({
    loaded: withTemplate(THINKING_TEMPLATE, scriptedModel(ids, tokenizer.eosId!)),
    prefixCaching: false,
  });
});
after(async () => {
  for (const s of servers) await s.close();
});

type Message = OpenAI.ChatCompletionMessage & { reasoning_content?: string };
const ask = (client: OpenAI, extra: Record<string, unknown>) =>
  client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Who made the heaven?" }],
    max_tokens: 6,
    temperature: 0,
    ignore_eos: true,
    ...extra,
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);

test("the demo model's own template: chat_template_kwargs accepted, plain content, no reasoning_content; tools refused (no tool format)", async () => {
  const r = await ask(plain, { chat_template_kwargs: { enable_thinking: false } });
  const m = r.choices[0].message as Message;
  assert.equal(typeof m.content, "string");
  assert.ok(m.content!.length > 0);
  assert.equal("reasoning_content" in m, false);
  assert.equal(m.tool_calls, undefined);
  assert.equal(r.choices[0].finish_reason, "length");
  const tool = { type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } };
  await assert.rejects(
    ask(plain, { tools: [tool] }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "tools",
  );
  await assert.rejects(
    ask(plain, { chat_template_kwargs: { messages: [] } }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "chat_template_kwargs",
  );
  await assert.rejects(
    ask(plain, { chat_template_kwargs: "thinking" }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "chat_template_kwargs",
  );
});

test("thinking: true opens <think> in the prompt, so the answer is reasoning_content; false leaves it content; none keeps it raw", async () => {
  const on = await ask(thinking, { chat_template_kwargs: { thinking: true } });
  const off = await ask(thinking, { chat_template_kwargs: { thinking: false } });
  const raw = await ask(thinkingRaw, { chat_template_kwargs: { thinking: true } });
  // the prompt ends in "<think>\n" only when `thinking` reached the template: the split shows it did
  const mOn = on.choices[0].message as Message;
  const mOff = off.choices[0].message as Message;
  const mRaw = raw.choices[0].message as Message;
  assert.ok(mOn.reasoning_content !== undefined && mOn.reasoning_content.length > 0, JSON.stringify(mOn));
  assert.equal(mOn.content, "");
  assert.equal("reasoning_content" in mOff, false);
  assert.ok(mOff.content!.length > 0);
  assert.equal(mRaw.content, mOn.reasoning_content, "--reasoning-format none: the same text, in content");
  assert.equal("reasoning_content" in mRaw, false);
});

test("streamed: deltas carry reasoning_content adding up to the non-streamed answer", async () => {
  const whole = (await ask(thinking, { chat_template_kwargs: { thinking: true } })).choices[0].message as Message;
  const stream = await thinking.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Who made the heaven?" }],
    max_tokens: 6,
    temperature: 0,
    ignore_eos: true,
    stream: true,
    chat_template_kwargs: { thinking: true },
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  let reasoning = "";
  let content = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta as
      | (OpenAI.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string })
      | undefined;
    reasoning += d?.reasoning_content ?? "";
    content += d?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(reasoning, whole.reasoning_content);
  assert.equal(content, "");
  assert.equal(finish, "length");
  // with logprobs every token has its chunk, whatever the split holds back
  const withLp = await thinking.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Who made the heaven?" }],
    max_tokens: 6,
    temperature: 0,
    ignore_eos: true,
    stream: true,
    logprobs: true,
    chat_template_kwargs: { thinking: true },
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  let lpTokens = 0;
  let lpReasoning = "";
  for await (const chunk of withLp) {
    lpTokens += chunk.choices[0]?.logprobs?.content?.length ?? 0;
    lpReasoning += (chunk.choices[0]?.delta as { reasoning_content?: string } | undefined)?.reasoning_content ?? "";
  }
  assert.equal(lpTokens, 6);
  assert.equal(lpReasoning, whole.reasoning_content);
});

test("tools with tool_choice auto reach the template and are looked for; an answer without calls keeps its finish reason", async () => {
  const tool = {
    type: "function",
    function: { name: "lookup_verse", parameters: { type: "object", properties: { book: { type: "string" } } } },
  };
  const withTools = await ask(thinking, {
    tools: [tool],
    tool_choice: "auto",
    chat_template_kwargs: { thinking: false },
  });
  const without = await ask(thinking, { chat_template_kwargs: { thinking: false } });
  const m = withTools.choices[0].message;
  assert.equal(m.tool_calls, undefined);
  assert.equal(withTools.choices[0].finish_reason, "length");
  assert.ok(withTools.usage!.prompt_tokens > without.usage!.prompt_tokens, "the tool's name is in the prompt");
  const none = await ask(thinking, { tools: [tool], tool_choice: "none", chat_template_kwargs: { thinking: false } });
  assert.equal(none.usage!.prompt_tokens, without.usage!.prompt_tokens, "tool_choice none: the tools are not shown");
  await assert.rejects(
    ask(thinking, { tools: [tool], tool_choice: "required" }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice",
  );
  await assert.rejects(
    ask(thinking, { tools: [{ type: "function" }] }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "tools",
  );
});

test("a scripted answer with a tool call: reasoning_content, tool_calls, finish_reason tool_calls, streamed too", async () => {
  const tool = {
    type: "function",
    function: {
      name: "lookup_verse",
      parameters: { type: "object", properties: { book: { type: "string" }, verse: { type: "integer" } } },
    },
  };
  const request = {
    model: MODEL,
    messages: [{ role: "user", content: "Which verse?" }],
    max_tokens: 200,
    temperature: 0,
    tools: [tool],
    chat_template_kwargs: { thinking: true },
  };
  const r = await scripted.chat.completions.create(request as OpenAI.ChatCompletionCreateParamsNonStreaming);
  const m = r.choices[0].message as Message;
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(m.reasoning_content, "Hmm, John.");
  assert.equal(m.content, null);
  assert.equal(m.tool_calls?.length, 1);
  const call = m.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
  assert.equal(call.type, "function");
  assert.match(call.id, /^call_/);
  assert.deepEqual(
    [call.function.name, JSON.parse(call.function.arguments)],
    ["lookup_verse", { book: "John", verse: 3 }],
  );

  const stream = await scripted.chat.completions.create({
    ...request,
    stream: true,
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  let reasoning = "";
  let content = "";
  const calls: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta as
      | (OpenAI.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string })
      | undefined;
    reasoning += d?.reasoning_content ?? "";
    content += d?.content ?? "";
    calls.push(...(d?.tool_calls ?? []));
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(reasoning, "Hmm, John.");
  assert.equal(content, "", "no tool-call markup streamed as content");
  assert.equal(calls.length, 1);
  assert.deepEqual(
    [calls[0].index, calls[0].function?.name, calls[0].function?.arguments],
    [0, "lookup_verse", call.function.arguments],
  );
  assert.equal(finish, "tool_calls");
  // the same answer with tool_choice "none": no calls looked for, the markup is content
  const none = await scripted.chat.completions.create({
    ...request,
    tool_choice: "none",
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  assert.equal(none.choices[0].finish_reason, "stop");
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.match(none.choices[0].message.content!, /^<｜tool▁calls▁begin｜>/);
});

test("latent serve --reasoning-format: listed in --help; a value other than deepseek or none is refused before the model loads", async () => {
  let out = "";
  let err = "";
  const io = { out: (t: string): void => void (out += t), err: (t: string): void => void (err += t), tty: false };
  await serveMain(["--help"], io);
  assert.match(out, /--reasoning-format F/);
  const demo = join(import.meta.dirname, "..", "..", "models", "latent-demo-kjv.gguf");
  await assert.rejects(
    serveMain([demo, "--backend", "cpu", "--reasoning-format", "raw"], io),
    (e: unknown) => e instanceof UsageError && /--reasoning-format must be deepseek or none, got "raw"/.test(e.message),
  );
  assert.doesNotMatch(err, /loaded/);
});
