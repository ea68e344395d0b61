/**
 * Node only: chat templates rendered in a worker thread with a memory limit, stopped after the render's time budget.
 * The caller blocks on Atomics.wait (rendering stays synchronous for its callers) for at most `timeMs`; a template
 * that runs longer, or exhausts the thread's memory, is a ChatTemplateBudgetError and the thread is replaced. Importing
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
  readonly ok: boolean;
  readonly text?: string;
  readonly error?: string;
  readonly budget?: boolean;
}

class TemplateThread {
  private readonly worker: Worker;
  private readonly port: MessagePort;
  private readonly ctl = new Int32Array(new SharedArrayBuffer(4));

  constructor() {
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
    port.postMessage({ ok: false, error: "the chat template thread failed to start: " + (e instanceof Error ? e.message : String(e)) });
    signal(${DEAD});
    return;
  }
  port.on("message", (m) => {
    let reply;
    try {
      reply = { ok: true, text: chat.renderInThread(m.template, m.vars, m.limits) };
    } catch (e) {
      reply = { ok: false, error: e instanceof Error ? e.message : String(e), budget: e instanceof chat.ChatTemplateBudgetError };
    }
    port.postMessage(reply);
    signal(${ANSWERED});
  });
  signal(${IDLE});
})();`;
    this.worker = new Worker(boot, {
      eval: true,
      workerData: { port: port2, control: this.ctl.buffer },
      transferList: [port2],
      resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB, maxYoungGenerationSizeMb: 32 },
    });
    this.worker.unref();
    this.port.unref();
  }

  /** The rendered text; throws LatentError (ChatTemplateBudgetError when over time or memory). */
  render(template: string, vars: Record<string, unknown>, limits: ChatTemplateLimits): string {
    if (Atomics.load(this.ctl, 0) === STARTING) Atomics.wait(this.ctl, 0, STARTING, START_MS);
    const state = Atomics.load(this.ctl, 0);
    if (state === STARTING) throw new LatentError(`the chat template thread did not start within ${START_MS / 1000} s`);
    if (state === DEAD) throw new LatentError(this.reply()?.error ?? "the chat template thread failed to start");
    try {
      this.port.postMessage({ template, vars, limits });
    } catch (e) {
      throw new LatentError(`chat template variables cannot be passed to the renderer: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (Atomics.wait(this.ctl, 0, IDLE, limits.timeMs) === "timed-out" && Atomics.load(this.ctl, 0) === IDLE) {
      throw new ChatTemplateBudgetError(`chat template is over its budget: no result within ${limits.timeMs} ms (a loop too long, or its memory exhausted)`);
    }
    const reply = this.reply();
    Atomics.store(this.ctl, 0, IDLE);
    if (reply === undefined) throw new LatentError("the chat template thread answered nothing");
    if (!reply.ok) throw reply.budget === true ? new ChatTemplateBudgetError(reply.error ?? "") : new LatentError(reply.error ?? "chat template failed to render");
    return reply.text ?? "";
  }

  private reply(): Reply | undefined {
    return receiveMessageOnPort(this.port)?.message as Reply | undefined;
  }

  close(): void {
    this.port.close();
    void this.worker.terminate();
  }
}

let thread: TemplateThread | undefined;

function renderInWorker(template: string, vars: Record<string, unknown>, limits: ChatTemplateLimits): string {
  thread ??= new TemplateThread();
  try {
    return thread.render(template, vars, limits);
  } catch (e) {
    // a thread that overran may still be running the template: replace it
    if (e instanceof ChatTemplateBudgetError || !(e instanceof LatentError) || /thread/.test(e.message)) {
      thread.close();
      thread = undefined;
    }
    throw e;
  }
}

setChatTemplateRunner(renderInWorker);
