// File faults built from the trained demo model (test-only): each is a GGUF rewrite (gguf-rewrite.ts) of
// models/latent-demo-kjv.gguf with one defect a converter or quantizer can introduce, plus healthy variants.
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { fallbackType, keepsF32 } from "../../src/synth/types.js";
import { joinKvB } from "../../src/convert/names.js";
import {
  f32,
  find,
  rewriteGGUF,
  setValues,
  str,
  u32,
  values,
  type Rewrite,
  type RewriteTensor,
} from "./gguf-rewrite.js";

export const DEMO_MODEL = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;

/** The demo model's shape (models/README.md): what the generators below index with. */
const H = 4;
const P = 32;
const V = 32;
const L = 64;
const R = 16;
const N_LAYER = 6;
const FIRST_MOE = 1;
const MOE_LAYERS = Array.from({ length: N_LAYER - FIRST_MOE }, (_, i) => FIRST_MOE + i);

export interface DemoVariant {
  readonly name: string;
  /** a fault (the doctor must exit 1) or a healthy variant (exit 0) */
  readonly healthy: boolean;
  readonly edit: Rewrite;
}

function layerTensors(list: RewriteTensor[], suffix: string): RewriteTensor[] {
  return list.filter((t) => t.name.startsWith("blk.") && t.name.endsWith(suffix));
}

/** Every weight matrix re-encoded in `type` (llama-quantize's fallbacks where a row does not fit the block). */
export function requantized(type: GGMLType): Rewrite {
  return {
    meta: (m) =>
      m.set(
        "general.file_type",
        u32(type === GGMLType.Q8_0 ? 7 : type === GGMLType.Q4_K ? 15 : type === GGMLType.Q6_K ? 18 : 1),
      ),
    tensors: (list) => {
      for (const t of list) if (!keepsF32(t.name, t.ne)) setValues(t, values(t), fallbackType(type, t.ne[0]));
    },
  };
}

/** The legacy generation: attn_k_b + attn_v_b joined into attn_kv_b (rows [head][P + V][L]); `headOrder` permutes heads. */
export function legacyLayout(headOrder: readonly number[] = Array.from({ length: H }, (_, h) => h)): Rewrite {
  return {
    meta: (m, arch) => {
      m.set(`${arch}.attention.head_count_kv`, u32(H));
      m.set(`${arch}.attention.key_length`, u32(P + R));
      m.set(`${arch}.attention.value_length`, u32(V));
      m.delete(`${arch}.attention.key_length_mla`);
      m.delete(`${arch}.attention.value_length_mla`);
    },
    tensors: (list) => {
      for (const kb of layerTensors(list, ".attn_k_b.weight")) {
        const il = kb.name.split(".")[1];
        const vb = find(list, `blk.${il}.attn_v_b.weight`);
        const joined = joinKvB(values(kb), values(vb), H, P, V, L);
        const rows = P + V;
        const permuted = new Float32Array(joined.length);
        headOrder.forEach((src, dst) =>
          permuted.set(joined.subarray(src * rows * L, (src + 1) * rows * L), dst * rows * L),
        );
        const kvb: RewriteTensor = {
          name: `blk.${il}.attn_kv_b.weight`,
          ne: [L, H * rows],
          type: kb.type,
          bytes: new Uint8Array(),
        };
        setValues(kvb, permuted);
        list.splice(list.indexOf(kb), 1, kvb);
        list.splice(list.indexOf(vb), 1);
      }
    },
  };
}

/** Swap expert `a` and `b` inside one stacked tensor (ne [cols, rows, E]) of the given layers. */
function swapExperts(tensor: string, a: number, b: number, layers: readonly number[]): Rewrite {
  return {
    tensors: (list) => {
      for (const il of layers) {
        const t = find(list, `blk.${il}.${tensor}`);
        const v = values(t);
        const each = t.ne[0] * t.ne[1];
        const ea = v.slice(a * each, (a + 1) * each);
        v.copyWithin(a * each, b * each, (b + 1) * each);
        v.set(ea, b * each);
        setValues(t, v);
      }
    },
  };
}

