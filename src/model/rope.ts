import type { ModelConfig } from "./config.js";
import type { Vec } from "../tensor/ops.js";

/**
 * Interleaved (GPT-J / ggml NORM) rotary embedding over R dims with DeepSeek YaRN:
 * pair i rotates (x[2i], x[2i+1]) by pos·θ'_i, θ_i = base^(−2i/R), θ'_i blends θ_i/f (interpolation) and θ_i
 * (extrapolation) by the ramp between the correction dims; cos/sin are scaled by `mscale`.
 */
export class Rope {
  /** θ'_i of pair i (dims/2 values) */
  protected readonly theta: Float64Array;

  constructor(
    readonly dims: number,
    base: number,
    yarn: ModelConfig["yarn"],
    readonly mscale: number,
  ) {
    const half = dims / 2;
    this.theta = new Float64Array(half);
    let low = 0;
    let high = 0;
    if (yarn !== undefined) {
      const corrDim = (rot: number): number =>
        (dims * Math.log(yarn.originalContext / (rot * 2 * Math.PI))) / (2 * Math.log(base));
      low = Math.max(0, Math.floor(corrDim(yarn.betaFast)));
      high = Math.min(dims - 1, Math.ceil(corrDim(yarn.betaSlow)));
    }
    for (let i = 0; i < half; i++) {
      const extrap = base ** ((-2 * i) / dims);
      if (yarn === undefined) {
        this.theta[i] = extrap;
        continue;
      }
      const y = (i - low) / Math.max(0.001, high - low);
      const extrapMix = 1 - Math.min(1, Math.max(0, y));
      this.theta[i] = (extrap / yarn.factor) * (1 - extrapMix) + extrap * extrapMix;
    }
  }

  static forConfig(c: ModelConfig): Rope {
    return new Rope(c.qkRope, c.ropeBase, c.yarn, c.ropeMscale);
  }

  /** Rotate x[off .. off+dims) in place for position pos. */
  apply(x: Vec, off: number, pos: number): void {
    const half = this.dims / 2;
    for (let i = 0; i < half; i++) {
      const a = pos * this.theta[i];
      const cos = Math.cos(a) * this.mscale;
      const sin = Math.sin(a) * this.mscale;
      const x0 = x[off + 2 * i];
      const x1 = x[off + 2 * i + 1];
      x[off + 2 * i] = x0 * cos - x1 * sin;
      x[off + 2 * i + 1] = x0 * sin + x1 * cos;
    }
  }
}
