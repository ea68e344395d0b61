/**
 * WGSL of the matrix kernels over GGUF-block weights (see quant.wgsl.ts for the block decoding):
 * - matvec2 / matvecExperts / matvecCoalesced: y[b][t][rowBase+r] (+)= Σ_c W_b[r][c]·x[b][t][c]; the batch index b
 *            selects a head (weight stride) or, in the gather variants, an expert read from an id buffer (only the
 *            selected experts' rows are read).
 * - matvecT: y[b][t][c] (+)= Σ_r W_b[r][c]·x[b][t][rowBase+r]  — one thread per (unit, token).
 * - getRows: dequantized rows by id (embedding lookup).
 */
import { deq4WGSL, dequantWGSL } from "../quant.wgsl.js";

/**
 * WGSL statements reading expert `ex`'s list (IDS: offset and count per expert, then the pairs grouped by expert from
 * word idsOff) into `m` (its pairs; 0 where `live` is false) and `lb` (where they start), uniform across the workgroup
 * through `oc` (var<workgroup> oc: vec2u).
 */
export function expertListWGSL(ex: string, live?: string): string {
  return `if (li == 0u) { oc = vec2u(IDS[2u * ${ex}], IDS[2u * ${ex} + 1u]); }
  let o2 = workgroupUniformLoad(&oc);
  let m = ${live === undefined ? "o2.y" : `select(0u, o2.y, ${live})`};
  let lb = p.idsOff + o2.x;`;
}

/** Parameter block shared by matvec / matvecT (u32 words, in this order). */
export const MAT_PARAMS = [
  "rows", // rows of W in this piece
  "nu", // units per row
  "n", // tokens
  "xStride",
  "yStride",
  "xOff",
  "yOff",
  "rowBytes",
  "rowBase", // first row of this piece in the whole matrix
  "acc", // 1: add into y; 2: y = silu(y)·(W·x) (SwiGLU with y holding the gate product)
  "gx", // workgroups along x
  "tiles", // token tiles (matvec)
  "wOff", // byte offset of row 0 in the bound buffer
  "wBatch", // bytes between batch items' weights (heads / experts)
  "xBatch",
  "yBatch",
  "idsOff",
  "e0", // gather: first expert in this piece
  "e1", // gather: one past the last
  "xDiv", // gather: x batch index = b / xDiv
] as const;
export type MatParams = Record<(typeof MAT_PARAMS)[number], number>;

export function packMatParams(p: MatParams): Uint32Array {
  return Uint32Array.from(MAT_PARAMS.map((k) => p[k] >>> 0));
}

const STRUCT = `struct P { ${MAT_PARAMS.map((k) => `${k}: u32`).join(", ")} }`;

/**
 * The matrix kernels' epilogue `out`: y at yOff + b·yBatch (+ t·yStride with `perToken`) + rowBase + r, overwritten
 * (acc 0), added to (acc 1), or SwiGLU with y holding the gate product (acc 2).
 */
export function matOutWGSL(perToken: boolean): string {
  return `fn out(b: u32, ${perToken ? "t: u32, " : ""}r: u32, v: f32) {
  let yo = p.yOff + b * p.yBatch + ${perToken ? "t * p.yStride + " : ""}p.rowBase + r;
  if (p.acc == 1u) { Y[yo] += v; } else if (p.acc == 2u) { let g = Y[yo]; Y[yo] = g / (1.0 + exp(-g)) * v; } else { Y[yo] = v; }
}`;
}

export function matvecTWGSL(type: number, U: number): string {
  return /* wgsl */ `
${STRUCT}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
${dequantWGSL(type, U)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let u = g.x;
  let t = g.y;
  let b = g.z;
  if (u >= p.nu || t >= p.n) { return; }
  var acc: array<f32, 32>;
  let xo = p.xOff + b * p.xBatch + t * p.xStride + p.rowBase;
  for (var r = 0u; r < p.rows; r++) {
    deq(p.wOff + b * p.wBatch + r * p.rowBytes, u);
    let a = X[xo + r];
    for (var i = 0u; i < U; i++) { acc[i] += dv[i] * a; }
  }
  let yo = p.yOff + b * p.yBatch + t * p.yStride + u * U;
  for (var i = 0u; i < U; i++) {
    if (p.acc != 0u) { Y[yo + i] += acc[i]; } else { Y[yo + i] = acc[i]; }
  }
}`;
}

