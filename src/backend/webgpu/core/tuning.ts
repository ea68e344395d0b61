/**
 * Every tuning knob of the WebGPU kernels in one table: its name, the kernel family whose select module reads it,
 * what it changes and its default. The knobs exist to measure alternatives (`bench/webgpu-model.ts --tune a=1,b=2`); a
 * default is what measured fastest, and results never depend on a knob beyond float rounding. `KernelTuning` (what
 * GpuRuntime's `tune` holds) is derived from the table, docs/webgpu.md's knob table is generated from it
 * (scripts/gen-tuning-doc.ts), and parseTuning refuses a name the table lacks.
 */
import { LatentError } from "../../../util/errors.js";

/**
 * The family whose select module (kernels/<family>/select.ts, or graph/select.ts) alone reads a knob, turning it into
 * plain choices for the launchers and the graph (tuning.test.ts checks).
 */
export type KnobFamily = "matmul" | "attention" | "moe" | "dsa" | "graph";

export interface Knob {
  readonly family: KnobFamily;
  /** what the knob changes, values included */
  readonly doc: string;
  /** the value (or the rule) used when the knob is not set */
  readonly default: string;
}

export const KNOBS = {
  // matrix products (kernels/matmul/)
  fillThreads: {
    family: "matmul",
    doc: "one-token products use no more threads than this over all their rows (0: no cap)",
    default: "FILL_THREADS = 262144 (threads that fill a large GPU about once)",
  },
  expertsFrom: {
    family: "matmul",
    doc: "expert-major products (each expert's pairs together) when pairs ≥ expertsFrom × experts",
    default:
      "2 on the row-tiled kernel, 8 where the wide kernel reads the experts, 1/4 with the coalesced kernel, else 1",
  },
  expertTn: {
    family: "matmul",
    doc: "tokens per tile of the coalesced expert-major kernel (power of two ≤ 16)",
    default: "pairs per expert, at least 4",
  },
  expertTpr: {
    family: "matmul",
    doc: "threads per row of the coalesced expert-major kernel (power of two, ≥ the subgroup size, ≤ 256)",
    default: "the subgroup size",
  },
  wide: {
    family: "matmul",
    doc: "the wide-load kernel for products of 1–4 tokens (Q4_K, Q6_K, Q5_0, Q8_0; plain and pair-major): 1 on, 0 off",
    default: "1",
  },
  wideRows: {
    family: "matmul",
    doc: "subgroups (rows) per workgroup of the wide kernel",
    default: "256 threads / subgroup size",
  },
  wideUnroll: {
    family: "matmul",
    doc: "most chunk steps a lane of the wide kernel issues together; more steps run in passes (pipelined with widePipe)",
    default: "1",
  },
  wideHalf: {
    family: "matmul",
    doc: "half a subgroup a row in the wide kernel (WideShape.half): 1 where that fills the lanes' steps ≥ 10 % better, 2 wherever it can, 0 never",
    default: "1",
  },
  widePipe: {
    family: "matmul",
    doc: "1: the wide kernel's passes software-pipelined (the next pass's chunks loaded before this one's are used)",
    default: "0",
  },
  wideSgRows: {
    family: "matmul",
    doc: "rows each subgroup of the wide kernel takes, all their loads issued together (1..4; plain and pair-major products)",
    default: "1, 2 from 65536 rows",
  },
  wideStage: {
    family: "matmul",
    doc: "0: the wide kernel reads x from its buffer instead of staging it in workgroup memory",
    default: "1 (where it fits)",
  },
  widePack: {
    family: "matmul",
    doc: "two rows per run of chunks in the wide kernel (WideShape.pack): 0 never, 1 wherever it can (also over several passes)",
    default: "where it fills the lanes' steps ≥ 10 % better in one pass",
  },
  wideSums: {
    family: "matmul",
    doc: "0: the wide kernel decodes Q4_K with the offset subtracted per value instead of through staged Σx (typeCode's sums)",
    default: "1",
  },
  wideLists: {
    family: "matmul",
    doc: "1: expert-list products on the wide kernel (4 pairs a tile) while experts average ≤ WIDE_LIST_PAIRS pairs (measured slower than per-pair products)",
    default: "0",
  },
  vecQ8: {
    family: "matmul",
    doc: "with activations q8 (or rowTileX16 = 1): 1 plain products of 5 to VEC_Q8_MAX = 8 tokens on the integer matrix-vector kernel (vec-q8.wgsl.ts: a subgroup a row, x quantized once a workgroup), 2 of 5 to 31, 0 none",
    default: "1",
  },
  vecQ8Rows: {
    family: "matmul",
    doc: "rows each subgroup of the integer matrix-vector kernel takes (a multiple of vecQ8Par) where a row goes in one step",
    default: "16, halved (to vecQ8Par) while the product would have fewer than 264 workgroups",
  },
  vecQ8X: {
    family: "matmul",
    doc: "with q8X on: 1 the integer matrix-vector kernel reads x from the quantizing pass's buffer (no staging, whole rows) where staging x would go in steps, 2 always, 0 never (each workgroup quantizes x into its workgroup memory)",
    default: "1",
  },
  vecQ8Par: {
    family: "matmul",
    doc: "rows a subgroup of the integer matrix-vector kernel loads together (1 or 2)",
    default: "1",
  },
  rowTile: {
    family: "matmul",
    doc: "the row-tiled kernel for expert lists of its types and plain products of ≥ ROW_TILE_FROM = 32 tokens; 1 also from 5 tokens, 0 never",
    default: "on from 32 tokens",
  },
  rowTileTokens: {
    family: "matmul",
    doc: "tokens (an expert's pairs) per tile of the row-tiled kernel (multiple of 4, ≤ 32)",
    default: "4/8/16 by the tokens or pairs per expert",
  },
  rowTileSplit: {
    family: "matmul",
    doc: "threads per row of the row-tiled kernel (divides a step's chunks)",
    default: "more while the product has fewer than ROW_TILE_FILL threads",
  },
  rowTilePipe: {
    family: "matmul",
    doc: "1: the row-tiled kernel loads step s + 1's weight chunks and x before it computes step s (RowTileShape.pipe), 0 not",
    default: "1 where subgroups are 32 wide or more (GPUs), else 0",
  },
  rowTileHeader: {
    family: "matmul",
    doc: "1: the row-tiled kernel loads a Q4_K block header once for a thread's chunks of one step (RowTileShape.shareHeader), 0 not",
    default: "1 where subgroups are 32 wide or more (GPUs), else 0",
  },
  rowTileQ8: {
    family: "matmul",
    doc: "with activations q8: 1 the row-tiled products of types with an integer form run on int8 dot products (rowtile-q8.wgsl.ts), 0 on the f32 row-tiled kernel",
    default: "1",
  },
  q8X: {
    family: "matmul",
    doc: "with activations q8: 1 a product's x is quantized once by a pass of its own (xq8.wgsl.ts) and the register-tiled and row-tiled integer kernels copy it, 0 each workgroup quantizes the x it stages",
    default: "1",
  },
  rowTileX16: {
    family: "matmul",
    doc: "1: the row-tiled products of types with an integer form run on int8 dot products in either activations mode, x in two int8 pieces (15 bits per 32 values: 128·hi + lo), 0 not",
    default: "0",
  },
  gemm: {
    family: "matmul",
    doc: "the register-tiled kernel (gemm.wgsl.ts) for plain products of ≥ GEMM_FROM = 128 tokens and expert lists averaging ≥ GEMM_EXPERTS_FROM = 24 pairs an expert: 1 on (also on CPU adapters), 2 on from any count (where the wide kernel does not take the product), 0 off",
    default: "on where subgroups are 32 wide or more (GPUs)",
  },
  gemmHeadFrom: {
    family: "matmul",
    doc: "with activations q8: plain products of ≥ GEMM_HEAD_ROWS = 65536 rows (output heads) take the register-tiled kernel from this many tokens (0: from GEMM_FROM like the rest)",
    default: "GEMM_HEAD_FROM = 32",
  },
  gemmTokens: {
    family: "matmul",
    doc: "tokens (an expert's pairs) per workgroup tile of the register-tiled kernel: 16, 32 or 64",
    default:
      "64 for plain products (32 where they have at most 32 tokens); for expert lists the least of 16/32/64 that holds an expert's average pairs",
  },
  gemmRows: {
    family: "matmul",
    doc: "rows per thread of the register-tiled kernel (1, 2, 4 or 8; the tile's rows are this × the threads along them)",
    default: "4 (2 with 16-token tiles)",
  },
  gemmStep: {
    family: "matmul",
    doc: "columns per step of the register-tiled kernel: 32 or 16 (a step's tiles in half the workgroup memory, twice the barriers)",
    default: "16 for dual products and expert lists; else 32 where the tiles fit, else 16",
  },
  gemmPipe: {
    family: "matmul",
    doc: "1: the register-tiled kernels (f32 and q8) decode step s + 1's weights and load (q8: quantize or copy) its x into registers before they compute step s (GemmShape.pipe), 0 not",
    default: "1 for the q8 kernel where subgroups are 32 wide or more (GPUs), else 0",
  },
  gemmQ8Step: {
    family: "matmul",
    doc: "columns per step of the q8 register-tiled kernel (activations q8): 32, 64 or 128",
    default: "the widest of 128/64/32 that divides the row and whose tiles fit the workgroup memory",
  },
  gemmExpertsFrom: {
    family: "matmul",
    doc: "expert lists take the register-tiled kernel (f32 or q8) from this many pairs an expert on average",
    default: "GEMM_EXPERTS_FROM = 24; with activations q8 GEMM_Q8_EXPERTS_FROM = 12",
  },
  // attention (kernels/attention/)
  attn: {
    family: "attention",
    doc: "absorbed-MLA attention of 1–4 queries on the wide attention kernel (a workgroup per head group reading each key once for its heads): 1 at every key count, 0 never",
    default: "past one chunk of 256 keys",
  },
  attnTiled: {
    family: "attention",
    doc: "the tiled latent attention (attention/tiled.wgsl.ts: a workgroup per query and group of heads, each key row read once for the group): 1 from any number of queries, 0 never",
    default: "from attnTiledFrom queries (prompt chunks)",
  },
  attnTiledFrom: {
    family: "attention",
    doc: "the fewest queries in a step that take the tiled latent attention",
    default: "ATTN_TILED_FROM = 128",
  },
  attnTiledWgs: {
    family: "attention",
    doc: "the tiled latent attention splits a query's keys (in chunks of 256) while its workgroups are fewer than this",
    default: "256",
  },
  attnHeads: { family: "attention", doc: "heads per workgroup of the wide attention kernel (1..8)", default: "4" },
  attnTile: {
    family: "attention",
    doc: "keys per tile of the wide attention kernel (rounded to a multiple of the subgroups per workgroup, 1..8 keys per subgroup)",
    default: "32",
  },
  attnSplitFrom: {
    family: "attention",
    doc: "wide attention: steps whose keys (in whole chunks of 256) exceed this are split over workgroups, a second dispatch combining the splits",
    default: "256",
  },
  attnWgs: {
    family: "attention",
    doc: "wide attention: workgroups a split grid aims for",
    default: "128 (about one per SM of a large GPU)",
  },
  attnFuse: {
    family: "attention",
    doc: "1: a one-token step's W_UK absorb, attention and W_UV (and without q-LoRA its cache write) as one dispatch (no DSA)",
    default: "1 at subgroups ≥ 32, else 0",
  },
  attnFuseSubgroups: {
    family: "attention",
    doc: "subgroups a workgroup of the fused one-token attention",
    default: "8 (256 threads at subgroup size 32)",
  },
  attnFuseSplit: {
    family: "attention",
    doc: "fused one-token attention: workgroups per head, each taking its share of W_UV's rows (1..16)",
    default: "round(128 / heads) at subgroups ≥ 32, else 2",
  },
  attnFuseKeys: {
    family: "attention",
    doc: "fused one-token attention: cache keys a subgroup scores per iteration, their loads issued together (1..4)",
    default: "2 at subgroups ≥ 32, else 1",
  },
  attnFuseUnroll: {
    family: "attention",
    doc: "fused one-token attention: most chunk steps of a thread's W_UK or W_UV product unrolled, more in a pipelined loop (1..16)",
    default: "1",
  },
  attnFuseLong: {
    family: "attention",
    doc: "0: steps past one chunk of keys take the unfused attention path instead of the key-split fused one",
    default: "1",
  },
  // MoE routing (kernels/moe/)
  route: {
    family: "moe",
    doc: "MoE routing kernel: 1 one subgroup per token where the subgroup size is fixed, 0 the 256-thread workgroup per token",
    default: "1",
  },
  routeThreads: {
    family: "moe",
    doc: "threads a workgroup of the subgroup routing kernel (rounded down to a multiple of the subgroup size); at 256 it can share a dispatch with a 256-thread kernel (GpuRuntime.together combines kernels of unequal workgroup sizes only where the smaller uses no subgroup or barrier operations)",
    default: "256",
  },
  // DSA key selection (kernels/dsa/)
  dsaScores: {
    family: "dsa",
    doc: "DSA indexer scores: 1 a workgroup per block of 32 keys (key rows and the query's heads through workgroup memory, each key row read once), 0 one thread per (key, query) looping over heads and depth",
    default: "1",
  },
  // the fused model graph (graph/)
  fuseTokens: {
    family: "graph",
    doc: "steps of at most this many tokens combine independent kernels into one dispatch",
    default: "FUSE_MAX_TOKENS = 4",
  },
  normFuse: {
    family: "graph",
    doc: "steps of up to fuseTokens tokens on the wide kernel: the RMSNorms (and the MoE combine into the residual) inside the products that read them — 1 both, 2 the FFN's norm, 3 the attention's norm and the combine, 0 neither (each a dispatch of its own)",
    default: "1",
  },
  together: {
    family: "graph",
    doc: "0: small steps dispatch the independent kernel pairs the graph would combine (GpuRuntime.together) one by one, each compiled alone: what combining costs in occupancy",
    default: "1",
  },
  sharedEarly: {
    family: "graph",
    doc: "small MoE steps on the wide kernel: 1 the shared experts' down product beside the routing, writing the residual's other buffer (h' = h + W_down·g_s, so that the routing and the routed gate·up still read h), the routed down product alone; 0 both down products in one dispatch, accumulating into h (each the other's tail: slower)",
    default: "1",
  },
} as const satisfies Record<string, Knob>;

