/**
 * `latent convert`: a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) → one GGUF of
 * the current generation (attn_k_b/attn_v_b, head_count_kv = 1, *_mla keys) with llama.cpp's tensor names,
 * metadata keys, tokenizer encoding and per-tensor type choice.
 *
 * Reuses: model/names (HF ↔ GGUF names, kv_b split, expert stacking), model/synth (hyper-parameter keys),
 * model/synth-types (llama-quantize's type choice and fallbacks), quant (byte-exact quantizers), gguf/writer.
 * Tensors are produced as the writer reaches them, in pieces: a stacked expert tensor one expert at a time, any other
 * matrix in blocks of rows (quantization is per row), so memory stays at about one piece in float32 (≤ 64 MB, or one
 * expert's matrix) however large the model; only attn_kv_b (split into k_b/v_b) is read whole.
 */
import { writeThroughTemporary } from "../synth/atomic-output.js";
import { basename, resolve } from "node:path";
import { writeModel, tensorBytes, type TensorToWrite } from "../gguf/writer.js";
import { GGMLType, GGUFValueType, typeName, type GGUFMetadataEntry } from "../gguf/types.js";
import { Metadata } from "../gguf/metadata.js";
import { parseConfig, type ModelConfig } from "../model/config.js";
import { fromHfStateDict, hfToGguf } from "./names.js";
import { validateConfig } from "../synth/presets.js";
import { synthMetadata } from "../synth/synthesize.js";
import { chooseType, fileType, isQuantized, type TypeContext } from "../synth/types.js";
import { quantize } from "../quant/index.js";
import { parseHfConfig, readHfConfig, type HfModelInfo } from "./hf-config.js";
import { readHfVocab, vocabMetadata, type HfVocab } from "./hf-tokenizer.js";
import { ConvertError, readCheckpoint, type SafetensorsTensor } from "./safetensors.js";
import { FP8_DTYPES } from "./fp8.js";
import { fp8Scale, isFp8Companion, readRowsF32, type Fp8Scale } from "./checkpoint-reader.js";

export { ConvertError } from "./safetensors.js";

export interface ConvertOptions {
  /** F32, F16, BF16, Q8_0, Q4_0, …, Q4_K_M, Q6_K (llama-quantize names; default F16 as convert_hf_to_gguf) */
  readonly type?: string;
  /** general.name (default: the directory name) */
  readonly name?: string;
  readonly onProgress?: (doneBytes: number, totalBytes: number, tensor: string) => void;
  /** float32 bytes of a piece of a matrix converted at a time (default 64 MB, at least one row) */
  readonly pieceBytes?: number;
}

export interface ConvertResult {
  readonly paths: string[];
  readonly info: HfModelInfo;
  readonly vocab: HfVocab;
  readonly tensors: readonly { name: string; ne: readonly number[]; type: GGMLType }[];
  readonly bytes: number;
}

/** One source tensor as HF names it: a plain checkpoint tensor, or expert `e` of a fused 3-D experts tensor. */
interface Source {
  readonly hfName: string;
  readonly shape: readonly number[];
  /** rows [r0, r1) as float32, row-major (a vector is one row; a 3-D tensor's rows run over all its slices) */
  readonly rows: (r0: number, r1: number) => Float32Array;
}

/** rows × cols of a source: a vector is one row, leading dims multiply the rows. */
function rowsCols(shape: readonly number[]): { rows: number; cols: number } {
  if (shape.length <= 1) return { rows: 1, cols: shape[0] ?? 1 };
  return { rows: shape.slice(0, -1).reduce((a, d) => a * d, 1), cols: shape[shape.length - 1] };
}

const readAll = (s: Source): Float32Array => s.rows(0, rowsCols(s.shape).rows);

const LAYER = /^model\.layers\.(\d+)\./;
const FUSED = /^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$/;
const IGNORED = /(^|\.)rotary_emb\.inv_freq$/;

