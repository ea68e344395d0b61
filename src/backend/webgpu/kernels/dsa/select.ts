/**
 * The DSA family's selection, the one module of it that reads the tuning (RuntimeOptions.tune); the launchers
 * (dsa.ts) take its choices as they are.
 */
import type { GpuRuntime } from "../../core/runtime.js";

/**
 * Whether the indexer scores run by key blocks through workgroup memory (the default) rather than one thread per
 * (key, query) (dsaScores = 0).
 */
export function dsaScoresBlocked(rt: GpuRuntime): boolean {
  return (rt.tune.dsaScores ?? 1) !== 0;
}
