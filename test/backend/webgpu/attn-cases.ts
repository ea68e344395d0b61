// Shared cases of the latent attention kernels' tests (attn.test.ts: the wide decode kernel; attn-tiled.test.ts: the
// tiled kernel for prompt chunks): random caches of contiguous or paged rows, causal and DSA key lists, a float64
// reference, and a runner through attention().
import {
  attention,
  attentionScratch,
  type AttentionArgs,
} from "../../../src/backend/webgpu/kernels/attention/attention.js";
import assert from "node:assert/strict";
import { GpuRuntime } from "../../../src/backend/webgpu/core/runtime.js";
import { f32, record, relErr, Rng, u32 } from "./helpers.js";

export interface Case {
  readonly heads: number;
  /** positions each query may attend to (its causal key count); 0 allowed */
  readonly keys: readonly number[];
  readonly d1?: number;
  readonly d2?: number;
  /** page size of a paged cache (page tables in SEL) */
  readonly paged?: number;
  /** DSA: each query attends to this many of its positions, listed in SEL */
  readonly sel?: number;
  /** queries share one sequence's rows (causal decode) instead of a slot each */
  readonly shared?: boolean;
}

export interface Inputs {
  readonly c: Float32Array;
  readonly kpe: Float32Array;
  readonly q: Float32Array;
  readonly meta: Uint32Array;
  readonly sel: Uint32Array;
  readonly args: AttentionArgs;
  /** cache rows each query attends to, in its key order */
  readonly rows: readonly (readonly number[])[];
}

export const Q_OFF = 8;
export const O_OFF = 4;

export function build(rng: Rng, k: Case): Inputs {
  const { heads: H, keys } = k;
  const d1 = k.d1 ?? 512;
  const d2 = k.d2 ?? 64;
  const nq = keys.length;
  const maxT = Math.max(1, ...keys);
  const selWords: number[] = [];
  const meta: number[] = [];
  const rows: number[][] = [];
  let cacheRows: number;
  // where each query's positions live: a row per position
  const rowOf: ((u: number) => number)[] = [];
  if (k.paged !== undefined) {
    const P = k.paged;
    const pagesPer = Math.ceil(maxT / P);
    const pool = pagesPer * nq + 3;
    cacheRows = pool * P;
    for (let i = 0; i < nq; i++) {
      // a random table over the shared pool (queries of one sequence share theirs)
      const table =
        k.shared === true && i > 0
          ? selWords.slice(meta[0], meta[0] + pagesPer)
          : shuffle(
              rng,
              Array.from({ length: pool }, (_, p) => p),
            ).slice(0, pagesPer);
      const at = selWords.length;
      selWords.push(...table);
      meta.push(at, 0, 0, 0);
      rowOf.push((u) => table[Math.floor(u / P)] * P + (u % P));
    }
  } else {
    const slot = maxT + 3;
    cacheRows = slot * nq;
    for (let i = 0; i < nq; i++) {
      const base = k.shared === true ? 0 : ((i * 5) % nq) * slot;
      meta.push(base, 0, 0, 0);
      rowOf.push((u) => base + u);
    }
  }
  for (let i = 0; i < nq; i++) {
    let positions = Array.from({ length: keys[i] }, (_, u) => u);
    if (k.sel !== undefined && keys[i] > 0) {
      positions = shuffle(rng, positions).slice(0, Math.min(k.sel, keys[i]));
      // DSA lists are ascending; one query in reverse order, which the kernel must not care about
      positions.sort((a, b) => (i === 1 ? b - a : a - b));
      meta[4 * i + 2] = selWords.length;
      meta[4 * i + 3] = 1;
      selWords.push(...positions);
    }
    meta[4 * i + 1] = positions.length;
    rows.push(positions.map(rowOf[i]));
  }
  const qStride = H * (d1 + d2) + 3;
  const args: AttentionArgs = {
    nq,
    heads: H,
    d1,
    d2,
    dv: d1,
    scale: 1 / Math.sqrt(192),
    maxKeys: maxT,
    q: { off: Q_OFF, stride: qStride, head: d1 + d2, q2Off: d1 },
    k1: { off: 0, stride: d1, head: 0 },
    k2: { off: 0, stride: d2 },
    v: { off: 0, stride: d1, head: 0 },
    o: { off: O_OFF, stride: H * d1 + 5, head: d1 },
    pageSize: k.paged ?? 0,
  };
  return {
    c: rng.f32(cacheRows * d1),
    kpe: rng.f32(cacheRows * d2),
    q: rng.f32(Q_OFF + nq * qStride),
    meta: Uint32Array.from(meta),
    sel: Uint32Array.from(selWords.length > 0 ? selWords : [0]),
    args,
    rows,
  };
}

