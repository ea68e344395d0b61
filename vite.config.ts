// The latent web page (web/): `npm run web` serves it, `npm run build:web` builds it into web/dist; both with the
// bundled demo model beside the page (demoModel below).
// The engine runs in a module Web Worker (web/worker.ts) with the library entry src/index.ts.
import { defineConfig, type Plugin } from "vite";
import { createReadStream, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DEMO_MODEL_PATH } from "./web/demo-model.js";

const root = fileURLToPath(new URL("./web", import.meta.url));
const demoModelFile = join(fileURLToPath(new URL(".", import.meta.url)), DEMO_MODEL_PATH);

/**
 * The byte range a `Range` header asks of a file of `size` bytes: undefined for no (or an unparsed) header, which is
 * answered with the whole file; null for a range outside the file (416).
 */
function requestedRange(header: string | undefined, size: number): { start: number; end: number } | null | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(header ?? "");
  if (m === null || (m[1] === "" && m[2] === "")) return undefined;
  // "bytes=-N" is the last N bytes
  const start = m[1] === "" ? Math.max(0, size - Number(m[2])) : Number(m[1]);
  const end = m[1] === "" || m[2] === "" ? size - 1 : Math.min(size - 1, Number(m[2]));
  return start < size && start <= end ? { start, end } : null;
}

/**
 * The demo model beside the page, from models/ so that git holds its 18 MB once: `vite` serves it with byte ranges
 * (the engine reads a model URL only by range requests, and the file lies outside the page's root), `vite build`
 * writes it into the output, where any static host serves it.
 */
function demoModel(): Plugin {
  return {
    name: "latent-demo-model",
    configureServer(server) {
      server.middlewares.use((req, res, next) => {
        if (new URL(req.url ?? "/", "http://page").pathname !== `/${DEMO_MODEL_PATH}`) return next();
        const size = statSync(demoModelFile).size;
        const range = requestedRange(req.headers.range, size);
        res.setHeader("Accept-Ranges", "bytes");
        res.setHeader("Content-Type", "application/octet-stream");
        if (range === null) {
          res.writeHead(416, { "Content-Range": `bytes */${size}` }).end();
          return;
        }
        const { start, end } = range ?? { start: 0, end: size - 1 };
        res.writeHead(range === undefined ? 200 : 206, {
          "Content-Length": end - start + 1,
          ...(range === undefined ? {} : { "Content-Range": `bytes ${start}-${end}/${size}` }),
        });
        if (req.method === "HEAD") res.end();
        else createReadStream(demoModelFile, { start, end }).pipe(res);
      });
    },
    generateBundle() {
      this.emitFile({ type: "asset", fileName: DEMO_MODEL_PATH, source: readFileSync(demoModelFile) });
    },
  };
}

export default defineConfig({
  root,
  base: "./",
  publicDir: false,
  plugins: [demoModel()],
  build: {
    outDir: fileURLToPath(new URL("./web/dist", import.meta.url)),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: true,
    chunkSizeWarningLimit: 2048,
  },
  worker: { format: "es" },
  server: { host: "127.0.0.1", fs: { allow: [fileURLToPath(new URL(".", import.meta.url))] } },
  preview: { host: "127.0.0.1" },
});
