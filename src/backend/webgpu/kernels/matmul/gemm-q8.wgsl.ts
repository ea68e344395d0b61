/**
 * The register-tiled matrix-matrix kernel on integer dot products, for the opt-in 8-bit activations (RuntimeOptions
 * `activations: "q8"`): the tiling of gemm.wgsl.ts (a workgroup computes `rows` rows × `tokens` tokens, each thread
 * `tm` × `tn` of it), but per step of `ks` columns the workgroup stages
 * - each row's weights as their integers q (int8 bytes, q8WeightWGSL's wq4) and each 32-column unit's (s0, s1, min);
 * - each token's x quantized per 32 columns as ggml's q8_1 does: d = amax/127, xq = round(x/d) (nearest even), and
 *   the unit's d·Σxq;
 * then a thread's 16-column half-unit is one vec4u read per row and per token and four `dot4I8Packed` a (row, token),
 * exact in i32, and each unit adds f32(Σ q·xq)·(s·d) − min·(d·Σxq) to the f32 sum (Q6_K: its two half scales apply
 * to their halves' sums).
 *
 * Why: the f32 kernel does a multiply-add per weight and token and reads workgroup memory once per four; here one
 * integer instruction does four and a read serves sixteen. The x of a tile is quantized by every workgroup along the
 * rows that reads it (one thread per token and unit, beside the weight decoding), which keeps the launchers and the
 * graph unchanged. The accuracy is ggml's: weights exact, activations to 8 bits per 32 values (documented KL in
 * docs/webgpu.md).
 *
 * With `xq8` the x comes quantized from the pass of xq8.wgsl.ts (bound as X), and the staging only copies it. With
 * `pipe` a thread computes its share of step s + 1's staging into registers before it computes step s, so that the
 * loads' latency can overlap the dot products; only the stores to workgroup memory sit between the barriers.
 *
 * Workgroup memory is [half-unit or unit][row or token], padded by one element per row of it, as gemm.wgsl.ts's.
 * Modes, grids, bindings and parameters are the f32 kernel's; columns a multiple of `ks` (32, 64 or 128).
 */
import { dequantWGSL, q8WeightForm, q8WeightWGSL } from "../quant.wgsl.js";
import { dequantForW2, GEMM_STEP, gemmAcc, gemmEntryWGSL, gemmLayout, type GemmShape } from "./gemm.wgsl.js";
import { matOutWGSL } from "./mat.wgsl.js";
import { chunkBindingsWGSL } from "./wide.wgsl.js";
import { bindXq8, loadXq8WGSL, quantizeX32WGSL } from "./xq8.wgsl.js";

/** Bytes of workgroup memory the q8 kernel declares. */
export function gemmQ8SharedBytes(s: GemmShape, dual: boolean): number {
  const units = s.ks / 32;
  const perMatrix = 2 * units * (s.rows + 1) * 16 + units * (s.rows + 1) * 16;
  return (dual ? 2 : 1) * perMatrix + 2 * units * (s.tokens + 1) * 16 + units * (s.tokens + 1) * 8;
}

