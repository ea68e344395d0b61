/**
 * The source side of `latent doctor --source`: a Hugging Face checkpoint directory (safetensors, F32/F16/BF16 or
 * FP8 block-scaled; single file or sharded) or a second GGUF, seen as Hugging Face tensors (per expert), each read
 * on demand as float32.
 */
import { existsSync, statSync } from "node:fs";
import { GGUFFile } from "../gguf/file.js";
import { parseConfig } from "../model/config.js";
import { joinKvB } from "../convert/names.js";
import {
  readCheckpoint,
  readTensorF32,
  readWeightF32,
  SCALE_SUFFIX,
  type SafetensorsTensor,
} from "../convert/safetensors.js";
import { FP8_DTYPES } from "../convert/fp8.js";
import { ggufParts, type GgufPart } from "./source-parts.js";
import { ggufNoise, sourceDtypeNoise } from "./source-noise.js";

export interface SourceTensor {
  readonly name: string;
  /** PyTorch shape */
  readonly shape: readonly number[];
  /** storage: a safetensors dtype ("BF16", "F8_E4M3") or a GGUF type ("Q4_K") */
  readonly dtype: string;
  /** quantization noise of that storage; undefined when latent cannot read it */
  readonly noise?: { readonly rel: number; readonly gain: number };
}

export interface SourceModel {
  readonly kind: "hf-dir" | "gguf";
  readonly path: string;
  readonly tensors: ReadonlyMap<string, SourceTensor>;
  /** checkpoint entries that are not weights of their own (FP8 scales, rotary inv_freq) */
  readonly auxiliary: readonly string[];
  /** GGUF source: tensors with no Hugging Face name */
  readonly unmapped: readonly string[];
  /** GGUF source: the file, to load as a model for the logits */
  readonly gguf?: GGUFFile;
  read(name: string): Float32Array;
  close(): void;
}

/** The source cannot be read at all (missing path, no checkpoint, bad header): `latent doctor` could not run. */
export class SourceUnreadableError extends Error {}

const FUSED = /^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$/;
const AUXILIARY = /(^|\.)rotary_emb\.inv_freq$/;

