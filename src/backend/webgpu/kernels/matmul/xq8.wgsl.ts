/**
 * x quantized once for the integer products (activations "q8"): a pass that quantizes every row of a product's x to
 * ggml's q8_1 (per 32 values d = amax/127, q = round(x/d), d·Σq: quantizeX32WGSL, the same statements the kernels
 * would run themselves) into a buffer the tiled q8 kernels then copy from, instead of each workgroup along the rows
 * quantizing the f32 x it stages again.
 *
 * Why: a 512-token v2-lite prefill's routed gate·up has 22 row tiles of 64 rows, so each x was loaded (128 bytes per
 * 32 values, against 48 here) and quantized 22 times; the loads sit between a step's barriers, where nothing overlaps
 * them but another workgroup.
 *
 * Layout: row r, 32-column unit u at vec4 (r·units + u)·XQ8_VEC4S: the unit's first 16 int8 (four packed words), its
 * last 16, and (bits of d, bits of d·Σq, 0, 0).
 */
/**
 * WGSL statements quantizing 32 values of x (8 vec4s from X at vec4 index `xb`; zeros unless `live`) as ggml's q8_1:
 * d = amax/127, q = round(x/d) (nearest even); they define `xqa` and `xqb` (the two halves' 16 int8 each, packed) and
 * `xd` = (d, d·Σq). Shared by the register-tiled and row-tiled q8 kernels. With two pieces, d = amax/16256 and q (15
 * bits) = 128·hi + lo, hi in −127..127 and lo in −64..63: `xqa`/`xqb` hold hi, `xla`/`xlb` lo.
 */
export function quantizeX32WGSL(live: string, xb: string, pieces: 1 | 2 = 1): string {
  const V = Array.from({ length: 8 }, (_, c) => c);
  const hi = (c: number): string => (pieces === 1 ? `q${c}` : `h${c}`);
  const split =
    pieces === 1
      ? ""
      : `${V.map((c) => `let h${c} = (q${c} + vec4i(64)) >> vec4u(7u); let l${c} = q${c} - (h${c} << vec4u(7u));`).join(" ")}
        let xla = vec4u(pack4xI8(l0), pack4xI8(l1), pack4xI8(l2), pack4xI8(l3));
        let xlb = vec4u(pack4xI8(l4), pack4xI8(l5), pack4xI8(l6), pack4xI8(l7));
        `;
  return `${V.map((c) => `var v${c} = vec4f(0.0);`).join(" ")}
        if (${live}) { let xb = ${xb}; ${V.map((c) => `v${c} = X[xb + ${c}u];`).join(" ")} }
        let a4 = max(max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3))), max(max(abs(v4), abs(v5)), max(abs(v6), abs(v7))));
        let d = max(max(a4.x, a4.y), max(a4.z, a4.w)) / ${pieces === 1 ? "127.0" : "16256.0"};
        let id = select(0.0, 1.0 / d, d > 0.0);
        ${V.map((c) => `let q${c} = vec4i(round(v${c} * id));`).join(" ")}
        ${split}let xqa = vec4u(pack4xI8(${hi(0)}), pack4xI8(${hi(1)}), pack4xI8(${hi(2)}), pack4xI8(${hi(3)}));
        let xqb = vec4u(pack4xI8(${hi(4)}), pack4xI8(${hi(5)}), pack4xI8(${hi(6)}), pack4xI8(${hi(7)}));
        let qs = ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7));
        let xd = vec2f(d, d * f32((qs.x + qs.y) + (qs.z + qs.w)));`;
}

/** vec4u words a 32-column unit takes in the quantized buffer. */
export const XQ8_VEC4S = 3;

/** Bytes of the quantized buffer for `rows` rows of `cols` columns (a multiple of 32). */
export function xq8Bytes(rows: number, cols: number): number {
  return rows * (cols / 32) * XQ8_VEC4S * 16;
}

/** Threads a workgroup of the quantizing pass. */
export const XQ8_WG = 64;

/**
 * The quantizing pass: thread i = (row, unit) over n rows of `units` units; row r of x at float xOff + r·xStride
 * (both multiples of 4). Parameters: n, units, xOff, xStride, gx (workgroups along x of a 2-D grid).
 */
export const QUANTIZE_X_Q8_WGSL = /* wgsl */ `
struct P { n: u32, units: u32, xOff: u32, xStride: u32, gx: u32 }
@group(0) @binding(0) var<storage, read> X: array<vec4f>;
@group(0) @binding(1) var<storage, read_write> Q: array<vec4u>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(${XQ8_WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = (wid.x + wid.y * p.gx) * ${XQ8_WG}u + li;
  if (i >= p.n * p.units) { return; }
  let r = i / p.units;
  let u = i % p.units;
  ${quantizeX32WGSL("true", "((p.xOff + r * p.xStride) >> 2u) + 8u * u")}
  let o = i * ${XQ8_VEC4S}u;
  Q[o] = xqa;
  Q[o + 1u] = xqb;
  Q[o + 2u] = vec4u(bitcast<u32>(xd.x), bitcast<u32>(xd.y), 0u, 0u);
}`;

/**
 * WGSL statements that define `xqa`, `xqb` and `xd` (as quantizeX32WGSL does) from the quantized buffer bound as X
 * (array<vec4u>): unit `unit` of row `row`, zeros unless `live`. `units`: units a row.
 */
export function loadXq8WGSL(live: string, row: string, unit: string, units: number): string {
  return `var xqa = vec4u(0u); var xqb = vec4u(0u); var xd = vec2f(0.0);
        if (${live}) { let xo = ((${row}) * ${units}u + ${unit}) * ${XQ8_VEC4S}u; xqa = X[xo]; xqb = X[xo + 1u]; xd = bitcast<vec2f>(X[xo + 2u].xy); }`;
}

/** A kernel's source with its x binding (array<vec4f>) read as the quantized buffer (array<vec4u>). */
export function bindXq8(code: string): string {
  const decl = "var<storage, read> X: array<vec4f>;";
  if (!code.includes(decl)) throw new Error("bindXq8: the kernel has no vec4 x binding");
  return code.replace(decl, "var<storage, read> X: array<vec4u>;");
}
