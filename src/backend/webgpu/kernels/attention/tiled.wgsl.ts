/**
 * The tiled latent attention for many queries (prompt chunks): absorbed MLA is multi-query attention over the latent
 * cache — every head of a query scores the same key rows [c | k_pe] and sums the same value rows c — so a workgroup
 * takes one query's group of G heads and walks its keys in blocks of ATTN_TILED_KEYS, reading each key row once for
 * all G heads (the chunked kernel reads it once per head). Per block, flash-attention style:
 *
 *   S [G × BK] = scale · Qᵢ [G × (d1+d2)] · Kᵀ     (d1 + d2 in chunks of 64 columns staged in workgroup memory)
 *   m' = max(m, rowmax S);  P = exp(S − m');  l = l·e^(m−m') + rowsum P;  acc = acc·e^(m−m') + P · C [BK × dv]
 *
 * Threads for the scores: key k = li % BK, rows (li / BK)·G/4 … +G/4 (each staged key vec4 feeds G/4 dot products);
 * for the weighted sum, output columns li + 256·j of all G rows (each value load feeds G multiply-adds; a row of c is
 * read coalesced by the workgroup). Grid: (splits, head groups, queries); with `split` each workgroup takes
 * p.splitKeys of the query's keys and writes partials in the wide kernel's layout (wide.wgsl.ts, ATTN_WIDE_COMBINE_WGSL
 * combines them), else the final rows. Parameters and bindings are the wide kernel's: Q, KC (c: keys and values), KP
 * (k_pe), META, SEL, O. A query without keys gets zeros.
 */
import { LATENT_ATTN_BINDINGS } from "./wide.wgsl.js";

/** Keys per block (one key a thread along 64 threads). */
export const ATTN_TILED_KEYS = 64;
/** Threads per workgroup. */
const WG = 256;
/** vec4 columns per staged chunk of a key row (64 columns). */
const CV = 16;
const NEG = "-3.0e38";

/** Heads per workgroup for `heads` heads: a power of two from 4 to 32 (padded rows beyond the heads). */
export function attnTiledGroup(heads: number): number {
  let g = 4;
  while (g < 32 && g < heads) g *= 2;
  return g;
}

/** Bytes of workgroup memory of the kernel with G heads a workgroup. */
export function attnTiledBytes(G: number): number {
  const kc = ATTN_TILED_KEYS * (CV + 1) * 16;
  const qc = G * CV * 16;
  const ps = ATTN_TILED_KEYS * G * 4;
  return kc + qc + ps + WG * 4 + ATTN_TILED_KEYS * 4 + 3 * G * 4;
}

