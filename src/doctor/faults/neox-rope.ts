import type { ModelConfig } from "../../model/config.js";
import { Rope } from "../../model/rope.js";
import type { Vec } from "../../tensor/ops.js";

/**
 * The rotary embedding of a NeoX (half-split) implementation: pair i rotates (x[i], x[i + dims/2]) instead of the
 * interleaved (x[2i], x[2i+1]) these models are trained with — same angles, same magnitude.
 */
export class NeoxRope extends Rope {
  static override forConfig(c: ModelConfig): NeoxRope {
    return new NeoxRope(c.qkRope, c.ropeBase, c.yarn, c.ropeMscale);
  }

  override apply(x: Vec, off: number, pos: number): void {
    const half = this.theta.length;
    for (let i = 0; i < half; i++) {
      const a = pos * this.theta[i];
      const cos = Math.cos(a) * this.mscale;
      const sin = Math.sin(a) * this.mscale;
      const x0 = x[off + i];
      const x1 = x[off + half + i];
      x[off + i] = x0 * cos - x1 * sin;
      x[off + half + i] = x0 * sin + x1 * cos;
    }
  }
}
