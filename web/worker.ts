// The engine in a Web Worker: loads the GGUF (File slices or HTTP range requests), generates, answers logits and the
// doctor's path check. The page's thread never blocks on a forward pass.
import { load, type LatentModel } from "../src/index.js";
import type { DoneInfo, FromWorker, GenerateRequest, ToWorker, TokenInfo } from "./protocol.js";

interface WorkerScope {
  postMessage(m: FromWorker): void;
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
}
const scope = self as unknown as WorkerScope;
const post = (m: FromWorker): void => scope.postMessage(m);

let model: LatentModel | undefined;
let abort: AbortController | undefined;
let busy: Promise<void> = Promise.resolve();

function need(): LatentModel {
  if (model === undefined) throw new Error("no model loaded");
  return model;
}

async function doLoad(msg: Extract<ToWorker, { type: "load" }>): Promise<void> {
  const t0 = performance.now();
  model?.close();
  model = undefined;
  let fetched = 0;
  const onProgress = (p: { phase: "fetch" | "weights"; done: number; total: number }): void => {
    if (p.phase === "fetch") fetched = p.done;
    post({ type: "progress", phase: p.phase, done: p.done, total: p.total });
  };
  const src = msg.source;
  const m = await load(src.kind === "url" ? new URL(src.url, self.location.href).href : src.files.length === 1 ? src.files[0]! : src.files, { onProgress });
  model = m;
  const summary = m.summary();
  const name = m.file.metadata.raw("general.name");
  post({
    type: "loaded",
    info: {
      name: typeof name === "string" ? name : src.kind === "url" ? src.url : src.files[0]!.name,
      summary,
      summaryText: m.summaryText(),
      hasChat: m.file.metadata.raw("tokenizer.chat_template") !== undefined,
      loadMs: performance.now() - t0,
      backend: m.model.kernels.name,
      bytesFetched: fetched,
    },
  });
}

async function doGenerate(id: number, req: GenerateRequest): Promise<void> {
  const m = need();
  abort = new AbortController();
  const prompt = req.mode === "chat" && m.file.metadata.raw("tokenizer.chat_template") !== undefined ? [{ role: "user", content: req.prompt }] : req.prompt;
  const ids = typeof prompt === "string" ? m.tokenize(prompt) : m.chatTokens(prompt)!;
  post({ type: "prompt", id, tokens: ids.length });
  const it = m.stream(ids, {
    maxTokens: req.maxTokens,
    temperature: req.temperature,
    topK: req.topK,
    topP: req.topP,
    seed: req.seed,
    logprobs: req.logprobs,
    signal: abort.signal,
  });
  for (;;) {
    const r = await it.next();
    if (r.done === true) {
      const res = r.value;
      const done: DoneInfo = {
        text: res.text,
        tokens: res.tokens.length,
        promptTokens: res.promptTokens,
        finishReason: res.finishReason,
        prefillMs: res.timings.prefillMs,
        decodeMs: res.timings.decodeMs,
        tokensPerSecond: res.timings.tokensPerSecond,
        promptTokensPerSecond: res.timings.promptTokensPerSecond,
      };
      post({ type: "done", id, done });
      return;
    }
    const ev = r.value;
    const token: TokenInfo = {
      id: ev.id,
      text: ev.text,
      piece: m.tokenText(ev.id),
      logprob: ev.logprob,
      top: (ev.top ?? []).map(([tid, lp]) => ({ id: tid, piece: m.tokenText(tid), logprob: lp })),
    };
    post({ type: "token", id, token });
  }
}

async function handle(msg: ToWorker): Promise<void> {
  switch (msg.type) {
    case "load":
      return doLoad(msg);
    case "generate":
      return doGenerate(msg.id, msg.req);
    case "logits": {
      const m = need();
      const tokens = msg.tokens !== undefined ? [...msg.tokens] : m.tokenize(msg.text ?? "");
      const logits = m.logits(tokens, msg.path ?? "prefill");
      post({ type: "logits", id: msg.id, tokens, logits });
      return;
    }
    case "tokenize":
      post({ type: "tokens", id: msg.id, tokens: need().tokenize(msg.text) });
      return;
    case "pathcheck": {
      const m = need();
      const tokens = m.tokenize(msg.text).slice(0, 48);
      post({ type: "pathcheck", id: msg.id, check: m.pathCheck(tokens) });
      return;
    }
    case "stop":
      return;
  }
}

scope.onmessage = (e: MessageEvent<ToWorker>): void => {
  const msg = e.data;
  if (msg.type === "stop") {
    abort?.abort();
    return;
  }
  busy = busy.then(async () => {
    try {
      await handle(msg);
    } catch (err) {
      post({ type: "error", id: "id" in msg ? msg.id : undefined, message: err instanceof Error ? err.message : String(err) });
    }
  });
};
