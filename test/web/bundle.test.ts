// The library entry (src/index.ts) and the page's worker bundle for the browser with Vite and fail if a Node-only
// module (node:*, a Node builtin such as fs or worker_threads, the Node-only engine files) is in the module graph.
// A control bundle of src/runtime/load.ts (which pulls the worker-thread CPU backend) must be caught.
import { test } from "node:test";
import assert from "node:assert/strict";
import { builtinModules } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Plugin } from "vite";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const NODE_ONLY_FILES = [
  "src/gguf/file.ts",
  "src/gguf/reader.ts",
  "src/gguf/source-node.ts",
  "src/runtime/load.ts",
  "src/backend/cpu/fast.ts",
];
const BUILTINS = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));

/** Bundle `entry` for the browser; the ids of every module in the graph, and what Vite warned. */
async function browserGraph(entry: string): Promise<{ modules: string[]; warnings: string[]; error?: string }> {
  const out = mkdtempSync(join(tmpdir(), "latent-bundle-"));
  const modules = new Set<string>();
  const warnings: string[] = [];
  let error: string | undefined;
  const collect: Plugin = {
    name: "collect-modules",
    enforce: "pre",
    moduleParsed(info) {
      modules.add(info.id);
    },
    resolveId(source) {
      // builtins are not parsed: note them when they are asked for
      if (BUILTINS.has(source)) modules.add(source);
      return null;
    },
  };
  try {
    await build({
      configFile: false,
      root: ROOT,
      logLevel: "silent",
      plugins: [collect],
      build: {
        outDir: out,
        emptyOutDir: true,
        write: false,
        minify: false,
        target: "es2022",
        lib: { entry: join(ROOT, entry), formats: ["es"], fileName: "bundle" },
        rollupOptions: { onwarn: (w) => void warnings.push(w.message) },
      },
    });
  } catch (e) {
    error = e instanceof Error ? e.message : String(e);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
  return { modules: [...modules].map((m) => (m.startsWith("/") ? relative(ROOT, m) : m)), warnings, error };
}

function nodeOnly(modules: readonly string[]): string[] {
  return modules.filter(
    (m) =>
      BUILTINS.has(m) || m.startsWith("node:") || m.includes("__vite-browser-external") || NODE_ONLY_FILES.includes(m),
  );
}

test("src/index.ts bundles for the browser without a Node-only module", async () => {
  const { modules, warnings, error } = await browserGraph("src/index.ts");
  assert.equal(error, undefined);
  assert.ok(modules.includes("src/gguf/shard.ts") && modules.includes("src/model/deepseek2.ts"), modules.join("\n"));
  assert.deepEqual(nodeOnly(modules), []);
  assert.deepEqual(
    warnings.filter((w) => /externalized|node:/.test(w)),
    [],
  );
});

test("the page's worker bundles without a Node-only module", async () => {
  const { modules, error } = await browserGraph("web/worker.ts");
  assert.equal(error, undefined);
  assert.ok(modules.includes("src/index.ts"));
  assert.deepEqual(nodeOnly(modules), []);
});

test("control: a Node-only import is caught (src/runtime/load.ts pulls worker_threads)", async () => {
  const { modules, error } = await browserGraph("src/runtime/load.ts");
  const bad = nodeOnly(modules);
  assert.ok(bad.some((m) => /worker_threads/.test(m)) && bad.includes("src/backend/cpu/fast.ts"), bad.join(", "));
  assert.match(error ?? "", /worker_threads|__vite-browser-external/); // and Vite cannot even build it
});
