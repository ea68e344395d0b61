/// <reference types="@webgpu/types" />
/**
 * The dense SwiGLU FFN of the fused graph, `h += down(silu(gate·x) ⊙ up·x)` with x = ffn_norm(h)
 * (src/model/deepseek2.ts `ffn` for the leading layers); its two halves also run a MoE layer's shared experts.
 */
import { matmul, matmulSwiGLUSteps, type FusionArgs } from "../kernels/matmul/matrix.js";
import type { StepEncoding } from "./step-encoding.js";
import type { GpuFFN, GpuLayer } from "./weights.js";

/** h += FFN(ffn_norm(h)) for a layer without experts: "ffn_norm", then "ffn_out" added to the residual. */
export function encodeDenseFFN(s: StepEncoding, l: GpuLayer): void {
  s.normH(l.ffnNorm, s.b.x!);
  if (l.dense !== undefined) encodeSwiGLU(s, l.dense);
}

/** h += down(silu(gate·x) ⊙ up·x) for the step's tokens, x = b.x, through b.g. */
export function encodeSwiGLU(s: StepEncoding, f: GpuFFN): void {
  for (const step of swiGLUGateUp(s, f, s.b.g!)) step();
  swiGLUDown(s, f, s.b.g!);
}

/**
 * g = silu(gate·x) ⊙ up·x as its dependent steps (one dual product where the wide kernel applies); x: b.x unless
 * given (with its fused norm).
 */
export function swiGLUGateUp(
  s: StepEncoding,
  f: GpuFFN,
  g: GPUBuffer,
  x: GPUBuffer = s.b.x!,
  fuse?: FusionArgs,
): (() => void)[] {
  return matmulSwiGLUSteps(s.rt, f.gate, f.up, x, g, {
    n: s.n,
    xStride: s.c.nEmbd,
    yStride: f.gate.rows,
    ...(fuse !== undefined ? { fuse } : {}),
  });
}

/** h += down·g. */
export function swiGLUDown(s: StepEncoding, f: GpuFFN, g: GPUBuffer): void {
  matmul(s.rt, f.down, g, s.b.h!, { n: s.n, xStride: f.gate.rows, yStride: s.c.nEmbd, acc: true });
}
