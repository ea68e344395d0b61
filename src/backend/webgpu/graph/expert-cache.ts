/// <reference types="@webgpu/types" />
/**
 * Routed experts under a GPU memory budget (`--gpu-memory`): the layers whose experts do not fit stay in host memory
 * (their GGUF bytes) and reach the GPU through an expert cache — per expert signature (the gate/up/down types and
 * shapes; a Q4_K_M file mixes Q4_K and Q6_K down products), one pool of slots, each slot holding one expert's three
 * matrices, shared by all the streamed layers of that signature, so hot experts stay. A step visits the layers in
 * order, so an expert of layer j can next be used when the steps come back to j: a slot is taken from the layer whose
 * turn comes last — the current layer's experts this step did not choose, then the layer before it, and so on
 * backwards — least recently used within that layer. (One LRU order over all layers evicts every expert before its
 * layer comes back whenever a step's experts outnumber the slots: no hits at all.)
 * A step routes a streamed layer on the GPU, reads the chosen ids back, uploads the missing experts into free or
 * evicted slots (queue writes, ordered before the rest of the step) and rewrites the ids to slot indices, which the
 * expert products then gather from the pool instead of the layer's own stacked tensors.
 */
import { formatBinaryBytes } from "../../../util/byte-size.js";
import type { ModelConfig } from "../../../model/config.js";
import type { LayerWeights, SwiGLU } from "../../../model/weights.js";
import { LatentError } from "../../../util/errors.js";
import type { GpuRuntime } from "../core/runtime.js";
import { GpuMatrix } from "../kernels/matmul/matrix.js";
import { uploadExperts, type GpuFFN, type GpuLayer } from "./weights.js";

/** What a pool's slots must match: the three matrices' types and shapes. */
export function expertSignature(e: SwiGLU): string {
  return [e.gate, e.up, e.down].map((m) => `${m.type}:${m.cols}x${m.rows}`).join("|");
}

/** Bytes of one expert (gate, up and down). */
export function expertBytes(e: SwiGLU): number {
  return e.gate.data.byteLength + e.up.data.byteLength + e.down.data.byteLength;
}

/** A MoE layer as the plan sees it. */
export interface PlanLayer {
  readonly layer: number;
  readonly experts: number;
  readonly signature: string;
  /** bytes of one of its experts */
  readonly expertBytes: number;
}

/** Which layers keep their experts on the GPU, and how many slots each signature's pool of streamed experts has. */
export interface ExpertPlan {
  readonly residentLayers: ReadonlySet<number>;
  readonly slots: ReadonlyMap<string, number>;
}

const GB = (b: number): string => `${formatBinaryBytes(b, 2)} (${b} bytes)`;

/**
 * Split `budget` bytes of GPU memory: `resident` bytes (everything but the routed experts: attention, dense and
 * shared FFNs, norms, embeddings, output, latent caches, step buffers) first; then whole layers' experts, in layer
 * order, while the layers left streamed still get pools of at least `minSlots` experts (a step's distinct experts of
 * one layer, min(experts, tokens × used)); the rest shared among the pools in proportion to their layers' experts.
 * Throws, naming the numbers, where the budget cannot hold the resident part and those smallest pools.
 */
