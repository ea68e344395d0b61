/**
 * Node only: chat templates rendered in a worker thread with a memory limit, stopped after the render's time budget.
 * renderChatTemplate blocks its caller on Atomics.wait for at most `timeMs`; renderChatTemplateAsync awaits the
 * thread (the event loop runs on). A template that runs longer, or exhausts the thread's memory, is a
 * ChatTemplateBudgetError and its thread is replaced. Importing
 * this module installs the runner (src/model/load.ts does, so every Node entry point that loads a model has it).
 */
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";
import { LatentError } from "../util/errors.js";
import { ChatTemplateBudgetError, setChatTemplateRunner, type ChatTemplateLimits } from "./chat.js";

/** the thread's V8 heap: ample for any real template, small enough that a runaway one dies alone */
const THREAD_HEAP_MB = 256;
/** how long the thread may take to start (load the renderer) before the first render */
const START_MS = 30_000;

// control word
const STARTING = 0;
const IDLE = 1;
const ANSWERED = 2;
const DEAD = 3;

interface Reply {
  readonly kind: "ready" | "dead" | "reply";
  readonly ok: boolean;
  readonly text?: string;
  readonly error?: string;
  readonly budget?: boolean;
}

/**
 * One worker thread for templates. "sync" renders block the caller on Atomics.wait; "async" renders await the reply on
 * the port (a thread is one or the other: a port listener would take the replies a blocking caller reads).
 */
class TemplateThread {
  private readonly worker: Worker;
  private readonly port: MessagePort;
  private readonly ctl = new Int32Array(new SharedArrayBuffer(4));
  /** async mode: settles when the thread has loaded the renderer (with its failure, if it could not) */
  private readonly started: Promise<Reply> | undefined;
  private onReply: ((r: Reply) => void) | undefined;

