/**
 * `latent doctor MODEL.gguf --source HF-DIR | other.gguf`: evidence from outside the file. Every GGUF tensor is
 * dequantized part by part, mapped back through the name map and compared with the source tensor within the
 * quantization noise of both sides (source-noise.ts); a part beyond it is diagnosed (source-diagnose.ts). Then the
 * logits of both models on the same prompts (source-logits.ts). Faults every compute path shares (a swapped,
 * transposed or scaled tensor) are invisible to comparing the file's model with itself; the source sees them.
 */
import { statfsSync } from "node:fs";
import { freemem, tmpdir } from "node:os";
import type { GGUFFile } from "../gguf/file.js";
import type { ModelConfig } from "../model/config.js";
import { Expected, comparePart, type PartResult } from "./source-compare.js";
import { diagnose, type Diagnosis } from "./source-diagnose.js";
import { compareLogits, type LogitsComparison, type LogitsPrompt } from "./source-logits.js";
import { openSource, type SourceModel } from "./source-model.js";
import { ggufParts, type GgufPart } from "./source-parts.js";
import { ggufNoise } from "./source-noise.js";
import type { Findings } from "./report.js";

export { SourceUnreadableError } from "./source-model.js";

export interface SourceTensorSummary {
  readonly tensor: string;
  readonly type: string;
  readonly sourceDtype?: string;
  readonly parts: number;
  readonly status: "match" | "mismatch" | "shape" | "no-source" | "unreadable-source";
  /** worst rel = RMS(diff)/RMS(source) over its parts, and the tolerance */
  readonly rel?: number;
  readonly tolerance?: number;
}

export interface SourceMismatch {
  readonly tensor: string;
  /** the mistake, as in the finding code source-<mistake> */
  readonly mistake: string;
  readonly message: string;
  readonly parts: readonly {
    readonly label: string;
    readonly kind: string;
    readonly what: string;
    readonly rel?: number;
    readonly tolerance?: number;
  }[];
}

export interface SourceReport {
  readonly path: string;
  readonly kind: "hf-dir" | "gguf";
  /** GGUF tensors compared with the source (all their parts) and those that matched within noise */
  readonly compared: number;
  readonly matched: number;
  readonly tensors: readonly SourceTensorSummary[];
  readonly mismatches: readonly SourceMismatch[];
  /** GGUF tensors not compared, and why (no Hugging Face name, the source cannot be read) */
  readonly notCompared: readonly { readonly tensor: string; readonly reason: string }[];
  /** source tensors no GGUF tensor holds: missing from the GGUF unless skipped on purpose (MTP layers) */
  readonly missingInGguf: readonly string[];
  readonly skippedInSource: readonly { readonly name: string; readonly reason: string }[];
  readonly logits?: LogitsComparison;
}

const LAYER = /^model\.layers\.(\d+)\./;
const LIST = 8;
/** mismatching parts diagnosed in full; past this (a different model?) the rest are only listed */
const MAX_DIAGNOSED = 512;

function list(names: readonly string[]): string {
  return names.slice(0, LIST).join(", ") + (names.length > LIST ? `, … (${names.length} in all)` : "");
}

/** The tensor's names without the layer/expert part, for naming the classic swaps. */
function swapName(a: PartResult, b: PartResult): string | undefined {
  const ra = a.part.tensor.replace(/^blk\.\d+\./, "");
  const rb = b.part.tensor.replace(/^blk\.\d+\./, "");
  const sameLayer = a.part.layer === b.part.layer;
  const sameExpert = a.part.expert === b.part.expert;
  const pair = (x: string, y: string): boolean =>
    (ra.startsWith(x) && rb.startsWith(y)) || (ra.startsWith(y) && rb.startsWith(x));
  if (
    sameLayer &&
    sameExpert &&
    pair("ffn_gate", "ffn_up") &&
    ra.replace(/^ffn_(gate|up)/, "") === rb.replace(/^ffn_(gate|up)/, "")
  )
    return "gate-up-exchanged";
  if (sameLayer && pair("attn_k_b", "attn_v_b")) return "k-b-v-b-swapped";
  if (a.part.tensor === b.part.tensor && !sameExpert) return "experts-swapped";
  return undefined;
}

const SWAP_WORDS: Record<string, string> = {
  "gate-up-exchanged": "gate and up exchanged (ffn_gate holds up_proj, ffn_up holds gate_proj)",
  "k-b-v-b-swapped": "attn_k_b and attn_v_b swapped (kv_b_proj split into the wrong halves)",
  "experts-swapped": "experts swapped inside the stacked tensor",
};