/** Y[t·yStride + c] = W[ids[t] − rowBase][c] for rows in this piece (others left to other pieces). */
export function getRowsWGSL(type: number, U: number): string {
  return /* wgsl */ `
${STRUCT}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> IDS: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
${dequantWGSL(type, U)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let u = g.x;
  let t = g.y;
  if (u >= p.nu || t >= p.n) { return; }
  let id = IDS[p.idsOff + t];
  if (id < p.rowBase || id >= p.rowBase + p.rows) { return; }
  deq(p.wOff + (id - p.rowBase) * p.rowBytes, u);
  let yo = p.yOff + t * p.yStride + u * U;
  for (var i = 0u; i < U; i++) { Y[yo + i] = dv[i]; }
}`;
}

/** Workgroup size of the multi-row matrix-vector kernel. */
export const MV_WG = 256;

export interface MatvecShape {
  /** threads per row (the subgroup size in the subgroup variant) */
  readonly tpr: number;
  /** tokens per workgroup (accumulators per thread) */
  readonly tn: number;
  /** reduce each row with subgroupAdd (tpr = the device's fixed subgroup size) instead of workgroup memory */
  readonly subgroup: boolean;
}

/**
 * The subgroup / shared matrix-vector kernel: MV_WG/tpr rows per workgroup, tpr threads per row walking the row's 32-element
 * units (u = lane, lane + tpr, …: neighbouring threads read neighbouring bytes), each unit dequantized once and
 * multiplied with up to tn tokens held in registers. A row's partial sums are reduced with one subgroupAdd (no
 * barrier, no workgroup memory) or, without subgroups, through workgroup memory with a single barrier. Same
 * parameters and grid meaning as matvecWGSL, with x counting row groups instead of rows.
 */
export function matvec2WGSL(type: number, U: number, gather: boolean, s: MatvecShape): string {
  const { tpr: TPR, tn: TN } = s;
  const ROWS = MV_WG / TPR;
  const reduce = s.subgroup
    ? `  for (var t = 0u; t < ${TN}u; t++) {
    let v = subgroupAdd(acc[t]);
    if (lane == 0u && valid && t < nt) { out(b, t0 + t, r, v); }
  }`
    : `  for (var t = 0u; t < ${TN}u; t++) { red[li * ${TN}u + t] = acc[t]; }
  workgroupBarrier();
  for (var k = li; k < ${ROWS * TN}u; k += ${MV_WG}u) {
    let rr = k / ${TN}u;
    let t = k % ${TN}u;
    let r2 = rg * ${ROWS}u + rr;
    if (r2 < p.rows && t < nt) {
      var v = 0.0;
      for (var l = 0u; l < ${TPR}u; l++) { v += red[(rr * ${TPR}u + l) * ${TN}u + t]; }
      out(b, t0 + t, r2, v);
    }
  }`;
  return /* wgsl */ `${s.subgroup ? "enable subgroups;\n" : ""}
${STRUCT}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
${gather ? "@group(0) @binding(3) var<storage, read> IDS: array<u32>;\n@group(0) @binding(4) var<uniform> p: P;" : "@group(0) @binding(3) var<uniform> p: P;"}
${dequantWGSL(type, U)}
${s.subgroup ? "" : `var<workgroup> red: array<f32, ${MV_WG * TN}>;`}
var<workgroup> wgE: u32;
${matOutWGSL(true)}
@compute @workgroup_size(${MV_WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let tt = wid.y % p.tiles;
  let rg = wid.x + (wid.y / p.tiles) * p.gx;
  let lane = li % ${TPR}u;
  let r = rg * ${ROWS}u + li / ${TPR}u;
  let valid = r < p.rows;
  let b = wid.z;
  var wb = b * p.wBatch;
  var xb = b * p.xBatch;
${
  gather
    ? `  if (li == 0u) { wgE = IDS[p.idsOff + b]; }
  let e = workgroupUniformLoad(&wgE);
  if (e < p.e0 || e >= p.e1) { return; }
  wb = (e - p.e0) * p.wBatch;
  xb = (b / p.xDiv) * p.xBatch;`
    : ""
}
  let rb = p.wOff + wb + select(0u, r, valid) * p.rowBytes;
  let t0 = tt * ${TN}u;
  let nt = min(${TN}u, p.n - t0);
  var acc: array<f32, ${TN}>;
  let nu = select(0u, p.nu, valid);
  for (var u = lane; u < nu; u += ${TPR}u) {
    deq(rb, u);
    let xu = p.xOff + xb + t0 * p.xStride + u * U;
    for (var t = 0u; t < ${TN}u; t++) {
      if (t < nt) {
        let xo = xu + t * p.xStride;
        var s = 0.0;
        for (var i = 0u; i < U; i++) { s += dv[i] * X[xo + i]; }
        acc[t] += s;
      }
    }
  }
${reduce}
}`;
}

