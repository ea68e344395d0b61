// Story replay on latent's own server (`latent serve`, in process) with the demo model: healthy → exit 0 with no
// error or warning; a server whose decode-path attention output is never written (the decode entry of the
// ATTENTION table wrapped from this test, restored after) → the doctor names the decode path, exit 1.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { ATTENTION } from "../../src/model/mla.js";
import { startServer } from "../../src/server/server.js";

const DEMO = "models/latent-demo-kjv.gguf";

test("healthy latent serve on the demo model: exit 0, no error or warning", async () => {
  const server = await startServer({ modelPath: DEMO, port: 0 });
  try {
    const r = await runDoctor({ model: DEMO, endpoint: `${server.url}/v1` });
    assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
    assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
    assert.ok(r.endpoint!.verdict === "match" || r.endpoint!.verdict === "close");
    assert.ok(r.endpoint!.decode!.n >= 30, JSON.stringify(r.endpoint!.probes));
  } finally {
    await server.close();
  }
});

test("latent serve whose decode attention output is never written: decode-path-broken, exit 1", async () => {
  const decode = ATTENTION.decode;
  let calls = 0;
  ATTENTION.decode = (w, cfg, pr, n, pos0, lat, sel, k) => {
    calls++;
    decode(w, cfg, pr, n, pos0, lat, sel, k);
    return new Float64Array(n * cfg.nHead * cfg.vHead);
  };
  const server = await startServer({ modelPath: DEMO, port: 0 });
  try {
    const r = await runDoctor({ model: DEMO, endpoint: `${server.url}/v1` });
    assert.ok(calls > 0, "the server never ran the decode path");
    assert.equal(r.exitCode, 1, JSON.stringify(r.findings));
    const f = r.findings.find((x) => x.code === "decode-path-broken");
    assert.ok(f, JSON.stringify(r.findings));
    assert.equal(f.severity, "error");
    assert.match(f.message, /the server's decode path is broken, its prefill path is not/);
    assert.ok(!r.findings.some((x) => x.code === "logprobs-mismatch"), JSON.stringify(r.findings));
  } finally {
    ATTENTION.decode = decode;
    await server.close();
  }
});
