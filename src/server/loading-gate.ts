/**
 * The port, held while the model loads. Loading is synchronous (the main thread reads and converts every weight, or
 * blocks on the GPU worker), so a server on the main thread could not answer until it ends. A worker thread listens
 * instead: /health answers 503 {"status":"loading","progress":p} (llama-server's shape) and every other path a 503
 * OpenAI-shaped error, so that a load balancer or a client polling /health sees the server come up. When the model is
 * ready the gate closes and the real server listens on the same port; a connection in the few milliseconds between
 * is refused, which a poller takes as "not up yet".
 *
 * Opening the gate also checks the port before the load: a busy one fails in a second, not after minutes of loading.
 */
import { Worker } from "node:worker_threads";
import { listenError } from "./listen.js";
import type { CorsPolicy } from "./cors.js";

export interface LoadingGate {
  /** the port held (the one picked when 0 was asked) */
  readonly port: number;
  /** the fraction loaded, 0..1, that /health reports */
  setProgress(fraction: number): void;
  /** stop listening, finish the answers under way, end the thread */
  close(): Promise<void>;
}

export interface LoadingGateOptions {
  readonly host: string;
  readonly port: number;
  /** the Retry-After of the 503 answers */
  readonly retryAfterSeconds: number;
  /** `--cors`: a browser page of an allowed origin may read the 503s (a page polling /health until the model is up) */
  readonly cors?: CorsPolicy;
}

/** Plain JavaScript: the thread needs no TypeScript loader, in tests or from dist/. */
const GATE_SOURCE = `
const { workerData, parentPort } = require("node:worker_threads");
const { createServer } = require("node:http");
const progress = new Float64Array(workerData.progress);
const headers = { "content-type": "application/json; charset=utf-8", "retry-after": String(workerData.retryAfterSeconds), connection: "close" };
const cors = workerData.cors;
function corsHeaders(origin) {
  if (cors === undefined) return {};
  const allow = origin === undefined ? undefined : cors.anyOrigin ? "*" : cors.origins.includes(origin) ? origin : undefined;
  if (allow === undefined) return cors.anyOrigin ? {} : { vary: "Origin" };
  return { "access-control-allow-origin": allow, vary: "Origin", "access-control-expose-headers": "Retry-After" };
}
const server = createServer((req, res) => {
  req.resume();
  let path = "/";
  try { path = new URL(req.url || "/", "http://localhost").pathname.replace(/\\/+$/, "") || "/"; } catch {}
  const body = path === "/health"
    ? { status: "loading", progress: Math.round(progress[0] * 1000) / 1000 }
    : { error: { message: "Loading model", type: "unavailable_error", param: null, code: "model_loading" } };
  res.writeHead(503, { ...headers, ...corsHeaders(req.headers.origin) });
  res.end(JSON.stringify(body));
});
server.on("error", (e) => parentPort.postMessage({ type: "error", code: e.code, message: e.message }));
server.listen(workerData.port, workerData.host, () => parentPort.postMessage({ type: "listening", port: server.address().port }));
parentPort.on("message", (m) => {
  if (m !== "close") return;
  server.close(() => parentPort.postMessage({ type: "closed" }));
  server.closeIdleConnections();
  setTimeout(() => server.closeAllConnections(), 1000).unref();
});
`;

type GateMessage =
  | { type: "listening"; port: number }
  | { type: "error"; code?: string; message: string }
  | { type: "closed" };

export async function openLoadingGate(o: LoadingGateOptions): Promise<LoadingGate> {
  const progress = new SharedArrayBuffer(8);
  const fraction = new Float64Array(progress);
  const worker = new Worker(GATE_SOURCE, {
    eval: true,
    workerData: {
      host: o.host,
      port: o.port,
      retryAfterSeconds: o.retryAfterSeconds,
      progress,
      cors: o.cors === undefined ? undefined : { anyOrigin: o.cors.anyOrigin, origins: [...o.cors.origins] },
    },
  });
  const next = (): Promise<GateMessage> =>
    new Promise((resolve, reject) => {
      const onExit = (): void => reject(new Error("the loading gate's thread ended"));
      worker.once("error", reject);
      worker.once("exit", onExit);
      worker.once("message", (m: GateMessage) => {
        worker.off("error", reject);
        worker.off("exit", onExit);
        resolve(m);
      });
    });
  const first = await next();
  if (first.type !== "listening") {
    await worker.terminate();
    const failure = Object.assign(new Error(first.type === "error" ? first.message : "the loading gate closed"), {
      code: first.type === "error" ? first.code : undefined,
    });
    throw listenError(failure, o.host, o.port);
  }
  let closing: Promise<void> | undefined;
  return {
    port: first.port,
    setProgress: (f) => {
      fraction[0] = Math.min(1, Math.max(0, f));
    },
    close: () =>
      (closing ??= (async () => {
        const closed = next();
        worker.postMessage("close");
        await closed;
        await worker.terminate();
      })()),
  };
}
