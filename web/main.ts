// The page: load a GGUF (picker, drag and drop, URL), show its model card, chat with streamed tokens coloured by
// probability, run the doctor's path check. The engine runs in worker.ts.
import type { PathCheck } from "../src/index.js";
import type { DoneInfo, FromWorker, GenerateRequest, GpuCheckRow, LogitsPath, ModelInfo, ModelSource, ToWorker, TokenInfo } from "./protocol.js";

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`#${id} missing`);
  return el as T;
};

const worker = new Worker(new URL("./worker.ts", import.meta.url), { type: "module" });
const post = (m: ToWorker): void => worker.postMessage(m);

let nextId = 1;
const waiting = new Map<number, { resolve: (m: FromWorker) => void; reject: (e: Error) => void }>();
let loadWaiter: { resolve: (i: ModelInfo) => void; reject: (e: Error) => void } | undefined;
let info: ModelInfo | undefined;
let current: { id: number; body: HTMLElement; stats: HTMLElement; tokens: TokenInfo[]; t0: number; promptTokens: number } | undefined;

function request(m: ToWorker & { id: number }): Promise<FromWorker> {
  return new Promise((resolve, reject) => {
    waiting.set(m.id, { resolve, reject });
    post(m);
  });
}

// ---- loading ----------------------------------------------------------------------------------------------------

