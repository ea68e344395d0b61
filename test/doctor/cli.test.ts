// `latent doctor` CLI: JSON shape (docs/doctor.md), HTML report with an inline SVG plot, exit codes.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { doctorMain } from "../../src/cli/doctor.js";
import { writeFaultyFile } from "../helpers/file-faults.js";
import type { CliIO } from "../../src/cli/run.js";
import { UsageError } from "../../src/util/errors.js";
import { synthModel } from "../helpers/synth.js";

const m = synthModel({ label: "doc-cli", base: "tiny", over: {} }, 3);
after(m.cleanup);

function capture(): CliIO & { stdout: string; stderr: string } {
  const io = {
    stdout: "",
    stderr: "",
    tty: false,
    out: (t: string) => void (io.stdout += t),
    err: (t: string) => void (io.stderr += t),
  };
  return io;
}

test("--json: documented shape, healthy exit 0; --html: self-contained with an SVG plot", async () => {
  const io = capture();
  const html = join(m.dir, "report.html");
  const code = await doctorMain([m.path, "--json", "--html", html], io);
  assert.equal(code, 0);
  const r = JSON.parse(io.stdout) as Record<string, unknown>;
  assert.equal(r.format, "latent-doctor/1");
  assert.equal(r.verdict, "healthy");
  assert.equal(r.exitCode, 0);
  for (const k of ["target", "findings", "file", "paths", "behaviour", "timingsMs"]) assert.ok(k in r, k);
  const file = r.file as Record<string, unknown>;
  for (const k of ["paths", "arch", "generation", "tensorCount", "bytes", "types", "stats"])
    assert.ok(k in file, `file.${k}`);
  const paths = r.paths as { comparisons: Record<string, unknown>[] };
  for (const k of ["prompt", "tokens", "path", "maxKL", "meanKL", "top1Agreement"])
    assert.ok(k in paths.comparisons[0], `paths.comparisons[].${k}`);
  const beh = r.behaviour as { probes: unknown[]; norms: Record<string, unknown>[] };
  assert.equal(beh.norms.length, 2);
  for (const k of ["layer", "residual", "attn", "ffn", "absMax", "qAbsMax"])
    assert.ok(k in beh.norms[0], `behaviour.norms[].${k}`);
  const page = readFileSync(html, "utf8");
  assert.match(page, /<svg[^>]*>.*<polyline/s);
  assert.doesNotMatch(page, /<script|<link|src="http/);
});

test("text report and exit 1 on a defective file", async () => {
  const p = writeFaultyFile(m.path, join(m.dir, "nogating.gguf"), { dropKeys: ["{arch}.expert_gating_func"] });
  const io = capture();
  const code = await doctorMain([p], io);
  assert.equal(code, 1);
  assert.match(io.stdout, /ERROR +\[metadata\/gating-missing-with-bias\]/);
  assert.match(io.stdout, /verdict: problems \(exit 1\)/);
});

test("usage errors (exit 2 via main): no model, missing file", async () => {
  await assert.rejects(doctorMain([], capture()), UsageError);
  await assert.rejects(doctorMain(["/nonexistent.gguf"], capture()), UsageError);
  await assert.rejects(doctorMain([m.path, "--api-key", "k"], capture()), UsageError);
});

test("--backend cpu: the fast kernels' prefill/decode agree with the reference on a mixed-quant kit model", async () => {
  const io = capture();
  const code = await doctorMain(
    [
      new URL("../fixtures/models/ds2-v3-mixed-q.gguf", import.meta.url).pathname,
      "--backend",
      "cpu",
      "--json",
      "--no-data",
    ],
    io,
  );
  assert.equal(code, 0, io.stdout);
  const r = JSON.parse(io.stdout) as { paths: { comparisons: { maxKL: number | string }[] } };
  assert.ok(r.paths.comparisons.every((c) => typeof c.maxKL === "number" && c.maxKL < 1e-3));
});
