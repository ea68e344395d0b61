/// <reference types="@webgpu/types" />
/**
 * Probe of what bounds the batch-1 matrix-vector products (kernel-bench --tokens 1 --probe): over one Q4_K matrix of
 * 2048 columns (1152-byte rows, the layout of v2-lite's A0, o, shared and routed gate/up), kernels that read the same
 * bytes with less and less work, set beside the production wide kernel on the same matrix:
 * - `read flat`: every thread loads 8 vec4u a grid apart and folds them (the copy-like bound of reading);
 * - rows kernels (rowsWGSL), a subgroup per row with the wide kernel's load pattern (each lane a 16-byte run of qs and
 *   its block header): `read` (folded, no math), `lite` (one dot product a chunk), `scales` (lite plus the header's
 *   scales), `nibbles` (the nibbles' decoding and dot products with constant scales), `math` (the wide kernel's whole
 *   Q4_K decoding, x in registers), `dp4a` / `dp4a-lds` (nibbles as bytes times x split into three int8 pieces by
 *   dot4I8Packed, the pieces in registers or in workgroup memory);
 * each with J rows a subgroup (rows r, r + NW, …), the next row's loads issued before this row's arithmetic;
 * - the ALU rate of FMA and dot4I8Packed (aluProbeCases).
 * The math kernels are checked against the wide kernel first (checkStreamProbe; 32-lane subgroups). Results and what
 * they say: BENCHMARKS.md, WebGPU round 9.
 */
import { GGMLType } from "../../gguf/types.js";
import { GpuMatrix, matmul } from "./matrix.js";
import type { GpuRuntime } from "./runtime.js";
import { typeCode, WIDE_HELPERS } from "./wgsl-wide.js";

interface ProbeCase {
  readonly name: string;
  readonly bytes: number;
  readonly run: (rt: GpuRuntime) => void;
}

const COLS = 2048;
const ROW_VEC4 = 72; // 1152 bytes
const WG = 256;

const FLAT_WGSL = /* wgsl */ `
struct P { n: u32, gx: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<storage, read> W: array<vec4u>;
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(${WG}) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let g = (wid.x + wid.y * p.gx) * ${WG}u + li;
  let T = p.n / 8u;
  ${Array.from({ length: 8 }, (_, i) => `let v${i} = W[min(g + ${i}u * T, p.n - 1u)];`).join(" ")}
  let f = ${Array.from({ length: 8 }, (_, i) => `v${i}`).join(" ^ ")};
  if (f.x == 0x9e3779b9u && f.y == 0x7f4a7c15u) { Y[0] = f.z; }
}`;

export type ProbeMode = "read" | "lite" | "scales" | "nibbles" | "math" | "dp4a" | "dp4a-lds";

/**
 * A subgroup per row, J rows per subgroup (rows r, r + NW, …; NW = subgroups in the grid), each lane taking chunks
 * lane and lane + 32 of a row (Q4_K at 2048 columns: 64 chunks of 32 elements). "read" folds the loaded words; "lite"
 * does one dot product per chunk (no decoding); "math" is the wide kernel's Q4_K decoding with x in registers; "dp4a"
 * decodes nibbles as bytes and multiplies them with x split into three int8 pieces (XP, see xPieces) by dot4I8Packed.
 */