/** Pairs scanned per window by the expert-major gather kernel (its workgroup list holds one window's matches). */
export const MV_WINDOW = 512;

/**
 * Expert-major gathered products: one workgroup per (row group, expert of this piece) collects the pairs that picked
 * its expert (scanning the id buffer in windows of MV_WINDOW) and runs them through the multi-row kernel in tiles of
 * up to tn pairs, so each selected expert row is read and dequantized once per tn tokens instead of once per pair.
 * Unselected experts' workgroups only scan the ids. Same parameters as matvecWGSL's gather variant.
 */
export function matvecExpertsWGSL(type: number, U: number, s: MatvecShape): string {
  const { tpr: TPR, tn: TN } = s;
  const ROWS = MV_WG / TPR;
  const reduce = s.subgroup
    ? `    for (var t = 0u; t < ${TN}u; t++) {
      let v = subgroupAdd(acc[t]);
      if (lane == 0u && valid && t < nt) { out(list[t0 + t], r, v); }
    }`
    : `    for (var t = 0u; t < ${TN}u; t++) { red[li * ${TN}u + t] = acc[t]; }
    workgroupBarrier();
    for (var k = li; k < ${ROWS * TN}u; k += ${MV_WG}u) {
      let rr = k / ${TN}u;
      let t = k % ${TN}u;
      let r2 = rg * ${ROWS}u + rr;
      if (r2 < p.rows && t < nt) {
        var v = 0.0;
        for (var l = 0u; l < ${TPR}u; l++) { v += red[(rr * ${TPR}u + l) * ${TN}u + t]; }
        out(list[t0 + t], r2, v);
      }
    }
    workgroupBarrier();`;
  return /* wgsl */ `${s.subgroup ? "enable subgroups;\n" : ""}
${STRUCT}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> IDS: array<u32>;
@group(0) @binding(4) var<uniform> p: P;
${dequantWGSL(type, U)}
${s.subgroup ? "" : `var<workgroup> red: array<f32, ${MV_WG * TN}>;`}
var<workgroup> list: array<u32, ${MV_WINDOW}>;
var<workgroup> cnt: atomic<u32>;
var<workgroup> cntU: u32;
${matOutWGSL(false)}
@compute @workgroup_size(${MV_WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let rg = wid.x + wid.y * p.gx;
  let lane = li % ${TPR}u;
  let r = rg * ${ROWS}u + li / ${TPR}u;
  let valid = r < p.rows;
  let e = p.e0 + wid.z;
  let rb = p.wOff + wid.z * p.wBatch + select(0u, r, valid) * p.rowBytes;
  let nu = select(0u, p.nu, valid);
  for (var w0 = 0u; w0 < p.n; w0 += ${MV_WINDOW}u) {
    if (li == 0u) { atomicStore(&cnt, 0u); }
    workgroupBarrier();
    let w1 = min(w0 + ${MV_WINDOW}u, p.n);
    for (var b = w0 + li; b < w1; b += ${MV_WG}u) {
      if (IDS[p.idsOff + b] == e) { list[atomicAdd(&cnt, 1u)] = b; }
    }
    workgroupBarrier();
    if (li == 0u) { cntU = atomicLoad(&cnt); }
    let m = workgroupUniformLoad(&cntU);
    for (var t0 = 0u; t0 < m; t0 += ${TN}u) {
      let nt = min(${TN}u, m - t0);
      var acc: array<f32, ${TN}>;
      for (var t = 0u; t < ${TN}u; t++) { acc[t] = 0.0; }
      for (var u = lane; u < nu; u += ${TPR}u) {
        deq(rb, u);
        for (var t = 0u; t < ${TN}u; t++) {
          if (t < nt) {
            let xo = p.xOff + (list[t0 + t] / p.xDiv) * p.xBatch + u * U;
            var s = 0.0;
            for (var i = 0u; i < U; i++) { s += dv[i] * X[xo + i]; }
            acc[t] += s;
          }
        }
      }
${reduce}
    }
    workgroupBarrier();
  }
}`;
}

