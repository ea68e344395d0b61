/**
 * WGSL generators and CPU helpers for the int8 subgroup-matrix (tensor core) probe, mma-probe.ts (which holds the
 * research notes on the syntax). Layouts, all int8 packed 4 per 32-bit word, little-endian (byte j of a word = element
 * 4w + j), as Dawn's own SubgroupMatrixTests pack them:
 *   A  [M × K]      weight rows, row-major: row m at word m·K/4
 *   B  [P × N × K]  P pieces of N tokens, each token's K values contiguous (the right matrix K × N, column-major)
 *   C  [N × M] i32  (P = 1) or Y [N × M] f32 (P = 3: Y = sw[m]·sx[n]·(c0·2^14 + c1·2^7 + c2)), token-major like y
 * Tiles: left 16×32 (M×K), right 32×TN (K×N, TN = 16 or 8), result 16×TN. Requirements (no partial tiles in N or K):
 * M % (16·sm) == 0 (partial workgroup tiles in M are fine), N % (tn·sn) == 0, K % 32 == 0 (K % 128 when staged).
 */

/** how load/store name the memory layout: `<T, row_major>(p, off, stride)` (Dawn after gpuweb#6275) or `<T>(p, off, colMajor, stride)` */
export type MajorSyntax = "template" | "bool";

export interface MmaKernel {
  readonly syntax: MajorSyntax;
  /** int8 elements per unit of the offset / stride arguments: 1 = counted in array elements (u32 words), 4 = in int8 values */
  readonly offUnit: 1 | 4;
  readonly strideUnit: 1 | 4;
  /** the subgroup's index: the subgroup_id builtin, or local_invocation_index / 32 */
  readonly sgid: "builtin" | "index";
  readonly tn: 16 | 8;
  /** subgroups per workgroup (stacked along M), 16-row A tiles and tn-column B tiles per subgroup */
  readonly sg: number;
  readonly sm: number;
  readonly sn: number;
  /** stage A and B through workgroup memory (128 int8 of K at a time) instead of loading tiles straight from storage */
  readonly staged: boolean;
  /** 1: C = A·B (i32); 3: three B pieces, combined in f32 with the scales */
  readonly pieces: 1 | 3;
}

export const SUBGROUP = 32;
export const STAGE_K = 128;
const PAD = 4;
export const PIECE_SHIFT = [14, 7, 0] as const;

export function kernelName(k: MmaKernel): string {
  return `${k.staged ? "staged" : "direct"} ${k.sg}sg ${16 * k.sm}x${k.tn * k.sn}/sg tn${k.tn}`;
}
export const rowsPerGroup = (k: MmaKernel): number => k.sg * k.sm * 16;
export const colsPerGroup = (k: MmaKernel): number => k.tn * k.sn;

export function shapeFits(k: MmaKernel, M: number, N: number, K: number): boolean {
  return M % (16 * k.sm) === 0 && N % colsPerGroup(k) === 0 && K % (k.staged ? STAGE_K : 32) === 0;
}

export function load(
  k: Pick<MmaKernel, "syntax" | "offUnit" | "strideUnit">,
  type: string,
  major: "row" | "col",
  ptr: string,
  wordOff: string,
  wordStride: string,
): string {
  const off = k.offUnit === 1 ? wordOff : `(${wordOff}) * 4u`;
  const stride = k.strideUnit === 1 ? wordStride : `(${wordStride}) * 4u`;
  return k.syntax === "template"
    ? `subgroupMatrixLoad<${type}, ${major}_major>(${ptr}, ${off}, ${stride})`
    : `subgroupMatrixLoad<${type}>(${ptr}, ${off}, ${major === "col"}, ${stride})`;
}
/** i32 results: offset and stride count i32 elements under every reading */
export function store(k: Pick<MmaKernel, "syntax">, ptr: string, off: string, value: string, stride: string): string {
  return k.syntax === "template"
    ? `subgroupMatrixStore<col_major>(${ptr}, ${off}, ${value}, ${stride});`
    : `subgroupMatrixStore(${ptr}, ${off}, ${value}, true, ${stride});`;
}

