/**
 * Metadata that no compute path can catch (every path reads the same wrong value): settings that contradict each
 * other, and settings that contradict the published config of the model the file's shapes identify.
 */
import type { GGUFFile } from "../gguf/file.js";
import type { ModelConfig } from "../model/config.js";
import { closestRelease, identify } from "./known-models.js";
import type { Findings } from "./report.js";

function hasCorrectionBias(file: GGUFFile): boolean {
  for (const n of file.tensors.keys()) if (n.endsWith(".exp_probs_b.bias")) return true;
  return false;
}

function hasMoe(c: ModelConfig): boolean {
  return c.nExpert > 0 && c.nLeadingDense < c.nLayer;
}

/** Settings that cannot all be right, whatever the model. */
export function checkContradictions(file: GGUFFile, c: ModelConfig, f: Findings): void {
  const a = c.arch;
  const bias = hasCorrectionBias(file);
  if (hasMoe(c) && c.gatingSource !== "default-softmax") {
    // (a missing key with a bias present is gating-missing-with-bias, raised by the quirk checks)
    if (c.gating === "softmax" && bias) {
      f.add(
        "metadata",
        "error",
        "softmax-with-bias",
        `${a}.expert_gating_func = 1 (softmax), yet the file has exp_probs_b (e_score_correction_bias): the bias belongs to sigmoid/noaux_tc routing (DeepSeek-V3, Kimi-K2, GLM) and no released softmax model has one — the router picks the wrong experts. Set ${a}.expert_gating_func = 2`,
        { gating: c.gating, source: c.gatingSource },
      );
    }
    if (c.gating === "sigmoid" && !bias) {
      f.add(
        "metadata",
        "error",
        "sigmoid-without-bias",
        `${a}.expert_gating_func selects sigmoid routing, but no layer has exp_probs_b (e_score_correction_bias): every released sigmoid/noaux_tc model selects experts with that bias — it was dropped at conversion (or the gating key is wrong)`,
        { gating: c.gating, source: c.gatingSource },
      );
    }
  }
  if (c.yarn !== undefined) {
    if (c.yarn.originalContext > c.contextLength) {
      f.add(
        "metadata",
        "error",
        "yarn-original-context",
        `${a}.rope.scaling.original_context_length = ${c.yarn.originalContext} exceeds ${a}.context_length = ${c.contextLength}: YaRN extends a shorter training context to a longer one, never the reverse`,
        { originalContext: c.yarn.originalContext, contextLength: c.contextLength },
      );
    } else if (Math.abs(c.contextLength / c.yarn.originalContext - c.yarn.factor) > 0.01 * c.yarn.factor) {
      // Every released YaRN config has max_position_embeddings = factor × original (V2/V3: 40 × 4096 = 163840; Kimi-K2: 32 × 4096, 64 × 4096).
      f.add(
        "metadata",
        "warning",
        "yarn-factor-context",
        `${a}.rope.scaling.factor = ${c.yarn.factor}, but context_length / original_context_length = ${c.contextLength} / ${c.yarn.originalContext} = ${(c.contextLength / c.yarn.originalContext).toFixed(2)}: released YaRN configs have factor = context / original context`,
        { factor: c.yarn.factor, contextLength: c.contextLength, originalContext: c.yarn.originalContext },
      );
    }
  }
  if (!(c.ropeBase > 1))
    f.add("metadata", "error", "rope-base", `${a}.rope.freq_base = ${c.ropeBase}: rope frequencies need a base > 1`, {
      ropeBase: c.ropeBase,
    });
  if (!(c.rmsEps > 0 && c.rmsEps < 1e-2))
    f.add(
      "metadata",
      "error",
      "rms-eps",
      `${a}.attention.layer_norm_rms_epsilon = ${c.rmsEps}: released models use 1e-6 or 1e-5`,
      { rmsEps: c.rmsEps },
    );
  if (hasMoe(c) && !(c.weightsScale > 0))
    f.add(
      "metadata",
      "error",
      "expert-weights-scale",
      `${a}.expert_weights_scale = ${c.weightsScale}: the routed experts' output is scaled by it and must be positive`,
      { weightsScale: c.weightsScale },
    );
}

/** Identify the model by its shapes; where its routing or rope metadata disagree with the published config, say so. */
export function checkAgainstKnownModels(file: GGUFFile, c: ModelConfig, f: Findings): void {
  const model = identify(c);
  if (model === undefined) {
    f.add(
      "metadata",
      "info",
      "not-identified",
      `the shapes (${c.nLayer} layers, hidden ${c.nEmbd}, ${c.nHead} heads, q/kv LoRA ${c.qLoraRank}/${c.kvLoraRank}, ${c.nExpert} experts, vocab ${c.nVocab}) match no published model latent knows: routing and rope settings are not compared with a published config`,
    );
    return;
  }
  const { release, mismatches } = closestRelease(c, file.metadata, hasCorrectionBias(file), model);
  f.add(
    "metadata",
    "info",
    "identified",
    `identified by its shapes as ${model.name} (closest release: ${release.release})`,
    { model: model.name, release: release.release },
  );
  for (const m of mismatches) {
    f.add(
      "metadata",
      "error",
      "published-config-mismatch",
      `${m.key} = ${String(m.file)}, but ${release.release} publishes ${String(m.published)}: the shapes are ${model.name}'s, the metadata is not — every path reads the same wrong value, so only this comparison shows it`,
      { model: model.name, release: release.release, key: m.key, file: m.file, published: m.published },
    );
  }
}