/** One finding per GGUF tensor whose parts mismatch. */
function summarizeMismatch(
  tensor: string,
  diags: readonly [PartResult, Diagnosis][],
  partsInTensor: number,
): SourceMismatch {
  const parts = diags.map(([r, d]) => ({
    label: r.part.label,
    kind: d.kind,
    what: d.what,
    ...(r.rel !== undefined ? { rel: r.rel } : {}),
    ...(r.tol !== undefined ? { tolerance: r.tol.rel } : {}),
  }));
  const whole = diags.length === partsInTensor;
  const stacked = diags[0][0].part.expert !== undefined;
  // every expert holds the same-numbered expert of one other tensor: the whole tensor holds that tensor
  if (
    whole &&
    stacked &&
    diags.every(
      ([r, d]) =>
        d.kind === "holds-other" &&
        d.other!.part.tensor === diags[0][1].other!.part.tensor &&
        d.other!.part.expert === r.part.expert,
    )
  ) {
    const [r, d] = diags[0];
    const named = swapName(r, d.other!);
    const mistake = named ?? (d.reciprocal ? "swapped" : "copy");
    const how =
      named !== undefined
        ? SWAP_WORDS[named]
        : d.reciprocal
          ? "the two tensors are swapped"
          : "a copy of that tensor, or a wrong name map";
    return { tensor, mistake, message: `${tensor} holds the values of ${d.other!.part.tensor}: ${how}`, parts };
  }
  if (whole && diags.every(([, d]) => d.kind === diags[0][1].kind && d.kind !== "holds-other")) {
    const d = diags[0][1];
    return { tensor, mistake: d.kind, message: `${tensor}${stacked ? " (every expert)" : ""}: ${d.what}`, parts };
  }
  const phrases = diags.map(([r, d]) => {
    const who = stacked ? `expert ${r.part.expert}` : r.part.label;
    if (d.kind === "holds-other") {
      const named = swapName(r, d.other!);
      if (named === "experts-swapped")
        return {
          who,
          mistake: d.reciprocal ? "experts-swapped" : "expert-copy",
          text: `${who} holds expert ${d.other!.part.expert}'s values${d.reciprocal ? " (swapped)" : ""}`,
        };
      if (named !== undefined) return { who, mistake: named, text: `${who} ${d.what}: ${SWAP_WORDS[named]}` };
      return { who, mistake: d.reciprocal ? "swapped" : "copy", text: `${who} ${d.what}` };
    }
    if (d.kind === "zeroed" && stacked)
      return {
        who,
        mistake: "expert-zeroed",
        text: `${who} is all zeros (the source's expert ${r.part.expert} has values)`,
      };
    return { who, mistake: d.kind, text: `${who}: ${d.what}` };
  });
  const mistakes = new Set(phrases.map((x) => x.mistake));
  const mistake = mistakes.size === 1 ? phrases[0].mistake : "several";
  const text =
    phrases
      .slice(0, LIST)
      .map((x) => x.text)
      .join("; ") + (phrases.length > LIST ? `; … (${phrases.length} parts)` : "");
  return { tensor, mistake, message: stacked ? `${tensor}: ${text}` : text, parts };
}

/** Why the two models do not fit (memory, and for a checkpoint the temporary F32 GGUF on disk); undefined when they do. */
function logitsRoom(file: GGUFFile, parts: readonly GgufPart[], src: SourceModel): string | undefined {
  const ggufBytes = [...file.tensors.values()].reduce((a, t) => a + t.nbytes, 0);
  const f32Bytes = parts.reduce((a, p) => a + 4 * p.count, 0);
  const sourceBytes =
    src.gguf !== undefined ? [...src.gguf.tensors.values()].reduce((a, t) => a + t.nbytes, 0) : f32Bytes;
  const gb = (b: number): string => `${(b / 1e9).toFixed(1)} GB`;
  if (ggufBytes + sourceBytes > 0.7 * freemem())
    return `both models need ${gb(ggufBytes + sourceBytes)} of memory, ${gb(freemem())} free`;
  if (src.gguf === undefined) {
    const disk = statfsSync(tmpdir());
    const free = disk.bavail * disk.bsize;
    if (f32Bytes > 0.9 * free)
      return `the source model as a temporary F32 GGUF needs ${gb(f32Bytes)} in ${tmpdir()}, ${gb(free)} free`;
  }
  return undefined;
}

