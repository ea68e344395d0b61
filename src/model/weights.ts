import type { GGUFFile } from "../gguf/file.js";
import type { TensorInfo } from "../gguf/reader.js";
import { GGMLType, typeName } from "../gguf/types.js";
import { canDequantize, dequantize } from "../quant/index.js";
import { QMatrix } from "../tensor/qmatrix.js";
import { GGUFError, ModelConfigError, QuantTypeError } from "../util/errors.js";
import type { ModelConfig } from "./config.js";
import { findNonFinite } from "./nonfinite.js";

export interface IndexerWeights {
  /** {Lq, n_idx·D}: indexer queries from the normed q-LoRA latent; per head [rope | nope] */
  readonly qB: QMatrix;
  /** {Hd, D} */
  readonly k: QMatrix;
  readonly kNormW: Float32Array;
  readonly kNormB: Float32Array;
  /** {Hd, n_idx}: per-head weights */
  readonly proj: QMatrix;
}

export interface AttentionWeights {
  readonly norm: Float32Array;
  /** single q projection {Hd, H·(P+R)} when there is no q-LoRA */
  readonly q: QMatrix | undefined;
  readonly qA: QMatrix | undefined;
  readonly qANorm: Float32Array | undefined;
  readonly qB: QMatrix | undefined;
  /** {Hd, L+R} → [c (L) | k_pe (R)] */
  readonly kvA: QMatrix;
  readonly kvANorm: Float32Array;
  /** per head W_UKᵀ: L rows of P (q_abs = kB[h]·q_nope; k_nope = kB[h]ᵀ·c) */
  readonly kB: readonly QMatrix[];
  /** per head W_UV: V rows of L */
  readonly vB: readonly QMatrix[];
  /** HF kv_b_proj [H·(P+V) rows × L], for the reference path: from the file (legacy) or reassembled on first use */
  kvB(): QMatrix;
  /** {H·V, Hd} */
  readonly o: QMatrix;
  readonly indexer: IndexerWeights | undefined;
}

export interface SwiGLU {
  readonly gate: QMatrix;
  readonly up: QMatrix;
  readonly down: QMatrix;
}

export interface MoEWeights {
  /** {Hd, E} */
  readonly router: QMatrix;
  /** e_score_correction_bias {E}, selection only */
  readonly bias: Float32Array | undefined;
  /** the routed experts, resident (empty when they are streamed) */
  readonly experts: readonly SwiGLU[];
  /** routed experts read from the file on demand (ExpertStore), instead of `experts` */
  readonly streamed?: StreamedExperts;
  readonly shared: SwiGLU | undefined;
}

/** The stacked expert tensors of one layer, shape-checked by the loader. */
export interface ExpertTensors {
  readonly gateUp?: TensorInfo;
  readonly gate?: TensorInfo;
  readonly up?: TensorInfo;
  readonly down: TensorInfo;
}

/** One layer's handle on the store: what a MoE forward asks for its chosen experts. */
export interface StreamedExperts {
  /** most experts one request may ask for */
  readonly capacity: number;
  /** whether expert e of this layer is in the cache now */
  isCached(e: number): boolean;
  /** the experts `ids` of this layer (distinct): the missing ones start being read; valid until the next request */
  request(ids: readonly number[]): ExpertRequest;
}

/** Experts asked for: those cached are usable now, `wait` returns all of them once the missing ones are read. */
export interface ExpertRequest {
  /** by position in the request: the expert when it was cached, else undefined */
  readonly cached: readonly (SwiGLU | undefined)[];
  wait(): SwiGLU[];
}

/** Where the loader registers each MoE layer's routed experts instead of loading them (ExpertStore). */
export interface ExpertRegistry {
  addLayer(il: number, tensors: ExpertTensors, nExperts: number, nFF: number): StreamedExperts;
}

export interface LayerWeights {
  readonly attn: AttentionWeights;
  readonly ffnNorm: Float32Array;
  readonly dense: SwiGLU | undefined;
  readonly moe: MoEWeights | undefined;
}

