/**
 * Gated FFNs (SwiGLU: routed experts, shared experts, dense FFNs) on the fast backend, kept in shared memory from the
 * first product to the last: x is converted and quantized once per weight class; each routed expert gathers its
 * tokens' quantized rows (no f64 gather); every gate and up product goes in one dispatch, h = silu(g) ⊙ u is computed
 * and quantized in place by the threads, every down product goes in a second dispatch, and the weighted sums are added
 * into an f64 copy of `out` in the wasm kernel (the reference's f64 operations in the reference's order). Nothing
 * between the products passes through a JavaScript Float64Array.
 */
import type { GatedFFN } from "../../model/kernels.js";
import { swigluManyByProducts } from "../../model/moe.js";
import type { MatProducts } from "../../tensor/products.js";
import type { Vec } from "../../tensor/ops.js";
import type { QMatrix } from "../../tensor/qmatrix.js";

/** a product whose activations (xp: f32; aqp/adp/asp: quantized) and output yp already lie in its arena */
export interface PlacedProduct {
  readonly type: number;
  readonly wp: number;
  readonly rowBytes: number;
  readonly rows: number;
  readonly cols: number;
  readonly n: number;
  readonly xp: number;
  readonly aqp: number;
  readonly adp: number;
  readonly asp: number;
  readonly yp: number;
}

/** `rows` rows of F values of a SwiGLU in an arena: g and u f32, the quantized h (class cls) at aqp/adp/asp */
export interface SwigluRows {
  readonly cls: number;
  readonly g: number;
  readonly u: number;
  readonly rows: number;
  readonly F: number;
  readonly aqp: number;
  readonly adp: number;
  readonly asp: number;
}

/** the kernel exports this file calls */
interface FfnKernels {
  typeClass(type: number): number;
  blockValues(type: number): number;
  scratchBytes(cols: number): number;
  quantize(cls: number, x: number, n: number, cols: number, xStride: number, aq: number, ad: number, as: number): void;
  gatherRows(src: number, rowBytes: number, idx: number, m: number, dst: number): void;
  addScaledRows(out: number, d: number, m: number, dim: number, idx: number, scale: number): void;
}

/** one arena (shared wasm memory) as this file uses it */
export interface FfnArena {
  readonly k: FfnKernels;
  readonly memory: WebAssembly.Memory;
  readonly f32: Float32Array;
  /** the largest work area `work` can hand out now */
  readonly workRoom: number;
  work(bytes: number): number;
}

/** What the SwiGLU path needs of the backend (CpuBackend implements it). */
export interface FfnBackend<A extends FfnArena> extends MatProducts {
  readonly threads: number;
  /** where each matrix is read for a product of ns[i] tokens ([pointer, kernel type, row bytes]), all in one arena; undefined when one has no kernel or they lie in different arenas */
  placeAll(ws: readonly QMatrix[], ns: readonly number[]): { arena: A; at: [number, number, number][] } | undefined;
  runPlaced(arena: A, items: readonly PlacedProduct[], base: number, sBytes: number): void;
  runSwiglu(arena: A, items: readonly SwigluRows[]): void;
}

/** the work area of one call stays under this many bytes (longer prompts are cut into token ranges) */
const FFN_WORK_CAP = 128 << 20;

function align64(x: number): number {
  return Math.ceil(x / 64) * 64;
}

/** quantized activations of m rows of `cols` values for weights of class cls (cls 0: the f32 rows themselves) */
interface Acts {
  xp: number;
  aqp: number;
  adp: number;
  asp: number;
}

/**
 * bytes of m rows of activations of class cls: [f32 or i16 values, block scales, block sums] per row (classes 3 and 4,
 * the 8-bit activations of q8 mode, keep the i16 row length and have block sums, as the K class: kernels.as quantize8)
 */
function actRowBytes(cls: number, cols: number, bv: number): [number, number, number] {
  if (cls === 0) return [cols * 4, 0, 0];
  const nb = cols / bv;
  return [cols * 2, nb * 4, cls >= 2 ? nb * 32 : 0];
}

/**
 * `MatKernels.swigluMany` on the fast backend (work area ≤ `cap` bytes unless one token needs more); returns false (nothing done) when some matrix has no kernel or the
 * matrices lie in different arenas, so the caller takes the generic path.
 */
