/**
 * One-token absorbed MLA attention as one kernel, a workgroup per head (`tune.attnFuse = 1`; gpu-model.ts): what the
 * decode step otherwise does in three dependent dispatches — the cache write (RMSNorm(c)·g and rope(k_pe)) with q_pe's
 * rope and the absorb q_abs = W_UK·q_nope, then the attention over the latent cache, then W_UV — for a step of one
 * token whose keys fit one chunk (ATTN_CHUNK), without DSA selections.
 *
 * Every workgroup normalizes and ropes the token's own key itself (576 values) and uses it for the last key, so that no
 * workgroup waits for another's cache write; the workgroup of head 0 writes it to the cache for later steps. W_UK and
 * W_UV are read in their GGUF blocks through each type's `deq` (wgsl-quant.ts), renamed per matrix.
 */
import { dequantWGSL } from "./wgsl-quant.js";
import { ATTN_CHUNK, KEY_ROW_FN } from "./wgsl-ops.js";

export interface AttnFusedShape {
  readonly heads: number;
  /** q_nope width (W_UK's columns) */
  readonly P: number;
  /** rope width (q_pe, k_pe) */
  readonly R: number;
  /** latent width (W_UK's rows, W_UV's columns) */
  readonly L: number;
  /** value head width (W_UV's rows) */
  readonly V: number;
  readonly typeK: number;
  readonly unitK: number;
  readonly typeV: number;
  readonly unitV: number;
  /** the device's fixed subgroup size */
  readonly sg: number;
}

/** Parameter block of the fused attention kernel (u32 words; scale and eps as f32 bits). */
export const ATTN_FUSED_PARAMS = ["scale", "eps", "pageSize", "kvOff", "rowBytesK", "itemBytesK", "rowBytesV", "itemBytesV"] as const;

