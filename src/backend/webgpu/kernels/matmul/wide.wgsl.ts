/**
 * The wide-load matrix-vector kernel for 1–4 tokens (batch-1 decode), where a product is bound by memory latency
 * rather than bandwidth: one subgroup per row, each lane taking a whole contiguous run of the row's quants per step
 * (a "chunk": Q4_K 16 bytes of qs = 32 elements, loaded as one vec4u; Q6_K 48 bytes of ql/qh = 64 elements; Q5_0 and
 * Q8_0 one whole block). The column count is baked into the shader, so every step is unrolled and all of a lane's
 * loads are issued before any is consumed: a row costs one or two round trips to memory instead of a dependent
 * chain of small loads. Rows are reduced with one subgroupAdd (all tokens at once as a vec4f).
 *
 * The 22-, 34- and 210-byte blocks of Q5_0, Q8_0 and Q6_K are not 16-byte (or even 4-byte) aligned across blocks:
 * their chunks are read as consecutive u32 words of W from the aligned word below the chunk (all independent loads);
 * blocks start on even bytes, so each needed word is one loaded word or the high half of one and the low half of the
 * next. (Q4_K's 144-byte blocks are 16-byte aligned; K-quant rows are whole 256-element super-blocks, so a 1408-wide
 * matrix is never Q4_K/Q6_K.)
 *
 * Same parameter block (MAT_PARAMS) and grids as the coalesced kernel: plain [gx, gy, batch items], pair-major gather
 * [gx, gy, pairs]; x offsets and strides multiples of 4 (X is read as vec4f).
 */
import { GGMLType } from "../../../../gguf/types.js";
import { expertListWGSL, MAT_PARAMS, matOutWGSL } from "./mat.wgsl.js";

/** Rows per workgroup of a wide shape (subgroups × rows each): what grids are sized by. */
export function wideRowsPerGroup(s: WideShape): number {
  return s.rows * s.sgRows * s.pack * (s.half === true ? 2 : 1);
}

/** Types the wide kernel decodes (those of a Q4_K_M model's large matrices); others keep the coalesced kernel. */
export const WIDE_TYPES: readonly number[] = [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q5_0, GGMLType.Q8_0];

/** Most tokens the wide kernel takes (one accumulator per token in every lane). */
export const WIDE_MAX_N = 4;

/** With tune.wideLists = 1, expert lists take the wide kernel up to this many pairs per expert on average. */
export const WIDE_LIST_PAIRS = 16;

export interface WideShape {
  /** the device's fixed subgroup size = lanes per row */
  readonly sg: number;
  /** subgroups per workgroup */
  readonly rows: number;
  /** rows each subgroup takes, their loads all issued together (plain and pair-major modes; 1 for expert lists) */
  readonly sgRows: number;
  /** most chunk steps per lane issued together before any is consumed */
  readonly unroll: number;
  /** tokens (1..WIDE_MAX_N) */
  readonly n: number;
  /** columns of W (baked in: every step unrolled) */
  readonly cols: number;
  /**
   * x staged in workgroup memory (log2 of the vec4s between pads), or 0 to read it from X. Measured on a large GPU: each
   * lane reads x for its own run of the row, so every vec4 load of X from a subgroup touched ~32 cache lines, and that
   * bounded the kernel — with x read in a coalesced (wrong) order instead, large products ran 1.5–2× faster. The pads
   * make the same per-lane pattern free of bank conflicts in workgroup memory.
   */
  readonly stagePad: number;
  /**
   * 2: each subgroup takes two rows as one run of chunks over its lanes (plain and pair-major products, one row per
   * subgroup otherwise, not dual), where a row's chunk count leaves many lanes idle in its last step: v2-lite's
   * 1408-column Q5_0/Q8_0 and 2816-column Q6_K rows have 44 chunks, 69 % of two steps of 32 lanes, and two rows 88,
   * 92 % of three. 1: one row per run.
   */
  readonly pack: number;
  /** Q4_K decoded with its offsets folded into sums of x (staged beside x): see typeCode's `sums`. Only with x staged. */
  readonly sums: boolean;
  /**
   * each half of a subgroup takes a row of its own (plain and pair-major products; never with pack): where a row's
   * chunks leave many of a whole subgroup's lanes idle in its last step — v2-lite's 1408-column Q5_0/Q8_0 and
   * 2816-column Q6_K rows have 44 chunks, 69 % of two steps of 32 lanes and 92 % of three of 16
   */
  readonly half?: boolean;
  /**
   * over several passes (unroll < steps): software-pipelined, pass i + 1's chunks loaded into registers before pass i is
   * used, in a loop whose body holds one pass's code (plain and pair-major products)
   */
  readonly pipe?: boolean;
}

/**
 * Work a decode step's wide product does beside its own (each saves the step a dependent dispatch and its barrier,
 * ~2.5 µs on a large GPU). Plain or pair-major products with x staged only.
 */
export interface WideFusion {
  /**
   * The product of RMSNorm(x')·g instead of x, x' = x, or with `combine` K > 0 (plain products) x + Σ_k w_k·ye_k — the
   * last MoE layer's weighted expert outputs not yet added to the residual x: x'·g is staged and Σx'² summed beside it,
   * and 1/rms(x') scales the row sums (binds G, then YE and RW with combine).
   */
  readonly norm?: { readonly eps: number; readonly combine: number };
  /** y (+)= W·x + Σ_k w_k·ye_k per token (the same combine into the residual, or a residual from another buffer; binds YE, RW); ye rows of `width`. */
  readonly addCombine?: { readonly K: number; readonly width: number };
}

/** A WGSL float literal of x rounded to f32 (finite): exponent notation is a float literal in WGSL. */
export function wgslFloat(x: number): string {
  return Math.fround(x).toExponential();
}