export interface ModelWeights {
  readonly tokenEmbd: QMatrix;
  readonly outputNorm: Float32Array;
  readonly output: QMatrix;
  readonly layers: readonly LayerWeights[];
  /** "current" = attn_k_b/attn_v_b, "legacy" = attn_kv_b */
  readonly generation: "current" | "legacy";
  readonly bytes: number;
}

export type LoadProgress = (doneBytes: number, totalBytes: number) => void;

/**
 * What to do with a tensor that holds NaN or ±Inf: "refuse" (a GGUFError naming it), "ignore" (no scan: the doctor
 * scans on its own), or a function that is told of each such tensor (one message each) while it is loaded anyway.
 */
export type NonFinitePolicy = "refuse" | "ignore" | ((message: string) => void);

function f32Matrix(name: string, cols: number, rows: number, values: Float32Array): QMatrix {
  return new QMatrix(
    name,
    GGMLType.F32,
    cols,
    rows,
    new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
  );
}

/** Loads a model's tensors into memory in their own quant types, checking every shape against the config. */
class Loader {
  bytes = 0;
  private readonly total: number;

  constructor(
    private readonly file: GGUFFile,
    private readonly onProgress: LoadProgress | undefined,
    private readonly nonFinite: NonFinitePolicy,
    /** routed experts go here instead of into memory */
    readonly store?: ExpertRegistry,
  ) {
    let t = 0;
    for (const info of file.tensors.values())
      if (store === undefined || !/_exps\.weight$/.test(info.name)) t += info.nbytes;
    this.total = t;
  }

  has(name: string): boolean {
    return this.file.tensors.has(name);
  }

  /** A tensor's info after checking its shape and type against the config (nothing is read). */
  info(name: string, ne: readonly number[]): TensorInfo {
    const info = this.file.tensors.get(name);
    if (info === undefined) throw new ModelConfigError(`missing tensor "${name}" (expected shape ${ne.join("x")})`);
    const same =
      info.ne.length >= ne.length &&
      ne.every((n, i) => info.ne[i] === n) &&
      info.ne.slice(ne.length).every((n) => n === 1);
    if (!same)
      throw new ModelConfigError(
        `tensor "${name}" has shape ${info.ne.join("x")}, expected ${ne.join("x")} from the metadata${this.shardHint(info)}`,
      );
    if (!canDequantize(info.type))
      throw new QuantTypeError(
        `tensor "${name}" has type ${typeName(info.type)} (id ${info.type}), which latent cannot decode`,
      );
    return info;
  }

  private read(info: TensorInfo): Uint8Array {
    const data = this.file.readBytes(info);
    if (this.nonFinite !== "ignore") this.scan(info, data);
    this.bytes += data.length;
    this.onProgress?.(this.bytes, this.total);
    return data;
  }

  /** Where a tensor of a split model lives: a shape that disagrees there often means shards of two models mixed. */
  private shardHint(info: TensorInfo): string {
    const n = this.file.shards.length;
    if (n <= 1) return "";
    const where =
      info.shard === 0 ? "the first shard" : `shard ${info.shard + 1} of ${n}, ${this.file.shards[info.shard].path}`;
    return ` (in ${where}; the metadata comes from the first shard — are the shards from a different model?)`;
  }

  private scan(info: TensorInfo, data: Uint8Array): void {
    const at = findNonFinite(
      info.type,
      data,
      info.ne.reduce((a, b) => a * b, 1),
    );
    if (at === undefined) return;
    const message = `tensor "${info.name}" (${typeName(info.type)}) holds NaN or ±Inf (first at ${at.unit} ${at.index}): every output that touches it is garbage (a corrupt download or a bad conversion)`;
    if (this.nonFinite === "refuse")
      throw new GGUFError(`${message}; run \`latent doctor\` on the file, or pass --allow-nonfinite to load it anyway`);
    if (this.nonFinite !== "ignore") this.nonFinite(message);
  }

