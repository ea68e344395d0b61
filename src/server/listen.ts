/** Why the server cannot listen, as one line (main prints a LatentError's message and exits 1, no stack trace). */
import { LatentError } from "../util/errors.js";

/** Another process holds the port, or the address cannot be bound. */
export class ListenError extends LatentError {}

export function listenError(e: unknown, host: string, port: number): Error {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  if (code === "EADDRINUSE") return new ListenError(`port ${port} is in use; pick another with --port`);
  if (code === "EACCES")
    return new ListenError(
      `no permission to listen on port ${port} (ports below 1024 need privileges); pick another with --port`,
    );
  if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND" || code === "EAI_AGAIN")
    return new ListenError(`cannot listen on ${host}: no such local address (--host)`);
  return e instanceof Error ? e : new Error(String(e));
}