export function fastSwigluMany<A extends FfnArena>(
  be: FfnBackend<A>,
  ffns: readonly GatedFFN[],
  x: Vec,
  n: number,
  dim: number,
  out: Vec,
  cap = FFN_WORK_CAP,
): boolean {
  if (n <= 0 || ffns.length === 0) return true;
  const ws = ffns.flatMap((f) => [f.gate, f.up, f.down]);
  const ns = ffns.flatMap((f) => {
    const m = f.tokens?.length ?? n;
    return [m, m, m];
  });
  const placed = be.placeAll(ws, ns);
  if (placed === undefined) return false;
  const bytes = workBytes(placed.arena, ffns, placed.at, n, dim, be.threads);
  const room = Math.min(cap, placed.arena.workRoom);
  if (bytes > room && n === 1) return false; // a nearly full arena: the products path needs less room
  if (bytes > room) {
    // cut the tokens in two halves: every token's additions stay in FFN order
    const h = n >> 1;
    for (const [t0, t1] of [
      [0, h],
      [h, n],
    ]) {
      const part: GatedFFN[] = [];
      for (const f of ffns) {
        if (f.tokens === undefined) {
          const scale = f.scale === undefined ? undefined : Array.from(f.scale).slice(t0, t1);
          part.push({ gate: f.gate, up: f.up, down: f.down, scale });
          continue;
        }
        const tokens: number[] = [];
        const scale: number[] = [];
        f.tokens.forEach((t, i) => {
          if (t >= t0 && t < t1) {
            tokens.push(t - t0);
            scale.push(f.scale === undefined ? 1 : f.scale[i]);
          }
        });
        if (tokens.length > 0) part.push({ gate: f.gate, up: f.up, down: f.down, tokens, scale });
      }
      const [xs, os] = [x.subarray(t0 * dim, t1 * dim), out.subarray(t0 * dim, t1 * dim)];
      if (!fastSwigluMany(be, part, xs, t1 - t0, dim, os, cap)) swigluManyByProducts(part, xs, t1 - t0, dim, os, be);
    }
    return true;
  }
  runFfns(be, placed.arena, placed.at, ffns, x, n, dim, out, bytes);
  return true;
}

/** each thread's kernel scratch for products over rows of `dim` (gate, up) and of the FFNs' widths (down) */
function scratchBytes(k: FfnArena["k"], ffns: readonly GatedFFN[], dim: number): number {
  let bytes = 0;
  for (const f of ffns) bytes = Math.max(bytes, align64(k.scratchBytes(dim)), align64(k.scratchBytes(f.gate.rows)));
  return bytes;
}

/** an upper bound of the work-area bytes `runFfns` lays out */
function workBytes(
  a: FfnArena,
  ffns: readonly GatedFFN[],
  at: readonly [number, number, number][],
  n: number,
  dim: number,
  threads: number,
): number {
  const k = a.k;
  const sBytes = scratchBytes(k, ffns, dim);
  let b = sBytes * threads + align64(n * dim * 4) + align64(n * dim * 8) + 64;
  for (const cls of [1, 2, 3, 4]) {
    const [q, d, s] = actRowBytes(cls, dim, cls % 2 === 0 ? 256 : 32);
    b += align64(n * q) + align64(n * d) + align64(n * s);
  }
  ffns.forEach((f, i) => {
    const m = f.tokens?.length ?? n;
    const F = f.gate.rows;
    const [q, d, s] = actRowBytes(2, dim, 32); // the largest row of any class (f32 rows are gathered as 4·dim ≤ q+d+s)
    const [hq, hd, hs] = actRowBytes(k.typeClass(at[3 * i + 2][1]), F, k.blockValues(at[3 * i + 2][1]));
    b += 2 * (align64(m * Math.max(q + d + s, dim * 4)) + 192); // gathered rows for gate and up (when their classes differ)
    b += 2 * align64(m * F * 4) + align64(m * hq) + align64(m * hd) + align64(m * hs) + align64(m * dim * 4);
    b += align64(m * 4) + align64(m * 8) + 6 * 64;
  });
  return b;
}

