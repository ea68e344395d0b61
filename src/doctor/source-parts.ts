/**
 * A GGUF cut into comparable parts, each read on its own (stream tensor by tensor, stacked experts one expert at a
 * time): a plain tensor, one expert of a stacked `*_exps` tensor, or one half (k or v) of kv_b_proj. Each part
 * knows the Hugging Face tensor(s) it holds (model/names.ts).
 */
import type { GGUFFile } from "../gguf/file.js";
import type { TensorInfo } from "../gguf/shard.js";
import { typeName } from "../gguf/types.js";
import type { ModelConfig } from "../model/config.js";
import { ggufToHf } from "../convert/names.js";
import { dequantize, rowBytes } from "../quant/index.js";

export type PartRole = "plain" | "expert" | "k_b" | "v_b";

export interface GgufPart {
  /** e.g. "blk.1.ffn_up_exps.weight[expert 3]" */
  readonly label: string;
  readonly tensor: string;
  readonly role: PartRole;
  readonly layer?: number;
  readonly expert?: number;
  /** HF tensors held: one, or gate_proj + up_proj (fused gate_up, rows stacked), or kv_b_proj (k_b / v_b) */
  readonly hf: readonly string[];
  /** ggml shape of the part (an expert: the stacked tensor's ne without the last dimension) */
  readonly ne: readonly number[];
  readonly type: number;
  readonly typeName: string;
  readonly count: number;
  read(): Float32Array;
}

const BLK = /^blk\.(\d+)\.(.+)$/;

function count(ne: readonly number[]): number {
  return ne.reduce((a, b) => a * b, 1);
}

/** Values of a byte range of a tensor (whole rows). */
function readRange(file: GGUFFile, info: TensorInfo, start: number, n: number): Float32Array {
  const rb = rowBytes(info.type, info.ne[0], info.name);
  return dequantize(info.type, file.readBytes(info, (start / info.ne[0]) * rb, (n / info.ne[0]) * rb), n, info.name);
}

/**
 * The parts of every tensor of `file`; tensors without a Hugging Face name are returned in `unmapped`.
 * Expert counts come from the tensor itself (its last dimension), not the metadata.
 */
export function ggufParts(file: GGUFFile, c: ModelConfig): { parts: GgufPart[]; unmapped: string[] } {
  const parts: GgufPart[] = [];
  const unmapped: string[] = [];
  for (const info of file.tensors.values()) {
    const m = BLK.exec(info.name);
    const layer = m === null ? undefined : Number(m[1]);
    const rest = m?.[2] ?? info.name;
    const base = {
      tensor: info.name,
      type: info.type,
      typeName: typeName(info.type),
      ...(layer !== undefined ? { layer } : {}),
    };
    const stacked = /_exps\.weight$/.test(rest) && info.ne.length === 3;
    const hf = ggufToHf(info.name, stacked ? info.ne[2] : c.nExpert);
    if (hf === undefined) {
      unmapped.push(info.name);
      continue;
    }
    if (stacked) {
      const E = info.ne[2];
      const per = hf.length / E;
      const ne = info.ne.slice(0, 2);
      const n = count(ne);
      for (let e = 0; e < E; e++) {
        parts.push({
          ...base,
          label: `${info.name}[expert ${e}]`,
          role: "expert",
          expert: e,
          hf: hf.slice(e * per, (e + 1) * per),
          ne,
          count: n,
          read: () => readRange(file, info, e * n, n),
        });
      }
      continue;
    }
    const role: PartRole = rest === "attn_k_b.weight" ? "k_b" : rest === "attn_v_b.weight" ? "v_b" : "plain";
    parts.push({
      ...base,
      label: info.name,
      role,
      hf,
      ne: [...info.ne],
      count: count(info.ne),
      read: () => dequantize(info.type, file.readBytes(info), count(info.ne), info.name),
    });
  }
  return { parts, unmapped };
}