/** The storage buffers a fusion binds after the kernel's own, in order. */
export function fusionBuffers(fx: WideFusion | undefined): string[] {
  if (fx === undefined) return [];
  return [
    ...(fx.norm !== undefined ? ["G"] : []),
    ...((fx.norm?.combine ?? 0) > 0 || fx.addCombine !== undefined ? ["YE", "RW"] : []),
  ];
}

/**
 * Vec4s between pads of staged x per type: its lanes' runs (in a quarter subgroup) then fall in distinct banks. A chunk's
 * reads also stay inside one such block, so matvecWideWGSL computes the padded index once a chunk: Q4_K reads vec4s
 * b..b+11 with b ≡ 0 or 4 (mod 16), Q6_K b..b+27 with b ≡ 0 or 4 (mod 32), Q5_0 and Q8_0 b..b+7 with b ≡ 0 (mod 8).
 */
export const STAGE_PAD: Readonly<Record<number, number>> = {
  [GGMLType.Q4_K]: 4,
  [GGMLType.Q6_K]: 5,
  [GGMLType.Q5_0]: 3,
  [GGMLType.Q8_0]: 3,
};

/** Vec4s of staged x for n tokens of `cols` with pads every 2^pad. */
export function stagedVec4s(n: number, cols: number, pad: number): number {
  const c4 = n * (cols / 4);
  return c4 + (c4 >> pad);
}

/** How one type's chunk is loaded and used (shared with the row-tiled kernel, rowtile.wgsl.ts). */
export interface TypeCode {
  /** W read as vec4u (blocks 16-byte aligned) rather than as u32 words */
  readonly vec4: boolean;
  /** elements per chunk */
  readonly elems: number;
  /** WGSL statements loading step s's chunk (index `c${s}`) of the row at byte rb */
  load(s: number): string;
  /**
   * WGSL statements adding step s's chunk into `acc` (vec4f over tokens; token t reads x's vec4 v of the row as
   * `XREAD(t, v)`, v without parentheses: matvecWideWGSL rewrites it to a read of X or of the staged copy; with
   * `sums`, also `XSUM(t, g)`: Σ of token t's x over elements 16g..16g+15)
   */
  use(s: number, n: number): string;
  /**
   * Where a type's block header serves several chunks (Q4_K: 8), the row-tiled kernel loads it once for a thread's
   * chunks of one block: `load(s)` without the header, and `use(s, n, from)` reading chunk `from`'s.
   */
  readonly sharedHeader?: {
    readonly blockChunks: number;
    load(s: number): string;
    use(s: number, n: number, from: number): string;
  };
}

/**
 * Types with a `sums` decoder: Q4_K. (A Q8_0 one — bytes shifted to bits 15..22 — was slower on a large GPU: routed down
 * 12.78 → 13.43 µs, a large product 27.85 → 28.84 µs. Its shifts replaced floating-point subtractions with integer
 * instructions, which issue at half the rate.)
 */
export const SUM_TYPES: readonly number[] = [GGMLType.Q4_K];

/** Per token: vec4f over tokens of `per(t)` (0.0 past n). */
function overTokens(n: number, per: (t: number) => string): string {
  return `vec4f(${[0, 1, 2, 3].map((t) => (t < n ? per(t) : "0.0")).join(", ")})`;
}

/**
 * Declares each term's dequantized vec4f once (`let`), then acc[t] += scale·Σ dot(term, x_t[idx]) for every token;
 * names are made unique by `tag`.
 */
function addDots(n: number, tag: string, terms: { v: string; idx: string }[], scale: string): string {
  const lets = terms.map(({ v }, i) => `let f${tag}_${i} = ${v};`);
  const per = Array.from({ length: n }, (_, t) =>
    terms.map(({ idx }, i) => `dot(f${tag}_${i}, XREAD(${t}, ${idx}))`).join(" + "),
  );
  const sum = `vec4f(${[0, 1, 2, 3].map((t) => (t < n ? per[t] : "0.0")).join(", ")})`;
  return `${lets.join(" ")}\n    acc += ${scale === "" ? sum : `${scale} * ${sum}`};`;
}

/**
 * The float 2^23 + v·2^k for the value v masked in place at bits k.. (k + its width ≤ 23): OR-ing into the mantissa of
 * 2^23. With `sums`, Q4_K's nibbles go to the top of the mantissa (k = 19) and the 2^23 is not subtracted: the product
 * with x then carries 16·x beside q·x, and a group's offsets are removed once, through its Σx, after its dot products.
 * Per value: a shift, a masked OR and the dot's FMA, instead of a masked OR, a subtraction, a scale FMA and the dot's
 * FMA. Products round ~16 times coarser than with exact conversion (~1e-6 of |y| instead of ~1e-7, measured in
 * wide.test.ts). On a large GPU the routed gate+up ran 17.37 → 16.38 µs, the shared one 8.52 → 7.86 µs.
 */