function shuffle(rng: Rng, a: number[]): number[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = rng.int(0, i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** float64 attention: [nq × heads × d1] (a query without keys gives zeros) */
export function reference(x: Inputs): Float64Array {
  const { nq, heads: H, d1, d2, scale } = x.args;
  const out = new Float64Array(nq * H * d1);
  for (let i = 0; i < nq; i++) {
    const rows = x.rows[i];
    for (let h = 0; h < H; h++) {
      const qo = Q_OFF + i * x.args.q.stride + h * (d1 + d2);
      const s = rows.map((r) => {
        let d = 0;
        for (let e = 0; e < d1; e++) d += x.q[qo + e] * x.c[r * d1 + e];
        for (let e = 0; e < d2; e++) d += x.q[qo + d1 + e] * x.kpe[r * d2 + e];
        return d * scale;
      });
      const m = Math.max(...s);
      const p = s.map((v) => Math.exp(v - m));
      const l = p.reduce((a, b) => a + b, 0);
      const o = (i * H + h) * d1;
      rows.forEach((r, j) => {
        for (let e = 0; e < d1; e++) out[o + e] += (p[j] / l) * x.c[r * d1 + e];
      });
    }
  }
  return out;
}

/** Run attention() on `r` and read back [nq × heads × d1]. */
export async function run(r: GpuRuntime, x: Inputs): Promise<Float32Array> {
  const a = x.args;
  const q = f32(r, x.q);
  const c = f32(r, x.c);
  const part = r.buffer(attentionScratch(a.nq, a.heads, a.dv, a.maxKeys) * 4);
  const o = r.buffer((O_OFF + a.nq * a.o.stride) * 4);
  attention(r, { q, k1: c, k2: f32(r, x.kpe), v: c, meta: u32(r, x.meta), sel: u32(r, x.sel), o, part }, a);
  const all = await r.readF32(o);
  const out = new Float32Array(a.nq * a.heads * a.d1);
  for (let i = 0; i < a.nq; i++)
    for (let h = 0; h < a.heads; h++)
      out.set(
        all.subarray(O_OFF + i * a.o.stride + h * a.d1, O_OFF + i * a.o.stride + (h + 1) * a.d1),
        (i * a.heads + h) * a.d1,
      );
  for (const b of [q, c, part, o]) b.destroy();
  return out;
}

/** Only the queries that have keys (the previous kernels give NaN for an empty list). */
export function withKeys(x: Inputs, v: ArrayLike<number>): number[] {
  const { heads: H, d1 } = x.args;
  return x.rows.flatMap((rows, i) =>
    rows.length === 0 ? [] : Array.from({ length: H * d1 }, (_, e) => v[i * H * d1 + e]),
  );
}

/** A runtime that records the labels of its dispatches. */
export class Spy extends GpuRuntime {
  labels: string[] = [];
  override dispatch(...args: Parameters<GpuRuntime["dispatch"]>): void {
    this.labels.push(args[0]);
    super.dispatch(...args);
  }
}

const TOL = 1e-4;

/**
 * Case `k` (inputs from `seed`) on `r` against the float64 reference and, with `previous`, against that runtime's
 * kernels (on the keys each query has); returns r's dispatch labels. `kernel` names the kernel in the recorded errors.
 */
export async function checkAttention(
  kernel: string,
  name: string,
  k: Case,
  r: Spy,
  seed: number,
  previous?: GpuRuntime,
): Promise<string[]> {
  const x = build(new Rng(seed), k);
  const got = await run(r, x);
  const err = record(`attn ${kernel} ${name}`, relErr(got, reference(x)));
  assert.ok(err <= TOL, `${name}: error ${err.toExponential(2)} against the float64 reference`);
  if (previous !== undefined) {
    const old = await run(previous, x);
    const errOld = relErr(withKeys(x, got), withKeys(x, old));
    assert.ok(errOld <= TOL, `${name}: differs from the previous kernels by ${errOld.toExponential(2)}`);
  }
  return r.labels;
}
