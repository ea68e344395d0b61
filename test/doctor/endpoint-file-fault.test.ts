// A real `latent serve` on a faulted GGUF, checked with that same file: the server agrees with the file (both run
// the same broken weights), so the verdict must come from the file's own checks, which the endpoint mode runs too.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runDoctor } from "../../src/doctor/index.js";
import { startServer } from "../../src/server/server.js";
import { DEMO_VARIANTS, writeDemoVariant } from "../helpers/demo-faults.js";

const dir = mkdtempSync(join(tmpdir(), "latent-endpoint-file-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("latent serve on a demo file with k_b/v_b swapped, doctor given the same file: exit 1 naming the attention tensors", async () => {
  const v = DEMO_VARIANTS.find((x) => x.name === "k_b-v_b-swapped")!;
  const path = writeDemoVariant(v, join(dir, "swapped.gguf"));
  const server = await startServer({ modelPath: path, port: 0 });
  try {
    const r = await runDoctor({ model: path, endpoint: `${server.url}/v1` });
    assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
    assert.ok(r.endpoint!.verdict === "match" || r.endpoint!.verdict === "close", r.endpoint!.verdict);
    assert.ok(
      r.findings.some((f) => f.severity === "error" && (f.code === "attention-unpaired" || f.code === "miscalibrated")),
      JSON.stringify(r.findings.map((f) => f.code)),
    );
  } finally {
    await server.close();
  }
});
