/**
 * The row-tiled matrix-matrix kernel for expert lists and plain products of ≥ ROW_TILE_FROM tokens (batched decode,
 * prefill; from 5 tokens with tune.rowTile = 1): one thread per row (or
 * `ksplit` threads per row, each taking every ksplit-th chunk of a step), every weight chunk decoded once into
 * registers and multiplied with a whole tile of tokens whose x sits in workgroup memory.
 *
 * Why this shape: per pair on the wide kernel, batch 64 read every routed expert once per pair (384 pairs over 64
 * experts: 938 µs per layer for gate+up, 1.3 TB/s from memory); the coalesced kernel and an earlier tiled one decode
 * weights into workgroup memory and pay a workgroup-memory load per multiply-add. Here a warp's lanes are 32 rows at
 * the same column, so each x read is one broadcast vec4 that serves four multiply-adds in every lane, and a weight
 * element costs its decode (shared with the wide kernel: typeCode) once per tile of tokens.
 *
 * Per step of `ks` columns: the chunks' weight loads are issued first, then x of the tile's tokens is staged
 * ([token][column], zeros past the tile's tokens), then the chunks are used. With ksplit > 1 the slices' partial
 * sums meet in workgroup memory at the end. Modes, grids and parameters ("plain": [gx,
 * gy·tiles, items]; "experts-list": [gx, gy, experts of the piece], each workgroup taking its expert's pairs a tile at
 * a time). With `dual`, a second matrix (W2: up beside gate) is read by the same threads from the same x and the
 * kernel writes silu(W·x)·(W2·x). x offsets and strides must be multiples of 4 (X is bound as array<vec4f>).
 */
import { chunkBindingsWGSL, typeCode, WIDE_HELPERS } from "./wide.wgsl.js";
import { expertListWGSL, matOutWGSL } from "./mat.wgsl.js";

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

export interface RowTileShape {
  /** rows per workgroup (a multiple of the subgroup size, so that a warp's lanes share their slice) */
  readonly rows: number;
  /** threads per row: slice s of a step takes chunks s, s + ksplit, … (divides the step's chunks) */
  readonly ksplit: number;
  /** tokens (or an expert's pairs) per tile: a multiple of 4 */
  readonly tokens: number;
  /** columns staged per step (divides cols; a multiple of the type's chunk) */
  readonly ks: number;
  /** columns of W (baked in) */
  readonly cols: number;
  /**
   * software-pipelined steps: step s + 1's weight chunks and x are loaded into registers before step s is computed, so
   * that their memory latency overlaps the multiply-adds instead of sitting between the step's two barriers
   */
  readonly pipe?: boolean;
  /** a thread's chunks of one step that share a block (Q4_K) load its header once (TypeCode.sharedHeader) */
  readonly shareHeader?: boolean;
  /** integer dot products on activations quantized to int8 (rowtile-q8.wgsl.ts; whole 32-column units a slice) */
  readonly q8?: boolean;
  /** with q8: x in two int8 pieces, 15 bits per 32 values (tune.rowTileX16) */
  readonly pieces?: 2;
  /** (q8, one piece) x read quantized from the buffer of xq8.wgsl.ts's pass, bound as X, instead of quantized per workgroup */
  readonly xq8?: boolean;
}

/** Vec4s of workgroup memory the kernel declares: the staged x tile, reused for the partial sums of slices 1.. */
export function rowTileSharedVec4s(s: RowTileShape, dual: boolean): number {
  return Math.max(s.tokens * (s.ks / 4), (s.ksplit - 1) * s.rows * (dual ? 2 : 1) * (s.tokens / 4));
}

