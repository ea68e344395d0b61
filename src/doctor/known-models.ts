/**
 * The published configurations of the models latent targets, and the check of a file's metadata against them.
 * A file is identified by its shapes alone (layers, widths, heads, LoRA ranks, experts, vocabulary); the routing and
 * rope settings of its metadata are then compared with the release's config.json — a converter that got them wrong
 * produces a file whose every compute path agrees with itself and is still wrong.
 *
 * Sources (Hugging Face config.json of each release; cross-checked with the published modelling code and
 * public copies of each config):
 * - deepseek-ai/DeepSeek-V2, DeepSeek-V2-Lite: configuration_deepseek.py + config.json (softmax, group_limited_greedy /
 *   greedy, routed_scaling_factor 16 / 1, YaRN factor 40 on 4096, mscale = mscale_all_dim = 0.707, θ 1e4)
 * - deepseek-ai/DeepSeek-V3, DeepSeek-R1, DeepSeek-V3.1 (same config): sigmoid + noaux_tc, n_group 8, topk_group 4,
 *   routed_scaling_factor 2.5, norm_topk_prob, YaRN factor 40 on 4096, mscale_all_dim 1, θ 1e4. V3.2 has the same
 *   shapes plus a DSA indexer, which a deepseek2 GGUF does not carry; it is checked as V3.
 * - moonshotai/Kimi-K2-Instruct (YaRN factor 32, 131072 context) and Kimi-K2-Instruct-0905 (factor 64, 262144):
 *   θ 50000, beta_fast = beta_slow = 1, 384 experts, routed_scaling_factor 2.827, one group.
 * - zai-org/GLM-4.7-Flash (Glm4MoeLite): θ 1e6, no rope scaling, 202752 context, routed_scaling_factor 1.8.
 * - zai-org/GLM-5 (glm-dsa): θ 1e6, no rope scaling, routed_scaling_factor 2.5, one MTP layer.
 * - latent-demo-kjv (models/README.md): the bundled trained demo model.
 */
import type { Metadata } from "../gguf/metadata.js";
import type { GatingFunc, ModelConfig } from "../model/config.js";

/** Shapes that identify a model (a file whose shapes all match is that model). */
export interface ModelShape {
  readonly arch: ModelConfig["arch"];
  /** main-stack layers; GLM-4.7-Flash files count the MTP layer in block_count or not */
  readonly nLayer: readonly number[];
  readonly nEmbd: number;
  readonly nHead: number;
  readonly qLoraRank: number;
  readonly kvLoraRank: number;
  readonly qkNope: number;
  readonly qkRope: number;
  readonly vHead: number;
  readonly nExpert: number;
  readonly nExpertShared: number;
  readonly nFFExp: number;
  readonly nFF: number;
  readonly nLeadingDense: number;
  readonly nVocab: number;
}

/** Routing and rope settings of one release (the values a converter copies from config.json). */
export interface ReleaseSettings {
  readonly release: string;
  readonly gating: GatingFunc;
  /** e_score_correction_bias (GGUF exp_probs_b) present */
  readonly correctionBias: boolean;
  readonly nExpertUsed: number;
  readonly nGroup: number;
  readonly nGroupUsed: number;
  /** routed_scaling_factor */
  readonly weightsScale: number;
  /** norm_topk_prob */
  readonly weightsNorm: boolean;
  readonly ropeBase: number;
  readonly yarn: {
    readonly factor: number;
    readonly originalContext: number;
    readonly betaFast: number;
    readonly betaSlow: number;
    readonly mscaleAllDim: number;
  } | null;
}

export interface KnownModel {
  readonly name: string;
  readonly shape: ModelShape;
  readonly releases: readonly ReleaseSettings[];
}

const V2_ROUTING = {
  gating: "softmax",
  correctionBias: false,
  weightsNorm: false,
  ropeBase: 10000,
  yarn: { factor: 40, originalContext: 4096, betaFast: 32, betaSlow: 1, mscaleAllDim: 0.707 },
} as const;
const V3_ROUTING = { gating: "sigmoid", correctionBias: true, weightsNorm: true, nExpertUsed: 8 } as const;
const GLM_SHAPE = { qkNope: 192, qkRope: 64, vHead: 256, kvLoraRank: 512, nVocab: 154880 } as const;

