/**
 * Part-by-part comparison of a GGUF with its source: what each part should hold (the source tensor mapped into
 * the GGUF layout: kv_b_proj split into k_b/v_b, experts one by one, fused gate_up = gate rows then up rows) and
 * how far it is, relative to the quantization noise of both sides.
 */
import type { ModelConfig } from "../model/config.js";
import { splitKvB } from "../convert/names.js";
import type { GgufPart } from "./source-parts.js";
import type { SourceModel } from "./source-model.js";
import { ggufNoise, tolerance, type Tolerance } from "./source-noise.js";

/** Values sampled at fixed positions, to match a part against every other part cheaply. */
export const FINGERPRINT = 512;

export function fingerprint(v: Float32Array): Float32Array {
  const n = Math.min(FINGERPRINT, v.length);
  const out = new Float32Array(n);
  for (let k = 0; k < n; k++) out[k] = v[Math.floor((k * v.length) / n)];
  return out;
}

export function rms(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i] * v[i];
  return v.length === 0 ? 0 : Math.sqrt(s / v.length);
}

/** RMS(a − b) / RMS(b) (Infinity when b is all zeros and a is not). */
export function relDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  let s = 0;
  for (let i = 0; i < b.length; i++) {
    d += (a[i] - b[i]) ** 2;
    s += b[i] ** 2;
  }
  return s === 0 ? (d === 0 ? 0 : Infinity) : Math.sqrt(d / s);
}

/** Least-squares gain α of a ≈ α·b. */
export function gain(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0;
  let bb = 0;
  for (let i = 0; i < b.length; i++) {
    ab += a[i] * b[i];
    bb += b[i] * b[i];
  }
  return bb === 0 ? 0 : ab / bb;
}

export type PartStatus = "match" | "mismatch" | "shape" | "no-source" | "unreadable-source";

export interface PartResult {
  readonly part: GgufPart;
  readonly status: PartStatus;
  /** source tensors it was compared with */
  readonly sources: readonly string[];
  readonly sourceDtype?: string;
  /** the shape the part should have (ggml order) */
  readonly expectedNe?: readonly number[];
  readonly tol?: Tolerance;
  readonly rel?: number;
  readonly gain?: number;
  readonly rms?: number;
  readonly sourceRms?: number;
  /** fingerprints of the part's values and of what it should hold */
  readonly fpGguf?: Float32Array;
  readonly fpExpected?: Float32Array;
  readonly note?: string;
}

/** The source tensor a part's HF name stands for: checkpoints with tied embeddings have no lm_head.weight. */
export function sourceName(src: SourceModel, hf: string): string {
  return hf === "lm_head.weight" && !src.tensors.has(hf) && src.tensors.has("model.embed_tokens.weight")
    ? "model.embed_tokens.weight"
    : hf;
}

/** What a part should hold, from the source; one kv_b split kept per layer in hand. */
export class Expected {
  private kvLayer: number | undefined;
  private kv: { kB: Float32Array; vB: Float32Array } | undefined;
  constructor(
    private readonly src: SourceModel,
    private readonly c: ModelConfig,
  ) {}

  /** The ggml shape of the part as the source defines it; a string says why there is none. */
  shape(p: GgufPart): readonly number[] | string {
    const s = p.hf.map((n) => this.src.tensors.get(sourceName(this.src, n)));
    const missing = p.hf.filter((_, i) => s[i] === undefined);
    if (missing.length > 0) return `the source has no ${missing.join(", ")}`;
    const unreadable = s.find((t) => t!.noise === undefined);
    if (unreadable !== undefined)
      return `the source stores ${unreadable.name} as ${unreadable.dtype}, which latent cannot read`;
    const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = this.c;
    if (p.role === "k_b" || p.role === "v_b") {
      const shape = s[0]!.shape;
      if (shape.join(",") !== `${H * (P + V)},${L}`)
        return `${s[0]!.name} has shape [${shape.join(", ")}], the metadata needs [${H * (P + V)}, ${L}]`;
      return p.role === "k_b" ? [P, L, H] : [L, V, H];
    }
    if (s.length === 2) {
      const [a, b] = [s[0]!.shape, s[1]!.shape];
      if (a.join(",") !== b.join(",")) return `${s[0]!.name} and ${s[1]!.name} differ in shape`;
      return [a[1], 2 * a[0]];
    }
    return [...s[0]!.shape].reverse();
  }

