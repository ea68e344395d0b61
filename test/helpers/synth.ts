// Random-weight models for engine tests, written by `latent synth`'s library function into a temp dir.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { preset, withOverrides, type SynthConfig } from "../../src/synth/presets.js";
import { synthesize, type SynthOptions } from "../../src/synth/synthesize.js";

export interface SynthCase {
  readonly label: string;
  readonly base: "tiny" | "tiny-glm";
  readonly over: Partial<SynthConfig>;
  readonly type?: string;
}

export function synthConfig(c: SynthCase): SynthConfig {
  return withOverrides(preset("tiny", c.base === "tiny-glm" ? "glm-dsa" : "deepseek2"), { ...c.over, name: c.label });
}

/** Write the case's model into a fresh temp dir; returns its path and a cleanup function. */
export function synthModel(
  c: SynthCase,
  seed = 1,
  extra: Partial<SynthOptions> = {},
): { path: string; dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "latent-synth-"));
  const path = join(dir, `${c.label}.gguf`);
  const paths = synthesize(synthConfig(c), { out: path, seed, type: c.type ?? "F32", ...extra });
  return { path: paths[0], dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Deterministic token ids in [lo, hi). */
export function randomTokens(n: number, seed: number, lo: number, hi: number): number[] {
  let s = seed >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out.push(lo + (s % (hi - lo)));
  }
  return out;
}

/** Shapes the path and oracle tests run: odd dims, V ≠ P, no q-LoRA, softmax with groups, all-dense, DSA. */
export const CASES: readonly SynthCase[] = [
  { label: "tiny-v3", base: "tiny", over: {} },
  {
    label: "no-qlora-odd",
    base: "tiny",
    over: {
      q_lora: 0,
      n_head: 3,
      n_embd: 40,
      kv_lora: 24,
      nope: 12,
      rope: 6,
      v_head: 20,
      n_ff: 56,
      n_ff_exp: 24,
      n_expert: 6,
      n_used: 2,
      n_shared: 1,
      gating: "softmax",
      w_norm: false,
      w_scale: 1,
      groups: 0,
      groups_used: 0,
      exp_bias: false,
      yarn: { factor: 40, orig_ctx: 4096, mscale_all_dim: 0.707 },
    },
  },
  {
    label: "v2-groups-softmax",
    base: "tiny",
    over: {
      n_layer: 3,
      n_dense: 1,
      gating: "softmax",
      w_norm: false,
      w_scale: 16,
      groups: 4,
      groups_used: 2,
      n_expert: 8,
      n_used: 3,
      n_shared: 2,
      exp_bias: false,
    },
  },
  {
    label: "all-dense-noyarn",
    base: "tiny",
    over: { n_layer: 2, n_dense: 2, yarn: null, n_head: 5, v_head: 28, nope: 20, rope: 12 },
  },
  // 16 indexer heads: with 4, ReLU zeroes whole rows of scores and exact top-k ties (broken by heap order in ggml) appear.
  { label: "glm-dsa-top16", base: "tiny-glm", over: { indexer: { heads: 16, dim: 64, top_k: 16 } } },
];
