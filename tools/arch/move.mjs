#!/usr/bin/env node
// Moves source files and rewrites every relative import that names them (and the moved files' own imports):
// `node tools/arch/move.mjs old.ts new.ts [old2.ts new2.ts ...]`, paths from the repository root.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const root = resolve(dirname(new URL(import.meta.url).pathname), "../..");
const args = process.argv.slice(2);
if (args.length === 0 || args.length % 2) throw new Error("usage: move.mjs OLD NEW [OLD NEW ...]");
const moves = new Map();
for (let i = 0; i < args.length; i += 2) moves.set(resolve(root, args[i]), resolve(root, args[i + 1]));

const dirs = ["src", "test", "bench", "tools", "scripts", "web", "research"];
const exts = /\.(ts|mts|mjs|js|tsx|html)$/;
function walk(dir) {
  if (!existsSync(dir)) return [];
  const out = [];
  for (const e of readdirSync(dir)) {
    if (e === "node_modules" || e === "dist") continue;
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (exts.test(e)) out.push(p);
  }
  return out;
}
const files = dirs.flatMap((d) => walk(join(root, d)));
const asTs = (p) => (p.endsWith(".js") ? p.slice(0, -3) + ".ts" : p);
const spec = (fromFile, target, original) => {
  let r = relative(dirname(fromFile), target);
  if (!r.startsWith(".")) r = "./" + r;
  if (original.endsWith(".js") && r.endsWith(".ts")) r = r.slice(0, -3) + ".js";
  return r;
};
let changed = 0;
for (const file of files) {
  const newFile = moves.get(file) ?? file;
  const text = readFileSync(file, "utf8");
  const out = text.replace(/(["'`])(\.\.?\/[^"'`\s]+)\1/g, (m, q, s) => {
    const abs = resolve(dirname(file), s);
    const tsAbs = asTs(abs);
    const target =
      moves.get(tsAbs) ?? moves.get(abs) ?? (existsSync(tsAbs) ? tsAbs : existsSync(abs) ? abs : undefined);
    if (!target) return m;
    if (target === tsAbs && !moves.has(tsAbs) && newFile === file) return m;
    if (target === abs && !moves.has(abs) && newFile === file) return m;
    return q + spec(newFile, target, s) + q;
  });
  if (out !== text) {
    writeFileSync(file, out);
    changed++;
  }
}
for (const [from, to] of moves) {
  mkdirSync(dirname(to), { recursive: true });
  execFileSync("git", ["mv", relative(root, from), relative(root, to)], { cwd: root });
}
console.log(`moved ${moves.size} files, rewrote imports in ${changed}`);
