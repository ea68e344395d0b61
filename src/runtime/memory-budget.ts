/**
 * Whether a model's routed experts are streamed from disk, and how large their cache is: the weights must fit a memory
 * budget (`--max-memory`, default what the machine can spare); when they do not, everything but the routed experts
 * stays resident and the rest of the budget holds a cache of whole experts (model/expert-store.ts).
 */
import { freemem, totalmem } from "node:os";
import type { GGUFFile } from "../gguf/gguf-file.js";
import type { ModelConfig } from "../model/config.js";
import { ExpertStore, expertFootprint, type ExpertReader, type ExpertSlots } from "../model/expert-store.js";
import { UsageError } from "../util/errors.js";
import { formatBinaryBytes } from "../util/byte-size.js";

/**
 * What the machine can spare for weights: available memory less headroom for the KV cache, activations and the
 * runtime (a tenth of the machine, at least 1 GiB).
 */
export function spareMemory(): number {
  const headroom = Math.max(2 ** 30, totalmem() / 10);
  return Math.max(0, Math.floor(Math.min(freemem(), totalmem()) - headroom));
}

export interface StreamingOptions {
  /** memory budget for the weights in bytes (default: spareMemory()); a model larger than it streams its experts */
  readonly maxMemory?: number;
  /** stream the routed experts through a cache of exactly this many experts, whatever the budget */
  readonly expertCache?: number;
}

export interface StreamingPlan {
  readonly store: ExpertStore;
  /** one line for the user: that experts are streamed, the budget and the cache size */
  readonly note: string;
}

/**
 * The expert store a model loads with, or undefined when every weight fits the budget. `repack` says the kernels keep
 * a repacked copy of Q6_K matrices beside each (the fast CPU backend): a cache slot then costs that much more.
 * A budget smaller than the resident weights plus one layer's top-k experts is a UsageError naming both numbers.
 */
export function planStreaming(
  file: GGUFFile,
  c: ModelConfig,
  opts: StreamingOptions,
  slots: ExpertSlots | undefined,
  repack: boolean,
  reader: () => ExpertReader,
): StreamingPlan | undefined {
  const fp = expertFootprint(file, c);
  const perSlot = fp.slotBytes + (repack ? Math.ceil((fp.slotQ6KBytes * 276) / 210) : 0);
  if (opts.expertCache !== undefined) {
    if (fp.experts === 0) throw new UsageError("the model has no routed experts to stream");
    const store = new ExpertStore(file, opts.expertCache, slots, reader());
    return { store, note: note(store.capacity, perSlot, fp.residentBytes, fp.experts, undefined) };
  }
  const explicit = opts.maxMemory !== undefined;
  const budget = opts.maxMemory ?? spareMemory();
  if (fp.totalBytes <= budget || (fp.experts === 0 && !explicit)) return undefined;
  const what = explicit
    ? `--max-memory ${formatBinaryBytes(budget)}`
    : `the memory this machine can spare (${formatBinaryBytes(budget)})`;
  if (fp.experts === 0)
    throw new UsageError(
      `${what} is less than the model's ${formatBinaryBytes(fp.totalBytes)}, and it has no routed experts to stream from disk`,
    );
  const k = Math.max(1, c.nExpertUsed);
  const least = fp.residentBytes + k * perSlot;
  if (budget < least)
    throw new UsageError(
      `${what} does not hold the resident weights (${formatBinaryBytes(fp.residentBytes)}) plus one layer's top-${k} experts (${formatBinaryBytes(k * perSlot)}): ${explicit ? "give" : "it needs"} at least ${formatBinaryBytes(least)}`,
    );
  const capacity = Math.min(fp.experts, Math.floor((budget - fp.residentBytes) / perSlot));
  const store = new ExpertStore(file, capacity, slots, reader());
  return { store, note: note(capacity, perSlot, fp.residentBytes, fp.experts, budget) };
}

function note(
  capacity: number,
  perSlot: number,
  resident: number,
  experts: number,
  budget: number | undefined,
): string {
  const b = budget === undefined ? "" : `budget ${formatBinaryBytes(budget)}, `;
  return `streaming routed experts from disk: ${b}resident ${formatBinaryBytes(resident)}, cache of ${capacity} of ${experts} experts (${formatBinaryBytes(capacity * perSlot)})`;
}
