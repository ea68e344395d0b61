// A small inference server for endpoint tests that answers in the JSON shapes of vLLM, SGLang (native /generate and
// its OpenAI routes), llama-server, or a plain OpenAI server with echo / only generated log-probs. Its numbers are
// computed by latent on a (possibly faulty) model: the prompt runs the prefill path over a latent cache, generated
// tokens the decode path, as a real server does. Faults: log-probs of scale × logits, positions off by one, entries
// with only the actual token, a /tokenize with BOS twice, a text path that drops BOS.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { DeepSeek2, Trace } from "../../src/model/deepseek2.js";
import { bf16ToF32, f32ToBF16 } from "../../src/quant/f16.js";
import type { Tokenizer } from "../../src/tokenizer/index.js";
import { logSoftmaxRow } from "../../src/engine/evaluate.js";
import { LatentCache } from "../../src/model/cache.js";
import { topLogprobs } from "../../src/engine/logprobs.js";
import { withF32Weights } from "../../src/doctor/endpoint/variants.js";

export type FakeDialect = "vllm" | "sglang" | "sglang-openai" | "llama-server" | "echo" | "greedy";

export interface FakeServerOptions {
  readonly model: DeepSeek2;
  readonly tokenizer: Tokenizer;
  readonly mode: FakeDialect;
  /** report position i's distribution at position i+1 (prompt log-probs) */
  readonly offByOne?: boolean;
  /** /tokenize adds a second BOS */
  readonly doubleBos?: boolean;
  readonly apiKey?: string;
  /** log-probs (and the greedy choice) of scale × logits */
  readonly logitScale?: number;
  /** prompt log-prob entries carry only the actual token, not the top-k asked for */
  readonly onlyActual?: boolean;
  /** no /tokenize route */
  readonly noTokenize?: boolean;
  /** text prompts are tokenized without the BOS (token-id prompts are unaffected) */
  readonly textDropsBos?: boolean;
  /** every generated token (the first too) drawn from a pseudo-random normalized distribution: garbage decode */
  readonly garbageGenerated?: boolean;
  /** llama-server's /tokenize ignores add_special (never a BOS); completions still add it */
  readonly tokenizeNoBos?: boolean;
  /** echo is rejected (HTTP 400), as by a server that only has prompt_logprobs */
  readonly noEcho?: boolean;
  /** a correct bf16 server: activations (matmul inputs, residual stream) and logits rounded through bf16 */
  readonly bf16?: boolean;
}

interface Run {
  /** log-softmax rows after every prompt position */
  readonly prompt: Float64Array[];
  readonly generated: number[];
  /** the row each generated token was drawn from */
  readonly genRows: Float64Array[];
}

const runs = new WeakMap<DeepSeek2, Map<string, Run>>();
const f32Models = new WeakMap<DeepSeek2, DeepSeek2>();

/** Prefill the prompt in chunks over a cache, then decode `n` greedy tokens one at a time (memoized per model). */
const bf16 = (x: number): number => bf16ToF32(f32ToBF16(x));
const roundActivations: Trace = (_il, stage, rows) => {
  if (stage === "attn_norm" || stage === "ffn_norm" || stage === "residual" || stage === "output_norm")
    for (let i = 0; i < rows.length; i++) rows[i] = bf16(rows[i]);
};

function run(model: DeepSeek2, prompt: readonly number[], n: number, scale: number, lowPrecision: boolean): Run {
  let memo = runs.get(model);
  if (memo === undefined) runs.set(model, (memo = new Map()));
  const key = `${scale}|${n}|${lowPrecision}|${prompt.join(",")}`;
  const hit = memo.get(key);
  if (hit !== undefined) return hit;
  const V = model.config.nVocab;
  // same numbers as the F16 model (F16 → F32 is exact), read without dequantizing every row
  let fast = f32Models.get(model);
  if (fast === undefined) f32Models.set(model, (fast = withF32Weights(model)));
  const rowsOf = (l: Float32Array): Float64Array[] =>
    Array.from({ length: l.length / V }, (_, i) =>
      logSoftmaxRow(l.subarray(i * V, (i + 1) * V).map((x) => (lowPrecision ? bf16(x) : x) * scale)),
    );
  const trace = lowPrecision ? { trace: roundActivations } : {};
  const cache = new LatentCache(model.config);
  const rows: Float64Array[] = [];
  for (let i = 0; i < prompt.length; i += 256)
    rows.push(...rowsOf(fast.forward(prompt.slice(i, i + 256), cache, { path: "prefill", logits: "all", ...trace })));
  const generated: number[] = [];
  const genRows: Float64Array[] = [];
  let row = rows[rows.length - 1];
  for (let j = 0; j < n; j++) {
    const next = topLogprobs(row, 1)[0][0];
    generated.push(next);
    genRows.push(row);
    if (j + 1 < n) row = rowsOf(fast.forward([next], cache, { path: "decode", logits: "all", ...trace }))[0];
  }
  const r = { prompt: rows, generated, genRows };
  memo.set(key, r);
  return r;
}