export function matmulRowsWGSL(type: number, mode: "plain" | "experts-list", s: RowTileShape, dual = false): string {
  const tc = typeCode(type);
  const { rows: RW, ksplit: KSPL, tokens: T } = s;
  const WG = RW * KSPL;
  const G4 = T / 4;
  const KS4 = s.ks / 4;
  const CS = s.ks / tc.elems;
  const NS = s.cols / s.ks;
  const PER = CS / KSPL;
  if (!Number.isInteger(CS) || !Number.isInteger(NS) || !Number.isInteger(PER) || T % 4 !== 0)
    throw new Error(`row-tiled kernel: bad shape ${JSON.stringify(s)} for chunks of ${tc.elems}`);
  const S = dual ? 2 : 1;
  const groups = Array.from({ length: G4 }, (_, g) => g);
  // one use of a chunk: the decode once, then its accumulation for every group of 4 tokens (XREAD's token shifted)
  const retarget = (code: string, k: number): string => {
    let out = code.replace(/acc \+= ([^;]*);/g, (_, rhs: string) =>
      groups
        .map(
          (g) =>
            `acc${k}_${g} += ${rhs.replace(/XREAD\((\d+), /g, (_m, t: string) => `XREAD(${Number(t) + 4 * g}, `)};`,
        )
        .join("\n    "),
    );
    if (k === 1) out = out.replaceAll("W[", "W2[").replaceAll("wd(", "wd2(");
    return out;
  };
  // a thread's chunks of one step lie in one block where the block's chunks are a multiple of the step's: then
  // chunks j > 0 take chunk 0's header (TypeCode.sharedHeader)
  const shared =
    s.shareHeader === true && tc.sharedHeader !== undefined && tc.sharedHeader.blockChunks % CS === 0
      ? tc.sharedHeader
      : undefined;
  // the chunk loads of step `step` (an expression)
  const loadsAt = (step: string): string[] => {
    const out: string[] = [];
    for (let k = 0; k < S; k++)
      for (let j = 0; j < PER; j++) {
        const c = j + 1000 * k;
        const load = shared !== undefined && j > 0 ? shared.load(c) : tc.load(c);
        out.push(
          `let c${c} = ${k === 0 ? `(${step}) * ${CS}u + slice + ${j * KSPL}u` : `c${j}`};\n    ${retarget(load, k)}`,
        );
      }
    return out;
  };
  const uses: string[] = [];
  for (let k = 0; k < S; k++)
    for (let j = 0; j < PER; j++)
      uses.push(
        retarget(shared !== undefined && j > 0 ? shared.use(j + 1000 * k, 4, 1000 * k) : tc.use(j + 1000 * k, 4), k),
      );
  const xread = (code: string): string =>
    code.replace(/XREAD\((\d+), ([^)]*)\)/g, (_, t: string, v: string) => `XS[${Number(t) * KS4}u + (${v}) - kb]`);
  const accs = Array.from({ length: S }, (_, k) => groups.map((g) => `var acc${k}_${g} = vec4f(0.0);`).join(" ")).join(
    " ",
  );
  // x row (vec4 index) of tile token t (t < nt)
  const xRow = mode === "plain" ? "xq + (t0 + t) * xs4" : "(p.xOff + (IDS[lb + t0 + t] / p.xDiv) * p.xBatch) >> 2u";
  // each step: its chunks' loads, x staged between two barriers, then the chunks' uses
  const plainSteps = (): string => `for (var st = 0u; st < ${NS}u; st++) {
      let kb = st * ${KS4}u;
      ${loadsAt("st").join("\n      ")}
      workgroupBarrier();
      for (var i = li; i < ${T * KS4}u; i += ${WG}u) {
        let t = i / ${KS4}u;
        var v = vec4f(0.0);
        if (t < nt) { v = X[(${xRow}) + kb + i % ${KS4}u]; }
        XS[i] = v;
      }
      workgroupBarrier();
      ${xread(uses.join("\n      "))}
    }`;
  // pipelined: the loads' names become variables, loaded first for step 0 and then, in step st, for step st + 1 (the last
  // step reloads step 0, in bounds and unused) after the step's own values are copied out for its uses; x likewise
  // through registers xr, so that only x's store to XS sits between the barriers
  const pipedSteps = (): string => {
    const XPER = Math.ceil((T * KS4) / WG);
    const xLoad = (j: number, step: string): string =>
      `{ let i = li + ${j * WG}u; let t = i / ${KS4}u; xr${j} = vec4f(0.0); if (i < ${T * KS4}u && t < nt) { xr${j} = X[(${xRow}) + (${step}) * ${KS4}u + i % ${KS4}u]; } }`;
    const first = loadsAt("0u").join("\n    ");
    const names = [...first.matchAll(/let (\w+) =/g)].map((m) => m[1]);
    const current = (code: string): string => code.replace(new RegExp(`\\b(${names.join("|")})\\b`, "g"), "$1_");
    return `${first.replace(/let (\w+) =/g, "var $1 =")}
    ${range(XPER)
      .map((j) => `var xr${j} = vec4f(0.0); ${xLoad(j, "0u")}`)
      .join("\n    ")}
    for (var st = 0u; st < ${NS}u; st++) {
      let kb = st * ${KS4}u;
      let nx = (st + 1u) % ${NS}u;
      ${names.map((n) => `let ${n}_ = ${n};`).join(" ")}
      ${loadsAt("nx")
        .join("\n      ")
        .replace(/let (\w+) =/g, "$1 =")}
      workgroupBarrier();
      ${range(XPER)
        .map((j) => `if (li + ${j * WG}u < ${T * KS4}u) { XS[li + ${j * WG}u] = xr${j}; }`)
        .join("\n      ")}
      ${range(XPER)
        .map((j) => xLoad(j, "nx"))
        .join("\n      ")}
      workgroupBarrier();
      ${xread(uses.map(current).join("\n      "))}
    }`;
  };
  const steps = s.pipe === true ? pipedSteps() : plainSteps();
  // the slices' partial sums meet in slice 0 (XS reused once every thread is past its last read)
  const reduce =
    KSPL === 1
      ? ""
      : `workgroupBarrier();
    if (slice > 0u) {
      ${Array.from({ length: S }, (_, k) => groups.map((g) => `XS[((slice - 1u) * ${RW}u + row) * ${S * G4}u + ${k * G4 + g}u] = acc${k}_${g};`).join(" ")).join(" ")}
    }
    workgroupBarrier();
    if (slice == 0u) {
      for (var sl = 0u; sl < ${KSPL - 1}u; sl++) {
        ${Array.from({ length: S }, (_, k) => groups.map((g) => `acc${k}_${g} += XS[(sl * ${RW}u + row) * ${S * G4}u + ${k * G4 + g}u];`).join(" ")).join(" ")}
      }
    }`;
  // token t's result: the product, or (dual) silu(gate)·up
  const result = (t: number): string => {
    const c = `${Math.floor(t / 4)}.${"xyzw"[t % 4]}`;
    return dual ? `silu(acc0_${c}) * acc1_${c}` : `acc0_${c}`;
  };
  const writes = (dest: (t: number) => string): string =>
    Array.from({ length: T }, (_, t) => `if (${t}u < nt) { out(${dest(t)}, r, ${result(t)}); }`).join("\n      ");
  return /* wgsl */ `${chunkBindingsWGSL(tc.vec4, mode, dual)}
var<workgroup> XS: array<vec4f, ${rowTileSharedVec4s(s, dual)}>;
fn silu(g: f32) -> f32 { return g / (1.0 + exp(-g)); }
${WIDE_HELPERS}
${matOutWGSL(true)}
// row-tiled product: ${RW} rows × ${KSPL} slice(s), ${T} tokens a tile, ${NS} step(s) of ${s.ks} columns, ${PER} chunk(s) per thread and step
${rowTileEntryWGSL(mode, RW, WG, T, { accs, steps, reduce, writes })}`;
}

