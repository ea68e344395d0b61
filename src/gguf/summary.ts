/**
 * A model summary for `latent inspect` and anything else that wants one: architecture, sizes per quant type,
 * hyper-parameters, tokenizer, shards and (optionally) every tensor. `summarizeModel` builds the JSON-ready object
 * (format "latent-inspect/1", documented in docs/inspect-json.md); `formatSummary` renders it as text.
 *
 * Never throws on odd metadata: a value of the wrong type becomes null plus an entry in `warnings`.
 */
import { printable } from "../util/printable.js";
import { GGUFError } from "../util/errors.js";
import type { GGUFFile } from "./file.js";
import { isGGUFArray } from "./metadata.js";
import { GGUFValueType, typeName, type GGUFValue } from "./types.js";

export const INSPECT_FORMAT = "latent-inspect/1";

/** llama.cpp's `llama_ftype` (gguf-py LlamaFileType), the value of general.file_type. */
const FILE_TYPES: readonly (string | undefined)[] = [
  "ALL_F32",
  "MOSTLY_F16",
  "MOSTLY_Q4_0",
  "MOSTLY_Q4_1",
  "MOSTLY_Q4_1_SOME_F16",
  "MOSTLY_Q4_2",
  "MOSTLY_Q4_3",
  "MOSTLY_Q8_0",
  "MOSTLY_Q5_0",
  "MOSTLY_Q5_1",
  "MOSTLY_Q2_K",
  "MOSTLY_Q3_K_S",
  "MOSTLY_Q3_K_M",
  "MOSTLY_Q3_K_L",
  "MOSTLY_Q4_K_S",
  "MOSTLY_Q4_K_M",
  "MOSTLY_Q5_K_S",
  "MOSTLY_Q5_K_M",
  "MOSTLY_Q6_K",
  "MOSTLY_IQ2_XXS",
  "MOSTLY_IQ2_XS",
  "MOSTLY_Q2_K_S",
  "MOSTLY_IQ3_XS",
  "MOSTLY_IQ3_XXS",
  "MOSTLY_IQ1_S",
  "MOSTLY_IQ4_NL",
  "MOSTLY_IQ3_S",
  "MOSTLY_IQ3_M",
  "MOSTLY_IQ2_S",
  "MOSTLY_IQ2_M",
  "MOSTLY_IQ4_XS",
  "MOSTLY_IQ1_M",
  "MOSTLY_BF16",
  "MOSTLY_Q4_0_4_4",
  "MOSTLY_Q4_0_4_8",
  "MOSTLY_Q4_0_8_8",
  "MOSTLY_TQ1_0",
  "MOSTLY_TQ2_0",
  "MOSTLY_MXFP4_MOE",
];

export function fileTypeName(id: number): string {
  if (id === 1024) return "GUESSED";
  return (Number.isInteger(id) && id >= 0 ? FILE_TYPES[id] : undefined) ?? `unknown(${id})`;
}

/**
 * Architecture keys in display order (without the `<arch>.` prefix). Keys not listed here that the file has under
 * `<arch>.` follow in file order.
 */
export const HYPERPARAMETER_ORDER: readonly string[] = [
  "context_length",
  "embedding_length",
  "block_count",
  "leading_dense_block_count",
  "nextn_predict_layers",
  "feed_forward_length",
  "expert_feed_forward_length",
  "vocab_size",
  "attention.head_count",
  "attention.head_count_kv",
  "attention.q_lora_rank",
  "attention.kv_lora_rank",
  "attention.key_length",
  "attention.value_length",
  "attention.key_length_mla",
  "attention.value_length_mla",
  "attention.layer_norm_rms_epsilon",
  "rope.dimension_count",
  "rope.freq_base",
  "rope.scaling.type",
  "rope.scaling.factor",
  "rope.scaling.original_context_length",
  "rope.scaling.yarn_log_multiplier",
  "rope.scaling.yarn_beta_fast",
  "rope.scaling.yarn_beta_slow",
  "expert_count",
  "expert_used_count",
  "expert_shared_count",
  "expert_group_count",
  "expert_group_used_count",
  "expert_gating_func",
  "expert_weights_norm",
  "expert_weights_scale",
  "attention.indexer.head_count",
  "attention.indexer.key_length",
  "attention.indexer.top_k",
  "attention.indexer.types",
];

const GATING: Record<number, string> = { 0: "none", 1: "softmax", 2: "sigmoid" };