export function rowsWGSL(mode: ProbeMode, wg = WG): string {
  const tc = typeCode(GGMLType.Q4_K);
  const S = 2;
  const math = mode !== "read";
  const loadsFor = (row: string, pre: string): string =>
    Array.from({ length: S }, (_, s) => `${pre}hd${s} = W[${row} * ${ROW_VEC4}u + 9u * k${s}]; ${pre}qv${s} = W[${row} * ${ROW_VEC4}u + 9u * k${s} + 1u + h${s}];`).join(" ");
  let xregs = "";
  let uses = "";
  if (mode === "math" || mode === "lite" || mode === "scales" || mode === "nibbles") {
    xregs = Array.from({ length: S }, (_, s) => [0, 1, 2, 3, 8, 9, 10, 11].map((w) => `let xr${s}_${w} = X[xe${s} + ${w}u];`).join(" ")).join("\n  ");
    const full = (s: number): string => tc.use(s, 1).replace(/XREAD\(0, xe(\d+) \+ (\d+)u\)/g, "xr$1_$2").replace(/XREAD\(\d+, [^)]*\)/g, "vec4f(0.0)");
    const lite = (s: number): string => `acc.x += dot(bitcast<vec4f>(qv${s} & vec4u(0x3fffffffu)), xr${s}_0) + bitcast<f32>(hd${s}.x & 0x3fffffffu);`;
    // "scales": lite plus the block header's decoding only; "nibbles": the full decoding with the header's scales
    // replaced by constants
    const scales = (s: number): string => `{ let dm = unpack2x16float(hd${s}.x); let sm = q4ksm(hd${s}, (h${s} >> 1u) * 2u); let sn = q4ksm(hd${s}, (h${s} >> 1u) * 2u + 1u);
      acc.x += dot(bitcast<vec4f>(qv${s} & vec4u(0x3fffffffu)), xr${s}_0) * dm.x * sm.x + dm.y * sn.y + dm.x * sn.x * sm.y; }`;
    const nibbles = (s: number): string => full(s).replace(/unpack2x16float\(hd\d+\.x\)/g, "vec2f(0.5, 0.25)").replace(/q4ksm\([^;]*\);/g, "vec2f(3.0, 5.0);");
    const by = { math: full, lite, scales, nibbles } as const;
    uses = Array.from({ length: S }, (_, s) => by[mode](s)).join("\n    ");
  } else if (mode === "dp4a-lds") {
    // x's pieces and scales staged once per workgroup (XPS: group g's piece i at 3g + i; XSC: scale and Σx)
    uses = Array.from({ length: S }, (_, s) => {
      const half = (dg: number, q: (w: string) => string): string => {
        const dots = (i: number): string => `dot4I8Packed(${q(`qv${s}.x`)}, xq${dg}_${i}.x) + dot4I8Packed(${q(`qv${s}.y`)}, xq${dg}_${i}.y) + dot4I8Packed(${q(`qv${s}.z`)}, xq${dg}_${i}.z) + dot4I8Packed(${q(`qv${s}.w`)}, xq${dg}_${i}.w)`;
        return `xc${dg}.x * (f32(${dots(0)}) * 65536.0 + f32(${dots(1)}) * 256.0 + f32(${dots(2)}))`;
      };
      const reads = [0, 2].map((dg) => `let xq${dg}_0 = XPS[3u * (xg${s} + ${dg}u)]; let xq${dg}_1 = XPS[3u * (xg${s} + ${dg}u) + 1u]; let xq${dg}_2 = XPS[3u * (xg${s} + ${dg}u) + 2u]; let xc${dg} = XSC[xg${s} + ${dg}u];`).join(" ");
      return `{ ${reads}
      let dm = unpack2x16float(hd${s}.x); let sm = q4ksm(hd${s}, (h${s} >> 1u) * 2u); let sn = q4ksm(hd${s}, (h${s} >> 1u) * 2u + 1u);
      let lo = ${half(0, (u) => `(${u} & 0x0f0f0f0fu)`)};
      let hi = ${half(2, (u) => `((${u} >> 4u) & 0x0f0f0f0fu)`)};
      acc.x += dm.x * sm.x * lo - dm.y * sm.y * xc0.y + dm.x * sn.x * hi - dm.y * sn.y * xc2.y; }`;
    }).join("\n    ");
    xregs = `for (var i = li; i < ${(COLS / 16) * 3}u; i += ${wg}u) { let g = i / 3u; let o = g * 14u + 4u * (i % 3u); XPS[i] = vec4u(XP[o], XP[o + 1u], XP[o + 2u], XP[o + 3u]); }
  for (var g = li; g < ${COLS / 16}u; g += ${wg}u) { XSC[g] = vec2f(bitcast<f32>(XP[g * 14u + 12u]), bitcast<f32>(XP[g * 14u + 13u])); }
  workgroupBarrier();`;
  } else if (mode === "dp4a") {
    // group g's words in XP: 12 pieces (piece i, word w at 4i + w), then its scale and Σx as f32 bits
    xregs = Array.from({ length: S }, (_, s) =>
      [0, 2].map((dg) => `${Array.from({ length: 12 }, (_, i) => `let xp${s}_${dg}_${i} = XP[(xg${s} + ${dg}u) * 14u + ${i}u];`).join(" ")} let xs${s}_${dg} = bitcast<f32>(XP[(xg${s} + ${dg}u) * 14u + 12u]); let xt${s}_${dg} = bitcast<f32>(XP[(xg${s} + ${dg}u) * 14u + 13u]);`).join("\n  "),
    ).join("\n  ");
    uses = Array.from({ length: S }, (_, s) => {
      const half = (dg: number, q: (w: string) => string): string => {
        const dots = (i: number): string => [0, 1, 2, 3].map((w) => `dot4I8Packed(${q(`qv${s}.${"xyzw"[w]}`)}, xp${s}_${dg}_${4 * i + w})`).join(" + ");
        return `xs${s}_${dg} * (f32(${dots(0)}) * 65536.0 + f32(${dots(1)}) * 256.0 + f32(${dots(2)}))`;
      };
      return `{ let dm = unpack2x16float(hd${s}.x); let sm = q4ksm(hd${s}, (h${s} >> 1u) * 2u); let sn = q4ksm(hd${s}, (h${s} >> 1u) * 2u + 1u);
      let lo = ${half(0, (u) => `(${u} & 0x0f0f0f0fu)`)};
      let hi = ${half(2, (u) => `((${u} >> 4u) & 0x0f0f0f0fu)`)};
      acc.x += dm.x * sm.x * lo - dm.y * sm.y * xt${s}_0 + dm.x * sn.x * hi - dm.y * sn.y * xt${s}_2; }`;
    }).join("\n    ");
  }
  const fold = Array.from({ length: S }, (_, s) => `hd${s} ^ qv${s}`).join(" ^ ");
  // (a subgroup's rows depend on its index only: uniform across it, which the analysis cannot see)
  return /* wgsl */ `enable subgroups;
diagnostic(off, subgroup_uniformity);
struct P { rows: u32, gx: u32, nw: u32, _b: u32 }
@group(0) @binding(0) var<storage, read> W: array<vec4u>;
${mode.startsWith("dp4a") ? "@group(0) @binding(1) var<storage, read> XP: array<u32>;" : "@group(0) @binding(1) var<storage, read> X: array<vec4f>;"}
${mode === "dp4a-lds" ? `var<workgroup> XPS: array<vec4u, ${(COLS / 16) * 3}>;\nvar<workgroup> XSC: array<vec2f, ${COLS / 16}>;` : ""}
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
${WIDE_HELPERS}
@compute @workgroup_size(${wg}) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let lane = li % 32u;
  let first = (wid.x + wid.y * p.gx) * ${wg / 32}u + li / 32u;
  ${Array.from({ length: S }, (_, s) => `let c${s} = lane + ${32 * s}u; let k${s} = c${s} >> 3u; let h${s} = c${s} & 7u; let xe${s} = k${s} * 64u + (h${s} >> 1u) * 16u + (h${s} & 1u) * 4u; let xg${s} = xe${s} >> 2u;`).join("\n  ")}
  ${xregs}
  let r0 = min(first, p.rows - 1u);
  ${Array.from({ length: S }, (_, s) => `var hd${s}: vec4u; var qv${s}: vec4u;`).join(" ")}
  ${loadsFor("r0", "")}
  ${math ? "" : "var f = vec4u(0u);"}
  for (var r = first; r < p.rows; r += p.nw) {
    let rn = min(r + p.nw, p.rows - 1u);
    ${Array.from({ length: S }, (_, s) => `var nhd${s}: vec4u; var nqv${s}: vec4u;`).join(" ")}
    ${loadsFor("rn", "n")}
    ${
      math
        ? `var acc = vec4f(0.0);
    ${uses}
    let v = subgroupAdd(acc.x);
    if (lane == 0u) { Y[r] = v; }`
        : `f = f ^ ${fold};`
    }
    ${Array.from({ length: S }, (_, s) => `hd${s} = nhd${s}; qv${s} = nqv${s};`).join(" ")}
  }
  ${math ? "" : "if (f.x == 0x9e3779b9u && f.y == 0x7f4a7c15u) { Y[0] = f32(f.z) + X[0].x; }"}
}`;
}

