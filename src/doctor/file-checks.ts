/**
 * File checks of `latent doctor`: required tensors for the architecture and GGUF generation, shapes against the
 * metadata, supported types, NaN/Inf and statistics of every weight (streamed tensor by tensor), metadata quirks,
 * and the GGUF ↔ HF name map round trip.
 */
import type { GGUFFile } from "../gguf/file.js";
import type { TensorInfo } from "../gguf/reader.js";
import { typeName } from "../gguf/types.js";
import { canDequantize, dequantizeRow, rowBytes } from "../quant/index.js";
import { parseConfig, yarnMscale, type ModelConfig } from "../model/config.js";
import { ggufToHf, hfToGguf } from "../convert/names.js";
import { checkAgainstKnownModels, checkContradictions } from "./metadata-checks.js";
import { misaligned, misalignmentCut, Q8ScaleCollector, type ScaleAlignment } from "./q8-scales.js";
import { Tokenizer } from "../tokenizer/index.js";
import { LatentError } from "../util/errors.js";
import { type Findings, FP16_MAX, noProgress, type Progress } from "./report.js";

/** Error codes of the weight scan that leave the file loadable: the compute checks still run after them. */
export const DATA_ERRORS: ReadonlySet<string> = new Set([
  "non-finite-weights",
  "all-zero-tensor",
  "zero-expert",
  "q8-scales-misaligned",
]);

export type TensorKind = "embedding" | "output" | "norm" | "router" | "bias" | "matrix";

export interface ExpectedTensor {
  readonly name: string;
  readonly ne: readonly number[];
  readonly kind: TensorKind;
  readonly optional: boolean;
}

export interface TensorStats {
  readonly name: string;
  readonly type: string;
  readonly ne: readonly number[];
  readonly kind: TensorKind | "unknown";
  readonly count: number;
  readonly nan: number;
  readonly inf: number;
  readonly mean: number;
  readonly std: number;
  readonly min: number;
  readonly max: number;
  readonly absMax: number;
  /** fraction of exact zeros */
  readonly zeros: number;
  /** rows (ne[0]-long) that are entirely zero */
  readonly zeroRows: number;
  /** stacked expert tensors (`*_exps`, ne [cols, rows, E]): the experts whose whole slice is zero */
  readonly zeroExperts?: readonly number[];
  /** Q8_0 tensors: how well each row's first/last block scale fits its own row vs the neighbours (q8-scales.ts) */
  readonly scaleAlignment?: ScaleAlignment;
}

export interface FileReport {
  readonly paths: readonly string[];
  readonly arch: string | undefined;
  readonly generation: "current" | "legacy" | "mixed" | "unknown";
  readonly tensorCount: number;
  readonly bytes: number;
  readonly types: Readonly<Record<string, number>>;
  readonly config: ModelConfig | undefined;
  readonly stats: readonly TensorStats[];
}

export function kindOf(name: string): TensorKind | "unknown" {
  if (name === "token_embd.weight" || name.endsWith("nextn.embed_tokens.weight")) return "embedding";
  if (name === "output.weight" || name.endsWith("shared_head_head.weight")) return "output";
  if (/norm\.weight$/.test(name)) return "norm";
  if (name.endsWith("ffn_gate_inp.weight")) return "router";
  if (name.endsWith(".bias")) return "bias";
  if (name.endsWith(".weight")) return "matrix";
  return "unknown";
}

