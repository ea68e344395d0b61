// Builds dot.as → dot.wasm and probe.as → probe.wasm with relaxed SIMD enabled (assemblyscript@0.28.20 through npx,
// as scripts/build-wasm.mjs does for the engine's kernels).
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const dir = fileURLToPath(new URL(".", import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), "relaxed-"));
try {
  for (const name of ["dot", "probe"]) {
    copyFileSync(join(dir, `${name}.as`), join(tmp, `${name}.ts`));
    execFileSync(
      "npx",
      [
        ...["-y", "-p", "assemblyscript@0.28.20", "asc", `${name}.ts`, "-O3", "--runtime", "stub", "--importMemory"],
        ...["--sharedMemory", "--initialMemory", "1", "--maximumMemory", "65536", "--noAssert"],
        ...["--enable", "simd", "--enable", "threads", "--enable", "relaxed-simd", "-o", join(dir, `${name}.wasm`)],
      ],
      { stdio: "inherit", cwd: tmp },
    );
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