export const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

/** The GEMM kernel's WGSL. Bindings: A, B, out, params {M, N, K, _}, and (pieces = 3) scales [sw (M) | sx (N)]. */
/**
 * A probe kernel's module up to the subgroup index `s` of main: the extensions, the tile aliases, bindings A, B, C
 * (i32 or f32), the parameters and (with scales) S, `sh` in workgroup memory (shWords > 0), and main's signature.
 */
export function mmaPrologue(
  k: Pick<MmaKernel, "tn" | "sg" | "sgid">,
  vec: string,
  cType: "i32" | "f32",
  scales: boolean,
  shWords: number,
  threads: number,
): string {
  return `diagnostic(off, chromium.subgroup_matrix_uniformity);
enable subgroups;
enable chromium_experimental_subgroup_matrix;
struct Params { M: u32, N: u32, K: u32, _pad: u32 }
alias L = subgroup_matrix_left<i8, 32, 16>;
alias R = subgroup_matrix_right<i8, ${k.tn}, 32>;
alias Acc = subgroup_matrix_result<i32, ${k.tn}, 16>;
@group(0) @binding(0) var<storage, read> A: array<${vec}>;
@group(0) @binding(1) var<storage, read> B: array<${vec}>;
@group(0) @binding(2) var<storage, read_write> C: array<${cType}>;
@group(0) @binding(3) var<uniform> p: Params;
${scales ? "@group(0) @binding(4) var<storage, read> S: array<f32>;\n" : ""}${shWords > 0 ? `var<workgroup> sh: array<i32, ${shWords}>;\n` : ""}
@compute @workgroup_size(${threads})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32${k.sgid === "builtin" ? ", @builtin(subgroup_id) sgid: u32" : ""}) {
  let s = ${k.sg === 1 ? "0u" : k.sgid === "builtin" ? "sgid" : `lid / ${SUBGROUP}u`};`;
}