/** Every tensor the config implies, with its ggml shape. */
export function expectedTensors(
  c: ModelConfig,
  generation: "current" | "legacy",
  tensorNames: ReadonlySet<string>,
): ExpectedTensor[] {
  const { nEmbd: Hd, nHead: H, qkNope: P, qkRope: R, vHead: V, kvLoraRank: L, qLoraRank: Lq } = c;
  const out: ExpectedTensor[] = [];
  const add = (name: string, ne: number[], optional = false): void => {
    out.push({ name, ne, kind: kindOf(name) as TensorKind, optional });
  };
  add("token_embd.weight", [Hd, c.nVocab]);
  add("output_norm.weight", [Hd]);
  add("output.weight", [Hd, c.nVocab], true);
  const total = c.nLayer + c.nNextn;
  for (let i = 0; i < total; i++) {
    const p = `blk.${i}.`;
    const mtp = i >= c.nLayer;
    add(p + "attn_norm.weight", [Hd], mtp);
    if (Lq > 0) {
      add(p + "attn_q_a.weight", [Hd, Lq], mtp);
      add(p + "attn_q_a_norm.weight", [Lq], mtp);
      add(p + "attn_q_b.weight", [Lq, H * (P + R)], mtp);
    } else add(p + "attn_q.weight", [Hd, H * (P + R)], mtp);
    add(p + "attn_kv_a_mqa.weight", [Hd, L + R], mtp);
    add(p + "attn_kv_a_norm.weight", [L], mtp);
    if (generation === "legacy") add(p + "attn_kv_b.weight", [L, H * (P + V)], mtp);
    else {
      add(p + "attn_k_b.weight", [P, L, H], mtp);
      add(p + "attn_v_b.weight", [L, V, H], mtp);
    }
    add(p + "attn_output.weight", [H * V, Hd], mtp);
    add(p + "ffn_norm.weight", [Hd], mtp);
    if (c.indexer !== undefined) {
      const { nHead: Hi, headDim: Di } = c.indexer;
      const opt = mtp || !tensorNames.has(p + "indexer.attn_k.weight");
      add(p + "indexer.attn_q_b.weight", [Lq, Hi * Di], opt);
      add(p + "indexer.attn_k.weight", [Hd, Di], opt);
      add(p + "indexer.k_norm.weight", [Di], opt);
      add(p + "indexer.k_norm.bias", [Di], opt);
      add(p + "indexer.proj.weight", [Hd, Hi], opt);
    }
    if (i < c.nLeadingDense || c.nExpert === 0) {
      add(p + "ffn_gate.weight", [Hd, c.nFF], mtp);
      add(p + "ffn_up.weight", [Hd, c.nFF], mtp);
      add(p + "ffn_down.weight", [c.nFF, Hd], mtp);
    } else {
      const E = c.nExpert;
      const Fe = c.nFFExp;
      add(p + "ffn_gate_inp.weight", [Hd, E], mtp);
      add(p + "exp_probs_b.bias", [E], true);
      const fused = tensorNames.has(p + "ffn_gate_up_exps.weight");
      if (fused) add(p + "ffn_gate_up_exps.weight", [Hd, 2 * Fe, E], mtp);
      else {
        add(p + "ffn_gate_exps.weight", [Hd, Fe, E], mtp);
        add(p + "ffn_up_exps.weight", [Hd, Fe, E], mtp);
      }
      add(p + "ffn_down_exps.weight", [Fe, Hd, E], mtp);
      if (c.nExpertShared > 0) {
        add(p + "ffn_gate_shexp.weight", [Hd, Fe * c.nExpertShared], mtp);
        add(p + "ffn_up_shexp.weight", [Hd, Fe * c.nExpertShared], mtp);
        add(p + "ffn_down_shexp.weight", [Fe * c.nExpertShared, Hd], mtp);
      }
    }
    if (mtp) {
      add(p + "nextn.eh_proj.weight", [2 * Hd, Hd], true);
      add(p + "nextn.enorm.weight", [Hd], true);
      add(p + "nextn.hnorm.weight", [Hd], true);
      add(p + "nextn.embed_tokens.weight", [Hd, c.nVocab], true);
      add(p + "nextn.shared_head_head.weight", [Hd, c.nVocab], true);
      add(p + "nextn.shared_head_norm.weight", [Hd], true);
    }
  }
  return out;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if ((a[i] ?? 1) !== (b[i] ?? 1)) return false;
  return true;
}

const HF_NAME = /^(model\.|lm_head\.)/;

export interface FileCheckOptions {
  /** skip the NaN/Inf and statistics scan of the tensor data */
  readonly skipData?: boolean;
  readonly progress?: Progress;
}

