/**
 * Models over modified weights or config that reproduce deployment faults, built without hooks in the model code:
 * attn_k_b/attn_v_b swapped (the weight objects exchanged, when qk_nope = v_head), another RoPE base, one expert's
 * weights zeroed (src/doctor/faults/ builds its fault models on these too). The endpoint matcher simulates candidates with them; tests build faulty servers from them.
 */
import { QMatrix } from "../../tensor/qmatrix.js";
import { GGMLType } from "../../gguf/types.js";
import type { ModelConfig } from "../../model/config.js";
import type { DeepSeek2 } from "../../model/deepseek2.js";
import type { Rope } from "../../model/rope.js";
import { reassembleKvB, type LayerWeights, type ModelWeights, type SwiGLU } from "../../model/weights.js";

/** The model's class over other weights or config; the model's own rope (a fault's NeoX rope too) unless `rope` is "from config". */
function rebuild<M extends DeepSeek2>(
  model: M,
  config: ModelConfig,
  weights: ModelWeights,
  rope: Rope | "from config" = model.rope,
): M {
  const Ctor = model.constructor as new (c: ModelConfig, w: ModelWeights, r?: Rope) => M;
  const m = new Ctor(config, weights, rope === "from config" ? undefined : rope);
  m.kernels = model.kernels;
  return m;
}

function f32(name: string, cols: number, rows: number, values: Float32Array): QMatrix {
  return new QMatrix(
    name,
    GGMLType.F32,
    cols,
    rows,
    new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
  );
}

function transposed(m: QMatrix, name: string): QMatrix {
  const src = m.toF32();
  const out = new Float32Array(m.rows * m.cols);
  for (let r = 0; r < m.rows; r++) for (let c = 0; c < m.cols; c++) out[c * m.rows + r] = src[r * m.cols + c];
  return f32(name, m.rows, m.cols, out);
}

function zeros(m: QMatrix): QMatrix {
  return f32(`${m.name} (zeroed)`, m.cols, m.rows, new Float32Array(m.rows * m.cols));
}

function withLayers<M extends DeepSeek2>(model: M, edit: (lw: LayerWeights, il: number) => LayerWeights): M {
  return rebuild(model, model.config, { ...model.weights, layers: model.weights.layers.map(edit) });
}

/** The model with a different RoPE base (rope.freq_base). */
export function withRopeBase<M extends DeepSeek2>(model: M, base: number): M {
  return rebuild(model, { ...model.config, ropeBase: base }, model.weights, "from config");
}

/** W_UV used where W_UK belongs and W_UK where W_UV belongs, on every path; undefined unless qk_nope = v_head. */
export function withKvBSwapped<M extends DeepSeek2>(model: M): M | undefined {
  const { qkNope: P, vHead: V, kvLoraRank: L } = model.config;
  if (P !== V) return undefined;
  const split = splitKvBSwapped(model.weights, model.config);
  const layers = split.layers.map((lw) => {
    let kvB: QMatrix | undefined;
    return {
      ...lw,
      attn: {
        ...lw.attn,
        kvB: () => (kvB ??= reassembleKvB(lw.attn.kB, lw.attn.vB, "attn_kv_b (k_b/v_b swapped)", P, V, L)),
      },
    };
  });
  return rebuild(model, model.config, { ...split, layers });
}

/**
 * The split attn_k_b / attn_v_b swapped while the joined attn_kv_b stays right: the prefill and decode paths (which
 * read the split pair) go wrong, the reference path (which decompresses with the joined one) does not.
 * Each takes the other's transpose: kB[h] is L rows of P, vB[h] is V rows of L; needs P = V.
 */
export function splitKvBSwapped(weights: ModelWeights, config: ModelConfig): ModelWeights {
  if (config.qkNope !== config.vHead)
    throw new Error(`k_b and v_b cannot be swapped: qk_nope ${config.qkNope} ≠ v_head ${config.vHead}`);
  const layers = weights.layers.map((lw) => {
    const kB = lw.attn.vB.map((v) => transposed(v, `${v.name} as attn_k_b`));
    const vB = lw.attn.kB.map((k) => transposed(k, `${k.name} as attn_v_b`));
    return { ...lw, attn: { ...lw.attn, kB, vB } };
  });
  return { ...weights, layers };
}