  constructor(mode: "sync" | "async") {
    const here = import.meta.url;
    const ts = here.endsWith(".ts");
    const chatUrl = new URL("./chat" + (ts ? ".ts" : ".js"), here).href;
    const { port1, port2 } = new MessageChannel();
    this.port = port1;
    const boot = `(async () => {
  const { workerData } = await import("node:worker_threads");
  const { port, control } = workerData;
  const ctl = new Int32Array(control);
  const signal = (state) => { Atomics.store(ctl, 0, state); Atomics.notify(ctl, 0); };
  let chat;
  try {
    ${ts ? 'const { register } = await import("tsx/esm/api"); register();' : ""}
    chat = await import(${JSON.stringify(chatUrl)});
  } catch (e) {
    port.postMessage({ kind: "dead", ok: false, error: "the chat template thread failed to start: " + (e instanceof Error ? e.message : String(e)) });
    signal(${DEAD});
    return;
  }
  port.on("message", (m) => {
    let reply;
    try {
      reply = { kind: "reply", ok: true, text: chat.renderInThread(m.template, m.vars, m.limits) };
    } catch (e) {
      reply = { kind: "reply", ok: false, error: e instanceof Error ? e.message : String(e), budget: e instanceof chat.ChatTemplateBudgetError };
    }
    port.postMessage(reply);
    signal(${ANSWERED});
  });
  port.postMessage({ kind: "ready", ok: true });
  signal(${IDLE});
})();`;
    this.worker = new Worker(boot, {
      eval: true,
      workerData: { port: port2, control: this.ctl.buffer },
      transferList: [port2],
      resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB, maxYoungGenerationSizeMb: 32 },
    });
    this.worker.unref();
    if (mode === "async") {
      this.started = new Promise((resolve) => {
        this.port.on("message", (m: Reply) => (m.kind === "reply" ? this.onReply?.(m) : resolve(m)));
      });
    }
    this.port.unref();
  }

  /** As render, without blocking: the caller's event loop runs while the thread renders (one render at a time). */
  async renderAsync(template: string, vars: Record<string, unknown>, limits: ChatTemplateLimits): Promise<string> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const start = await Promise.race([
      this.started!,
      new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), START_MS))),
    ]);
    clearTimeout(timer);
    if (start === undefined)
      throw new LatentError(`the chat template thread did not start within ${START_MS / 1000} s`);
    if (start.kind === "dead") throw new LatentError(start.error ?? "the chat template thread failed to start");
    const reply = await new Promise<Reply | undefined>((resolve, reject) => {
      timer = setTimeout(() => resolve(undefined), limits.timeMs);
      this.onReply = resolve;
      try {
        this.port.postMessage({ template, vars, limits });
      } catch (e) {
        clearTimeout(timer);
        reject(
          new LatentError(
            `chat template variables cannot be passed to the renderer: ${e instanceof Error ? e.message : String(e)}`,
          ),
        );
      }
    });
    clearTimeout(timer);
    this.onReply = undefined;
    return unpack(reply, limits);
  }

  /** The rendered text; throws LatentError (ChatTemplateBudgetError when over time or memory). */
  render(template: string, vars: Record<string, unknown>, limits: ChatTemplateLimits): string {
    if (Atomics.load(this.ctl, 0) === STARTING) Atomics.wait(this.ctl, 0, STARTING, START_MS);
    const state = Atomics.load(this.ctl, 0);
    if (state === STARTING) throw new LatentError(`the chat template thread did not start within ${START_MS / 1000} s`);
    if (state === DEAD) throw new LatentError(this.reply()?.error ?? "the chat template thread failed to start");
    if (state === ANSWERED) Atomics.store(this.ctl, 0, IDLE);
    try {
      this.port.postMessage({ template, vars, limits });
    } catch (e) {
      throw new LatentError(
        `chat template variables cannot be passed to the renderer: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
    const answered =
      Atomics.wait(this.ctl, 0, IDLE, limits.timeMs) !== "timed-out" || Atomics.load(this.ctl, 0) !== IDLE;
    const reply = answered ? this.reply() : undefined;
    Atomics.store(this.ctl, 0, IDLE);
    return unpack(reply, limits);
  }

  /** the next reply on the port (the "ready" notice that precedes the first one is skipped) */
  private reply(): Reply | undefined {
    for (;;) {
      const m = receiveMessageOnPort(this.port)?.message as Reply | undefined;
      if (m === undefined || m.kind !== "ready") return m;
    }
  }

  close(): void {
    this.port.close();
    void this.worker.terminate();
  }
}

/** A reply as the rendered text; no reply (the time ran out) or a failed render as the error. */
function unpack(reply: Reply | undefined, limits: ChatTemplateLimits): string {
  if (reply === undefined)
    throw new ChatTemplateBudgetError(
      `chat template is over its budget: no result within ${limits.timeMs} ms (a loop too long, or its memory exhausted)`,
    );
  if (!reply.ok)
    throw reply.budget === true
      ? new ChatTemplateBudgetError(reply.error ?? "")
      : new LatentError(reply.error ?? "chat template failed to render");
  return reply.text ?? "";
}

/** A thread that overran may still be running the template, one that failed to start never will: replace them. */
function spent(e: unknown): boolean {
  return e instanceof ChatTemplateBudgetError || !(e instanceof LatentError) || /thread/.test(e.message);
}

let syncThread: TemplateThread | undefined;
let asyncThread: TemplateThread | undefined;
/** async renders run one at a time on their thread: each waits for the one before */
let asyncQueue: Promise<unknown> = Promise.resolve();

function renderInWorker(template: string, vars: Record<string, unknown>, limits: ChatTemplateLimits): string {
  const thread = (syncThread ??= new TemplateThread("sync"));
  try {
    return thread.render(template, vars, limits);
  } catch (e) {
    if (spent(e)) {
      thread.close();
      syncThread = undefined;
    }
    throw e;
  }
}

function renderInWorkerAsync(
  template: string,
  vars: Record<string, unknown>,
  limits: ChatTemplateLimits,
): Promise<string> {
  const run = asyncQueue.then(async () => {
    const thread = (asyncThread ??= new TemplateThread("async"));
    try {
      return await thread.renderAsync(template, vars, limits);
    } catch (e) {
      if (spent(e)) {
        thread.close();
        if (asyncThread === thread) asyncThread = undefined;
      }
      throw e;
    }
  });
  asyncQueue = run.catch(() => undefined);
  return run;
}

setChatTemplateRunner(renderInWorker, renderInWorkerAsync);
