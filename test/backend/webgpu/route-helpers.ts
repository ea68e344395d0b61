// Shared by the routing tests (route.test.ts): routing cases as RouteArgs and ModelConfig, the CPU
// reference with the kernels' NaN definition, and the error measure of weights.
import type { ModelConfig } from "../../../src/model/config.js";
import { route, type Route } from "../../../src/model/moe.js";
import type { RouteArgs } from "../../../src/backend/webgpu/kernels/moe/moe.js";

/** weights: float32 probabilities against the float64 reference, and the kernels' summation orders */
export const REL = 2e-6;
const NEG = -3.4028234663852886e38;

/** A routing problem's settings (what moeRoute takes, and whether a bias is given). */
export interface RouteSpec {
  readonly E: number;
  readonly K: number;
  readonly n: number;
  readonly gating: "softmax" | "sigmoid";
  readonly bias?: boolean;
  readonly nGroup?: number;
  readonly nGroupUsed?: number;
  /** group score = max (V2 softmax by definition) instead of the top-2 sum */
  readonly groupMax?: boolean;
  readonly norm?: boolean;
  readonly scale?: number;
  readonly zOff?: number;
  readonly zStride?: number;
}

export function routeConfig(c: RouteSpec): ModelConfig {
  const grouping = c.groupMax === true ? "definition" : "llama.cpp";
  return {
    nExpert: c.E,
    nExpertUsed: c.K,
    nGroup: c.nGroup ?? 1,
    nGroupUsed: c.nGroupUsed ?? 1,
    gating: c.gating,
    groupScoring: c.gating === "softmax" ? grouping : "definition",
    weightsNorm: c.norm === true,
    weightsScale: c.scale ?? 1,
  } as unknown as ModelConfig;
}

export function routeArgs(c: RouteSpec): RouteArgs {
  return {
    n: c.n,
    E: c.E,
    K: c.K,
    nGroup: c.nGroup ?? 1,
    nGroupUsed: c.nGroupUsed ?? 1,
    softmax: c.gating === "softmax",
    groupMax: c.gating === "softmax" && c.groupMax === true,
    norm: c.norm === true,
    scale: c.scale ?? 1,
    zOff: c.zOff ?? 0,
    zStride: c.zStride ?? c.E,
  };
}

/**
 * The CPU reference for one token's E logits. NaN logits: route() gives every expert a NaN probability under softmax
 * (a consistent order: by id); under sigmoid its order among NaN scores is its sort's, so there the kernels'
 * definition (a NaN score ranks as the lowest finite float) is asked of route() by a logit of 0 and a bias of −FLT_MAX.
 * nanPicks: a NaN probability among the picks (the kernels then give NaN weights).
 */
export function referenceRoute(
  c: RouteSpec,
  logits: ArrayLike<number>,
  bias: Float32Array | undefined,
): { route: Route; nanPicks: boolean } {
  const z = Float64Array.from(logits);
  const nan = z.map((v) => (Number.isNaN(v) ? 1 : 0));
  if (c.gating === "softmax" || !nan.includes(1))
    return { route: route(z, routeConfig(c), bias), nanPicks: c.gating === "softmax" && nan.includes(1) };
  const masked = Float32Array.from({ length: c.E }, (_, e) => (nan[e] === 1 ? NEG : (bias?.[e] ?? 0)));
  const r = route(
    z.map((v) => (Number.isNaN(v) ? 0 : v)),
    routeConfig(c),
    masked,
  );
  return { route: r, nanPicks: r.experts.some((e) => nan[e] === 1) };
}

export { maxRel } from "../../helpers/measure.js";
