// The engine in a Web Worker: loads the GGUF (File slices or HTTP range requests), generates, answers logits and the
// doctor's path check. The page's thread never blocks on a forward pass.
import { load, type LatentModel } from "../src/index.js";
import type { DoneInfo, FromWorker, GenerateRequest, GpuCheckRow, ToWorker, TokenInfo } from "./protocol.js";
import { GpuSession } from "./gpu.js";

interface WorkerScope {
  postMessage(m: FromWorker): void;
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
}
const scope = self as unknown as WorkerScope;
const post = (m: FromWorker): void => scope.postMessage(m);

let model: LatentModel | undefined;
let gpu: GpuSession | undefined;
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
  gpu = undefined;
  let fetched = 0;
  const onProgress = (p: { phase: "fetch" | "weights"; done: number; total: number }): void => {
    if (p.phase === "fetch") fetched = p.done;
    post({ type: "progress", phase: p.phase, done: p.done, total: p.total });
  };
  const src = msg.source;
  const m = await load(
    src.kind === "url" ? new URL(src.url, self.location.href).href : src.files.length === 1 ? src.files[0] : src.files,
    { onProgress },
  );
  model = m;
  let gpuError: string | undefined;
  if (msg.backend === "webgpu") {
    try {
      gpu = await GpuSession.create(m);
    } catch (e) {
      gpuError = e instanceof Error ? e.message : String(e);
    }
  }
  const summary = m.summary();
  const name = m.file.metadata.raw("general.name");
  post({
    type: "loaded",
    info: {
      name: typeof name === "string" ? name : src.kind === "url" ? src.url : src.files[0].name,
      summary,
      summaryText: m.summaryText(),
      hasChat: m.file.metadata.raw("tokenizer.chat_template") !== undefined,
      loadMs: performance.now() - t0,
      backend: gpu !== undefined ? `WebGPU (${gpu.adapter})` : m.model.kernels.name,
      gpuError,
      bytesFetched: fetched,
    },
  });
}

async function doGenerate(id: number, req: GenerateRequest): Promise<void> {
  const m = need();
  abort = new AbortController();
  // a model without a chat template continues the prompt as text even in "chat" mode
  const chatIds =
    req.mode === "chat" ? m.chatTokens(req.messages ?? [{ role: "user", content: req.prompt }]) : undefined;
  const ids = chatIds ?? m.tokenize(req.prompt);
  post({ type: "prompt", id, tokens: ids.length });
  if (gpu !== undefined) return gpuGenerate(gpu, m, id, ids, req, abort.signal);
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

async function gpuGenerate(
  g: GpuSession,
  m: LatentModel,
  id: number,
  ids: number[],
  req: GenerateRequest,
  signal: AbortSignal,
): Promise<void> {
  const it = g.generate(ids, { ...req, signal });
  for (;;) {
    const r = await it.next();
    if (r.done === true) {
      const res = r.value;
      post({
        type: "done",
        id,
        done: {
          text: res.text,
          tokens: res.tokens,
          promptTokens: ids.length,
          finishReason: res.finishReason,
          prefillMs: res.prefillMs,
          decodeMs: res.decodeMs,
          tokensPerSecond: res.decodeSteps > 0 ? (res.decodeSteps * 1000) / res.decodeMs : 0,
          promptTokensPerSecond: res.prefillMs > 0 ? (ids.length * 1000) / res.prefillMs : 0,
        },
      });
      return;
    }
    const ev = r.value;
    post({
      type: "token",
      id,
      token: {
        id: ev.id,
        text: ev.text,
        piece: m.tokenText(ev.id),
        logprob: ev.logprob,
        top: ev.top.map(([tid, lp]) => ({ id: tid, piece: m.tokenText(tid), logprob: lp })),
      },
    });
  }
}

async function gpuCheck(g: GpuSession, m: LatentModel, tokens: number[], tol: number): Promise<GpuCheckRow> {
  const ref = m.logitsAll(tokens, "reference");
  const t0 = performance.now();
  const got = await g.logitsAll(tokens);
  const ms = performance.now() - t0;
  let maxAbs = 0;
  let agree = 0;
  ref.forEach((a, i) => {
    const b = got[i];
    let ia = 0;
    let ib = 0;
    for (let j = 0; j < a.length; j++) {
      maxAbs = Math.max(maxAbs, Math.abs(a[j] - b[j]));
      if (a[j] > a[ia]) ia = j;
      if (b[j] > b[ib]) ib = j;
    }
    if (ia === ib) agree++;
  });
  return { ms, maxAbsDiff: maxAbs, top1Agree: agree, ok: maxAbs <= tol && agree === tokens.length };
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
      const path = msg.path ?? "prefill";
      let logits: Float32Array;
      if (path === "webgpu") {
        if (gpu === undefined) throw new Error("the model was not loaded on WebGPU");
        logits = (await gpu.logitsAll(tokens)).at(-1)!;
      } else logits = m.logits(tokens, path);
      post({ type: "logits", id: msg.id, tokens, logits });
      return;
    }
    case "tokenize":
      post({ type: "tokens", id: msg.id, tokens: need().tokenize(msg.text) });
      return;
    case "pathcheck": {
      const m = need();
      const tokens = m.tokenize(msg.text).slice(0, 48);
      const check = m.pathCheck(tokens);
      post({
        type: "pathcheck",
        id: msg.id,
        check,
        gpu: gpu !== undefined ? await gpuCheck(gpu, m, tokens, check.tolerance) : undefined,
      });
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
      post({
        type: "error",
        id: "id" in msg ? msg.id : undefined,
        message: err instanceof Error ? err.message : String(err),
      });
    }
  });
};