export function mmaWGSL(k: MmaKernel): string {
  const WM = rowsPerGroup(k);
  const WN = colsPerGroup(k);
  const WGS = k.sg * SUBGROUP;
  const SA = STAGE_K / 4 + PAD; // staged row stride in words
  const stageWords = (WM + k.pieces * WN) * SA;
  const shWords = Math.max(k.staged ? stageWords : 0, k.pieces === 3 ? WM * WN : 0);
  const vec = k.staged ? "vec4<i32>" : "i32";
  const acc = (p: number, i: number, j: number): string => `c${p}_${i}_${j}`;
  const P = range(k.pieces);
  const I = range(k.sm);
  const J = range(k.sn);
  const mma = (
    aPtr: string,
    aOff: (i: number) => string,
    aStride: string,
    bPtr: string,
    bOff: (p: number, j: number) => string,
    bStride: string,
  ): string =>
    [
      ...I.map((i) => `let a${i} = ${load(k, "L", "row", aPtr, aOff(i), aStride)};`),
      ...P.flatMap((p) =>
        J.flatMap((j) => [
          `let b${p}_${j} = ${load(k, "R", "col", bPtr, bOff(p, j), bStride)};`,
          ...I.map((i) => `${acc(p, i, j)} = subgroupMatrixMultiplyAccumulate(a${i}, b${p}_${j}, ${acc(p, i, j)});`),
        ]),
      ),
    ].join("\n      ");
  const body = k.staged
    ? `for (var k = 0u; k < kw; k += ${STAGE_K / 4}u) {
    for (var i = lid; i < ${(WM * STAGE_K) / 16}u; i += ${WGS}u) {
      let r = i / ${STAGE_K / 16}u;
      let q = i % ${STAGE_K / 16}u;
      let v = A[(min(m0 + r, p.M - 1u) * kw + k) / 4u + q];
      let o = r * ${SA}u + q * 4u;
      sh[o] = v.x; sh[o + 1u] = v.y; sh[o + 2u] = v.z; sh[o + 3u] = v.w;
    }
    for (var i = lid; i < ${(k.pieces * WN * STAGE_K) / 16}u; i += ${WGS}u) {
      let c = i / ${STAGE_K / 16}u;
      let q = i % ${STAGE_K / 16}u;
      let pc = c / ${WN}u;
      let v = B[((pc * p.N + n0 + c % ${WN}u) * kw + k) / 4u + q];
      let o = ${WM * SA}u + c * ${SA}u + q * 4u;
      sh[o] = v.x; sh[o + 1u] = v.y; sh[o + 2u] = v.z; sh[o + 3u] = v.w;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < ${STAGE_K / 4}u; kk += 8u) {
      ${mma(
        "&sh",
        (i) => `(s * ${16 * k.sm}u + ${16 * i}u) * ${SA}u + kk`,
        `${SA}u`,
        "&sh",
        (pc, j) => `${WM * SA}u + (${pc * WN}u + ${j * k.tn}u) * ${SA}u + kk`,
        `${SA}u`,
      )}
    }
    workgroupBarrier();
  }`
    : `for (var k = 0u; k < kw; k += 8u) {
      ${mma(
        "&A",
        (i) => `(row0 + ${16 * i}u) * kw + k`,
        "kw",
        "&B",
        (pc, j) => `(${pc}u * p.N + n0 + ${j * k.tn}u) * kw + k`,
        "kw",
      )}
  }`;
  const epilogue =
    k.pieces === 1
      ? `if (rowT < p.M) {
    ${I.flatMap((i) => J.map((j) => store(k, "&C", `(n0 + ${j * k.tn}u) * p.M + row0 + ${16 * i}u`, acc(0, i, j), "p.M"))).join("\n    ")}
  }`
      : `var yv: array<f32, ${(WM * WN) / WGS}>;
  ${P.map(
    (
      pc,
    ) => `${pc > 0 ? "workgroupBarrier();\n  " : ""}${I.flatMap((i) => J.map((j) => store(k, "&sh", `${j * k.tn * WM}u + s * ${16 * k.sm}u + ${16 * i}u`, acc(pc, i, j), `${WM}u`))).join("\n  ")}
  workgroupBarrier();
  for (var r = 0u; r < ${(WM * WN) / WGS}u; r++) { yv[r] += f32(sh[lid + r * ${WGS}u]) * ${2 ** PIECE_SHIFT[pc]}.0; }`,
  ).join("\n  ")}
  for (var r = 0u; r < ${(WM * WN) / WGS}u; r++) {
    let e = lid + r * ${WGS}u;
    let m = m0 + e % ${WM}u;
    let n = n0 + e / ${WM}u;
    if (m < p.M) { C[n * p.M + m] = yv[r] * S[m] * S[p.M + n]; }
  }`;
  return `${mmaPrologue(k, vec, k.pieces === 1 ? "i32" : "f32", k.pieces === 3, shWords, WGS)}
  let kw = p.K / 4u;
  let m0 = wg.x * ${WM}u;
  let n0 = wg.y * ${WN}u;
  let rowT = m0 + s * ${16 * k.sm}u;
  let row0 = min(rowT, p.M - ${16 * k.sm}u);
  ${P.flatMap((pc) => I.flatMap((i) => J.map((j) => `var ${acc(pc, i, j)} = Acc();`))).join(" ")}
  ${body}
  ${epilogue}
}`;
}