function runFfns<A extends FfnArena>(
  be: FfnBackend<A>,
  a: A,
  at: readonly [number, number, number][],
  ffns: readonly GatedFFN[],
  x: Vec,
  n: number,
  dim: number,
  out: Vec,
  bytes: number,
): void {
  const k = a.k;
  const sBytes = scratchBytes(k, ffns, dim);
  const base = a.work(bytes);
  let top = base + sBytes * be.threads;
  const take = (b: number): number => {
    const p = top;
    top = align64(top + b);
    return p;
  };
  const mem = a.memory.buffer;
  // x as f32, then quantized once for each weight class the gate and up products need
  const xp = take(n * dim * 4);
  a.f32.set(x.subarray(0, n * dim), xp >>> 2);
  const full = new Map<number, Acts>();
  const actsOf = (type: number): Acts => {
    const cls = k.typeClass(type);
    let q = full.get(cls);
    if (q === undefined) {
      if (cls === 0) q = { xp, aqp: 0, adp: 0, asp: 0 };
      else {
        const [rq, rd, rs] = actRowBytes(cls, dim, k.blockValues(type));
        q = { xp, aqp: take(n * rq), adp: take(n * rd), asp: take(n * rs) };
        k.quantize(cls, xp, n, dim, dim, q.aqp, q.adp, q.asp);
      }
      full.set(cls, q);
    }
    return q;
  };
  const gateUp: PlacedProduct[] = [];
  const mids: { F: number; m: number; g: number; u: number; h: Acts; d: number; idx: number; scale: number }[] = [];
  const swiglu: SwigluRows[] = [];
  const down: PlacedProduct[] = [];
  ffns.forEach((f, i) => {
    const m = f.tokens?.length ?? n;
    const F = f.gate.rows;
    let idx = 0;
    if (f.tokens !== undefined && (m !== n || f.tokens.some((t, j) => t !== j))) {
      idx = take(m * 4);
      new Int32Array(mem, idx, m).set(f.tokens);
    }
    // a token's activations for this FFN: the full rows, or its tokens' rows gathered (once per weight class)
    const gathered = new Map<number, Acts>();
    const actsFor = (type: number): Acts => {
      const src = actsOf(type);
      if (idx === 0) return src;
      const cls = k.typeClass(type);
      let g = gathered.get(cls);
      if (g === undefined) {
        const [rq, rd, rs] = actRowBytes(cls, dim, k.blockValues(type));
        if (cls === 0) {
          g = { xp: take(m * rq), aqp: 0, adp: 0, asp: 0 };
          k.gatherRows(src.xp, rq, idx, m, g.xp);
        } else {
          g = { xp: 0, aqp: take(m * rq), adp: take(m * rd), asp: rs > 0 ? take(m * rs) : 0 };
          k.gatherRows(src.aqp, rq, idx, m, g.aqp);
          k.gatherRows(src.adp, rd, idx, m, g.adp);
          if (rs > 0) k.gatherRows(src.asp, rs, idx, m, g.asp);
        }
        gathered.set(cls, g);
      }
      return g;
    };
    const [gp, gType, gRow] = at[3 * i];
    const [upp, uType, uRow] = at[3 * i + 1];
    const [dp, dType, dRow] = at[3 * i + 2];
    const g = take(m * F * 4);
    const u = take(m * F * 4);
    gateUp.push({ type: gType, wp: gp, rowBytes: gRow, rows: F, cols: dim, n: m, ...actsFor(gType), yp: g });
    gateUp.push({ type: uType, wp: upp, rowBytes: uRow, rows: F, cols: dim, n: m, ...actsFor(uType), yp: u });
    const hCls = k.typeClass(dType);
    const [hq, hd, hs] = actRowBytes(hCls, F, k.blockValues(dType));
    const h: Acts =
      hCls === 0
        ? { xp: g, aqp: 0, adp: 0, asp: 0 }
        : { xp: g, aqp: take(m * hq), adp: take(m * hd), asp: hs > 0 ? take(m * hs) : 0 };
    swiglu.push({ cls: hCls, g, u, rows: m, F, aqp: h.aqp, adp: h.adp, asp: h.asp });
    const d = take(m * dim * 4);
    down.push({ type: dType, wp: dp, rowBytes: dRow, rows: dim, cols: F, n: m, ...h, yp: d });
    let scale = 0;
    if (f.scale !== undefined) {
      scale = take(m * 8);
      const s = new Float64Array(mem, scale, m);
      for (let r = 0; r < m; r++) s[r] = f.scale[r];
    }
    mids.push({ F, m, g, u, h, d, idx, scale });
  });
  const op = take(n * dim * 8);
  if (top > base + bytes) throw new Error(`SwiGLU work area overrun: ${top - base} > ${bytes} bytes`);
  be.runPlaced(a, gateUp, base, sBytes);
  be.runSwiglu(a, swiglu);
  be.runPlaced(a, down, base, sBytes);
  const o = new Float64Array(a.memory.buffer, op, n * dim);
  o.set(out.subarray(0, n * dim));
  for (const q of mids) k.addScaledRows(op, q.d, q.m, dim, q.idx, q.scale);
  out.set(o);
}