/** Open `path`: a directory (HF checkpoint) or a .gguf file. */
export function openSource(path: string): SourceModel {
  if (!existsSync(path)) throw new SourceUnreadableError(`source not found: ${path}`);
  try {
    return statSync(path).isDirectory() ? openHfSource(path) : openGgufSource(path);
  } catch (e) {
    if (e instanceof SourceUnreadableError) throw e;
    throw new SourceUnreadableError(`cannot read the source ${path}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** Entry `e` of the leading dimension of a checkpoint tensor (its bytes are contiguous). */
function slice(t: SafetensorsTensor, e: number): SafetensorsTensor {
  const per = t.nbytes / t.shape[0];
  return { ...t, name: `${t.name}[${e}]`, shape: t.shape.slice(1), offset: t.offset + e * per, nbytes: per };
}

function openHfSource(dir: string): SourceModel {
  const ckpt = readCheckpoint(dir);
  const tensors = new Map<string, SourceTensor>();
  const readers = new Map<string, () => Float32Array>();
  const auxiliary: string[] = [];
  // fused experts are read one expert at a time (its bytes are contiguous), the last one kept for gate then up
  let sliceKey: string | undefined;
  let sliceData: Float32Array | undefined;
  const expertSlice = (t: SafetensorsTensor, e: number): Float32Array => {
    const key = `${t.name}#${e}`;
    if (sliceKey !== key) {
      const scale = ckpt.get(t.name + SCALE_SUFFIX);
      sliceData =
        FP8_DTYPES.has(t.dtype) && scale !== undefined
          ? readTensorF32(slice(t, e), readTensorF32(slice(scale, e)))
          : readTensorF32(slice(t, e));
      sliceKey = key;
    }
    return sliceData!;
  };
  for (const t of ckpt.values()) {
    if (t.name.endsWith(SCALE_SUFFIX) && FP8_DTYPES.has(ckpt.get(t.name.slice(0, -SCALE_SUFFIX.length))?.dtype ?? "")) {
      auxiliary.push(t.name);
      continue;
    }
    if (AUXILIARY.test(t.name)) {
      auxiliary.push(t.name);
      continue;
    }
    const noise = sourceDtypeNoise(t.dtype);
    const f = FUSED.exec(t.name);
    if (f === null || t.shape.length !== 3) {
      tensors.set(t.name, { name: t.name, shape: t.shape, dtype: t.dtype, ...(noise ? { noise } : {}) });
      readers.set(t.name, () => readWeightF32(ckpt, t));
      continue;
    }
    // transformers 5 fused experts: gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F]
    const [E, rows, cols] = t.shape as [number, number, number];
    const names = f[2] === "gate_up_proj" ? ["gate_proj", "up_proj"] : ["down_proj"];
    const each = rows / names.length;
    for (let e = 0; e < E; e++) {
      names.forEach((p, k) => {
        const name = `${f[1]}.${e}.${p}.weight`;
        tensors.set(name, { name, shape: [each, cols], dtype: t.dtype, ...(noise ? { noise } : {}) });
        readers.set(name, () => expertSlice(t, e).slice(k * each * cols, (k + 1) * each * cols));
      });
    }
  }
  return {
    kind: "hf-dir",
    path: dir,
    tensors,
    auxiliary,
    unmapped: [],
    read: (name) => {
      const r = readers.get(name);
      if (r === undefined) throw new RangeError(`source has no tensor ${name}`);
      return r();
    },
    close: () => {
      sliceData = undefined;
    },
  };
}

function openGgufSource(path: string): SourceModel {
  const file = GGUFFile.open(path);
  try {
    const c = parseConfig(file.metadata, file.tensors.get("token_embd.weight")?.ne[1]);
    const { parts, unmapped } = ggufParts(file, c);
    const tensors = new Map<string, SourceTensor>();
    const readers = new Map<string, () => Float32Array>();
    const kb = new Map<number, GgufPart>();
    const vb = new Map<number, GgufPart>();
    for (const p of parts) {
      if (p.role === "k_b") kb.set(p.layer!, p);
      else if (p.role === "v_b") vb.set(p.layer!, p);
      else if (p.hf.length === 2) {
        // fused gate_up experts: gate rows then up rows
        const half = p.count / 2;
        p.hf.forEach((name, k) => {
          tensors.set(name, { name, shape: [p.ne[1] / 2, p.ne[0]], dtype: p.typeName, noise: ggufNoise(p.type) });
          readers.set(name, () => p.read().slice(k * half, (k + 1) * half));
        });
      } else {
        tensors.set(p.hf[0], {
          name: p.hf[0],
          shape: [...p.ne].reverse(),
          dtype: p.typeName,
          noise: ggufNoise(p.type),
        });
        readers.set(p.hf[0], () => p.read());
      }
    }
    for (const [layer, k] of kb) {
      const v = vb.get(layer);
      if (v === undefined) {
        unmapped.push(k.tensor);
        continue;
      }
      const [P, L, H] = k.ne as [number, number, number];
      const V = v.ne[1];
      const worse = ggufNoise(k.type).rel >= ggufNoise(v.type).rel ? k : v;
      const name = k.hf[0];
      tensors.set(name, { name, shape: [H * (P + V), L], dtype: worse.typeName, noise: ggufNoise(worse.type) });
      readers.set(name, () => joinKvB(k.read(), v.read(), H, P, V, L));
    }
    for (const [layer, v] of vb) if (!kb.has(layer)) unmapped.push(v.tensor);
    return {
      kind: "gguf",
      path,
      tensors,
      auxiliary: [],
      unmapped,
      gguf: file,
      read: (name) => {
        const r = readers.get(name);
        if (r === undefined) throw new RangeError(`source has no tensor ${name}`);
        return r();
      },
      close: () => file.close(),
    };
  } catch (e) {
    file.close();
    throw e;
  }
}