function q4kSums(): TypeCode {
  const base = q4k();
  return {
    elems: base.elems,
    vec4: base.vec4,
    load: base.load,
    use: (s, n) => {
      const comps = ["x", "y", "z", "w"];
      const lines: string[] = [];
      // low nibbles (sub-block j) of word w: bits 0, 8, 16, 24 → 19; high nibbles (sub-block j + 1): 4, 12, 20, 28 → 19
      for (let w = 0; w < 4; w++) {
        const u = `qv${s}.${comps[w]}`;
        lines.push(
          `let fl${s}_${w} = bitcast<vec4f>((vec4u(${u} << 19u, ${u} << 11u, ${u} << 3u, ${u} >> 5u) & vec4u(0x780000u)) | vec4u(0x4b000000u));`,
        );
        lines.push(
          `let fh${s}_${w} = bitcast<vec4f>((vec4u(${u} << 15u, ${u} << 7u, ${u} >> 1u, ${u} >> 9u) & vec4u(0x780000u)) | vec4u(0x4b000000u));`,
        );
      }
      const dots =
        (f: string, at: number) =>
        (t: number): string =>
          [0, 1, 2, 3].map((w) => `dot(${f}${s}_${w}, XREAD(${t}, xe${s} + ${w + at}u))`).join(" + ");
      // f = 2^19·(16 + q): Σ f·x = 2^19·(16·Σx + Σ q·x), and the block adds d·sc·Σ q·x − dmin·m·Σx
      return `let dm${s} = unpack2x16float(hd${s}.x);
    let sp${s} = q4ksm2(hd${s}, (h${s} >> 1u) * 2u);
    let dl${s} = dm${s}.x * sp${s}.x; let dh${s} = dm${s}.x * sp${s}.y;
    let xe${s} = k${s} * 64u + (h${s} >> 1u) * 16u + (h${s} & 1u) * 4u;
    let xg${s} = xe${s} >> 2u;
    ${lines.join("\n    ")}
    let sl${s} = ${overTokens(n, dots("fl", 0))};
    let sh${s} = ${overTokens(n, dots("fh", 8))};
    acc += (dl${s} * 1.9073486328125e-6) * sl${s} - (16.0 * dl${s} + dm${s}.y * sp${s}.z) * ${overTokens(n, (t) => `XSUM(${t}, xg${s})`)}
      + (dh${s} * 1.9073486328125e-6) * sh${s} - (16.0 * dh${s} + dm${s}.y * sp${s}.w) * ${overTokens(n, (t) => `XSUM(${t}, xg${s} + 2u)`)};`;
    },
  };
}

function q4k(): TypeCode {
  // chunk c: block c/8, qs bytes 16·(c%8)..+15; its header (d, dmin, 12 scale bytes) is one vec4u shared by 8 lanes
  const load = (s: number, header: boolean): string => `let k${s} = c${s} >> 3u; let h${s} = c${s} & 7u;${
    header
      ? `
    let hd${s} = W[(rb >> 4u) + 9u * k${s}];`
      : ""
  }
    let qv${s} = W[(rb >> 4u) + 9u * k${s} + 1u + h${s}];`;
  // chunk s decoded with the header of chunk `from` (itself, or a chunk of the same block)
  const use = (s: number, n: number, from: number): string => {
    const hd = `hd${from}`;
    const comps = ["x", "y", "z", "w"];
    // sub-blocks j = 2·(h/2) (low nibbles) and j + 1 (high nibbles): dl·q − ml per element. Each nibble is masked in
    // place into a float's mantissa (mag(): q·2^k exactly, k by its position), and the 2^-k goes into the scale
    const terms: { v: string; idx: string }[] = [];
    for (let w = 0; w < 4; w++) {
      const u = `qv${s}.${comps[w]}`;
      terms.push({
        v: `fma(mag(vec4u(${u}, ${u}, ${u}, ${u} >> 8u) & vec4u(0xfu, 0xf00u, 0xf0000u, 0xf0000u)), dlv${s}, vec4f(-ml${s}))`,
        idx: `xe${s} + ${w}u`,
      });
    }
    for (let w = 0; w < 4; w++) {
      const u = `qv${s}.${comps[w]}`;
      terms.push({
        v: `fma(mag(vec4u(${u}, ${u}, ${u} >> 8u, ${u} >> 12u) & vec4u(0xf0u, 0xf000u, 0xf000u, 0xf0000u)), dhv${s}, vec4f(-mh${s}))`,
        idx: `xe${s} + ${w + 8}u`,
      });
    }
    return `let dm${s} = unpack2x16float(${hd}.x);
    let sp${s} = q4ksm2(${hd}, (h${s} >> 1u) * 2u);
    let dl${s} = dm${s}.x * sp${s}.x; let ml${s} = dm${s}.y * sp${s}.z; let dh${s} = dm${s}.x * sp${s}.y; let mh${s} = dm${s}.y * sp${s}.w;
    let dlv${s} = dl${s} * vec4f(1.0, 0.00390625, 1.52587890625e-5, 1.52587890625e-5);
    let dhv${s} = dh${s} * vec4f(0.0625, 0.000244140625, 0.000244140625, 1.52587890625e-5);
    let xe${s} = k${s} * 64u + (h${s} >> 1u) * 16u + (h${s} & 1u) * 4u;
    ${addDots(n, `q${s}`, terms, "")}`;
  };
  return {
    elems: 32,
    vec4: true,
    load: (s) => load(s, true),
    use: (s, n) => use(s, n, s),
    sharedHeader: { blockChunks: 8, load: (s) => load(s, false), use },
  };
}

