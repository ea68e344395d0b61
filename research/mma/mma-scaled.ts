/**
 * Int8 tensor-core GEMMs with GGUF-style per-(row, block) weight scales, for mma-probe.ts. Subgroup-matrix results are
 * opaque, so a scale can only be applied after storing the i32 result tile to workgroup memory; two schemes:
 * - "per32": A = one int8 piece, weight = sw[m][kb]·A (kb a block of 32 along K, like Q8_0). Three MMAs (the x pieces)
 *   per 32 of K; after EVERY 32 the three tiles are stored, scaled by sw·2^14 / 2^7 / 1 and summed into f32 registers.
 * - "per256": A = two int8 pieces of an integer weight w = 64·w_hi + w_lo (w_lo ∈ [0, 63], w_hi ∈ [−128, 127], so
 *   w ∈ [−8192, 8191]: room for the K-quants' sub-block scale × quant, |w| ≤ 4096 for Q6_K's int8 scale × 6-bit q);
 *   weight = sw[m][sb]·w with sb a super-block of 256. Six MMAs per 32 of K into i32 results, stored and scaled only
 *   every 256. i32 bound over one super-block (256 products, x pieces in [−128, 127]): |Σ w_hi·x| ≤ 256·128·128 = 2^22,
 *   |Σ w_lo·x| ≤ 256·63·128 < 2^21, and the exact i32 combine 64·c_hi + c_lo ≤ 2^28 + 2^21 < 2^31 (it would overflow
 *   only past K ≈ 2032 per rescale, 8× the super-block).
 * Both: x = three pieces per token with scale sx[n] as in mma-kernels.ts; Y [N × M] f32 = sx[n]·Σ_b sw[m][b]·(A·x)_b.
 * Buffers: A [AP × M × K] int8 (piece-major), B [3 × N × K] int8, Y, params {M, N, K, _}, S = [sw (M × K/period) | sx (N)].
 * Staged only (stageK of K per workgroup barrier pair); the scratch for the stored results aliases the staging array
 * between stages, so the rescale period must be a multiple of stageK; jr tiles (of sn) are stored per barrier pair.
 */
import type { Gpu } from "./mma-probe.js";
import {
  gemmI8,
  load,
  mmaPrologue,
  packI8,
  PIECE_SHIFT,
  range,
  rngI8,
  splitThree,
  store,
  SUBGROUP,
  type MmaKernel,
} from "./mma-kernels.js";

export type Scheme = "per32" | "per256";
export interface ScaledKernel
  extends Pick<MmaKernel, "syntax" | "offUnit" | "strideUnit" | "sgid" | "tn" | "sg" | "sn"> {
  readonly scheme: Scheme;
  /** 16-row tiles per subgroup: 1 or 2, so that each lane's row in the stored tile is fixed (16·sm divides 32) */
  readonly sm: 1 | 2;
  readonly stageK: 32 | 64 | 128;
  /** result tiles (of sn) stored to workgroup memory per barrier pair; divides sn */
  readonly jr: number;
}

const PAD = 4;
export const period = (k: Pick<ScaledKernel, "scheme">): number => (k.scheme === "per32" ? 32 : 256);
const aPieces = (k: ScaledKernel): number => (k.scheme === "per32" ? 1 : 2);
const results = (k: ScaledKernel): number => 3 * aPieces(k);
export const scaledRows = (k: ScaledKernel): number => k.sg * k.sm * 16;
export const scaledCols = (k: ScaledKernel): number => k.tn * k.sn;
export const scaledName = (k: ScaledKernel): string =>
  `${k.scheme} staged ${k.sg}sg ${16 * k.sm}x${k.tn * k.sn}/sg tn${k.tn} stage${k.stageK} jr${k.jr}`;
export const scaledFits = (k: ScaledKernel, M: number, N: number, K: number): boolean =>
  M > 0 && N % scaledCols(k) === 0 && K % period(k) === 0;

/** workgroup memory in bytes: the staging array, or one round of stored results if larger */
export function scaledShared(k: ScaledKernel): number {
  const stage = (aPieces(k) * scaledRows(k) + 3 * scaledCols(k)) * (k.stageK / 4 + PAD);
  return 4 * Math.max(stage, k.sg * results(k) * 16 * k.sm * k.tn * k.jr);
}