/** A type's dequantization helpers with every module-scope name suffixed, so that two types live in one module. */
function dequantAs(type: number, unit: number, suffix: string, buffer: string): string {
  return dequantWGSL(type, unit)
    .replace(/\bW\[/g, `${buffer}[`)
    .replace(/\b(b8|b16|b32|h2f|sx8|smk4|deq|dv|KIQ4|U)\b/g, `$1${suffix}`);
}

/** Threads of the fused kernel's workgroup. */
const WG = 256;

/**
 * a = row r of head h's matrix M (K: W_UK, V: W_UV; `rows` × `cols` in units of `unit`) · x (workgroup memory), for
 * each row r of a thread in turn, then `store` (which sees r and a).
 */
function headRows(M: "K" | "V", rows: number, cols: number, unit: number, x: string, store: string): string {
  return `for (var r = li; r < ${rows}u; r += ${WG}u) {
    let rb = h * p.itemBytes${M} + r * p.rowBytes${M};
    var a = 0.0;
    for (var u = 0u; u < ${cols / unit}u; u++) {
      deq${M}(rb, u);
      for (var i = 0u; i < ${unit}u; i++) { a += dv${M}[i] * ${x}[u * ${unit}u + i]; }
    }
    ${store}
  }`;
}

export function attnFusedWGSL(s: AttnFusedShape): string {
  const { P, R, L, V, sg: SG } = s;
  const D = P + R;
  const NSG = WG / SG;
  const HALF = R / 2;
  // the weighted sum: 4 key groups of 64 threads, each thread L/64 columns
  const G = 4;
  const TPG = WG / G;
  const DPT = Math.ceil(L / TPG);
  const dot = (n: number, q: string, k: string): string =>
    `for (var i = 0u; i < ${Math.ceil(n / SG)}u; i++) { let d = lane + i * ${SG}u; if (d < ${n}u) { s += qs[${q} + d] * ${k}; } }`;
  return /* wgsl */ `enable subgroups;
struct P { ${ATTN_FUSED_PARAMS.map((k) => `${k}: ${k === "scale" || k === "eps" ? "f32" : "u32"}`).join(", ")} }
@group(0) @binding(0) var<storage, read> A0: array<f32>;
@group(0) @binding(1) var<storage, read> WK: array<u32>;
@group(0) @binding(2) var<storage, read> WV: array<u32>;
@group(0) @binding(3) var<storage, read> G: array<f32>;
@group(0) @binding(4) var<storage, read> CS: array<f32>;
@group(0) @binding(5) var<storage, read> POS: array<u32>;
@group(0) @binding(6) var<storage, read> ROW: array<u32>;
@group(0) @binding(7) var<storage, read_write> CC: array<f32>;
@group(0) @binding(8) var<storage, read_write> CK: array<f32>;
@group(0) @binding(9) var<storage, read> META: array<u32>;
@group(0) @binding(10) var<storage, read> SEL: array<u32>;
@group(0) @binding(11) var<storage, read_write> O: array<f32>;
@group(0) @binding(12) var<uniform> p: P;
${KEY_ROW_FN}
${dequantAs(s.typeK, s.unitK, "K", "WK")}
${dequantAs(s.typeV, s.unitV, "V", "WV")}
var<workgroup> qn: array<f32, ${P}>;
var<workgroup> qs: array<f32, ${L + R}>;
var<workgroup> cur: array<f32, ${L + R}>;
var<workgroup> sc: array<f32, ${ATTN_CHUNK}>;
var<workgroup> vr: array<u32, ${ATTN_CHUNK}>;
var<workgroup> red: array<f32, ${NSG}>;
var<workgroup> part: array<f32, ${G * L}>;
var<workgroup> lat: array<f32, ${L}>;
var<workgroup> mt: vec4u;
fn total(li: u32, v: f32) -> f32 {
  let t = subgroupAdd(v);
  if (li % ${SG}u == 0u) { red[li / ${SG}u] = t; }
  workgroupBarrier();
  var a = 0.0;
  for (var k = 0u; k < ${NSG}u; k++) { a += red[k]; }
  workgroupBarrier();
  return a;
}
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let lane = li % ${SG}u;
  let sgi = li / ${SG}u;
  if (li == 0u) { mt = vec4u(META[0], META[1], META[2], META[3]); }
  let m4 = workgroupUniformLoad(&mt);
  let nk = min(m4.y, ${ATTN_CHUNK}u);
  let pos = POS[0];
  let qo = h * ${D}u;
  // q_nope; q_pe roped into qs[L..L+R); the token's own key: RMSNorm(c)·g and rope(k_pe) into cur
  for (var i = li; i < ${P}u; i += ${WG}u) { qn[i] = A0[qo + i]; }
  var ss = 0.0;
  for (var i = li; i < ${L}u; i += ${WG}u) { let v = A0[p.kvOff + i]; ss += v * v; }
  for (var i = li; i < ${HALF}u; i += ${WG}u) {
    let c = CS[(pos * ${HALF}u + i) * 2u];
    let sn = CS[(pos * ${HALF}u + i) * 2u + 1u];
    let x0 = A0[qo + ${P}u + 2u * i];
    let x1 = A0[qo + ${P}u + 2u * i + 1u];
    qs[${L}u + 2u * i] = x0 * c - x1 * sn;
    qs[${L}u + 2u * i + 1u] = x0 * sn + x1 * c;
    let k0 = A0[p.kvOff + ${L}u + 2u * i];
    let k1 = A0[p.kvOff + ${L}u + 2u * i + 1u];
    cur[${L}u + 2u * i] = k0 * c - k1 * sn;
    cur[${L}u + 2u * i + 1u] = k0 * sn + k1 * c;
  }
  let inv = 1.0 / sqrt(total(li, ss) / ${L}.0 + p.eps);
  for (var i = li; i < ${L}u; i += ${WG}u) { cur[i] = A0[p.kvOff + i] * inv * G[i]; }
  workgroupBarrier();
  if (h == 0u) {
    let row = ROW[0];
    for (var i = li; i < ${L}u; i += ${WG}u) { CC[row * ${L}u + i] = cur[i]; }
    for (var i = li; i < ${R}u; i += ${WG}u) { CK[row * ${R}u + i] = cur[${L}u + i]; }
  }
  // the absorbed query: qs[d] = W_UK[h][d]·q_nope
  ${headRows("K", L, P, s.unitK, "qn", "qs[r] = a;")}
  workgroupBarrier();
  // scores, one key a subgroup at a time; the last key is the token's own (cur), the others come from the cache
  // (a loop every subgroup runs as often: its subgroupAdd stays in uniform control flow; a subgroup past the last key
  // scores that key again and keeps nothing)
  var m = -3.0e38;
  for (var jb = 0u; jb < nk; jb += ${NSG}u) {
    let jk = jb + sgi;
    let j = min(jk, nk - 1u);
    let row = keyRow(m4.x, j);
    var s = 0.0;
    if (j + 1u == nk) {
      ${dot(L, "0u", "cur[d]")}
      ${dot(R, `${L}u`, `cur[${L}u + d]`)}
    } else {
      ${dot(L, "0u", `CC[row * ${L}u + d]`)}
      ${dot(R, `${L}u`, `CK[row * ${R}u + d]`)}
    }
    s = subgroupAdd(s) * p.scale;
    if (jk < nk) {
      if (lane == 0u) { sc[j] = s; vr[j] = row; }
      m = max(m, s);
    }
  }
  if (lane == 0u) { red[sgi] = m; }
  workgroupBarrier();
  m = red[0];
  for (var k = 1u; k < ${NSG}u; k++) { m = max(m, red[k]); }
  workgroupBarrier();
  var l = 0.0;
  for (var j = li; j < nk; j += ${WG}u) { let e = exp(sc[j] - m); sc[j] = e; l += e; }
  l = total(li, l);
  // Σ p_j·latent_j in ${G} key groups, then lat = that / l
  let kg = li / ${TPG}u;
  let lt = li % ${TPG}u;
  var acc: array<f32, ${DPT}>;
  for (var j = kg; j < nk; j += ${G}u) {
    let pj = sc[j];
    if (j + 1u == nk) {
      for (var c = 0u; c < ${DPT}u; c++) { let d = lt + c * ${TPG}u; if (d < ${L}u) { acc[c] += pj * cur[d]; } }
    } else {
      let vb = vr[j] * ${L}u;
      for (var c = 0u; c < ${DPT}u; c++) { let d = lt + c * ${TPG}u; if (d < ${L}u) { acc[c] += pj * CC[vb + d]; } }
    }
  }
  for (var c = 0u; c < ${DPT}u; c++) { let d = lt + c * ${TPG}u; if (d < ${L}u) { part[kg * ${L}u + d] = acc[c]; } }
  workgroupBarrier();
  for (var d = li; d < ${L}u; d += ${WG}u) {
    var a = 0.0;
    for (var g = 0u; g < ${G}u; g++) { a += part[g * ${L}u + d]; }
    lat[d] = a / l;
  }
  workgroupBarrier();
  // the head's output: W_UV[h]·lat
  ${headRows("V", V, L, s.unitV, "lat", `O[h * ${V}u + r] = a;`)}
}`;
}
