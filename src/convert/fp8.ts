/**
 * FP8 block-scaled weights as DeepSeek-V3/R1, Kimi-K2 and GLM-5 publish them: `W.weight` in F8_E4M3 and
 * `W.weight_scale_inv` in F32 of shape [ceil(rows/128), ceil(cols/128)] (leading dimensions, e.g. experts, shared
 * by both); the real value of element (r, c) is fp8(r, c) · scale_inv[r/128][c/128] (DeepSeek-V3
 * inference/kernel.py `weight_dequant`: `y = x * s` per 128×128 tile, the last tiles partial).
 */

/** E4M3 "fn" (no infinities, S.1111.111 = NaN, max 448), as torch.float8_e4m3fn. */
function e4m3(byte: number): number {
  const sign = byte & 0x80 ? -1 : 1;
  const exp = (byte >> 3) & 0xf;
  const man = byte & 0x7;
  if (exp === 0xf && man === 0x7) return NaN;
  if (exp === 0) return sign * man * 2 ** -9; // subnormal: man/8 · 2^(1-7)
  return sign * (1 + man / 8) * 2 ** (exp - 7);
}

/** E5M2 (IEEE-like: exponent 31 = Inf/NaN), as torch.float8_e5m2. */
function e5m2(byte: number): number {
  const sign = byte & 0x80 ? -1 : 1;
  const exp = (byte >> 2) & 0x1f;
  const man = byte & 0x3;
  if (exp === 0x1f) return man === 0 ? sign * Infinity : NaN;
  if (exp === 0) return sign * man * 2 ** -16; // man/4 · 2^(1-15)
  return sign * (1 + man / 4) * 2 ** (exp - 15);
}

export const E4M3_TABLE: Float32Array = Float32Array.from({ length: 256 }, (_, b) => e4m3(b));
export const E5M2_TABLE: Float32Array = Float32Array.from({ length: 256 }, (_, b) => e5m2(b));
export const FP8_DTYPES: ReadonlySet<string> = new Set(["F8_E4M3", "F8_E5M2"]);
export const E4M3_MAX = 448;
export const FP8_BLOCK = 128;

/** The decoding table of an FP8 safetensors dtype. */
export function fp8Table(dtype: string): Float32Array | undefined {
  return dtype === "F8_E4M3" ? E4M3_TABLE : dtype === "F8_E5M2" ? E5M2_TABLE : undefined;
}

/** The scale grid a weight of `shape` needs with square blocks of `block`: leading dims kept, last two divided (rounded up). */
export function scaleGridShape(shape: readonly number[], block = FP8_BLOCK): number[] {
  if (shape.length < 2) return [1];
  const lead = shape.slice(0, -2);
  return [...lead, Math.ceil(shape[shape.length - 2] / block), Math.ceil(shape[shape.length - 1] / block)];
}

/**
 * fp8 bytes (row-major `shape`) times the block scales. `scale` is either one value (per-tensor scale) or the grid
 * of scaleGridShape(shape, block).
 */
export function dequantizeFp8(
  bytes: Uint8Array,
  dtype: string,
  shape: readonly number[],
  scale: Float32Array,
  block = FP8_BLOCK,
): Float32Array {
  const table = fp8Table(dtype);
  if (table === undefined) throw new RangeError(`not an FP8 dtype: ${dtype}`);
  const out = new Float32Array(bytes.length);
  if (scale.length === 1) {
    const s = scale[0];
    for (let i = 0; i < bytes.length; i++) out[i] = table[bytes[i]] * s;
    return out;
  }
  const rows = shape.length >= 2 ? shape[shape.length - 2] : 1;
  const cols = shape[shape.length - 1] ?? 1;
  const gr = Math.ceil(rows / block);
  const gc = Math.ceil(cols / block);
  const slices = bytes.length / (rows * cols);
  if (scale.length !== slices * gr * gc)
    throw new RangeError(
      `scale has ${scale.length} values, a [${shape.join(", ")}] weight in ${block}×${block} blocks needs ${slices * gr * gc}`,
    );
  for (let s = 0; s < slices; s++) {
    for (let r = 0; r < rows; r++) {
      const srow = (s * gr + Math.floor(r / block)) * gc;
      const base = (s * rows + r) * cols;
      for (let c = 0; c < cols; c++) out[base + c] = table[bytes[base + c]] * scale[srow + Math.floor(c / block)];
    }
  }
  return out;
}

/** Nearest E4M3 byte of x (round half to even on the mantissa grid, saturating at ±448). */
export function f32ToE4M3(x: number): number {
  if (Number.isNaN(x)) return 0x7f;
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.min(Math.abs(x), E4M3_MAX);
  // candidates are monotone in the byte value for the positive half: binary search the table
  let lo = 0;
  let hi = 0x7e;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (E4M3_TABLE[mid] <= a) lo = mid;
    else hi = mid - 1;
  }
  let best = lo;
  if (lo < 0x7e) {
    const dl = a - E4M3_TABLE[lo];
    const dh = E4M3_TABLE[lo + 1] - a;
    if (dh < dl || (dh === dl && (lo & 1) === 1)) best = lo + 1;
  }
  return sign | best;
}

/** Block-scaled E4M3 encoding of row-major `shape` values (scale = block amax / 448, as DeepSeek's weight_quant). */
export function quantizeFp8Blocks(
  values: Float32Array,
  shape: readonly number[],
  block = FP8_BLOCK,
): { bytes: Uint8Array; scale: Float32Array; scaleShape: number[] } {
  const rows = shape.length >= 2 ? shape[shape.length - 2] : 1;
  const cols = shape[shape.length - 1] ?? 1;
  const scaleShape = scaleGridShape(shape.length >= 2 ? shape : [1, cols], block);
  const gr = Math.ceil(rows / block);
  const gc = Math.ceil(cols / block);
  const slices = values.length / (rows * cols);
  const scale = new Float32Array(slices * gr * gc);
  const bytes = new Uint8Array(values.length);
  for (let s = 0; s < slices; s++) {
    for (let br = 0; br < gr; br++) {
      for (let bc = 0; bc < gc; bc++) {
        const r1 = Math.min(rows, (br + 1) * block);
        const c1 = Math.min(cols, (bc + 1) * block);
        let amax = 0;
        for (let r = br * block; r < r1; r++)
          for (let c = bc * block; c < c1; c++) amax = Math.max(amax, Math.abs(values[(s * rows + r) * cols + c]));
        const d = Math.fround(amax === 0 ? 1 : amax / E4M3_MAX);
        scale[(s * gr + br) * gc + bc] = d;
        for (let r = br * block; r < r1; r++)
          for (let c = bc * block; c < c1; c++) {
            const i = (s * rows + r) * cols + c;
            bytes[i] = f32ToE4M3(values[i] / d);
          }
      }
    }
  }
  return { bytes, scale, scaleShape };
}