/** A run whose generated tokens come from pseudo-random (but normalized) distributions instead of the model. */
function garbled(r: Run, V: number): Run {
  let seed = 12345;
  const rand = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const genRows = r.genRows.map(() => logSoftmaxRow(Array.from({ length: V }, () => rand() * 8)));
  return { ...r, genRows, generated: genRows.map((row) => topLogprobs(row, 1)[0][0]) };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

export async function startFakeServer(
  o: FakeServerOptions,
): Promise<{ url: string; close: () => Promise<void>; requests: string[] }> {
  const requests: string[] = [];
  const tok = o.tokenizer;
  const scale = o.logitScale ?? 1;
  const decode = (id: number): string => tok.decode([id]);
  const textIds = (text: string): number[] => {
    const t = tok.encode(text);
    return o.textDropsBos === true && t[0] === tok.bosId ? t.slice(1) : t;
  };
  const runOf = (p: readonly number[], n: number): Run => {
    const r = run(o.model, p, n, scale, o.bf16 === true);
    return o.garbageGenerated === true ? garbled(r, o.model.config.nVocab) : r;
  };
  const promptOf = (p: unknown): number[] => (typeof p === "string" ? textIds(p) : (p as number[]));
  const promptRows = (r: Run): Float64Array[] =>
    o.offByOne === true ? [r.prompt[0], ...r.prompt.slice(0, -1)] : r.prompt;
  const usage = (p: number[], r: Run) => ({
    prompt_tokens: p.length,
    completion_tokens: r.generated.length,
    total_tokens: p.length + r.generated.length,
  });
  // OpenAI legacy logprobs over (row, token) pairs; a null row for the first prompt token
  const legacy = (pairs: { row: Float64Array | null; id: number }[], k: number, asIds: boolean) => {
    const name = (id: number): string => (asIds ? `token_id:${id}` : decode(id));
    return {
      tokens: pairs.map((p) => name(p.id)),
      token_logprobs: pairs.map((p) => (p.row === null ? null : p.row[p.id])),
      top_logprobs: pairs.map((p) =>
        p.row === null ? null : Object.fromEntries(topLogprobs(p.row, k).map(([id, v]) => [name(id), v])),
      ),
      text_offset: pairs.map(() => 0),
    };
  };
  const llamaEntry = (row: Float64Array, id: number, k: number) => ({
    id,
    token: decode(id),
    bytes: [...Buffer.from(decode(id))],
    logprob: row[id],
    top_logprobs: topLogprobs(row, k).map(([t, v]) => ({
      id: t,
      token: decode(t),
      bytes: [...Buffer.from(decode(t))],
      logprob: v,
    })),
  });

  const completions = (b: Record<string, unknown>, res: ServerResponse): void => {
    const p = promptOf(b.prompt);
    const n = Number(b.max_tokens ?? 16);
    const k = Number(b.logprobs ?? 0);
    const r = runOf(p, n);
    const rows = promptRows(r);
    const asIds = b.return_tokens_as_token_ids === true && o.mode === "vllm";
    const genPairs = r.generated.map((id, j) => ({ row: r.genRows[j], id }));
    if (o.mode === "llama-server") {
      if (b.echo === true)
        return send(res, 500, { error: { code: 500, message: "echo is not supported", type: "server_error" } });
      return send(res, 200, {
        choices: [
          {
            text: tok.decode(r.generated),
            index: 0,
            finish_reason: "length",
            logprobs: k > 0 ? { content: genPairs.map((g) => llamaEntry(g.row, g.id, k)) } : null,
          },
        ],
        usage: usage(p, r),
      });
    }
    const choice: Record<string, unknown> = {
      index: 0,
      text: tok.decode(r.generated),
      finish_reason: "length",
      logprobs: null,
    };
    if (b.prompt_logprobs !== undefined && o.mode === "vllm") {
      const pk = Number(b.prompt_logprobs);
      choice.prompt_logprobs = p.map((id, i) => {
        if (i === 0) return null;
        const e: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
        const row = rows[i - 1];
        if (o.onlyActual !== true)
          topLogprobs(row, pk).forEach(
            ([t, v], rank) => (e[String(t)] = { logprob: v, rank: rank + 1, decoded_token: decode(t) }),
          );
        if (!(String(id) in e))
          e[String(id)] = {
            logprob: row[id],
            rank: 1 + [...row].filter((x) => x > row[id]).length,
            decoded_token: decode(id),
          };
        return e;
      });
    } else if (b.prompt_logprobs !== undefined && (o.mode === "echo" || o.mode === "greedy")) {
      return send(res, 400, { error: "unsupported parameter: prompt_logprobs" });
    }
    if (b.echo === true) {
      if (o.mode === "greedy" || o.noEcho === true) return send(res, 400, { error: "unsupported parameter: echo" });
      const pairs = [...p.map((id, i) => ({ row: i === 0 ? null : rows[i - 1], id })), ...genPairs];
      choice.text = tok.decode([...p, ...r.generated]);
      if (k > 0) choice.logprobs = legacy(pairs, k, asIds);
    } else if (k > 0) {
      choice.logprobs = legacy(genPairs, k, asIds);
    }
    return send(res, 200, {
      id: "cmpl-fake",
      object: "text_completion",
      model: "fake-model",
      choices: [choice],
      usage: usage(p, r),
    });
  };

  const generate = (b: Record<string, unknown>, res: ServerResponse): void => {
    const p = Array.isArray(b.input_ids) ? (b.input_ids as number[]) : textIds(String(b.text ?? ""));
    const sp = (b.sampling_params ?? {}) as Record<string, unknown>;
    const r = runOf(p, Number(sp.max_new_tokens ?? 128));
    const rows = promptRows(r);
    const k = Number(b.top_logprobs_num ?? 0);
    const withText = b.return_text_in_logprobs === true;
    const tuple = (lp: number | null, id: number): [number | null, number, string | null] => [
      lp,
      id,
      withText ? decode(id) : null,
    ];
    const tops = (row: Float64Array) => topLogprobs(row, k).map(([id, v]) => tuple(v, id));
    const meta: Record<string, unknown> = {
      id: "fake",
      finish_reason: { type: "length", length: r.generated.length },
      prompt_tokens: p.length,
      completion_tokens: r.generated.length,
      cached_tokens: 0,
    };
    if (b.return_logprob === true) {
      const start = Number(b.logprob_start_len ?? -1);
      const from = start < 0 ? p.length : start;
      meta.input_token_logprobs = p
        .slice(from)
        .map((id, j) => tuple(from + j === 0 ? null : rows[from + j - 1][id], id));
      meta.input_top_logprobs = p.slice(from).map((_, j) => (from + j === 0 ? null : tops(rows[from + j - 1])));
      meta.output_token_logprobs = r.generated.map((id, j) => tuple(r.genRows[j][id], id));
      meta.output_top_logprobs = r.genRows.map((row) => tops(row));
    }
    return send(res, 200, { text: tok.decode(r.generated), output_ids: r.generated, meta_info: meta });
  };

  const llamaCompletion = (b: Record<string, unknown>, res: ServerResponse): void => {
    const p = promptOf(b.prompt);
    const r = runOf(p, Number(b.n_predict ?? 16));
    const k = Number(b.n_probs ?? 0);
    const body: Record<string, unknown> = {
      content: tok.decode(r.generated),
      tokens: [],
      stop: true,
      tokens_predicted: r.generated.length,
      tokens_evaluated: p.length,
    };
    if (k > 0) body.completion_probabilities = r.generated.map((id, j) => llamaEntry(r.genRows[j], id, k));
    return send(res, 200, body);
  };

  const tokenize = (b: Record<string, unknown>, res: ServerResponse): void => {
    const withBos = (t: number[]): number[] =>
      o.doubleBos === true && tok.bosId !== undefined ? [tok.bosId, ...t] : t;
    if (o.mode === "llama-server") {
      // llama-server reads only `content`: the vLLM body tokenizes "" to no tokens
      const t =
        typeof b.content === "string"
          ? tok.encode(b.content, { addSpecial: b.add_special === true && o.tokenizeNoBos !== true })
          : [];
      return send(res, 200, { tokens: withBos(t) });
    }
    if (typeof b.prompt !== "string")
      return send(res, 400, { object: "error", message: "prompt: field required", type: "BadRequestError", code: 400 });
    const t = withBos(tok.encode(b.prompt));
    return send(res, 200, {
      count: t.length,
      max_model_len: o.model.config.contextLength,
      tokens: t,
      token_strs: null,
    });
  };

  const server = createServer((req, res) => {
    void (async () => {
      requests.push(`${req.method} ${req.url}`);
      if (o.apiKey !== undefined && req.headers.authorization !== `Bearer ${o.apiKey}` && req.url !== "/health")
        return send(res, 401, { error: "unauthorized" });
      if (req.url === "/health")
        return o.mode === "llama-server" ? send(res, 200, { status: "ok" }) : res.writeHead(200).end();
      if (req.url === "/v1/models")
        return send(res, 200, { object: "list", data: [{ id: "fake-model", object: "model" }] });
      const b = await body(req);
      const sglangNative = o.mode === "sglang";
      if (
        req.url === "/tokenize" &&
        o.noTokenize !== true &&
        (o.mode === "vllm" || o.mode === "llama-server" || o.mode === "echo" || o.mode === "greedy")
      )
        return tokenize(b, res);
      if (req.url === "/generate" && sglangNative) return generate(b, res);
      if (req.url === "/completion" && o.mode === "llama-server") return llamaCompletion(b, res);
      if (req.url === "/v1/completions") return completions(b, res);
      return send(res, 404, { error: `no route ${req.url}` });
    })().catch((e: unknown) => send(res, 500, { error: String(e) }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
