import type { MatProducts, Product } from "../tensor/products.js";
import type { GatedFFN, MatKernels } from "./kernels.js";
import { sigmoid, silu, topK, type Vec } from "../tensor/ops.js";
import type { ModelConfig } from "./config.js";
import type { MoEWeights, SwiGLU } from "./weights.js";

export interface Route {
  /** selected experts, best first */
  readonly experts: number[];
  /** their weights (unbiased probabilities, normalized and scaled as configured) */
  readonly weights: number[];
}

/**
 * Expert selection for one token from router logits z (E values), following the models' own definitions:
 * - softmax gating (V2): p = softmax(z); with groups, a group's score is the MAX of its p (V2's group_limited_greedy;
 *   llama.cpp scores by top-2 sum instead — a documented deviation we do not copy).
 * - sigmoid gating (V3/GLM, noaux_tc): p = sigmoid(z); selection uses p + bias; a group's score is the sum of its top-2.
 * Non-selected groups are masked with −∞. Weights are the unbiased p at the chosen experts, divided by their sum
 * (+1e-20) when norm is on, then multiplied by routed_scaling_factor.
 */
export function route(z: ArrayLike<number>, c: ModelConfig, bias: Float32Array | undefined): Route {
  const p = gateProbabilities(z, c);
  const experts = selectExperts(p, c, bias);
  return {
    experts,
    weights: expertWeights(
      experts.map((e) => p[e]),
      c,
    ),
  };
}

/** p over the E experts from router logits z: softmax or sigmoid, as the config's gating says. */
export function gateProbabilities(z: ArrayLike<number>, c: ModelConfig): Float64Array {
  const E = c.nExpert;
  const p = new Float64Array(E);
  if (c.gating === "softmax") {
    let max = -Infinity;
    for (let e = 0; e < E; e++) max = Math.max(max, z[e]);
    let sum = 0;
    for (let e = 0; e < E; e++) sum += p[e] = Math.exp(z[e] - max);
    for (let e = 0; e < E; e++) p[e] /= sum;
  } else {
    for (let e = 0; e < E; e++) p[e] = sigmoid(z[e]);
  }
  return p;
}

/** The nExpertUsed experts of p + bias, best first, within the best-scoring groups. */
export function selectExperts(p: Float64Array, c: ModelConfig, bias: Float32Array | undefined): number[] {
  const E = c.nExpert;
  const sel = new Float64Array(E);
  for (let e = 0; e < E; e++) sel[e] = p[e] + (bias?.[e] ?? 0);

  if (c.nGroup > 1 && c.nGroupUsed < c.nGroup) {
    const per = E / c.nGroup;
    const groupScore = new Float64Array(c.nGroup);
    for (let g = 0; g < c.nGroup; g++) {
      const members = Array.from(sel.subarray(g * per, (g + 1) * per));
      if (c.gating === "softmax" && c.groupScoring === "definition") {
        groupScore[g] = Math.max(...members);
      } else {
        members.sort((a, b) => b - a);
        groupScore[g] = members[0] + (members[1] ?? 0);
      }
    }
    const keep = new Set(topK(groupScore, c.nGroupUsed));
    for (let g = 0; g < c.nGroup; g++) if (!keep.has(g)) sel.fill(-Infinity, g * per, (g + 1) * per);
  }
  return topK(sel, c.nExpertUsed);
}

/** The chosen experts' weights from their probabilities: normalized (when configured), then routed-scaled. */
export function expertWeights(probs: readonly number[], c: ModelConfig): number[] {
  let weights = [...probs];
  if (c.weightsNorm) {
    const sum = weights.reduce((a, b) => a + b, 0) + 1e-20;
    weights = weights.map((w) => w / sum);
  }
  return weights.map((w) => w * c.weightsScale);
}

