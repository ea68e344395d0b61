// The page: load a GGUF (the bundled demo model, picker, drag and drop, URL), show its model card, chat with streamed
// tokens coloured by probability, run the doctor's path check. The engine runs in worker.ts.
import type { PathCheck } from "../src/index.js";
import type {
  ChatTurn,
  DoneInfo,
  FromWorker,
  GenerateRequest,
  GpuCheckRow,
  LogitsPath,
  ModelInfo,
  ModelSource,
  ToWorker,
  TokenInfo,
} from "./protocol.js";
import { judgeAdapter, SOFTWARE_SLOWDOWN, type AdapterFacts } from "./adapter.js";
import { DEMO_MODEL_PATH, DEMO_PROMPT } from "./demo-model.js";

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
let current:
  | { id: number; body: HTMLElement; stats: HTMLElement; tokens: TokenInfo[]; t0: number; promptTokens: number }
  | undefined;

function request(m: ToWorker & { id: number }): Promise<FromWorker> {
  return new Promise((resolve, reject) => {
    waiting.set(m.id, { resolve, reject });
    post(m);
  });
}

// ---- loading ----------------------------------------------------------------------------------------------------

const humanCount = (n: number): string =>
  n >= 1e9
    ? `${(n / 1e9).toFixed(2)} B`
    : n >= 1e6
      ? `${(n / 1e6).toFixed(2)} M`
      : n >= 1e3
        ? `${(n / 1e3).toFixed(1)} K`
        : String(n);
const fmtBytes = (n: number): string =>
  n >= 1 << 30
    ? `${(n / (1 << 30)).toFixed(2)} GiB`
    : n >= 1 << 20
      ? `${(n / (1 << 20)).toFixed(1)} MiB`
      : `${(n / 1024).toFixed(1)} KiB`;

