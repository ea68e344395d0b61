import type { IncomingMessage } from "node:http";
import { ApiError } from "./http.js";

/** What one client may cost the server; every field has a CLI flag (docs/server.md, "Limits"). */
export interface ServerLimits {
  /** open TCP connections; past it a new one is answered 503 and closed */
  readonly maxConnections: number;
  /** one request body, bytes (413 beyond) */
  readonly maxBodyBytes: number;
  /** request bodies being received, all together, bytes (503 beyond) */
  readonly maxBufferedBodyBytes: number;
  /** from the request's headers to the end of its body (408 beyond) */
  readonly bodyTimeoutMs: number;
  /** from a request's first byte to the end of its headers (Node closes the socket beyond) */
  readonly headersTimeoutMs: number;
  /** a generation request's whole life, queue included; its sequences are cancelled beyond (0: none) */
  readonly requestTimeoutMs: number;
  /** how long close() waits for running requests before cancelling them */
  readonly drainTimeoutMs: number;
  /** a stream's bytes written but not yet taken by the client; past it the client is dropped */
  readonly maxStreamBufferBytes: number;
  /**
   * how long a stream's client may take nothing while its socket reports backpressure (its sequences are held, keeping
   * their KV pages and batch slots); past it the client is dropped (0: never)
   */
  readonly streamStallTimeoutMs: number;
  /** chat max_tokens when the request names none (also capped by the rest of the context) */
  readonly defaultChatMaxTokens: number;
  /** seconds clients are told to wait (Retry-After) on 429 and 503 */
  readonly retryAfterSeconds: number;
}

export const DEFAULT_LIMITS: ServerLimits = {
  maxConnections: 512,
  maxBodyBytes: 4 * 1024 * 1024,
  maxBufferedBodyBytes: 64 * 1024 * 1024,
  bodyTimeoutMs: 30_000,
  headersTimeoutMs: 66_000,
  requestTimeoutMs: 600_000,
  drainTimeoutMs: 30_000,
  maxStreamBufferBytes: 1024 * 1024,
  streamStallTimeoutMs: 60_000,
  defaultChatMaxTokens: 4096,
  retryAfterSeconds: 1,
};

/** An oversized body is read and dropped up to this many times the limit (so the client sees the 413), then cut. */
const DISCARD_FACTOR = 4;

/** The client closed its connection before its request was read or answered (counted as 499, logged as one line). */
export class ClientGoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClientGoneError";
  }
}

/**
 * Bytes of request bodies held in memory, all requests together. A request that finds it full stops reading (its
 * bytes wait in the kernel's socket buffers) until bytes are given back: first come, first served.
 */
export class BodyBudget {
  private used = 0;
  private readonly waiting: (() => boolean)[] = [];
  constructor(readonly limit: number) {}

  get inUse(): number {
    return this.used;
  }

  take(n: number): boolean {
    if (this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }

  give(n: number): void {
    this.used -= n;
    // a waiter returns true once served (or gone)
    while (this.waiting.length > 0 && this.waiting[0]()) this.waiting.shift();
  }

  /** Call `retry` whenever bytes come back, until it returns true. */
  wait(retry: () => boolean): void {
    this.waiting.push(retry);
  }
}

export interface BodyReadOptions {
  readonly limit: number;
  readonly budget: BodyBudget;
  readonly timeoutMs: number;
}

function tooLarge(limit: number, declared?: number): ApiError {
  return new ApiError(
    413,
    declared !== undefined
      ? `the request body is ${declared} bytes, more than the limit of ${limit}`
      : `the request body is more than the limit of ${limit} bytes`,
    "invalid_request_error",
    null,
    "request_too_large",
  );
}

/**
 * Read the whole body, at most `limit` bytes, holding its bytes against the shared budget while it arrives.
 * While the budget is full the request is not read (backpressure: its bytes wait in the kernel, costing the server
 * neither memory nor time). A body over the limit (413), or one that could never fit the budget (503), is read to its
 * end and dropped, so that the client, still writing, receives the answer instead of a broken pipe; one declared or
 * sent past DISCARD_FACTOR × the limit is cut short (`closeAfter`). A body that does not arrive within `timeoutMs`
 * (waiting for the budget included) gets 408; a client that goes away, ClientGoneError.
 */
export function readBody(req: IncomingMessage, o: BodyReadOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers["content-length"]);
    const parts: Buffer[] = [];
    let held = 0;
    let seen = 0;
    let refusal: ApiError | undefined;
    let settled = false;
    const cleanup = (): void => {
      clearTimeout(timer);
      o.budget.give(held);
      held = 0;
      parts.length = 0;
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("close", onClose);
    };
    const settle = (err: Error | undefined, body?: Buffer): void => {
      if (settled) return;
      settled = true;
      cleanup();
      if (err !== undefined) {
        // what is left unread may be dropped; the socket cannot carry another request
        if (!req.complete) req.resume();
        reject(err);
      } else resolve(body!);
    };
    const refuse = (err: ApiError): void => {
      refusal ??= err;
      o.budget.give(held);
      held = 0;
      parts.length = 0;
    };
    const onData = (chunk: Buffer): void => {
      seen += chunk.length;
      if (refusal === undefined && seen > o.limit) refuse(tooLarge(o.limit));
      if (refusal === undefined && held + chunk.length > o.budget.limit) {
        refuse(
          new ApiError(
            503,
            `the server is busy: the request body does not fit the ${o.budget.limit} bytes of bodies it holds at once; retry later`,
            "server_error",
            null,
            "server_busy",
          ),
        );
      }
      if (refusal !== undefined) {
        if (seen > o.limit * DISCARD_FACTOR) settle(closeAfter(refusal));
        return;
      }
      if (o.budget.take(chunk.length)) {
        held += chunk.length;
        parts.push(chunk);
        return;
      }
      // the budget is full: stop reading until other bodies give bytes back (or the body timeout ends this one)
      req.pause();
      o.budget.wait(() => {
        if (settled) return true;
        if (!o.budget.take(chunk.length)) return false;
        held += chunk.length;
        parts.push(chunk);
        req.resume();
        return true;
      });
    };
    const onEnd = (): void => {
      if (refusal !== undefined) settle(refusal);
      else settle(undefined, parts.length === 1 ? parts[0] : Buffer.concat(parts));
    };
    const onClose = (): void => {
      if (!req.complete)
        settle(new ClientGoneError(`the client closed the connection after ${seen} bytes of the body`));
    };
    const timer = setTimeout(
      () =>
        settle(
          closeAfter(
            new ApiError(
              408,
              `the request body did not arrive within ${o.timeoutMs / 1000} s`,
              "invalid_request_error",
              null,
              "request_timeout",
            ),
          ),
        ),
      o.timeoutMs,
    );
    if (Number.isFinite(declared) && declared > o.limit) {
      refuse(tooLarge(o.limit, declared));
      if (declared > o.limit * DISCARD_FACTOR) {
        settle(closeAfter(refusal!));
        return;
      }
    }
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("close", onClose);
  });
}

const CLOSE_AFTER = new WeakSet<ApiError>();

/** Mark an error whose answer must close the connection (the body was not read to its end). */
export function closeAfter(err: ApiError): ApiError {
  CLOSE_AFTER.add(err);
  return err;
}

export function mustClose(err: ApiError): boolean {
  return CLOSE_AFTER.has(err);
}

/** Retry-After for statuses that invite a retry. */
export function retryHeaders(status: number, seconds: number): Record<string, string> {
  return status === 429 || status === 503 ? { "retry-after": String(seconds) } : {};
}
