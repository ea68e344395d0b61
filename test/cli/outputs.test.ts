// Files written by synth, convert and the bench appear under their final names only when complete; the cpu bench
// checks a model left by an earlier run before reusing it; `npm run bench -- --help` prints help and runs nothing.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { writeThroughTemporary } from "../../src/synth/atomic-output.js";
import { preset } from "../../src/synth/presets.js";
import { planTensors } from "../../src/synth/synthesize.js";
import { reusableModelProblem } from "../../bench/cpu.js";
import { ROOT, tempDir } from "../gguf/helpers.js";

const BIN = join(ROOT, "bin", "latent.mjs");
const tmp = tempDir("latent-outputs-");
after(tmp.cleanup);

test("writeThroughTemporary: renames every written file into place; a failed write leaves nothing", () => {
  const dir = join(tmp.dir, "atomic");
  mkdirSync(dir);
  const paths = writeThroughTemporary(join(dir, "m.gguf"), (out) => {
    assert.notEqual(out, join(dir, "m.gguf"), "the writer gets another name");
    const shards = [out.replace(/\.gguf$/, "-00001-of-00002.gguf"), out.replace(/\.gguf$/, "-00002-of-00002.gguf")];
    for (const s of shards) writeFileSync(s, "x");
    return shards;
  });
  assert.deepEqual(paths, [join(dir, "m-00001-of-00002.gguf"), join(dir, "m-00002-of-00002.gguf")]);
  assert.deepEqual(
    readdirSync(dir).sort(),
    ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"],
    "no staging directory left",
  );
  assert.throws(
    () =>
      writeThroughTemporary(join(dir, "broken.gguf"), (out) => {
        writeFileSync(out, "half a file");
        throw new Error("interrupted");
      }),
    /interrupted/,
  );
  assert.deepEqual(
    readdirSync(dir).sort(),
    ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"],
    "a failed write leaves no file and no staging directory",
  );
});

test("latent synth writes the finished file under its name and nothing else", () => {
  const dir = join(tmp.dir, "synth");
  mkdirSync(dir);
  const r = spawnSync(
    process.execPath,
    [BIN, "synth", "--preset", "tiny", "--split", "2", "-o", join(dir, "tiny.gguf")],
    { encoding: "utf8" },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(readdirSync(dir).sort(), ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]);
  assert.match(r.stderr, new RegExp(`wrote ${join(dir, "tiny-00001-of-00002.gguf")}`));
});

test("the cpu bench reuses a model file only when it parses as GGUF with the expected tensor count", () => {
  const path = join(tmp.dir, "bench.gguf");
  const r = spawnSync(process.execPath, [BIN, "synth", "--preset", "tiny", "-o", path], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const expected = planTensors(preset("tiny")).length;
  assert.equal(reusableModelProblem(path, expected), undefined);
  assert.match(
    reusableModelProblem(path, expected + 1) ?? "",
    new RegExp(`holds ${expected} tensors, not ${expected + 1}`),
  );
  const truncated = join(tmp.dir, "truncated.gguf");
  writeFileSync(truncated, readFileSync(path).subarray(0, 1000));
  assert.match(reusableModelProblem(truncated, expected) ?? "", /does not parse as GGUF/);
});

test("npm run bench -- --help prints the options and runs no benchmark; a typo is a usage error", () => {
  const bench = (...args: string[]): { status: number | null; stdout: string; stderr: string } =>
    spawnSync(process.execPath, ["--import", "tsx", join(ROOT, "bench", "run.ts"), ...args], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000,
    });
  const help = bench("--help");
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^usage: npm run bench -- /);
  for (const o of ["--json", "--backend", "--threads", "--model", "--repeat", "--no-llama", "--batches"])
    assert.match(help.stdout, new RegExp(o), o);
  assert.doesNotMatch(help.stdout + help.stderr, /synthesizing|==/);
  const typo = bench("--thread", "2");
  assert.equal(typo.status, 2);
  assert.match(typo.stderr, /unknown option '--thread'\n\(Did you mean --threads\?\)/);
  const module = bench("cpuu");
  assert.equal(module.status, 2);
  assert.match(module.stderr, /unknown benchmark cpuu/);
});
