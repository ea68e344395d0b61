// Raw HTTP over a socket for server tests: what a plain client library would not send (malformed requests, huge
// headers, slow uploads).
import { connect } from "node:net";

/** Send `text` raw; resolve with what came back when the server closes the socket (or after `ms`). */
export function rawExchange(port: number, text: string | Buffer, ms = 5000): Promise<string> {
  return new Promise((resolve) => {
    const sock = connect(port, "127.0.0.1");
    let got = "";
    const timer = setTimeout(() => {
      sock.destroy();
      resolve(got);
    }, ms);
    sock.on("data", (d: Buffer) => (got += d.toString("latin1")));
    sock.on("error", () => {});
    sock.on("close", () => {
      clearTimeout(timer);
      resolve(got);
    });
    sock.write(text);
  });
}

/** The status code of a raw HTTP/1.1 response (0 when there is none). */
export const statusOf = (response: string): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0);