export function gemmQ8WGSL(type: number, mode: "plain" | "experts-list", s: GemmShape, dual = false): string {
  const { rows: BM, tokens: BN, tm: TM, tn: TN } = s;
  const { TX, TY, WG, NS } = gemmLayout(s, [32, 64, 128], "q8 gemm kernel");
  const KB = s.ks / 32; // units a step
  const KH = 2 * KB; // half-units a step
  const form = q8WeightForm(type);
  const S = dual ? 2 : 1;
  const PW = BM + 1;
  const PX = BN + 1;
  const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
  const acc = gemmAcc;
  const xRow = mode === "plain" ? "xq + (t0 + t) * xs4" : "(p.xOff + (IDS[lb + t0 + t] / p.xDiv) * p.xBatch) >> 2u";
  const WQ = (k: number): string => (k === 0 ? "WQ" : "WQ2");
  const WC = (k: number): string => (k === 0 ? "WC" : "WC2");
  const wq4 = (k: number): string => (k === 0 ? "wq4" : "wq4_2");
  const wsc = (k: number): string => (k === 0 ? "wsc" : "wsc_2");
  // a thread's share of a step's staging: slots (row, half-unit), (row, unit) and (token, unit), `per` a thread
  const slots = (count: number, per: number, body: (q: number) => string): string =>
    range(Math.ceil(count / WG))
      .map(
        (q) =>
          `{ let i = li + ${q * WG}u; ${(q + 1) * WG > count ? `if (i < ${count}u) ` : ""}{ let row = i / ${per}u; let h = i % ${per}u; ${body(q)} } }`,
      )
      .join("\n      ");
  const rowAt = "let rb = wb + min(r0 + row, p.rows - 1u) * p.rowBytes;";
  // token `row` of the tile, unit h of the step: x quantized as ggml's q8_1 (zeros past the tile's tokens), here or
  // (s.xq8) by the quantizing pass, copied from its buffer
  const xq8Row = mode === "plain" ? "t0 + t" : "IDS[lb + t0 + t] / p.xDiv";
  const xOf = (step: string): string =>
    s.xq8 === true
      ? loadXq8WGSL("t < nt", xq8Row, `(${step}) * ${KB}u + h`, s.cols / 32)
      : quantizeX32WGSL("t < nt", `(${xRow}) + (${step}) * ${s.ks / 4}u + 8u * h`);
  // where a slot's values go: "shared" computed into workgroup memory; "regs" computed into the thread's registers
  // (rq, rc, rx*: the pipelined form), "store" those registers into workgroup memory
  type Sink = "shared" | "regs" | "store";
  const stage = (step: string, sink: Sink): string => {
    const wq = (k: number): string =>
      `vec4u(${wq4(k)}(rb, e), ${wq4(k)}(rb, e + 4u), ${wq4(k)}(rb, e + 8u), ${wq4(k)}(rb, e + 12u))`;
    const stageW = slots(BM * KH, KH, (q) =>
      sink === "store"
        ? range(S)
            .map((k) => `${WQ(k)}[h * ${PW}u + row] = rq${k}_${q};`)
            .join(" ")
        : `${rowAt} let e = (${step}) * ${s.ks}u + 16u * h; ${range(S)
            .map((k) => `${sink === "regs" ? `rq${k}_${q}` : `${WQ(k)}[h * ${PW}u + row]`} = ${wq(k)};`)
            .join(" ")}`,
    );
    const stageC = slots(BM * KB, KB, (q) =>
      sink === "store"
        ? range(S)
            .map((k) => `${WC(k)}[h * ${PW}u + row] = rc${k}_${q};`)
            .join(" ")
        : `${rowAt} ${range(S)
            .map(
              (k) =>
                `${sink === "regs" ? `rc${k}_${q}` : `${WC(k)}[h * ${PW}u + row]`} = ${wsc(k)}(rb, (${step}) * ${KB}u + h);`,
            )
            .join(" ")}`,
    );
    const put = (a: string, b: string, d: string): string =>
      `XQ[2u * h * ${PX}u + t] = ${a}; XQ[(2u * h + 1u) * ${PX}u + t] = ${b}; XD[h * ${PX}u + t] = ${d};`;
    const stageX = slots(BN * KB, KB, (q) =>
      sink === "store"
        ? `let t = row; ${put(`rxa${q}`, `rxb${q}`, `rxd${q}`)}`
        : `let t = row; ${xOf(step)}
        ${sink === "regs" ? `rxa${q} = xqa; rxb${q} = xqb; rxd${q} = xd;` : put("xqa", "xqb", "xd")}`,
    );
    return `${stageW}\n      ${stageC}\n      ${stageX}`;
  };
  const regDecls = [
    ...range(S).flatMap((k) => range(Math.ceil((BM * KH) / WG)).map((q) => `var rq${k}_${q} = vec4u(0u);`)),
    ...range(S).flatMap((k) => range(Math.ceil((BM * KB) / WG)).map((q) => `var rc${k}_${q} = vec4f(0.0);`)),
    ...range(Math.ceil((BN * KB) / WG)).map(
      (q) => `var rxa${q} = vec4u(0u); var rxb${q} = vec4u(0u); var rxd${q} = vec2f(0.0);`,
    ),
  ].join(" ");
  const dot = (w: string, x: string): string =>
    `dot4I8Packed(${w}.x, ${x}.x) + dot4I8Packed(${w}.y, ${x}.y) + dot4I8Packed(${w}.z, ${x}.z) + dot4I8Packed(${w}.w, ${x}.w)`;
  const H = form.twoScales ? [0, 1] : [0];
  const isum = (k: number, i: number, j: number, h: number): string => `s${k}_${i}_${j}_${h}`;
  // unit u of the step: the integer sums over its two half-units, then the scaled terms into the f32 sums
  const unit = `{
        ${range(S)
          .flatMap((k) =>
            range(TM).flatMap((i) => range(TN).flatMap((j) => H.map((h) => `var ${isum(k, i, j, h)} = 0i;`))),
          )
          .join(" ")}
        ${[0, 1]
          .map(
            (half) => `{
          ${range(S)
            .flatMap((k) =>
              range(TM).map((i) => `let w${k}_${i} = ${WQ(k)}[(2u * u + ${half}u) * ${PW}u + tx + ${TX * i}u];`),
            )
            .join(" ")}
          ${range(TN)
            .map((j) => `let x${j} = XQ[(2u * u + ${half}u) * ${PX}u + ty + ${TY * j}u];`)
            .join(" ")}
          ${range(S)
            .flatMap((k) =>
              range(TM).flatMap((i) =>
                range(TN).map((j) => `${isum(k, i, j, form.twoScales ? half : 0)} += ${dot(`w${k}_${i}`, `x${j}`)};`),
              ),
            )
            .join("\n          ")}
        }`,
          )
          .join("\n        ")}
        ${range(S)
          .flatMap((k) => range(TM).map((i) => `let c${k}_${i} = ${WC(k)}[u * ${PW}u + tx + ${TX * i}u];`))
          .join(" ")}
        ${range(TN)
          .map((j) => `let d${j} = XD[u * ${PX}u + ty + ${TY * j}u];`)
          .join(" ")}
        ${range(S)
          .flatMap((k) =>
            range(TM).flatMap((i) =>
              range(TN).map((j) => {
                const a = acc(k, i, j);
                const c = `c${k}_${i}`;
                const d = `d${j}`;
                const term = form.twoScales
                  ? `${a} = fma(${d}.x, fma(${c}.x, f32(${isum(k, i, j, 0)}), ${c}.y * f32(${isum(k, i, j, 1)})), ${a});`
                  : `${a} = fma(f32(${isum(k, i, j, 0)}), ${c}.x * ${d}.x, ${a});`;
                return form.min ? `${term} ${a} = fma(-${c}.z, ${d}.y, ${a});` : term;
              }),
            ),
          )
          .join("\n        ")}
      }`;
  const steps =
    s.pipe === true
      ? `${regDecls}
    ${stage("0u", "regs")}
    for (var st = 0u; st < ${NS}u; st++) {
      workgroupBarrier();
      ${stage("st", "store")}
      workgroupBarrier();
      ${stage(`min(st + 1u, ${NS - 1}u)`, "regs")}
      for (var u = 0u; u < ${KB}u; u++) ${unit}
    }`
      : `for (var st = 0u; st < ${NS}u; st++) {
      workgroupBarrier();
      ${stage("st", "shared")}
      workgroupBarrier();
      for (var u = 0u; u < ${KB}u; u++) ${unit}
    }`;
  const weights = `${dequantWGSL(type, GEMM_STEP)}\n${q8WeightWGSL(type)}`;
  const code = /* wgsl */ `${chunkBindingsWGSL(false, mode, dual)}
var<workgroup> WQ: array<vec4u, ${KH * PW}>;
var<workgroup> WC: array<vec4f, ${KB * PW}>;
${dual ? `var<workgroup> WQ2: array<vec4u, ${KH * PW}>;\nvar<workgroup> WC2: array<vec4f, ${KB * PW}>;` : ""}
var<workgroup> XQ: array<vec4u, ${KH * PX}>;
var<workgroup> XD: array<vec2f, ${KB * PX}>;
fn silu(g: f32) -> f32 { return g / (1.0 + exp(-g)); }
${weights}
${dual ? dequantForW2(type, q8WeightWGSL(type), ["wq4", "wsc"]) : ""}
${matOutWGSL(true)}
// register-tiled product on int8 dot products: ${BM} rows × ${BN} tokens a workgroup, ${TM} × ${TN} a thread, ${NS} steps of ${s.ks} columns
@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let tx = li % ${TX}u;
  let ty = li / ${TX}u;
${gemmEntryWGSL(mode, s, dual, steps)}`;
  return s.xq8 === true ? bindXq8(code) : code;
}
