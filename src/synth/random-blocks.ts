/**
 * Random tensor data written straight into ggml's storage formats, without a quantization pass.
 *
 * Quantized types: the whole buffer is filled with random 32-bit words (random quant bits), then each block's scale
 * fields are overwritten so that the decoded values have the requested standard deviation and zero mean:
 * symmetric formats get a random sign on d, formats with a minimum get `min = −(centre of the levels)·scale`.
 * Block scales vary by ±30 % (a 16-entry table of f16 values per tensor) and K-quant sub-block scales are random
 * within the upper half of their range. The expected second moment of each format's levels is computed analytically
 * (`LEVEL_MS` below), so the decoded std matches the target to within a few percent.
 * F32/F16/BF16: normals from Box–Muller.
 */
import { GGMLType, typeName } from "../gguf/types.js";
import { f32ToBF16, f32ToF16 } from "../quant/f16.js";
import { UsageError } from "../util/errors.js";

/** xorshift128 generator: 4×32-bit state, fast enough to fill gigabytes. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number, stream: string) {
    // FNV-1a of the stream name mixed with the seed, expanded by splitmix32
    let h = 0x811c9dc5 ^ (seed >>> 0);
    h = Math.imul(h ^ Math.floor(seed / 4294967296), 0x01000193);
    for (let i = 0; i < stream.length; i++) h = Math.imul(h ^ stream.charCodeAt(i), 0x01000193);
    const next = (): number => {
      h = (h + 0x9e3779b9) | 0;
      let z = h;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next() | 0 || 1;
    this.b = next() | 0;
    this.c = next() | 0;
    this.d = next() | 0;
  }

  u32(): number {
    let t = this.d;
    const s = this.a;
    this.d = this.c;
    this.c = this.b;
    this.b = s;
    t ^= t << 11;
    t ^= t >>> 8;
    this.a = t ^ s ^ (s >>> 19);
    return this.a >>> 0;
  }

  /** uniform in [0, 1) */
  uniform(): number {
    return this.u32() / 4294967296;
  }

  /** Fill a word array with random bits (the hot loop: inlined state). */
  fill(words: Uint32Array): void {
    let a = this.a;
    let b = this.b;
    let c = this.c;
    let d = this.d;
    for (let i = 0; i < words.length; i++) {
      let t = d;
      d = c;
      c = b;
      b = a;
      t ^= t << 11;
      t ^= t >>> 8;
      a = t ^ b ^ (b >>> 19); // int32 arithmetic: `>>> 0` here would box every value as a heap number
      words[i] = a;
    }
    this.a = a;
    this.b = b;
    this.c = c;
    this.d = d;
  }

  /** Fill with N(0, std²) values via Box–Muller. */
  normals(out: Float32Array, std: number, mean = 0): void {
    for (let i = 0; i < out.length; i += 2) {
      const u1 = (this.u32() + 1) / 4294967297;
      const u2 = this.uniform();
      const r = Math.sqrt(-2 * Math.log(u1)) * std;
      out[i] = mean + r * Math.cos(2 * Math.PI * u2);
      if (i + 1 < out.length) out[i + 1] = mean + r * Math.sin(2 * Math.PI * u2);
    }
  }
}

const IQ4NL_VALUES = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
const IQ4NL_MS = IQ4NL_VALUES.reduce((s, v) => s + v * v, 0) / 16;
/** mean of k² for k uniform in [lo, hi] */
const meanSq = (lo: number, hi: number): number => {
  let s = 0;
  for (let k = lo; k <= hi; k++) s += k * k;
  return s / (hi - lo + 1);
};