export function scaledWGSL(k: ScaledKernel): string {
  if (period(k) % k.stageK !== 0 || k.sn % k.jr !== 0)
    throw new Error(`scaledWGSL: ${scaledName(k)}: stageK must divide the period and jr divide sn`);
  const WM = scaledRows(k);
  const WN = scaledCols(k);
  const R16 = 16 * k.sm;
  const WGS = k.sg * SUBGROUP;
  const SA = k.stageK / 4 + PAD;
  const SKW = k.stageK / 4;
  const AP = aPieces(k);
  const Q = results(k);
  const RW = R16 * k.tn * k.jr; // i32 per stored result piece per round and subgroup
  const PER = RW / SUBGROUP;
  const A = range(AP);
  const I = range(k.sm);
  const J = range(k.sn);
  // result q: x piece p against A piece a
  const qOf = (p: number, a: number): number => p * AP + a;
  const acc = (q: number, i: number, j: number): string => `c${q}_${i}_${j}`;
  const mma = [
    ...A.flatMap((a) =>
      I.map(
        (i) =>
          `let a${a}_${i} = ${load(k, "L", "row", "&sh", `(${a * WM}u + s * ${R16}u + ${16 * i}u) * ${SA}u + kk`, `${SA}u`)};`,
      ),
    ),
    ...range(3).flatMap((p) =>
      J.flatMap((j) => [
        `let b${p}_${j} = ${load(k, "R", "col", "&sh", `(${AP * WM + p * WN + j * k.tn}u) * ${SA}u + kk`, `${SA}u`)};`,
        ...A.flatMap((a) =>
          I.map(
            (i) =>
              `${acc(qOf(p, a), i, j)} = subgroupMatrixMultiplyAccumulate(a${a}_${i}, b${p}_${j}, ${acc(qOf(p, a), i, j)});`,
          ),
        ),
      ]),
    ),
  ].join("\n      ");
  const piece = (p: number): string =>
    k.scheme === "per32"
      ? `f32(sh[e + ${p * RW}u])`
      : `f32(sh[e + ${2 * p * RW}u] * 64 + sh[e + ${(2 * p + 1) * RW}u])`;
  const rounds = range(k.sn / k.jr).map((t) => {
    const js = range(k.jr).map((jj) => t * k.jr + jj);
    const stores = range(Q).flatMap((q) =>
      I.flatMap((i) =>
        js.map((j, jj) =>
          store(k, "&sh", `s * ${Q * RW}u + ${q * RW + jj * k.tn * R16 + 16 * i}u`, acc(q, i, j), `${R16}u`),
        ),
      ),
    );
    const zero = range(Q).flatMap((q) => I.flatMap((i) => js.map((j) => `${acc(q, i, j)} = Acc();`)));
    return `${stores.join("\n      ")}
      ${zero.join(" ")}
      workgroupBarrier();
      for (var r = 0u; r < ${PER}u; r++) {
        let e = rs * ${Q * RW}u + lane + r * ${SUBGROUP}u;
        yv[${t * PER}u + r] += w * (${range(3)
          .map((p) => `${piece(p)} * ${2 ** PIECE_SHIFT[p]}.0`)
          .join(" + ")});
      }
      workgroupBarrier();`;
  });
  const stageWords = (AP * WM + 3 * WN) * SA;
  return `${mmaPrologue(k, "vec4<i32>", "f32", true, Math.max(stageWords, k.sg * Q * RW), WGS)}
  // the rescale reads by invocation index, not subgroup: any bijection onto the stored elements will do
  let rs = lid / ${SUBGROUP}u;
  let lane = lid % ${SUBGROUP}u;
  let kw = p.K / 4u;
  let nb = p.K / ${period(k)}u;
  let m0 = wg.x * ${WM}u;
  let n0 = wg.y * ${WN}u;
  let wrow = min(m0 + rs * ${R16}u + lane % ${R16}u, p.M - 1u) * nb;
  var yv: array<f32, ${(WM * WN) / WGS}>;
  ${range(Q)
    .flatMap((q) => I.flatMap((i) => J.map((j) => `var ${acc(q, i, j)} = Acc();`)))
    .join(" ")}
  for (var k = 0u; k < kw; k += ${SKW}u) {
    for (var i = lid; i < ${(AP * WM * k.stageK) / 16}u; i += ${WGS}u) {
      let r = i / ${k.stageK / 16}u;
      let q = i % ${k.stageK / 16}u;
      let v = A[(((r / ${WM}u) * p.M + min(m0 + r % ${WM}u, p.M - 1u)) * kw + k) / 4u + q];
      let o = r * ${SA}u + q * 4u;
      sh[o] = v.x; sh[o + 1u] = v.y; sh[o + 2u] = v.z; sh[o + 3u] = v.w;
    }
    for (var i = lid; i < ${(3 * WN * k.stageK) / 16}u; i += ${WGS}u) {
      let c = i / ${k.stageK / 16}u;
      let q = i % ${k.stageK / 16}u;
      let v = B[(((c / ${WN}u) * p.N + n0 + c % ${WN}u) * kw + k) / 4u + q];
      let o = ${AP * WM * SA}u + c * ${SA}u + q * 4u;
      sh[o] = v.x; sh[o + 1u] = v.y; sh[o + 2u] = v.z; sh[o + 3u] = v.w;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < ${SKW}u; kk += 8u) {
      ${mma}
    }
    workgroupBarrier();
    if ((k + ${SKW}u) % ${period(k) / 4}u == 0u) {
      let w = S[wrow + (k + ${SKW}u) / ${period(k) / 4}u - 1u];
      ${rounds.join("\n      ")}
    }
  }
  for (var r = 0u; r < ${(WM * WN) / WGS}u; r++) {
    let e = lane + (r % ${PER}u) * ${SUBGROUP}u;
    let m = m0 + rs * ${R16}u + e % ${R16}u;
    let n = n0 + (r / ${PER}u) * ${k.jr * k.tn}u + e / ${R16}u;
    if (m < p.M) { C[n * p.M + m] = yv[r] * S[p.M * nb + n]; }
  }
}`;
}