function q6k(): TypeCode {
  return {
    elems: 64,
    vec4: false,
    // chunk c: block c/4, half n2 = (c%4)/2, l in 16i..16i+15 (i = c%2): ql[64n2 + l], ql[64n2 + 32 + l], qh[32n2 + l]
    // (elements 128n2 + l + 0/32/64/96), four scales and d; every part sits at the block's offset mod 4
    load: (s) => {
      const words = (name: string, first: string, count: number): string =>
        Array.from({ length: count }, (_, i) => `let ${name}${i}_${s} = wd(wo${s} + ${first} + ${i}u);`).join(" ");
      return `let k${s} = c${s} >> 2u; let n${s} = (c${s} >> 1u) & 1u; let i${s} = c${s} & 1u;
    let o${s} = rb + 210u * k${s}; let wo${s} = o${s} >> 2u; let od${s} = (o${s} & 2u) != 0u;
    let qa${s} = 16u * n${s} + 4u * i${s}; let qh${s} = 32u + 8u * n${s} + 4u * i${s}; let sc${s} = 48u + 2u * n${s};
    ${words("A", `qa${s}`, 5)}
    ${words("B", `qa${s} + 8u`, 5)}
    ${words("H", `qh${s}`, 5)}
    ${words("S", `sc${s}`, 3)}
    let D_${s} = wd(wo${s} + 52u);`;
    },
    use: (s, n) => {
      const lines: string[] = [];
      lines.push(`let d${s} = unpack2x16float(select(D_${s}, D_${s} >> 16u, od${s})).x;`);
      lines.push(
        `let sa${s} = hw(S0_${s}, S1_${s}, od${s}) >> (8u * i${s}); let sb${s} = hw(S1_${s}, S2_${s}, od${s}) >> (8u * i${s});`,
      );
      const sc = [`sa${s}`, `sa${s} >> 16u`, `sb${s}`, `sb${s} >> 16u`];
      const groups: { v: string; idx: string }[][] = [[], [], [], []];
      for (let w = 0; w < 4; w++) {
        lines.push(
          `let a${w}_${s} = hw(A${w}_${s}, A${w + 1}_${s}, od${s}); let b${w}_${s} = hw(B${w}_${s}, B${w + 1}_${s}, od${s}); let h${w}_${s} = hw(H${w}_${s}, H${w + 1}_${s}, od${s});`,
        );
        const q = [
          `(a${w}_${s} & 0x0f0f0f0fu) | ((h${w}_${s} & 0x03030303u) << 4u)`,
          `(b${w}_${s} & 0x0f0f0f0fu) | (((h${w}_${s} >> 2u) & 0x03030303u) << 4u)`,
          `((a${w}_${s} >> 4u) & 0x0f0f0f0fu) | (((h${w}_${s} >> 4u) & 0x03030303u) << 4u)`,
          `((b${w}_${s} >> 4u) & 0x0f0f0f0fu) | (((h${w}_${s} >> 6u) & 0x03030303u) << 4u)`,
        ];
        // (q − 32)·256: each 6-bit byte moved to bits 8..13 of its own lane, masked into a float's mantissa
        for (let g = 0; g < 4; g++)
          groups[g].push({ v: `(bytesAt8(${q[g]}, 0x3f00u) - 8396800.0)`, idx: `xe${s} + ${w + 8 * g}u` });
      }
      lines.push(`let xe${s} = k${s} * 64u + n${s} * 32u + i${s} * 4u;`);
      for (let g = 0; g < 4; g++)
        lines.push(addDots(n, `g${g}_${s}`, groups[g], `(d${s} * 0.00390625 * f32(sx8(${sc[g]})))`));
      return lines.join("\n    ");
    },
  };
}

/**
 * Q5_0 (22 bytes) and Q8_0 (34 bytes): one block per chunk, read as the words from the aligned word below it; blocks
 * start on even bytes, so a block is word-aligned or starts at the high half of its first word (`od`)
 */
function q5_0(): TypeCode {
  return {
    elems: 32,
    vec4: false,
    load: (s) => `let o${s} = rb + 22u * c${s}; let wo${s} = o${s} >> 2u; let od${s} = (o${s} & 2u) != 0u;
    ${Array.from({ length: 6 }, (_, i) => `let W${i}_${s} = wd(wo${s} + ${i}u);`).join(" ")}`,
    use: (s, n) => {
      const lines: string[] = [];
      lines.push(
        `let d${s} = unpack2x16float(select(W0_${s}, W0_${s} >> 16u, od${s})).x; let qh${s} = hw2(W0_${s}, W1_${s}, od${s});`,
      );
      // element j (< 16): low nibble of qs byte j with qh bit j above it, as (q − 16)·256 (bits 8..12 of a float's
      // mantissa); element j + 16: the high nibble with qh bit j + 16, as (q − 16)·4096 (bits 12..16)
      const lo: { v: string; idx: string }[] = [];
      const hi: { v: string; idx: string }[] = [];
      for (let m = 0; m < 4; m++) {
        // qs bytes 4m..4m+3 = block bytes 6 + 4m..
        lines.push(
          `let q${m}_${s} = hw2(W${m + 1}_${s}, W${m + 2}_${s}, od${s}); let sh${m}_${s} = vec4u(q${m}_${s} << 8u, q${m}_${s}, q${m}_${s} >> 8u, q${m}_${s} >> 16u);`,
        );
        const hb = (first: number, to: number): string =>
          `((vec4u(qh${s} >> ${first}u) << vec4u(${to}u, ${to - 1}u, ${to - 2}u, ${to - 3}u)) & vec4u(${1 << to}u))`;
        lo.push({ v: `(mag((sh${m}_${s} & vec4u(0xf00u)) | ${hb(4 * m, 12)}) - 4096.0)`, idx: `${m}u` });
        hi.push({ v: `(mag((sh${m}_${s} & vec4u(0xf000u)) | ${hb(4 * m + 16, 16)}) - 65536.0)`, idx: `${m + 4}u` });
      }
      const at = (v: { v: string; idx: string }): { v: string; idx: string } => ({
        v: v.v,
        idx: `8u * c${s} + ${v.idx}`,
      });
      lines.push(addDots(n, `l${s}`, lo.map(at), `(d${s} * 0.00390625)`));
      lines.push(addDots(n, `h${s}`, hi.map(at), `(d${s} * 0.000244140625)`));
      return lines.join("\n    ");
    },
  };
}

