#!/usr/bin/env node
// Compile src/ into dist/ (the package's JavaScript and type declarations). Run by `npm install` in a clone
// (`prepare`) and by `npm pack`/`npm publish` (`prepack`). Where TypeScript is not installed — an install with
// --omit=dev — there is nothing to compile with: say so and leave bin/latent.mjs to run what is there.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
let tsc;
try {
  tsc = require.resolve("typescript/bin/tsc");
} catch {
  console.error("latent build: TypeScript is not installed (an install without dev dependencies): dist/ not rebuilt");
  process.exit(process.argv.includes("--required") ? 1 : 0);
}
const r = spawnSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { stdio: "inherit" });
process.exit(r.status ?? 1);