export interface CoalescedShape {
  /** threads per row: a multiple of the subgroup size (when reducing with subgroups), at most MV_WG */
  readonly tpr: number;
  /** tokens per tile (accumulators per thread) */
  readonly tn: number;
  /** the device's fixed subgroup size: rows are reduced with subgroupAdd, then across a row's subgroups in workgroup memory; undefined: workgroup memory only */
  readonly sg: number | undefined;
}

/**
 * The coalesced matrix kernel: MV_WG/tpr rows per workgroup, tpr threads per row, each thread taking four
 * consecutive elements of the row per step (`deq4`) and stepping by 4·tpr, so that a subgroup reads one contiguous
 * stretch of the row's blocks and x as vec4 (one 512-byte line per subgroup and token instead of 32 scattered ones);
 * each dequantized vec4 is used for up to tn tokens. mode "plain" / "gather" (pairs) / "experts" (expert-major): same
 * parameters and grids as matvec2WGSL / matvecExpertsWGSL; x offsets and strides must be multiples of 4 (X is bound as
 * array<vec4f>).
 */
export function matvecCoalescedWGSL(
  type: number,
  U: number,
  mode: "plain" | "gather" | "experts" | "experts-list",
  s: CoalescedShape,
): string {
  const { tpr: TPR, tn: TN, sg } = s;
  const ROWS = MV_WG / TPR;
  const SPR = sg === undefined ? TPR : TPR / sg; // partial sums per row left after the subgroup step
  const experts = mode === "experts" || mode === "experts-list";
  const listed = mode === "experts-list";
  const write = (t: string, r: string, v: string): string =>
    experts
      ? `out(${listed ? "IDS[lb + t0 + " + t + "]" : "list[t0 + " + t + "]"}, ${r}, ${v});`
      : `out(b, t0 + ${t}, ${r}, ${v});`;
  let reduce: string;
  if (sg !== undefined && SPR === 1) {
    // nt is uniform across the workgroup: only the tile's tokens are reduced
    reduce = `  for (var t = 0u; t < ${TN}u; t++) {
    if (t < nt) {
      let v = subgroupAdd(acc[t]);
      if (k0 == 0u && valid) { ${write("t", "r", "v")} }
    }
  }`;
  } else {
    const put =
      sg !== undefined
        ? `  for (var t = 0u; t < ${TN}u; t++) {
    if (t < nt) {
      let v = subgroupAdd(acc[t]);
      if (li % ${sg}u == 0u) { red[(rr * ${SPR}u + k0 / ${sg}u) * ${TN}u + t] = v; }
    }
  }`
        : `  for (var t = 0u; t < ${TN}u; t++) { red[li * ${TN}u + t] = acc[t]; }`;
    reduce = `${put}
  workgroupBarrier();
  for (var k = li; k < ${ROWS * TN}u; k += ${MV_WG}u) {
    let q = k / ${TN}u;
    let t = k % ${TN}u;
    let r2 = rg * ${ROWS}u + q;
    if (r2 < p.rows && t < nt${experts ? "" : " && inPiece"}) {
      var v = 0.0;
      for (var l = 0u; l < ${SPR}u; l++) { v += red[(q * ${SPR}u + l) * ${TN}u + t]; }
      ${write("t", "r2", "v")}
    }
  }
  workgroupBarrier();`;
  }
  const loop = (xBase: string): string => `    var acc: array<f32, ${TN}>;
    for (var t = 0u; t < ${TN}u; t++) { acc[t] = 0.0; }
    for (var e = k0 * 4u; e < cols; e += ${TPR * 4}u) {
      let w = deq4(rb, e);
      let xe = e >> 2u;
      for (var t = 0u; t < ${TN}u; t++) {
        if (t < nt) { acc[t] += dot(w, X[${xBase} + xe]); }
      }
    }`;
  const head = `${sg !== undefined ? "enable subgroups;\n" : ""}
${STRUCT}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
${mode !== "plain" ? "@group(0) @binding(3) var<storage, read> IDS: array<u32>;\n@group(0) @binding(4) var<uniform> p: P;" : "@group(0) @binding(3) var<uniform> p: P;"}
${dequantWGSL(type, U)}
${deq4WGSL(type)}
${SPR > 1 ? `var<workgroup> red: array<f32, ${ROWS * SPR * TN}>;` : ""}`;
  if (!experts) {
    return /* wgsl */ `${head}
${matOutWGSL(true)}
@compute @workgroup_size(${MV_WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let tt = wid.y % p.tiles;
  let rg = wid.x + (wid.y / p.tiles) * p.gx;
  let rr = li / ${TPR}u;
  let k0 = li % ${TPR}u;
  let r = rg * ${ROWS}u + rr;
  var valid = r < p.rows;
  let b = wid.z;
  var wb = b * p.wBatch;
  var xb = b * p.xBatch;
  var inPiece = true;
${
  mode === "gather"
    ? `  // every thread loads the pair's expert id (one cached word): no barrier before the weight loads; a pair whose
  // expert another piece holds runs with no columns and writes nothing
  let e = IDS[p.idsOff + b];
  inPiece = e >= p.e0 && e < p.e1;
  valid = valid && inPiece;
  wb = select(0u, e - p.e0, inPiece) * p.wBatch;
  xb = (b / p.xDiv) * p.xBatch;`
    : ""
}
  let rb = p.wOff + wb + select(0u, r, valid) * p.rowBytes;
  let t0 = tt * ${TN}u;
  let nt = min(${TN}u, p.n - t0);
  let cols = select(0u, p.nu * U, valid);
  let xq = (p.xOff + xb + t0 * p.xStride) >> 2u;
  let xs = p.xStride >> 2u;
${loop("xq + t * xs")}
${reduce}
}`;
  }
  if (listed) {
    return /* wgsl */ `${head}
var<workgroup> oc: vec2u;
${matOutWGSL(false)}
@compute @workgroup_size(${MV_WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let rg = wid.x + wid.y * p.gx;
  let rr = li / ${TPR}u;
  let k0 = li % ${TPR}u;
  let r = rg * ${ROWS}u + rr;
  let valid = r < p.rows;
  let ex = p.e0 + wid.z;
  let rb = p.wOff + wid.z * p.wBatch + select(0u, r, valid) * p.rowBytes;
  let cols = select(0u, p.nu * U, valid);
  ${expertListWGSL("ex")}
  for (var t0 = 0u; t0 < m; t0 += ${TN}u) {
    let nt = min(${TN}u, m - t0);
    var xt: array<u32, ${TN}>;
    for (var t = 0u; t < ${TN}u; t++) { xt[t] = (p.xOff + (IDS[lb + min(t0 + t, m - 1u)] / p.xDiv) * p.xBatch) >> 2u; }
${loop("xt[t]")}
${reduce}
  }
}`;
  }
  return /* wgsl */ `${head}
var<workgroup> list: array<u32, ${MV_WINDOW}>;
var<workgroup> cnt: atomic<u32>;
var<workgroup> cntU: u32;
${matOutWGSL(false)}
@compute @workgroup_size(${MV_WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let rg = wid.x + wid.y * p.gx;
  let rr = li / ${TPR}u;
  let k0 = li % ${TPR}u;
  let r = rg * ${ROWS}u + rr;
  let valid = r < p.rows;
  let ex = p.e0 + wid.z;
  let rb = p.wOff + wid.z * p.wBatch + select(0u, r, valid) * p.rowBytes;
  let cols = select(0u, p.nu * U, valid);
  for (var w0 = 0u; w0 < p.n; w0 += ${MV_WINDOW}u) {
    if (li == 0u) { atomicStore(&cnt, 0u); }
    workgroupBarrier();
    let w1 = min(w0 + ${MV_WINDOW}u, p.n);
    for (var b = w0 + li; b < w1; b += ${MV_WG}u) {
      if (IDS[p.idsOff + b] == ex) { list[atomicAdd(&cnt, 1u)] = b; }
    }
    workgroupBarrier();
    if (li == 0u) { cntU = atomicLoad(&cnt); }
    let m = workgroupUniformLoad(&cntU);
    for (var t0 = 0u; t0 < m; t0 += ${TN}u) {
      let nt = min(${TN}u, m - t0);
      var xt: array<u32, ${TN}>;
      for (var t = 0u; t < ${TN}u; t++) { xt[t] = (p.xOff + (list[min(t0 + t, m - 1u)] / p.xDiv) * p.xBatch) >> 2u; }
${loop("xt[t]")}
${reduce}
    }
    workgroupBarrier();
  }
}`;
}

