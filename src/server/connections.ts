import type { Server } from "node:http";
import type { Socket } from "node:net";
import { ApiError } from "./http.js";

/** A whole HTTP/1.1 response written straight to a socket (the request never reached a handler), then closed. */
export function rawResponse(err: ApiError, headers: Record<string, string> = {}): string {
  const body = JSON.stringify(err.body());
  const reason =
    { 400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable" }[
      err.status
    ] ?? "Error";
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  return `HTTP/1.1 ${err.status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`;
}

export interface ConnectionGuard {
  /** sockets answered 503 at connect time: their requests, if any arrive, are not served */
  isRefused(socket: Socket): boolean;
  readonly open: () => number;
}

/**
 * Count open connections; past `maxConnections` answer 503 with Retry-After and close. Parse errors get an
 * OpenAI-shaped answer: 431 for oversized headers, 408 for a request Node timed out, 400 otherwise.
 */
export function guardConnections(
  http: Server,
  o: {
    readonly maxConnections: number;
    readonly retryAfterSeconds: number;
    readonly counted: (status: number) => void;
  },
): ConnectionGuard {
  let open = 0;
  const refused = new WeakSet<Socket>();
  http.on("connection", (socket: Socket) => {
    open++;
    socket.once("close", () => open--);
    if (open <= o.maxConnections) return;
    refused.add(socket);
    o.counted(503);
    const err = new ApiError(
      503,
      `the server holds ${o.maxConnections} connections, its limit; retry later`,
      "server_error",
      null,
      "too_many_connections",
    );
    socket.on("error", () => {});
    socket.end(rawResponse(err, { "retry-after": String(o.retryAfterSeconds) }));
    // a client that never reads must not keep the socket open
    setTimeout(() => socket.destroy(), 1000).unref();
  });
  http.on("clientError", (e: NodeJS.ErrnoException, socket: Socket) => {
    if (refused.has(socket) || !socket.writable || e.code === "ECONNRESET") {
      socket.destroy();
      return;
    }
    const err =
      e.code === "HPE_HEADER_OVERFLOW"
        ? new ApiError(
            431,
            "the request headers are larger than the server accepts",
            "invalid_request_error",
            null,
            "headers_too_large",
          )
        : e.code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? new ApiError(408, "the request did not arrive in time", "invalid_request_error", null, "request_timeout")
          : new ApiError(
              400,
              `malformed HTTP request (${e.code ?? e.message})`,
              "invalid_request_error",
              null,
              "bad_request",
            );
    o.counted(err.status);
    socket.end(rawResponse(err));
  });
  return { isRefused: (s) => refused.has(s), open: () => open };
}
