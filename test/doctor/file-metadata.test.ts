// Metadata checks that need no compute: contradictions, and the published config of the model the shapes identify.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { parseConfig } from "../../src/model/config.js";
import { Findings } from "../../src/doctor/report.js";
import { checkAgainstKnownModels, checkContradictions } from "../../src/doctor/metadata-checks.js";
import { identify, KNOWN_MODELS, matchesShape } from "../../src/doctor/known-models.js";
import { f32, rewriteGGUF, str, u32, type Rewrite } from "../helpers/gguf-rewrite.js";
import { DEMO_MODEL } from "../helpers/demo-faults.js";
import { synthModel } from "../helpers/synth.js";

const m = synthModel({ label: "doc-meta", base: "tiny", over: {} }, 7);
after(m.cleanup);

function metadataFindings(src: string, edit: Rewrite, name: string): Findings {
  const path = rewriteGGUF(src, join(m.dir, name), edit);
  const file = GGUFFile.open(path);
  try {
    const c = parseConfig(file.metadata, file.tensors.get("token_embd.weight")?.ne[1]);
    const f = new Findings();
    checkContradictions(file, c, f);
    checkAgainstKnownModels(file, c, f);
    return f;
  } finally {
    file.close();
  }
}

const codes = (f: Findings): string[] => f.list.filter((x) => x.severity === "error").map((x) => x.code);

test("random synth model: consistent metadata, not identified (info only)", () => {
  const f = metadataFindings(m.path, {}, "same.gguf");
  assert.deepEqual(codes(f), []);
  assert.ok(f.list.some((x) => x.code === "not-identified" && x.severity === "info"));
});

test("contradictions: sigmoid without the bias, YaRN original context beyond the context", () => {
  const noBias = metadataFindings(
    m.path,
    { tensors: (l) => l.splice(0, l.length, ...l.filter((t) => !t.name.endsWith("exp_probs_b.bias"))) },
    "nobias.gguf",
  );
  assert.deepEqual(codes(noBias), ["sigmoid-without-bias"]);
  const yarn = metadataFindings(m.path, { meta: (mm, a) => mm.set(`${a}.context_length`, u32(2048)) }, "ctx.gguf");
  const f = yarn.list.find((x) => x.code === "yarn-original-context");
  assert.ok(f, JSON.stringify(yarn.list));
  assert.match(f.message, /4096.*exceeds.*2048/);
});

test("the demo model is identified; a wrong rope base names the key, the file's value and the published one", () => {
  const ok = metadataFindings(DEMO_MODEL, {}, "demo.gguf");
  assert.deepEqual(codes(ok), []);
  assert.ok(ok.list.some((x) => x.code === "identified" && /latent-demo-kjv/.test(x.message)));
  const bad = metadataFindings(
    DEMO_MODEL,
    { meta: (mm, a) => mm.set(`${a}.rope.freq_base`, f32(50000)) },
    "demo-rope.gguf",
  );
  const f = bad.list.find((x) => x.code === "published-config-mismatch");
  assert.ok(f, JSON.stringify(bad.list));
  assert.equal(f.evidence?.key, "deepseek2.rope.freq_base");
  assert.equal(f.evidence?.file, 50000);
  assert.equal(f.evidence?.published, 10000);
});

test("demo: YaRN on a model published without it, softmax gating beside its bias", () => {
  const yarn = metadataFindings(
    DEMO_MODEL,
    { meta: (mm, a) => (mm.set(`${a}.rope.scaling.type`, str("yarn")), mm.set(`${a}.rope.scaling.factor`, f32(4))) },
    "demo-yarn.gguf",
  );
  assert.ok(
    yarn.list.some((x) => x.code === "published-config-mismatch" && x.evidence?.key === "deepseek2.rope.scaling.type"),
    JSON.stringify(yarn.list),
  );
  const soft = metadataFindings(
    DEMO_MODEL,
    { meta: (mm, a) => mm.set(`${a}.expert_gating_func`, u32(1)) },
    "demo-soft.gguf",
  );
  assert.ok(codes(soft).includes("softmax-with-bias"));
  assert.ok(soft.list.some((x) => x.code === "published-config-mismatch" && x.evidence?.published === "sigmoid"));
});

test("every table entry identifies itself and no other", () => {
  for (const k of KNOWN_MODELS) {
    const s = k.shape;
    const r = k.releases[0];
    const c = { ...s, nLayer: s.nLayer[0], gating: r.gating } as unknown as Parameters<typeof identify>[0];
    assert.equal(identify(c)?.name, k.name);
    assert.deepEqual(
      KNOWN_MODELS.filter((o) => matchesShape(o.shape, c)).map((o) => o.name),
      [k.name],
    );
  }
});
