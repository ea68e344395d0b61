// latent serve through the official openai client on a loopback port: completions, chat, streaming, logprobs, echo,
// prompt_logprobs (= the reference path), stops, n, batching = alone, prefix caching, cancellation, errors, metrics.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { generateSync } from "../../src/engine/generate.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { logSoftmax } from "../../src/engine/logprobs.js";
import { startServer, type RunningServer } from "../../src/server/server.js";
import { logitsMain } from "../../src/cli/logits.js";
import type { DeepSeek2, SequenceChunk } from "../../src/model/deepseek2.js";
import { CASES, randomTokens, synthModel } from "../helpers/synth.js";

const synth = synthModel(CASES[0]!, 2);
const loaded = loadModel(synth.path);
const tok = Tokenizer.fromMetadata(loaded.file.metadata);
const V = loaded.config.nVocab;
let server: RunningServer;
let client: OpenAI;
const servers: RunningServer[] = [];

async function extraServer(opts: Parameters<typeof startServer>[0]): Promise<RunningServer> {
  const s = await startServer({ loaded, port: 0, ...opts });
  servers.push(s);
  return s;
}
function clientFor(s: RunningServer, apiKey = "none"): OpenAI {
  return new OpenAI({ baseURL: `${s.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
}

before(async () => {
  server = await extraServer({ modelId: "tiny", prefillChunk: 8, tokenBudget: 24, maxBatch: 8 });
  client = clientFor(server);
});
after(async () => {
  for (const s of servers) await s.close();
  synth.cleanup();
});

/** Poll until the engine holds no pages (cancellation is processed between steps). */
async function settled(s: RunningServer): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const st = s.stats();
    if (st.pagesInUse === 0 && st.running === 0 && st.waiting === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`pages still in use: ${JSON.stringify(s.stats())}`);
}

const alone = (prompt: number[], n: number) =>
  generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: n, ignoreEog: true, logprobs: 3 });

interface PromptLp {
  [id: string]: { logprob: number; rank: number; decoded_token: string };
}

test("GET /v1/models, /health; POST /tokenize and /detokenize (llama-server shapes)", async () => {
  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    ["tiny"],
  );
  const health = await fetch(`${server.url}/health`);
  assert.deepEqual(await health.json(), { status: "ok" });
  const t = (await (
    await fetch(`${server.url}/tokenize`, { method: "POST", body: JSON.stringify({ content: "hello world" }) })
  ).json()) as { tokens: number[] };
  assert.deepEqual(t.tokens, tok.encode("hello world", { addSpecial: false }));
  const tb = (await (
    await fetch(`${server.url}/tokenize`, {
      method: "POST",
      body: JSON.stringify({ content: "hello", add_special: true, with_pieces: true }),
    })
  ).json()) as { tokens: { id: number; piece: string }[] };
  assert.equal(tb.tokens[0]!.id, tok.bosId);
  assert.equal(tb.tokens.map((p) => p.piece).join(""), tok.decode(tb.tokens.map((p) => p.id)));
  const d = (await (
    await fetch(`${server.url}/detokenize`, { method: "POST", body: JSON.stringify({ tokens: t.tokens }) })
  ).json()) as { content: string };
  assert.equal(d.content, "hello world");
});

test("completion: greedy text, usage, logprobs equal the single-sequence generator", async () => {
  const r = await client.completions.create({
    model: "tiny",
    prompt: "hello world",
    max_tokens: 12,
    temperature: 0,
    logprobs: 3,
    ignore_eos: true,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  const prompt = tok.encodePrompt("hello world");
  const want = alone(prompt, 12);
  const c = r.choices[0]!;
  assert.equal(r.object, "text_completion");
  assert.equal(c.text, want.text);
  assert.equal(c.finish_reason, "length");
  assert.deepEqual(r.usage, {
    prompt_tokens: prompt.length,
    completion_tokens: 12,
    total_tokens: prompt.length + 12,
    prompt_tokens_details: { cached_tokens: 0 },
  });
  const lp = c.logprobs!;
  assert.equal(lp.tokens!.length, 12);
  lp.token_logprobs!.forEach((x, i) => assert.ok(Math.abs(x - want.logprobs[i]!) <= 1e-4));
  lp.top_logprobs!.forEach((t) => assert.ok(Object.keys(t).length >= 1 && Object.keys(t).length <= 3));
  assert.deepEqual(
    lp.tokens,
    want.tokens.map((id) => tok.decode([id])),
  );
});

test("completion from token ids: used as given (no BOS)", async () => {
  const ids = randomTokens(10, 3, 3, V);
  const r = await client.completions.create({
    model: "tiny",
    prompt: ids,
    max_tokens: 6,
    temperature: 0,
    ignore_eos: true,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  assert.equal(r.usage!.prompt_tokens, 10);
  assert.equal(r.choices[0]!.text, alone(ids, 6).text);
});

test("streaming completion: the chunks add up to the non-streamed text; usage chunk; [DONE]", async () => {
  const params = { model: "tiny", prompt: "the cat", max_tokens: 10, temperature: 0, ignore_eos: true };
  const full = await client.completions.create(params as OpenAI.CompletionCreateParamsNonStreaming);
  const stream = await client.completions.create({
    ...params,
    stream: true,
    stream_options: { include_usage: true },
  } as OpenAI.CompletionCreateParamsStreaming);
  let text = "";
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  let chunks = 0;
  for await (const ch of stream) {
    chunks++;
    assert.equal(ch.object, "text_completion");
    for (const c of ch.choices) {
      text += c.text;
      if (c.finish_reason !== null) finish = c.finish_reason;
    }
    if (ch.usage) usage = ch.usage;
  }
  assert.ok(chunks >= 3);
  assert.equal(text, full.choices[0]!.text);
  assert.equal(finish, "length");
  assert.equal(usage?.completion_tokens, 10);
});

test("echo (with logprobs: prompt positions first, the first one null) and vLLM prompt_logprobs = reference path", async () => {
  const ids = randomTokens(14, 5, 3, V);
  const params: OpenAI.CompletionCreateParamsNonStreaming & { prompt_logprobs: number } = {
    model: "tiny",
    prompt: ids,
    max_tokens: 3,
    temperature: 0,
    echo: true,
    logprobs: 2,
    prompt_logprobs: 4,
  };
  const r = await client.completions.create(params);
  const c = r.choices[0]! as OpenAI.CompletionChoice & { prompt_logprobs: (PromptLp | null)[] };
  assert.ok(c.text.startsWith(tok.decode(ids)));
  const lp = c.logprobs!;
  assert.equal(lp.token_logprobs!.length, 14 + 3);
  assert.equal(lp.token_logprobs![0], null);
  assert.equal(lp.top_logprobs![0], null);
  const rows = evaluateAll(loaded.model, ids, { path: "reference" });
  assert.equal(c.prompt_logprobs.length, 14);
  assert.equal(c.prompt_logprobs[0], null);
  for (let i = 1; i < 14; i++) {
    const want = logSoftmax(rows[i - 1]!);
    const entry = c.prompt_logprobs[i]!;
    const own = entry[String(ids[i])]!;
    assert.ok(Math.abs(own.logprob - want[ids[i]!]!) <= 1e-4, `position ${i}`);
    assert.equal(own.rank, 1 + [...want].filter((x) => x > want[ids[i]!]!).length);
    assert.ok(Math.abs(lp.token_logprobs![i]! - want[ids[i]!]!) <= 1e-4);
    for (const [id, e] of Object.entries(entry)) assert.ok(Math.abs(e.logprob - want[Number(id)]!) <= 1e-4);
    assert.ok(Object.keys(entry).length >= 4);
  }
  // and they equal `latent logits --full --json` for the same tokens
  let out = "";
  await logitsMain([synth.path, "--tokens", ids.join(","), "--full", "--json"], {
    out: (t) => void (out += t),
    err: () => {},
    tty: false,
  });
  const cli = JSON.parse(out) as { tokens: number[]; logprobs: (number | null)[][] };
  assert.deepEqual(cli.tokens, ids);
  for (let i = 1; i < 14; i++) {
    for (const [id, e] of Object.entries(c.prompt_logprobs[i]!))
      assert.ok(Math.abs(e.logprob - cli.logprobs[i - 1]![Number(id)]!) <= 1e-4);
  }
  // streamed echo starts with the prompt text
  const stream = await client.completions.create({
    model: "tiny",
    prompt: ids,
    max_tokens: 2,
    temperature: 0,
    echo: true,
    stream: true,
  });
  let first: string | undefined;
  for await (const ch of stream) first ??= ch.choices[0]?.text;
  assert.equal(first, tok.decode(ids));
});

test("chat: template applied, logprobs with top_logprobs, streaming deltas add up", async () => {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: "be brief" },
    { role: "user", content: "hi there" },
  ];
  const prompt = tok.encodeChat(
    messages.map((m) => ({ role: m.role, content: m.content as string })),
    { addGenerationPrompt: true },
  );
  const want = alone(prompt, 8);
  const r = await client.chat.completions.create({
    model: "tiny",
    messages,
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
    ignore_eos: true,
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  const c = r.choices[0]!;
  assert.equal(r.object, "chat.completion");
  assert.equal(c.message.role, "assistant");
  assert.equal(c.message.content, want.text);
  assert.equal(r.usage!.prompt_tokens, prompt.length);
  const content = c.logprobs!.content!;
  assert.equal(content.length, 8);
  content.forEach((e, i) => {
    assert.ok(Math.abs(e.logprob - want.logprobs[i]!) <= 1e-4);
    assert.equal(e.top_logprobs.length, 3);
    assert.deepEqual(e.bytes, [...tok.tokenBytes(want.tokens[i]!)]);
  });
  const stream = await client.chat.completions.create({
    model: "tiny",
    messages,
    max_tokens: 8,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    ignore_eos: true,
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  let text = "";
  let role: string | undefined;
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const ch of stream) {
    assert.equal(ch.object, "chat.completion.chunk");
    for (const d of ch.choices) {
      role ??= d.delta.role;
      text += d.delta.content ?? "";
      if (d.finish_reason !== null) finish = d.finish_reason;
    }
    if (ch.usage) usage = ch.usage;
  }
  assert.equal(role, "assistant");
  assert.equal(text, want.text);
  assert.equal(finish, "length");
  assert.equal(usage?.completion_tokens, 8);
});

test("stop sequences cut the text (streamed and not); n and seed give reproducible choices", async () => {
  const base = { model: "tiny", prompt: "once upon", max_tokens: 16, temperature: 0, ignore_eos: true };
  const full = (await client.completions.create(base as OpenAI.CompletionCreateParamsNonStreaming)).choices[0]!.text;
  const stop = full.slice(4, 6);
  const cut = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({
    ...base,
    stop: [stop, "zzzz"],
  } as OpenAI.CompletionCreateParamsNonStreaming);
  assert.equal(r.choices[0]!.text, cut);
  assert.equal(r.choices[0]!.finish_reason, "stop");
  const stream = await client.completions.create({
    ...base,
    stop,
    stream: true,
  } as OpenAI.CompletionCreateParamsStreaming);
  let text = "";
  for await (const ch of stream) text += ch.choices[0]?.text ?? "";
  assert.equal(text, cut);

  const sampled = {
    model: "tiny",
    prompt: "once upon",
    max_tokens: 8,
    temperature: 1,
    top_k: 40,
    top_p: 0.9,
    min_p: 0.01,
    seed: 42,
    n: 3,
  } as OpenAI.CompletionCreateParamsNonStreaming;
  const a = await client.completions.create(sampled);
  const b = await client.completions.create(sampled);
  assert.deepEqual(
    a.choices.map((c) => c.index),
    [0, 1, 2],
  );
  assert.deepEqual(
    a.choices.map((c) => c.text),
    b.choices.map((c) => c.text),
  );
  const chat = await client.chat.completions.create({
    model: "tiny",
    messages: [{ role: "user", content: "x" }],
    max_tokens: 4,
    n: 2,
  });
  assert.equal(chat.choices.length, 2);
});

test("concurrent requests are batched and give the same greedy tokens and logprobs as each alone", async () => {
  const prompts = [
    randomTokens(5, 11, 3, V),
    randomTokens(30, 12, 3, V),
    randomTokens(17, 13, 3, V),
    randomTokens(2, 14, 3, V),
    randomTokens(45, 15, 3, V),
    randomTokens(9, 16, 3, V),
  ];
  const steps0 = server.scheduler.stats().steps;
  const rs = await Promise.all(
    prompts.map((p) =>
      client.completions.create({
        model: "tiny",
        prompt: p,
        max_tokens: 10,
        temperature: 0,
        logprobs: 1,
        ignore_eos: true,
      } as OpenAI.CompletionCreateParamsNonStreaming),
    ),
  );
  const steps = server.scheduler.stats().steps - steps0;
  rs.forEach((r, i) => {
    const want = alone(prompts[i]!, 10);
    assert.equal(r.choices[0]!.text, want.text, `prompt ${i}`);
    r.choices[0]!.logprobs!.token_logprobs!.forEach((x, j) => assert.ok(Math.abs(x - want.logprobs[j]!) <= 1e-4));
  });
  // alone they would take ≥ 6 × 10 steps
  assert.ok(steps < 40, `${steps} steps`);
});

test("logSteps: one log line per forward pass, with its sequences, tokens and time", async () => {
  const lines: string[] = [];
  const s = await extraServer({ loaded, modelId: "tiny", logSteps: true, log: (l) => lines.push(l) });
  const c = clientFor(s);
  const prompts = [randomTokens(7, 21, 3, V), randomTokens(4, 22, 3, V)];
  await Promise.all(
    prompts.map((p) =>
      c.completions.create({
        model: "tiny",
        prompt: p,
        max_tokens: 3,
        temperature: 0,
        ignore_eos: true,
      } as OpenAI.CompletionCreateParamsNonStreaming),
    ),
  );
  const steps = lines.filter((l) => l.startsWith("step: "));
  assert.equal(steps.length, s.scheduler.stats().steps, lines.join("\n"));
  for (const l of steps) assert.match(l, /^step: \d+ sequences, \d+ tokens \(\d+ decoding\), \d+\.\d ms$/);
  assert.ok(
    steps.some((l) => l.startsWith("step: 2 sequences")),
    lines.join("\n"),
  );
});

test("a burst of requests is admitted together although each step blocks the event loop (Node accepts one connection per loop turn)", async () => {
  // a model whose every forward pass blocks the loop for 30 ms, as a GPU step waited for does
  const slow = Object.create(loaded.model) as typeof loaded.model;
  slow.forwardBatch = (chunks) => {
    const t = performance.now();
    while (performance.now() - t < 30);
    return loaded.model.forwardBatch(chunks);
  };
  const lines: string[] = [];
  const s = await extraServer({
    loaded: { ...loaded, model: slow },
    modelId: "tiny",
    maxBatch: 16,
    logSteps: true,
    log: (l) => lines.push(l),
  });
  const c = clientFor(s);
  const prompts = Array.from({ length: 12 }, (_, i) => randomTokens(6, 60 + i, 3, V));
  await Promise.all(
    prompts.map((p) =>
      c.completions.create({
        model: "tiny",
        prompt: p,
        max_tokens: 4,
        temperature: 0,
        ignore_eos: true,
      } as OpenAI.CompletionCreateParamsNonStreaming),
    ),
  );
  // steps that took in prompt tokens: one per request had each arrived during the previous step
  const admitting = lines
    .filter((l) => /^step: /.test(l))
    .filter((l) => {
      const m = /(\d+) tokens \((\d+) decoding\)/.exec(l)!;
      return Number(m[1]) > Number(m[2]);
    });
  assert.ok(admitting.length <= 3, `${admitting.length} steps admitted prompts:\n${lines.join("\n")}`);
});

test("prefix caching: a repeated system prompt is not recomputed (usage and /metrics show the hit)", async () => {
  const system = "You are a helpful assistant. ".repeat(8);
  const ask = (q: string): Promise<OpenAI.ChatCompletion> =>
    client.chat.completions.create({
      model: "tiny",
      messages: [
        { role: "system", content: system },
        { role: "user", content: q },
      ],
      max_tokens: 2,
      temperature: 0,
    });
  await ask("first question");
  const r = await ask("second question");
  const cached = r.usage!.prompt_tokens_details!.cached_tokens!;
  assert.ok(cached >= 32, `cached ${cached}`);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  const hits = Number(/^latent_prefix_cache_hits_total (\d+)/m.exec(metrics)?.[1]);
  assert.ok(hits >= cached / 16);
});

test("cancellation: aborting a stream frees its pages at once", async () => {
  const ac = new AbortController();
  const stream = await client.completions.create(
    {
      model: "tiny",
      prompt: randomTokens(40, 21, 3, V),
      max_tokens: 5000,
      temperature: 0,
      stream: true,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsStreaming,
    { signal: ac.signal },
  );
  let n = 0;
  try {
    for await (const _ of stream) {
      if (++n === 5) {
        ac.abort();
        break;
      }
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError, String(e));
  }
  assert.equal(n, 5);
  await settled(server);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /^latent_kv_pages_in_use 0$/m);
  assert.match(metrics, /^latent_running_sequences 0$/m);
  // a non-streamed request whose client goes away is cancelled too
  const ac2 = new AbortController();
  const p = client.completions.create(
    {
      model: "tiny",
      prompt: "abc",
      max_tokens: 5000,
      temperature: 0,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsNonStreaming,
    { signal: ac2.signal },
  );
  while (server.stats().running === 0) await new Promise((r) => setTimeout(r, 5));
  ac2.abort();
  await assert.rejects(p);
  await settled(server);
});

test("errors: OpenAI-shaped JSON with the right status, the server keeps serving", async () => {
  const raw = async (
    path: string,
    body: string,
    headers: Record<string, string> = {},
  ): Promise<{
    status: number;
    json: { error: { message: string; type: string; param: string | null; code: string | null } };
  }> => {
    const r = await fetch(`${server.url}${path}`, {
      method: "POST",
      body,
      headers: { "content-type": "application/json", ...headers },
    });
    return {
      status: r.status,
      json: (await r.json()) as { error: { message: string; type: string; param: string | null; code: string | null } },
    };
  };
  const bad = await raw("/v1/completions", "{not json");
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.type, "invalid_request_error");
  assert.match(bad.json.error.message, /not valid JSON/);
  assert.equal((await raw("/v1/completions", "[1,2]")).status, 400);
  assert.equal((await raw("/v1/completions", "x".repeat(5 * 1024 * 1024))).status, 413);
  const notFound = await fetch(`${server.url}/v2/nothing`);
  assert.equal(notFound.status, 404);

  const expect400 = async (params: Record<string, unknown>, param: string | null, code?: string): Promise<void> => {
    await assert.rejects(
      client.completions.create({
        model: "tiny",
        prompt: "hi",
        ...params,
      } as unknown as OpenAI.CompletionCreateParamsNonStreaming),
      (e: unknown) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.status, 400);
        assert.equal(e.param, param);
        if (code !== undefined) assert.equal(e.code, code);
        return true;
      },
    );
  };
  await expect400({ temperature: "hot" }, "temperature");
  await expect400({ max_tokens: 1.5 }, "max_tokens");
  await expect400({ logprobs: 21 }, "logprobs");
  await expect400({ n: 0 }, "n");
  await expect400({ stop: [1] }, "stop");
  await expect400({ top_p: 0 }, "top_p");
  await expect400({ prompt: { a: 1 } }, "prompt");
  await expect400({ prompt: [1, V + 5] }, null);
  await expect400({ max_tokens: 1_000_000 }, "max_tokens", "context_length_exceeded");
  await assert.rejects(
    client.chat.completions.create({
      model: "tiny",
      messages: "hi",
    } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming),
    OpenAI.BadRequestError,
  );
  await assert.rejects(
    client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }], top_logprobs: 2 }),
    OpenAI.BadRequestError,
  );
  await assert.rejects(
    client.completions.create({ model: "gpt-4", prompt: "hi" }),
    (e: unknown) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
  );

  // a short context: prompts longer than it, and prompt + max_tokens beyond it
  const small = await extraServer({ modelId: "tiny", contextLength: 32 });
  const sc = clientFor(small);
  await assert.rejects(
    sc.completions.create({ model: "tiny", prompt: randomTokens(40, 1, 3, V) }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded",
  );
  await assert.rejects(
    sc.completions.create({ model: "tiny", prompt: randomTokens(20, 1, 3, V), max_tokens: 13 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded",
  );
  const capped = await sc.chat.completions.create({
    model: "tiny",
    messages: [{ role: "user", content: "hi" }],
    temperature: 0,
    ignore_eos: true,
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  assert.equal(capped.choices[0]!.finish_reason, "length");
  assert.equal(capped.usage!.total_tokens, 32, "without max_tokens, chat fills the context");

  // API key
  const keyed = await extraServer({ modelId: "tiny", apiKey: "sekret" });
  await assert.rejects(
    clientFor(keyed, "wrong").models.list(),
    (e: unknown) => e instanceof OpenAI.AuthenticationError && e.code === "invalid_api_key",
  );
  const ok = await clientFor(keyed, "sekret").models.list();
  assert.equal(ok.data[0]!.id, "tiny");
  assert.equal((await fetch(`${keyed.url}/health`)).status, 200);

  // bounded queue → 429
  const queued = await extraServer({ modelId: "tiny", maxQueue: 2 });
  await assert.rejects(
    clientFor(queued).completions.create({ model: "tiny", prompt: "hi", n: 3 }),
    (e: unknown) => e instanceof OpenAI.RateLimitError && e.status === 429,
  );

  // a forward pass that throws fails its requests with 500 (streams: an error event), not the process
  const poisoned = Object.create(loaded.model) as DeepSeek2;
  poisoned.forwardBatch = (seqs: readonly SequenceChunk[]): Float32Array[] => {
    if (seqs.some((q) => q.tokens.includes(7))) throw new Error("poisoned token");
    return loaded.model.forwardBatch(seqs);
  };
  const broken = await extraServer({ modelId: "tiny", loaded: { ...loaded, model: poisoned } });
  const bc = clientFor(broken);
  await assert.rejects(
    bc.completions.create({ model: "tiny", prompt: [5, 6, 7, 8] }),
    (e: unknown) => e instanceof OpenAI.InternalServerError && /poisoned token/.test(e.message),
  );
  const bs = await bc.completions.create({ model: "tiny", prompt: [5, 7], stream: true });
  await assert.rejects(async () => {
    for await (const _ of bs) {
      // the error event ends the stream
    }
  }, /poisoned token/);
  const fine = await bc.completions.create({
    model: "tiny",
    prompt: [5, 6],
    max_tokens: 3,
    temperature: 0,
    ignore_eos: true,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  assert.equal(fine.usage!.completion_tokens, 3);
  await settled(broken);

  // still serving
  const r = await client.completions.create({ model: "tiny", prompt: "still here", max_tokens: 2 });
  assert.equal(r.choices.length, 1);
  await settled(server);
});
