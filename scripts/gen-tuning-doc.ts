/**
 * `node --import tsx scripts/gen-tuning-doc.ts [--check]`: writes the WebGPU tuning knobs' table (from
 * src/backend/webgpu/core/tuning.ts) into docs/webgpu.md between its markers; with --check it only says whether the
 * page is current (exit 1 if not). test/backend/webgpu/tuning.test.ts checks the same.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { withTuningTable } from "../src/backend/webgpu/core/tuning.js";

const path = fileURLToPath(new URL("../docs/webgpu.md", import.meta.url));
const page = readFileSync(path, "utf8");
const current = withTuningTable(page);
if (process.argv.includes("--check")) {
  console.log(
    current === page
      ? "docs/webgpu.md: the tuning table is current"
      : "docs/webgpu.md: the tuning table is stale (run node --import tsx scripts/gen-tuning-doc.ts)",
  );
  process.exit(current === page ? 0 : 1);
}
writeFileSync(path, current);
console.log(`wrote the tuning table into ${path}`);