/**
 * x (a multiple of 16 long) for the dp4a kernel: per group of 16, 12 words of int8 pieces (piece i of elements
 * 4w..4w+3 at word 4i + w) with x ≈ s·(p0·2^16 + p1·2^8 + p2), then s and Σx as f32 bits.
 */
export function xPieces(x: Float32Array): Uint32Array {
  const out = new Uint32Array((x.length / 16) * 14);
  const f = new Float32Array(out.buffer);
  const LIM = 127 * 65536 + 127 * 256 + 127;
  for (let g = 0; g < x.length / 16; g++) {
    let max = 0;
    let sum = 0;
    for (let i = 0; i < 16; i++) {
      max = Math.max(max, Math.abs(x[16 * g + i]!));
      sum += x[16 * g + i]!;
    }
    const sc = max === 0 ? 0 : max / LIM;
    for (let i = 0; i < 16; i++) {
      let v = sc === 0 ? 0 : Math.round(x[16 * g + i]! / sc);
      const pcs: number[] = [];
      for (let k = 0; k < 2; k++) {
        const lo = ((((v + 128) % 256) + 256) % 256) - 128;
        pcs.unshift(lo);
        v = (v - lo) / 256;
      }
      pcs.unshift(v);
      for (let piece = 0; piece < 3; piece++) out[g * 14 + piece * 4 + (i >> 2)] = (out[g * 14 + piece * 4 + (i >> 2)]! | ((pcs[piece]! & 255) << (8 * (i & 3)))) >>> 0;
    }
    f[g * 14 + 12] = sc;
    f[g * 14 + 13] = sum;
  }
  return out;
}