function startLoad(source: ModelSource): Promise<ModelInfo> {
  // the worker runs from assets/ and would resolve a relative URL against its own script: resolve it against the page
  if (source.kind === "url") source = { kind: "url", url: new URL(source.url, document.baseURI).href };
  $("load-error").hidden = true;
  $("card").hidden = true;
  $("check-result").replaceChildren();
  setReady(false, "Loading the model…");
  // a click now would queue a second load of the demo behind this one; loaded or failed, the button comes back
  ($("demo") as HTMLButtonElement).disabled = true;
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

/** Enable the chat and the path check once a model is loaded; the prompt's placeholder says what to do next. */
function setReady(ready: boolean, notReadyHint = "Load a model, then write here"): void {
  const prompt = $("prompt") as HTMLTextAreaElement;
  prompt.disabled = !ready;
  prompt.placeholder = ready ? promptPlaceholder() : notReadyHint;
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
$("demo").addEventListener("click", () => {
  void startLoad({ kind: "url", url: DEMO_MODEL_PATH })
    .then(() => {
      // the demo never saw chat data (its template is a stub): continuing Bible text is what it does well
      ($("mode") as HTMLSelectElement).value = "text";
      showModeControls();
      const prompt = $("prompt") as HTMLTextAreaElement;
      if (prompt.value === "") prompt.value = DEMO_PROMPT;
      prompt.focus();
    })
    .catch(() => undefined);
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
    return v === undefined || v === null
      ? "?"
      : typeof v === "object" && !Array.isArray(v)
        ? `${v.array}[${v.length}]`
        : String(v);
  };
  const rows: [string, string][] = [
    ["name", i.name],
    ["architecture", s.architecture ?? "?"],
    ["file type", s.file_type?.name ?? "?"],
    ["parameters", humanCount(s.parameters)],
    [
      "size",
      `${fmtBytes(s.size_bytes)} in ${s.shards.length} file${s.shards.length === 1 ? "" : "s"}, ${s.tensor_count} tensors`,
    ],
    ["tensor types", s.types.map((t) => `${t.type} ×${t.tensors}`).join(", ")],
    ["context", hp("context_length")],
    ["layers", `${hp("block_count")} (${hp("leading_dense_block_count")} dense)`],
    ["embedding", hp("embedding_length")],
    ["heads", hp("attention.head_count")],
    [
      "MLA",
      `kv_lora_rank ${hp("attention.kv_lora_rank")}, q_lora_rank ${hp("attention.q_lora_rank")}, rope dims ${hp("rope.dimension_count")}`,
    ],
    [
      "experts",
      `${hp("expert_count")} (${hp("expert_used_count")} used + ${hp("expert_shared_count")} shared, ${{ "1": "softmax", "2": "sigmoid" }[hp("expert_gating_func")] ?? "gating " + hp("expert_gating_func")})`,
    ],
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
  ($("new-chat") as HTMLButtonElement).disabled = false;
  ($("stop") as HTMLButtonElement).disabled = true;
}
let lastDone: DoneInfo | undefined;
let lastTokens: TokenInfo[] = [];

/**
 * The chat-template conversation so far: user and model turns, oldest first. Every chat turn sends all of it (after
 * the system prompt) so the model sees the history; "New chat" and loading a model empty it. "continue text" turns
 * are not part of it.
 */
let conversation: ChatTurn[] = [];

function chatMessages(userText: string): ChatTurn[] {
  const system = ($("system") as HTMLTextAreaElement).value.trim();
  return [
    ...(system !== "" ? [{ role: "system" as const, content: system }] : []),
    ...conversation,
    { role: "user", content: userText },
  ];
}

function newChat(): void {
  if (current !== undefined) return; // the turn in flight would land in an emptied transcript (the button is disabled then)
  conversation = [];
  $("transcript").replaceChildren();
  $("speed").textContent = "";
}

function generate(req: GenerateRequest): Promise<DoneInfo> {
  const chat = req.mode === "chat";
  const full: GenerateRequest =
    chat && req.messages === undefined ? { ...req, messages: chatMessages(req.prompt) } : req;
  if (chat) message("user", req.prompt);
  const m = message("model", "");
  // a continuation is one text: the prompt, set apart, then the tokens that continue it
  if (!chat) {
    const continued = document.createElement("span");
    continued.className = "prompt";
    continued.title = "your prompt";
    continued.textContent = req.prompt;
    m.body.append(continued);
  }
  const id = nextId++;
  current = { id, body: m.body, stats: m.stats, tokens: [], t0: performance.now(), promptTokens: 0 };
  lastTokens = current.tokens;
  ($("send") as HTMLButtonElement).disabled = true;
  ($("new-chat") as HTMLButtonElement).disabled = true;
  ($("stop") as HTMLButtonElement).disabled = false;
  return request({ type: "generate", id, req: full }).then((r) => {
    if (r.type !== "done") throw new Error("unexpected answer");
    // a stopped reply stays in the history as far as it got: that is what the transcript shows
    if (chat) conversation.push({ role: "user", content: req.prompt }, { role: "assistant", content: r.done.text });
    return r.done;
  });
}

function promptPlaceholder(): string {
  return ($("mode") as HTMLSelectElement).value === "chat"
    ? "Message the model (Enter sends, Shift+Enter starts a new line)"
    : "Text for the model to continue (Enter generates)";
}

/** The system prompt only means something to a chat template. */
function showModeControls(): void {
  const chat = ($("mode") as HTMLSelectElement).value === "chat";
  $("system-row").hidden = !chat;
  const prompt = $("prompt") as HTMLTextAreaElement;
  if (!prompt.disabled) prompt.placeholder = promptPlaceholder();
}
$("mode").addEventListener("change", showModeControls);
$("new-chat").addEventListener("click", newChat);

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
    for (const v of [
      r.path,
      r.ms.toFixed(0),
      r.maxAbsDiff.toExponential(2),
      r.maxKl.toExponential(2),
      `${r.top1Agree}/${c.tokens}`,
    ])
      tr.insertCell().textContent = v;
  }
  if (gpu !== undefined) {
    const tr = body.insertRow();
    for (const v of ["webgpu", gpu.ms.toFixed(0), gpu.maxAbsDiff.toExponential(2), "—", `${gpu.top1Agree}/${c.tokens}`])
      tr.insertCell().textContent = v;
  }
  const ok = c.ok && (gpu?.ok ?? true);
  const verdict = document.createElement("p");
  verdict.className = ok ? "ok" : "bad";
  verdict.id = "check-verdict";
  verdict.textContent = ok
    ? `paths agree (${c.tokens} tokens, max |Δ| ≤ ${c.tolerance})`
    : `paths disagree (tolerance ${c.tolerance})`;
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
$("check").addEventListener(
  "click",
  () => void runCheck(($("check-text") as HTMLInputElement).value).catch((e: unknown) => showError(e)),
);

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
      setProgress(
        m.total > 0 ? m.done / m.total : 0,
        `${m.phase === "fetch" ? "reading" : "decoding weights"} ${fmtBytes(m.done)} / ${fmtBytes(m.total)}`,
      );
      return;
    case "loaded":
      info = m.info;
      $("progress").hidden = true;
      showCard(m.info);
      {
        const mode = $("mode") as HTMLSelectElement;
        (mode.querySelector('option[value="chat"]') as HTMLOptionElement).disabled = !m.info.hasChat;
        mode.value = m.info.hasChat ? "chat" : "text";
      }
      newChat();
      setReady(true);
      ($("demo") as HTMLButtonElement).disabled = false;
      showModeControls();
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
        setReady(false);
        ($("demo") as HTMLButtonElement).disabled = false;
        showError(m.message);
        loadWaiter.reject(new Error(m.message));
        loadWaiter = undefined;
        return;
      }
      if (current !== undefined && current.id === m.id) {
        current.stats.textContent = `error: ${m.message}`;
        current = undefined;
        ($("send") as HTMLButtonElement).disabled = false;
        ($("new-chat") as HTMLButtonElement).disabled = false;
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

// WebGPU status of this browser, shown in the header. The backend select starts on the CPU worker; a hardware adapter
// moves it to WebGPU, a software one (SwiftShader, lavapipe) leaves it on the CPU, which is far faster there.
interface GpuProbe {
  readonly status: string;
  readonly defaultBackend: "cpu" | "webgpu";
  readonly usable: boolean;
  readonly software: boolean;
}
async function probeGpu(): Promise<GpuProbe> {
  // only the fields read here, typed loosely: a browser may lack any of them (isFallbackAdapter moved from the adapter to its info)
  const gpu = (
    navigator as unknown as {
      gpu?: { requestAdapter(): Promise<{ info?: AdapterFacts; isFallbackAdapter?: boolean } | null> };
    }
  ).gpu;
  if (gpu === undefined)
    return { status: "WebGPU: not exposed by this browser", defaultBackend: "cpu", usable: false, software: false };
  const a = await gpu.requestAdapter();
  if (a === null) return { status: "WebGPU: no adapter", defaultBackend: "cpu", usable: false, software: false };
  // GPUAdapterInfo's fields are prototype getters, which a spread would not copy
  const i = a.info;
  const v = judgeAdapter({
    vendor: i?.vendor,
    architecture: i?.architecture,
    device: i?.device,
    description: i?.description,
    isFallbackAdapter: i?.isFallbackAdapter ?? a.isFallbackAdapter,
  });
  return {
    status: `WebGPU adapter: ${v.name}${v.software ? ` (a software GPU: ${SOFTWARE_SLOWDOWN})` : ""}`,
    defaultBackend: v.defaultBackend,
    usable: true,
    software: v.software,
  };
}
const gpuProbe = probeGpu().catch(
  (e: unknown): GpuProbe => ({
    status: `WebGPU: ${e instanceof Error ? e.message : String(e)}`,
    defaultBackend: "cpu",
    usable: false,
    software: false,
  }),
);
const gpuStatus = gpuProbe.then((p) => p.status);
// a backend the user picked before the probe answered is kept
let backendPicked = false;
$("backend").addEventListener("change", () => {
  backendPicked = true;
});
void gpuProbe.then((p) => {
  $("backend-status").textContent = p.status;
  const select = $("backend") as HTMLSelectElement;
  const opt = select.querySelector('option[value="webgpu"]') as HTMLOptionElement;
  opt.disabled = !p.usable;
  opt.textContent = !p.usable
    ? `WebGPU (${p.status.replace(/^WebGPU: /, "")})`
    : p.software
      ? `WebGPU — software GPU, ${SOFTWARE_SLOWDOWN}`
      : "WebGPU — fused forward pass on the GPU (deepseek2)";
  if (!backendPicked) select.value = p.defaultBackend;
});

// ---- a small hook for tests and the console ------------------------------------------------------------------------

interface LatentPageHook {
  load(url: string, backend?: "cpu" | "webgpu"): Promise<ModelInfo>;
  info(): ModelInfo | undefined;
  tokenize(text: string): Promise<number[]>;
  logits(opts: {
    text?: string;
    tokens?: number[];
    path?: LogitsPath;
  }): Promise<{ tokens: number[]; logits: number[] }>;
  generate(prompt: string, opts?: Partial<GenerateRequest>): Promise<{ done: DoneInfo; tokens: TokenInfo[] }>;
  pathCheck(text: string): Promise<PathCheck>;
  gpu(): Promise<string>;
  /** the backend select once the WebGPU probe has answered */
  backend(): Promise<"cpu" | "webgpu">;
  newChat(): void;
}

const hook: LatentPageHook = {
  load: (url, backend) => {
    if (backend !== undefined) {
      ($("backend") as HTMLSelectElement).value = backend;
      backendPicked = true;
    }
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
  backend: () => gpuProbe.then(() => (($("backend") as HTMLSelectElement).value === "webgpu" ? "webgpu" : "cpu")),
  newChat,
};
(window as unknown as { __latent: LatentPageHook }).__latent = hook;
void lastDone;

// ?model=URL loads a model at start
const auto = new URLSearchParams(location.search).get("model");
if (auto !== null && auto !== "") {
  ($("url") as HTMLInputElement).value = auto;
  void startLoad({ kind: "url", url: auto }).catch(() => undefined);
}
