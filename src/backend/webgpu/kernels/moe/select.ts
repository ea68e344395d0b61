/**
 * The MoE family's selection, the one module of it that reads the tuning (RuntimeOptions.tune): whether the routing
 * takes the subgroup kernel, and its shape. The launchers (moe.ts) take the choice as it is.
 */
import type { GpuRuntime } from "../../core/runtime.js";
import { routeShape, type RouteShape } from "./route.wgsl.js";

/**
 * The subgroup routing kernel's shape (a fixed subgroup size, not tuned off with route = 0; routeThreads its threads
 * a workgroup), or undefined for the 256-thread workgroup kernel.
 */
export function subgroupRouteShape(
  rt: GpuRuntime,
  a: { readonly E: number; readonly nGroup: number; readonly nGroupUsed: number },
): RouteShape | undefined {
  const sg = rt.info.subgroupSize;
  return rt.tune.route === 0 || sg === undefined
    ? undefined
    : routeShape(sg, a.E, a.nGroup, a.nGroupUsed, rt.tune.routeThreads);
}