/** Rows [r0, r1) over all slices of a tensor of any rank (slices of a 3-D tensor one after another). */
function flatRows(t: SafetensorsTensor, scale: Fp8Scale | undefined, r0: number, r1: number): Float32Array {
  if (t.shape.length <= 2) return readRowsF32(t, 0, r0, r1, scale);
  const per = t.shape[t.shape.length - 2];
  const cols = t.shape[t.shape.length - 1];
  const out = new Float32Array((r1 - r0) * cols);
  for (let r = r0; r < r1; ) {
    const lead = Math.floor(r / per);
    const end = Math.min(r1, (lead + 1) * per);
    out.set(readRowsF32(t, lead, r - lead * per, end - lead * per, scale), (r - r0) * cols);
    r = end;
  }
  return out;
}

/** Checkpoint tensors as per-expert HF tensors: transformers 5's fused `experts.gate_up_proj` [E, 2Fe, H] / `experts.down_proj` [E, H, Fe] are cut apart, each expert read on its own. */
function sources(
  ckpt: ReadonlyMap<string, SafetensorsTensor>,
  nLayersKept: number,
  scales: ReadonlyMap<string, Fp8Scale>,
): Source[] {
  const out: Source[] = [];
  for (const t of ckpt.values()) {
    if (IGNORED.test(t.name)) continue;
    // FP8 scales are applied to their weight when it is read; activation scales serve FP8 inference only
    if (isFp8Companion(t.name, ckpt)) continue;
    const lm = LAYER.exec(t.name);
    if (lm !== null && Number(lm[1]) >= nLayersKept) continue; // MTP layers of deepseek2 files (llama.cpp skip_mtp)
    const scale = scales.get(t.name);
    const f = FUSED.exec(t.name);
    if (f === null) {
      out.push({ hfName: t.name, shape: t.shape, rows: (r0, r1) => flatRows(t, scale, r0, r1) });
      continue;
    }
    if (t.shape.length !== 3)
      throw new ConvertError(`tensor "${t.name}": fused experts must be 3-D, got [${t.shape.join(", ")}]`);
    const [E, rows, cols] = t.shape as [number, number, number];
    const parts = f[2] === "gate_up_proj" ? (["gate_proj", "up_proj"] as const) : (["down_proj"] as const);
    const each = rows / parts.length;
    for (let e = 0; e < E; e++) {
      parts.forEach((p, k) => {
        out.push({
          hfName: `${f[1]}.${e}.${p}.weight`,
          shape: [each, cols],
          rows: (r0, r1) => readRowsF32(t, e, k * each + r0, k * each + r1, scale),
        });
      });
    }
  }
  return out;
}

/** Canonical tensor order inside a layer (synth's order), so that the file does not depend on the checkpoint's tensor order. */
const ORDER = [
  "token_embd.weight",
  "output_norm.weight",
  "output.weight",
  "attn_norm.weight",
  "attn_q.weight",
  "attn_q_a.weight",
  "attn_q_a_norm.weight",
  "attn_q_b.weight",
  "attn_kv_a_mqa.weight",
  "attn_kv_a_norm.weight",
  "attn_kv_b.weight",
  "attn_k_b.weight",
  "attn_v_b.weight",
  "attn_output.weight",
  "ffn_norm.weight",
  "indexer.k_norm.weight",
  "indexer.k_norm.bias",
  "indexer.proj.weight",
  "indexer.attn_k.weight",
  "indexer.attn_q_b.weight",
  "ffn_gate.weight",
  "ffn_up.weight",
  "ffn_down.weight",
  "ffn_gate_inp.weight",
  "exp_probs_b.bias",
  "ffn_gate_exps.weight",
  "ffn_up_exps.weight",
  "ffn_down_exps.weight",
  "ffn_gate_shexp.weight",
  "ffn_up_shexp.weight",
  "ffn_down_shexp.weight",
  "nextn.eh_proj.weight",
  "nextn.enorm.weight",
  "nextn.hnorm.weight",
  "nextn.embed_tokens.weight",
  "nextn.shared_head_head.weight",
  "nextn.shared_head_norm.weight",
];
function tensorRank(name: string): number {
  const i = ORDER.indexOf(name.replace(/^blk\.\d+\./, ""));
  return i < 0 ? ORDER.length : i;
}