function q8_0(): TypeCode {
  return {
    elems: 32,
    vec4: false,
    load: (s) => `let o${s} = rb + 34u * c${s}; let wo${s} = o${s} >> 2u; let od${s} = (o${s} & 2u) != 0u;
    ${Array.from({ length: 9 }, (_, i) => `let W${i}_${s} = wd(wo${s} + ${i}u);`).join(" ")}`,
    use: (s, n) => {
      const lines: string[] = [];
      lines.push(`let d${s} = unpack2x16float(select(W0_${s}, W0_${s} >> 16u, od${s})).x;`);
      const terms = Array.from({ length: 8 }, (_, m) => ({
        // qs bytes 4m..4m+3 = block bytes 2 + 4m..; int8 as (b ^ 0x80) − 128, times 256 (bytesAt8)
        v: `(bytesAt8(hw2(W${m}_${s}, W${m + 1}_${s}, od${s}) ^ 0x80808080u, 0xff00u) - 8421376.0)`,
        idx: `8u * c${s} + ${m}u`,
      }));
      // each term is q·256 (bytesAt8), the 1/256 in the scale
      lines.push(addDots(n, `q${s}`, terms, `(d${s} * 0.00390625)`));
      return lines.join("\n    ");
    },
  };
}

/** The decoder of `type`; with `sums`, the one that reads XSUM too (SUM_TYPES). */
export function typeCode(type: number, sums = false): TypeCode {
  if (sums && type === GGMLType.Q4_K) return q4kSums();
  switch (type) {
    case GGMLType.Q4_K:
      return q4k();
    case GGMLType.Q6_K:
      return q6k();
    case GGMLType.Q5_0:
      return q5_0();
    case GGMLType.Q8_0:
      return q8_0();
    default:
      throw new Error(`the wide kernel does not decode type ${type}`);
  }
}

/** WGSL helpers of the chunk decoders (typeCode). */
export const WIDE_HELPERS = /* wgsl */ `
// the word at a 2-byte-aligned offset: lo itself, or (odd) lo's high half and hi's low half
fn hw(lo: u32, hi: u32, odd: bool) -> u32 { return select(lo, (lo >> 16u) | (hi << 16u), odd); }
// the word 2 bytes further: lo's high half and hi's low half, or (odd) hi itself
fn hw2(lo: u32, hi: u32, odd: bool) -> u32 { return select((lo >> 16u) | (hi << 16u), hi, odd); }
fn sx8(v: u32) -> i32 { return bitcast<i32>(v << 24u) >> 24u; }
// Integers to floats without conversion instructions (a quarter of the FP32 rate on NVIDIA GPUs): an integer v < 2^23
// OR-ed into the mantissa of 2^23 is the float 2^23 + v, so subtracting 2^23 leaves v exactly. Callers mask each
// quantized value in place (at its bit position k, giving v = q·2^k) and fold 2^-k into their scale, so most values
// cost one AND/OR and one subtraction instead of shift, mask and convert. (On a large GPU this alone changed no kernel's
// time: the loads of x were the bound, see WideShape.stagePad; it is fewer instructions for when they no longer are.)
fn mag(v: vec4u) -> vec4f { return bitcast<vec4f>(v | vec4u(0x4b000000u)) - vec4f(8388608.0); }
// the four bytes of w each at bits 8..15 of its lane, masked (a value v·256 + 2^23 as float bits)
fn bytesAt8(w: u32, mask: u32) -> vec4f { return bitcast<vec4f>((vec4u(w << 8u, w, w >> 8u, w >> 16u) & vec4u(mask)) | vec4u(0x4b000000u)); }
// ggml's get_scale_min_k4 for the sub-blocks j and j + 1 (j even) as (scale j, scale j + 1, min j, min j + 1): their
// bytes are neighbours in each scale word, so one shift of each word serves both, and the 6-bit values become floats
// through the mantissa of 2^23 (no conversion instructions)
fn q4ksm2(hd: vec4u, j: u32) -> vec4f {
  let sh = 8u * (j & 3u);
  let ab = vec4u(hd.y >> sh, hd.y >> (sh + 8u), hd.z >> sh, hd.z >> (sh + 8u));
  let c = hd.w >> sh;
  let hi = (vec4u(c, c >> 8u, c >> 4u, c >> 12u) & vec4u(15u)) | ((ab >> vec4u(2u)) & vec4u(48u));
  return bitcast<vec4f>(select(hi, ab & vec4u(63u), j < 4u) | vec4u(0x4b000000u)) - vec4f(8388608.0);
}
// ggml's get_scale_min_k4 for sub-block j from the header's scale words (y: bytes 0-3, z: 4-7, w: 8-11)
fn q4ksm(hd: vec4u, j: u32) -> vec2f {
  let sh = 8u * (j & 3u);
  let a = (hd.y >> sh) & 255u; let b = (hd.z >> sh) & 255u; let c = (hd.w >> sh) & 255u;
  if (j < 4u) { return vec2f(f32(a & 63u), f32(b & 63u)); }
  return vec2f(f32((c & 15u) | ((a >> 6u) << 4u)), f32((c >> 4u) | ((b >> 6u) << 4u)));
}`;

/**
 * The parameter block and bindings of a chunk-decoding kernel (wide, row-tiled): W (and with `dual` W2, with the
 * wd/wd2 word readers where blocks are read as u32 words), X, Y, outside plain mode the id or expert-list buffer IDS
 * (with expert lists also the workgroup's list word `oc`), then p.
 */
export function chunkBindingsWGSL(
  vec4: boolean,
  mode: "plain" | "gather" | "experts-list",
  dual: boolean,
  extra: readonly string[] = [],
): string {
  const w = vec4 ? "vec4u" : "u32";
  const ids = mode !== "plain";
  const first = (ids ? 4 : 3) + (dual ? 1 : 0);
  return `struct P { ${MAT_PARAMS.map((k) => `${k}: u32`).join(", ")} }
@group(0) @binding(0) var<storage, read> W: array<${w}>;
${vec4 ? "" : "fn wd(i: u32) -> u32 { return W[i]; }"}
@group(0) @binding(1) var<storage, read> X: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
${ids ? "@group(0) @binding(3) var<storage, read> IDS: array<u32>;" : ""}${mode === "experts-list" ? "\nvar<workgroup> oc: vec2u;" : ""}
${dual ? `@group(0) @binding(${ids ? 4 : 3}) var<storage, read> W2: array<${w}>;${vec4 ? "" : "\nfn wd2(i: u32) -> u32 { return W2[i]; }"}` : ""}
${extra.map((decl, i) => `@group(0) @binding(${first + i}) ${decl}`).join("\n")}
@group(0) @binding(${first + extra.length}) var<uniform> p: P;`;
}