  /** A 2-D or stacked 3-D tensor {cols, rows, stack} as one matrix of rows·stack rows. */
  matrix(name: string, cols: number, rows: number, stack = 1): QMatrix {
    const info = this.info(name, stack === 1 ? [cols, rows] : [cols, rows, stack]);
    return new QMatrix(name, info.type, cols, rows * stack, this.read(info));
  }

  vector(name: string, n: number): Float32Array {
    const info = this.info(name, [n]);
    return dequantize(info.type, this.read(info), n);
  }

  optionalVector(name: string, n: number): Float32Array | undefined {
    return this.has(name) ? this.vector(name, n) : undefined;
  }
}

function perRows(m: QMatrix, count: number, rowsEach: number, label: string): QMatrix[] {
  return Array.from({ length: count }, (_, i) => m.slice(i * rowsEach, rowsEach, `${m.name}[${label}${i}]`));
}

function loadAttention(ld: Loader, c: ModelConfig, i: number): AttentionWeights {
  const p = `blk.${i}.`;
  const { nEmbd: Hd, nHead: H, qkNope: P, qkRope: R, vHead: V, kvLoraRank: L, qLoraRank: Lq } = c;
  const useQLora = Lq > 0 && ld.has(`${p}attn_q_a.weight`);
  const q = useQLora ? undefined : ld.matrix(`${p}attn_q.weight`, Hd, H * (P + R));
  const qA = useQLora ? ld.matrix(`${p}attn_q_a.weight`, Hd, Lq) : undefined;
  const qANorm = useQLora ? ld.vector(`${p}attn_q_a_norm.weight`, Lq) : undefined;
  const qB = useQLora ? ld.matrix(`${p}attn_q_b.weight`, Lq, H * (P + R)) : undefined;
  const kvA = ld.matrix(`${p}attn_kv_a_mqa.weight`, Hd, L + R);
  const kvANorm = ld.vector(`${p}attn_kv_a_norm.weight`, L);

  let kB: QMatrix[];
  let vB: QMatrix[];
  let kvBFile: QMatrix | undefined;
  if (ld.has(`${p}attn_k_b.weight`)) {
    kB = perRows(ld.matrix(`${p}attn_k_b.weight`, P, L, H), H, L, "head ");
    vB = perRows(ld.matrix(`${p}attn_v_b.weight`, L, V, H), H, V, "head ");
  } else if (ld.has(`${p}attn_kv_b.weight`)) {
    // Legacy: kv_b rows per head are [P rows of W_UK | V rows of W_UV], each of length L.
    const kvB = ld.matrix(`${p}attn_kv_b.weight`, L, H * (P + V));
    kvBFile = kvB;
    vB = Array.from({ length: H }, (_, h) => kvB.slice(h * (P + V) + P, V, `${kvB.name}[v head ${h}]`));
    kB = Array.from({ length: H }, (_, h) => {
      const t = new Float32Array(L * P);
      for (let pp = 0; pp < P; pp++) {
        const row = kvB.row(h * (P + V) + pp);
        for (let cc = 0; cc < L; cc++) t[cc * P + pp] = row[cc];
      }
      return f32Matrix(`${kvB.name}[k head ${h}]ᵀ`, P, L, t);
    });
  } else {
    throw new ModelConfigError(`layer ${i} has neither attn_k_b/attn_v_b nor the legacy attn_kv_b`);
  }

  let kvBCache = kvBFile;
  const kvB = (): QMatrix => {
    if (kvBCache === undefined) kvBCache = reassembleKvB(kB, vB, `${p}attn_kv_b.weight`, P, V, L);
    return kvBCache;
  };

  let indexer: IndexerWeights | undefined;
  if (c.indexer !== undefined && ld.has(`${p}indexer.attn_k.weight`)) {
    const { nHead: Hi, headDim: Di } = c.indexer;
    if (Lq === 0) throw new ModelConfigError(`the DSA indexer of layer ${i} needs q-LoRA (q_lora_rank > 0)`);
    indexer = {
      qB: ld.matrix(`${p}indexer.attn_q_b.weight`, Lq, Hi * Di),
      k: ld.matrix(`${p}indexer.attn_k.weight`, Hd, Di),
      kNormW: ld.vector(`${p}indexer.k_norm.weight`, Di),
      kNormB: ld.vector(`${p}indexer.k_norm.bias`, Di),
      proj: ld.matrix(`${p}indexer.proj.weight`, Hd, Hi),
    };
  } else if (c.indexer !== undefined) {
    throw new ModelConfigError(
      `layer ${i} has no indexer tensors (blk.${i}.indexer.*); shared-indexer layers are not supported yet`,
    );
  }

  return {
    norm: ld.vector(`${p}attn_norm.weight`, Hd),
    q,
    qA,
    qANorm,
    qB,
    kvA,
    kvANorm,
    kB,
    vB,
    kvB,
    o: ld.matrix(`${p}attn_output.weight`, H * V, Hd),
    indexer,
  };
}

