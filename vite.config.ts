// The latent web page (web/): `npm run web` serves it, `npm run build:web` builds it into web/dist.
// The engine runs in a module Web Worker (web/worker.ts) with the library entry src/index.ts.
import { defineConfig } from "vite";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("./web", import.meta.url));

export default defineConfig({
  root,
  base: "./",
  publicDir: false,
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