/**
 * The wide kernel for one type and shape; mode "plain" (batch = heads) or "gather" (one product per pair). With `dual`,
 * a second matrix of the same type and shape (W2: the up projection beside the gate one in W) is read in the same
 * lanes from the same x, and the kernel writes the SwiGLU silu(W·x)·(W2·x) directly (one dispatch for gate and up).
 */
export function matvecWideWGSL(
  type: number,
  mode: "plain" | "gather" | "experts-list",
  s: WideShape,
  dual = false,
  fx?: WideFusion,
): string {
  const { sg: SG, rows: R, n: N } = s;
  if (s.half === true && (s.pack === 2 || mode === "experts-list"))
    throw new Error("the wide kernel takes half a subgroup a row only in plain and pair-major products without pack");
  // lanes a row: the subgroup, or half of it (each half a row of its own)
  const LR = s.half === true ? SG / 2 : SG;
  const norm = fx?.norm;
  const K = norm?.combine ?? fx?.addCombine?.K ?? 0;
  if (norm !== undefined && (s.stagePad === 0 || mode === "experts-list"))
    throw new Error("the wide kernel normalizes x only as it stages it (plain or pair-major products)");
  if (K > 0 && (mode !== "plain" || (norm !== undefined && fx?.addCombine !== undefined)))
    throw new Error("the wide kernel combines expert outputs in plain products only, into x or into y");
  const tc = typeCode(type, s.sums);
  const NC = s.cols / tc.elems;
  // packed (s.pack = 2): the subgroup's two rows as one run of NT = 2·NC chunks over its lanes (see WideShape.pack)
  // (wideRowsPerGroup counts both rows, so a shape the kernel would not pack must not reach it: dualShape gives pack 1)
  if (s.pack === 2 && (dual || mode === "experts-list"))
    throw new Error("the wide kernel packs two rows a run only in single plain or pair-major products");
  const pack = s.pack === 2;
  const NT = pack ? 2 * NC : NC;
  const steps = Math.ceil(NT / LR);
  const outer = Math.ceil(steps / s.unroll);
  const G = Math.ceil(steps / outer);
  // steps whose chunk can pass the row's end (in the last pass) load a clamped chunk and skip using it
  const past = (st: number): boolean => (outer - 1) * G * LR + (st + 1) * LR > NT;
  // streams: (matrix, row j of the subgroup's sgRows) pairs, each with its own accumulator; every stream's loads are
  // issued before any is used. Stream k's step names are shifted by 1000·k so that all names stay unique.
  const S = mode === "experts-list" ? 1 : pack ? 2 : s.sgRows;
  const streams: { w2: boolean; j: number; k: number }[] = [];
  for (let j = 0; j < S; j++) {
    streams.push({ w2: false, j, k: streams.length });
    if (dual) streams.push({ w2: true, j, k: streams.length });
  }
  const retarget = (code: string, st: { w2: boolean; j: number; k: number }): string => {
    let out = code.replace(/\brb\b/g, S === 1 ? "rb" : `rb${st.j}`).replaceAll("acc +=", `acc${st.k} +=`);
    if (st.w2) out = out.replaceAll("W[", "W2[").replaceAll("wd(", "wd2(");
    return out;
  };
  const loads: string[] = [];
  const uses: string[] = [];
  // packed: in one pass a step's chunks are row 0's, row 1's or split at lane NC − first chunk; a split step (and
  // every step over several passes) has each lane pick its row's base and add into its row's sum through selects (no
  // divergent branch)
  for (let st = 0; pack && st < G; st++) {
    const first = st * LR;
    const last = Math.min(first + LR, NT) - 1;
    const row = outer > 1 ? -1 : last < NC ? 0 : first >= NC ? 1 : -1;
    const cc = past(st) ? `min(cb + ${first}u, ${NT - 1}u)` : `cb + ${first}u`;
    const base =
      row === -1
        ? `let q${st} = ${cc} >= ${NC}u; let c${st} = select(${cc}, ${cc} - ${NC}u, q${st}); let rbq${st} = select(rb0, rb1, q${st});`
        : `let c${st} = ${cc}${row === 1 ? ` - ${NC}u` : ""};`;
    loads.push(`${base}\n    ${tc.load(st).replace(/\brb\b/g, row === -1 ? `rbq${st}` : `rb${row}`)}`);
    const use =
      row === -1
        ? `var accq${st} = vec4f(0.0);\n    ${tc.use(st, N).replaceAll("acc +=", `accq${st} +=`)}\n    acc0 += select(accq${st}, vec4f(0.0), q${st}); acc1 += select(vec4f(0.0), accq${st}, q${st});`
        : tc.use(st, N).replaceAll("acc +=", `acc${row} +=`);
    uses.push(past(st) ? `if (cb + ${first}u < ${NT}u) {\n    ${use}\n    }` : use);
  }
  for (const str of pack ? [] : streams) {
    for (let st = 0; st < G; st++) {
      const c0 = st + 1000 * str.k;
      const chunk = str.k === 0 ? (past(st) ? `min(cb + ${st * LR}u, ${NC - 1}u)` : `cb + ${st * LR}u`) : `c${st}`;
      loads.push(`let c${c0} = ${chunk};\n    ${retarget(tc.load(c0), str)}`);
    }
  }
  for (const str of pack ? [] : streams) {
    for (let st = 0; st < G; st++) {
      const use = retarget(tc.use(st + 1000 * str.k, N), str);
      uses.push(past(st) ? `if (cb + ${st * LR}u < ${NC}u) {\n    ${use}\n    }` : use);
    }
  }
  const C4 = s.cols / 4;
  const P = s.stagePad;
  const G16 = s.cols / 16;
  const staged = (t: number, v: string): string => {
    // xsw(base + c) = xsw(base) + c within a pad block (STAGE_PAD): one index computation a chunk, not one a read
    const at = /^(.*) \+ (\d+)u$/.exec(v);
    if (at === null) return `XS[xsw(${t * C4}u + ${v})]`;
    if (Number(at[2]) >= 1 << P)
      throw new Error(`the wide kernel's read at +${at[2]} leaves its pad block of ${1 << P} vec4s`);
    return `XS[xsw(${t * C4}u + ${at[1]}) + ${at[2]}u]`;
  };
  const xread = (code: string): string =>
    code
      .replace(/XREAD\((\d+), ([^)]*)\)/g, (_, t: string, v: string) =>
        P > 0 ? staged(Number(t), v) : `X[xq${t} + ${v}]`,
      )
      .replace(/XSUM\((\d+), ([^)]*)\)/g, (_, t: string, g: string) => `XSS[${Number(t) * G16}u + ${g}]`);
  const steps1 = xread([...loads, ...uses].join("\n    "));
  // with sums, each 16 elements' Σx too (group g of token t from its four staged vec4s; C4 is a multiple of 4)
  const sumStage = s.sums
    ? `\n  for (var g = li; g < ${N * G16}u; g += ${R * SG}u) { let v = XS[xsw(4u * g)] + XS[xsw(4u * g + 1u)] + XS[xsw(4u * g + 2u)] + XS[xsw(4u * g + 3u)]; XSS[g] = (v.x + v.y) + (v.z + v.w); }\n  workgroupBarrier();`
    : "";
  // with a norm: x' (x plus the K weighted expert rows of its token) times g staged, each token's Σx'² summed per
  // subgroup into NS before the staging barrier, then 1/rms per token (ninv) from those sums
  const combineX = Array.from(
    { length: K },
    (_, k) => `v += RW[t * ${K}u + ${k}u] * YE[(t * ${K}u + ${k}u) * ${C4}u + c];`,
  ).join(" ");
  const stage =
    norm === undefined
      ? `for (var i = li; i < ${N * C4}u; i += ${R * SG}u) { XS[xsw(i)] = X[xq + (i / ${C4}u) * xs + i % ${C4}u]; }\n  workgroupBarrier();${sumStage}`
      : `var nss = vec4f(0.0);
  for (var i = li; i < ${N * C4}u; i += ${R * SG}u) {
    let t = i / ${C4}u; let c = i % ${C4}u;
    var v = X[xq + t * xs + c]; ${combineX}
    ${N === 1 ? "nss.x" : "nss[t]"} += dot(v, v);
    XS[xsw(i)] = v * G[c];
  }
  let nsg = subgroupAdd(nss);
  if (li % ${SG}u == 0u) { NS[li / ${SG}u] = nsg; }
  workgroupBarrier();
  var nsum = vec4f(0.0);
  for (var j = 0u; j < ${R}u; j++) { nsum += NS[j]; }
  ninv = inverseSqrt(nsum / ${s.cols}.0 + ${wgslFloat(norm.eps)});${sumStage}`;
  // in one pass, W's loads are issued before x is staged (a lane of a row past the end or of another piece loads a
  // clamped row and writes nothing), so that their latency overlaps the staging's instead of following its barrier
  const early = P > 0 && outer === 1;
  const accs = streams.map((st) => `var acc${st.k} = vec4f(0.0);`).join(" ");
  // row j's result v{j}: the product, or (dual) silu(gate)·up
  const reduce = Array.from({ length: S }, (_, j) => {
    const k = dual ? 2 * j : j;
    const sc = norm !== undefined ? " * ninv" : "";
    return dual
      ? `let g${j} = rowAdd(acc${k}, rtop)${sc}; let v${j} = g${j} / (1.0 + exp(-g${j})) * (rowAdd(acc${k + 1}, rtop)${sc});`
      : `let v${j} = rowAdd(acc${k}, rtop)${sc};`;
  }).join("\n  ");
  const loop =
    outer === 1
      ? `{\n    let cb = lane;\n    ${steps1}\n  }`
      : `for (var it = 0u; it < ${outer}u; it++) {\n    let cb = it * ${G * LR}u + lane;\n    ${steps1}\n  }`;
  // pipelined passes: the loads' names become variables, loaded for pass 0 before x is staged, then in pass i for pass
  // i + 1 (the last reloads itself, in bounds and unused) after pass i's values are copied out for its uses
  const piped = s.pipe === true && outer > 1 && mode !== "experts-list";
  const firstLoads = loads.join("\n    ");
  const names = [...firstLoads.matchAll(/let (\w+) =/g)].map((m) => m[1]);
  const current = (code: string): string =>
    names.length === 0 ? code : code.replace(new RegExp(`\\b(${names.join("|")})\\b`, "g"), "$1_");
  const pipeFirst = piped ? `let cb = lane;\n  ${firstLoads.replace(/let (\w+) =/g, "var $1 =")}` : "";
  const pipeLoop = `for (var it = 0u; it < ${outer}u; it++) {
    let cb = it * ${G * LR}u + lane;
    let nb = min(it + 1u, ${outer - 1}u) * ${G * LR}u + lane;
    ${names.map((n) => `let ${n}_ = ${n};`).join(" ")}
    ${firstLoads.replace(/\bcb\b/g, "nb").replace(/let (\w+) =/g, "$1 =")}
    ${current(xread(uses.join("\n    ")))}
  }`;
  const xq = Array.from({ length: N }, (_, t) => `let xq${t} = xq + ${t}u * xs;`).join(" ");
  // addCombine: each row's combine term loaded at the start (beside the weights' loads), added as the row is written
  const ac = fx?.addCombine;
  const rowName = (j: number): string => (S === 1 ? "r" : `r${j}`);
  const combineEarly =
    ac === undefined
      ? ""
      : Array.from({ length: S }, (_, j) => {
          const rr = `select(0u, ${rowName(j)}, ${S === 1 ? "valid" : `ok${j}`})`;
          const per = (t: number): string =>
            Array.from(
              { length: ac.K },
              (_, k) => `RW[${t * ac.K + k}u] * YE[${(t * ac.K + k) * ac.width}u + p.rowBase + ${rr}]`,
            ).join(" + ");
          return `let cm${j} = vec4f(${Array.from({ length: 4 }, (_, t) => (t < N ? per(t) : "0.0")).join(", ")});`;
        }).join("\n  ");
  const writes = Array.from(
    { length: S },
    (_, j) =>
      `if (${S === 1 ? "valid" : `ok${j}`}) { ${Array.from({ length: N }, (_, t) => `out(b, ${t}u, ${rowName(j)}, v${j}.${"xyzw"[t]}${ac !== undefined ? ` + cm${j}.${"xyzw"[t]}` : ""});`).join(" ")} }`,
  ).join(" ");
  const rowBases =
    S === 1
      ? "let rb = p.wOff + wb + select(0u, r, valid) * p.rowBytes;"
      : Array.from(
          { length: S },
          (_, j) =>
            `let r${j} = r + ${j}u; let ok${j} = valid && r${j} < p.rows; let rb${j} = p.wOff + wb + select(0u, r${j}, ok${j}) * p.rowBytes;`,
        ).join("\n  ");
  return /* wgsl */ `enable subgroups;
${chunkBindingsWGSL(
  tc.vec4,
  mode,
  dual,
  fusionBuffers(fx).map(
    (b) => `var<storage, read> ${b}: array<${b === "G" || (b === "YE" && norm !== undefined) ? "vec4f" : "f32"}>;`,
  ),
)}
${norm !== undefined ? `var<workgroup> NS: array<vec4f, ${R}>;` : ""}
${
  P > 0
    ? `var<workgroup> XS: array<vec4f, ${stagedVec4s(N, s.cols, P)}>;