/**
 * Throughput of one instruction kind: every thread runs ITER rounds of 8 independent chains (dot4I8Packed, or a
 * vec4 FMA counted as 4 FMAs) seeded from its index; the result is written only if it hits a magic value.
 */
const ALU_ITER = 512;
export function aluWGSL(kind: "dp4a" | "fma"): string {
  const body =
    kind === "dp4a"
      ? Array.from({ length: 8 }, (_, i) => `a${i} = a${i} + dot4I8Packed(b${i}, c);`).join(" ") + " c = c ^ u32(a0);"
      : Array.from({ length: 8 }, (_, i) => `f${i} = fma(f${i}, g, h);`).join(" ");
  const init =
    kind === "dp4a"
      ? `${Array.from({ length: 8 }, (_, i) => `var a${i} = i32(li) + ${i}; let b${i} = li * ${2654435761 + i}u;`).join(" ")} var c = li ^ 0x5bd1e995u;`
      : `${Array.from({ length: 8 }, (_, i) => `var f${i} = vec4f(f32(li) + ${i}.0);`).join(" ")} let g = vec4f(0.999); let h = vec4f(0.001);`;
  const fold = kind === "dp4a" ? Array.from({ length: 8 }, (_, i) => `a${i}`).join(" + ") : `i32(${Array.from({ length: 8 }, (_, i) => `f${i}.x + f${i}.w`).join(" + ")})`;
  return `struct P { n: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read_write> Y: array<i32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) gid: vec3u) {
  let li = gid.x;
  ${init}
  for (var i = 0u; i < ${ALU_ITER}u + p.n; i++) { ${body} }
  let r = ${fold};
  if (r == 0x7eadbeef) { Y[0] = r; }
}`;
}

/** The ALU cases: `groups` workgroups of 256; bytes = instructions·lanes (so GB/s reads as G lane-instructions/s). */
export function aluProbeCases(rt: GpuRuntime, groups = 132 * 16): ProbeCase[] {
  const y = rt.buffer(16, "alu y");
  return (["dp4a", "fma"] as const).map((kind) => ({
    name: `alu ${kind}: 8 chains × ${ALU_ITER} rounds, ${groups} × 256 threads (GB/s = G lane-instructions/s${kind === "fma" ? ", vec4 FMA = 4" : ""})`,
    bytes: groups * 256 * ALU_ITER * (kind === "dp4a" ? 9 : 32),
    run: (r: GpuRuntime) => r.dispatch(`alu ${kind}`, aluWGSL(kind), [y], new Uint32Array([0, 0, 0, 0]), [groups]),
  }));
}

/** (kernel, threads per workgroup, rows per subgroup) of the probe */
const PROBE_SHAPES: readonly (readonly [ProbeMode, number, number])[] = [
  ["lite", 256, 4],
  ["scales", 256, 4],
  ["nibbles", 256, 4],
  ["math", 256, 4],
  ["math", 64, 4],
  ["dp4a", 256, 4],
  ["dp4a", 256, 16],
  ["dp4a", 64, 4],
  ["dp4a-lds", 256, 1],
  ["dp4a-lds", 256, 4],
  ["dp4a-lds", 256, 16],
  ["dp4a-lds", 128, 4],
  ["dp4a-lds", 512, 4],
  ["dp4a-lds", 1024, 8],
];