/** What a row-tiled kernel puts in its entry: accumulator declarations, the steps, the slices' reduction, the writes. */
export interface RowTileBody {
  readonly accs: string;
  readonly steps: string;
  readonly reduce: string;
  readonly writes: (dest: (t: number) => string) => string;
}

/**
 * The entry point shared by the f32 and integer row-tiled kernels: a workgroup's rows (and, plain, its token tile and
 * batch item; expert lists, its expert and that expert's pairs a tile at a time) around the kernel's own body.
 */
export function rowTileEntryWGSL(
  mode: "plain" | "experts-list",
  RW: number,
  WG: number,
  T: number,
  body: RowTileBody,
): string {
  const { accs, steps, reduce, writes } = body;
  const main = `@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let row = li % ${RW}u;
  let slice = li / ${RW}u;`;
  if (mode === "plain") {
    return `${main}
  let tt = wid.y % p.tiles;
  let r0 = (wid.x + (wid.y / p.tiles) * p.gx) * ${RW}u;
  if (r0 >= p.rows) { return; }
  let b = wid.z;
  let r = r0 + row;
  let valid = r < p.rows;
  let rb = p.wOff + b * p.wBatch + select(0u, r, valid) * p.rowBytes;
  let xq = (p.xOff + b * p.xBatch) >> 2u;
  let xs4 = p.xStride >> 2u;
  let t0 = tt * ${T}u;
  let nt = min(${T}u, p.n - t0);
  {
    ${accs}
    ${steps}
    ${reduce}
    if (slice == 0u && valid) {
      ${writes((t) => `b, t0 + ${t}u`)}
    }
  }
}`;
  }
  return `${main}
  let r0 = (wid.x + wid.y * p.gx) * ${RW}u;
  let ex = p.e0 + wid.z;
  let r = r0 + row;
  let valid = r < p.rows;
  let rb = p.wOff + wid.z * p.wBatch + select(0u, r, valid) * p.rowBytes;
  ${expertListWGSL("ex", "r0 < p.rows")}
  for (var t0 = 0u; t0 < m; t0 += ${T}u) {
    let nt = min(${T}u, m - t0);
    ${accs}
    ${steps}
    ${reduce}
    if (slice == 0u && valid) {
      ${writes((t) => `IDS[lb + t0 + ${t}u], 0u`)}
    }
    workgroupBarrier();
  }
}`;
}