/** A metadata value as JSON: bigints become numbers when safe (else decimal strings); long arrays become a description. */
export type JsonValue = number | string | boolean | null | JsonValue[] | { array: string; length: number };

/** Arrays longer than this are summarized as `{ array, length }` rather than listed. */
const MAX_LISTED_ARRAY = 64;

function jsonValue(v: GGUFValue): JsonValue {
  if (typeof v === "bigint")
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
  if (typeof v === "number") return Number.isFinite(v) ? v : String(v);
  if (isGGUFArray(v)) {
    if (v.values.length > MAX_LISTED_ARRAY || v.elementType === GGUFValueType.STRING) {
      return { array: GGUFValueType[v.elementType] ?? String(v.elementType), length: v.values.length };
    }
    return Array.from(v.values as ArrayLike<GGUFValue>, jsonValue);
  }
  return v;
}

export interface TypeSummary {
  readonly type: string;
  readonly tensors: number;
  readonly parameters: number;
  readonly bytes: number;
}

export interface ShardSummary {
  readonly index: number;
  readonly path: string;
  readonly size_bytes: number;
  readonly tensor_count: number;
  readonly tensor_bytes: number;
  readonly metadata_count: number;
}

export interface TensorSummary {
  readonly name: string;
  readonly type: string;
  /** ggml ne order: shape[0] is the contiguous dimension */
  readonly shape: number[];
  readonly parameters: number;
  readonly bytes: number;
  /** 0-based index into `shards` */
  readonly shard: number;
  /** absolute byte offset in the shard file */
  readonly offset: number;
  /** only when a GGUF→HF name mapper was given (`--hf-names`): the HF tensor(s) it holds; null when unknown */
  readonly hf_names?: string[] | null;
}

export interface TokenizerSummary {
  readonly model: string | null;
  readonly pre: string | null;
  readonly vocab_size: number | null;
  readonly merges: number | null;
  readonly bos_token_id: number | null;
  readonly eos_token_id: number | null;
  readonly eot_token_id: number | null;
  readonly padding_token_id: number | null;
  readonly add_bos_token: boolean | null;
  readonly add_eos_token: boolean | null;
  readonly has_chat_template: boolean;
}

export interface InspectSummary {
  readonly format: typeof INSPECT_FORMAT;
  readonly path: string;
  readonly gguf_version: number;
  readonly architecture: string | null;
  readonly name: string | null;
  readonly file_type: { readonly id: number; readonly name: string } | null;
  readonly quantization_version: number | null;
  readonly parameters: number;
  readonly size_bytes: number;
  readonly tensor_count: number;
  readonly tensor_bytes: number;
  readonly types: TypeSummary[];
  readonly hyperparameters: Record<string, JsonValue>;
  readonly tokenizer: TokenizerSummary;
  readonly general: Record<string, JsonValue>;
  readonly metadata_count: number;
  readonly shards: ShardSummary[];
  readonly tensors?: TensorSummary[];
  readonly warnings: string[];
}

export interface SummaryOptions {
  /** list every tensor */
  readonly tensors?: boolean;
  /** GGUF tensor name → HF name(s) (hook for `inspect --hf-names`); adds `hf_names` to each tensor entry */
  readonly hfNames?: (ggufName: string) => readonly string[] | undefined;
  /** path to report (defaults to the first shard's path) */
  readonly path?: string;
}