/** out[t] (+)= down(silu(gate·x_t) ⊙ up·x_t) for n inputs of width `dim` (batched: each weight row read once). */
export function swiglu(
  ffn: SwiGLU,
  x: Vec,
  n: number,
  dim: number,
  out: Vec,
  accumulate: boolean,
  scale: ArrayLike<number> | undefined,
  k: MatKernels,
): void {
  if (k.swigluMany !== undefined) {
    if (!accumulate) out.fill(0, 0, n * dim);
    k.swigluMany([{ gate: ffn.gate, up: ffn.up, down: ffn.down, scale }], x, n, dim, out);
    return;
  }
  const F = ffn.gate.rows;
  const g = new Float64Array(n * F);
  const u = new Float64Array(n * F);
  k.matmul(ffn.gate, x, n, dim, g, F);
  k.matmul(ffn.up, x, n, dim, u, F);
  for (let i = 0; i < n * F; i++) g[i] = silu(g[i]) * u[i];
  const d = new Float64Array(n * dim);
  k.matmul(ffn.down, g, n, F, d, dim);
  for (let t = 0; t < n; t++) {
    const s = scale === undefined ? 1 : scale[t];
    for (let j = 0; j < dim; j++) {
      const v = d[t * dim + j] * s;
      out[t * dim + j] = accumulate ? out[t * dim + j] + v : v;
    }
  }
}

/** MoE FFN over n tokens x [n × Hd] → out [n × Hd]: router logits, a route per token, then the experts' mixture. */
export function moe(
  w: MoEWeights,
  c: ModelConfig,
  x: Vec,
  n: number,
  out: Vec,
  k: MatKernels,
  routerLogits?: (z: Float64Array) => void,
): Route[] {
  const z = routerLogitsOf(w, c, x, n, k);
  routerLogits?.(z);
  const routes = routeTokens(z, n, c, w.bias);
  mixExperts(w, c, routes, x, n, out, k);
  return routes;
}

/** Router logits z [n × E] of n tokens x [n × Hd]. */
export function routerLogitsOf(w: MoEWeights, c: ModelConfig, x: Vec, n: number, k: MatProducts): Float64Array {
  const z = new Float64Array(n * c.nExpert);
  k.matmul(w.router, x, n, c.nEmbd, z, c.nExpert);
  return z;
}

/** One route per token from router logits z [n × E]. */
export function routeTokens(z: Float64Array, n: number, c: ModelConfig, bias: Float32Array | undefined): Route[] {
  const E = c.nExpert;
  const routes: Route[] = [];
  for (let t = 0; t < n; t++) routes.push(route(z.subarray(t * E, (t + 1) * E), c, bias));
  return routes;
}

/** The tokens routed to one expert and their routing weights. */
interface ExpertGroup {
  readonly tokens: number[];
  readonly weights: number[];
}

/** One SwiGLU over some tokens' rows: an expert (its tokens and routing weights) or the shared experts (all tokens). */
interface Job {
  readonly ffn: SwiGLU;
  readonly group: ExpertGroup | undefined;
}

/**
 * out [n × Hd] = Σ over each token's routed experts of weight · expert(x_t), plus the shared experts: tokens are
 * grouped by expert so each expert's rows are read once. Streamed experts (MoEWeights.streamed) are requested as soon
 * as the routes are known, as many at a time as the cache holds; the products of the experts already cached (and of the
 * shared experts) run while the others are read. Contributions are added in expert order, then the shared experts',
 * whatever the batching, so the result does not depend on where the experts come from.
 */