export interface SourceCheckOptions {
  readonly prompts: readonly LogitsPrompt[];
  /** false: the GGUF cannot be loaded as a model (blocking file errors), skip the logits */
  readonly loadable: boolean;
}

/** Open the source (throws SourceUnreadableError when it cannot be read at all). */
export function openSourceModel(path: string): SourceModel {
  return openSource(path);
}

export function checkSource(
  file: GGUFFile,
  config: ModelConfig,
  src: SourceModel,
  findings: Findings,
  opts: SourceCheckOptions,
): SourceReport {
  const { parts, unmapped } = ggufParts(file, config);
  const expected = new Expected(src, config);
  const results = parts.map((p): PartResult => {
    try {
      return comparePart(p, expected, src);
    } catch (e) {
      // one unreadable tensor (a missing FP8 scale, a type latent cannot decode) leaves the others comparable
      return {
        part: p,
        status: "unreadable-source",
        sources: [...p.hf],
        note: `cannot be read: ${e instanceof Error ? e.message : String(e)}`,
      };
    }
  });
  const used = new Set(results.flatMap((r) => (r.status === "no-source" ? [] : r.sources)));

  // per GGUF tensor
  const byTensor = new Map<string, PartResult[]>();
  for (const r of results) {
    if (!byTensor.has(r.part.tensor)) byTensor.set(r.part.tensor, []);
    byTensor.get(r.part.tensor)!.push(r);
  }
  const order: PartResult["status"][] = ["shape", "no-source", "unreadable-source", "mismatch", "match"];
  const tensors: SourceTensorSummary[] = [...byTensor].map(([tensor, rs]) => {
    const status = order.find((s) => rs.some((r) => r.status === s))!;
    const rels = rs.filter((r) => r.rel !== undefined);
    const worst = rels.reduce<PartResult | undefined>(
      (w, r) => (w === undefined || r.rel! / r.tol!.rel > w.rel! / w.tol!.rel ? r : w),
      undefined,
    );
    return {
      tensor,
      type: rs[0].part.typeName,
      ...(rs[0].sourceDtype !== undefined ? { sourceDtype: rs[0].sourceDtype } : {}),
      parts: rs.length,
      status,
      ...(worst !== undefined ? { rel: worst.rel!, tolerance: worst.tol!.rel } : {}),
    };
  });

  const mismatches: SourceMismatch[] = [];
  const ctx = { results, expected, config };
  let diagnosed = 0;
  let undiagnosed = 0;
  for (const [tensor, rs] of byTensor) {
    const bad = rs.filter((r) => r.status === "mismatch");
    if (bad.length === 0) continue;
    if (diagnosed >= MAX_DIAGNOSED) {
      undiagnosed++;
      findings.add(
        "source",
        "error",
        "source-differs",
        `${tensor} differs from the source (not diagnosed: ${MAX_DIAGNOSED} parts diagnosed already)`,
        { tensor },
      );
      continue;
    }
    diagnosed += bad.length;
    const m = summarizeMismatch(
      tensor,
      bad.map((r) => [r, diagnose(r, ctx)] as [PartResult, Diagnosis]),
      rs.length,
    );
    mismatches.push(m);
    findings.add("source", "error", `source-${m.mistake}`, m.message, {
      tensor,
      mistake: m.mistake,
      parts: m.parts.slice(0, LIST),
    });
  }

  const notCompared: { tensor: string; reason: string }[] = unmapped.map((t) => ({
    tensor: t,
    reason: "no Hugging Face name",
  }));
  for (const [tensor, rs] of byTensor) {
    const r = rs.find((x) => x.status === "shape" || x.status === "no-source" || x.status === "unreadable-source");
    if (r === undefined) continue;
    if (r.status === "shape")
      findings.add("source", "error", "source-shape", `${tensor}: ${r.note} (wrong shape, or the wrong tensor)`, {
        tensor,
        ne: r.part.ne,
        expectedNe: r.expectedNe,
      });
    else if (r.status === "no-source")
      findings.add("source", "error", "source-extra-tensor", `${tensor} is in the GGUF but ${r.note}`, {
        tensor,
        sources: r.sources,
      });
    else notCompared.push({ tensor, reason: r.note ?? "" });
  }
  // a tensor the source cannot give is evidence missing, worth a warning; one without a Hugging Face name is a note
  for (const t of notCompared)
    findings.add(
      "source",
      t.reason === "no Hugging Face name" ? "info" : "warning",
      "source-not-compared",
      `${t.tensor} not compared: ${t.reason}`,
      { tensor: t.tensor },
    );

  const skippedInSource: { name: string; reason: string }[] = src.auxiliary.map((n) => ({
    name: n,
    reason: n.endsWith("_scale_inv") ? "FP8 block scales (applied to their weight)" : "not a weight",
  }));
  const missingInGguf: string[] = [];
  for (const name of src.tensors.keys()) {
    if (used.has(name)) continue;
    const lm = LAYER.exec(name);
    if (lm !== null && Number(lm[1]) >= config.nLayer && config.arch === "deepseek2")
      skippedInSource.push({
        name,
        reason: `layer ${lm[1]} ≥ block_count ${config.nLayer}: an MTP layer, which llama.cpp's converter skips for deepseek2`,
      });
    else missingInGguf.push(name);
  }
  if (missingInGguf.length > 0)
    findings.add(
      "source",
      "error",
      "source-missing-tensor",
      `${missingInGguf.length} source tensor(s) have no counterpart in the GGUF: ${list(missingInGguf)}`,
      { missing: missingInGguf.slice(0, 64) },
    );
  if (src.unmapped.length > 0)
    findings.add(
      "source",
      "info",
      "source-not-compared",
      `source GGUF tensors with no Hugging Face name, not compared: ${list(src.unmapped)}`,
      { tensors: src.unmapped },
    );
  if (skippedInSource.some((s) => s.reason.includes("MTP")))
    findings.add(
      "source",
      "info",
      "source-mtp-skipped",
      `source layers past block_count not compared (MTP layers, not converted): ${list(skippedInSource.filter((s) => s.reason.includes("MTP")).map((s) => s.name))}`,
    );

  const compared = tensors.filter((t) => t.status === "match" || t.status === "mismatch").length;
  const matched = tensors.filter((t) => t.status === "match").length;
  findings.add(
    "source",
    "info",
    "source-compared",
    `${compared} of ${file.tensors.size} GGUF tensors compared with ${src.kind === "hf-dir" ? "the checkpoint" : "the source GGUF"} ${src.path} (${results.length} parts): ${matched} within quantization noise, ${compared - matched} not`,
    { compared, matched, tensors: file.tensors.size },
  );

  if (compared >= 4 && matched === 0)
    findings.add(
      "source",
      "error",
      "source-different-model",
      `no compared tensor matches the source: ${src.path} is probably another model or checkpoint${undiagnosed > 0 ? ` (${undiagnosed} tensors not diagnosed)` : ""}`,
      { compared },
    );

  let logits: LogitsComparison | undefined;
  const structural = tensors.some((t) => t.status === "shape" || t.status === "no-source") || missingInGguf.length > 0;
  const unreadable = tensors.some((t) => t.status === "unreadable-source");
  const room = logitsRoom(file, parts, src);
  if (!opts.loadable || structural || unreadable || room !== undefined) {
    const why = !opts.loadable
      ? "the GGUF cannot be loaded as a model"
      : structural
        ? "tensors are missing or misshapen on one side"
        : unreadable
          ? "some source tensors cannot be read"
          : room;
    findings.add("source", "info", "source-logits-skipped", `logits not compared: ${why}`);
  } else {
    const noise = Math.max(
      ...results
        .filter((r) => r.tol !== undefined)
        .map((r) => Math.hypot(ggufNoise(r.part.type).rel, expected.noise(r.part).rel)),
      0,
    );
    logits = compareLogits({
      file,
      config,
      parts,
      expected,
      ...(src.gguf !== undefined ? { sourceGguf: src.gguf } : {}),
      prompts: opts.prompts,
      noise,
    });
    const bad = logits.meanKL > logits.klTolerance || logits.top1Agreement < logits.top1Tolerance;
    findings.add(
      "source",
      bad ? "error" : "info",
      "source-logits",
      `logits vs the source's model over ${logits.positions} positions: mean KL ${logits.meanKL.toExponential(2)} nats (tolerance ${logits.klTolerance.toExponential(1)}), max ${logits.maxKL.toExponential(2)}, top-1 agreement ${(logits.top1Agreement * 100).toFixed(0)}% (tolerance ${(logits.top1Tolerance * 100).toFixed(0)}%)`,
      { meanKL: logits.meanKL, maxKL: logits.maxKL, top1Agreement: logits.top1Agreement },
    );
  }
  return {
    path: src.path,
    kind: src.kind,
    compared,
    matched,
    tensors,
    mismatches,
    notCompared,
    missingInGguf,
    skippedInSource,
    ...(logits !== undefined ? { logits } : {}),
  };
}
