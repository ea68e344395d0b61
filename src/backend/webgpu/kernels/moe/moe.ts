/// <reference types="@webgpu/types" />
/** Launchers of the MoE kernels: the routing (the subgroup kernel or the workgroup one: routeKernel chooses) and the weighted combine. */
import { LatentError } from "../../../../util/errors.js";
import { f32bits, type GpuRuntime } from "../../core/runtime.js";
import { COMBINE_WGSL, ROUTE_PARAMS, ROUTE_WGSL } from "./moe.wgsl.js";
import { routeGrid, routeWGSL as routeSource, type RouteShape } from "./route.wgsl.js";
import { subgroupRouteShape } from "./select.js";
import { memoWGSL } from "../../core/wgsl-memo.js";
import { grid1, rows } from "../launch.js";

const routeWGSL = memoWGSL(routeSource);

export interface RouteArgs {
  readonly n: number;
  readonly E: number;
  readonly K: number;
  readonly nGroup: number;
  readonly nGroupUsed: number;
  readonly softmax: boolean;
  /** group score = max (V2 softmax by definition) instead of the top-2 sum */
  readonly groupMax: boolean;
  readonly norm: boolean;
  readonly scale: number;
  readonly zOff?: number;
  readonly zStride?: number;
}

/**
 * The routing kernel for these arguments and its grid: one subgroup per token (route.wgsl.ts) on devices with a fixed
 * subgroup size in 4..64 (select.ts), else (or with tune.route = 0, or groups that do not divide the experts)
 * ROUTE_WGSL, one 256-thread workgroup per token.
 */
export function routeKernel(rt: GpuRuntime, a: RouteArgs): { code: string; groups: [number, number] } {
  const shape = subgroupRouteShape(rt, a);
  if (shape !== undefined) return { code: routeWGSL(shape), groups: routeGrid(shape, a.n) };
  return { code: ROUTE_WGSL, groups: [Math.min(a.n, 65535), Math.ceil(a.n / 65535)] };
}

/** The logits z'·1/rms(h) per token: z' from a router whose rows hold the norm's weights (gpu-model.ts). */
export interface RouteNorm {
  readonly h: GPUBuffer;
  readonly dim: number;
  readonly eps: number;
}

/** The subgroup routing kernel's shape where moeRoute can take a RouteNorm (the routing kernel's own choice), else undefined. */
export function routeNormShape(rt: GpuRuntime, a: RouteArgs, dim: number): RouteShape | undefined {
  return dim % 4 === 0 && routeFits(a) ? subgroupRouteShape(rt, a) : undefined;
}

/** Whether the routing kernels take these arguments (≤ 256 experts, ≤ 16 used, ≤ 64 groups). */
export function routeFits(a: RouteArgs): boolean {
  return a.E <= 256 && a.K <= 16 && a.nGroup <= 64;
}

/** The routing kernels' parameter block (ROUTE_PARAMS) for these arguments. */
export function routeParams(a: RouteArgs, hasBias: boolean): Uint32Array {
  const p: Record<(typeof ROUTE_PARAMS)[number], number> = {
    n: a.n,
    E: a.E,
    K: a.K,
    nGroup: a.nGroup,
    nGroupUsed: a.nGroupUsed,
    softmax: a.softmax ? 1 : 0,
    groupMax: a.groupMax ? 1 : 0,
    norm: a.norm ? 1 : 0,
    hasBias: hasBias ? 1 : 0,
    scale: f32bits(a.scale),
    zOff: a.zOff ?? 0,
    zStride: a.zStride ?? a.E,
  };
  return Uint32Array.from(ROUTE_PARAMS.map((k) => p[k]));
}

/** MoE routing: router logits z [n × E] → ids [n × K] (best first), weights [n × K]. */
export function moeRoute(
  rt: GpuRuntime,
  z: GPUBuffer,
  bias: GPUBuffer | undefined,
  ids: GPUBuffer,
  wts: GPUBuffer,
  a: RouteArgs,
  norm?: RouteNorm,
): void {
  if (!routeFits(a))
    throw new LatentError(`moeRoute supports ≤ 256 experts, ≤ 16 used, ≤ 64 groups (got ${a.E}, ${a.K}, ${a.nGroup})`);
  let kernel = routeKernel(rt, a);
  if (norm !== undefined) {
    const shape = routeNormShape(rt, a, norm.dim);
    if (shape === undefined)
      throw new LatentError(
        "moeRoute: the norm's scale needs the subgroup routing kernel and a row width that is a multiple of 4 (check routeNormShape())",
      );
    kernel = { code: routeWGSL(shape, norm), groups: routeGrid(shape, a.n) };
  }
  const { code, groups } = kernel;
  rt.dispatch(
    "moeRoute",
    code,
    [z, bias ?? z, ids, wts, ...(norm !== undefined ? [norm.h] : [])],
    routeParams(a, bias !== undefined),
    groups,
    [
      { buffer: ids, offset: 0, size: a.n * a.K * 4 },
      { buffer: wts, offset: 0, size: a.n * a.K * 4 },
    ],
  );
}

/** y[t] (+)= Σ_k wts[t·K+k]·ye[t·K+k] over rows of `width`. */
export function moeCombine(
  rt: GpuRuntime,
  ye: GPUBuffer,
  wts: GPUBuffer,
  y: GPUBuffer,
  a: { n: number; K: number; width: number; yOff?: number; yStride?: number; acc: boolean },
): void {
  const { gx, gy } = grid1(a.n * a.width, 256);
  const yOff = a.yOff ?? 0;
  const yStride = a.yStride ?? a.width;
  const params = new Uint32Array([a.n, a.K, a.width, yOff, yStride, gx, a.acc ? 1 : 0, 0]);
  rt.dispatch(
    "moeCombine",
    COMBINE_WGSL,
    [ye, wts, y],
    params,
    [gx, gy],
    a.acc ? [] : rows(y, yOff, a.n, yStride, a.width),
  );
}
