#!/usr/bin/env node
// Runs the compiled CLI when `npm install` built it (prepare), else the TypeScript sources through tsx.
import { existsSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const compiled = join(root, "dist", "cli", "main.js");
if (existsSync(compiled)) {
  const { main } = await import(pathToFileURL(compiled).href);
  await main(process.argv.slice(2));
} else {
  const { register } = await import("tsx/esm/api");
  register();
  const { main } = await import(pathToFileURL(join(root, "src", "cli", "main.ts")).href);
  await main(process.argv.slice(2));
}