/** E[decoded²] / d² for each format as this file fills it (levels × sub-block scales). */
const LEVEL_MS: ReadonlyMap<GGMLType, number> = new Map([
  [GGMLType.Q8_0, meanSq(-128, 127)],
  [GGMLType.Q4_0, meanSq(-8, 7)],
  [GGMLType.Q5_0, meanSq(-16, 15)],
  [GGMLType.Q4_1, meanSq(0, 15) - 7.5 * 7.5],
  [GGMLType.Q5_1, meanSq(0, 31) - 15.5 * 15.5],
  [GGMLType.IQ4_NL, IQ4NL_MS],
  [GGMLType.IQ4_XS, IQ4NL_MS * meanSq(16, 31)],
  [GGMLType.Q2_K, (meanSq(0, 3) - 1.5 * 1.5) * meanSq(8, 15)],
  [GGMLType.Q3_K, meanSq(-4, 3) * meanSq(16, 31)],
  [GGMLType.Q4_K, (meanSq(0, 15) - 7.5 * 7.5) * meanSq(32, 63)],
  [GGMLType.Q5_K, (meanSq(0, 31) - 15.5 * 15.5) * meanSq(32, 63)],
  [GGMLType.Q6_K, meanSq(-32, 31) * meanSq(64, 127)],
]);

/** Types `fillRandom` can write. */
export const RANDOM_TYPES: readonly GGMLType[] = [GGMLType.F32, GGMLType.F16, GGMLType.BF16, ...LEVEL_MS.keys()];

/** Block scale jitter: 16 factors in [0.7, 1.3] with mean square 1. */
const JITTER = (() => {
  const f = Array.from({ length: 16 }, (_, k) => 0.7 + 0.04 * k);
  const rms = Math.sqrt(f.reduce((s, v) => s + v * v, 0) / 16);
  return f.map((v) => v / rms);
})();

/** f16 bits of `d·jitter_k·mul` for the 16 jitter steps. */
function f16Table(d: number, mul = 1): Uint16Array {
  return Uint16Array.from(JITTER, (j) => f32ToF16(d * j * mul));
}

function put16(u8: Uint8Array, o: number, h: number): void {
  u8[o] = h & 0xff;
  u8[o + 1] = h >>> 8;
}