export function attnTiledWGSL(d1: number, d2: number, dv: number, G: number, split: boolean): string {
  if (![4, 8, 16, 32].includes(G) || d1 < 1 || d2 < 0 || dv < 1 || dv > d1)
    throw new Error(`attnTiledWGSL: bad shape d1 ${d1}, d2 ${d2}, dv ${dv}, G ${G}`);
  const BK = ATTN_TILED_KEYS;
  const D = d1 + d2;
  const NC = Math.ceil(D / (4 * CV)); // column chunks of a key row
  const RT = G / 4; // score rows a thread
  const RG = G / 4; // vec4s of P per key
  const TPR = WG / G; // threads per row in the softmax
  const KPT = BK / TPR; // keys a thread in the softmax
  const NJ = Math.ceil(dv / WG); // output columns a thread
  const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
  const acc = (r: number, j: number): string => `o${r}_${j}`;
  // four consecutive elements e.. of a key row (c then k_pe; zero past them) and of a query row: one branch where all
  // four lie in one part
  const four = (
    name: string,
    a: string,
    aBase: string,
    b: string,
    bBase: string,
  ): string => `fn ${name}(base: u32, e: u32) -> vec4f {
  if (e + 4u <= ${d1}u) { let o = ${aBase} + e; return vec4f(${a}[o], ${a}[o + 1u], ${a}[o + 2u], ${a}[o + 3u]); }
  ${d2 > 0 ? `if (e >= ${d1}u && e + 4u <= ${D}u) { let o = ${bBase} + e - ${d1}u; return vec4f(${b}[o], ${b}[o + 1u], ${b}[o + 2u], ${b}[o + 3u]); }` : ""}
  var x = vec4f(0.0);
  for (var t = 0u; t < 4u; t++) {
    let f = e + t;
    if (f < ${d1}u) { x[t] = ${a}[${aBase} + f]; }${d2 > 0 ? ` else if (f < ${D}u) { x[t] = ${b}[${bBase} + f - ${d1}u]; }` : ""}
  }
  return x;
}`;
  const keyElem = four("key4", "KC", "p.k1Off + base * p.k1Stride", "KP", "p.k2Off + base * p.k2Stride");
  const qElem = four("q4", "Q", "base", "Q", "base + p.q2Off");
  const stageK = range(Math.ceil((BK * CV) / WG))
    .map(
      (q) => `{ let s = li + ${q * WG}u; let k = s / ${CV}u; let v = s % ${CV}u; var x = vec4f(0.0);
        if (k < nkb) { let e = c * ${4 * CV}u + 4u * v; let row = KR[k];
          x = key4(row, e); }
        KS[k * ${CV + 1}u + v] = x; }`,
    )
    .join("\n      ");
  const stageQ = range(Math.ceil((G * CV) / WG))
    .map(
      (
        q,
      ) => `{ let s = li + ${q * WG}u; ${(q + 1) * WG > G * CV ? `if (s < ${G * CV}u) ` : ""}{ let r = s / ${CV}u; let v = s % ${CV}u; var x = vec4f(0.0);
        if (h0 + r < p.heads) { let qb = p.qOff + i * p.qStride + (h0 + r) * p.qHead; let e = c * ${4 * CV}u + 4u * v;
          x = q4(qb, e); }
        QS[s] = x; } }`,
    )
    .join("\n      ");
  const scoreDecl = range(RT)
    .map((r) => `var s${r} = 0.0;`)
    .join(" ");
  const scoreFma = range(RT)
    .map((r) => `s${r} += dot(QS[(g * ${RT}u + ${r}u) * ${CV}u + v], kv);`)
    .join(" ");
  const scoreStore = range(RT)
    .map((r) => {
      const at = `kk * ${G}u + g * ${RT}u + ${r}u`;
      return `PS[(${at}) / 4u][(${at}) % 4u] = select(${NEG}, s${r} * p.scale, kk < nkb);`;
    })
    .join(" ");
  const accDecl = range(G)
    .flatMap((r) => range(NJ).map((j) => `var ${acc(r, j)} = 0.0;`))
    .join(" ");
  const rescale = range(G)
    .map(
      (r) =>
        `{ let f = SF[${r}u]; ${range(NJ)
          .map((j) => `${acc(r, j)} *= f;`)
          .join(" ")} }`,
    )
    .join(" ");
  const colGuard = NJ * WG !== dv;
  const pvKey = `{ let vb = p.k1Off + KR[k] * p.k1Stride;
        ${range(NJ)
          .map((j) =>
            colGuard
              ? `var v${j} = 0.0; if (li + ${j * WG}u < ${dv}u) { v${j} = KC[vb + li + ${j * WG}u]; }`
              : `let v${j} = KC[vb + li + ${j * WG}u];`,
          )
          .join(" ")}
        ${range(RG)
          .map(
            (q) =>
              `{ let pq = PS[k * ${RG}u + ${q}u]; ${range(4)
                .flatMap((e) =>
                  range(NJ).map((j) => `${acc(4 * q + e, j)} = fma(pq[${e}], v${j}, ${acc(4 * q + e, j)});`),
                )
                .join(" ")} }`,
          )
          .join("\n        ")} }`;
  const rowValue = (r: number, j: number): string => (split ? acc(r, j) : `${acc(r, j)} * inv${r}`);
  const writes = range(G)
    .map(
      (r) => `if (h0 + ${r}u < p.heads) {
    ${
      split
        ? `let po = ((i * p.heads + h0 + ${r}u) * p.splits + sp) * (p.dv + 2u);
    if (li == 0u) { O[po] = SM[${r}u]; O[po + 1u] = SL[${r}u]; }
    let ob = po + 2u;`
        : `let inv${r} = select(0.0, 1.0 / SL[${r}u], SL[${r}u] > 0.0);
    let ob = p.oOff + i * p.oStride + (h0 + ${r}u) * p.oHead;`
    }
    ${range(NJ)
      .map((j) => `${colGuard ? `if (li + ${j * WG}u < ${dv}u) ` : ""}{ O[ob + li + ${j * WG}u] = ${rowValue(r, j)}; }`)
      .join(" ")}
  }`,
    )
    .join("\n  ");
  return /* wgsl */ `${LATENT_ATTN_BINDINGS}
${keyElem}
${qElem}
var<workgroup> KS: array<vec4f, ${BK * (CV + 1)}>;
var<workgroup> QS: array<vec4f, ${G * CV}>;
var<workgroup> PS: array<vec4f, ${(BK * G) / 4}>;
var<workgroup> RED: array<f32, ${WG}>;
var<workgroup> KR: array<u32, ${BK}>;
var<workgroup> SM: array<f32, ${G}>;
var<workgroup> SL: array<f32, ${G}>;
var<workgroup> SF: array<f32, ${G}>;
var<workgroup> mt: vec4u;
// latent attention, tiled: ${G} heads × ${BK} keys a block, d1 ${d1}, d2 ${d2}, dv ${dv}${split ? ", split" : ""}
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let sp = wid.x;
  let h0 = wid.y * ${G}u;
  let i = wid.z;
  if (li == 0u) { mt = vec4u(META[4u * i], META[4u * i + 1u], META[4u * i + 2u], META[4u * i + 3u]); }
  if (li < ${G}u) { SM[li] = ${NEG}; SL[li] = 0.0; }
  let m4 = workgroupUniformLoad(&mt);
  let k0 = ${split ? "sp * p.splitKeys" : "0u"};
  let k1 = ${split ? "min(m4.y, k0 + p.splitKeys)" : "m4.y"};
  let kk = li % ${BK}u;
  let g = li / ${BK}u;
  let row = li / ${TPR}u;
  let part = li % ${TPR}u;
  ${accDecl}
  for (var kb = k0; kb < k1; kb += ${BK}u) {
    let nkb = min(${BK}u, k1 - kb);
    workgroupBarrier();
    if (li < nkb) {
      var u = kb + li;
      if (m4.w != 0u) { u = SEL[m4.z + u]; }
      KR[li] = keyRow(m4.x, u);
    }
    ${scoreDecl}
    for (var c = 0u; c < ${NC}u; c++) {
      workgroupBarrier();
      ${stageK}
      ${stageQ}
      workgroupBarrier();
      for (var v = 0u; v < ${CV}u; v++) {
        let kv = KS[kk * ${CV + 1}u + v];
        ${scoreFma}
      }
    }
    ${scoreStore}
    workgroupBarrier();
    // the block's row maxima, then P = exp(S − m'), the row sums and each row's factor e^(m − m')
    var mx = ${NEG};
    for (var e = 0u; e < ${KPT}u; e++) { let at = (part * ${KPT}u + e) * ${G}u + row; mx = max(mx, PS[at / 4u][at % 4u]); }
    RED[li] = mx;
    workgroupBarrier();
    ${range(Math.log2(TPR))
      .map((t) => {
        const s = TPR >> (t + 1);
        return `if (part < ${s}u) { RED[li] = max(RED[li], RED[li + ${s}u]); }\n    workgroupBarrier();`;
      })
      .join("\n    ")}
    let mNew = max(SM[row], RED[row * ${TPR}u]);
    workgroupBarrier();
    var sum = 0.0;
    for (var e = 0u; e < ${KPT}u; e++) {
      let k = part * ${KPT}u + e;
      let at = k * ${G}u + row;
      let pk = select(0.0, exp(PS[at / 4u][at % 4u] - mNew), k < nkb);
      PS[at / 4u][at % 4u] = pk;
      sum += pk;
    }
    RED[li] = sum;
    workgroupBarrier();
    ${range(Math.log2(TPR))
      .map((t) => {
        const s = TPR >> (t + 1);
        return `if (part < ${s}u) { RED[li] += RED[li + ${s}u]; }\n    workgroupBarrier();`;
      })
      .join("\n    ")}
    if (part == 0u) {
      let f = exp(SM[row] - mNew);
      SF[row] = f;
      SL[row] = SL[row] * f + RED[li];
      SM[row] = mNew;
    }
    workgroupBarrier();
    ${rescale}
    for (var k = 0u; k < nkb; k++) ${pvKey}
  }
  workgroupBarrier();
  ${writes}
}`;
}
