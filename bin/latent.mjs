#!/usr/bin/env node
// Runs the compiled CLI (dist/, shipped in the package; built in a clone by `npm install` through `prepare`). In a clone
// whose TypeScript sources are newer than the build, the sources run through tsx instead, so a stale dist/ never hides
// an edit. An installed package has no src/ and never needs tsx.
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

const useCompiled =
  existsSync(compiled) && (!existsSync(sources) || statSync(compiled).mtimeMs >= newestMtime(sources));
let entry = compiled;
if (!useCompiled) {
  let register;
  try {
    ({ register } = await import("tsx/esm/api"));
  } catch {
    console.error(
      `latent: ${existsSync(compiled) ? "dist/ is older than src/" : "dist/ is missing"} and tsx (a dev dependency) is not installed: run \`npm run build\` in ${root}`,
    );
    process.exit(2);
  }
  register();
  entry = join(sources, "cli", "main.ts");
}
const { main } = await import(pathToFileURL(entry).href);
await main(process.argv.slice(2));