export function summarizeModel(file: GGUFFile, opts: SummaryOptions = {}): InspectSummary {
  const warnings: string[] = [];
  const meta = file.metadata;
  // Lenient accessors: the wrong type is a warning, not an error.
  const lenient = <T>(_key: string, get: () => T | undefined): T | null => {
    try {
      return get() ?? null;
    } catch (e) {
      if (e instanceof GGUFError) {
        warnings.push(e.message);
        return null;
      }
      throw e;
    }
  };
  const str = (key: string): string | null => lenient(key, () => meta.string(key));
  const int = (key: string): number | null => lenient(key, () => meta.integer(key));
  const bool = (key: string): boolean | null => lenient(key, () => meta.bool(key));
  const arrayLength = (key: string): number | null => lenient(key, () => meta.array(key)?.values.length);

  const architecture = str("general.architecture");
  const fileTypeId = int("general.file_type");

  const byType = new Map<number, { tensors: number; parameters: number; bytes: number }>();
  let parameters = 0;
  let tensorBytes = 0;
  const tensors: TensorSummary[] = [];
  for (const t of file.tensors.values()) {
    const n = t.ne.reduce((a, b) => a * b, 1);
    parameters += n;
    tensorBytes += t.nbytes;
    const s = byType.get(t.type) ?? { tensors: 0, parameters: 0, bytes: 0 };
    s.tensors++;
    s.parameters += n;
    s.bytes += t.nbytes;
    byType.set(t.type, s);
    if (opts.tensors === true) {
      const entry: TensorSummary = {
        name: t.name,
        type: typeName(t.type),
        shape: [...t.ne],
        parameters: n,
        bytes: t.nbytes,
        shard: t.shard,
        offset: t.offset,
      };
      if (opts.hfNames === undefined) tensors.push(entry);
      else {
        const hf = opts.hfNames(t.name);
        tensors.push({ ...entry, hf_names: hf === undefined ? null : [...hf] });
      }
    }
  }
  const types: TypeSummary[] = [...byType.entries()]
    .sort((a, b) => b[1].bytes - a[1].bytes || a[0] - b[0])
    .map(([type, s]) => ({ type: typeName(type), ...s }));

  const hyperparameters: Record<string, JsonValue> = {};
  if (architecture !== null) {
    const prefix = `${architecture}.`;
    const archKeys = meta
      .keys()
      .filter((k) => k.startsWith(prefix))
      .map((k) => k.slice(prefix.length));
    const present = new Set(archKeys);
    for (const k of [
      ...HYPERPARAMETER_ORDER.filter((k) => present.has(k)),
      ...archKeys.filter((k) => !HYPERPARAMETER_ORDER.includes(k)),
    ]) {
      hyperparameters[k] = jsonValue(meta.raw(prefix + k)!);
    }
  }

  const general: Record<string, JsonValue> = {};
  for (const k of meta.keys())
    if (k.startsWith("general.")) general[k.slice("general.".length)] = jsonValue(meta.raw(k)!);

  const tokenizer: TokenizerSummary = {
    model: str("tokenizer.ggml.model"),
    pre: str("tokenizer.ggml.pre"),
    vocab_size: arrayLength("tokenizer.ggml.tokens"),
    merges: arrayLength("tokenizer.ggml.merges"),
    bos_token_id: int("tokenizer.ggml.bos_token_id"),
    eos_token_id: int("tokenizer.ggml.eos_token_id"),
    eot_token_id: int("tokenizer.ggml.eot_token_id"),
    padding_token_id: int("tokenizer.ggml.padding_token_id"),
    add_bos_token: bool("tokenizer.ggml.add_bos_token"),
    add_eos_token: bool("tokenizer.ggml.add_eos_token"),
    has_chat_template: meta.has("tokenizer.chat_template"),
  };

  const shards: ShardSummary[] = file.shards.map((s, i) => {
    let bytes = 0;
    for (const t of s.tensors) bytes += t.nbytes;
    return {
      index: i,
      path: s.path,
      size_bytes: s.fileSize,
      tensor_count: s.tensors.length,
      tensor_bytes: bytes,
      metadata_count: s.metadata.size,
    };
  });

  const summary: InspectSummary = {
    format: INSPECT_FORMAT,
    path: opts.path ?? file.shards[0].path,
    gguf_version: file.shards[0].version,
    architecture,
    name: str("general.name"),
    file_type: fileTypeId === null ? null : { id: fileTypeId, name: fileTypeName(fileTypeId) },
    quantization_version: int("general.quantization_version"),
    parameters,
    size_bytes: file.shards.reduce((a, s) => a + s.fileSize, 0),
    tensor_count: file.tensors.size,
    tensor_bytes: tensorBytes,
    types,
    hyperparameters,
    tokenizer,
    general,
    metadata_count: meta.keys().length,
    shards,
    warnings,
  };
  return opts.tensors === true ? { ...summary, tensors } : summary;
}

// ---- text rendering ----

/** 1234567 → "1.23 M"; small counts stay exact. */
export function humanCount(n: number): string {
  if (n < 1e4) return String(n);
  for (const [v, s] of [
    [1e12, "T"],
    [1e9, "B"],
    [1e6, "M"],
    [1e3, "K"],
  ] as const)
    if (n >= v) return `${(n / v).toFixed(2)} ${s}`;
  return String(n);
}