/** Zero expert `e`'s slice of a stacked tensor in the given layers (a merge step that dropped it). */
function zeroExpert(tensor: string, e: number, layers: readonly number[]): Rewrite {
  return {
    tensors: (list) => {
      for (const il of layers) {
        const t = find(list, `blk.${il}.${tensor}`);
        const v = values(t);
        const each = t.ne[0] * t.ne[1];
        v.fill(0, e * each, (e + 1) * each);
        setValues(t, v);
      }
    },
  };
}

/** Re-encode tensors as Q8_0, then give every 32-value block the scale of the next block (a misaligned scale array). */
function q8ScalesShifted(which: string | ((t: RewriteTensor) => boolean)): Rewrite {
  return {
    tensors: (list) => {
      for (const t of list.filter(typeof which === "string" ? (x) => x.name === which : which)) shiftQ8Scales(t);
    },
  };
}

function shiftQ8Scales(t: RewriteTensor): void {
  setValues(t, values(t), GGMLType.Q8_0);
  const blocks = t.bytes.length / 34;
  const scales = Array.from({ length: blocks }, (_, b) => t.bytes.slice(b * 34, b * 34 + 2));
  for (let b = 0; b < blocks; b++) t.bytes.set(scales[(b + 1) % blocks], b * 34);
}

/** Rope dimensions of W_q and W_kv_a stored half-split (NeoX order) while the model rotates interleaved pairs. */
function ropeRowsHalfSplit(): Rewrite {
  const toHalfSplit = (t: RewriteTensor, starts: readonly number[]): void => {
    const v = values(t);
    const K = t.ne[0];
    for (const base of starts) {
      const rows = Array.from({ length: R }, (_, i) => v.slice((base + i) * K, (base + i + 1) * K));
      for (let i = 0; i < R / 2; i++) {
        v.set(rows[2 * i], (base + i) * K);
        v.set(rows[2 * i + 1], (base + R / 2 + i) * K);
      }
    }
    setValues(t, v);
  };
  return {
    tensors: (list) => {
      for (const t of layerTensors(list, ".attn_q_b.weight"))
        toHalfSplit(
          t,
          Array.from({ length: H }, (_, h) => h * (P + R) + P),
        );
      for (const t of layerTensors(list, ".attn_kv_a_mqa.weight")) toHalfSplit(t, [L]);
    },
  };
}

const set = (key: string, entry: GGUFMetadataEntry): Rewrite => ({ meta: (m, arch) => m.set(`${arch}.${key}`, entry) });