export function planExperts(
  budget: number,
  resident: number,
  layers: readonly PlanLayer[],
  minSlots: number,
): ExpertPlan {
  const all = layers.reduce((s, l) => s + l.experts * l.expertBytes, 0);
  if (resident > budget)
    throw new LatentError(
      `--gpu-memory ${GB(budget)} is below what must stay on the GPU, ${GB(resident)} (attention, dense and shared FFNs, norms, embeddings, output, latent caches and step buffers)`,
    );
  let free = budget - resident;
  if (all <= free) return { residentLayers: new Set(layers.map((l) => l.layer)), slots: new Map() };
  const poolMin = (streamed: readonly PlanLayer[]): number => {
    const bySig = new Map<string, PlanLayer>();
    for (const l of streamed) bySig.set(l.signature, l);
    let bytes = 0;
    for (const l of bySig.values()) bytes += Math.min(minSlots, layerExperts(streamed, l.signature)) * l.expertBytes;
    return bytes;
  };
  const need = poolMin(layers);
  if (need > free)
    throw new LatentError(
      `--gpu-memory ${GB(budget)} cannot hold the resident part, ${GB(resident)}, and an expert cache of one step's experts per layer (${minSlots} a pool: ${GB(need)}); raise the budget or take fewer tokens a step`,
    );
  const residentLayers = new Set<number>();
  let streamed = [...layers];
  for (const l of layers) {
    const rest = streamed.filter((x) => x !== l);
    const bytes = l.experts * l.expertBytes;
    if (rest.length > 0 && free - bytes >= poolMin(rest)) {
      residentLayers.add(l.layer);
      free -= bytes;
      streamed = rest;
    }
  }
  // each signature its smallest pool, then the bytes left in proportion to its streamed experts' bytes
  const sigs = [...new Set(streamed.map((l) => l.signature))];
  const per = new Map(streamed.map((l) => [l.signature, l.expertBytes]));
  const most = new Map(sigs.map((s) => [s, layerExperts(streamed, s)]));
  const least = new Map(sigs.map((s) => [s, Math.min(minSlots, most.get(s)!)]));
  const spare = free - sigs.reduce((b, s) => b + least.get(s)! * per.get(s)!, 0);
  const wanted = sigs.reduce((b, s) => b + (most.get(s)! - least.get(s)!) * per.get(s)!, 0);
  // Σ extra·bytes ≤ fraction · wanted ≤ spare
  const fraction = wanted > 0 ? Math.min(1, spare / wanted) : 0;
  const slots = new Map(sigs.map((s) => [s, least.get(s)! + Math.floor((most.get(s)! - least.get(s)!) * fraction)]));
  return { residentLayers, slots };
}

function layerExperts(layers: readonly PlanLayer[], signature: string): number {
  return layers.filter((l) => l.signature === signature).reduce((s, l) => s + l.experts, 0);
}

/** Counts of the cache's work so far. */
export interface ExpertCacheStats {
  /** (layer, expert) look-ups: one per distinct expert a streamed layer's step routes to */
  lookups: number;
  /** look-ups found in a slot */
  hits: number;
  /** experts written into a slot */
  uploads: number;
  uploadedBytes: number;
}

/** One signature's slots: their matrices on the GPU and which (layer, expert) each holds. */
class ExpertPool {
  readonly ffn: GpuFFN;
  /** per layer: expert → slot, in use order (a Map keeps insertion order: the first is the least recent) */
  readonly held = new Map<number, Map<number, number>>();
  readonly free: number[] = [];
  /** the streamed layers using the pool, ascending (the order a step visits them) */
  readonly layers: number[] = [];

  constructor(
    rt: GpuRuntime,
    signature: string,
    readonly slots: number,
    e: SwiGLU,
  ) {
    const make = (m: SwiGLU["gate"], part: string): GpuMatrix =>
      GpuMatrix.empty(rt, `expert cache ${part} [${signature}]`, m.type, m.cols, m.rows, slots);
    this.ffn = { gate: make(e.gate, "gate"), up: make(e.up, "up"), down: make(e.down, "down") };
    for (let s = slots - 1; s >= 0; s--) this.free.push(s);
  }
}

/** Most items an expert-list product reads (kernels/matmul expertLists): larger pools are split. */
export const POOL_LIST_MAX = 256;

/**
 * A slot for layer `il`: the least recently used expert of the layer whose turn comes last — `il` itself (an expert
 * this step did not choose: `chosen` holds those it did), then the layers before it, wrapping around.
 */
function evict(pool: ExpertPool, il: number, chosen: ReadonlyMap<number, number>): number {
  const at = pool.layers.indexOf(il);
  const L = pool.layers.length;
  for (let k = 0; k < L; k++) {
    const j = pool.layers[(at - k + L) % L]!;
    const held = pool.held.get(j)!;
    for (const [e, s] of held) {
      if (j === il && chosen.has(e)) continue;
      held.delete(e);
      return s;
    }
  }
  // (unreachable: a step's distinct experts never outnumber the slots, so some slot holds another's)
  throw new LatentError(`layer ${il}: no expert cache slot to take`);
}