/**
 * The expert lists of a routed step for the expert-major products (one workgroup): L[2e], L[2e+1] = offset and count
 * of expert e's pairs, then from word 2E the pair indices grouped by expert (order within an expert unspecified: each
 * pair's result does not depend on it). Ids ≥ E are left out.
 */
export const EXPERT_LISTS_WGSL = /* wgsl */ `
struct P { pairs: u32, E: u32, idsOff: u32, _p: u32 }
@group(0) @binding(0) var<storage, read> IDS: array<u32>;
@group(0) @binding(1) var<storage, read_write> L: array<u32>;
@group(0) @binding(2) var<uniform> p: P;
var<workgroup> cnt: array<atomic<u32>, 256>;
var<workgroup> off: array<u32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32) {
  atomicStore(&cnt[li], 0u);
  workgroupBarrier();
  for (var b = li; b < p.pairs; b += 256u) {
    let e = IDS[p.idsOff + b];
    if (e < p.E) { atomicAdd(&cnt[e], 1u); }
  }
  workgroupBarrier();
  if (li == 0u) {
    var s = 0u;
    for (var e = 0u; e < p.E; e++) { off[e] = s; s += atomicLoad(&cnt[e]); }
  }
  workgroupBarrier();
  if (li < p.E) {
    L[2u * li] = off[li];
    L[2u * li + 1u] = atomicLoad(&cnt[li]);
  }
  workgroupBarrier();
  atomicStore(&cnt[li], 0u);
  workgroupBarrier();
  for (var b = li; b < p.pairs; b += 256u) {
    let e = IDS[p.idsOff + b];
    if (e < p.E) { L[2u * p.E + off[e] + atomicAdd(&cnt[e], 1u)] = b; }
  }
}`;