export const TWO_MIN = -8192;
export const TWO_MAX = 8191;
/** w = 64·hi + lo with lo ∈ [0, 63] and hi ∈ [−128, 127], for every integer w ∈ [−8192, 8191] */
export function splitTwo(w: Int32Array): [Int8Array, Int8Array] {
  const hi = new Int8Array(w.length);
  const lo = new Int8Array(w.length);
  for (let i = 0; i < w.length; i++) {
    const v = w[i];
    if (v < TWO_MIN || v > TWO_MAX) throw new Error(`splitTwo: ${v} out of range`);
    lo[i] = v & 63;
    hi[i] = v >> 6;
  }
  return [hi, lo];
}

/** float64 reference of Y = sx[n]·Σ_b sw[m][b]·Σ_p 2^shift_p·(w·x_p)_b from exact integer block products, and a per-element
 * tolerance: each f32 block term passes ≤ 7 roundings (i32 → f32, two products and two sums of the pieces, ×w, the sum
 * into yv) and the running sum of nb terms ≤ nb more, each bounded by 2^-24 of T = Σ_b |sw|·Σ_p 2^shift_p·|c_p|·|sx|:
 * |err| ≤ (nb + 8)·2^-24·T to first order. */
export function scaledReference(
  scheme: Scheme,
  Ap: Int8Array[],
  Bp: Int8Array[],
  S: Float32Array,
  M: number,
  N: number,
  K: number,
): { want: Float64Array; tol: Float64Array } {
  const P = period({ scheme });
  const nb = K / P;
  const want = new Float64Array(M * N);
  const tol = new Float64Array(M * N);
  const sub = (x: Int8Array, rows: number, b: number): Int8Array => {
    const o = new Int8Array(rows * P);
    for (let r = 0; r < rows; r++) o.set(x.subarray(r * K + b * P, r * K + b * P + P), r * P);
    return o;
  };
  for (let b = 0; b < nb; b++) {
    const As = Ap.map((a) => sub(a, M, b));
    const c = Bp.map((x) => {
      const xs = sub(x, N, b);
      const parts = As.map((a) => gemmI8(a, xs, M, N, P));
      return parts.length === 1 ? parts[0] : Float64Array.from(parts[0], (v, i) => 64 * v + parts[1][i]);
    });
    for (let n = 0; n < N; n++)
      for (let m = 0; m < M; m++) {
        const i = n * M + m;
        const sw = S[m * nb + b];
        let v = 0;
        let t = 0;
        c.forEach((cp, p) => ((v += cp[i] * 2 ** PIECE_SHIFT[p]), (t += Math.abs(cp[i]) * 2 ** PIECE_SHIFT[p])));
        want[i] += sw * v;
        tol[i] += Math.abs(sw) * t;
      }
  }
  for (let n = 0; n < N; n++)
    for (let m = 0; m < M; m++) {
      const sx = S[M * nb + n];
      want[n * M + m] *= sx;
      tol[n * M + m] = (nb + 8) * 2 ** -24 * tol[n * M + m] * Math.abs(sx) + 1e-30;
    }
  return { want, tol };
}

