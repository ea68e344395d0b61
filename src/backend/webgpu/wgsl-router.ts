/**
 * The MoE router product and its routing in one kernel, for small steps: one 256-thread workgroup per token computes
 * z = W_router·x (all E rows, F32 weights) into workgroup memory, then routes it with the subgroup routing of
 * wgsl-route.ts (routeToken: the same ids and weights as moeRoute on that z), and writes z as matmul would. It saves
 * the routing's own dependent dispatch: the product shares its dispatch with the shared experts' gate·up (together).
 *
 * The product: x staged in workgroup memory (in chunks where a row does not fit), subgroup s takes rows s, s + S, …
 * (S subgroups), its lanes reading consecutive vec4s of each row; every lane issues the loads of all its rows for
 * `unroll` steps before using any, and each row ends in one subgroupAdd. Every subgroup then routes the token (the
 * subgroup operations stay in uniform control flow); only the first one writes.
 */
import { ROUTE_STRUCT_WGSL } from "./wgsl-ops.js";
import { routeShape, routeTokenWGSL, type RouteShape } from "./wgsl-route.js";

/** Threads per workgroup: the size of the kernels it is combined with (wide and coalesced products). */
export const ROUTER_THREADS = 256;
/** Most bytes of workgroup memory the kernel takes: the rest is left to the kernel sharing its dispatch. */
export const ROUTER_WG_BYTES = 24576;
/** W loads a lane issues before using them (rows × steps). */
const LOADS = 16;

export interface RouterShape {
  readonly route: RouteShape;
  /** columns of W (Hd), a multiple of 4 */
  readonly cols: number;
  /** vec4s of x staged per pass */
  readonly chunk: number;
  /** rows each subgroup takes */
  readonly rowsPerSg: number;
  /** steps of a row a lane loads before using them */
  readonly unroll: number;
  /** selection bias bound (BIAS) */
  readonly bias: boolean;
}

/**
 * The kernel's shape for E experts (nGroup groups, nGroupUsed kept) over `cols` columns, with workgroup memory of
 * wgBytes, or undefined where it does not apply: a subgroup size outside 4..64, groups routeShape rejects, columns
 * not a multiple of 4, more than 256 experts.
 */
export function routerShape(sg: number, E: number, nGroup: number, nGroupUsed: number, cols: number, bias: boolean, wgBytes: number): RouterShape | undefined {
  const route = routeShape(sg, E, nGroup, nGroupUsed);
  if (route === undefined || E > 256 || cols < 4 || cols % 4 !== 0 || sg > ROUTER_THREADS) return undefined;
  const zBytes = Math.ceil(E / 4) * 16;
  const room = Math.floor((Math.min(ROUTER_WG_BYTES, wgBytes / 2) - zBytes) / 16);
  if (room < sg) return undefined;
  const rowsPerSg = Math.ceil(E / (ROUTER_THREADS / sg));
  return { route, cols, chunk: Math.min(cols / 4, room), rowsPerSg, unroll: Math.max(1, Math.floor(LOADS / rowsPerSg)), bias };
}

/** Bytes of workgroup memory the kernel declares. */
export function routerWorkgroupBytes(s: RouterShape): number {
  return s.chunk * 16 + Math.ceil(s.route.experts / 4) * 16;
}

/**
 * The kernel (grid: one workgroup per token). Bindings: W [E × cols] (vec4s), X [n × cols], Z [zOff + t·zStride …]
 * (written), IDS, WTS [n × K] (written), BIAS (only with shape.bias), then the parameter block (ROUTE_PARAMS).
 */
export function routerWGSL(s: RouterShape): string {
  const V = s.cols / 4;
  const S = ROUTER_THREADS / s.route.sg;
  const R = s.rowsPerSg;
  const U = s.unroll;
  return /* wgsl */ `enable subgroups;${ROUTE_STRUCT_WGSL}
@group(0) @binding(0) var<storage, read> W: array<vec4f>;
@group(0) @binding(1) var<storage, read> X: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> Z: array<f32>;
@group(0) @binding(3) var<storage, read_write> IDS: array<u32>;
@group(0) @binding(4) var<storage, read_write> WTS: array<f32>;
${s.bias ? "@group(0) @binding(5) var<storage, read> BIAS: array<f32>;\n" : ""}@group(0) @binding(${s.bias ? 6 : 5}) var<uniform> p: P;
var<workgroup> XS: array<vec4f, ${s.chunk}>;
var<workgroup> ZS: array<f32, ${s.route.experts}>;
fn logit(t: u32, e: u32) -> f32 { return ZS[e]; }
fn bias(e: u32) -> f32 { return ${s.bias ? "BIAS[e]" : "0.0"}; }${routeTokenWGSL(s.route)}
@compute @workgroup_size(${ROUTER_THREADS})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) lane: u32) {
  let t = wid.x;
  let sgi = li / SG;
  var acc: array<f32, ${R}>;
  for (var c0 = 0u; c0 < ${V}u; c0 += ${s.chunk}u) {
    workgroupBarrier();
    for (var i = li; i < ${s.chunk}u && c0 + i < ${V}u; i += ${ROUTER_THREADS}u) { XS[i] = X[t * ${V}u + c0 + i]; }
    workgroupBarrier();
    for (var c = lane; c < ${s.chunk}u; c += ${s.route.sg * U}u) {
      // rows past E and steps past the row load a valid element and drop it
      var w: array<vec4f, ${R * U}>;
      for (var u = 0u; u < ${U}u; u++) {
        let col = min(c0 + c + u * SG, ${V - 1}u);
        for (var r = 0u; r < ${R}u; r++) { w[u * ${R}u + r] = W[min(sgi + r * ${S}u, E - 1u) * ${V}u + col]; }
      }
      for (var u = 0u; u < ${U}u; u++) {
        let i = c + u * SG;
        if (i < ${s.chunk}u && c0 + i < ${V}u) {
          let xv = XS[i];
          for (var r = 0u; r < ${R}u; r++) { acc[r] += dot(w[u * ${R}u + r], xv); }
        }
      }
    }
  }
  for (var r = 0u; r < ${R}u; r++) {
    let e = sgi + r * ${S}u;
    let z = subgroupAdd(acc[r]);
    if (lane == 0u && e < E) {
      ZS[e] = z;
      Z[p.zOff + t * p.zStride + e] = z;
    }
  }
  workgroupBarrier();
  routeToken(lane, t, sgi == 0u);
}`;
}