export function mixExperts(
  w: MoEWeights,
  c: ModelConfig,
  routes: readonly Route[],
  x: Vec,
  n: number,
  out: Vec,
  k: MatKernels,
): void {
  const Hd = c.nEmbd;
  const byExpert = new Map<number, ExpertGroup>();
  routes.forEach((r, t) => {
    r.experts.forEach((e, i) => {
      let b = byExpert.get(e);
      if (b === undefined) byExpert.set(e, (b = { tokens: [], weights: [] }));
      b.tokens.push(t);
      b.weights.push(r.weights[i]);
    });
  });
  out.fill(0, 0, n * Hd);
  const groups = [...byExpert].sort((a, b2) => a[0] - b2[0]);
  const shared: Job[] = w.shared === undefined ? [] : [{ ffn: w.shared, group: undefined }];
  const source = w.streamed;
  if (source === undefined) {
    if (k.swigluMany !== undefined || k.matmulMany !== undefined) {
      // a fast backend: every expert (then the shared experts) in one call
      const ffns: GatedFFN[] = groups.map(([e, g]) => ({ ...w.experts[e], tokens: g.tokens, scale: g.weights }));
      if (w.shared !== undefined) ffns.push(w.shared);
      if (k.swigluMany !== undefined) k.swigluMany(ffns, x, n, Hd, out);
      else swigluManyByProducts(ffns, x, n, Hd, out, k);
      return;
    }
    const jobs = [...groups.map(([e, group]) => ({ ffn: w.experts[e], group })), ...shared];
    addOutputs(
      jobs.map((j) => j.group),
      jobOutputs(jobs, x, n, Hd, k),
      n,
      Hd,
      out,
    );
    return;
  }
  // the cached experts first, so that reading the others never evicts one this request still needs
  const order = [...groups.filter(([e]) => source.isCached(e)), ...groups.filter(([e]) => !source.isCached(e))];
  const outputs = new Map<number, Float64Array>();
  let sharedOut: Float64Array[] = [];
  for (let i = 0; i < order.length; i += source.capacity) {
    const batch = order.slice(i, i + source.capacity);
    const request = source.request(batch.map(([e]) => e));
    const early = batch.flatMap(([e, group], j) => {
      const ffn = request.cached[j];
      return ffn === undefined ? [] : [{ e, job: { ffn, group } }];
    });
    // while the missing experts are read: the cached ones' products, and the shared experts' with the first batch
    const earlyOut = jobOutputs([...early.map((h) => h.job), ...(i === 0 ? shared : [])], x, n, Hd, k);
    early.forEach(({ e }, j) => outputs.set(e, earlyOut[j]));
    if (i === 0) sharedOut = earlyOut.slice(early.length);
    const ffns = request.wait();
    const late = batch.flatMap(([e, group], j) =>
      request.cached[j] === undefined ? [{ e, job: { ffn: ffns[j], group } }] : [],
    );
    jobOutputs(
      late.map((l) => l.job),
      x,
      n,
      Hd,
      k,
    ).forEach((d, j) => outputs.set(late[j].e, d));
  }
  if (order.length === 0) sharedOut = jobOutputs(shared, x, n, Hd, k);
  // back in expert order, the shared experts last
  addOutputs(
    [...groups.map(([, group]) => group), ...shared.map(() => undefined)],
    [...groups.map(([e]) => outputs.get(e)!), ...sharedOut],
    n,
    Hd,
    out,
  );
}

/** out[t] += each output's row for token t (its group's tokens; undefined: every token), in the order given. */
function addOutputs(
  groups: readonly (ExpertGroup | undefined)[],
  outs: readonly Float64Array[],
  n: number,
  Hd: number,
  out: Vec,
): void {
  groups.forEach((group, j) => {
    const d = outs[j];
    const m = group === undefined ? n : group.tokens.length;
    for (let r = 0; r < m; r++) {
      const o = (group === undefined ? r : group.tokens[r]) * Hd;
      for (let c = 0; c < Hd; c++) out[o + c] += d[r * Hd + c];
    }
  });
}

/** A job's input rows: x itself when it takes every token in order, else its tokens' rows gathered. */
function jobInput(job: Job, x: Vec, n: number, Hd: number): Vec {
  const tokens = job.group?.tokens;
  if (tokens === undefined || (tokens.length === n && tokens.every((t, i) => t === i))) return x;
  const g = new Float64Array(tokens.length * Hd);
  tokens.forEach((t, i) => g.set(x.subarray(t * Hd, (t + 1) * Hd), i * Hd));
  return g;
}

/**
 * Each job's output [m × Hd], scaled by its tokens' routing weights. On a fast backend the jobs' rows are stacked and
 * run as one `swigluMany` call (or `swigluManyByProducts`) into zeros, each row written once: the values it adds are the
 * ones the resident call (mixExperts without streaming) adds into `out`, so streaming leaves the result unchanged.
 */