export const KNOWN_MODELS: readonly KnownModel[] = [
  {
    name: "DeepSeek-V2",
    shape: {
      arch: "deepseek2",
      nLayer: [60],
      nEmbd: 5120,
      nHead: 128,
      qLoraRank: 1536,
      kvLoraRank: 512,
      qkNope: 128,
      qkRope: 64,
      vHead: 128,
      nExpert: 160,
      nExpertShared: 2,
      nFFExp: 1536,
      nFF: 12288,
      nLeadingDense: 1,
      nVocab: 102400,
    },
    releases: [
      { release: "DeepSeek-V2 / V2-Chat", ...V2_ROUTING, nExpertUsed: 6, nGroup: 8, nGroupUsed: 3, weightsScale: 16 },
    ],
  },
  {
    name: "DeepSeek-V2-Lite",
    shape: {
      arch: "deepseek2",
      nLayer: [27],
      nEmbd: 2048,
      nHead: 16,
      qLoraRank: 0,
      kvLoraRank: 512,
      qkNope: 128,
      qkRope: 64,
      vHead: 128,
      nExpert: 64,
      nExpertShared: 2,
      nFFExp: 1408,
      nFF: 10944,
      nLeadingDense: 1,
      nVocab: 102400,
    },
    releases: [
      {
        release: "DeepSeek-V2-Lite / Lite-Chat",
        ...V2_ROUTING,
        nExpertUsed: 6,
        nGroup: 1,
        nGroupUsed: 1,
        weightsScale: 1,
      },
    ],
  },
  {
    name: "DeepSeek-V3",
    shape: {
      arch: "deepseek2",
      nLayer: [61],
      nEmbd: 7168,
      nHead: 128,
      qLoraRank: 1536,
      kvLoraRank: 512,
      qkNope: 128,
      qkRope: 64,
      vHead: 128,
      nExpert: 256,
      nExpertShared: 1,
      nFFExp: 2048,
      nFF: 18432,
      nLeadingDense: 3,
      nVocab: 129280,
    },
    releases: [
      {
        release: "DeepSeek-V3 / R1 / V3.1 / V3.2",
        ...V3_ROUTING,
        nGroup: 8,
        nGroupUsed: 4,
        weightsScale: 2.5,
        ropeBase: 10000,
        yarn: { factor: 40, originalContext: 4096, betaFast: 32, betaSlow: 1, mscaleAllDim: 1 },
      },
    ],
  },
  {
    name: "Kimi-K2",
    shape: {
      arch: "deepseek2",
      nLayer: [61],
      nEmbd: 7168,
      nHead: 64,
      qLoraRank: 1536,
      kvLoraRank: 512,
      qkNope: 128,
      qkRope: 64,
      vHead: 128,
      nExpert: 384,
      nExpertShared: 1,
      nFFExp: 2048,
      nFF: 18432,
      nLeadingDense: 1,
      nVocab: 163840,
    },
    releases: [
      {
        release: "Kimi-K2-Instruct / Base",
        ...V3_ROUTING,
        nGroup: 1,
        nGroupUsed: 1,
        weightsScale: 2.827,
        ropeBase: 50000,
        yarn: { factor: 32, originalContext: 4096, betaFast: 1, betaSlow: 1, mscaleAllDim: 1 },
      },
      {
        release: "Kimi-K2-Instruct-0905 / Thinking",
        ...V3_ROUTING,
        nGroup: 1,
        nGroupUsed: 1,
        weightsScale: 2.827,
        ropeBase: 50000,
        yarn: { factor: 64, originalContext: 4096, betaFast: 1, betaSlow: 1, mscaleAllDim: 1 },
      },
    ],
  },
  {
    name: "GLM-4.7-Flash",
    shape: {
      arch: "deepseek2",
      nLayer: [47, 48],
      nEmbd: 2048,
      nHead: 20,
      qLoraRank: 768,
      ...GLM_SHAPE,
      nExpert: 64,
      nExpertShared: 1,
      nFFExp: 1536,
      nFF: 10240,
      nLeadingDense: 1,
    },
    releases: [
      {
        release: "GLM-4.7-Flash",
        gating: "sigmoid",
        correctionBias: true,
        weightsNorm: true,
        nExpertUsed: 4,
        nGroup: 1,
        nGroupUsed: 1,
        weightsScale: 1.8,
        ropeBase: 1e6,
        yarn: null,
      },
    ],
  },
  {
    name: "GLM-5",
    shape: {
      arch: "glm-dsa",
      nLayer: [78],
      nEmbd: 6144,
      nHead: 64,
      qLoraRank: 2048,
      ...GLM_SHAPE,
      nExpert: 256,
      nExpertShared: 1,
      nFFExp: 2048,
      nFF: 12288,
      nLeadingDense: 3,
    },
    releases: [
      {
        release: "GLM-5",
        gating: "sigmoid",
        correctionBias: true,
        weightsNorm: true,
        nExpertUsed: 8,
        nGroup: 1,
        nGroupUsed: 1,
        weightsScale: 2.5,
        ropeBase: 1e6,
        yarn: null,
      },
    ],
  },
  {
    name: "latent-demo-kjv",
    shape: {
      arch: "deepseek2",
      nLayer: [6],
      nEmbd: 256,
      nHead: 4,
      qLoraRank: 128,
      kvLoraRank: 64,
      qkNope: 32,
      qkRope: 16,
      vHead: 32,
      nExpert: 8,
      nExpertShared: 1,
      nFFExp: 160,
      nFF: 640,
      nLeadingDense: 1,
      nVocab: 4096,
    },
    releases: [
      {
        release: "latent-demo-kjv (models/README.md)",
        gating: "sigmoid",
        correctionBias: true,
        weightsNorm: true,
        nExpertUsed: 2,
        nGroup: 1,
        nGroupUsed: 1,
        weightsScale: 2.5,
        ropeBase: 10000,
        yarn: null,
      },
    ],
  },
];

