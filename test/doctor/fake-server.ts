// A small OpenAI-compatible server for endpoint tests: vLLM-style prompt_logprobs, OpenAI echo + logprobs, or only
// greedy + top logprobs, computed by latent on a (possibly faulty) model; optionally off by one position.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { DeepSeek2 } from "../../src/model/deepseek2.js";
import type { Tokenizer } from "../../src/tokenizer/index.js";
import { evaluateAll, logSoftmaxRow } from "../../src/engine/evaluate.js";
import { topLogprobs } from "../../src/engine/logprobs.js";

export interface FakeServerOptions {
  readonly model: DeepSeek2;
  readonly tokenizer: Tokenizer;
  readonly mode: "vllm" | "echo" | "greedy";
  /** report position i's distribution at position i+1 */
  readonly offByOne?: boolean;
  /** /tokenize adds a second BOS */
  readonly doubleBos?: boolean;
  readonly apiKey?: string;
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

export async function startFakeServer(o: FakeServerOptions): Promise<{ url: string; close: () => Promise<void>; requests: string[] }> {
  const requests: string[] = [];
  const rows = (tokens: number[]): Float64Array[] => {
    const r = evaluateAll(o.model, tokens, { path: "prefill", chunk: 4 }).map((x) => logSoftmaxRow(x));
    return o.offByOne ? [r[0]!, ...r.slice(0, -1)] : r;
  };
  const server = createServer((req, res) => {
    void (async () => {
      requests.push(`${req.method} ${req.url}`);
      if (o.apiKey !== undefined && req.headers.authorization !== `Bearer ${o.apiKey}` && req.url !== "/health") return send(res, 401, { error: "unauthorized" });
      if (req.url === "/health") return send(res, 200, { status: "ok" });
      if (req.url === "/v1/models") return send(res, 200, { object: "list", data: [{ id: "fake-model", object: "model" }] });
      const b = await body(req);
      if (req.url === "/tokenize") {
        const text = typeof b.prompt === "string" ? b.prompt : String(b.content ?? "");
        const t = o.tokenizer.encode(text);
        return send(res, 200, { tokens: o.doubleBos && o.tokenizer.bosId !== undefined ? [o.tokenizer.bosId, ...t] : t });
      }
      if (req.url !== "/v1/completions") return send(res, 404, { error: "not found" });
      const tokens = b.prompt as number[];
      const k = Number(b.logprobs ?? 0);
      const asIds = b.return_tokens_as_token_ids === true && o.mode === "vllm";
      const name = (id: number): string => (asIds ? `token_id:${id}` : o.tokenizer.decode([id]));
      if (o.mode === "vllm" && b.prompt_logprobs !== undefined) {
        const lp = rows(tokens);
        const pk = Number(b.prompt_logprobs);
        const prompt_logprobs = tokens.map((tok, i) => {
          if (i === 0) return null;
          const e: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
          topLogprobs(lp[i - 1]!, pk).forEach(([id, v], r) => (e[name(id)] = { logprob: v, rank: r + 1, decoded_token: o.tokenizer.decode([id]) }));
          e[name(tok)] = { logprob: lp[i - 1]![tok]!, rank: 0, decoded_token: o.tokenizer.decode([tok]) };
          return e;
        });
        return send(res, 200, { choices: [{ text: "", prompt_logprobs }] });
      }
      if (o.mode === "echo" && b.echo === true) {
        const lp = rows(tokens);
        return send(res, 200, {
          choices: [{ text: o.tokenizer.decode(tokens), logprobs: {
            tokens: tokens.map(name),
            token_logprobs: tokens.map((t, i) => (i === 0 ? null : lp[i - 1]![t]!)),
            top_logprobs: tokens.map((_, i) => (i === 0 ? null : Object.fromEntries(topLogprobs(lp[i - 1]!, k).map(([id, v]) => [name(id), v])))),
          } }],
        });
      }
      if (b.echo === true || b.prompt_logprobs !== undefined) return send(res, 400, { error: "unsupported parameter" });
      // greedy + top logprobs
      const n = Number(b.max_tokens ?? 1);
      const seq = [...tokens];
      const gen: number[] = [];
      const tops: Record<string, number>[] = [];
      const lps: number[] = [];
      for (let i = 0; i < n; i++) {
        const lp = rows(seq)[seq.length - 1]!;
        const top = topLogprobs(lp, Math.max(1, k));
        gen.push(top[0]![0]);
        lps.push(top[0]![1]);
        tops.push(Object.fromEntries(top.map(([id, v]) => [name(id), v])));
        seq.push(top[0]![0]);
      }
      return send(res, 200, { choices: [{ text: o.tokenizer.decode(gen), logprobs: { tokens: gen.map(name), token_logprobs: lps, top_logprobs: tops } }] });
    })().catch((e: unknown) => send(res, 500, { error: String(e) }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}/v1`, requests, close: () => new Promise<void>((r) => server.close(() => r())) };
}
