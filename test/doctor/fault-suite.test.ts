// File faults every compute path shares, built from the trained demo model: each must measurably change the model's
// behaviour (else it is not a test), then `latent doctor` must exit 1 naming the cause; healthy variants exit 0.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { logSoftmaxRow } from "../../src/engine/evaluate.js";
import { runDoctor } from "../../src/doctor/index.js";
import { CALIBRATION_TEXT } from "../../src/doctor/perplexity.js";
import { DEMO_MODEL, DEMO_VARIANTS, writeDemoVariant } from "../helpers/demo-faults.js";

/** The finding codes that name each fault's cause (any one suffices; the message is checked too). */
const CAUSES: Record<string, { codes: readonly string[]; message: RegExp }> = {
  "k_b-v_b-swapped": {
    codes: ["miscalibrated", "attention-unpaired"],
    message: /confidently wrong.*NLL|attn_k_b\/attn_v_b are swapped/s,
  },
  "k_b-reshaped": { codes: ["k-b-unpaired"], message: /attn_k_b does not match.*reshaped instead of transposed/s },
  "legacy-kv-b-head-order": {
    codes: ["miscalibrated", "attention-unpaired", "attention-heads-reordered"],
    message:
      /confidently wrong.*NLL|attn_kv_b rows are in the wrong head order|attn_kv_b heads are in the wrong order/s,
  },
  "rope-base-1e6": { codes: ["published-config-mismatch"], message: /rope\.freq_base = 1000000.*publishes 10000/ },
  "yarn-wrong-factor": { codes: ["published-config-mismatch"], message: /rope\.scaling\.type = yarn.*publishes none/ },
  "experts-swapped-in-gate": { codes: ["expert-mispaired"], message: /layer 2, expert [05].*expert [05]'s up/ },
  "expert-zeroed": { codes: ["zero-expert"], message: /blk\.3\.ffn_down_exps\.weight.*expert 3 of layer 3/ },
  "gate-up-names-exchanged": { codes: ["gate-up-exchanged"], message: /exchanged/ },
  "q8_0-scales-shifted": { codes: ["q8-scales-misaligned"], message: /token_embd\.weight.*one block off/ },
  "exp_probs_b-dropped": { codes: ["sigmoid-without-bias", "published-config-mismatch"], message: /exp_probs_b/ },
  "softmax-gating-with-bias": { codes: ["softmax-with-bias", "published-config-mismatch"], message: /softmax/ },
  "k_b-v_b-swapped-in-one-layer": {
    codes: ["attention-unpaired"],
    message: /in 1 of 6 layers.*layer \(q·k, v·o\): 3 .*swapped/s,
  },
  "legacy-kv-b-heads-1-2-exchanged": {
    codes: ["attention-heads-reordered"],
    message: /attn_kv_b heads are in the wrong order.*1→2, 2→1/s,
  },
  "rope-rows-half-split": { codes: ["miscalibrated"], message: /confidently wrong/ },
  "experts-swapped-in-down": {
    codes: ["expert-down-mispaired"],
    message: /layer 1: expert [27]'s up rows pair with expert [27]'s down columns/,
  },
  "experts-swapped-in-up": { codes: ["expert-mispaired"], message: /layer 4, expert [16]/ },
  "gate-up-exchanged-in-shared-expert": { codes: ["gate-up-exchanged"], message: /shexp|shared/ },
  "output-head-scaled": { codes: ["underconfident"], message: /scaled down/ },
  "q8_0-scales-shifted-everywhere": { codes: ["q8-scales-misaligned"], message: /one block off/ },
};
/** Faults the doctor does not catch yet (docs/doctor.md, "what it cannot see"); their tests only prove the effect. */
const NOT_CAUGHT = new Set<string>([]);

let dir = "";
let clean: Float64Array[] = [];
before(() => {
  dir = mkdtempSync(join(tmpdir(), "latent-fault-suite-"));
  clean = logprobs(DEMO_MODEL);
});
after(() => rmSync(dir, { recursive: true, force: true }));

function logprobs(path: string): Float64Array[] {
  const { model, config, file } = loadModel(path);
  try {
    const ids = Tokenizer.fromMetadata(file.metadata)
      .encode(CALIBRATION_TEXT)
      .filter((t) => t < config.nVocab);
    const logits = model.forward(ids, undefined, { path: "reference", logits: "all" });
    const V = config.nVocab;
    return Array.from({ length: ids.length }, (_, i) => logSoftmaxRow(logits.subarray(i * V, (i + 1) * V)));
  } finally {
    file.close();
  }
}

/** Top-1 agreement and mean KL(clean ‖ variant) on the calibration text. */
function effect(path: string): { top1: number; kl: number } {
  const lp = logprobs(path);
  let top1 = 0;
  let kl = 0;
  clean.forEach((c, i) => {
    const q = lp[i];
    let a = 0;
    let b = 0;
    for (let j = 1; j < c.length; j++) {
      if (c[j] > c[a]) a = j;
      if (q[j] > q[b]) b = j;
    }
    if (a === b) top1++;
    for (let j = 0; j < c.length; j++) kl += Math.exp(c[j]) * (c[j] - q[j]);
  });
  return { top1: top1 / clean.length, kl: kl / clean.length };
}

for (const v of DEMO_VARIANTS) {
  test(`demo ${v.name}: ${v.healthy ? "healthy, exit 0" : NOT_CAUGHT.has(v.name) ? "changes behaviour (not caught yet)" : "changes behaviour; doctor exits 1 naming the cause"}`, async () => {
    const path = writeDemoVariant(v, join(dir, `${v.name}.gguf`));
    const e = effect(path);
    if (!v.healthy) {
      // A measurable change: more than requantizing to Q4_K does (top-1 0.875, KL 0.032 measured) on at least one count.
      assert.ok(
        e.top1 < 0.95 || e.kl > 0.02,
        `${v.name} does not change behaviour: top-1 ${e.top1.toFixed(3)}, KL ${e.kl.toFixed(4)}`,
      );
    }
    if (NOT_CAUGHT.has(v.name)) return;
    const r = await runDoctor({ model: path, greedyTokens: 0 });
    const errors = r.findings.filter((f) => f.severity === "error");
    if (v.healthy) {
      assert.deepEqual(errors, []);
      assert.equal(r.exitCode, 0);
      assert.equal(r.verdict, "healthy");
      assert.ok(
        r.findings.some((f) => f.code === "identified"),
        "the demo model is identified by its shapes",
      );
      assert.ok(
        r.findings.some((f) => f.code === "calibration"),
        JSON.stringify(r.findings.map((f) => f.code)),
      );
      return;
    }
    assert.equal(r.exitCode, 1, JSON.stringify(r.findings.map((f) => f.code)));
    assert.equal(r.verdict, "problems");
    const cause = CAUSES[v.name];
    const named = errors.filter((f) => cause.codes.includes(f.code));
    assert.ok(named.length > 0, `expected ${cause.codes.join(" or ")}, got ${errors.map((f) => f.code).join(", ")}`);
    assert.ok(
      named.some((f) => cause.message.test(f.message)),
      named.map((f) => f.message).join("\n"),
    );
  });
}
