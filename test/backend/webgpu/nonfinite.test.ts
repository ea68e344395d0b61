// The fused GPU pipeline reads the weights in its own worker: a NaN/±Inf weight is refused there too, naming the
// tensor (exit 1), and `--allow-nonfinite` loads it with one warning line, as on the CPU backends.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { find, rewriteGGUF, setValues, values } from "../../helpers/gguf-rewrite.js";
import { tempDir } from "../../gguf/helpers.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();
rt?.device.destroy();
const MODEL = join(import.meta.dirname, "../../fixtures/models/ds2-v3.gguf");
const BIN = join(import.meta.dirname, "../../../bin/latent.mjs");
const tmp = tempDir("latent-webgpu-nonfinite-");
after(tmp.cleanup);

const infPath = join(tmp.dir, "inf.gguf");
rewriteGGUF(MODEL, infPath, {
  tensors: (list) => {
    const t = find(list, "output_norm.weight");
    const v = values(t);
    v[3] = Number.POSITIVE_INFINITY;
    setValues(t, v);
  },
});

function run(...extra: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(
    process.execPath,
    [BIN, "run", infPath, "-p", "hello", "-n", "2", "--temp", "0", "--backend", "webgpu", ...extra],
    {
      encoding: "utf8",
      timeout: 240_000,
      env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" },
    },
  );
  return { status: r.status, stderr: r.stderr };
}

test("run --backend webgpu refuses an Inf weight, naming the tensor", { skip, timeout: 300_000 }, () => {
  const r = run();
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /"output_norm\.weight".*NaN or ±Inf/);
});

test("run --backend webgpu --allow-nonfinite loads it with a warning naming the tensor", {
  skip,
  timeout: 300_000,
}, () => {
  const r = run("--allow-nonfinite");
  assert.match(r.stderr, /warning: .*"output_norm\.weight".*NaN or ±Inf/);
  assert.doesNotMatch(r.stderr, /run `latent doctor` on the file, or pass --allow-nonfinite/);
});
