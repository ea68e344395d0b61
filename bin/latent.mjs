#!/usr/bin/env node
// Runs the compiled CLI (built by `npm install` through `prepare`) unless the TypeScript sources are newer than the
// build — then the sources run through tsx, so a stale dist/ never hides an edit.
import { existsSync, readdirSync, statSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const compiled = join(root, "dist", "cli", "main.js");
const sources = join(root, "src");

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs);
  }
  return newest;
}

const useCompiled = existsSync(compiled) && (!existsSync(sources) || statSync(compiled).mtimeMs >= newestMtime(sources));
let entry = compiled;
if (!useCompiled) {
  const { register } = await import("tsx/esm/api");
  register();
  entry = join(sources, "cli", "main.ts");
}
const { main } = await import(pathToFileURL(entry).href);
await main(process.argv.slice(2));