/** Pack 8 (scale, min) 6-bit pairs as Q4_K/Q5_K's 12 scale bytes at offset o. */
function packK4(u8: Uint8Array, o: number, sc: Uint8Array, m: Uint8Array): void {
  for (let j = 0; j < 4; j++) {
    u8[o + j] = sc[j] | ((sc[j + 4] >> 4) << 6);
    u8[o + j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
    u8[o + j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
  }
}

/** Scale tables of one tensor (f16 bits, 16 jitter steps) and scratch for sub-block scales. */
interface Tables {
  readonly d: Uint16Array;
  readonly m: Uint16Array;
  readonly sc: Uint8Array;
  readonly mn: Uint8Array;
}

const BLOCK_BYTES: ReadonlyMap<GGMLType, number> = new Map([
  [GGMLType.Q8_0, 34],
  [GGMLType.Q4_0, 18],
  [GGMLType.Q5_0, 22],
  [GGMLType.Q4_1, 20],
  [GGMLType.Q5_1, 24],
  [GGMLType.IQ4_NL, 18],
  [GGMLType.IQ4_XS, 136],
  [GGMLType.Q2_K, 84],
  [GGMLType.Q3_K, 110],
  [GGMLType.Q4_K, 144],
  [GGMLType.Q5_K, 176],
  [GGMLType.Q6_K, 210],
]);

/** Multiplier of d that gives the second scale field (m / dmin) of the formats that have one. */
function minMultiplier(type: GGMLType): number {
  switch (type) {
    case GGMLType.Q4_1:
      return -7.5;
    case GGMLType.Q5_1:
      return -15.5;
    case GGMLType.Q2_K:
      return 1.5;
    case GGMLType.Q4_K:
      return 8;
    case GGMLType.Q5_K:
      return 16;
    default:
      return 0;
  }
}

/**
 * Fill `out` (exactly the bytes of `nElements` values of `type`, a multiple of the block size) with random data whose
 * decoded values have mean ≈ 0 and std ≈ `std`. `out` must start at a 4-byte aligned offset of its buffer.
 * Works in chunks of 4096 blocks so that the hot loops get optimized after the first few chunks.
 */
export function fillRandom(type: GGMLType, out: Uint8Array, nElements: number, std: number, rng: Rng): void {
  if (type === GGMLType.F32 || type === GGMLType.F16 || type === GGMLType.BF16) {
    fillFloat(type, out, nElements, std, 0, rng);
    return;
  }
  const ms = LEVEL_MS.get(type);
  const bs = BLOCK_BYTES.get(type);
  if (ms === undefined || bs === undefined)
    throw new UsageError(
      `synth cannot write random ${typeName(type)} blocks (supported: ${RANDOM_TYPES.map(typeName).join(", ")})`,
    );
  if (out.byteOffset % 4 !== 0) throw new Error("fillRandom: output must be 4-byte aligned");
  if (out.length % bs !== 0)
    throw new Error(`fillRandom: ${out.length} bytes is not a whole number of ${typeName(type)} blocks`);
  const d = std / Math.sqrt(ms);
  const t: Tables = {
    d: f16Table(d),
    m: f16Table(d, minMultiplier(type)),
    sc: new Uint8Array(16),
    mn: new Uint8Array(8),
  };
  const chunk = bs * 4096; // a multiple of 4
  for (let start = 0; start < out.length; start += chunk) {
    const end = Math.min(out.length, start + chunk);
    rng.fill(new Uint32Array(out.buffer, out.byteOffset + start, (end - start) >>> 2));
    for (let i = start + ((end - start) & ~3); i < end; i++) out[i] = rng.u32() & 0xff;
    patchBlocks(type, out, start, end, t);
  }
}

/** Overwrite the scale fields of the blocks in bytes [from, to) (random bits everywhere else stay). */
function patchBlocks(type: GGMLType, u8: Uint8Array, from: number, to: number, t: Tables): void {
  const dt = t.d;
  const mt = t.m;
  const sc = t.sc;
  const mn = t.mn;
  switch (type) {
    case GGMLType.Q8_0:
    case GGMLType.Q4_0:
    case GGMLType.IQ4_NL: {
      const bs = type === GGMLType.Q8_0 ? 34 : 18;
      // the random byte after d picks the jitter step and sign; it stays random as a quant byte
      for (let o = from; o < to; o += bs) put16(u8, o, dt[u8[o + 2] & 15] | ((u8[o + 2] & 16) << 11));
      return;
    }
    case GGMLType.Q5_0:
      for (let o = from; o < to; o += 22) put16(u8, o, dt[u8[o + 2] & 15] | ((u8[o + 2] & 16) << 11));
      return;
    case GGMLType.Q4_1:
    case GGMLType.Q5_1: {
      const bs = type === GGMLType.Q4_1 ? 20 : 24;
      for (let o = from; o < to; o += bs) {
        const k = u8[o + 4] & 15;
        put16(u8, o, dt[k]);
        put16(u8, o + 2, mt[k]);
      }
      return;
    }
    case GGMLType.IQ4_XS:
      // d, scales_h (u16), scales_l[4], qs[128]; ls − 32 = ±(16..31)
      for (let o = from; o < to; o += 136) {
        put16(u8, o, dt[u8[o + 8] & 15]);
        let h = 0;
        for (let ib = 0; ib < 8; ib++) {
          const r = u8[o + 8 + ib * 16 + 1];
          const ls = r & 16 ? 32 + 16 + (r & 15) : 32 - 16 - (r & 15);
          sc[ib] = ls;
          h |= ((ls >> 4) & 3) << (2 * ib);
        }
        put16(u8, o + 2, h);
        for (let j = 0; j < 4; j++) u8[o + 4 + j] = (sc[2 * j] & 15) | ((sc[2 * j + 1] & 15) << 4);
      }
      return;
    case GGMLType.Q2_K: {
      // scales[16] (low nibble scale, high nibble min), qs[64], d, dmin; min = scale and dmin = 1.5·d centre the levels
      for (let o = from; o < to; o += 84) {
        const r = u8[o + 16];
        const k = r & 15;
        const neg = (r & 16) << 11;
        for (let j = 0; j < 16; j++) {
          const s = 8 + (u8[o + j] & 7);
          u8[o + j] = s | (s << 4);
        }
        put16(u8, o + 80, dt[k] | neg);
        put16(u8, o + 82, mt[k] | neg);
      }
      return;
    }
    case GGMLType.Q3_K:
      // hmask[32], qs[64], scales[12], d; 6-bit scales u = 32 ± (16..31)
      for (let o = from; o < to; o += 110) {
        for (let j = 0; j < 16; j++) {
          const r = u8[o + 32 + j];
          sc[j] = r & 16 ? 48 + (r & 15) : 16 - (r & 15);
        }
        const s = o + 96;
        for (let j = 0; j < 8; j++) u8[s + j] = (sc[j] & 15) | ((sc[j + 8] & 15) << 4);
        for (let i = 0; i < 4; i++) {
          u8[s + 8 + i] =
            ((sc[i] >> 4) & 3) |
            (((sc[i + 4] >> 4) & 3) << 2) |
            (((sc[i + 8] >> 4) & 3) << 4) |
            (((sc[i + 12] >> 4) & 3) << 6);
        }
        put16(u8, o + 108, dt[u8[o + 33] & 15]);
      }
      return;
    case GGMLType.Q4_K:
    case GGMLType.Q5_K: {
      // d, dmin, scales[12], (qh[32]), qs[128]; dmin = c·d and min ≈ centre·scale / c centre the levels
      const q5 = type === GGMLType.Q5_K;
      const bs = q5 ? 176 : 144;
      const centre = q5 ? 15.5 : 7.5;
      const c = q5 ? 16 : 8;
      for (let o = from; o < to; o += bs) {
        const r = u8[o + 16];
        const k = r & 15;
        const neg = (r & 16) << 11;
        for (let j = 0; j < 8; j++) {
          const s = 32 + (u8[o + 4 + j] & 31);
          sc[j] = s;
          mn[j] = Math.round((centre * s) / c);
        }
        packK4(u8, o + 4, sc, mn);
        put16(u8, o, dt[k] | neg);
        put16(u8, o + 2, mt[k] | neg);
      }
      return;
    }
    case GGMLType.Q6_K:
      // ql[128], qh[64], scales[16] int8, d; scales ±(64..127)
      for (let o = from; o < to; o += 210) {
        for (let j = 0; j < 16; j++) {
          const r = u8[o + 192 + j];
          u8[o + 192 + j] = r & 64 ? 64 + (r & 63) : (256 - 64 - (r & 63)) & 0xff;
        }
        put16(u8, o + 208, dt[u8[o + 1] & 15]);
      }
      return;
    default:
      throw new UsageError(`synth cannot write random ${typeName(type)} blocks`);
  }
}

/** F32/F16/BF16 normals N(mean, std²). */
export function fillFloat(
  type: GGMLType,
  out: Uint8Array,
  nElements: number,
  std: number,
  mean: number,
  rng: Rng,
): void {
  const chunk = new Float32Array(Math.min(nElements, 1 << 16));
  let done = 0;
  if (type === GGMLType.F32) {
    if (out.byteOffset % 4 !== 0) throw new Error("fillFloat: output must be 4-byte aligned");
    rng.normals(new Float32Array(out.buffer, out.byteOffset, nElements), std, mean);
    return;
  }
  const conv = type === GGMLType.F16 ? f32ToF16 : f32ToBF16;
  while (done < nElements) {
    const n = Math.min(chunk.length, nElements - done);
    const view = chunk.subarray(0, n);
    rng.normals(view, std, mean);
    for (let i = 0; i < n; i++) put16(out, 2 * (done + i), conv(view[i]));
    done += n;
  }
}