const humanCount = (n: number): string => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} K` : String(n));
const fmtBytes = (n: number): string => (n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(2)} GiB` : n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`);

function startLoad(source: ModelSource): Promise<ModelInfo> {
  $("load-error").hidden = true;
  $("card").hidden = true;
  $("check-result").replaceChildren();
  setReady(false);
  const prog = $("progress");
  prog.hidden = false;
  setProgress(0, "opening…");
  post({ type: "load", source, backend: ($("backend") as HTMLSelectElement).value === "webgpu" ? "webgpu" : "cpu" });
  return new Promise((resolve, reject) => {
    loadWaiter = { resolve, reject };
  });
}

function setProgress(frac: number, label: string): void {
  const prog = $("progress");
  (prog.querySelector(".bar") as HTMLElement).style.width = `${Math.round(frac * 100)}%`;
  (prog.querySelector(".label") as HTMLElement).textContent = label;
}

function setReady(ready: boolean): void {
  ($("prompt") as HTMLTextAreaElement).disabled = !ready;
  ($("send") as HTMLButtonElement).disabled = !ready;
  ($("check") as HTMLButtonElement).disabled = !ready;
}

const fileInput = $("file") as HTMLInputElement;
fileInput.addEventListener("change", () => {
  const files = [...(fileInput.files ?? [])];
  if (files.length > 0) void startLoad({ kind: "files", files }).catch(() => undefined);
});
const drop = $("drop");
drop.addEventListener("dragover", (e) => {
  e.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  const files = [...(e.dataTransfer?.files ?? [])];
  if (files.length > 0) void startLoad({ kind: "files", files }).catch(() => undefined);
});
$("url-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const url = ($("url") as HTMLInputElement).value.trim();
  if (url !== "") void startLoad({ kind: "url", url }).catch(() => undefined);
});

function showCard(i: ModelInfo): void {
  const s = i.summary;
  const hp = (k: string): string => {
    const v = s.hyperparameters[k];
    return v === undefined || v === null ? "?" : typeof v === "object" && !Array.isArray(v) ? `${v.array}[${v.length}]` : String(v);
  };
  const rows: [string, string][] = [
    ["name", i.name],
    ["architecture", s.architecture ?? "?"],
    ["file type", s.file_type?.name ?? "?"],
    ["parameters", humanCount(s.parameters)],
    ["size", `${fmtBytes(s.size_bytes)} in ${s.shards.length} file${s.shards.length === 1 ? "" : "s"}, ${s.tensor_count} tensors`],
    ["tensor types", s.types.map((t) => `${t.type} ×${t.tensors}`).join(", ")],
    ["context", hp("context_length")],
    ["layers", `${hp("block_count")} (${hp("leading_dense_block_count")} dense)`],
    ["embedding", hp("embedding_length")],
    ["heads", hp("attention.head_count")],
    ["MLA", `kv_lora_rank ${hp("attention.kv_lora_rank")}, q_lora_rank ${hp("attention.q_lora_rank")}, rope dims ${hp("rope.dimension_count")}`],
    ["experts", `${hp("expert_count")} (${hp("expert_used_count")} used + ${hp("expert_shared_count")} shared, ${{ "1": "softmax", "2": "sigmoid" }[hp("expert_gating_func")] ?? "gating " + hp("expert_gating_func")})`],
    ["tokenizer", `${s.tokenizer.model ?? "?"} / ${s.tokenizer.pre ?? "?"}, ${s.tokenizer.vocab_size ?? "?"} tokens`],
    ["chat template", s.tokenizer.has_chat_template ? "yes" : "no"],
    ["loaded", `${(i.loadMs / 1000).toFixed(2)} s, ${fmtBytes(i.bytesFetched)} read by range`],
    ["backend", i.backend === "plain" ? "CPU, plain kernels (Web Worker)" : i.backend],
  ];
  if (i.gpuError !== undefined) rows.push(["WebGPU", `not used: ${i.gpuError}`]);
  const card = $("card");
  card.replaceChildren();
  const table = document.createElement("table");
  for (const [k, v] of rows) {
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    tr.insertCell().textContent = v;
  }
  const details = document.createElement("details");
  const sum = document.createElement("summary");
  sum.textContent = "latent inspect";
  const pre = document.createElement("pre");
  pre.textContent = i.summaryText;
  details.append(sum, pre);
  card.append(table, details);
  card.hidden = false;
}

// ---- chat ----------------------------------------------------------------------------------------------------------

/** Probability → background colour: green (likely) to red (unlikely), on a log scale. */
function probColour(logprob: number): string {
  const t = Math.sqrt(Math.max(0, Math.min(1, Math.exp(logprob)))); // p = 0 → red, 0.25 → amber, 1 → green
  return `hsl(${Math.round(t * 130)} 70% 82%)`;
}

function message(who: "user" | "model", text: string): { body: HTMLElement; stats: HTMLElement } {
  const el = document.createElement("div");
  el.className = `msg ${who}`;
  const w = document.createElement("span");
  w.className = "who";
  w.textContent = who === "user" ? "you" : (info?.name ?? "model");
  const body = document.createElement("div");
  body.className = "body";
  body.textContent = text;
  const stats = document.createElement("div");
  stats.className = "stats";
  el.append(w, body, stats);
  $("transcript").append(el);
  return { body, stats };
}

const visible = (s: string): string => s.replace(/\n/g, "↵\n");

function addToken(t: TokenInfo): void {
  if (current === undefined) return;
  current.tokens.push(t);
  const span = document.createElement("span");
  span.className = "tok";
  span.textContent = t.piece === "" ? "∅" : t.piece;
  span.style.background = probColour(t.logprob);
  span.dataset["index"] = String(current.tokens.length - 1);
  span.dataset["p"] = Math.exp(t.logprob).toFixed(4);
  span.addEventListener("mouseenter", (e) => showTooltip(t, e.currentTarget as HTMLElement));
  span.addEventListener("mouseleave", hideTooltip);
  current.body.append(span);
  const n = current.tokens.length;
  const secs = (performance.now() - current.t0) / 1000;
  $("speed").textContent = `${n} tokens · ${(n / Math.max(secs, 1e-3)).toFixed(1)} tokens/s`;
  const tr = $("transcript");
  tr.scrollTop = tr.scrollHeight;
}

function showTooltip(t: TokenInfo, el: HTMLElement): void {
  const tip = $("tooltip");
  tip.replaceChildren();
  const table = document.createElement("table");
  const head = table.insertRow();
  head.insertCell().textContent = `chosen "${visible(t.piece)}"`;
  head.insertCell().textContent = `p = ${Math.exp(t.logprob).toFixed(3)}`;
  for (const a of t.top) {
    const tr = table.insertRow();
    if (a.id === t.id) tr.className = "chosen";
    tr.insertCell().textContent = JSON.stringify(a.piece);
    const c = tr.insertCell();
    c.className = "p";
    c.textContent = Math.exp(a.logprob).toFixed(3);
  }
  tip.append(table);
  tip.hidden = false;
  const r = el.getBoundingClientRect();
  tip.style.left = `${Math.min(r.left, window.innerWidth - 260)}px`;
  tip.style.top = `${r.bottom + 6}px`;
}
function hideTooltip(): void {
  $("tooltip").hidden = true;
}

function finish(d: DoneInfo): void {
  if (current === undefined) return;
  const held = d.text.length - current.tokens.reduce((s, t) => s + t.text.length, 0);
  current.stats.textContent =
    `${d.tokens} tokens (${d.finishReason}${held > 0 ? "" : ""}) · prompt ${d.promptTokens} tokens at ${d.promptTokensPerSecond.toFixed(1)} tokens/s · ` +
    `generation ${d.tokensPerSecond.toFixed(1)} tokens/s`;
  $("speed").textContent = `${d.tokensPerSecond.toFixed(1)} tokens/s`;
  lastDone = d;
  current = undefined;
  ($("send") as HTMLButtonElement).disabled = false;
  ($("stop") as HTMLButtonElement).disabled = true;
}
let lastDone: DoneInfo | undefined;
let lastTokens: TokenInfo[] = [];

function generate(req: GenerateRequest): Promise<DoneInfo> {
  message("user", req.prompt);
  const m = message("model", "");
  const id = nextId++;
  current = { id, body: m.body, stats: m.stats, tokens: [], t0: performance.now(), promptTokens: 0 };
  lastTokens = current.tokens;
  ($("send") as HTMLButtonElement).disabled = true;
  ($("stop") as HTMLButtonElement).disabled = false;
  return request({ type: "generate", id, req }).then((r) => {
    if (r.type !== "done") throw new Error("unexpected answer");
    return r.done;
  });
}

function readRequest(prompt: string): GenerateRequest {
  const num = (id: string, d: number): number => {
    const v = Number(($(id) as HTMLInputElement).value);
    return Number.isFinite(v) ? v : d;
  };
  return {
    prompt,
    mode: ($("mode") as HTMLSelectElement).value === "chat" ? "chat" : "text",
    maxTokens: Math.max(1, Math.floor(num("max-tokens", 48))),
    temperature: Math.max(0, num("temperature", 0)),
    topK: 40,
    topP: 0.95,
    seed: Math.max(0, Math.floor(num("seed", 7))),
    logprobs: 5,
  };
}

$("chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const ta = $("prompt") as HTMLTextAreaElement;
  const text = ta.value;
  if (text.trim() === "" || current !== undefined) return;
  ta.value = "";
  void generate(readRequest(text)).catch((err: unknown) => showError(err));
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    ($("chat-form") as HTMLFormElement).requestSubmit();
  }
});
$("stop").addEventListener("click", () => post({ type: "stop" }));

// ---- doctor ------------------------------------------------------------------------------------------------------

function showCheck(c: PathCheck, gpu: GpuCheckRow | undefined): void {
  const out = $("check-result");
  const table = document.createElement("table");
  const h = table.createTHead().insertRow();
  for (const t of ["path", "ms", "max |Δ logit|", "max KL", "top-1 agree"]) {
    const th = document.createElement("th");
    th.textContent = t;
    h.append(th);
  }
  const body = table.createTBody();
  const ref = body.insertRow();
  for (const v of ["reference", c.referenceMs.toFixed(0), "—", "—", "—"]) ref.insertCell().textContent = v;
  for (const r of c.rows) {
    const tr = body.insertRow();
    for (const v of [r.path, r.ms.toFixed(0), r.maxAbsDiff.toExponential(2), r.maxKl.toExponential(2), `${r.top1Agree}/${c.tokens}`]) tr.insertCell().textContent = v;
  }
  if (gpu !== undefined) {
    const tr = body.insertRow();
    for (const v of ["webgpu", gpu.ms.toFixed(0), gpu.maxAbsDiff.toExponential(2), "—", `${gpu.top1Agree}/${c.tokens}`]) tr.insertCell().textContent = v;
  }
  const ok = c.ok && (gpu?.ok ?? true);
  const verdict = document.createElement("p");
  verdict.className = ok ? "ok" : "bad";
  verdict.id = "check-verdict";
  verdict.textContent = ok ? `paths agree (${c.tokens} tokens, max |Δ| ≤ ${c.tolerance})` : `paths disagree (tolerance ${c.tolerance})`;
  out.replaceChildren(table, verdict);
}

async function runCheck(text: string): Promise<PathCheck> {
  ($("check") as HTMLButtonElement).disabled = true;
  $("check-result").textContent = "running…";
  try {
    const r = await request({ type: "pathcheck", id: nextId++, text });
    if (r.type !== "pathcheck") throw new Error("unexpected answer");
    showCheck(r.check, r.gpu);
    return r.check;
  } finally {
    ($("check") as HTMLButtonElement).disabled = false;
  }
}
$("check").addEventListener("click", () => void runCheck(($("check-text") as HTMLInputElement).value).catch((e: unknown) => showError(e)));

// ---- worker messages -----------------------------------------------------------------------------------------------

function showError(e: unknown): void {
  const el = $("load-error");
  el.textContent = e instanceof Error ? e.message : String(e);
  el.hidden = false;
}

worker.onmessage = (e: MessageEvent<FromWorker>): void => {
  const m = e.data;
  switch (m.type) {
    case "progress":
      setProgress(m.total > 0 ? m.done / m.total : 0, `${m.phase === "fetch" ? "reading" : "decoding weights"} ${fmtBytes(m.done)} / ${fmtBytes(m.total)}`);
      return;
    case "loaded":
      info = m.info;
      $("progress").hidden = true;
      showCard(m.info);
      ($("mode") as HTMLSelectElement).value = m.info.hasChat ? "chat" : "text";
      setReady(true);
      loadWaiter?.resolve(m.info);
      loadWaiter = undefined;
      return;
    case "prompt":
      if (current?.id === m.id) current.promptTokens = m.tokens;
      return;
    case "token":
      if (current?.id === m.id) addToken(m.token);
      return;
    case "done":
      finish(m.done);
      break;
    case "error":
      if (m.id === undefined && loadWaiter !== undefined) {
        $("progress").hidden = true;
        showError(m.message);
        loadWaiter.reject(new Error(m.message));
        loadWaiter = undefined;
        return;
      }
      if (current !== undefined && current.id === m.id) {
        current.stats.textContent = `error: ${m.message}`;
        current = undefined;
        ($("send") as HTMLButtonElement).disabled = false;
        ($("stop") as HTMLButtonElement).disabled = true;
      }
      break;
  }
  if ("id" in m && m.id !== undefined) {
    const w = waiting.get(m.id);
    if (w !== undefined) {
      waiting.delete(m.id);
      if (m.type === "error") w.reject(new Error(m.message));
      else w.resolve(m);
    }
  }
};

// WebGPU status of this browser (shown in the header; the engine runs the CPU kernels unless WebGPU is chosen)
async function probeGpu(): Promise<string> {
  const gpu = (navigator as Navigator & { gpu?: { requestAdapter(): Promise<{ info?: { vendor?: string; architecture?: string; description?: string } } | null> } }).gpu;
  if (gpu === undefined) return "WebGPU: not exposed by this browser";
  const a = await gpu.requestAdapter();
  if (a === null) return "WebGPU: no adapter";
  const i = a.info;
  return `WebGPU adapter: ${[i?.vendor, i?.architecture, i?.description].filter((x) => x !== undefined && x !== "").join(" ") || "available"}`;
}
const gpuStatus = probeGpu().catch((e: unknown) => `WebGPU: ${e instanceof Error ? e.message : String(e)}`);
void gpuStatus.then((s) => {
  $("backend-status").textContent = s;
  const opt = ($("backend") as HTMLSelectElement).querySelector('option[value="webgpu"]') as HTMLOptionElement;
  opt.disabled = !s.startsWith("WebGPU adapter");
  opt.textContent = opt.disabled ? `WebGPU (${s.replace(/^WebGPU: /, "")})` : "WebGPU — fused forward pass on the GPU (deepseek2)";
});

// ---- a small hook for tests and the console ------------------------------------------------------------------------

interface LatentPageHook {
  load(url: string, backend?: "cpu" | "webgpu"): Promise<ModelInfo>;
  info(): ModelInfo | undefined;
  tokenize(text: string): Promise<number[]>;
  logits(opts: { text?: string; tokens?: number[]; path?: LogitsPath }): Promise<{ tokens: number[]; logits: number[] }>;
  generate(prompt: string, opts?: Partial<GenerateRequest>): Promise<{ done: DoneInfo; tokens: TokenInfo[] }>;
  pathCheck(text: string): Promise<PathCheck>;
  gpu(): Promise<string>;
}

const hook: LatentPageHook = {
  load: (url, backend) => {
    if (backend !== undefined) ($("backend") as HTMLSelectElement).value = backend;
    return startLoad({ kind: "url", url });
  },
  info: () => info,
  tokenize: async (text) => {
    const r = await request({ type: "tokenize", id: nextId++, text });
    if (r.type !== "tokens") throw new Error("unexpected answer");
    return [...r.tokens];
  },
  logits: async (o) => {
    const r = await request({ type: "logits", id: nextId++, text: o.text, tokens: o.tokens, path: o.path });
    if (r.type !== "logits") throw new Error("unexpected answer");
    return { tokens: [...r.tokens], logits: Array.from(r.logits) };
  },
  generate: async (prompt, opts = {}) => {
    const done = await generate({ ...readRequest(prompt), ...opts });
    return { done, tokens: lastTokens };
  },
  pathCheck: (text) => runCheck(text),
  gpu: () => gpuStatus,
};
(window as unknown as { __latent: LatentPageHook }).__latent = hook;
void lastDone;

// ?model=URL loads a model at start
const auto = new URLSearchParams(location.search).get("model");
if (auto !== null && auto !== "") {
  ($("url") as HTMLInputElement).value = auto;
  void startLoad({ kind: "url", url: auto }).catch(() => undefined);
}
