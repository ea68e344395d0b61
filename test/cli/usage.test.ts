// The command line as people know it: unknown options and commands are usage errors (exit 2, no stack trace) with a
// suggestion, --version and --help work, negative numbers are option values.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { commands } from "../../src/cli/commands.js";

const ROOT = join(import.meta.dirname, "..", "..");
const BIN = join(ROOT, "bin", "latent.mjs");
const latent = (...args: string[]): { status: number | null; stdout: string; stderr: string } =>
  spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8" });

test("an unknown option is a usage error (exit 2, one line) for every command", () => {
  for (const c of commands) {
    const r = latent(c.name, "--no-such-option");
    assert.equal(r.status, 2, `${c.name}: exit ${r.status}\n${r.stderr}`);
    assert.match(r.stderr, /no-such-option/, c.name);
    assert.doesNotMatch(r.stderr, /\n\s+at /, `${c.name} printed a stack trace:\n${r.stderr}`);
  }
});

test("every command prints its help (exit 0) naming its options", () => {
  for (const c of commands) {
    const r = latent(c.name, "--help");
    assert.equal(r.status, 0, `${c.name}: exit ${r.status}\n${r.stderr}`);
    assert.match(r.stdout, new RegExp(`^usage: latent ${c.name} `), c.name);
    assert.match(r.stdout, /-h, --help/, c.name);
  }
  const top = latent("--help");
  assert.equal(top.status, 0);
  for (const c of commands) assert.match(top.stdout, new RegExp(`^  ${c.name} `, "m"), c.name);
  assert.equal(latent("help", "run").stdout, latent("run", "--help").stdout, "latent help run = latent run --help");
});

test("--version prints package.json's version", () => {
  const { version } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
  for (const flag of ["--version", "-V"]) {
    const r = latent(flag);
    assert.equal(r.status, 0);
    assert.equal(r.stdout, `${version}\n`);
  }
});

test("a misspelt option or command gets a suggestion", () => {
  const opt = latent("run", "x.gguf", "-p", "hi", "--tmp", "0");
  assert.equal(opt.status, 2);
  assert.match(opt.stderr, /^latent run: Unknown option '--tmp'\n\(Did you mean --temp\?\)/);
  const cmd = latent("runn");
  assert.equal(cmd.status, 2);
  assert.match(cmd.stderr, /Unknown command 'runn'\n\(Did you mean run\?\)/);
  assert.doesNotMatch(cmd.stderr, /\n\s+at /);
});

test("negative numbers are option values, judged by the option's range check", () => {
  const r = latent("run", join(ROOT, "models", "latent-demo-kjv.gguf"), "-p", "x", "--top-k", "-3");
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--top-k must be an integer ≥ 0, got "-3"/);
});
