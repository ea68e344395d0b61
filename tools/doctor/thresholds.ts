// Measure the doctor's behaviour evidence on healthy and faulted models (docs/doctor.md, "Behaviour"):
//   node --import tsx tools/doctor/thresholds.ts
// For every variant of test/helpers/demo-faults.ts (the trained demo model, healthy and faulted), the random-weight
// kit models and a few `latent synth` models: calibration NLL / entropy / gap, the SwiGLU pairing and gate/up lean,
// the attention pairing, top-1 agreement and KL against the clean demo model on the calibration text, the doctor's
// errors and its time (2 shared cores: times vary with the machine's load).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { logSoftmaxRow } from "../../src/engine/evaluate.js";
import { runDoctor } from "../../src/doctor/index.js";
import { CALIBRATION_TEXT } from "../../src/doctor/perplexity.js";
import { DEMO_MODEL, DEMO_VARIANTS, writeDemoVariant } from "../../test/helpers/demo-faults.js";
import { CASES, synthModel } from "../../test/helpers/synth.js";

function logprobs(path: string): Float64Array[] {
  const { model, config, file } = loadModel(path);
  try {
    const ids = Tokenizer.fromMetadata(file.metadata)
      .encode(CALIBRATION_TEXT)
      .filter((t) => t < config.nVocab);
    const V = config.nVocab;
    const logits = model.forward(ids, undefined, { path: "reference", logits: "all" });
    return Array.from({ length: ids.length }, (_, i) => logSoftmaxRow(logits.subarray(i * V, (i + 1) * V)));
  } finally {
    file.close();
  }
}

const argmax = (a: Float64Array): number => a.reduce((b, x, i) => (x > a[b] ? i : b), 0);

function agreement(clean: Float64Array[], lp: Float64Array[]): { top1: number; kl: number } {
  let top1 = 0;
  let kl = 0;
  clean.forEach((c, i) => {
    const q = lp[i];
    if (argmax(c) === argmax(q)) top1++;
    for (let j = 0; j < c.length; j++) kl += Math.exp(c[j]) * (c[j] - q[j]);
  });
  return { top1: top1 / clean.length, kl: kl / clean.length };
}

const f3 = (x: number | undefined): string => (x === undefined ? "–" : x.toFixed(3));

async function row(label: string, path: string, clean?: Float64Array[]): Promise<void> {
  const t0 = performance.now();
  const r = await runDoctor({ model: path, greedyTokens: 24 });
  const ms = performance.now() - t0;
  const cal = r.behaviour?.calibration;
  const ffn = r.behaviour?.ffn;
  const pairMin = ffn?.pairing.length ? Math.min(...ffn.pairing.map((p) => p.median / p.baseline)) : undefined;
  const moe = ffn?.shifts.filter((s) => s.part === "experts") ?? [];
  const gate = moe.length > 0 ? moe.map((s) => s.gate) : undefined;
  const up = moe.length > 0 ? moe.map((s) => s.up) : undefined;
  const attn = r.behaviour?.attentionPairing ?? [];
  const qk =
    attn.length > 0 ? `${f3(Math.min(...attn.map((l) => l.qk)))} / ${f3(Math.min(...attn.map((l) => l.vo)))}` : "–";
  const agree = clean !== undefined ? agreement(clean, logprobs(path)) : undefined;
  const errors = [...new Set(r.findings.filter((f) => f.severity === "error").map((f) => f.code))].join(",") || "—";
  console.log(
    `| ${label} | ${f3(cal?.nll)} | ${f3(cal?.entropy)} | ${f3(cal?.gap)} | ${f3(cal ? cal.nll / cal.logVocab : undefined)} | ${f3(pairMin)} | ${qk} | ${gate ? `${f3(Math.max(...gate))}…${f3(Math.min(...gate))}` : "–"} | ${up ? `${f3(Math.max(...up))}…${f3(Math.min(...up))}` : "–"} | ${agree ? `${f3(agree.top1)} / ${f3(agree.kl)}` : "–"} | ${r.exitCode} | ${errors} | ${(ms / 1000).toFixed(1)} |`,
  );
}

const dir = mkdtempSync(join(tmpdir(), "latent-thresholds-"));
try {
  console.log(
    "| model | NLL | H | NLL−H | NLL/lnV | gate·up pairing median/baseline (min layer) | q·k / v·o log-norm corr (min layer) | gate lean (MoE) | up lean (MoE) | top-1 / KL vs clean | exit | errors | s |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
  const clean = logprobs(DEMO_MODEL);
  for (const v of DEMO_VARIANTS)
    await row(`demo ${v.name}${v.healthy ? "" : " (fault)"}`, writeDemoVariant(v, join(dir, `${v.name}.gguf`)), clean);
  for (const n of ["ds2-qlora-softmax", "ds2-lite", "ds2-v3", "glm-dsa-topk8", "ds2-v3-mixed-q"])
    await row(`kit ${n} (random)`, new URL(`../../test/fixtures/models/${n}.gguf`, import.meta.url).pathname);
  for (const c of CASES) {
    const m = synthModel(c, 5);
    await row(`synth ${c.label} (random)`, m.path);
    m.cleanup();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
