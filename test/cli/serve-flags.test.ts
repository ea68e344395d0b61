// `latent serve` through commander: a repeated --alias (and a comma list) gives several model ids, --no-prefix-cache
// are read, a misspelt flag gets a suggestion, contradictory logging flags are refused.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { CASES, synthModel } from "../helpers/synth.js";
import { spawnServe } from "../helpers/serve-child.js";
import { ROOT } from "../gguf/helpers.js";

const BIN = join(ROOT, "bin", "latent.mjs");
const synth = synthModel(CASES[0], 2);
after(() => synth.cleanup());

test("--alias repeated and as a comma list: every id is listed; the access log is on", async () => {
  const { child, url, stderr } = spawnServe([
    synth.path,
    "--port",
    "0",
    "--backend",
    "cpu",
    "--alias",
    "one",
    "--alias",
    "two,three",
    "--no-prefix-cache",
  ]);
  try {
    const base = await url;
    const models = (await (await fetch(`${base}/v1/models`)).json()) as { data: { id: string }[] };
    assert.deepEqual(models.data.map((m) => m.id).sort(), ["one", "three", "two"]);
    const t0 = performance.now();
    while (!stderr().includes("/v1/models") && performance.now() - t0 < 5000)
      await new Promise((r) => setTimeout(r, 20));
    assert.match(stderr(), /^GET \/v1\/models 200 /m);
  } finally {
    child.kill("SIGKILL");
  }
});

test("a misspelt serve flag: exit 2 with a suggestion, before the model loads", () => {
  const r = spawnSync(process.execPath, [BIN, "serve", synth.path, "--log-levl", "debug"], { encoding: "utf8" });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^latent serve: Unknown option '--log-levl'\n\(Did you mean --log-level\?\)/);
  const quiet = spawnSync(process.execPath, [BIN, "serve", synth.path, "--quiet", "--log-level", "info"], {
    encoding: "utf8",
  });
  assert.equal(quiet.status, 2);
  assert.match(quiet.stderr, /--quiet and --log-level cannot be given together/);
});
