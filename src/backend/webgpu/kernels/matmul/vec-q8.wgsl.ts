/**
 * The integer matrix-vector kernel for a few tokens (by default plain products of 5–8 tokens: batched decode steps of a
 * few sequences), under the 8-bit activations (RuntimeOptions `activations: "q8"`) or with x in two int8 pieces
 * (tune.rowTileX16):
 * - the wide kernel's layout for the weights: one subgroup per row, lane l taking the row's 32-column units l, l + sg,
 *   … (Q4_K: unit pairs, 64 columns from one header and two vec4u of nibbles), so a subgroup's loads are contiguous
 *   runs of the row;
 * - the tile's x quantized once per workgroup into workgroup memory (q8_1 per 32 values, as the other q8 kernels:
 *   quantizeX32WGSL), the halves of a unit in separate arrays so that a subgroup's reads of consecutive units are
 *   conflict-free; a workgroup takes `rowsPerSg` rows a subgroup (`par` of them loaded together), more where a product
 *   has rows to spare, so that staging x costs little against the rows' weights; each lane issues its first rows'
 *   loads before the workgroup stages x;
 * - a (row, token) unit is eight `dot4I8Packed` (sixteen with two pieces), exact in i32, and one scaled f32 update;
 *   rows are summed over their lanes with subgroupAdd, four tokens a call.
 * Where the whole tile's x does not fit the workgroup memory budget, the row goes in steps of `ks` columns (x staged
 * per step) and a subgroup takes one run of `par` rows.
 * With `xq8` (by default where the launcher can run xq8.wgsl.ts's pass and staged x would go in steps) nothing is
 * staged: each lane reads its units of x, quantized once by that pass, straight from the buffer (every workgroup reads
 * the same few KB to a few hundred KB, which the caches hold), and every row goes in one step, however long. Staging
 * per workgroup made a long row the slow case: GLM-5's products of 6144 columns and more went in steps, each workgroup
 * of 8 rows (a subgroup a row) loading and quantizing all of the tile's f32 x.
 *
 * Plain products only: the routed experts of such steps stay per pair on the wide kernel (this kernel measured slower
 * there, both per pair and from expert lists; docs/benchmarks webgpu-25).
 *
 * Why: at a batch of 8 the coalesced kernel read v2-lite's q/kv_a at ~160 GB/s, and the wide kernel (x staged per 8
 * rows, in f32) did worse in pieces of 4 tokens; the row-tiled kernels read a row per lane, which the memory serves
 * badly when the weights are not already in the L2. Same parameter block and entry conventions as the row-tiled kernel
 * (rows per workgroup = subgroups × rowsPerSg; tiles of `tokens`).
 */
import { GGMLType } from "../../../../gguf/types.js";
import { dequantWGSL, q8WeightForm, q8WeightWGSL } from "../quant.wgsl.js";
import { dequantForW2, GEMM_STEP } from "./gemm.wgsl.js";
import { bindXq8, quantizeX32WGSL, XQ8_VEC4S } from "./xq8.wgsl.js";
import { matOutWGSL } from "./mat.wgsl.js";
import { Q4K_VEC4 } from "./rowtile-q8.wgsl.js";
import { chunkBindingsWGSL } from "./wide.wgsl.js";

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

export interface VecQ8Shape {
  /** the device's fixed subgroup size: lanes per row */
  readonly sg: number;
  /** subgroups per workgroup */
  readonly sgs: number;
  /** rows each subgroup takes (a multiple of par; par itself where ks < cols) */
  readonly rowsPerSg: number;
  /** rows a subgroup loads together (1 or 2) */
  readonly par: number;
  /** tokens a tile (a multiple of 4) */
  readonly tokens: number;
  /** columns a step (a multiple of 64 dividing cols) */
  readonly ks: number;
  readonly cols: number;
  /** x in two int8 pieces (15 bits per 32 values) */
  readonly pieces?: 2;
  /**
   * x read from the quantizing pass's buffer (xq8.wgsl.ts, bound as X) by each lane, nothing staged: one step of the
   * whole row (ks = cols), one piece
   */
  readonly xq8?: boolean;
}

