// Builds dot.as → dot.wasm with relaxed SIMD enabled (assemblyscript@0.28.20 through npx, as scripts/build-wasm.mjs).
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const dir = fileURLToPath(new URL(".", import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), "relaxed-"));
copyFileSync(join(dir, "dot.as"), join(tmp, "dot.ts"));
execFileSync(
  "npx",
  [
    "-y",
    "-p",
    "assemblyscript@0.28.20",
    "asc",
    "dot.ts",
    "-O3",
    "--runtime",
    "stub",
    "--importMemory",
    "--sharedMemory",
    "--initialMemory",
    "1",
    "--maximumMemory",
    "65536",
    "--noAssert",
    "--enable",
    "simd",
    "--enable",
    "threads",
    "--enable",
    "relaxed-simd",
    "-o",
    join(dir, "dot.wasm"),
  ],
  { stdio: "inherit", cwd: tmp },
);
rmSync(tmp, { recursive: true, force: true });
