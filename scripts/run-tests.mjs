#!/usr/bin/env node
// Node 20's test runner takes no globs: find the test files ourselves, then hand them to `node --test`.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

function findTests(dir) {
  const out = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) out.push(...findTests(path));
    else if (entry.endsWith(".test.ts")) out.push(path);
  }
  return out.sort();
}

const filter = process.argv.slice(2);
const files = findTests("test").filter((f) => filter.length === 0 || filter.some((x) => f.includes(x)));
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
const result = spawnSync(process.execPath, ["--import", "tsx", "--test", "--test-concurrency=2", ...files], {
  stdio: "inherit",
});
process.exit(result.status ?? 1);
