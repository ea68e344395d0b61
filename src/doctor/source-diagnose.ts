/**
 * What went wrong with a part that does not match its source: the likely conversion mistake, tried from the most
 * specific to the least (each a hypothesis tested on the data, within the same noise tolerance):
 * zeroed → scaled / sign flipped → holds another part's values (swapped tensors, experts, gate/up, k_b/v_b) →
 * per-block scale errors (a quantized tensor's block scales misplaced, e.g. shifted by one block) → same values in
 * another order (transposed, reshaped instead of transposed, heads reordered) → differs.
 */
import { typeTraits } from "../gguf/types.js";
import type { ModelConfig } from "../model/config.js";
import { gain, relDiff, rms, type Expected, type PartResult } from "./source-compare.js";

export type MistakeKind =
  | "zeroed"
  | "scaled"
  | "sign-flipped"
  | "holds-other"
  | "transposed"
  | "reshaped-not-transposed"
  | "heads-reordered"
  | "reordered"
  | "misshaped"
  | "gate-up-halves-exchanged"
  | "block-scales"
  | "differs";

export interface Diagnosis {
  readonly kind: MistakeKind;
  /** a phrase that completes "<part>: …" */
  readonly what: string;
  /** holds-other: the part whose values it holds */
  readonly other?: PartResult;
  /** holds-other: that part holds this one's values (a swap) */
  readonly reciprocal?: boolean;
  readonly evidence: Record<string, unknown>;
}

const fmt = (x: number): string => (Math.abs(x) >= 0.01 && Math.abs(x) < 100 ? x.toFixed(3) : x.toExponential(2));

function sorted(v: Float32Array): Float32Array {
  return Float32Array.from(v).sort();
}

/** [n0 × n1] slices of `v` (ggml order, n0 fastest) each transposed. */
function transposeSlices(v: Float32Array, n0: number, n1: number): Float32Array {
  const out = new Float32Array(v.length);
  const size = n0 * n1;
  for (let s = 0; s < v.length / size; s++) {
    const b = s * size;
    for (let i1 = 0; i1 < n1; i1++) for (let i0 = 0; i0 < n0; i0++) out[b + i0 * n1 + i1] = v[b + i1 * n0 + i0];
  }
  return out;
}

/** A permutation of `blocks` equal blocks that maps e's blocks onto g's, if one explains g within tol. */
function blockPermutation(g: Float32Array, e: Float32Array, blocks: number, tol: number): number[] | undefined {
  const size = g.length / blocks;
  if (blocks < 2 || !Number.isInteger(size)) return undefined;
  const samples = Math.min(size, 64);
  const at = (k: number): number => Math.floor((k * size) / samples);
  const perm: number[] = [];
  for (let i = 0; i < blocks; i++) {
    let best = -1;
    let bestRel = Infinity;
    for (let j = 0; j < blocks; j++) {
      let d = 0;
      let s = 0;
      for (let k = 0; k < samples; k++) {
        const x = g[i * size + at(k)];
        const y = e[j * size + at(k)];
        d += (x - y) ** 2;
        s += y * y;
      }
      const r = s === 0 ? Infinity : Math.sqrt(d / s);
      if (r < bestRel) [best, bestRel] = [j, r];
    }
    perm.push(best);
  }
  if (perm.every((j, i) => j === i) || new Set(perm).size !== blocks) return undefined;
  const permuted = new Float32Array(g.length);
  perm.forEach((j, i) => permuted.set(e.subarray(j * size, (j + 1) * size), i * size));
  return relDiff(g, permuted) <= tol ? perm : undefined;
}

