/**
 * The server's log: events (startup, errors, drain) and one access line per request, as human-readable lines for a
 * terminal or as JSON lines (one object per line, pino's field names: level, time, msg) for a log collector.
 *
 * pino writes both: levels, serialization and the JSON line are its; for a terminal the destination reduces each line
 * to its message (pino-pretty would be a second dependency for one field). Written synchronously: a few lines per
 * request, and nothing is lost when the process exits right after a fatal error.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { pino } from "pino";

export const LOG_LEVELS = ["debug", "info", "warn", "error", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFormat = "text" | "json";

/** What one request did, as the access line reports it. */
export interface AccessEntry {
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  /** 499 when the client closed the connection before the answer was complete */
  readonly status: number;
  readonly promptTokens: number | undefined;
  readonly completionTokens: number | undefined;
  /** from the request's arrival to its first generated token */
  readonly ttftMs: number | undefined;
  readonly totalMs: number;
}

export interface ServerLogger {
  /** startup, errors, drain: one message at a level */
  event(level: Exclude<LogLevel, "silent">, message: string): void;
  /** one finished (or abandoned) request */
  request(entry: AccessEntry): void;
}

export interface LoggerOptions {
  readonly format?: LogFormat;
  /** lowest level written (default info; access lines are info, 5xx ones error) */
  readonly level?: LogLevel;
  /** where each line goes, newline included */
  readonly write: (line: string) => void;
  /** the clock of JSON lines' `time` (tests pin it) */
  readonly now?: () => number;
}

export function parseLogLevel(value: string): LogLevel | undefined {
  return (LOG_LEVELS as readonly string[]).includes(value) ? (value as LogLevel) : undefined;
}

export function createLogger(o: LoggerOptions): ServerLogger {
  const now = o.now ?? Date.now;
  const json = o.format === "json";
  const destination = {
    write: (line: string): void => o.write(json ? line : `${(JSON.parse(line) as { msg: string }).msg}\n`),
  };
  const logger = pino(
    {
      level: o.level ?? "info",
      base: undefined,
      timestamp: () => `,"time":${now()}`,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
  return {
    event: (level, message) => logger[level](message),
    request: (e) => logger[accessLevel(e)](json ? accessFields(e) : {}, json ? "request" : accessLine(e)),
  };
}

/** Server failures are errors; a load balancer's polls of /health and /metrics only show at debug. */
function accessLevel(e: AccessEntry): Exclude<LogLevel, "silent"> {
  if (e.status >= 500 && e.status !== 503) return "error";
  if ((e.path === "/health" || e.path === "/metrics") && e.status < 400) return "debug";
  return "info";
}

/** The logger of a server given only a line callback (tests, embedders): events as lines, no access lines. */
export function lineLogger(log: ((line: string) => void) | undefined): ServerLogger {
  return { event: (_level, message) => log?.(message), request: () => {} };
}

/** `POST /v1/chat/completions 200 12→40 tokens, first token 35 ms, 410 ms [id]` */
export function accessLine(e: AccessEntry): string {
  const parts = [`${e.method} ${e.path} ${e.status}`];
  if (e.promptTokens !== undefined) parts.push(`${e.promptTokens}→${e.completionTokens ?? 0} tokens,`);
  if (e.ttftMs !== undefined) parts.push(`first token ${ms(e.ttftMs)},`);
  parts.push(`${ms(e.totalMs)} [${e.requestId}]`);
  return parts.join(" ");
}

function accessFields(e: AccessEntry): Record<string, unknown> {
  return {
    request_id: e.requestId,
    method: e.method,
    path: e.path,
    status: e.status,
    ...(e.promptTokens !== undefined
      ? { prompt_tokens: e.promptTokens, completion_tokens: e.completionTokens ?? 0 }
      : {}),
    ...(e.ttftMs !== undefined ? { ttft_ms: round(e.ttftMs) } : {}),
    total_ms: round(e.totalMs),
  };
}

function ms(v: number): string {
  return v < 10 ? `${v.toFixed(1)} ms` : `${Math.round(v)} ms`;
}

function round(v: number): number {
  return Math.round(v * 10) / 10;
}

/** The request id a client sent in `x-request-id` (kept when it is short printable ASCII), else a new one. */
export function requestIdOf(req: IncomingMessage): string {
  const sent = req.headers["x-request-id"];
  if (typeof sent === "string" && /^[\x21-\x7e]{1,128}$/.test(sent)) return sent;
  return randomUUID();
}

/** What a generation request learns as it runs, for its access line (set by the endpoint, read when it closes). */
export interface RequestTokens {
  promptTokens: number | undefined;
  completionTokens: number;
  ttftMs: number | undefined;
}