/** Stream one tensor's values (rows at a time, ≤ ~8 MB per read) and gather statistics. */
export function tensorStats(
  file: GGUFFile,
  info: TensorInfo,
  kind: TensorKind | "unknown",
  onBytes?: (n: number) => void,
): TensorStats {
  const cols = info.ne[0] ?? 1;
  const rows = info.ne.slice(1).reduce((a, b) => a * b, 1);
  const rb = rowBytes(info.type, cols, info.name);
  const rowsPerRead = Math.max(1, Math.floor((8 << 20) / Math.max(1, rb)));
  const buf = new Float32Array(cols);
  let nan = 0;
  let inf = 0;
  let sum = 0;
  let sq = 0;
  let min = Infinity;
  let max = -Infinity;
  let zeros = 0;
  let zeroRows = 0;
  let finite = 0;
  // Stacked experts: a slice of ne[1] rows per expert; count its all-zero rows.
  const perExpert = info.ne.length === 3 && /_exps\.weight$/.test(info.name) ? info.ne[1] : 0;
  const expertZeroRows = perExpert > 0 ? new Int32Array(info.ne[2]) : undefined;
  const scales = Q8ScaleCollector.applies(info.type, cols, rows) ? new Q8ScaleCollector(cols / 32, rows) : undefined;
  for (let r0 = 0; r0 < rows; r0 += rowsPerRead) {
    const nr = Math.min(rowsPerRead, rows - r0);
    const bytes = file.readBytes(info, r0 * rb, nr * rb);
    scales?.add(bytes, r0, nr);
    for (let r = 0; r < nr; r++) {
      dequantizeRow(info.type, bytes, r * rb, buf, 0, cols, info.name);
      let rowZero = true;
      for (let i = 0; i < cols; i++) {
        const v = buf[i];
        if (Number.isNaN(v)) nan++;
        else if (v === Infinity || v === -Infinity) inf++;
        else {
          finite++;
          sum += v;
          sq += v * v;
          if (v < min) min = v;
          if (v > max) max = v;
          if (v === 0) zeros++;
          else rowZero = false;
        }
      }
      if (rowZero) {
        zeroRows++;
        if (expertZeroRows !== undefined) expertZeroRows[Math.floor((r0 + r) / perExpert)]++;
      }
    }
    onBytes?.(nr * rb);
  }
  const count = rows * cols;
  const mean = finite > 0 ? sum / finite : NaN;
  const std = finite > 0 ? Math.sqrt(Math.max(0, sq / finite - mean * mean)) : NaN;
  return {
    name: info.name,
    type: typeName(info.type),
    ne: info.ne,
    kind,
    count,
    nan,
    inf,
    mean,
    std,
    min: finite > 0 ? min : NaN,
    max: finite > 0 ? max : NaN,
    absMax: finite > 0 ? Math.max(Math.abs(min), Math.abs(max)) : NaN,
    zeros: count > 0 ? zeros / count : 0,
    zeroRows,
    ...(scales !== undefined ? { scaleAlignment: scales.result() } : {}),
    ...(expertZeroRows !== undefined
      ? { zeroExperts: [...expertZeroRows.keys()].filter((e) => expertZeroRows[e] === perExpert) }
      : {}),
  };
}

function fmt(x: number): string {
  return Number.isFinite(x)
    ? Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0)
      ? x.toExponential(3)
      : x.toFixed(4)
    : String(x);
}

