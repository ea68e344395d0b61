/// <reference types="@webgpu/types" />
/**
 * Probe of what bounds the batch-1 matrix-vector products (kernel-bench --probe): over one Q4_K matrix of 2048
 * columns (1152-byte rows, the layout of v2-lite's A0, o, shared and routed gate/up), kernels that read the same bytes
 * with less and less work:
 * - `read flat`: every thread loads 8 consecutive-in-grid vec4u and folds them (the copy-like bound of reading);
 * - `read rows`: a subgroup per row with the wide kernel's load pattern (each lane a 16-byte run of qs and its block
 *   header), folded without math;
 * - `math rows`: the same plus the wide kernel's Q4_K decode and dot products, x held in registers (loaded once per
 *   subgroup from X, not staged in workgroup memory).
 * Each row kernel is run with J = 1 (a row per subgroup, all rows in one grid) and J > 1 rows per subgroup, where a
 * subgroup walks its rows with the next row's loads issued before the current one is used (software pipelining).
 * Set beside the production kernel on the same matrix (`wide`), this says whether the memory pattern, the arithmetic
 * or the latency of one row per subgroup is what holds the wide kernel near 1.2 TB/s.
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

/**
 * A subgroup per row, J rows per subgroup (rows r, r + NW, …; NW = subgroups in the grid), each lane taking chunks
 * lane and lane + 32 of a row (Q4_K at 2048 columns: 64 chunks of 32 elements). With `math`, Σ W·x per row into Y.
 */
function rowsWGSL(math: boolean): string {
  const tc = typeCode(GGMLType.Q4_K);
  const S = 2;
  const loadsFor = (row: string, pre: string): string =>
    Array.from({ length: S }, (_, s) => `${pre}hd${s} = W[${row} * ${ROW_VEC4}u + 9u * k${s}]; ${pre}qv${s} = W[${row} * ${ROW_VEC4}u + 9u * k${s} + 1u + h${s}];`).join(" ");
  const xregs = Array.from({ length: S }, (_, s) => [0, 1, 2, 3, 8, 9, 10, 11].map((w) => `let xr${s}_${w} = X[xe${s} + ${w}u];`).join(" ")).join("\n  ");
  const uses = Array.from({ length: S }, (_, s) => tc.use(s, 1).replace(/XREAD\(0, xe(\d+) \+ (\d+)u\)/g, "xr$1_$2").replace(/XREAD\(\d+, [^)]*\)/g, "vec4f(0.0)")).join("\n    ");
  const fold = Array.from({ length: S }, (_, s) => `hd${s} ^ qv${s}`).join(" ^ ");
  // (a subgroup's rows depend on its index only: uniform across it, which the analysis cannot see)
  return /* wgsl */ `enable subgroups;
diagnostic(off, subgroup_uniformity);
struct P { rows: u32, gx: u32, nw: u32, _b: u32 }
@group(0) @binding(0) var<storage, read> W: array<vec4u>;
@group(0) @binding(1) var<storage, read> X: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
${WIDE_HELPERS}
@compute @workgroup_size(${WG}) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let lane = li % 32u;
  let first = (wid.x + wid.y * p.gx) * ${WG / 32}u + li / 32u;
  ${Array.from({ length: S }, (_, s) => `let c${s} = lane + ${32 * s}u; let k${s} = c${s} >> 3u; let h${s} = c${s} & 7u; let xe${s} = k${s} * 64u + (h${s} >> 1u) * 16u + (h${s} & 1u) * 4u;`).join("\n  ")}
  ${math ? xregs : ""}
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

/** The probe's cases at each row count (rows × 1152 bytes of Q4_K each). */
export function streamProbeCases(rt: GpuRuntime, rowCounts: readonly number[], perSubgroup: readonly number[] = [1, 2, 4, 8]): ProbeCase[] {
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
  const x = rt.upload(Float32Array.from({ length: COLS }, (_, i) => Math.sin(i) * 0.5));
  const y = rt.buffer(maxRows * 4, "probe y");
  const grid = (groups: number): [number, number] => [Math.min(groups, 65535), Math.ceil(groups / 65535)];
  for (const rows of rowCounts) {
    const mb = (rows * ROW_VEC4 * 16) / 1e6;
    const flatN = rows * ROW_VEC4;
    const [fx, fy] = grid(Math.ceil(flatN / 8 / WG));
    cases.push({ name: `probe ${rows} rows (${mb.toFixed(1)} MB): read flat`, bytes: flatN * 16, run: (r) => r.dispatch("probe flat", FLAT_WGSL, [w, y], new Uint32Array([flatN, fx, 0, 0]), [fx, fy]) });
    for (const math of [false, true]) {
      for (const j of perSubgroup) {
        const subgroups = Math.ceil(rows / j);
        const [gx, gy] = grid(Math.ceil(subgroups / (WG / 32)));
        const nw = gx * gy * (WG / 32);
        cases.push({
          name: `probe ${rows} rows: ${math ? "math" : "read"} rows, ${j} per subgroup`,
          bytes: flatN * 16,
          run: (r) => r.dispatch(`probe ${math ? "math" : "read"}`, rowsWGSL(math), [w, x, y], new Uint32Array([rows, gx, nw, 0]), [gx, gy]),
        });
      }
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
export async function checkStreamProbe(rt: GpuRuntime, rows = 1000): Promise<number> {
  const bytes = new Uint8Array(rows * ROW_VEC4 * 16).map((_, i) => (i * 2654435761) >>> 24);
  for (let b = 0; b < rows * 8; b++) bytes[b * 144 + 1] = 0x1c; // d, dmin ≈ 2^-8
  for (let b = 0; b < rows * 8; b++) bytes[b * 144 + 3] = 0x1c;
  const m = GpuMatrix.upload(rt, "probe check", GGMLType.Q4_K, COLS, rows, bytes);
  const x = rt.upload(Float32Array.from({ length: COLS }, (_, i) => Math.cos(i * 0.37)));
  const want = rt.buffer(rows * 4, "probe want");
  const got = rt.buffer(rows * 4, "probe got");
  matmul(rt, m, x, want, { n: 1, xStride: COLS, yStride: rows });
  const ref = await rt.readF32(want);
  let worst = 0;
  const scale = Math.max(...ref.map(Math.abs));
  for (const j of [1, 4]) {
    const gx = Math.ceil(Math.ceil(rows / j) / (WG / 32));
    rt.dispatch("probe check", rowsWGSL(true), [m.pieces[0]!.buffer, x, got], new Uint32Array([rows, gx, gx * (WG / 32), 0]), [gx]);
    const y = await rt.readF32(got);
    for (let r = 0; r < rows; r++) worst = Math.max(worst, Math.abs(y[r]! - ref[r]!) / scale);
  }
  return worst;
}