/** HF kv_b_proj from the split tensors: rows h(P+V)+p = column p of W_UKᵀ[h], rows h(P+V)+P+d = row d of W_UV[h]. */
export function reassembleKvB(
  kB: readonly QMatrix[],
  vB: readonly QMatrix[],
  name: string,
  P: number,
  V: number,
  L: number,
): QMatrix {
  const H = kB.length;
  const out = new Float32Array(H * (P + V) * L);
  for (let h = 0; h < H; h++) {
    const base = h * (P + V) * L;
    for (let c = 0; c < L; c++) {
      const row = kB[h].row(c);
      for (let p = 0; p < P; p++) out[base + p * L + c] = row[p];
    }
    for (let d = 0; d < V; d++) out.set(vB[h].row(d), base + (P + d) * L);
  }
  return f32Matrix(name, L, H * (P + V), out);
}

function loadSwiGLU(ld: Loader, prefix: string, suffix: string, nIn: number, nFF: number): SwiGLU {
  return {
    gate: ld.matrix(`${prefix}ffn_gate${suffix}.weight`, nIn, nFF),
    up: ld.matrix(`${prefix}ffn_up${suffix}.weight`, nIn, nFF),
    down: ld.matrix(`${prefix}ffn_down${suffix}.weight`, nFF, nIn),
  };
}

function loadMoE(ld: Loader, c: ModelConfig, i: number): MoEWeights {
  const p = `blk.${i}.`;
  const { nEmbd: Hd, nFFExp: Fe, nExpert: E } = c;
  const streamed = ld.store === undefined ? undefined : streamExperts(ld, ld.store, c, i);
  const experts = streamed === undefined ? loadExperts(ld, c, i) : [];
  const shared = c.nExpertShared > 0 ? loadSwiGLU(ld, p, "_shexp", Hd, Fe * c.nExpertShared) : undefined;
  return {
    router: ld.matrix(`${p}ffn_gate_inp.weight`, Hd, E),
    bias: ld.optionalVector(`${p}exp_probs_b.bias`, E),
    experts,
    ...(streamed === undefined ? {} : { streamed }),
    shared,
  };
}