/** The healthy variants and the faults of the suite (test/doctor/fault-suite.test.ts, tools/doctor-thresholds.ts). */
export const DEMO_VARIANTS: readonly DemoVariant[] = [
  { name: "f16", healthy: true, edit: {} },
  { name: "q8_0", healthy: true, edit: requantized(GGMLType.Q8_0) },
  { name: "q6_k", healthy: true, edit: requantized(GGMLType.Q6_K) },
  { name: "q4_k", healthy: true, edit: requantized(GGMLType.Q4_K) },
  { name: "legacy-kv-b", healthy: true, edit: legacyLayout() },
  {
    name: "k_b-v_b-swapped",
    healthy: false,
    edit: {
      tensors: (list) => {
        for (const kb of layerTensors(list, ".attn_k_b.weight")) {
          const vb = find(list, kb.name.replace("attn_k_b", "attn_v_b"));
          [kb.bytes, vb.bytes] = [vb.bytes, kb.bytes];
        }
      },
    },
  },
  {
    name: "k_b-reshaped",
    healthy: false,
    edit: {
      tensors: (list) => {
        // k_b holds W_UK,hᵀ (L rows of P); a converter that reshapes W_UK,h (P rows of L) instead stores it row-major.
        for (const kb of layerTensors(list, ".attn_k_b.weight")) {
          const v = values(kb);
          const out = new Float32Array(v.length);
          for (let h = 0; h < H; h++)
            for (let c = 0; c < L; c++)
              for (let p = 0; p < P; p++) out[h * L * P + p * L + c] = v[h * L * P + c * P + p];
          setValues(kb, out);
        }
      },
    },
  },
  { name: "legacy-kv-b-head-order", healthy: false, edit: legacyLayout([1, 0, 3, 2]) },
  { name: "rope-base-1e6", healthy: false, edit: set("rope.freq_base", f32(1e6)) },
  {
    name: "yarn-wrong-factor",
    healthy: false,
    edit: {
      meta: (m, arch) => {
        m.set(`${arch}.rope.scaling.type`, str("yarn"));
        m.set(`${arch}.rope.scaling.factor`, f32(8));
        m.set(`${arch}.rope.scaling.original_context_length`, u32(256));
        m.set(`${arch}.rope.scaling.yarn_log_multiplier`, f32(0.1));
      },
    },
  },
  { name: "experts-swapped-in-gate", healthy: false, edit: swapExperts("ffn_gate_exps.weight", 0, 5, [2]) },
  { name: "expert-zeroed", healthy: false, edit: zeroExpert("ffn_down_exps.weight", 3, MOE_LAYERS) },
  {
    name: "gate-up-names-exchanged",
    healthy: false,
    edit: {
      tensors: (list) => {
        for (const g of layerTensors(list, ".ffn_gate_exps.weight")) {
          const u = find(list, g.name.replace("gate_exps", "up_exps"));
          [g.name, u.name] = [u.name, g.name];
        }
      },
    },
  },
  { name: "q8_0-scales-shifted", healthy: false, edit: q8ScalesShifted("token_embd.weight") },
  {
    name: "exp_probs_b-dropped",
    healthy: false,
    edit: {
      tensors: (list) => {
        for (const t of layerTensors(list, ".exp_probs_b.bias")) list.splice(list.indexOf(t), 1);
      },
    },
  },
  {
    name: "softmax-gating-with-bias",
    healthy: false,
    edit: set("expert_gating_func", { type: GGUFValueType.UINT32, value: 1 }),
  },
  // Variations of the faults above, so that no check is fitted to one instance of its fault.
  { name: "q4_0", healthy: true, edit: requantized(GGMLType.Q4_0) },
  { name: "q2_k", healthy: true, edit: requantized(GGMLType.Q2_K) },
  {
    name: "k_b-v_b-swapped-in-one-layer",
    healthy: false,
    edit: {
      tensors: (list) => {
        const kb = find(list, "blk.3.attn_k_b.weight");
        const vb = find(list, "blk.3.attn_v_b.weight");
        [kb.bytes, vb.bytes] = [vb.bytes, kb.bytes];
      },
    },
  },
  { name: "legacy-kv-b-heads-1-2-exchanged", healthy: false, edit: legacyLayout([0, 2, 1, 3]) },
  { name: "rope-rows-half-split", healthy: false, edit: ropeRowsHalfSplit() },
  { name: "experts-swapped-in-up", healthy: false, edit: swapExperts("ffn_up_exps.weight", 1, 6, [4]) },
  { name: "experts-swapped-in-down", healthy: false, edit: swapExperts("ffn_down_exps.weight", 2, 7, [1]) },
  {
    name: "gate-up-exchanged-in-shared-expert",
    healthy: false,
    edit: {
      tensors: (list) => {
        for (const g of layerTensors(list, ".ffn_gate_shexp.weight")) {
          const u = find(list, g.name.replace("gate_shexp", "up_shexp"));
          [g.name, u.name] = [u.name, g.name];
        }
      },
    },
  },
  {
    name: "output-head-scaled",
    healthy: false,
    edit: {
      tensors: (list) => {
        const t = find(list, "output.weight");
        setValues(
          t,
          values(t).map((x) => x * 0.5),
        );
      },
    },
  },
  {
    name: "q8_0-scales-shifted-everywhere",
    healthy: false,
    edit: q8ScalesShifted((t) => t.ne.length >= 2 && t.ne[0] % 32 === 0),
  },
];

export function writeDemoVariant(v: DemoVariant, dst: string): string {
  return rewriteGGUF(DEMO_MODEL, dst, v.edit);
}

export { MOE_LAYERS };
