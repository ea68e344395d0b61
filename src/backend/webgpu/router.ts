/// <reference types="@webgpu/types" />
/** The fused MoE router product + routing (wgsl-router.ts): when it applies, and its launcher. */
import { GGMLType } from "../../gguf/types.js";
import { LatentError } from "../../util/errors.js";
import type { GpuMatrix } from "./matrix.js";
import { routeFits, routeParams, rows, type RouteArgs } from "./ops.js";
import type { GpuRuntime } from "./runtime.js";
import { routerShape, routerWGSL as routerSource, type RouterShape } from "./wgsl-router.js";
import { memoWGSL } from "./wgsl-memo.js";

const routerWGSL = memoWGSL(routerSource);

/**
 * The fused kernel's shape for routing n tokens through `router`, or undefined where the product and moeRoute run
 * apart: tune.routerFuse ≠ 1 (off by default: on the H200, v2-lite batch 1, GPU 3.16–3.17 ms per step apart vs
 * 3.21 fused in two calls — the one workgroup per token reading the 512 KB router outlasts the gate·up it shares a
 * dispatch with, eating the saved dispatch), no fixed subgroup size in 4..64, a router that is not one F32 piece of E rows, x rows
 * not multiples of 4 floats, or routing arguments outside moeRoute's limits. The caller decides the step size (the
 * kernel takes one workgroup per token; gpu-model uses it for steps that combine dispatches).
 */
export function routerFuseShape(rt: GpuRuntime, router: GpuMatrix, a: RouteArgs, hasBias: boolean): RouterShape | undefined {
  const sg = rt.info.subgroupSize;
  if (rt.tune.routerFuse !== 1 || sg === undefined || !routeFits(a) || a.n < 1 || a.n > 65535) return undefined;
  if (router.type !== GGMLType.F32 || router.items !== 1 || router.pieces.length !== 1 || router.rows !== a.E) return undefined;
  return routerShape(sg, a.E, a.nGroup, a.nGroupUsed, router.cols, hasBias, rt.info.limits.maxComputeWorkgroupStorageSize);
}

/**
 * z = W_router·x for n tokens (x rows of router.cols floats from 0, z rows at zOff + t·zStride) and their routing:
 * ids [n × K] (best first), weights [n × K], as matmul then moeRoute; one dispatch of one workgroup per token.
 */
export function moeRouter(rt: GpuRuntime, s: RouterShape, router: GpuMatrix, x: GPUBuffer, z: GPUBuffer, bias: GPUBuffer | undefined, ids: GPUBuffer, wts: GPUBuffer, a: RouteArgs): void {
  if (s.bias !== (bias !== undefined)) throw new LatentError("moeRouter: the shape's bias does not match the bias buffer");
  const buffers = [router.pieces[0]!.buffer, x, z, ids, wts, ...(bias !== undefined ? [bias] : [])];
  rt.dispatch(`moeRouter ${router.name}`, routerWGSL(s), buffers, routeParams(a, bias !== undefined), [a.n], [
    ...rows(z, a.zOff ?? 0, a.n, a.zStride ?? a.E, a.E),
    { buffer: ids, offset: 0, size: a.n * a.K * 4 },
    { buffer: wts, offset: 0, size: a.n * a.K * 4 },
  ]);
}
