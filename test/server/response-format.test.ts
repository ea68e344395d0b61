// response_format json_object and json_schema through the real server and the official openai client, on the demo
// model (a Bible-text model that never writes JSON unconstrained): greedy and sampled, streamed or not, the content
// parses and matches the schema when finish_reason is "stop", and max_tokens that cuts the value says "length".
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import OpenAI from "openai";
import { loadModel } from "../../src/runtime/load.js";
import { Metadata } from "../../src/gguf/metadata.js";
import { startServer, type RunningServer, type ServedModel } from "../../src/server/server.js";

const loaded = loadModel(join(import.meta.dirname, "..", "..", "models", "latent-demo-kjv.gguf"));
const MODEL = "demo";
let server: RunningServer;
let client: OpenAI;

before(async () => {
  server = await startServer({ loaded, port: 0, modelId: MODEL, maxBatch: 4 });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
});
after(async () => {
  await server.close();
});

const MESSAGES = [{ role: "user" as const, content: "Who made the heaven and the earth? Answer in JSON." }];

const VERDICT = {
  type: "object",
  properties: { answer: { enum: ["God", "Moses", "Adam"] }, sure: { type: "boolean" } },
  required: ["answer", "sure"],
  additionalProperties: false,
};

function checkVerdict(content: string): void {
  const value = JSON.parse(content) as Record<string, unknown>;
  assert.deepEqual(Object.keys(value).sort(), ["answer", "sure"], content);
  assert.ok(["God", "Moses", "Adam"].includes(value["answer"] as string), content);
  assert.equal(typeof value["sure"], "boolean", content);
}

test("json_schema: greedy and sampled answers parse and validate, finishing with stop", async () => {
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: MESSAGES,
      max_tokens: 64,
      temperature,
      seed: 7,
      n: temperature === 0 ? 1 : 3,
      response_format: { type: "json_schema", json_schema: { name: "verdict", schema: VERDICT, strict: true } },
    });
    for (const choice of r.choices) {
      assert.equal(choice.finish_reason, "stop", choice.message.content ?? "");
      checkVerdict(choice.message.content!);
    }
  }
});

test("json_schema streamed: the pieces join into a valid value", async () => {
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: MESSAGES,
    max_tokens: 64,
    temperature: 0.8,
    seed: 3,
    stream: true,
    response_format: { type: "json_schema", json_schema: { name: "verdict", schema: VERDICT } },
  });
  let content = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    content += chunk.choices[0]?.delta.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "stop");
  checkVerdict(content);
});

test("json_object: an object, or finish_reason length when max_tokens cuts it", async () => {
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: MESSAGES,
      max_tokens: 48,
      temperature,
      seed: 11,
      response_format: { type: "json_object" },
    });
    const choice = r.choices[0];
    const content = choice.message.content ?? "";
    assert.ok(content.trimStart().startsWith("{"), content);
    if (choice.finish_reason === "stop") {
      const value: unknown = JSON.parse(content);
      assert.ok(typeof value === "object" && value !== null && !Array.isArray(value), content);
    } else assert.equal(choice.finish_reason, "length");
  }
  const cut = await client.chat.completions.create({
    model: MODEL,
    messages: MESSAGES,
    max_tokens: 2,
    temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "verdict", schema: VERDICT } },
  });
  assert.equal(cut.choices[0].finish_reason, "length");
  assert.throws(() => JSON.parse(cut.choices[0].message.content!));
});

/** The request must fail with 400, naming `param`. */
async function refused(body: Record<string, unknown>, param: string, message: RegExp): Promise<void> {
  const t = performance.now();
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL,
      messages: MESSAGES,
      max_tokens: 4,
      ...body,
    } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming),
    (e: unknown) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `expected a 400, got ${String(e)}`);
      assert.equal(e.param, param);
      assert.match(e.message, message);
      return true;
    },
  );
  assert.ok(performance.now() - t < 5000, "refused slowly");
}

test("schemas the server cannot honour, and hostile ones, get a 400 naming the problem", async () => {
  const format = (schema: unknown) => ({
    response_format: { type: "json_schema", json_schema: { name: "x", schema } },
  });
  await refused(format({ type: "string", pattern: "a+" }), "response_format", /'pattern' is not supported/);
  await refused(format({ $ref: "#" }), "response_format", /refers to itself/);
  // (by fetch: the openai client walks the body recursively and overflows its own stack on this one)
  const deep = `${'{"type":"array","items":'.repeat(100_000)}{"type":"null"}${"}".repeat(100_000)}`;
  const t = performance.now();
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${deep}}}}`,
  });
  assert.equal(r.status, 400);
  const error = ((await r.json()) as { error: { param: string; message: string } }).error;
  assert.equal(error.param, "response_format");
  assert.match(error.message, /nested too deeply/);
  assert.ok(performance.now() - t < 5000);
  await refused(
    format({ type: "object", properties: { a: { type: "string", description: "x".repeat(1_000_000) } } }),
    "response_format",
    /too large/,
  );
  await refused({ response_format: { type: "yaml" } }, "response_format", /"yaml"/);
  await refused({ response_format: { type: "json_object" }, ignore_eos: true }, "ignore_eos", /response_format/);
});

test("a prompt that opens <think>: the JSON is the content, not reasoning", async () => {
  // DeepSeek-V3.1's switch: with `thinking` the generation prompt ends in an open <think>
  const template =
    "{{ bos_token }}{% for message in messages %}<｜User｜>{{ message['content'] }}{% endfor %}" +
    "{% if add_generation_prompt %}<｜Assistant｜>{% if thinking %}<think>\n{% else %}</think>{% endif %}{% endif %}";
  const entries = new Map(loaded.file.metadata.entries);
  entries.set("tokenizer.chat_template", { ...entries.get("tokenizer.chat_template")!, value: template });
  const served: ServedModel = { file: { metadata: new Metadata(entries) }, config: loaded.config, model: loaded.model };
  const thinking = await startServer({ loaded: served, port: 0, modelId: MODEL, maxBatch: 2 });
  try {
    const c = new OpenAI({ baseURL: `${thinking.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
    const r = await c.chat.completions.create({
      model: MODEL,
      messages: MESSAGES,
      max_tokens: 64,
      temperature: 0,
      chat_template_kwargs: { thinking: true },
      response_format: { type: "json_schema", json_schema: { name: "verdict", schema: VERDICT } },
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const message = r.choices[0].message as { content: string | null; reasoning_content?: string };
    assert.equal(r.choices[0].finish_reason, "stop");
    checkVerdict(message.content!);
    assert.ok(!message.reasoning_content, `reasoning: ${message.reasoning_content}`);
  } finally {
    await thinking.close();
  }
});
