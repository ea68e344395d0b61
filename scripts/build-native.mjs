#!/usr/bin/env node
// Build the native CPU kernels (native/binding.gyp → native/build/Release/latent_cpu.node) with the node-gyp that
// ships with npm, against this machine's instruction set. Run by `npm install` (the package's install script) and
// `npm run build:native`. The addon is optional: where it cannot be built (no C++ compiler, no Node headers, not
// x86-64) this says so in one line and exits 0, and the cpu backend runs its WebAssembly kernels, which give the same
// results. `--required` makes a failed build an error. `LATENT_NATIVE=0` skips the build.
import { spawnSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const required = process.argv.includes("--required");
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = join(root, "native");

function skip(why) {
  const line = `latent: native CPU kernels not built (${why}); the cpu backend uses its WebAssembly kernels`;
  if (required) {
    console.error(line);
    process.exit(1);
  }
  console.error(line);
  process.exit(0);
}

if (process.env.LATENT_NATIVE === "0") skip("LATENT_NATIVE=0");
if (process.arch !== "x64") skip(`the kernels are written for x86-64 AVX-512, this is ${process.arch}`);
if (!existsSync(join(dir, "binding.gyp"))) skip("native/binding.gyp is missing");

/** npm's own node-gyp: npm names it in npm_config_node_gyp for scripts it runs; else beside this Node's npm */
function nodeGyp() {
  const candidates = [
    process.env.npm_config_node_gyp,
    join(
      dirname(process.execPath),
      "..",
      "lib",
      "node_modules",
      "npm",
      "node_modules",
      "node-gyp",
      "bin",
      "node-gyp.js",
    ),
    join(dirname(process.execPath), "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js"),
  ];
  return candidates.find((p) => p !== undefined && p !== "" && existsSync(p));
}

const gyp = nodeGyp();
if (gyp === undefined) skip("node-gyp not found beside npm");
const args = [gyp, "rebuild", "--loglevel=error"];
// the headers of this Node: npm's nodedir setting, else the install's own include/node (Debian, nvm, official tarballs)
const installRoot = join(dirname(process.execPath), "..");
const nodedir =
  process.env.npm_config_nodedir ||
  (existsSync(join(installRoot, "include", "node", "node_api.h")) ? installRoot : undefined);
if (nodedir !== undefined) args.push(`--nodedir=${nodedir}`);
const r = spawnSync(process.execPath, args, { cwd: dir, encoding: "utf8" });
if (r.status !== 0) {
  rmSync(join(dir, "build"), { recursive: true, force: true });
  const detail = `${r.stderr ?? ""}${r.stdout ?? ""}`
    .split("\n")
    .filter((l) => /error|not found|No such/i.test(l))
    .slice(0, 3)
    .join("; ");
  skip(`node-gyp failed${detail ? `: ${detail}` : ""}`);
}
const addon = join(dir, "build", "Release", "latent_cpu.node");
if (!existsSync(addon)) skip("node-gyp reported success but made no addon");
console.error(`latent: native CPU kernels built (${addon})`);
