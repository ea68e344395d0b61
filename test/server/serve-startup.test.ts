// `latent serve` starting up: the backend it chose and why (without Dawn's warnings on the terminal), a busy port or a
// file that fails to load as one line and exit 1, JSON-lines logging, and the webgpu package missing.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createServer as createNetServer } from "node:net";
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CASES, synthModel } from "../helpers/synth.js";
import { find, rewriteGGUF, setValues, values } from "../helpers/gguf-rewrite.js";
import { spawnServe } from "../helpers/serve-child.js";
import { serveMain } from "../../src/cli/serve.js";
import { decideBackend, webgpuProbe, WebgpuMissingError } from "../../src/runtime/backend-choice.js";
import { UsageError } from "../../src/util/errors.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "latent.mjs");
const synth = synthModel(CASES[0], 2);
const dir = mkdtempSync(join(tmpdir(), "latent-serve-startup-"));
after(() => {
  synth.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

test("auto says which backend it chose and why, before the load; Dawn's own warnings stay off the terminal", async () => {
  const { child, url, stderr } = spawnServe([synth.path, "--port", "0", "--alias", "tiny"]);
  try {
    const base = await url;
    const out = stderr();
    assert.match(
      out,
      /^latent serve: loading .*; port \d+ answers 503 until the model is ready\nbackend (cpu|webgpu): .+\nloaded /m,
    );
    // Dawn prints "Warning: …" lines when it enumerates a software adapter (or none): the probe runs in a child
    assert.doesNotMatch(out, /Warning:|artificially reduced/);
    const r = await fetch(`${base}/v1/models`, { headers: { "x-request-id": "startup-1" } });
    assert.equal(r.status, 200);
    const t0 = performance.now();
    while (!stderr().includes("[startup-1]") && performance.now() - t0 < 5000)
      await new Promise((res) => setTimeout(res, 20));
    assert.match(stderr(), /^GET \/v1\/models 200 [\d.]+ ms \[startup-1\]$/m);
  } finally {
    child.kill("SIGKILL");
  }
});

test("--help names the logging flags and the optional webgpu package", () => {
  const help = spawnSync(process.execPath, [BIN, "serve", "--help"], { encoding: "utf8" });
  assert.equal(help.status, 0);
  for (const flag of ["--log-format F", "--log-level L", "--quiet", "npm install webgpu", "repeat it"])
    assert.ok(help.stdout.includes(flag), flag);
});

test("a busy port: one line and exit 1, before the model loads", async () => {
  const holder = createNetServer();
  await new Promise<void>((r) => holder.listen(0, "127.0.0.1", () => r()));
  const port = (holder.address() as { port: number }).port;
  try {
    const r = spawnSync(process.execPath, [BIN, "serve", synth.path, "--port", String(port), "--backend", "cpu"], {
      encoding: "utf8",
    });
    assert.equal(r.status, 1);
    assert.equal(r.stderr, `latent serve: port ${port} is in use; pick another with --port\n`);
  } finally {
    holder.close();
  }
});

test("a file that fails to load: the error as one line, exit 1", () => {
  const bad = join(dir, "bad.gguf");
  writeFileSync(bad, Buffer.from("GGUF this is not a model"));
  const r = spawnSync(process.execPath, [BIN, "serve", bad, "--port", "0", "--backend", "cpu"], { encoding: "utf8" });
  assert.equal(r.status, 1, r.stderr);
  const lines = r.stderr.trimEnd().split("\n");
  assert.match(lines[0], /answers 503 until the model is ready/);
  assert.match(lines.at(-1)!, /^latent serve: .*bad\.gguf: unsupported GGUF version/);
  assert.doesNotMatch(r.stderr, /^\s+at /m, "no stack trace");
  assert.ok(lines.length <= 3, r.stderr);
});

test("--log-format json: every line a JSON object, the loader's warnings too; bad logging flags are usage errors", async () => {
  // a NaN weight loaded with --allow-nonfinite: the loader's warning must come out as a JSON line as well
  const nanNorm = join(dir, "nan-norm.gguf");
  rewriteGGUF(synth.path, nanNorm, {
    tensors: (list) => {
      const t = find(list, "output_norm.weight");
      const v = values(t);
      v[0] = NaN;
      setValues(t, v);
    },
  });
  const { child, url, stderr } = spawnServe([
    nanNorm,
    "--port",
    "0",
    "--backend",
    "cpu",
    "--log-format",
    "json",
    "--allow-nonfinite",
  ]);
  try {
    // the ready line is JSON too: its msg holds the URL the helper waits for
    const base = await url.catch(() => undefined);
    const text = stderr();
    const lines = text
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(
      lines.every(
        (l) => typeof l["msg"] === "string" && typeof l["level"] === "string" && typeof l["time"] === "number",
      ),
      text,
    );
    assert.ok(
      lines.some((l) => /^backend cpu: chosen with --backend$/.test(l["msg"] as string)),
      text,
    );
    assert.ok(
      lines.some((l) => l["level"] === "warn" && /output_norm\.weight/.test(l["msg"] as string)),
      text,
    );
    assert.ok(base !== undefined);
  } finally {
    child.kill("SIGKILL");
  }
  const io = { out: (): void => {}, err: (): void => {}, tty: false };
  await assert.rejects(
    serveMain([synth.path, "--log-format", "xml"], io),
    (e: unknown) => e instanceof UsageError && /--log-format must be text or json/.test(e.message),
  );
  await assert.rejects(
    serveMain([synth.path, "--log-level", "loud"], io),
    (e: unknown) => e instanceof UsageError && /--log-level must be/.test(e.message),
  );
  await assert.rejects(
    serveMain([synth.path, "--alias", ""], io),
    (e: unknown) => e instanceof UsageError && /--alias needs a model id/.test(e.message),
  );
});

test("without the webgpu package: auto picks cpu, --backend webgpu fails with one line naming npm install webgpu", async () => {
  const missing = { resolveWebgpu: (): undefined => undefined };
  assert.deepEqual(decideBackend("auto", missing), {
    backend: "cpu",
    reason: 'cpu: the optional "webgpu" package is not installed (npm install webgpu to use a GPU)',
  });
  assert.throws(
    () => decideBackend("webgpu", missing),
    (e: unknown) =>
      e instanceof WebgpuMissingError &&
      e.message === 'the webgpu backend needs the optional "webgpu" package: npm install webgpu',
  );
  const saved = webgpuProbe.resolveWebgpu;
  webgpuProbe.resolveWebgpu = () => undefined;
  let err = "";
  try {
    const io = { out: (): void => {}, err: (t: string): void => void (err += t), tty: false };
    await assert.rejects(
      serveMain([synth.path, "--port", "0", "--backend", "webgpu"], io),
      (e: unknown) => e instanceof WebgpuMissingError && /npm install webgpu/.test(e.message),
    );
  } finally {
    webgpuProbe.resolveWebgpu = saved;
  }
  assert.doesNotMatch(err, /loaded/);
});

test("auto's decision from the adapter probe", () => {
  const entry = { resolveWebgpu: (): string => "/somewhere/webgpu/index.js" };
  assert.deepEqual(
    decideBackend("auto", {
      ...entry,
      probeAdapter: () => ({ adapter: "NVIDIA H200", details: "nvidia hopper NVIDIA H200" }),
    }),
    { backend: "webgpu", reason: "webgpu: NVIDIA H200" },
  );
  assert.deepEqual(decideBackend("auto", { ...entry, probeAdapter: () => ({ none: "no WebGPU adapter" }) }), {
    backend: "cpu",
    reason: "cpu: no WebGPU adapter",
  });
  assert.equal(
    decideBackend("auto", { ...entry, probeAdapter: () => ({ adapter: "llvmpipe (LLVM 15.0.6, 256 bits)" }) }).backend,
    "cpu",
  );
  assert.deepEqual(decideBackend("cpu", { resolveWebgpu: () => assert.fail("cpu needs no webgpu") }), {
    backend: "cpu",
    reason: "cpu: chosen with --backend",
  });
  assert.deepEqual(decideBackend("webgpu", entry), { backend: "webgpu", reason: "webgpu: chosen with --backend" });
});
