/**
 * Position-by-position comparison of an endpoint's log-probs with latent's reference, on the full distribution:
 * the endpoint's returned entries plus the rest of the probability mass as one bucket (never renormalized over the
 * returned subset, so a server that returns one entry cannot look perfect), and the actual token's log-prob.
 * Tolerances come from tools/endpoint-noise.ts (docs/doctor.md "Endpoint": calibration).
 */

/** What the endpoint said about one position: context tokens[0..pos], `next` the token that follows. */
export interface Scored {
  readonly pos: number;
  /** prompt: teacher-forced prompt position; generated: the distribution a generated token was drawn from */
  readonly group: "prompt" | "generated";
  /** index of the generated token (0: drawn from the last prefill row, 1..: from decode steps) */
  readonly step: number | undefined;
  /** which probe sequence (index into the probes) */
  readonly seq: number;
  /** returned alternatives that could be mapped to ids: id → log-prob */
  readonly top: ReadonlyMap<number, number>;
  /** how many alternatives the endpoint returned (mapped or not) */
  readonly returned: number;
  /** returned alternatives that map to no single id (ambiguous token texts) */
  readonly unmapped: number;
  readonly next: number | undefined;
  readonly nextLogprob: number | undefined;
}

/** One compared position (the JSON report's `positions`). */
export interface EndpointPosition {
  readonly pos: number;
  readonly next: number | undefined;
  /** KL(reference ‖ endpoint) over the returned ids plus one bucket for the rest of the mass, nats */
  readonly kl: number;
  readonly top1Match: boolean;
  readonly refLogprob: number | undefined;
  readonly endpointLogprob: number | undefined;
  /** entries the endpoint returned */
  readonly k: number;
  /** of them, entries whose token text maps to no single id */
  readonly unmapped: number;
  readonly group: "prompt" | "generated";
  readonly step: number | undefined;
  readonly seq: number;
  /** |reference − endpoint| log-prob of the actual token, nats */
  readonly actualGap: number | undefined;
  /** Σ exp(returned log-probs): above 1 they are not log-probabilities */
  readonly returnedMass: number;
  /** the highest returned log-prob */
  readonly endpointTopLogprob: number;
}

export interface Summary {
  readonly n: number;
  readonly meanKL: number;
  readonly maxKL: number;
  readonly top1: number;
  /** mean |Δ| of the actual token's log-prob (NaN when the endpoint gave none) */
  readonly meanGap: number;
  readonly maxGap: number;
}

/**
 * Same-GGUF tolerance, from tools/doctor/endpoint-noise.ts on the demo model (docs/doctor.md "Endpoint"): correct
 * arithmetic on the same weights lands at most at mean KL 7e-4 / mean |Δ logprob| 0.030 on any probe (bf16
 * activations and logits; f16 ≈ 1e-6 / 1e-3, f32 kernels ≈ 1e-13 / 4e-7); the faults to catch start at 7e-3 / 0.066
 * (the weakest zeroed expert measured) and 0.9× logits, a wrong RoPE base, k_b/v_b swapped sit at 2e-2 / 0.19 and
 * beyond. The limits sit between: ~3× above the noise, ≥ 1.3× (|Δ|) and 3.6× (KL) below the weakest fault.
 */
export const TOLERANCE = { meanKL: 2e-3, meanGap: 0.05 } as const;
/** Below these the endpoint is float32-exact ("match"); between them and TOLERANCE it is "close" (f16/bf16 kernels). */
export const EXACT = { meanKL: 1e-8, meanGap: 1e-4 } as const;

const FLOOR = 1e-12;