interface Planned {
  readonly name: string;
  readonly ne: readonly number[];
  readonly type: GGMLType;
  /** which group of sources produces it: -1 = global tensors, else the HF layer */
  readonly group: number;
}

/** GGUF tensors (names, ggml shapes) the sources become, without reading data. */
function planShapes(srcs: readonly Source[], c: ModelConfig): Map<string, { ne: number[]; group: number }> {
  const out = new Map<string, { ne: number[]; group: number }>();
  for (const s of srcs) {
    const g = hfToGguf(s.hfName, "current");
    if (g === undefined) throw new ConvertError(`no GGUF name for Hugging Face tensor "${s.hfName}"`);
    const lm = LAYER.exec(s.hfName);
    const group = lm === null ? -1 : Number(lm[1]);
    const ne = [...s.shape].reverse();
    if (g.expert !== undefined) out.set(g.gguf[0], { ne: [...ne, c.nExpert], group });
    else if (g.gguf.length === 2) {
      const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = c;
      if (s.shape[0] !== H * (P + V) || s.shape[1] !== L)
        throw new ConvertError(`${s.hfName}: shape [${s.shape.join(", ")}], expected [${H * (P + V)}, ${L}]`);
      out.set(g.gguf[0], { ne: [P, L, H], group });
      out.set(g.gguf[1], { ne: [L, V, H], group });
    } else out.set(g.gguf[0], { ne, group });
  }
  return out;
}

/** The GGUF metadata of a converted checkpoint: synth's hyper-parameter keys + the checkpoint's vocabulary. */
export function convertMetadata(
  info: HfModelInfo,
  vocab: HfVocab,
  ftype: number,
  quantized: boolean,
): Map<string, GGUFMetadataEntry> {
  const base = synthMetadata(info.config, ftype, quantized, false);
  const m = new Map<string, GGUFMetadataEntry>();
  for (const [k, v] of base) if (!k.startsWith("tokenizer.")) m.set(k, v);
  m.set("general.name", { type: GGUFValueType.STRING, value: info.name });
  const a = info.config.arch;
  if (info.yarnBeta !== undefined) {
    m.set(`${a}.rope.scaling.yarn_beta_fast`, { type: GGUFValueType.FLOAT32, value: info.yarnBeta.fast });
    m.set(`${a}.rope.scaling.yarn_beta_slow`, { type: GGUFValueType.FLOAT32, value: info.yarnBeta.slow });
  }
  for (const [k, v] of vocabMetadata(vocab)) m.set(k, v);
  return m;
}