fn xsw(v: u32) -> u32 { return v + (v >> ${P}u); }`
    : ""
}
${s.sums ? `var<workgroup> XSS: array<f32, ${N * (s.cols / 16)}>;` : ""}
${WIDE_HELPERS}
${matOutWGSL(true)}
// a row's sum over its lanes (the subgroup, or with half rows each half's own)
fn rowAdd(v: vec4f, top: bool) -> vec4f {
  ${
    LR === SG
      ? "return subgroupAdd(v);"
      : `let lo = subgroupAdd(select(v, vec4f(0.0), top));
  let hi = subgroupAdd(select(vec4f(0.0), v, top));
  return select(lo, hi, top);`
  }
}
// wide matvec: ${NC} chunks per row, ${G} per lane and pass, ${outer} pass(es)
@compute @workgroup_size(${R * SG})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let rg = wid.x + wid.y * p.gx;
  let lane = li % ${LR}u;
  // (subgroups are runs of ${SG} invocations of li; the upper half of one takes its own row with half rows)
  let rtop = li % ${SG}u >= ${LR}u;
  let r = (rg * ${(R * SG) / LR}u + li / ${LR}u) * ${S}u;
  var valid = r < p.rows;
  let b = wid.z;
  var wb = b * p.wBatch;
  var xb = b * p.xBatch;
${
  mode === "gather"
    ? `  // a pair whose expert another piece holds loads nothing and writes nothing
  let e = IDS[p.idsOff + b];
  let inPiece = e >= p.e0 && e < p.e1;
  valid = valid && inPiece;
  wb = select(0u, e - p.e0, inPiece) * p.wBatch;
  xb = (b / p.xDiv) * p.xBatch;`
    : ""
}
${
  mode === "experts-list"
    ? `  // expert e's pairs (IDS: offset and count per expert, then the pairs grouped by expert from idsOff), ${N} at a time;
  // a partial tile repeats its last pair and writes only its own
  let rb = p.wOff + b * p.wBatch + select(0u, r, valid) * p.rowBytes;
  ${expertListWGSL("(p.e0 + b)")}
  for (var t0 = 0u; t0 < m; t0 += ${N}u) {
    let nt = min(${N}u, m - t0);
    ${Array.from({ length: N }, (_, t) => `let pr${t} = IDS[lb + min(t0 + ${t}u, m - 1u)];`).join(" ")}
    ${Array.from({ length: N }, (_, t) => `let xq${t} = (p.xOff + (pr${t} / p.xDiv) * p.xBatch) >> 2u;`).join(" ")}
    ${accs}
    if (valid) {
    ${loop}
    }
    ${reduce}
    if (lane == 0u && valid) { ${Array.from({ length: N }, (_, t) => `if (${t}u < nt) { out(pr${t}, 0u, r, v0.${"xyzw"[t]}); }`).join(" ")} }
  }
}`
    : `  ${rowBases}
  let xq = (p.xOff + xb) >> 2u;
  let xs = p.xStride >> 2u;
  ${xq}
  ${norm !== undefined ? "var ninv = vec4f(1.0);" : ""}
  ${combineEarly}
  ${pipeFirst}
  ${P > 0 && !early ? stage : ""}
  ${accs}
  ${early ? `{\n    let cb = lane;\n    ${xread(loads.join("\n    "))}\n    ${stage}\n    ${xread(uses.join("\n    "))}\n  }` : `if (valid) {\n  ${piped ? pipeLoop : loop}\n  }`}
  ${reduce}
  if (lane == 0u) { ${writes} }
}`
}`;
}