/** Bytes in binary units: 2916480 → "2.78 MiB". */
export function humanBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(2)} ${units[u]}`;
}

function textValue(key: string, v: JsonValue): string {
  if (v === null) return "null";
  if (typeof v === "number") {
    const s = Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(7)));
    if (key === "expert_gating_func" && GATING[v] !== undefined) return `${s} (${GATING[v]})`;
    return s;
  }
  if (Array.isArray(v)) return `[${v.map((x) => textValue("", x)).join(", ")}]`;
  if (typeof v === "object") return `${v.array}[${v.length}]`;
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

function hfText(names: string[] | null | undefined): string {
  if (names === null || names === undefined || names.length === 0) return "-";
  return names.length === 1 ? names[0] : `${names[0]} … (${names.length})`;
}

function table(rows: string[][], indent = "  "): string[] {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map(
    (r) =>
      indent +
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
        .join("  ")
        .trimEnd(),
  );
}

/** Human-readable rendering of a summary (what `latent inspect` prints without --json). */
export function formatSummary(s: InspectSummary): string {
  const out: string[] = [];
  const nul = (v: unknown): string => (v === null || v === undefined ? "-" : String(v));
  out.push(
    ...table(
      [
        [
          "file",
          `${s.path} (${humanBytes(s.size_bytes)}, GGUF v${s.gguf_version}${s.shards.length > 1 ? `, ${s.shards.length} shards` : ""})`,
        ],
        ["architecture", nul(s.architecture)],
        ["name", nul(s.name)],
        ["file type", s.file_type === null ? "-" : `${s.file_type.name} (${s.file_type.id})`],
        ["parameters", `${humanCount(s.parameters)} (${s.parameters})`],
        ["tensors", `${s.tensor_count}, ${humanBytes(s.tensor_bytes)}`],
      ],
      "",
    ),
  );
  if (s.types.length > 0) {
    out.push("", "by type:");
    out.push(
      ...table(
        s.types.map((t) => [
          t.type,
          `${t.tensors} tensors`,
          `${humanCount(t.parameters)} params`,
          humanBytes(t.bytes),
          `${((100 * t.bytes) / Math.max(1, s.tensor_bytes)).toFixed(1)}%`,
        ]),
      ),
    );
  }
  const hp = Object.entries(s.hyperparameters);
  if (hp.length > 0) {
    out.push("", `hyper-parameters (${s.architecture}.*):`);
    out.push(...table(hp.map(([k, v]) => [k, textValue(k, v)])));
  }
  const tk = s.tokenizer;
  out.push("", "tokenizer:");
  out.push(
    ...table([
      ["model / pre", `${nul(tk.model)} / ${nul(tk.pre)}`],
      ["vocab / merges", `${nul(tk.vocab_size)} / ${nul(tk.merges)}`],
      [
        "bos / eos",
        `${nul(tk.bos_token_id)} / ${nul(tk.eos_token_id)}${tk.eot_token_id !== null ? `, eot ${tk.eot_token_id}` : ""}${tk.padding_token_id !== null ? `, pad ${tk.padding_token_id}` : ""}`,
      ],
      ["add bos / eos", `${nul(tk.add_bos_token)} / ${nul(tk.add_eos_token)}`],
      ["chat template", tk.has_chat_template ? "yes" : "no"],
    ]),
  );
  out.push("", s.shards.length > 1 ? `shards (${s.shards.length}):` : "file:");
  out.push(
    ...table(
      s.shards.map((sh) => [String(sh.index + 1), sh.path, `${sh.tensor_count} tensors`, humanBytes(sh.size_bytes)]),
    ),
  );
  if (s.tensors !== undefined) {
    out.push("", "tensors:");
    const hf = s.tensors.some((t) => t.hf_names !== undefined);
    out.push(
      ...table([
        ["name", "type", "shape", "bytes", "shard", ...(hf ? ["hf name"] : [])],
        ...s.tensors.map((t) => [
          t.name,
          t.type,
          `[${t.shape.join(", ")}]`,
          String(t.bytes),
          String(t.shard + 1),
          ...(hf ? [hfText(t.hf_names)] : []),
        ]),
      ]),
    );
  }
  if (s.warnings.length > 0) {
    out.push("", "warnings:");
    for (const w of s.warnings) out.push(`  ${w}`);
  }
  // Every line we composed is one line; names and values from the file are escaped so that they stay so.
  return out.map(printable).join("\n");
}