function jobOutputs(jobs: readonly Job[], x: Vec, n: number, Hd: number, k: MatKernels): Float64Array[] {
  if (jobs.length === 0) return [];
  const inputs = jobs.map((j) => ({ x: jobInput(j, x, n, Hd), m: j.group === undefined ? n : j.group.tokens.length }));
  if (k.swigluMany === undefined && k.matmulMany === undefined) {
    return jobs.map((j, i) => {
      const y = new Float64Array(inputs[i].m * Hd);
      swiglu(j.ffn, inputs[i].x, inputs[i].m, Hd, y, false, j.group?.weights, k);
      return y;
    });
  }
  const total = inputs.reduce((s, inp) => s + inp.m, 0);
  const xs = new Float64Array(total * Hd);
  const ys = new Float64Array(total * Hd);
  const offsets: number[] = [];
  let at = 0;
  const ffns: GatedFFN[] = jobs.map((j, i) => {
    const { m } = inputs[i];
    xs.set(inputs[i].x.subarray(0, m * Hd), at * Hd);
    offsets.push(at);
    const tokens = Array.from({ length: m }, (_, r) => at + r);
    at += m;
    return { gate: j.ffn.gate, up: j.ffn.up, down: j.ffn.down, tokens, scale: j.group?.weights };
  });
  if (k.swigluMany !== undefined) k.swigluMany(ffns, xs, total, Hd, ys);
  else swigluManyByProducts(ffns, xs, total, Hd, ys, k);
  return jobs.map((_, i) => ys.subarray(offsets[i] * Hd, (offsets[i] + inputs[i].m) * Hd));
}

/**
 * The gated FFNs of `MatKernels.swigluMany` through two `matmulMany` calls (all gate and up products, then all down
 * products); the same products and the same order of additions into `out` as one `swiglu` call per FFN in turn.
 */
export function swigluManyByProducts(
  ffns: readonly GatedFFN[],
  x: Vec,
  n: number,
  Hd: number,
  out: Vec,
  k: MatProducts,
): void {
  const jobs = ffns.map((f) => {
    const m = f.tokens?.length ?? n;
    let xe: Vec = x;
    if (f.tokens !== undefined && (m !== n || f.tokens.some((t, i) => t !== i))) {
      const g = new Float64Array(m * Hd);
      f.tokens.forEach((t, i) => g.set(x.subarray(t * Hd, (t + 1) * Hd), i * Hd));
      xe = g;
    }
    return { ffn: f, x: xe, m };
  });
  const mid = jobs.map((j) => ({
    g: new Float64Array(j.m * j.ffn.gate.rows),
    u: new Float64Array(j.m * j.ffn.gate.rows),
    d: new Float64Array(j.m * Hd),
  }));
  const many = (ps: Product[]): void => {
    if (k.matmulMany !== undefined) k.matmulMany(ps);
    else for (const p of ps) k.matmul(p.w, p.x, p.n, p.xStride, p.y, p.yStride);
  };
  many(
    jobs.flatMap((j, i) => [
      { w: j.ffn.gate, x: j.x, n: j.m, xStride: Hd, y: mid[i].g, yStride: j.ffn.gate.rows },
      { w: j.ffn.up, x: j.x, n: j.m, xStride: Hd, y: mid[i].u, yStride: j.ffn.gate.rows },
    ]),
  );
  for (const { g, u } of mid) for (let i = 0; i < g.length; i++) g[i] = silu(g[i]) * u[i];
  many(
    jobs.map((j, i) => ({ w: j.ffn.down, x: mid[i].g, n: j.m, xStride: j.ffn.gate.rows, y: mid[i].d, yStride: Hd })),
  );
  jobs.forEach((j, i) => {
    const d = mid[i].d;
    const { tokens, scale } = j.ffn;
    for (let r = 0; r < j.m; r++) {
      const t = tokens === undefined ? r : tokens[r];
      const s = scale === undefined ? 1 : scale[r];
      for (let c = 0; c < Hd; c++) out[t * Hd + c] += d[r * Hd + c] * s;
    }
  });
}
