/**
 * What each way of running a model needs, from its tensor table and config alone (no weights read), and which way
 * fits given budgets (`latent inspect --plan`). Modes:
 * - "cpu": every weight in RAM, CPU kernels.
 * - "cpu-stream": the routed experts read from disk as tokens need them (a cache of them in the rest of the budget);
 *   everything else in RAM.
 * - "gpu": every weight in GPU memory.
 * - "gpu-offload": the routed experts in host memory, uploaded as tokens need them; everything else on the GPU.
 * Byte counts are the tensors' stored sizes (every backend keeps the stored quant types) plus the latent cache; they
 * leave out activations, work buffers and the runtime itself.
 */
import type { GGUFFile } from "../gguf/file.js";
import type { ModelConfig } from "../model/config.js";
import { formatBytes as gb } from "../util/byte-size.js";

export type PlanMode = "cpu" | "cpu-stream" | "gpu" | "gpu-offload";

export interface ExpertLayerBytes {
  readonly layer: number;
  /** the layer's routed-expert tensors (gate, up, down; or the fused gate_up and down) */
  readonly bytes: number;
  /** one expert's share: bytes / expert count */
  readonly perExpert: number;
}

export interface ModeNeed {
  readonly mode: PlanMode;
  /** host memory the mode holds (weights + latent cache at the planned context) */
  readonly hostBytes: number;
  /** GPU memory it holds */
  readonly gpuBytes: number;
  /** bytes read from disk per token when no expert is cached (cpu-stream: every used expert of every MoE layer) */
  readonly diskBytesPerToken: number;
  readonly fits: boolean;
  /** why it does not fit, or what it assumes */
  readonly note: string;
}

export interface MemoryPlan {
  readonly layers: number;
  readonly moeLayers: number;
  readonly experts: number;
  readonly expertsUsed: number;
  /** bytes of the tensors a run reads (the main layers, embedding, head, norms) */
  readonly loadedBytes: number;
  /** bytes of tensors no mode reads (the multi-token-prediction layers after the main stack) */
  readonly unusedBytes: number;
  /** loaded bytes other than routed experts: what every mode keeps in memory */
  readonly residentBytes: number;
  readonly expertBytes: {
    readonly total: number;
    /** the largest layer's */
    readonly perLayer: number;
    /** the largest layer's one expert */
    readonly perExpert: number;
    readonly layers: readonly ExpertLayerBytes[];
  };
  /** the largest main layer's bytes: what `latent doctor --low-memory` holds at once */
  readonly largestLayerBytes: number;
  /** latent cache: floats per token per layer as stored (float32 on CPU and GPU: c, k_pe, and DSA indexer keys) */
  readonly kv: {
    readonly bytesPer1kTokens: number;
    readonly floatsPerTokenLayer: number;
    readonly indexerLayers: number;
    readonly dtype: "f32";
  };
  /** the context the modes' cache bytes are counted for */
  readonly context: number;
  readonly kvBytes: number;
  readonly budgets: { readonly memory: number; readonly gpuMemory: number | undefined };
  readonly modes: readonly ModeNeed[];
  /** the first mode that fits: gpu, gpu-offload, cpu, cpu-stream; undefined when none does */
  readonly choice: PlanMode | undefined;
  readonly reason: string;
}

export interface PlanBudgets {
  /** host memory (bytes) */
  readonly memory: number;
  /** GPU memory (bytes); undefined: no GPU */
  readonly gpuMemory?: number | undefined;
  /** context positions the latent cache is counted for (default 4096) */
  readonly context?: number;
}

const EXPERT_TENSOR = /^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_exps\.weight$/;
const LAYER_TENSOR = /^blk\.(\d+)\./;

