import type { IncomingMessage } from "node:http";
import { UsageError } from "../util/errors.js";

/** Origins whose browser pages may call the server (`--cors`): any (`*`) or a list of exact origins. */
export interface CorsPolicy {
  readonly anyOrigin: boolean;
  readonly origins: ReadonlySet<string>;
}

/** How long a browser may cache a preflight's answer (Chromium caps it at 2 h). */
export const CORS_MAX_AGE_SECONDS = 7200;
const ALLOWED_METHODS = "GET, HEAD, POST, OPTIONS";
const ALWAYS_ALLOWED_HEADERS = ["Authorization", "Content-Type"];
/** an HTTP header name (RFC 9110 token) */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** `*`, or a comma list of origins (scheme://host[:port], as browsers send them). */
export function parseCorsOrigins(spec: string): CorsPolicy {
  const items = spec
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (items.length === 0)
    throw new UsageError("--cors needs '*' or a comma list of origins such as http://localhost:3000");
  if (items.includes("*")) {
    if (items.length > 1) throw new UsageError("--cors: '*' allows every origin; give it alone");
    return { anyOrigin: true, origins: new Set() };
  }
  const origins = new Set<string>();
  for (const item of items) {
    let url: URL;
    try {
      url = new URL(item);
    } catch {
      throw new UsageError(`--cors: ${JSON.stringify(item)} is not an origin (scheme://host[:port])`);
    }
    // a browser's Origin header is exactly the URL's origin: a path or a trailing slash would never match it
    if (url.origin === "null" || url.origin !== item.replace(/\/$/, ""))
      throw new UsageError(
        `--cors: ${JSON.stringify(item)} is not an origin (scheme://host[:port], no path); did you mean ${url.origin}?`,
      );
    origins.add(url.origin);
  }
  return { anyOrigin: false, origins };
}

function allowedOrigin(policy: CorsPolicy, origin: string | undefined): string | undefined {
  if (origin === undefined) return undefined;
  if (policy.anyOrigin) return "*";
  return policy.origins.has(origin) ? origin : undefined;
}

/** Headers every response to this request carries: none for a request without Origin or from an origin not allowed. */
export function corsHeaders(policy: CorsPolicy, req: IncomingMessage): Record<string, string> {
  const allow = allowedOrigin(policy, req.headers.origin);
  // Vary even when refused: a cache must not hand one origin's answer to another
  if (allow === undefined) return policy.anyOrigin ? {} : { vary: "Origin" };
  return { "access-control-allow-origin": allow, vary: "Origin", "access-control-expose-headers": "Retry-After" };
}

/**
 * Headers of the answer to a preflight (OPTIONS with Access-Control-Request-Method): the methods, Authorization and
 * Content-Type, plus the headers the browser asks for (the openai JS client adds its own x-stainless-* headers).
 */
export function preflightHeaders(policy: CorsPolicy, req: IncomingMessage): Record<string, string> {
  const base = corsHeaders(policy, req);
  if (base["access-control-allow-origin"] === undefined) return base;
  const asked = (req.headers["access-control-request-headers"] ?? "")
    .split(",")
    .map((h) => h.trim())
    .filter((h) => HEADER_NAME.test(h));
  const headers = [
    ...ALWAYS_ALLOWED_HEADERS,
    ...asked.filter((h) => !ALWAYS_ALLOWED_HEADERS.some((a) => a.toLowerCase() === h.toLowerCase())),
  ];
  return {
    ...base,
    "access-control-allow-methods": ALLOWED_METHODS,
    "access-control-allow-headers": headers.join(", "),
    "access-control-max-age": String(CORS_MAX_AGE_SECONDS),
  };
}