/** Flag statistics against what a trained (or well-formed random) model looks like. Lenient: only clear defects are errors. */
function judgeStats(s: TensorStats, f: Findings): void {
  const where = `tensor "${s.name}" (${s.type} ${s.ne.join("x")})`;
  if (s.nan > 0 || s.inf > 0) {
    f.add(
      "tensors",
      "error",
      "non-finite-weights",
      `${where} holds ${s.nan} NaN and ${s.inf} ±Inf values: every output that touches it is garbage (corrupt download, bad conversion, or an fp16 overflow at quantization)`,
      { tensor: s.name, nan: s.nan, inf: s.inf },
    );
    return;
  }
  if (s.count > 0 && s.zeros === 1) {
    f.add(
      "tensors",
      "error",
      "all-zero-tensor",
      `${where} is all zeros: it was never written (a conversion step dropped it)`,
      { tensor: s.name },
    );
    return;
  }
  const side = s.scaleAlignment !== undefined ? misaligned(s.scaleAlignment) : undefined;
  if (side !== undefined) {
    const a = s.scaleAlignment!;
    const [own, other] = side === "next" ? [a.lastOwn, a.lastNext] : [a.firstOwn, a.firstPrev];
    f.add(
      "tensors",
      "error",
      "q8-scales-misaligned",
      `${where}: the Q8_0 block scales sit one block off — each row's ${side === "next" ? "last" : "first"} block scale fits the ${side} row (correlation ${other.toFixed(3)}) better than its own (${own.toFixed(3)}; cut ${misalignmentCut(a.rows).toFixed(3)} over ${a.rows} rows): the quantizer or a repacker wrote the scale array shifted by one block`,
      { tensor: s.name, side, own, other, rows: a.rows },
    );
  }
  const zeroExperts = s.zeroExperts ?? [];
  if (zeroExperts.length > 0) {
    const layer = /^blk\.(\d+)\./.exec(s.name)?.[1];
    f.add(
      "tensors",
      "error",
      "zero-expert",
      `${where}: expert${zeroExperts.length > 1 ? "s" : ""} ${zeroExperts.join(", ")} of layer ${layer ?? "?"} ${zeroExperts.length > 1 ? "are" : "is"} all zeros while the other experts are not: the router still sends tokens there and they get a zero (or constant) output — a conversion or merge step dropped ${zeroExperts.length > 1 ? "them" : "it"}`,
      { tensor: s.name, layer: layer === undefined ? undefined : Number(layer), experts: zeroExperts },
    );
  }
  if (s.kind === "norm") {
    if (s.mean <= 0)
      f.add(
        "tensors",
        "error",
        "norm-nonpositive",
        `norm weight ${where} has mean ${fmt(s.mean)} ≤ 0: RMSNorm gains of a working model are positive (stored as w−1 or sign-flipped?)`,
        { tensor: s.name, mean: s.mean },
      );
    else if (s.mean < 1e-3 || s.mean > 1e3)
      f.add("tensors", "warning", "norm-scale", `norm weight ${where} has mean ${fmt(s.mean)}, far from ~1`, {
        tensor: s.name,
        mean: s.mean,
        std: s.std,
      });
  } else if (s.kind === "router") {
    if (!(s.std > 0))
      f.add(
        "tensors",
        "error",
        "router-constant",
        `router ${where} is constant (std 0): every expert scores the same`,
        { tensor: s.name },
      );
  } else if (s.kind === "embedding") {
    const rows = s.ne[1] ?? 1;
    if (s.zeroRows > rows / 2)
      f.add("tensors", "error", "embedding-zero-rows", `${where}: ${s.zeroRows} of ${rows} token rows are all zero`, {
        tensor: s.name,
        zeroRows: s.zeroRows,
      });
    else if (s.zeroRows > 0)
      f.add(
        "tensors",
        "info",
        "embedding-zero-rows",
        `${where}: ${s.zeroRows} of ${rows} token rows are all zero (unused/padding tokens are normal)`,
        { tensor: s.name, zeroRows: s.zeroRows },
      );
  } else if (s.kind === "matrix" || s.kind === "output") {
    if (!(s.std > 0))
      f.add("tensors", "warning", "constant-matrix", `${where} is constant (${fmt(s.mean)})`, { tensor: s.name });
  }
  if (s.absMax > FP16_MAX)
    f.add(
      "tensors",
      "warning",
      "fp16-range",
      `${where} holds values up to ${fmt(s.absMax)}, beyond fp16 (±65504): a backend that runs this in fp16 overflows`,
      { tensor: s.name, absMax: s.absMax },
    );
}

