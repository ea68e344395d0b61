/// <reference types="@webgpu/types" />
/**
 * One layer's MoE FFN block of the fused graph, `h += FFN(ffn_norm(h))` for a layer with experts
 * (src/model/deepseek2.ts `ffn`): the router's logits ("router"), the routing to each token's experts and weights, the
 * gathered expert products, the shared experts, and the combine — left pending on the step (StepEncoding), for the
 * next RMSNorm of h or the output to add.
 */
import type { ModelConfig } from "../../../model/config.js";
import {
  expertLists,
  fusable,
  matmul,
  matmulGather,
  matmulGatherSwiGLU,
  type FusionArgs,
} from "../kernels/matmul/matrix.js";
import { expertsFrom } from "../kernels/matmul/select.js";
import { moeRoute, routeNormShape, type RouteArgs } from "../kernels/moe/moe.js";
import { swiGLUDown, swiGLUGateUp } from "./dense-block.js";
import type { StepEncoding } from "./step-encoding.js";
import type { GpuFFN, GpuLayer } from "./weights.js";

/** The routing of n tokens as the config gates them (src/model/moe.ts `route`). */
function routingArgs(c: ModelConfig, n: number): RouteArgs {
  return {
    n,
    E: c.nExpert,
    K: c.nExpertUsed,
    nGroup: c.nGroup,
    nGroupUsed: c.nGroupUsed,
    softmax: c.gating === "softmax",
    groupMax: c.gating === "softmax" && c.groupScoring === "definition",
    norm: c.weightsNorm,
    scale: c.weightsScale,
  };
}

/**
 * h += MoE(ffn_norm(h)) for the step's tokens, the routed experts' weighted sum left pending in YE. `experts` is the
 * layer's own stacked experts, or an expert cache's pool (graph/expert-cache.ts): then, with `pause`, the generator
 * yields once the routing is encoded, for the caller to submit it, read the ids in RIDS back and rewrite them to the
 * pool's slots before the expert products are encoded. Without `pause` it never yields.
 */
export function* encodeMoE(s: StepEncoding, l: GpuLayer, experts: GpuFFN, pause = false): Generator<void, void> {
  const { rt, c, b, n } = s;
  const { nEmbd: Hd, nExpertUsed: K, nFFExp: Fe, nExpert: E } = c;
  // the products gather over the stacked items: the layer's experts, or a pool's slots
  const items = experts.gate.items;
  const routing = routingArgs(c, n);
  // expert-major products (pairs ≥ experts) read the pairs grouped by expert, built once for the three (lists take
  // up to 256 experts: a larger expert cache's pool gathers pair by pair)
  const lists = n * K >= expertsFrom(rt, experts.gate) * items && items <= 256 ? b.elist! : undefined;
  // small MoE steps on the wide kernel: the FFN's RMSNorm inside its readers instead of a dispatch of its own — the
  // shared and routed gate·up products normalize x as they stage it, the router reads h with ffn_norm folded into
  // its rows, and the routing scales its logits by 1/rms(h)
  const ffnFused =
    s.fusion.fuseFFNNorm &&
    l.routerNormed !== undefined &&
    lists === undefined &&
    routeNormShape(rt, routing, Hd) !== undefined &&
    fusable(rt, experts.gate, 1, true, experts.up) &&
    (l.shared === undefined || fusable(rt, l.shared.gate, n, false, l.shared.up));
  const ffnIn = ffnFused ? b.h! : b.x!;
  const ffnNorm: FusionArgs | undefined = ffnFused ? { norm: { g: l.ffnNorm, eps: c.rmsEps } } : undefined;
  // "ffn_norm" (unless fused into its readers)
  if (!ffnFused) s.normH(l.ffnNorm, b.x!);
  const shared = l.shared;
  // "router": the router and the shared experts' gate·up (its first dispatch: the second reads it) both only read x
  const [sharedFirst, ...sharedRest] = shared !== undefined ? swiGLUGateUp(s, shared, b.gs!, ffnIn, ffnNorm) : [];
  s.together(() => {
    matmul(rt, ffnFused ? l.routerNormed!() : l.router!, ffnIn, b.z!, { n, xStride: Hd, yStride: E });
    sharedFirst?.();
  });
  for (const step of sharedRest) step();
  // (tune.sharedEarly, default) the shared down product beside the routing, into the residual's other buffer: h' =
  // h + W_down·g_s, so that the routing and the routed gate·up still read h; the routed down product then runs
  // alone. Both down products in one dispatch made each the other's tail: on a large GPU (v2-lite batch 1) GPU 2.58 →
  // 2.51 ms a step, and 2.36 once the routing kernel took 256 threads and so shared that dispatch (route.wgsl.ts)
  const early =
    s.fusion.sharedEarly &&
    shared !== undefined &&
    lists === undefined &&
    sharedRest.length === 0 &&
    fusable(rt, shared.down, n, false);
  s.together(() => {
    moeRoute(rt, b.z!, l.bias, b.rids!, b.rw!, routing, ffnFused ? { h: b.h!, dim: Hd, eps: c.rmsEps } : undefined);
    if (early)
      matmul(rt, shared!.down, b.gs!, b.hAlt!, {
        n,
        xStride: shared!.gate.rows,
        yStride: Hd,
        fuse: { addCombine: { ye: b.h!, rw: b.ones!, K: 1 } },
      });
  });
  if (pause) yield;
  if (lists !== undefined) expertLists(rt, b.rids!, lists, { pairs: n * K, E: items });
  // g = silu(W_gate x)·(W_up x) per pair (one dual product at small batches, else gate then up with SwiGLU fused)
  matmulGatherSwiGLU(rt, experts.gate, experts.up, ffnIn, b.g!, b.rids!, {
    pairs: n * K,
    xDiv: K,
    xBatch: Hd,
    yBatch: Fe,
    lists,
    ...(ffnNorm !== undefined ? { fuse: ffnNorm } : {}),
  });
  // the routed experts' down products into YE (and, sharedEarly = 0, the shared experts' into h beside them)
  s.together(() => {
    matmulGather(rt, experts.down, b.g!, b.ye!, b.rids!, { pairs: n * K, xDiv: 1, xBatch: Fe, yBatch: Hd, lists });
    if (shared !== undefined && !early) swiGLUDown(s, shared, b.gs!);
  });
  if (early) [b.h, b.hAlt] = [b.hAlt, b.h];
  // "ffn_out": the routed experts' weighted sum waits in YE for the next norm of h to add it
  s.combinePending = true;
}