function loadExperts(ld: Loader, c: ModelConfig, i: number): SwiGLU[] {
  const p = `blk.${i}.`;
  const { nEmbd: Hd, nFFExp: Fe, nExpert: E } = c;
  let gates: QMatrix[];
  let ups: QMatrix[];
  if (ld.has(`${p}ffn_gate_up_exps.weight`)) {
    // fused: per expert rows [0,Fe) gate, [Fe,2Fe) up
    const gu = ld.matrix(`${p}ffn_gate_up_exps.weight`, Hd, 2 * Fe, E);
    gates = Array.from({ length: E }, (_, e) => gu.slice(e * 2 * Fe, Fe, `${gu.name}[gate ${e}]`));
    ups = Array.from({ length: E }, (_, e) => gu.slice(e * 2 * Fe + Fe, Fe, `${gu.name}[up ${e}]`));
  } else {
    gates = perRows(ld.matrix(`${p}ffn_gate_exps.weight`, Hd, Fe, E), E, Fe, "expert ");
    ups = perRows(ld.matrix(`${p}ffn_up_exps.weight`, Hd, Fe, E), E, Fe, "expert ");
  }
  const downs = perRows(ld.matrix(`${p}ffn_down_exps.weight`, Fe, Hd, E), E, Hd, "expert ");
  return gates.map((gate, e) => ({ gate, up: ups[e], down: downs[e] }));
}

/** Layer i's stacked expert tensors, shape-checked but not read, registered with the store. */
function streamExperts(ld: Loader, store: ExpertRegistry, c: ModelConfig, i: number): StreamedExperts {
  const p = `blk.${i}.`;
  const { nEmbd: Hd, nFFExp: Fe, nExpert: E } = c;
  const down = ld.info(`${p}ffn_down_exps.weight`, [Fe, Hd, E]);
  const tensors = ld.has(`${p}ffn_gate_up_exps.weight`)
    ? { gateUp: ld.info(`${p}ffn_gate_up_exps.weight`, [Hd, 2 * Fe, E]), down }
    : {
        gate: ld.info(`${p}ffn_gate_exps.weight`, [Hd, Fe, E]),
        up: ld.info(`${p}ffn_up_exps.weight`, [Hd, Fe, E]),
        down,
      };
  return store.addLayer(i, tensors, E, Fe);
}

function loadLayer(ld: Loader, c: ModelConfig, i: number): LayerWeights {
  const attn = loadAttention(ld, c, i);
  const ffnNorm = ld.vector(`blk.${i}.ffn_norm.weight`, c.nEmbd);
  const isDense = i < c.nLeadingDense || c.nExpert === 0;
  return {
    attn,
    ffnNorm,
    dense: isDense ? loadSwiGLU(ld, `blk.${i}.`, "", c.nEmbd, c.nFF) : undefined,
    moe: isDense ? undefined : loadMoE(ld, c, i),
  };
}

/** One layer's weights alone (`latent doctor --low-memory` streams layers from disk, one at a time). */
export function loadLayerWeights(file: GGUFFile, c: ModelConfig, i: number): LayerWeights {
  return loadLayer(new Loader(file, undefined, "ignore"), c, i);
}

/**
 * Load every weight. `nonFinite` says whether each is scanned for NaN/±Inf as it is read (NonFinitePolicy): the
 * default "ignore" is for the doctor, which scans and reports on its own; loadModelFrom — every other path — refuses.
 * With a `store`, the routed experts are not loaded: each MoE layer reads them from the file through it, on demand
 * (they are not scanned for NaN/±Inf).
 */
export function loadWeights(
  file: GGUFFile,
  c: ModelConfig,
  onProgress?: LoadProgress,
  nonFinite: NonFinitePolicy = "ignore",
  store?: ExpertRegistry,
): ModelWeights {
  const ld = new Loader(file, onProgress, nonFinite, store);
  const tokenEmbd = ld.matrix("token_embd.weight", c.nEmbd, c.nVocab);
  const outputNorm = ld.vector("output_norm.weight", c.nEmbd);
  const output = ld.has("output.weight") ? ld.matrix("output.weight", c.nEmbd, c.nVocab) : tokenEmbd;
  const layers: LayerWeights[] = [];
  for (let i = 0; i < c.nLayer; i++) layers.push(loadLayer(ld, c, i));
  const generation = file.tensors.has("blk.0.attn_kv_b.weight") ? "legacy" : "current";
  return { tokenEmbd, outputNorm, output, layers, generation, bytes: ld.bytes };
}