/** Check the file: structure, shapes, types, data, metadata quirks, name map. */
export function checkFile(file: GGUFFile, findings: Findings, opts: FileCheckOptions = {}): FileReport {
  const progress = opts.progress ?? noProgress;
  const meta = file.metadata;
  const names = new Set(file.tensors.keys());
  const types: Record<string, number> = {};
  let bytes = 0;
  for (const t of file.tensors.values()) {
    types[typeName(t.type)] = (types[typeName(t.type)] ?? 0) + 1;
    bytes += t.nbytes;
  }
  const arch = meta.string("general.architecture");
  const hasKB = [...names].some((n) => n.endsWith(".attn_k_b.weight"));
  const hasKVB = [...names].some((n) => n.endsWith(".attn_kv_b.weight"));
  const generation = hasKB && hasKVB ? "mixed" : hasKB ? "current" : hasKVB ? "legacy" : "unknown";
  const base = { paths: file.paths, arch, generation, tensorCount: names.size, bytes, types } as const;

  // Names: Hugging Face names in a GGUF mean the map ran the wrong way.
  const hfNamed = [...names].filter((n) => HF_NAME.test(n));
  if (hfNamed.length > 0) {
    const back = hfToGguf(hfNamed[0], "current");
    findings.add(
      "names",
      "error",
      "hf-names-in-gguf",
      `${hfNamed.length} of ${names.size} tensors carry Hugging Face names (e.g. "${hfNamed[0]}"${back ? ` — the GGUF name is "${back.gguf[0]}"` : ""}): the GGUF↔HF name map was applied in the wrong direction when the file was written`,
      { count: hfNamed.length, examples: hfNamed.slice(0, 5) },
    );
  }

  let config: ModelConfig | undefined;
  try {
    config = parseConfig(meta, file.tensors.get("token_embd.weight")?.ne[1]);
  } catch (e) {
    if (!(e instanceof LatentError)) throw e;
    findings.add("metadata", "error", "config", `metadata cannot be read as a ${arch ?? "?"} model: ${e.message}`);
  }
  if (generation === "mixed")
    findings.add(
      "tensors",
      "error",
      "mixed-generation",
      "the file holds both attn_kv_b (legacy) and attn_k_b/attn_v_b (current) tensors",
    );
  if (config === undefined) return { ...base, config, stats: [] };

  checkMetadata(file, config, generation, findings);
  checkContradictions(file, config, findings);
  checkAgainstKnownModels(file, config, findings);

  // Required tensors and shapes.
  const gen = generation === "legacy" ? "legacy" : "current";
  const expected = expectedTensors(config, gen, names);
  const expectedNames = new Set(expected.map((e) => e.name));
  const missing: string[] = [];
  for (const e of expected) {
    const info = file.tensors.get(e.name);
    if (info === undefined) {
      if (!e.optional) missing.push(`${e.name} {${e.ne.join(",")}}`);
      continue;
    }
    if (!sameShape(info.ne, e.ne)) {
      findings.add(
        "tensors",
        "error",
        "shape-mismatch",
        `tensor "${e.name}" has shape {${info.ne.join(",")}}, the metadata implies {${e.ne.join(",")}}`,
        { tensor: e.name, got: info.ne, expected: e.ne },
      );
    }
  }
  if (missing.length > 0) {
    findings.add(
      "tensors",
      "error",
      "missing-tensors",
      `${missing.length} tensor(s) required for ${config.arch} (${gen} generation) are missing: ${missing.slice(0, 6).join(", ")}${missing.length > 6 ? ", …" : ""}`,
      { missing },
    );
  }
  const unexpected = [...names].filter((n) => !expectedNames.has(n) && !HF_NAME.test(n));
  if (unexpected.length > 0) {
    findings.add(
      "tensors",
      "warning",
      "unexpected-tensors",
      `${unexpected.length} tensor(s) are not used by ${config.arch}: ${unexpected.slice(0, 6).join(", ")}${unexpected.length > 6 ? ", …" : ""}`,
      { unexpected },
    );
  }
  for (const info of file.tensors.values()) {
    if (!canDequantize(info.type))
      findings.add(
        "tensors",
        "error",
        "unsupported-type",
        `tensor "${info.name}" has type ${typeName(info.type)} (id ${info.type}), which latent cannot decode`,
        { tensor: info.name, type: info.type },
      );
  }

  checkNameMap(file, config, gen, findings);

  // Data: NaN/Inf and statistics, streamed.
  const stats: TensorStats[] = [];
  if (opts.skipData !== true) {
    let done = 0;
    progress.start("scanning weights", bytes);
    try {
      for (const info of file.tensors.values()) {
        if (!canDequantize(info.type)) continue;
        const s = tensorStats(file, info, kindOf(info.name), (n) => progress.update((done += n)));
        stats.push(s);
        judgeStats(s, findings);
      }
    } finally {
      progress.stop();
    }
  }
  return { ...base, config, stats };
}

