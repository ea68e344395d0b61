// `doctor --endpoint … --low-memory`: the endpoint is compared with the reference streamed layer by layer from disk
// (reference and cpu kernels): a correct server passes, a faulty one fails, a wrong decode path is named as such.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { runDoctor } from "../../src/doctor/index.js";
import { loadModel } from "../../src/runtime/load.js";
import { withFaults } from "../../src/doctor/faults/faults.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { synthModel } from "../helpers/synth.js";
import { startFakeServer, type FakeServerOptions } from "./fake-server.js";

const m = synthModel({ label: "doc-endpoint-low", base: "tiny", over: {} }, 23);
after(m.cleanup);
const { model, file } = loadModel(m.path);
const tokenizer = Tokenizer.fromMetadata(file.metadata);

async function check(opts: Partial<FakeServerOptions>, backend: "reference" | "cpu" = "reference") {
  const s = await startFakeServer({ model, tokenizer, mode: "vllm", ...opts });
  const steps: string[] = [];
  try {
    const r = await runDoctor({
      model: m.path,
      endpoint: s.url,
      lowMemory: true,
      backend,
      threads: 2,
      onStep: (x) => steps.push(x),
    });
    return { r, steps };
  } finally {
    await s.close();
  }
}

for (const backend of ["reference", "cpu"] as const)
  test(`healthy server, streamed pass on the ${backend} kernels: ${backend === "cpu" ? "match or close" : "match"}, exit 0, progress per layer`, async () => {
    const { r, steps } = await check({}, backend);
    assert.equal(r.exitCode, 0, JSON.stringify(r.findings));
    assert.ok(!r.findings.some((f) => f.severity !== "info"), JSON.stringify(r.findings));
    // the float64 reference reproduces the server exactly; the float32 kernels within the same-GGUF tolerance
    if (backend === "reference") assert.equal(r.endpoint!.verdict, "match");
    else assert.ok(["match", "close"].includes(r.endpoint!.verdict), r.endpoint!.verdict);
    assert.equal(r.endpoint!.top1Agreement, 1);
    assert.ok(r.endpoint!.positions.length > 300);
    // the streamed pass ran (once, every probe through each layer) and the model was never loaded
    assert.equal(r.lowMemory!.kernels, backend);
    assert.equal(r.lowMemory!.layers, model.config.nLayer);
    assert.equal(
      r.lowMemory!.tokens,
      r.endpoint!.probes!.reduce((a, p) => a + p.promptTokens + p.generated.length, 0),
    );
    assert.equal(r.timingsMs.load, undefined);
    assert.equal(r.behaviour, undefined);
    const layers = steps.filter((x) => x.startsWith("low-memory layer"));
    assert.equal(layers.length, model.config.nLayer, steps.join("\n"));
    assert.match(layers.at(-1)!, /^low-memory layer (\d+)\/\1 \(\d+ tokens\): [\d.]+ s elapsed, about 0\.0 s left$/);
  });

test("faulty server (NeoX rope), streamed reference: mismatch, exit 1, the matcher's absence said", async () => {
  const { r } = await check({ model: withFaults(model, { neoxRope: true }) });
  assert.equal(r.exitCode, 1);
  assert.equal(r.endpoint!.verdict, "mismatch");
  const f = r.findings.find((x) => x.code === "logprobs-mismatch");
  assert.ok(f, JSON.stringify(r.findings));
  assert.match(f.message, /needs the model in memory/);
});

test("a server whose decode path is broken, streamed reference: decode-path-broken", async () => {
  const { r } = await check({ garbageGenerated: true });
  assert.equal(r.exitCode, 1);
  assert.ok(
    r.findings.some((x) => x.code === "decode-path-broken"),
    JSON.stringify(r.findings),
  );
});

test("unreachable endpoint with --low-memory: could not run, exit 2, no streamed pass", async () => {
  const r = await runDoctor({ model: m.path, endpoint: "http://127.0.0.1:9/v1", lowMemory: true });
  assert.equal(r.exitCode, 2);
  assert.equal(r.lowMemory, undefined);
});
