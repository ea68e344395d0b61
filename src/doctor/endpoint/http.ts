/** The doctor's HTTP client for endpoints, and the small JSON readers the dialect parsers share. */

export interface Reply {
  readonly status: number;
  readonly json: unknown;
}

export type Call = (url: string, body?: unknown) => Promise<Reply>;

export function makeCall(doFetch: typeof fetch, apiKey: string | undefined, timeoutMs = 120_000): Call {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
  return async (url, body) => {
    const r = await doFetch(url, {
      method: body === undefined ? "GET" : "POST",
      headers,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await r.text();
    let json: unknown;
    try {
      json = text.length > 0 ? JSON.parse(text) : undefined;
    } catch {
      json = text;
    }
    return { status: r.status, json };
  };
}

/** A call that never throws: network errors become status 0. */
export async function tryCall(call: Call, url: string, body?: unknown): Promise<Reply> {
  try {
    return await call(url, body);
  } catch (e) {
    return { status: 0, json: (e as Error).message };
  }
}

export function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

export function num(x: unknown): number | undefined {
  return typeof x === "number" && Number.isFinite(x) ? x : undefined;
}

/** A short description of a failed reply, for the attempts log. */
export function describe(r: Reply): string {
  const msg = isRecord(r.json)
    ? isRecord(r.json.error)
      ? r.json.error.message
      : (r.json.error ?? r.json.message ?? r.json.detail)
    : r.json;
  const text = typeof msg === "string" ? msg : JSON.stringify(msg ?? null);
  return `HTTP ${r.status}${text !== undefined && text !== "null" ? `: ${text.slice(0, 120)}` : ""}`;
}