  /** The source storage of the part, e.g. "BF16" or "F8_E4M3+F8_E4M3" (fused gate_up). */
  dtype(p: GgufPart): string {
    return p.hf.map((n) => this.src.tensors.get(sourceName(this.src, n))?.dtype ?? "?").join("+");
  }

  /** Noise of the source storage of the part (the worst of its tensors). */
  noise(p: GgufPart): { rel: number; gain: number } {
    let rel = 0;
    let g = 0;
    for (const n of p.hf) {
      const t = this.src.tensors.get(sourceName(this.src, n));
      rel = Math.max(rel, t?.noise?.rel ?? 0);
      g = Math.max(g, t?.noise?.gain ?? 0);
    }
    return { rel, gain: g };
  }

  values(p: GgufPart): Float32Array {
    if (p.role === "k_b" || p.role === "v_b") {
      if (this.kvLayer !== p.layer || this.kv === undefined) {
        const { nHead: H, qkNope: P, vHead: V, kvLoraRank: L } = this.c;
        this.kv = splitKvB(this.src.read(p.hf[0]), H, P, V, L);
        this.kvLayer = p.layer;
      }
      return p.role === "k_b" ? this.kv.kB : this.kv.vB;
    }
    if (p.hf.length === 2) {
      const a = this.src.read(p.hf[0]);
      const b = this.src.read(p.hf[1]);
      const out = new Float32Array(a.length + b.length);
      out.set(a);
      out.set(b, a.length);
      return out;
    }
    return this.src.read(sourceName(this.src, p.hf[0]));
  }
}

function trimOnes(ne: readonly number[]): string {
  const out = [...ne];
  while (out.length > 1 && out[out.length - 1] === 1) out.pop();
  return out.join(",");
}

/** Compare one part with what it should hold. */
export function comparePart(p: GgufPart, exp: Expected, src: SourceModel): PartResult {
  const sources = p.hf.map((n) => sourceName(src, n));
  const shape = exp.shape(p);
  if (typeof shape === "string") {
    const status: PartStatus = shape.startsWith("the source has no")
      ? "no-source"
      : shape.includes("cannot read")
        ? "unreadable-source"
        : "shape";
    return { part: p, status, sources, note: shape };
  }
  const srcDtype = exp.dtype(p);
  const expectedCount = shape.reduce((a, b) => a * b, 1);
  if (expectedCount !== p.count)
    return {
      part: p,
      status: "shape",
      sources,
      sourceDtype: srcDtype,
      expectedNe: shape,
      note: `ne [${p.ne.join(", ")}] (${p.count} values), the source gives [${shape.join(", ")}] (${expectedCount})`,
    };
  const tol = tolerance(ggufNoise(p.type), exp.noise(p));
  const g = p.read();
  const e = exp.values(p);
  const rel = relDiff(g, e);
  const a = gain(g, e);
  const sourceRms = rms(e);
  // same values under another shape (trailing 1s aside) is a fault too: the data is laid out for the other shape
  const sameShape = trimOnes(p.ne) === trimOnes(shape);
  const ok = sameShape && (sourceRms === 0 ? rms(g) === 0 : rel <= tol.rel && Math.abs(a - 1) <= tol.gain);
  return {
    part: p,
    status: ok ? "match" : "mismatch",
    sources,
    sourceDtype: srcDtype,
    expectedNe: shape,
    tol,
    rel,
    gain: a,
    rms: rms(g),
    sourceRms,
    fpGguf: fingerprint(g),
    fpExpected: fingerprint(e),
  };
}