function zeroExpert(e: SwiGLU): SwiGLU {
  return { gate: zeros(e.gate), up: zeros(e.up), down: zeros(e.down) };
}

/** Expert `expert` of MoE layer `layer` (every MoE layer when `layer` is undefined) with all-zero weights. */
export function withExpertZeroed<M extends DeepSeek2>(model: M, expert: number, layer?: number): M {
  return withLayers(model, (lw, il) => {
    if (lw.moe === undefined || (layer !== undefined && il !== layer) || lw.moe.experts[expert] === undefined)
      return lw;
    return { ...lw, moe: { ...lw.moe, experts: lw.moe.experts.map((x, i) => (i === expert ? zeroExpert(x) : x)) } };
  });
}

/** MoE layers of the model (those with routed experts). */
export function moeLayers(model: DeepSeek2): number[] {
  return model.weights.layers.flatMap((lw, il) => (lw.moe !== undefined ? [il] : []));
}

function countParams(w: ModelWeights): number {
  let n = w.tokenEmbd.rows * w.tokenEmbd.cols + w.output.rows * w.output.cols;
  for (const lw of w.layers) {
    const a = lw.attn;
    for (const m of [a.q, a.qA, a.qB, a.kvA, a.o, ...a.kB, ...a.vB]) if (m !== undefined) n += m.rows * m.cols;
    const ffn = [lw.dense, lw.moe?.shared, ...(lw.moe?.experts ?? [])];
    for (const e of ffn)
      if (e !== undefined) n += e.gate.rows * e.gate.cols + e.up.rows * e.up.cols + e.down.rows * e.down.cols;
  }
  return n;
}

function asF32(m: QMatrix): QMatrix {
  return m.type === GGMLType.F32 ? m : f32(m.name, m.cols, m.rows, m.toF32());
}

function swigluF32(s: SwiGLU): SwiGLU {
  return { gate: asF32(s.gate), up: asF32(s.up), down: asF32(s.down) };
}

/**
 * The same model with every weight matrix held as F32 (exact for F16/BF16 files, a dequantized copy otherwise):
 * products then read the values in place instead of dequantizing each row on every call, which makes the many
 * short simulations of the matcher several times faster.
 */
export function withF32Weights<M extends DeepSeek2>(model: M, maxBytes = 256 * 2 ** 20): M {
  const w = model.weights;
  // a copy of a large model's weights would not fit: then the model as it is
  if (countParams(w) * 4 > maxBytes) return model;
  const opt = (m: QMatrix | undefined): QMatrix | undefined => (m === undefined ? undefined : asF32(m));
  const layers = w.layers.map((lw): LayerWeights => {
    const kB = lw.attn.kB.map(asF32);
    const vB = lw.attn.vB.map(asF32);
    const kvB = asF32(lw.attn.kvB());
    return {
      ...lw,
      attn: {
        ...lw.attn,
        q: opt(lw.attn.q),
        qA: opt(lw.attn.qA),
        qB: opt(lw.attn.qB),
        kvA: asF32(lw.attn.kvA),
        kB,
        vB,
        kvB: () => kvB,
        o: asF32(lw.attn.o),
      },
      dense: lw.dense === undefined ? undefined : swigluF32(lw.dense),
      moe:
        lw.moe === undefined
          ? undefined
          : {
              ...lw.moe,
              router: asF32(lw.moe.router),
              experts: lw.moe.experts.map(swigluF32),
              shared: lw.moe.shared === undefined ? undefined : swigluF32(lw.moe.shared),
            },
    };
  });
  return rebuild(model, model.config, { ...w, tokenEmbd: asF32(w.tokenEmbd), output: asF32(w.output), layers });
}
