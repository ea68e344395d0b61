// Every command answers an unknown option as a usage error: one line naming the option, exit 2, no stack trace.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { commands } from "../../src/cli/commands.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "latent.mjs");

test("an unknown option is a usage error (exit 2, one line) for every command", () => {
  for (const c of commands) {
    const r = spawnSync(process.execPath, [BIN, c.name, "--no-such-option"], { encoding: "utf8" });
    assert.equal(r.status, 2, `${c.name}: exit ${r.status}\n${r.stderr}`);
    assert.match(r.stderr, /no-such-option/, c.name);
    assert.doesNotMatch(r.stderr, /\n\s+at /, `${c.name} printed a stack trace:\n${r.stderr}`);
  }
});