export function convertHf(dir: string, out: string, opts: ConvertOptions = {}): ConvertResult {
  const spec = fileType(opts.type ?? "F16");
  const cfgJson = readHfConfig(dir);
  const ckpt = readCheckpoint(dir);
  // dtypes latent cannot read, and FP8 weights without a scale it can apply, fail before any work
  const block = fp8BlockSize(cfgJson);
  const scales = new Map<string, Fp8Scale>();
  for (const t of ckpt.values()) {
    if (FP8_DTYPES.has(t.dtype)) scales.set(t.name, fp8Scale(ckpt, t, block));
    else if (!["F32", "F16", "BF16"].includes(t.dtype) && !isFp8Companion(t.name, ckpt) && !IGNORED.test(t.name))
      throw new ConvertError(
        `tensor "${t.name}": dtype ${t.dtype} is not supported (F32, F16, BF16, or F8_E4M3/F8_E5M2 with a scale)`,
      );
  }
  const hasExpBias = [...ckpt.keys()].some((k) => k.endsWith("mlp.gate.e_score_correction_bias"));
  const info = parseHfConfig(cfgJson, opts.name ?? basename(resolve(dir)), hasExpBias);
  try {
    validateConfig(info.config);
  } catch (e) {
    throw new ConvertError(`config.json: ${(e as Error).message}`);
  }
  const vocab = readHfVocab(dir, info.modelType, info.config.n_vocab);
  const provisional = convertMetadata(info, vocab, spec.ftype, false);
  const c = parseConfig(new Metadata(provisional), info.config.n_vocab);

  const srcs = sources(ckpt, info.nLayersKept, scales);
  const shapes = planShapes(srcs, c);
  for (const need of ["token_embd.weight", "output_norm.weight", "output.weight"])
    if (!shapes.has(need)) throw new ConvertError(`checkpoint lacks the tensor for ${need}`);
  for (let il = 0; il < info.nLayersKept; il++)
    if (!shapes.has(`blk.${il}.attn_norm.weight`))
      throw new ConvertError(`checkpoint lacks layer ${il} (model.layers.${il}.input_layernorm.weight)`);
  const ctx: TypeContext = {
    spec,
    pure: false,
    nExpert: c.nExpert,
    nGqa: c.nHead,
    nLayerAll: info.nLayersKept,
    nAttnV: 0,
  };
  const counters = { iAttnV: 0 };
  const order = [...shapes.entries()].sort(
    ([an, a], [bn, b]) => a.group - b.group || tensorRank(an) - tensorRank(bn) || (an < bn ? -1 : an > bn ? 1 : 0),
  );
  const plan: Planned[] = order.map(([name, s]) => ({
    name,
    ne: s.ne,
    type: chooseType(name, s.ne, ctx, counters),
    group: s.group,
  }));
  const metadata = convertMetadata(
    info,
    vocab,
    spec.ftype,
    plan.some((t) => isQuantized(t.type)),
  );

  const producers = tensorProducers(srcs, c, opts.pieceBytes ?? PIECE_BYTES);
  const totalBytes = plan.reduce((s, t) => s + tensorBytes(t.ne, t.type), 0);
  let doneBytes = 0;
  const tensors: TensorToWrite[] = plan.map((t) => ({
    name: t.name,
    ne: t.ne,
    type: t.type,
    data: () => {
      const produce = producers.get(t.name);
      if (produce === undefined) throw new ConvertError(`internal: ${t.name} was not produced`);
      return produce(t);
    },
  }));
  const paths = writeThroughTemporary(out, (temporaryOut) =>
    writeModel(temporaryOut, metadata, tensors, {
      onTensor: (done, _total, bytes) => {
        doneBytes += bytes;
        opts.onProgress?.(doneBytes, totalBytes, plan[done - 1].name);
      },
    }),
  );
  return { paths, info, vocab, tensors: plan.map(({ name, ne, type }) => ({ name, ne, type })), bytes: totalBytes };
}

/** float32 rows → the planned type's bytes, refusing non-finite values (a corrupt checkpoint). */
function encodeRows(t: Planned, f32: Float32Array, firstRow: number): Uint8Array {
  for (let k = 0; k < f32.length; k++)
    if (!Number.isFinite(f32[k]))
      throw new ConvertError(`${t.name}: value ${f32[k]} at index ${firstRow * t.ne[0] + k} (a corrupt checkpoint?)`);
  return t.type === GGMLType.F32
    ? new Uint8Array(f32.buffer, f32.byteOffset, f32.byteLength)
    : quantize(t.type, f32, t.ne[0], t.name);
}

/** Float32 rows per piece of a matrix: about 64 MB, at least one row. */
const PIECE_BYTES = 64 << 20;

/**
 * How each GGUF tensor's bytes are made at write time: a stacked expert tensor expert by expert, attn_k_b/attn_v_b
 * from one whole read of kv_b_proj (the second kept until written), any other tensor in blocks of rows.
 */
