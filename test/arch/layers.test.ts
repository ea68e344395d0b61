// The house rules, read from the imports (tools/arch/structure.ts): no import cycle, nothing imports a later layer,
// every file in a layer, no bench or probe inside src/, and the reference model carries no test hooks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { readStructure } from "../../tools/arch/structure.js";

const root = join(import.meta.dirname, "../..");
const structure = readStructure(root);

test("src/ has no import cycle", () => {
  assert.deepEqual(structure.cycles, []);
});

test("no module imports a later layer (util → quant → gguf → … → runtime → doctor, server, cli)", () => {
  assert.deepEqual(
    structure.upward.map((e) => `${e.from} → ${e.to}`),
    [],
  );
});

test("every file under src/ belongs to a layer", () => {
  assert.deepEqual(structure.unknownLayer, []);
});

test("no bench, probe or research code under src/", () => {
  const offenders = structure.files.filter((f) => /(^|\/)(bench|[\w-]*-bench|[\w-]*probe)[\w-]*\.ts$/.test(f));
  assert.deepEqual(offenders, []);
});

test("the reference model and the CPU backend carry no fault hooks", () => {
  const hooked = structure.files
    .filter((f) => f.startsWith("model/") || f.startsWith("tensor/") || f.startsWith("backend/cpu/"))
    .filter((f) => /\bfaults?\??\./.test(readFileSync(join(root, "src", f), "utf8")));
  assert.deepEqual(hooked, []);
});

test("the structure reader sees a cycle and an upward import when there is one", () => {
  // the rules above would pass vacuously if the reader found no imports at all
  assert.ok(structure.edges.length > 500, `only ${structure.edges.length} imports read`);
  assert.ok(structure.edges.some((e) => e.from === "model/deepseek2.ts" && e.to.startsWith("tensor/")));
});
