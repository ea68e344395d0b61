// A tiny static HTTP server for the web tests: files from a directory plus named extra files, with byte ranges
// (206 / Content-Range), on 127.0.0.1 at a random port. Records every request (path, Range header).
import { createServer, type Server } from "node:http";
import { createReadStream, existsSync, statSync } from "node:fs";
import { extname, join, normalize } from "node:path";
import type { AddressInfo } from "node:net";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".gguf": "application/octet-stream",
};

export interface StaticServer {
  readonly url: string;
  readonly requests: { path: string; range: string | undefined; status: number; bytes: number }[];
  close(): Promise<void>;
}

export interface ServeOptions {
  /** URL path → file on disk, served besides `root` */
  readonly files?: Readonly<Record<string, string>>;
  /** answer range requests with the whole file (200), as a server without range support does */
  readonly ignoreRanges?: boolean;
}

export async function serveStatic(root: string | undefined, opts: ServeOptions = {}): Promise<StaticServer> {
  const requests: StaticServer["requests"] = [];
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    const range = req.headers.range;
    const record = (status: number, bytes: number): void => {
      requests.push({ path, range, status, bytes });
    };
    let file = opts.files?.[path];
    if (file === undefined && root !== undefined) {
      const rel = normalize(path === "/" ? "/index.html" : path).replace(/^(\.\.[/\\])+/, "");
      file = join(root, rel);
    }
    if (file === undefined || !existsSync(file) || !statSync(file).isFile()) {
      record(404, 0);
      res.writeHead(404).end("not found");
      return;
    }
    const size = statSync(file).size;
    const type = TYPES[extname(file)] ?? "application/octet-stream";
    const m = range !== undefined && opts.ignoreRanges !== true ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
    if (m !== null) {
      const start = Number(m[1]);
      const end = m[2] === "" ? size - 1 : Math.min(size - 1, Number(m[2]));
      if (start >= size || end < start) {
        record(416, 0);
        res.writeHead(416, { "Content-Range": `bytes */${size}` }).end();
        return;
      }
      record(206, end - start + 1);
      res.writeHead(206, {
        "Content-Type": type,
        "Content-Length": end - start + 1,
        "Content-Range": `bytes ${start}-${end}/${size}`,
        "Accept-Ranges": "bytes",
      });
      createReadStream(file, { start, end }).pipe(res);
      return;
    }
    record(200, size);
    res.writeHead(200, { "Content-Type": type, "Content-Length": size, "Accept-Ranges": "bytes" });
    createReadStream(file).pipe(res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