/** Each (sub-)block a scaled copy of the source block with gains that vary: misplaced or corrupt block scales. */
function blockScales(
  g: Float32Array,
  e: Float32Array,
  block: number,
  tol: { rel: number; gain: number },
): Diagnosis | undefined {
  const n = Math.floor(e.length / block);
  if (n < 4) return undefined;
  const gains: number[] = [];
  const amax: number[] = [];
  let fit = 0;
  let off = 0;
  for (let b = 0; b < n; b++) {
    const gb = g.subarray(b * block, (b + 1) * block);
    const eb = e.subarray(b * block, (b + 1) * block);
    const a = gain(gb, eb);
    gains.push(a);
    let m = 0;
    for (const x of eb) m = Math.max(m, Math.abs(x));
    amax.push(m);
    const scaled = eb.map((x) => x * a);
    if (rms(eb) === 0 || relDiff(gb, scaled) <= tol.rel) fit++;
    if (Math.abs(a - 1) > Math.max(tol.gain, 0.02)) off++;
  }
  if (fit < 0.9 * n || off < 0.2 * n) return undefined;
  // shifted by one block: block b decoded with block b+1's (or b−1's) scale, i.e. gain ≈ amax(b±1)/amax(b)
  for (const d of [1, -1]) {
    let hits = 0;
    let tried = 0;
    for (let b = 0; b < n; b++) {
      const o = b + d;
      if (o < 0 || o >= n || amax[b] === 0) continue;
      tried++;
      if (Math.abs(gains[b] / (amax[o] / amax[b]) - 1) < Math.max(0.05, 2 * tol.rel)) hits++;
    }
    if (tried > 0 && hits >= 0.8 * tried) {
      return {
        kind: "block-scales",
        what: `block scales shifted by one block: each ${block}-value block is the source's block decoded with the scale of the ${d > 0 ? "next" : "previous"} block (${hits}/${tried} blocks)`,
        evidence: { block, shift: d, blocksExplained: hits, blocks: tried },
      };
    }
  }
  return {
    kind: "block-scales",
    what: `wrong block scales: each ${block}-value block is a scaled copy of the source's (${fit}/${n} blocks), with gains from ${fmt(Math.min(...gains))} to ${fmt(Math.max(...gains))}`,
    evidence: { block, blocksScaled: fit, blocks: n },
  };
}

export interface DiagnoseContext {
  readonly results: readonly PartResult[];
  readonly expected: Expected;
  readonly config: ModelConfig;
}