function tensorProducers(
  srcs: readonly Source[],
  c: ModelConfig,
  pieceBytes: number,
): Map<string, (t: Planned) => Uint8Array | Iterable<Uint8Array>> {
  const out = new Map<string, (t: Planned) => Uint8Array | Iterable<Uint8Array>>();
  const experts = new Map<string, Source[]>();
  for (const s of srcs) {
    const g = hfToGguf(s.hfName, "current")!;
    if (g.expert !== undefined) {
      let list = experts.get(g.gguf[0]);
      if (list === undefined) experts.set(g.gguf[0], (list = new Array<Source>(c.nExpert)));
      list[g.expert] = s;
    } else if (g.gguf.length === 2) {
      let pair: Map<string, TensorToWrite> | undefined;
      for (const name of g.gguf)
        out.set(name, (t) => {
          pair ??= new Map(
            fromHfStateDict(new Map([[s.hfName, { shape: [...s.shape], data: readAll(s) }]]), c, "current").map((x) => [
              x.name,
              x,
            ]),
          );
          const f = pair.get(name)!;
          pair.delete(name);
          if (pair.size === 0) pair = undefined;
          const bytes = f.data as Uint8Array;
          return encodeRows(t, new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4), 0);
        });
    } else out.set(g.gguf[0], (t) => rowPieces(t, s, 0, pieceBytes));
  }
  for (const [name, list] of experts)
    out.set(name, (t) =>
      (function* () {
        for (let e = 0; e < list.length; e++) {
          const s = list[e];
          if (s === undefined) throw new ConvertError(`expert ${e} of ${name} missing`);
          yield* rowPieces(t, s, e * rowsCols(s.shape).rows, pieceBytes);
        }
      })(),
    );
  return out;
}

/** A source's rows in pieces of about `pieceBytes` as float32, each encoded in the planned type. */
function* rowPieces(t: Planned, s: Source, firstRow: number, pieceBytes: number): Generator<Uint8Array> {
  const { rows, cols } = rowsCols(s.shape);
  if (cols !== t.ne[0]) throw new ConvertError(`${s.hfName}: rows of ${cols} values, ${t.name} expects ${t.ne[0]}`);
  const per = Math.max(1, Math.floor(pieceBytes / (4 * cols)));
  for (let r0 = 0; r0 < rows; r0 += per) {
    const r1 = Math.min(rows, r0 + per);
    yield encodeRows(t, s.rows(r0, r1), firstRow + r0);
  }
}

/** The FP8 block size of quantization_config (`weight_block_size`, or compressed-tensors' `block_structure`); 128×128 when absent. */
function fp8BlockSize(cfg: unknown): [number, number] {
  const q = (cfg as { quantization_config?: Record<string, unknown> } | null)?.quantization_config;
  const groups = q?.config_groups as Record<string, { weights?: { block_structure?: unknown } }> | undefined;
  const b =
    q?.weight_block_size ??
    Object.values(groups ?? {}).find((g) => g.weights?.block_structure)?.weights?.block_structure;
  if (b === undefined || b === null) return [128, 128];
  if (!Array.isArray(b) || b.length !== 2 || !b.every((x) => Number.isSafeInteger(x) && (x as number) > 0))
    throw new ConvertError(`config.json: quantization_config block size ${JSON.stringify(b)}, expected [rows, cols]`);
  return [b[0] as number, b[1] as number];
}

/** A one-line description of a planned tensor type mix, e.g. "F32 ×41, F16 ×54". */
export function typeSummary(tensors: readonly { type: GGMLType }[]): string {
  const counts = new Map<string, number>();
  for (const t of tensors) counts.set(typeName(t.type), (counts.get(typeName(t.type)) ?? 0) + 1);
  return [...counts].map(([n, k]) => `${n} ×${k}`).join(", ");
}