function checkMetadata(file: GGUFFile, c: ModelConfig, generation: string, f: Findings): void {
  const meta = file.metadata;
  const a = c.arch;
  const hasBias = [...file.tensors.keys()].some((n) => n.endsWith("exp_probs_b.bias"));
  const hasMoe = c.nExpert > 0 && c.nLeadingDense < c.nLayer;

  // Gating function.
  if (hasMoe) {
    if (c.gatingSource === "default-softmax" && hasBias) {
      f.add(
        "metadata",
        "error",
        "gating-missing-with-bias",
        `${a}.expert_gating_func is missing, so the router runs softmax (llama.cpp's default), but the file has exp_probs_b (e_score_correction_bias): this is a sigmoid/noaux_tc model (DeepSeek-V3, Kimi-K2, GLM-4.7-Flash) — softmax gating gives looping, poor output (llama.cpp PR #18980). Set ${a}.expert_gating_func = 2`,
        { gating: c.gating, source: c.gatingSource },
      );
    } else if (c.gatingSource === "default-softmax") {
      f.add(
        "metadata",
        "warning",
        "gating-missing",
        `${a}.expert_gating_func is missing: softmax assumed, right for DeepSeek-V2/V2-Lite only`,
        { gating: c.gating },
      );
    } else if (c.gatingSource === "glm47-flash-heuristic") {
      f.add(
        "metadata",
        "warning",
        "gating-missing-glm47",
        `${a}.expert_gating_func is missing; sigmoid inferred from the GLM-4.7-Flash shape (47/48 layers, 154880 vocab). Older llama.cpp builds run this file with softmax (looping output): re-convert`,
        { gating: c.gating },
      );
    }
  }

  // GGUF generation vs metadata.
  const keyMla = meta.has(`${a}.attention.key_length_mla`);
  const hkv = meta.integer(`${a}.attention.head_count_kv`);
  if (generation === "legacy") {
    f.add(
      "metadata",
      "warning",
      "legacy-kv-b",
      `legacy GGUF generation (attn_kv_b, converted before llama.cpp PR #12801): current llama.cpp runs it without the MLA latent cache; tools that need attn_k_b/attn_v_b fail`,
      { generation },
    );
  } else if (generation === "current") {
    if (!keyMla)
      f.add(
        "metadata",
        "error",
        "split-without-mla-keys",
        `attn_k_b/attn_v_b are present but ${a}.attention.key_length_mla is not: a pre-upstream (PR #11446-era) file that llama.cpp reads with wrong head sizes`,
      );
    if (hkv !== undefined && hkv !== 1)
      f.add(
        "metadata",
        "warning",
        "head-count-kv",
        `${a}.attention.head_count_kv = ${hkv}; MLA files (attn_k_b/attn_v_b) use 1`,
      );
  }

  // YaRN keys.
  if (c.yarn !== undefined) {
    const betaMissing = !meta.has(`${a}.rope.scaling.yarn_beta_fast`) || !meta.has(`${a}.rope.scaling.yarn_beta_slow`);
    if (betaMissing) {
      const kimi = c.nVocab === 163840 || meta.string("tokenizer.ggml.pre") === "kimi-k2";
      f.add(
        "metadata",
        kimi ? "warning" : "info",
        "yarn-beta-missing",
        `${a}.rope.scaling.yarn_beta_fast/slow are absent: 32/1 are assumed (llama.cpp's defaults)${kimi ? "; Kimi-K2 is trained with beta_fast = beta_slow = 1 — re-convert with a newer converter" : ""}`,
        { betaFast: c.yarn.betaFast, betaSlow: c.yarn.betaSlow },
      );
    }
    const logMul = meta.number(`${a}.rope.scaling.yarn_log_multiplier`);
    if (a === "glm-dsa" && logMul !== undefined) {
      const hf = yarnMscale(c.yarn.factor, logMul / 0.1) ** 2;
      const lc = yarnMscale(c.yarn.factor, 1) ** 2;
      f.add(
        "metadata",
        Math.abs(hf / lc - 1) > 1e-6 ? "warning" : "info",
        "glm-dsa-log-multiplier-ignored",
        `${a}.rope.scaling.yarn_log_multiplier = ${fmt(logMul)} is ignored by llama.cpp (and latent, which follows it): softmax scale uses mscale² = ${fmt(lc)}; HF semantics (mscale_all_dim = ${fmt(logMul / 0.1)}) would give ${fmt(hf)}`,
        { logMultiplier: logMul, llamaCpp: lc, hf },
      );
    }
    if (a === "deepseek2" && logMul === undefined)
      f.add(
        "metadata",
        "info",
        "yarn-log-multiplier-missing",
        `YaRN without ${a}.rope.scaling.yarn_log_multiplier: softmax scale not raised by mscale²`,
      );
  }

  // Tokenizer: vocabulary vs logits, BOS ids, BOS twice with the chat template.
  const tokens = meta.stringArray("tokenizer.ggml.tokens");
  if (tokens !== undefined && tokens.length > c.nVocab) {
    f.add(
      "metadata",
      "error",
      "vocab-larger-than-logits",
      `the tokenizer has ${tokens.length} tokens, the model ${c.nVocab} logits: ids ≥ ${c.nVocab} cannot be embedded`,
    );
  }
  for (const key of ["bos", "eos", "eot", "eom"]) {
    const id = meta.integer(`tokenizer.ggml.${key}_token_id`);
    if (id !== undefined && id >= c.nVocab)
      f.add(
        "metadata",
        "error",
        "special-token-range",
        `tokenizer.ggml.${key}_token_id = ${id} is outside the vocabulary (${c.nVocab})`,
      );
  }
  if (tokens !== undefined) {
    try {
      const tok = Tokenizer.fromMetadata(meta);
      if (tok.chatTemplate !== undefined && tok.addBos && tok.bosId !== undefined) {
        const rendered = tok.renderChat([{ role: "user", content: "hi" }], { addGenerationPrompt: true });
        const naive = tok.encode(rendered, { addSpecial: true, parseSpecial: true });
        if (naive.length >= 2 && naive[0] === tok.bosId && naive[1] === tok.bosId) {
          f.add(
            "metadata",
            "info",
            "double-bos",
            `the chat template emits BOS itself and tokenizer.ggml.add_bos_token = true: a client that tokenizes the rendered template with special tokens added gets BOS twice (llama.cpp warns; latent skips the second). Servers should render with add_special_tokens = false`,
            { bos: tok.bosId },
          );
        }
      }
    } catch (e) {
      if (!(e instanceof LatentError) && !(e instanceof Error)) throw e;
      f.add("metadata", "warning", "tokenizer", `the tokenizer cannot be built: ${(e as Error).message}`);
    }
  }
}

/** GGUF → HF → GGUF for every tensor name. */
function checkNameMap(file: GGUFFile, c: ModelConfig, generation: "current" | "legacy", f: Findings): void {
  const broken: string[] = [];
  const unknown: string[] = [];
  for (const name of file.tensors.keys()) {
    if (HF_NAME.test(name)) continue;
    const hf = ggufToHf(name, c.nExpert);
    if (hf === undefined) {
      unknown.push(name);
      continue;
    }
    const ok = hf.every((h) => hfToGguf(h, generation)?.gguf.includes(name) === true);
    if (!ok) broken.push(`${name} → ${hf[0]}`);
  }
  if (broken.length > 0)
    f.add(
      "names",
      "error",
      "name-map-round-trip",
      `the GGUF↔HF name map does not round-trip for ${broken.length} tensor(s): ${broken.slice(0, 4).join(", ")}`,
      { broken },
    );
  if (unknown.length > 0)
    f.add(
      "names",
      "info",
      "no-hf-name",
      `${unknown.length} tensor(s) have no Hugging Face name: ${unknown.slice(0, 4).join(", ")}`,
      { unknown },
    );
}