/** The streamed layers' experts in host memory and the pools they pass through. */
export class ExpertCache {
  readonly stats: ExpertCacheStats = { lookups: 0, hits: 0, uploads: 0, uploadedBytes: 0 };
  /**
   * Bytes of queue writes after which assign() waits for the GPU: each write goes through a staging copy the driver
   * keeps until the work after it completes, and a prefill step may bring whole layers' experts (GBs) at once
   */
  flushBytes = 512 * 2 ** 20;
  private readonly pools = new Map<string, ExpertPool>();
  private readonly layerPool = new Map<number, ExpertPool>();

  /**
   * `slots` per signature; a signature's slots past POOL_LIST_MAX are split into pools of at most that many (each
   * at least `minSlots`, a step's distinct experts of one layer, where the slots allow), each serving every k-th of
   * its streamed layers: the expert products read lists of the pairs by expert (the row-tiled prefill kernel) only
   * over that many items.
   */
  constructor(
    private readonly rt: GpuRuntime,
    /** each streamed layer's experts (host bytes) */
    private readonly host: ReadonlyMap<number, readonly SwiGLU[]>,
    slots: ReadonlyMap<string, number>,
    minSlots = 1,
  ) {
    const bySig = new Map<string, number[]>();
    for (const [il, experts] of host) {
      const sig = expertSignature(experts[0]);
      if (!((slots.get(sig) ?? 0) >= 1)) throw new LatentError(`layer ${il}: no expert cache slots for ${sig}`);
      bySig.set(sig, [...(bySig.get(sig) ?? []), il]);
    }
    for (const [sig, layers] of bySig) {
      layers.sort((a, b) => a - b);
      const n = slots.get(sig)!;
      const groups = Math.max(
        1,
        Math.min(Math.ceil(n / POOL_LIST_MAX), Math.floor(n / Math.max(1, minSlots)), layers.length),
      );
      for (let g = 0; g < groups; g++) {
        const key = groups > 1 ? `${sig}#${g}` : sig;
        const pool = new ExpertPool(
          rt,
          key,
          Math.floor(n / groups) + (g < n % groups ? 1 : 0),
          host.get(layers[0])![0],
        );
        this.pools.set(key, pool);
        for (const il of layers.filter((_, i) => i % groups === g)) {
          pool.layers.push(il);
          pool.held.set(il, new Map());
          this.layerPool.set(il, pool);
        }
      }
    }
  }

  /** Whether layer `il`'s experts go through the cache. */
  streams(il: number): boolean {
    return this.layerPool.has(il);
  }

  /** The pool matrices layer `il`'s expert products read (items = its slots). */
  ffnOf(il: number): GpuFFN {
    const p = this.layerPool.get(il);
    if (p === undefined) throw new LatentError(`layer ${il} has no streamed experts`);
    return p.ffn;
  }

  /** Slots of every pool, by signature (`#k` after it: the k-th of a signature's split pools). */
  slotCounts(): Map<string, number> {
    return new Map([...this.pools].map(([s, p]) => [s, p.slots]));
  }

  /** Bytes of the pools on the GPU. */
  get bytes(): number {
    let b = 0;
    for (const p of this.pools.values()) b += p.ffn.gate.bytes + p.ffn.up.bytes + p.ffn.down.bytes;
    return b;
  }