/** Plain f32 GEMM for reference (no subgroup matrices): C [N × M] = A [M × K] · B [N × K]ᵀ; 64×64 tiles, M, N % 64, K % 16. */
export const F32_GEMM_WGSL = /* wgsl */ `
struct Params { M: u32, N: u32, K: u32, _pad: u32 }
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
var<workgroup> As: array<f32, 1024>;
var<workgroup> Bs: array<f32, 1024>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tx = lid % 16u;
  let ty = lid / 16u;
  let m0 = wg.x * 64u;
  let n0 = wg.y * 64u;
  var acc: array<vec4f, 4>;
  for (var k = 0u; k < p.K; k += 16u) {
    for (var i = 0u; i < 4u; i++) {
      let e = lid + i * 256u;
      let r = e / 16u;
      let kk = e % 16u;
      As[kk * 64u + r] = A[(m0 + r) * p.K + k + kk];
      Bs[kk * 64u + r] = B[(n0 + r) * p.K + k + kk];
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      let a = vec4f(As[kk * 64u + ty * 4u], As[kk * 64u + ty * 4u + 1u], As[kk * 64u + ty * 4u + 2u], As[kk * 64u + ty * 4u + 3u]);
      for (var j = 0u; j < 4u; j++) { acc[j] = fma(a, vec4f(Bs[kk * 64u + tx * 4u + j]), acc[j]); }
    }
    workgroupBarrier();
  }
  for (var j = 0u; j < 4u; j++) {
    let base = (n0 + tx * 4u + j) * p.M + m0 + ty * 4u;
    for (var i = 0u; i < 4u; i++) { C[base + i] = acc[j][i]; }
  }
}`;

export function rngI8(n: number, seed: number): Int8Array {
  let s = seed >>> 0 || 1;
  return Int8Array.from({ length: n }, () => ((s ^= s << 13), (s ^= s >>> 17), (s ^= s << 5), s & 0xff));
}

/** Pack int8 values 4 per little-endian u32 word (length a multiple of 4). */
export function packI8(v: Int8Array): Uint32Array {
  if (v.length % 4 !== 0) throw new Error("packI8: length must be a multiple of 4");
  const out = new Uint32Array(v.length / 4);
  for (let w = 0; w < out.length; w++)
    out[w] =
      ((v[4 * w] & 0xff) |
        ((v[4 * w + 1] & 0xff) << 8) |
        ((v[4 * w + 2] & 0xff) << 16) |
        ((v[4 * w + 3] & 0xff) << 24)) >>>
      0;
  return out;
}
export function unpackI8(w: Uint32Array): Int8Array {
  const out = new Int8Array(w.length * 4);
  for (let i = 0; i < out.length; i++) out[i] = ((w[i >> 2] >>> (8 * (i & 3))) << 24) >> 24;
  return out;
}

/** C [N × M] (i32, exact) = A [M × K] · B [N × K]ᵀ: the CPU reference. */
export function gemmI8(A: Int8Array, B: Int8Array, M: number, N: number, K: number): Int32Array {
  const C = new Int32Array(M * N);
  for (let n = 0; n < N; n++)
    for (let m = 0; m < M; m++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += A[m * K + k] * B[n * K + k];
      C[n * M + m] = s;
    }
  return C;
}

/** Largest integer the three pieces hold: v ∈ [−2^21, 2^21 − 1]. */
export const THREE_MAX = 2 ** 21 - 1;

/** v = p0·2^14 + p1·2^7 + p2 with p0 ∈ [−128, 127] and p1, p2 ∈ [0, 127]: three int8 pieces of each (integer) v. */
export function splitThree(v: Int32Array): [Int8Array, Int8Array, Int8Array] {
  const p0 = new Int8Array(v.length);
  const p1 = new Int8Array(v.length);
  const p2 = new Int8Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const x = v[i];
    if (x < -THREE_MAX - 1 || x > THREE_MAX) throw new Error(`splitThree: ${x} out of range`);
    p2[i] = x & 127;
    p1[i] = (x >> 7) & 127;
    p0[i] = x >> 14;
  }
  return [p0, p1, p2];
}

/** x ≈ scale·v with v = round(x / scale), scale = max|x| / THREE_MAX: |x − scale·v| ≤ scale / 2 (relative 2.4e-7 of max|x|). */
export function quantizeThree(x: Float32Array): { scale: number; v: Int32Array } {
  let mx = 0;
  for (const a of x) mx = Math.max(mx, Math.abs(a));
  const scale = mx > 0 ? mx / THREE_MAX : 1;
  return { scale, v: Int32Array.from(x, (a) => Math.round(a / scale)) };
}

export const combineThree = (c0: number, c1: number, c2: number): number => c0 * 2 ** 14 + c1 * 2 ** 7 + c2;
