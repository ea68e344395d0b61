import { shownName } from "../util/printable.js";
import type { ServerResponse } from "node:http";

/** An error the API answers with an OpenAI-shaped body: {"error": {message, type, param, code}}. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string = status === 401
      ? "authentication_error"
      : status === 404
        ? "not_found_error"
        : status === 429
          ? "rate_limit_error"
          : status >= 500
            ? "server_error"
            : "invalid_request_error",
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
    this.name = "ApiError";
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A 400 naming the request field at fault. */
/** A request value quoted in an error message: JSON, cut to `max` characters, control characters escaped. */
export function shownValue(v: unknown, max = 64): string {
  return shownName(JSON.stringify(v) ?? String(v), max);
}

export function badParam(param: string, message: string, code: string | null = null): ApiError {
  return new ApiError(400, message, "invalid_request_error", param, code);
}

/** Parse a JSON object body (400 for anything else). */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let value: unknown;
  const text = body.toString("utf8");
  if (text.trim() === "") throw new ApiError(400, "the request body is empty; expected a JSON object");
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, `the request body is not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ApiError(400, "the request body must be a JSON object");
  return value as Record<string, unknown>;
}

export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const body = JSON.stringify(value);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
}

export function sendError(res: ServerResponse, err: ApiError, headers: Record<string, string> = {}): void {
  sendJson(res, err.status, err.body(), headers);
}

/** Why a stream's client was dropped: it left more than the buffer limit unread, or read nothing for too long. */
export type StreamDropReason = "buffer" | "stall";

/** What a stream may cost before its client is dropped (ServerLimits: maxStreamBufferBytes, streamStallTimeoutMs). */
export interface SseLimits {
  readonly maxBuffered: number;
  readonly stallTimeoutMs: number;
}

/**
 * Server-Sent Events in OpenAI's framing: `data: JSON\n\n`, closed by `data: [DONE]`. When the socket reports
 * backpressure (a write returns false: the kernel's buffers are full and Node holds the rest) the writer is `blocked`
 * and tells its pressure listener, which stops producing (the server holds the stream's sequences); on `drain` it
 * tells it again. A client is dropped (the connection destroyed, which cancels its sequences and frees their KV pages)
 * past `maxBuffered` unsent bytes, or when it stays blocked for `stallTimeoutMs`.
 */
export class SseWriter {
  private started = false;
  private isBlocked = false;
  private stallTimer: NodeJS.Timeout | undefined;
  private pressure: (blocked: boolean) => void = () => {};
  constructor(
    private readonly res: ServerResponse,
    private readonly limits: SseLimits = { maxBuffered: Number.POSITIVE_INFINITY, stallTimeoutMs: 0 },
    private readonly onDropped: (reason: StreamDropReason, unsent: number) => void = () => {},
  ) {
    res.on("drain", () => {
      clearTimeout(this.stallTimer);
      if (!this.isBlocked) return;
      this.isBlocked = false;
      if (this.open) this.pressure(false);
    });
    res.once("close", () => clearTimeout(this.stallTimer));
  }

  get open(): boolean {
    return !this.res.writableEnded && !this.res.destroyed;
  }

  /** The client is not taking what is sent: produce nothing more until the pressure listener hears false. */
  get blocked(): boolean {
    return this.isBlocked;
  }

  /** Called with true when the client stops taking bytes, false when it takes them again (told at once if blocked). */
  onPressure(listener: (blocked: boolean) => void): void {
    this.pressure = listener;
    if (this.blocked) listener(true);
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    // no Connection header of our own: Node writes keep-alive or close as the request asked
    this.res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
    });
    this.res.flushHeaders();
  }

  send(value: unknown): void {
    this.start();
    if (!this.open) return;
    const taken = this.res.write(`data: ${JSON.stringify(value)}\n\n`);
    const unsent = this.res.writableLength;
    if (unsent > this.limits.maxBuffered) return this.drop("buffer", unsent);
    if (!taken && !this.isBlocked) {
      this.isBlocked = true;
      if (this.limits.stallTimeoutMs > 0)
        this.stallTimer = setTimeout(() => this.drop("stall", this.res.writableLength), this.limits.stallTimeoutMs);
      this.pressure(true);
    }
  }

  done(): void {
    this.start();
    if (this.open) this.res.end("data: [DONE]\n\n");
  }

  private drop(reason: StreamDropReason, unsent: number): void {
    clearTimeout(this.stallTimer);
    if (this.res.destroyed) return;
    this.onDropped(reason, unsent);
    this.res.destroy();
  }
}
