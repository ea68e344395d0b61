/**
 * `latent convert`: a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) → one GGUF of
 * the current generation (attn_k_b/attn_v_b, head_count_kv = 1, *_mla keys) with llama.cpp's tensor names,
 * metadata keys, tokenizer encoding and per-tensor type choice.
 *
 * Reuses: model/names (HF ↔ GGUF names, kv_b split, expert stacking), model/synth (hyper-parameter keys),
 * model/synth-types (llama-quantize's type choice and fallbacks), quant (byte-exact quantizers), gguf/writer.
 * Tensors are converted one HF layer at a time, while the writer streams them, so memory stays at about one
 * layer in float32.
 */
import { writeThroughTemporary } from "../synth/atomic-output.js";
import { basename, resolve } from "node:path";
import { writeModel, tensorBytes, type TensorToWrite } from "../gguf/writer.js";
import { GGMLType, GGUFValueType, typeName, type GGUFMetadataEntry } from "../gguf/types.js";
import { Metadata } from "../gguf/metadata.js";
import { parseConfig, type ModelConfig } from "../model/config.js";
import { fromHfStateDict, hfToGguf, type HFTensor } from "./names.js";
import { validateConfig } from "../synth/presets.js";
import { synthMetadata } from "../synth/synthesize.js";
import { chooseType, fileType, isQuantized, type TypeContext } from "../synth/types.js";
import { quantize } from "../quant/index.js";
import { parseHfConfig, readHfConfig, type HfModelInfo } from "./hf-config.js";
import { readHfVocab, vocabMetadata, type HfVocab } from "./hf-tokenizer.js";
import {
  ConvertError,
  readCheckpoint,
  readTensorF32,
  readWeightF32,
  SCALE_SUFFIX,
  type SafetensorsTensor,
} from "./safetensors.js";
import { FP8_DTYPES } from "./fp8.js";

export { ConvertError } from "./safetensors.js";

export interface ConvertOptions {
  /** F32, F16, BF16, Q8_0, Q4_0, …, Q4_K_M, Q6_K (llama-quantize names; default F16 as convert_hf_to_gguf) */
  readonly type?: string;
  /** general.name (default: the directory name) */
  readonly name?: string;
  readonly onProgress?: (doneBytes: number, totalBytes: number, tensor: string) => void;
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
  readonly read: () => Float32Array;
}

const LAYER = /^model\.layers\.(\d+)\./;
const FUSED = /^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$/;
const IGNORED = /(^|\.)rotary_emb\.inv_freq$/;

/** Checkpoint tensors as per-expert HF tensors: transformers 5's fused `experts.gate_up_proj` [E, 2Fe, H] / `experts.down_proj` [E, H, Fe] are cut apart. */
function sources(ckpt: ReadonlyMap<string, SafetensorsTensor>, nLayersKept: number): Source[] {
  const out: Source[] = [];
  for (const t of ckpt.values()) {
    if (IGNORED.test(t.name)) continue;
    // FP8 block scales are applied to their weight when it is read (readWeightF32)
    if (t.name.endsWith(SCALE_SUFFIX) && FP8_DTYPES.has(ckpt.get(t.name.slice(0, -SCALE_SUFFIX.length))?.dtype ?? ""))
      continue;
    const lm = LAYER.exec(t.name);
    if (lm !== null && Number(lm[1]) >= nLayersKept) continue; // MTP layers of deepseek2 files (llama.cpp skip_mtp)
    const f = FUSED.exec(t.name);
    if (f === null) {
      out.push({ hfName: t.name, shape: t.shape, read: () => readWeightF32(ckpt, t) });
      continue;
    }
    if (t.shape.length !== 3)
      throw new ConvertError(`tensor "${t.name}": fused experts must be 3-D, got [${t.shape.join(", ")}]`);
    const [E, rows, cols] = t.shape as [number, number, number];
    let cache: Float32Array | undefined;
    const all = (): Float32Array => (cache ??= readWeightF32(ckpt, t));
    const parts = f[2] === "gate_up_proj" ? (["gate_proj", "up_proj"] as const) : (["down_proj"] as const);
    const each = rows / parts.length;
    for (let e = 0; e < E; e++) {
      parts.forEach((p, k) => {
        const start = (e * rows + k * each) * cols;
        out.push({
          hfName: `${f[1]}.${e}.${p}.weight`,
          shape: [each, cols],
          read: () => all().slice(start, start + each * cols),
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
  for (const t of ckpt.values()) {
    // dtypes latent cannot read, and FP8 weights without their scales, fail before any work
    if (!["F32", "F16", "BF16"].includes(t.dtype) && !(FP8_DTYPES.has(t.dtype) && ckpt.has(t.name + SCALE_SUFFIX)))
      readTensorF32(t);
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

  const srcs = sources(ckpt, info.nLayersKept);
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

  // converted float32 tensors of the group in hand
  let groupInHand: number | undefined;
  let converted = new Map<string, TensorToWrite>();
  const groupSources = new Map<number, Source[]>();
  for (const s of srcs) {
    const lm = LAYER.exec(s.hfName);
    const g = lm === null ? -1 : Number(lm[1]);
    if (!groupSources.has(g)) groupSources.set(g, []);
    groupSources.get(g)!.push(s);
  }
  const load = (group: number): void => {
    if (groupInHand === group) return;
    const sd = new Map<string, HFTensor>();
    for (const s of groupSources.get(group) ?? []) {
      const data = s.read();
      sd.set(s.hfName, { shape: [...s.shape], data });
    }
    converted = new Map(fromHfStateDict(sd, c, "current").map((t) => [t.name, t]));
    groupInHand = group;
  };
  const totalBytes = plan.reduce((s, t) => s + tensorBytes(t.ne, t.type), 0);
  let doneBytes = 0;
  const tensors: TensorToWrite[] = plan.map((t, i) => ({
    name: t.name,
    ne: t.ne,
    type: t.type,
    data: () => {
      load(t.group);
      const f = converted.get(t.name);
      if (f === undefined || typeof f.data === "function")
        throw new ConvertError(`internal: ${t.name} was not produced`);
      if (f.ne.join(",") !== t.ne.join(","))
        throw new ConvertError(
          `${t.name}: converted shape ${f.ne.join("x")} differs from the planned ${t.ne.join("x")}`,
        );
      converted.delete(t.name);
      const bytes = f.data;
      const f32 = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
      for (let k = 0; k < f32.length; k++) {
        if (!Number.isFinite(f32[k]))
          throw new ConvertError(`${t.name}: value ${f32[k]} at index ${k} (a corrupt checkpoint?)`);
      }
      const outBytes = t.type === GGMLType.F32 ? bytes : quantize(t.type, f32, t.ne[0], t.name);
      const next = plan[i + 1];
      if (next === undefined || next.group !== t.group) {
        converted = new Map();
        groupInHand = undefined;
      }
      return outBytes;
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

/** A one-line description of a planned tensor type mix, e.g. "F32 ×41, F16 ×54". */
export function typeSummary(tensors: readonly { type: GGMLType }[]): string {
  const counts = new Map<string, number>();
  for (const t of tensors) counts.set(typeName(t.type), (counts.get(typeName(t.type)) ?? 0) + 1);
  return [...counts].map(([n, k]) => `${n} ×${k}`).join(", ");
}