/** Rows a workgroup of the shape takes: what grids are sized by. */
export function vecQ8Rows(s: VecQ8Shape): number {
  return s.sgs * s.rowsPerSg;
}

/** Bytes of workgroup memory for x staged in steps of ks columns: the pieces' int8s and a (d, d·Σq) per unit. */
export function vecQ8SharedBytes(tokens: number, ks: number, pieces: number): number {
  return tokens * ks * pieces + (tokens * ks * 8) / 32;
}

export function matvecQ8WGSL(type: number, s: VecQ8Shape, dual = false): string {
  const { sg: SG, sgs: NSG, rowsPerSg: RS, par: PAR, tokens: T, ks: KS } = s;
  const NS = s.cols / KS;
  if (
    T % 4 !== 0 ||
    KS % 64 !== 0 ||
    s.cols % KS !== 0 ||
    RS % PAR !== 0 ||
    (NS > 1 && RS !== PAR) ||
    (PAR !== 1 && PAR !== 2) ||
    (s.xq8 === true && (NS !== 1 || (s.pieces ?? 1) !== 1))
  )
    throw new Error(`q8 matrix-vector kernel: bad shape ${JSON.stringify(s)}`);
  const XQ8 = s.xq8 === true;
  const WG = SG * NSG;
  const RW = NSG * RS;
  const U = KS / 32; // units a step
  const vec4 = type === GGMLType.Q4_K;
  const GU = vec4 ? 2 : 1; // units a lane takes together
  const G = U / GU; // groups a step
  const form = q8WeightForm(type);
  const S = dual ? 2 : 1;
  const P = s.pieces ?? 1;
  const sfx = (k: number): string => (k === 0 ? "" : "_2");
  const acc = (j: number, k: number, t: number): string => `a${j}_${k}_${t}`;
  // XQ slots: piece half hf (0, 1: the hi pieces' halves; 2, 3: the lo pieces'), token t, unit h
  const xq = (hf: number, t: string, h: string): string => `XQ[(${hf * T}u + ${t}) * ${U}u + ${h}]`;
  const stage = `for (var i = li; i < ${T * U}u; i += ${WG}u) {
      let t = i / ${U}u; let h = i % ${U}u;
      ${quantizeX32WGSL("t < nt", `xq + (t0 + t) * xs4 + st * ${KS / 4}u + 8u * h`, P)}
      ${xq(0, "t", "h")} = xqa; ${xq(1, "t", "h")} = xqb; XD[t * ${U}u + h] = xd;${P === 1 ? "" : ` ${xq(2, "t", "h")} = xla; ${xq(3, "t", "h")} = xlb;`}
    }`;
  // a step's groups over the subgroup's lanes: lane l takes groups l, l + sg, … (slots i < NG), guarded where the last
  // slot is short
  const NG = Math.ceil(G / SG);
  const guard = G % SG !== 0;
  const slot = (i: number): string => {
    const head = `let g${i} = lane + ${i * SG}u; let in${i} = g${i} < ${G}u; let hs${i} = select(0u, g${i}, in${i}) * ${GU}u; let ub${i} = st * ${U}u + hs${i};`;
    const blocks = vec4
      ? `let pq${i} = (ub${i} & 7u) >> 1u; ${range(PAR)
          .map((j) => `let bo${i}_${j} = (rb${j} >> 4u) + (ub${i} >> 3u) * 9u;`)
          .join(" ")}`
      : `let e${i} = ub${i} * 32u;`;
    // row j of the run, matrix k: the group's weights (Q4_K: a unit pair from its header and two vec4u of nibbles)
    const loads = range(PAR).flatMap((j) =>
      range(S).map((k) => {
        const n = `${i}_${j}_${k}`;
        if (vec4) {
          const Wk = k === 0 ? "W" : "W2";
          return `let hd${n} = ${Wk}[bo${i}_${j}]; let qa${n} = ${Wk}[bo${i}_${j} + 1u + 2u * pq${i}]; let qb${n} = ${Wk}[bo${i}_${j} + 2u + 2u * pq${i}];
      let wa${n}_0 = qa${n} & vec4u(0x0f0f0f0fu); let wb${n}_0 = qb${n} & vec4u(0x0f0f0f0fu);
      let wa${n}_1 = (qa${n} >> vec4u(4u)) & vec4u(0x0f0f0f0fu); let wb${n}_1 = (qb${n} >> vec4u(4u)) & vec4u(0x0f0f0f0fu);
      let c${n}_0 = q4kScale(hd${n}, ub${i} & 7u); let c${n}_1 = q4kScale(hd${n}, (ub${i} + 1u) & 7u);`;
        }
        const wq = `wq4${sfx(k)}`;
        const e = `e${i}`;
        return `let wa${n}_0 = vec4u(${wq}(rb${j}, ${e}), ${wq}(rb${j}, ${e} + 4u), ${wq}(rb${j}, ${e} + 8u), ${wq}(rb${j}, ${e} + 12u));
      let wb${n}_0 = vec4u(${wq}(rb${j}, ${e} + 16u), ${wq}(rb${j}, ${e} + 20u), ${wq}(rb${j}, ${e} + 24u), ${wq}(rb${j}, ${e} + 28u));
      let c${n}_0 = wsc${sfx(k)}(rb${j}, ub${i});`;
      }),
    );
    return `${head} ${blocks}\n      ${loads.join("\n      ")}`;
  };
  const dot = (w: string, x: string): string =>
    `dot4I8Packed(${w}.x, ${x}.x) + dot4I8Packed(${w}.y, ${x}.y) + dot4I8Packed(${w}.z, ${x}.z) + dot4I8Packed(${w}.w, ${x}.w)`;
  // slot i's unit u and token t against every row of the run and matrix
  const use = (i: number, u: number, t: number): string => {
    const h = `(hs${i} + ${u}u)`;
    const lows = P === 1 ? "" : ` let la = ${xq(2, `${t}u`, h)}; let lb = ${xq(3, `${t}u`, h)};`;
    const head = XQ8
      ? `{ let xo = (min(t0 + ${t}u, p.n - 1u) * ${U}u + ${h}) * ${XQ8_VEC4S}u; let xa = X[xo]; let xb = X[xo + 1u]; let d = bitcast<vec2f>(X[xo + 2u].xy);`
      : `{ let xa = ${xq(0, `${t}u`, h)}; let xb = ${xq(1, `${t}u`, h)};${lows} let d = XD[${t * U}u + ${h}];`;
    const half = (w: string, x: string, l: string): string =>
      P === 1 ? `(${dot(w, x)})` : `(128i * (${dot(w, x)}) + (${dot(w, l)}))`;
    const body = range(PAR).flatMap((j) =>
      range(S).map((k) => {
        const n = `${i}_${j}_${k}_${u}`;
        const a = acc(j, k, t);
        const c = `c${n}`;
        const ha = half(`wa${n}`, "xa", "la");
        const hb = half(`wb${n}`, "xb", "lb");
        const term = form.twoScales
          ? `${a} = fma(d.x, fma(${c}.x, f32${ha}, ${c}.y * f32${hb}), ${a});`
          : `${a} = fma(f32(${ha} + ${hb}), ${c}.x * d.x, ${a});`;
        return form.min ? `${term} ${a} = fma(-${c}.z, d.y, ${a});` : term;
      }),
    );
    return `${head} ${body.join(" ")} }`;
  };
  const uses = (i: number): string => {
    const all = range(GU)
      .flatMap((u) => range(T).map((t) => use(i, u, t)))
      .join("\n      ");
    return guard && i === NG - 1 ? `if (in${i}) {\n      ${all}\n      }` : all;
  };
  const accs = range(PAR)
    .flatMap((j) => range(S).flatMap((k) => range(T).map((t) => `var ${acc(j, k, t)} = 0.0;`)))
    .join(" ");
  // a step: the lane's weights first, then (each step where the row goes in steps, else the first run only) x staged
  // between two barriers, so that the weights' loads are in flight while the workgroup quantizes x
  const restage = `workgroupBarrier();
      ${stage}
      workgroupBarrier();`;
  const stepBody = `${range(NG).map(slot).join("\n      ")}
      ${XQ8 ? "" : NS > 1 || RS === PAR ? restage : `if (k == 0u) {\n      ${restage}\n      }`}
      ${range(NG).map(uses).join("\n      ")}`;
  const steps =
    NS === 1
      ? `{ let st = 0u;\n      ${stepBody}\n    }`
      : `for (var st = 0u; st < ${NS}u; st++) {\n      ${stepBody}\n    }`;
  const q4 = (j: number, k: number, t4: number): string =>
    `vec4f(${range(4)
      .map((i) => acc(j, k, 4 * t4 + i))
      .join(", ")})`;
  // the run's sums over the lanes, four tokens a call (all of them before lane 0 writes)
  const sums = range(PAR)
    .flatMap((j) =>
      range(S).flatMap((k) => range(T / 4).map((t4) => `let s${j}_${k}_${t4} = subgroupAdd(${q4(j, k, t4)});`)),
    )
    .join(" ");
  const val = (j: number, t: number): string => {
    const c = `.${"xyzw"[t % 4]}`;
    const t4 = Math.floor(t / 4);
    return dual ? `silu(s${j}_0_${t4}${c}) * s${j}_1_${t4}${c}` : `s${j}_0_${t4}${c}`;
  };
  const writes = `${sums}
    if (lane == 0u) {
      ${range(PAR)
        .map(
          (j) =>
            `if (ok${j}) { ${range(T)
              .map((t) => `if (${t}u < nt) { out(b, t0 + ${t}u, row${j}, ${val(j, t)}); }`)
              .join(" ")} }`,
        )
        .join("\n      ")}
    }`;
  const rowBases = range(PAR)
    .map(
      (j) =>
        `let row${j} = r0 + sgi * ${RS}u + k + ${j}u; let ok${j} = row${j} < p.rows; let rb${j} = p.wOff + b * p.wBatch + select(0u, row${j}, ok${j}) * p.rowBytes;`,
    )
    .join("\n    ");
  const weights = vec4
    ? Q4K_VEC4
    : `${dequantWGSL(type, GEMM_STEP)}\n${q8WeightWGSL(type)}\n${dual ? dequantForW2(type, q8WeightWGSL(type), ["wq4", "wsc"]) : ""}`;
  const code = /* wgsl */ `enable subgroups;
${chunkBindingsWGSL(vec4, "plain", dual)}
${XQ8 ? "" : `var<workgroup> XQ: array<vec4u, ${P * 2 * T * U}>;\nvar<workgroup> XD: array<vec2f, ${T * U}>;`}
fn silu(g: f32) -> f32 { return g / (1.0 + exp(-g)); }
${weights}
${matOutWGSL(true)}
// matrix-vector product on int8 dot products${P === 2 ? " (x in two pieces)" : ""}: ${NSG} subgroups × ${RS} rows (${PAR} at a time), ${T} tokens a tile, ${NS} step(s) of ${KS} columns
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let lane = li % ${SG}u;
  let sgi = li / ${SG}u;
  let tt = wid.y % p.tiles;
  let r0 = (wid.x + (wid.y / p.tiles) * p.gx) * ${RW}u;
  if (r0 >= p.rows) { return; }
  let b = wid.z;
  let xq = (p.xOff + b * p.xBatch) >> 2u;
  let xs4 = p.xStride >> 2u;
  let t0 = tt * ${T}u;
  let nt = min(${T}u, p.n - t0);
  for (var k = 0u; k < ${RS}u; k += ${PAR}u) {
    ${rowBases}
    ${accs}
    ${steps}
    ${writes}
  }
}`;
  return XQ8 ? bindXq8(code) : code;
}
