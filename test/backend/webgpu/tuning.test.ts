// The tuning knobs' one table (core/tuning.ts): parseTuning takes only its names and numbers, every knob a launcher
// reads is in it, and docs/webgpu.md holds the table as the generator writes it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";
import {
  KNOBS,
  type KnobFamily,
  parseTuning,
  TABLE_BEGIN,
  TABLE_END,
  tuningTable,
  withTuningTable,
} from "../../../src/backend/webgpu/core/tuning.js";

// (the compiled tests of scripts/h200-tests.sh run without the sources and docs: those cases skip there)
const DOC_PATH = "docs/webgpu.md";
const SOURCES = "src/backend/webgpu";

test("parseTuning reads name=value pairs and refuses unknown names and non-numbers", () => {
  assert.deepEqual(parseTuning(""), {});
  assert.deepEqual(parseTuning("rowTile=0, wideHalf=2,attnWgs=64"), { rowTile: 0, wideHalf: 2, attnWgs: 64 });
  assert.deepEqual(parseTuning("expertsFrom=0.25"), { expertsFrom: 0.25 });
  assert.throws(() => parseTuning("tiled=1"), /no knob "tiled"/);
  assert.throws(() => parseTuning("routerFuse=1"), /no knob "routerFuse"/);
  assert.throws(() => parseTuning("rowTile"), /rowTile needs a number/);
  assert.throws(() => parseTuning("rowTile=on"), /rowTile needs a number/);
  assert.throws(() => parseTuning("rowTile="), /rowTile needs a number/);
});

test("every tune.<knob> the WebGPU sources read is in the table, and every knob in the table is read", {
  skip: !existsSync(SOURCES) && "no sources here",
}, () => {
  const files = (dir: string): string[] =>
    readdirSync(dir).flatMap((e) =>
      statSync(join(dir, e)).isDirectory() ? files(join(dir, e)) : e.endsWith(".ts") ? [join(dir, e)] : [],
    );
  const read = new Set<string>();
  for (const f of files(SOURCES))
    for (const m of readFileSync(f, "utf8").matchAll(/\btune\.([a-zA-Z][a-zA-Z0-9]*)/g)) read.add(m[1]);
  const known = new Set(Object.keys(KNOBS));
  assert.deepEqual(
    [...read].filter((k) => !known.has(k)),
    [],
    "read but not in core/tuning.ts",
  );
  assert.deepEqual(
    [...known].filter((k) => !read.has(k)),
    [],
    "in core/tuning.ts but never read",
  );
});

// Each family's choices are made in one module that alone reads the tuning (kernels/<family>/select.ts,
// graph/select.ts); launchers and the graph take its plain choices. Besides those, only core/tuning.ts (the table)
// and core/runtime.ts (GpuRuntime holds RuntimeOptions.tune) may name `.tune`.
const SELECT_MODULE: Record<KnobFamily, string> = {
  matmul: "kernels/matmul/select.ts",
  attention: "kernels/attention/select.ts",
  moe: "kernels/moe/select.ts",
  dsa: "kernels/dsa/select.ts",
  graph: "graph/select.ts",
};
const HOLDERS = ["core/tuning.ts", "core/runtime.ts"];

test("only the select modules read the tuning, each only its own family's knobs", {
  skip: !existsSync(SOURCES) && "no sources here",
}, () => {
  const files = (dir: string): string[] =>
    readdirSync(dir).flatMap((e) =>
      statSync(join(dir, e)).isDirectory() ? files(join(dir, e)) : e.endsWith(".ts") ? [join(dir, e)] : [],
    );
  const selects = new Set(Object.values(SELECT_MODULE));
  const outside: string[] = [];
  const misplaced: string[] = [];
  for (const f of files(SOURCES)) {
    const rel = relative(SOURCES, f).split(sep).join("/");
    if (HOLDERS.includes(rel)) continue;
    // (comments name a knob as tune.<knob>, without the dot before it)
    const text = readFileSync(f, "utf8");
    if (!selects.has(rel)) {
      if (/\.tune\b/.test(text)) outside.push(rel);
      continue;
    }
    for (const m of text.matchAll(/\btune\.([a-zA-Z][a-zA-Z0-9]*)/g)) {
      const knob = KNOBS[m[1] as keyof typeof KNOBS];
      if (knob !== undefined && SELECT_MODULE[knob.family] !== rel) misplaced.push(`${rel}: ${m[1]}`);
    }
  }
  assert.deepEqual(outside, [], "read the tuning outside core/tuning.ts and the select modules");
  assert.deepEqual(misplaced, [], "read another family's knob");
});

test("docs/webgpu.md holds the generated tuning table (node --import tsx scripts/gen-tuning-doc.ts)", {
  skip: !existsSync(DOC_PATH) && "no docs here",
}, () => {
  const page = readFileSync(DOC_PATH, "utf8");
  assert.equal(withTuningTable(page), page);
  for (const name of Object.keys(KNOBS)) assert.ok(tuningTable().includes(`| \`${name}\` |`), name);
  assert.throws(() => withTuningTable(page.replace(TABLE_END, "")), /expected one/);
  assert.throws(() => withTuningTable(`${page}\n${TABLE_BEGIN}\n`), /expected one/);
});