export function matchesShape(s: ModelShape, c: ModelConfig): boolean {
  return (
    s.arch === c.arch &&
    s.nLayer.includes(c.nLayer) &&
    s.nEmbd === c.nEmbd &&
    s.nHead === c.nHead &&
    s.qLoraRank === c.qLoraRank &&
    s.kvLoraRank === c.kvLoraRank &&
    s.qkNope === c.qkNope &&
    s.qkRope === c.qkRope &&
    s.vHead === c.vHead &&
    s.nExpert === c.nExpert &&
    s.nExpertShared === c.nExpertShared &&
    s.nFFExp === c.nFFExp &&
    s.nFF === c.nFF &&
    s.nLeadingDense === c.nLeadingDense &&
    s.nVocab === c.nVocab
  );
}

export function identify(c: ModelConfig): KnownModel | undefined {
  return KNOWN_MODELS.find((m) => matchesShape(m.shape, c));
}

/** One metadata value that disagrees with the published config. */
export interface SettingMismatch {
  readonly key: string;
  readonly file: string | number | boolean;
  readonly published: string | number | boolean;
}

const close = (a: number, b: number): boolean => Math.abs(a - b) <= 1e-3 * Math.max(1, Math.abs(b));

/** The file's settings against one release; `hasBias`: the file holds exp_probs_b tensors. */
export function compareRelease(
  c: ModelConfig,
  meta: Metadata,
  hasBias: boolean,
  r: ReleaseSettings,
): SettingMismatch[] {
  const a = c.arch;
  const out: SettingMismatch[] = [];
  const num = (key: string, file: number, published: number): void => {
    if (!close(file, published)) out.push({ key: `${a}.${key}`, file, published });
  };
  if (c.gating !== r.gating) out.push({ key: `${a}.expert_gating_func`, file: c.gating, published: r.gating });
  if (hasBias !== r.correctionBias)
    out.push({
      key: "exp_probs_b.bias (e_score_correction_bias)",
      file: hasBias ? "present" : "absent",
      published: r.correctionBias ? "present" : "absent",
    });
  num("expert_used_count", c.nExpertUsed, r.nExpertUsed);
  num("expert_group_count", c.nGroup, r.nGroup);
  num("expert_group_used_count", c.nGroupUsed, r.nGroupUsed);
  num("expert_weights_scale", c.weightsScale, r.weightsScale);
  if (c.weightsNorm !== r.weightsNorm)
    out.push({ key: `${a}.expert_weights_norm`, file: c.weightsNorm, published: r.weightsNorm });
  num("rope.freq_base", c.ropeBase, r.ropeBase);
  if ((c.yarn === undefined) !== (r.yarn === null)) {
    out.push({
      key: `${a}.rope.scaling.type`,
      file: c.yarn === undefined ? "none" : "yarn",
      published: r.yarn === null ? "none" : "yarn",
    });
  } else if (c.yarn !== undefined && r.yarn !== null) {
    num("rope.scaling.factor", c.yarn.factor, r.yarn.factor);
    num("rope.scaling.original_context_length", c.yarn.originalContext, r.yarn.originalContext);
    // Betas absent from older files are a separate finding (yarn-beta-missing); only written values are compared.
    if (meta.has(`${a}.rope.scaling.yarn_beta_fast`))
      num("rope.scaling.yarn_beta_fast", c.yarn.betaFast, r.yarn.betaFast);
    if (meta.has(`${a}.rope.scaling.yarn_beta_slow`))
      num("rope.scaling.yarn_beta_slow", c.yarn.betaSlow, r.yarn.betaSlow);
    if (c.yarn.mscaleAllDim !== undefined)
      num("rope.scaling.yarn_log_multiplier", 0.1 * c.yarn.mscaleAllDim, 0.1 * r.yarn.mscaleAllDim);
  }
  return out;
}

/** The release the file matches best (fewest mismatches) and its mismatches. */
export function closestRelease(
  c: ModelConfig,
  meta: Metadata,
  hasBias: boolean,
  m: KnownModel,
): { release: ReleaseSettings; mismatches: SettingMismatch[] } {
  let best: { release: ReleaseSettings; mismatches: SettingMismatch[] } | undefined;
  for (const r of m.releases) {
    const mismatches = compareRelease(c, meta, hasBias, r);
    if (best === undefined || mismatches.length < best.mismatches.length) best = { release: r, mismatches };
  }
  return best!;
}