/** Random weights (full int8, or w over the whole two-piece range), x over the whole three-piece range, signed scales. */
export function scaledInputs(
  scheme: Scheme,
  M: number,
  N: number,
  K: number,
  seed: number,
): { Ap: Int8Array[]; Bp: Int8Array[]; S: Float32Array } {
  const words = (n: number, s: number): Uint32Array => new Uint32Array(rngI8(4 * n, s).buffer);
  const Ap =
    scheme === "per32"
      ? [rngI8(M * K, seed)]
      : splitTwo(Int32Array.from(words(M * K, seed), (w) => (w & 0x3fff) + TWO_MIN));
  const Bp = splitThree(Int32Array.from(words(N * K, seed + 1), (w) => (w & 0x3fffff) - 2 ** 21));
  const nb = K / period({ scheme });
  const S = Float32Array.from(
    { length: M * nb + N },
    (_, i) => (i % 7 === 3 ? -1 : 1) * (0.25 + ((i * 37) % 101) / 64),
  );
  return { Ap, Bp, S };
}

export const concatI8 = (xs: Int8Array[]): Int8Array => {
  const out = new Int8Array(xs.reduce((s, x) => s + x.length, 0));
  xs.reduce((o, x) => (out.set(x, o), o + x.length), 0);
  return out;
};

export async function checkScaled(
  g: Gpu,
  pipe: GPUComputePipeline,
  k: ScaledKernel,
  M: number,
  N: number,
  K: number,
  seed: number,
): Promise<{ ok: boolean; detail: string }> {
  const { Ap, Bp, S } = scaledInputs(k.scheme, M, N, K, seed);
  const out = g.buffer(M * N * 4);
  const bufs = [
    g.buffer(M * K * Ap.length, packI8(concatI8(Ap))),
    g.buffer(3 * N * K, packI8(concatI8(Bp))),
    out,
    g.params(M, N, K),
    g.buffer(S.byteLength, S),
  ];
  await g.run(pipe, bufs, [Math.ceil(M / scaledRows(k)), N / scaledCols(k)]);
  const got = new Float32Array(await g.read(out, M * N * 4));
  bufs.forEach((b) => b.destroy());
  const { want, tol } = scaledReference(k.scheme, Ap, Bp, S, M, N, K);
  let bad = 0;
  let first = "";
  let worst = 0;
  for (let i = 0; i < M * N; i++) {
    const err = Math.abs(got[i] - want[i]);
    worst = Math.max(worst, err / tol[i]);
    if (!(err <= tol[i]) && bad++ === 0)
      first = `first mismatch at m=${i % M} n=${Math.floor(i / M)}: got ${got[i]}, want ${want[i]}`;
  }
  return {
    ok: bad === 0,
    detail:
      bad === 0 ? `within tolerance (worst ${(100 * worst).toFixed(1)}% of it)` : `${bad} of ${M * N} wrong; ${first}`,
  };
}