/** The likely mistake behind a mismatching part (r.status === "mismatch"). */
export function diagnose(r: PartResult, ctx: DiagnoseContext): Diagnosis {
  const tol = r.tol!;
  const p = r.part;
  const g = p.read();
  const e = ctx.expected.values(p);
  const base = { rel: r.rel, tolerance: tol.rel, gain: r.gain };
  if (r.rel! <= tol.rel && Math.abs(r.gain! - 1) <= tol.gain) {
    return {
      kind: "misshaped",
      what: `the source's values in the source's order, but ne [${p.ne.join(", ")}] where the source gives [${r.expectedNe!.join(", ")}] (reshaped where a transpose belongs)`,
      evidence: base,
    };
  }
  if (r.rms === 0 || r.rms! <= 1e-7 * r.sourceRms!)
    return { kind: "zeroed", what: "all zeros where the source has values (never written, or zeroed)", evidence: base };

  const a = r.gain!;
  const resid = relDiff(
    g,
    e.map((x) => x * a),
  );
  if (resid <= tol.rel && Math.abs(a) > tol.gain) {
    if (Math.abs(a + 1) <= tol.gain)
      return {
        kind: "sign-flipped",
        what: "the source's values with the sign flipped (×−1)",
        evidence: { ...base, residual: resid },
      };
    return {
      kind: "scaled",
      what: `the source's values scaled by a constant ${fmt(a)} (a stray factor in the conversion)`,
      evidence: { ...base, factor: a, residual: resid },
    };
  }

  const other = matchOther(r, ctx, g);
  if (other !== undefined) return other;

  if (p.hf.length === 2) {
    const half = g.length / 2;
    const swapped = new Float32Array(g.length);
    swapped.set(e.subarray(half));
    swapped.set(e.subarray(0, half), half);
    if (relDiff(g, swapped) <= tol.rel)
      return {
        kind: "gate-up-halves-exchanged",
        what: "its gate and up halves exchanged (the fused gate_up holds up rows first)",
        evidence: base,
      };
  }
  const ne = r.expectedNe!;
  // before the order tests: shuffled block scales keep the overall distribution of values
  const quantized = (typeTraits(p.type)?.blockSize ?? 1) > 1;
  const blk = quantized
    ? blockScales(
        g,
        e,
        p.typeName.endsWith("_K") && !p.typeName.startsWith("Q4") && !p.typeName.startsWith("Q5") ? 16 : 32,
        tol,
      )
    : undefined;
  if (blk !== undefined) return { ...blk, evidence: { ...base, ...blk.evidence } };
  if (relDiff(sorted(g), sorted(e)) <= tol.rel) {
    const [n0, n1] = [ne[0], ne[1] ?? 1];
    if (n1 > 1 && relDiff(g, transposeSlices(e, n0, n1)) <= tol.rel) {
      const perHead = ne.length >= 3 ? ` per ${p.role === "k_b" || p.role === "v_b" ? "head" : "slice"}` : "";
      // a square slice under its own shape is simply transposed; a non-square one under the right shape was reshaped
      const sameShape = p.ne.join(",") === ne.join(",");
      if (sameShape && n0 !== n1) {
        return {
          kind: "reshaped-not-transposed",
          what: `reshaped instead of transposed: the shape is right (ne [${ne.join(", ")}]) but the values are in transposed order${perHead} (the conversion reshaped where it must transpose)`,
          evidence: base,
        };
      }
      return {
        kind: "transposed",
        what: `transposed${perHead}: ne [${p.ne.join(", ")}] holds the transpose of the source's [${ne.join(", ")}]`,
        evidence: base,
      };
    }
    const candidates: [number, string][] = [];
    if (ne.length >= 3) candidates.push([ne[ne.length - 1], p.role === "k_b" || p.role === "v_b" ? "head" : "slice"]);
    if (ne.length === 2 && ctx.config.nHead > 1 && ne[1] % ctx.config.nHead === 0)
      candidates.push([ctx.config.nHead, /attn_/.test(p.tensor) ? "head" : "row block"]);
    for (const [blocks, unit] of candidates) {
      const perm = blockPermutation(g, e, blocks, tol.rel);
      if (perm !== undefined) {
        const moved = perm.map((j, i) => [i, j] as const).filter(([i, j]) => i !== j);
        return {
          kind: "heads-reordered",
          what: `${unit}s reordered: ${moved
            .slice(0, 6)
            .map(([i, j]) => `${unit} ${i} holds the source's ${unit} ${j}`)
            .join(", ")}${moved.length > 6 ? ", …" : ""}`,
          evidence: { ...base, permutation: perm },
        };
      }
    }
    return {
      kind: "reordered",
      what: "the source's values in another order (a reshape or permutation the conversion got wrong)",
      evidence: base,
    };
  }
  return {
    kind: "differs",
    what: `differs from the source beyond quantization noise (rel. error ${fmt(r.rel!)}, ${p.typeName} allows ${fmt(tol.rel)}): corrupt data, a wrong decoding, or another checkpoint`,
    evidence: base,
  };
}

/** Another part whose expected values this part holds (fingerprints first, then the full tensor). */
function matchOther(r: PartResult, ctx: DiagnoseContext, g: Float32Array): Diagnosis | undefined {
  const tol = r.tol!.rel;
  let best: PartResult | undefined;
  let bestRel = Infinity;
  const suffix = (t: string): string => t.replace(/^blk\.\d+\./, "");
  for (const o of ctx.results) {
    if (o === r || o.fpExpected === undefined || o.part.count !== r.part.count) continue;
    // same layer, or the same tensor of another layer: bounded work on models with thousands of experts
    if (o.part.layer !== r.part.layer && suffix(o.part.tensor) !== suffix(r.part.tensor)) continue;
    const d = relDiff(r.fpGguf!, o.fpExpected);
    if (d < bestRel) [best, bestRel] = [o, d];
  }
  if (best === undefined || bestRel > 2 * tol) return undefined;
  const full = relDiff(g, ctx.expected.values(best.part));
  if (full > tol) return undefined;
  const reciprocal = best.status === "mismatch" && relDiff(best.fpGguf!, r.fpExpected!) <= 2 * tol;
  return {
    kind: "holds-other",
    what: `holds the values of ${best.part.label}${reciprocal ? " (the two are swapped)" : ""}`,
    other: best,
    reciprocal,
    evidence: { rel: r.rel, tolerance: tol, holds: best.part.label, relToThat: full, swapped: reciprocal },
  };
}