  /**
   * Slot indices for layer `il`'s routed expert ids (one per pair), the missing experts written into free slots or
   * those whose layer comes back last (the class comment) first (queue writes: before the next submission). A step's
   * own experts are never evicted for each other: more distinct experts than slots is refused.
   */
  async assign(il: number, ids: Uint32Array): Promise<Uint32Array> {
    const pool = this.layerPool.get(il);
    const experts = this.host.get(il);
    if (pool === undefined || experts === undefined) throw new LatentError(`layer ${il} has no streamed experts`);
    const distinct = [...new Set(ids)];
    if (distinct.length > pool.slots)
      throw new LatentError(
        `layer ${il}: a step routed to ${distinct.length} distinct experts, more than the expert cache's ${pool.slots} slots`,
      );
    const slotOf = new Map<number, number>();
    const missing: number[] = [];
    const mine = pool.held.get(il)!;
    for (const e of distinct) {
      if (!(e < experts.length)) throw new LatentError(`layer ${il}: routed to expert ${e} of ${experts.length}`);
      this.stats.lookups++;
      const s = mine.get(e);
      if (s === undefined) {
        missing.push(e);
        continue;
      }
      this.stats.hits++;
      // most recently used: to the end of the Map's order
      mine.delete(e);
      mine.set(e, s);
      slotOf.set(e, s);
    }
    let unflushed = 0;
    for (const e of missing) {
      const s = pool.free.pop() ?? evict(pool, il, slotOf);

      const x = experts[e];
      pool.ffn.gate.writeItem(this.rt, s, x.gate.data);
      pool.ffn.up.writeItem(this.rt, s, x.up.data);
      pool.ffn.down.writeItem(this.rt, s, x.down.data);
      this.stats.uploads++;
      this.stats.uploadedBytes += expertBytes(x);
      mine.set(e, s);
      slotOf.set(e, s);
      unflushed += expertBytes(x);
      if (unflushed >= this.flushBytes) {
        await this.rt.sync();
        unflushed = 0;
      }
    }
    return Uint32Array.from(ids, (e) => slotOf.get(e)!);
  }

  destroy(): void {
    for (const p of this.pools.values()) for (const m of [p.ffn.gate, p.ffn.up, p.ffn.down]) m.destroy();
  }
}

/** How GpuModel places the routed experts (GpuModelOptions): a budget, or a cache set directly. */
export interface ExpertPlacement {
  readonly maxTokens: number;
  readonly gpuMemory?: number;
  readonly expertCache?: { readonly slots: number; readonly residentLayers?: readonly number[] };
}

/**
 * The routed experts of a model whose other weights (`layers`, uploaded without experts) take `resident` bytes: the
 * plan's resident layers uploaded whole into their GpuLayer, the others streamed through the returned expert cache
 * (undefined where everything fits).
 */
export function placeExperts(
  rt: GpuRuntime,
  c: ModelConfig,
  weights: readonly LayerWeights[],
  layers: GpuLayer[],
  o: ExpertPlacement,
  resident: number,
): ExpertCache | undefined {
  const moe = weights.flatMap((lw, il) => (lw.moe !== undefined ? [{ il, experts: lw.moe.experts }] : []));
  // a step's distinct experts in one layer, which its pool must hold at once
  const minSlots = Math.min(c.nExpert, o.maxTokens * c.nExpertUsed);
  let plan: ExpertPlan;
  if (o.expertCache !== undefined) {
    const kept = new Set(o.expertCache.residentLayers ?? []);
    const sigs = new Set(moe.filter((m) => !kept.has(m.il)).map((m) => expertSignature(m.experts[0])));
    if (!(Number.isInteger(o.expertCache.slots) && o.expertCache.slots >= minSlots))
      throw new LatentError(
        `an expert cache needs at least ${minSlots} slots (a step's distinct experts: min(experts, tokens × used)), got ${o.expertCache.slots}`,
      );
    plan = { residentLayers: kept, slots: new Map([...sigs].map((s) => [s, o.expertCache!.slots])) };
  } else {
    if (!(Number.isSafeInteger(o.gpuMemory) && o.gpuMemory! > 0))
      throw new LatentError(`a GPU memory budget is a whole number of bytes > 0, got ${o.gpuMemory}`);
    plan = planExperts(
      o.gpuMemory!,
      resident,
      moe.map((m) => ({
        layer: m.il,
        experts: m.experts.length,
        signature: expertSignature(m.experts[0]),
        expertBytes: expertBytes(m.experts[0]),
      })),
      minSlots,
    );
  }
  const host = new Map<number, readonly SwiGLU[]>();
  for (const m of moe) {
    if (plan.residentLayers.has(m.il)) layers[m.il]!.experts = uploadExperts(rt, m.experts, m.il);
    else host.set(m.il, m.experts);
  }
  return host.size === 0 ? undefined : new ExpertCache(rt, host, plan.slots, minSlots);
}
