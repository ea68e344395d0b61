// The doctor tells where it is (stages, each path-check run) on stderr: on a terminal, or anywhere with --progress;
// stdout stays the report.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { FIXTURE_DIR, ROOT } from "../gguf/helpers.js";

const BIN = join(ROOT, "bin", "latent.mjs");
const MODEL = join(FIXTURE_DIR, "ds2-lite.gguf");

test("--progress: a line per stage and per path-check run on stderr; none without it when stderr is not a terminal", () => {
  const withProgress = spawnSync(process.execPath, [BIN, "doctor", MODEL, "--no-data", "--progress"], {
    encoding: "utf8",
  });
  assert.equal(withProgress.status, 0, withProgress.stderr);
  const lines = withProgress.stderr.trimEnd().split("\n");
  for (const stage of ["file", "load", "paths", "behaviour"])
    assert.ok(lines.includes(`latent doctor: ${stage}…`), stage);
  const runs = lines.filter((l) =>
    /^latent doctor: paths \d+\/\d+: (prefill|decode) on the .* prompt \(\d+ tokens\)$/.test(l),
  );
  assert.equal(runs.length, 6, withProgress.stderr);
  assert.match(runs.at(-1)!, /paths 6\/6/);
  assert.doesNotMatch(withProgress.stdout, /latent doctor: paths/, "progress stays off stdout");

  const quiet = spawnSync(process.execPath, [BIN, "doctor", MODEL, "--no-data"], { encoding: "utf8" });
  assert.equal(quiet.status, 0, quiet.stderr);
  assert.equal(quiet.stderr, "");
  assert.equal(quiet.stdout, withProgress.stdout, "the same report either way");
});

test("--low-memory --progress: a line per streamed layer with tokens, elapsed time and the time left", () => {
  const r = spawnSync(
    process.execPath,
    [BIN, "doctor", MODEL, "--no-data", "--low-memory", "--backend", "cpu", "--threads", "2", "--progress"],
    { encoding: "utf8" },
  );
  assert.equal(r.status, 0, r.stderr);
  const layers = r.stderr
    .split("\n")
    .filter((l) =>
      /^latent doctor: low-memory layer \d+\/\d+ \(\d+ tokens\): [\d.]+ s elapsed, about [\d.]+ s left$/.test(l),
    );
  assert.ok(layers.length >= 2, r.stderr);
  assert.match(layers.at(-1)!, /layer (\d+)\/\1 .*about 0\.0 s left/);
  assert.match(r.stdout, /low-memory cpu-kernel pass: \d+ tokens through \d+ layers/);
});