export type KnobName = keyof typeof KNOBS;

/** Kernel shape overrides, for measuring alternatives; every knob unset is its default. */
export type KernelTuning = { readonly [K in KnobName]?: number };

const isKnob = (name: string): name is KnobName => Object.hasOwn(KNOBS, name);

/** `--tune` text, "name=value,name=value", as a KernelTuning; an unknown name or a value that is not a number throws. */
export function parseTuning(text: string): KernelTuning {
  const tune: Partial<Record<KnobName, number>> = {};
  for (const part of text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")) {
    const eq = part.indexOf("=");
    const name = eq < 0 ? part : part.slice(0, eq);
    const value = Number(part.slice(eq + 1));
    if (!isKnob(name)) throw new LatentError(`--tune: no knob "${name}" (knobs: ${Object.keys(KNOBS).join(", ")})`);
    if (eq < 0 || part.slice(eq + 1).trim() === "" || !Number.isFinite(value))
      throw new LatentError(`--tune: ${name} needs a number, got "${part}"`);
    tune[name] = value;
  }
  return tune;
}

/** Markers of the generated table in docs/webgpu.md. */
export const TABLE_BEGIN = "<!-- tuning-knobs:begin (generated by scripts/gen-tuning-doc.ts from core/tuning.ts) -->";
export const TABLE_END = "<!-- tuning-knobs:end -->";

/** A page with the knob table written between its markers (each must appear once, in order). */
export function withTuningTable(page: string): string {
  const b = page.indexOf(TABLE_BEGIN);
  const e = page.indexOf(TABLE_END);
  if (b < 0 || e < b || page.indexOf(TABLE_BEGIN, b + 1) >= 0 || page.indexOf(TABLE_END, e + 1) >= 0)
    throw new LatentError(`expected one "${TABLE_BEGIN}" before one "${TABLE_END}"`);
  return page.slice(0, b + TABLE_BEGIN.length) + "\n\n" + tuningTable() + "\n" + page.slice(e);
}

/** The knob table of docs/webgpu.md (markdown), in the table's order. */
export function tuningTable(): string {
  const cell = (s: string): string => s.replace(/\|/g, "\\|");
  const rows = Object.entries(KNOBS).map(
    ([name, k]) => `| \`${name}\` | ${k.family} | ${cell(k.doc)} | ${cell(k.default)} |`,
  );
  return ["| knob | family | what it changes | default |", "| --- | --- | --- | --- |", ...rows].join("\n") + "\n";
}