export function comparePosition(ref: Float64Array, s: Scored): EndpointPosition | undefined {
  if (s.top.size === 0 && s.nextLogprob === undefined) return undefined;
  const top = new Map(s.top);
  if (s.next !== undefined && s.nextLogprob !== undefined) top.set(s.next, s.nextLogprob);
  let pSum = 0;
  let qSum = 0;
  for (const [id, lq] of top) {
    pSum += Math.exp(ref[id]);
    qSum += Math.exp(lq);
  }
  let kl = 0;
  for (const [id, lq] of top) {
    const lp = ref[id];
    kl += Math.exp(lp) * (lp - Math.max(lq, Math.log(FLOOR)));
  }
  const pRest = Math.max(0, 1 - pSum);
  const qRest = Math.max(FLOOR, 1 - qSum);
  if (pRest > FLOOR) kl += pRest * Math.log(pRest / qRest);
  let refTop = 0;
  for (let i = 1; i < ref.length; i++) if (ref[i] > ref[refTop]) refTop = i;
  let epTop = -1;
  let epTopLp = -Infinity;
  for (const [id, lq] of top) if (lq > epTopLp) [epTop, epTopLp] = [id, lq];
  // a near tie in the reference is not a disagreement
  // (a reference top-1 whose text could not be mapped is no evidence either way)
  const top1Match = epTop === refTop || ref[refTop] - ref[epTop] < 1e-3 || (s.unmapped > 0 && !top.has(refTop));
  const refLogprob = s.next !== undefined ? ref[s.next] : undefined;
  const gap =
    refLogprob !== undefined && s.nextLogprob !== undefined ? Math.abs(refLogprob - s.nextLogprob) : undefined;
  return {
    pos: s.pos,
    next: s.next,
    kl: Number.isFinite(kl) ? Math.max(0, kl) : Infinity,
    top1Match,
    refLogprob,
    endpointLogprob: s.nextLogprob,
    k: s.returned,
    unmapped: s.unmapped,
    group: s.group,
    step: s.step,
    seq: s.seq,
    actualGap: gap,
    returnedMass: qSum,
    endpointTopLogprob: epTopLp,
  };
}

/** Compare scored positions with reference rows; `rows(seq)` gives the log-softmax rows of probe `seq`. */
export function compareAll(
  rows: (seq: number) => readonly Float64Array[],
  scored: readonly Scored[],
  shift = 0,
): EndpointPosition[] {
  const out: EndpointPosition[] = [];
  for (const s of scored) {
    const ref = rows(s.seq)[s.pos + shift];
    if (ref === undefined) continue;
    const p = comparePosition(ref, s);
    if (p !== undefined) out.push(p);
  }
  return out;
}

export function summarize(p: readonly EndpointPosition[]): Summary {
  if (p.length === 0) return { n: 0, meanKL: NaN, maxKL: NaN, top1: NaN, meanGap: NaN, maxGap: NaN };
  const gaps = p.flatMap((x) => (x.actualGap !== undefined ? [x.actualGap] : []));
  return {
    n: p.length,
    meanKL: p.reduce((a, x) => a + x.kl, 0) / p.length,
    maxKL: Math.max(...p.map((x) => x.kl)),
    top1: p.filter((x) => x.top1Match).length / p.length,
    meanGap: gaps.length > 0 ? gaps.reduce((a, b) => a + b, 0) / gaps.length : NaN,
    maxGap: gaps.length > 0 ? Math.max(...gaps) : NaN,
  };
}

/** Within the same-GGUF tolerance (an empty set is not). */
export function withinTolerance(
  s: Summary,
  tol: { readonly meanKL: number; readonly meanGap: number } = TOLERANCE,
): boolean {
  return s.n > 0 && s.meanKL <= tol.meanKL && (Number.isNaN(s.meanGap) || s.meanGap <= tol.meanGap);
}

export function formatSummary(s: Summary): string {
  const gap = Number.isNaN(s.meanGap)
    ? "actual token not returned"
    : `mean |Δ logprob| of the actual token ${s.meanGap.toExponential(2)} (max ${s.maxGap.toExponential(2)})`;
  return `mean KL ${s.meanKL.toExponential(2)} (max ${s.maxKL.toExponential(2)}), ${gap}, top-1 agreement ${(s.top1 * 100).toFixed(0)}% over ${s.n} positions`;
}