export function planMemory(file: GGUFFile, c: ModelConfig, budgets: PlanBudgets): MemoryPlan {
  const context = budgets.context ?? 4096;
  let loaded = 0;
  let unused = 0;
  const layerBytes = new Array<number>(c.nLayer).fill(0);
  const expertLayer = new Map<number, number>();
  const indexerLayers = new Set<number>();
  for (const t of file.tensors.values()) {
    const lm = LAYER_TENSOR.exec(t.name);
    const il = lm === null ? -1 : Number(lm[1]);
    if (il >= c.nLayer) {
      unused += t.nbytes;
      continue;
    }
    loaded += t.nbytes;
    if (il < 0) continue;
    layerBytes[il] += t.nbytes;
    if (EXPERT_TENSOR.test(t.name)) expertLayer.set(il, (expertLayer.get(il) ?? 0) + t.nbytes);
    if (t.name === `blk.${il}.indexer.attn_k.weight`) indexerLayers.add(il);
  }
  const E = Math.max(1, c.nExpert);
  const layers = [...expertLayer.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([layer, bytes]) => ({ layer, bytes, perExpert: Math.ceil(bytes / E) }));
  const expertTotal = layers.reduce((a, l) => a + l.bytes, 0);
  const perLayer = Math.max(0, ...layers.map((l) => l.bytes));
  const perExpert = Math.max(0, ...layers.map((l) => l.perExpert));
  const resident = loaded - expertTotal;

  const floats = c.kvLoraRank + c.qkRope;
  const idx = c.indexer?.headDim ?? 0;
  const kvPerToken = 4 * (c.nLayer * floats + indexerLayers.size * idx);
  const kvBytes = kvPerToken * context;
  const M = budgets.memory;
  const G = budgets.gpuMemory;
  // the least a streamed run can hold of the experts: one token's experts of one layer
  const minCache = Math.min(perLayer, perExpert * Math.max(1, c.nExpertUsed));
  const streamRead = layers.reduce((a, l) => a + Math.min(l.bytes, l.perExpert * c.nExpertUsed), 0);
  const hasExperts = expertTotal > 0;

  const modes: ModeNeed[] = [];
  const need = (mode: PlanMode, host: number, gpu: number, disk: number, fits: boolean, note: string): void => {
    modes.push({ mode, hostBytes: host, gpuBytes: gpu, diskBytesPerToken: disk, fits, note });
  };
  if (G !== undefined) {
    need("gpu", 0, loaded + kvBytes, 0, loaded + kvBytes <= G, `${gb(loaded + kvBytes)} of GPU memory (${gb(G)})`);
    if (hasExperts) {
      const fits = resident + kvBytes <= G && expertTotal <= M;
      need(
        "gpu-offload",
        expertTotal,
        resident + kvBytes,
        0,
        fits,
        `${gb(resident + kvBytes)} on the GPU (${gb(G)}), the experts' ${gb(expertTotal)} in host memory (${gb(M)})`,
      );
    }
  }
  need("cpu", loaded + kvBytes, 0, 0, loaded + kvBytes <= M, `${gb(loaded + kvBytes)} of host memory (${gb(M)})`);
  if (hasExperts) {
    const host = resident + kvBytes + minCache;
    need(
      "cpu-stream",
      host,
      0,
      streamRead,
      host <= M,
      `${gb(resident + kvBytes)} resident + an expert cache of at least ${gb(minCache)} (one token's experts of one layer) in ${gb(M)}; the rest of the budget caches experts`,
    );
  }
  const chosen = modes.find((m) => m.fits);
  const reason =
    chosen !== undefined
      ? `${chosen.mode}: ${chosen.note}`
      : `no mode fits: the smallest needs ${gb(Math.min(...modes.map((m) => m.hostBytes || m.gpuBytes)))}; \`latent doctor --low-memory\` still computes reference logits holding one layer (${gb(Math.max(0, ...layerBytes))})`;
  return {
    layers: c.nLayer,
    moeLayers: layers.length,
    experts: c.nExpert,
    expertsUsed: c.nExpertUsed,
    loadedBytes: loaded,
    unusedBytes: unused,
    residentBytes: resident,
    expertBytes: { total: expertTotal, perLayer, perExpert, layers },
    largestLayerBytes: Math.max(0, ...layerBytes),
    kv: {
      bytesPer1kTokens: kvPerToken * 1000,
      floatsPerTokenLayer: floats,
      indexerLayers: indexerLayers.size,
      dtype: "f32",
    },
    context,
    kvBytes,
    budgets: { memory: M, gpuMemory: G },
    modes,
    choice: chosen?.mode,
    reason,
  };
}