/** The probe's cases at each row count (rows × 1152 bytes of Q4_K each). */
export function streamProbeCases(rt: GpuRuntime, rowCounts: readonly number[]): ProbeCase[] {
  const cases: ProbeCase[] = [];
  const maxRows = Math.max(...rowCounts);
  const bytes = new Uint8Array(maxRows * ROW_VEC4 * 16);
  let s = 0x2545f491;
  for (let i = 0; i < bytes.length; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    bytes[i] = s & 0xff;
  }
  // keep the f16 header fields finite
  for (let r = 0; r < maxRows * 8; r++) bytes[r * 144 + 1] = bytes[r * 144 + 1]! & 0xbf;
  for (let r = 0; r < maxRows * 8; r++) bytes[r * 144 + 3] = bytes[r * 144 + 3]! & 0xbf;
  const m = GpuMatrix.upload(rt, "probe", GGMLType.Q4_K, COLS, maxRows, bytes);
  const w = m.pieces[0]!.buffer;
  const xs = Float32Array.from({ length: COLS }, (_, i) => Math.sin(i) * 0.5);
  const x = rt.upload(xs);
  const xp = rt.upload(xPieces(xs));
  const y = rt.buffer(maxRows * 4, "probe y");
  const grid = (groups: number): [number, number] => [Math.min(groups, 65535), Math.ceil(groups / 65535)];
  for (const rows of rowCounts) {
    const mb = (rows * ROW_VEC4 * 16) / 1e6;
    const flatN = rows * ROW_VEC4;
    const [fx, fy] = grid(Math.ceil(flatN / 8 / WG));
    cases.push({ name: `probe ${rows} rows (${mb.toFixed(1)} MB): read flat`, bytes: flatN * 16, run: (r) => r.dispatch("probe flat", FLAT_WGSL, [w, y], new Uint32Array([flatN, fx, 0, 0]), [fx, fy]) });
    for (const [mode, wg, j] of PROBE_SHAPES) {
      const subgroups = Math.ceil(rows / j);
      const [gx, gy] = grid(Math.ceil(subgroups / (wg / 32)));
      const nw = gx * gy * (wg / 32);
      cases.push({
        name: `probe ${rows} rows: ${mode} rows, ${j} per subgroup, ${wg} threads`,
        bytes: flatN * 16,
        run: (r) => r.dispatch(`probe ${mode}`, rowsWGSL(mode, wg), [w, mode.startsWith("dp4a") ? xp : x, y], new Uint32Array([rows, gx, nw, 0]), [gx, gy]),
      });
    }
    const part = GpuMatrix.upload(rt, `probe ${rows}`, GGMLType.Q4_K, COLS, rows, bytes.subarray(0, rows * ROW_VEC4 * 16));
    cases.push({ name: `probe ${rows} rows: wide (production kernel)`, bytes: flatN * 16, run: (r) => matmul(r, part, x, y, { n: 1, xStride: COLS, yStride: rows }) });
  }
  return cases;
}

/**
 * The math kernel's rows against the production kernel's on the same matrix and x (J = 1 and 4 rows per subgroup):
 * the largest |Δ| relative to the largest |y|. Needs 32-lane subgroups (the probe's kernels assume them).
 */
export async function checkStreamProbe(rt: GpuRuntime, rows = 1000): Promise<Record<string, number>> {
  const bytes = new Uint8Array(rows * ROW_VEC4 * 16).map((_, i) => (i * 2654435761) >>> 24);
  for (let b = 0; b < rows * 8; b++) bytes[b * 144 + 1] = 0x1c; // d, dmin ≈ 2^-8
  for (let b = 0; b < rows * 8; b++) bytes[b * 144 + 3] = 0x1c;
  const m = GpuMatrix.upload(rt, "probe check", GGMLType.Q4_K, COLS, rows, bytes);
  const xs = Float32Array.from({ length: COLS }, (_, i) => Math.cos(i * 0.37) + (i % 7 === 0 ? 3 : 0));
  const x = rt.upload(xs);
  const xp = rt.upload(xPieces(xs));
  const want = rt.buffer(rows * 4, "probe want");
  const got = rt.buffer(rows * 4, "probe got");
  matmul(rt, m, x, want, { n: 1, xStride: COLS, yStride: rows });
  const ref = await rt.readF32(want);
  const scale = Math.max(...ref.map(Math.abs));
  const out: Record<string, number> = {};
  for (const mode of ["math", "dp4a", "dp4a-lds"] as const) {
    for (const j of [1, 4]) {
      const gx = Math.ceil(Math.ceil(rows / j) / (WG / 32));
      rt.dispatch("probe check", rowsWGSL(mode), [m.pieces[0]!.buffer, mode.startsWith("dp4a") ? xp : x, got], new Uint32Array([rows, gx, gx * (WG / 32), 0]), [gx]);
      const y = await rt.readF32(got);
      let worst = 0;
      for (let r = 0; r < rows; r++) worst = Math.max(worst, Math.abs(y[r]! - ref[r]!) / scale);
      out[`${mode} J=${j}`] = worst;
    }
  }
  return out;
}
