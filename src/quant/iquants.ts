/**
 * Lattice ("i-quant") decoders: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
 * Each group of 8 (IQ2/IQ1) or 4 (IQ3) values is one entry of a ggml grid table (iq-grids.ts); signs come as
 * explicit bits or through ksigns_iq2xs (7 bits + parity). IQ4_NL / IQ4_XS are in iq4.ts.
 * Hot loops read the imported tables through local constants: V8 reads an imported binding on every access.
 */
import { f16At, type BlockDecoder } from "./common.js";
import { F16_TABLE } from "./f16.js";
import { IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS } from "./iq-grids.js";

// A module-local alias: V8 inlines Math.fround only when it is not read through an imported binding (10x).
const fround = Math.fround;

const IQ1S_DELTA = 0.125;

/** IQ2_XXS (66 bytes): d, then per 32 values 8 bytes: 4 grid indices, a u32 of 4×7 sign bits + 4-bit scale. */
export const decodeIQ2_XXS: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ2XXS_GRID;
  const ksigns = KSIGNS_IQ2XS;
  for (let i = 0; i < nb; i++, so += 66) {
    const d = f16At(src, so);
    for (let ib = 0; ib < 8; ib++) {
      const q = so + 2 + 8 * ib;
      const aux = src[q + 4] | (src[q + 5] << 8) | (src[q + 6] << 16) | (src[q + 7] << 24); // int32; read with >>>
      const db = fround(fround(d * (0.5 + (aux >>> 28))) * 0.25);
      for (let l = 0; l < 4; l++, oo += 8) {
        const g = 8 * src[q + l];
        const signs = ksigns[(aux >>> (7 * l)) & 127];
        for (let j = 0; j < 8; j++) {
          const v = fround(db * grid[g + j]);
          out[oo + j] = signs & (1 << j) ? -v : v;
        }
      }
    }
  }
};

/** IQ2_XS (74 bytes): d, qs u16[32] (9-bit grid index + 7-bit sign index), scales[8] (two 4-bit per 32). */
export const decodeIQ2_XS: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ2XS_GRID;
  const ksigns = KSIGNS_IQ2XS;
  for (let i = 0; i < nb; i++, so += 74) {
    const d = f16At(src, so);
    for (let ib = 0; ib < 8; ib++) {
      const sc = src[so + 66 + ib];
      const db0 = fround(fround(d * (0.5 + (sc & 15))) * 0.25);
      const db1 = fround(fround(d * (0.5 + (sc >> 4))) * 0.25);
      for (let l = 0; l < 4; l++, oo += 8) {
        const o = so + 2 + 8 * ib + 2 * l;
        const q = src[o] | (src[o + 1] << 8);
        const g = 8 * (q & 511);
        const signs = ksigns[q >> 9];
        const db = l < 2 ? db0 : db1;
        for (let j = 0; j < 8; j++) {
          const v = fround(db * grid[g + j]);
          out[oo + j] = signs & (1 << j) ? -v : v;
        }
      }
    }
  }
};

/** IQ2_S (82 bytes): d, qs[32] grid low bits, signs[32], qh[8] (2 high bits per index), scales[8]. */
export const decodeIQ2_S: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ2S_GRID;
  for (let i = 0; i < nb; i++, so += 82) {
    const d = f16At(src, so);
    for (let ib = 0; ib < 8; ib++) {
      const sc = src[so + 74 + ib];
      const qh = src[so + 66 + ib];
      const db0 = fround(fround(d * (0.5 + (sc & 15))) * 0.25);
      const db1 = fround(fround(d * (0.5 + (sc >> 4))) * 0.25);
      for (let l = 0; l < 4; l++, oo += 8) {
        const idx = src[so + 2 + 4 * ib + l] | ((qh << (8 - 2 * l)) & 0x300);
        const g = 8 * idx;
        const signs = src[so + 34 + 4 * ib + l];
        const db = l < 2 ? db0 : db1;
        for (let j = 0; j < 8; j++) {
          const v = fround(db * grid[g + j]);
          out[oo + j] = signs & (1 << j) ? -v : v;
        }
      }
    }
  }
};

/** IQ3_XXS (98 bytes): d, qs[64] grid indices (4 values each), then per 32 values a u32 of 4×7 sign bits + scale. */
export const decodeIQ3_XXS: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ3XXS_GRID;
  const ksigns = KSIGNS_IQ2XS;
  for (let i = 0; i < nb; i++, so += 98) {
    const d = f16At(src, so);
    for (let ib = 0; ib < 8; ib++) {
      const a = so + 66 + 4 * ib;
      const aux = src[a] | (src[a + 1] << 8) | (src[a + 2] << 16) | (src[a + 3] << 24); // int32; read with >>>
      const db = fround(fround(d * (0.5 + (aux >>> 28))) * 0.5);
      const q = so + 2 + 8 * ib;
      for (let l = 0; l < 4; l++, oo += 8) {
        const signs = ksigns[(aux >>> (7 * l)) & 127];
        const g1 = 4 * src[q + 2 * l];
        const g2 = 4 * src[q + 2 * l + 1];
        for (let j = 0; j < 4; j++) {
          const v1 = fround(db * grid[g1 + j]);
          const v2 = fround(db * grid[g2 + j]);
          out[oo + j] = signs & (1 << j) ? -v1 : v1;
          out[oo + j + 4] = signs & (16 << j) ? -v2 : v2;
        }
      }
    }
  }
};

/** IQ3_S (110 bytes): d, qs[64], qh[8] (9th index bit), signs[32], scales[4] (two 4-bit per 64). */
export const decodeIQ3_S: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ3S_GRID;
  for (let i = 0; i < nb; i++, so += 110) {
    const d = f16At(src, so);
    for (let ib = 0; ib < 8; ib++) {
      const sc = src[so + 106 + (ib >> 1)];
      const db = fround(d * (1 + 2 * (ib & 1 ? sc >> 4 : sc & 15)));
      const qh = src[so + 66 + ib];
      const q = so + 2 + 8 * ib;
      for (let l = 0; l < 4; l++, oo += 8) {
        const signs = src[so + 74 + 4 * ib + l];
        const g1 = 4 * (src[q + 2 * l] | ((qh << (8 - 2 * l)) & 256));
        const g2 = 4 * (src[q + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256));
        for (let j = 0; j < 4; j++) {
          const v1 = fround(db * grid[g1 + j]);
          const v2 = fround(db * grid[g2 + j]);
          out[oo + j] = signs & (1 << j) ? -v1 : v1;
          out[oo + j + 4] = signs & (16 << j) ? -v2 : v2;
        }
      }
    }
  }
};

/** IQ1_S (50 bytes): d, qs[32] grid low bits, qh u16[8] (3×3 high index bits, 3-bit scale, delta sign). */
export const decodeIQ1_S: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ1S_GRID;
  for (let i = 0; i < nb; i++, so += 50) {
    const d = f16At(src, so);
    for (let ib = 0; ib < 8; ib++) {
      const qh = src[so + 34 + 2 * ib] | (src[so + 35 + 2 * ib] << 8);
      const dl = fround(d * (2 * ((qh >> 12) & 7) + 1));
      const delta = qh & 0x8000 ? -IQ1S_DELTA : IQ1S_DELTA;
      for (let l = 0; l < 4; l++, oo += 8) {
        const g = 8 * (src[so + 2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8));
        for (let j = 0; j < 8; j++) out[oo + j] = dl * (grid[g + j] + delta);
      }
    }
  }
};

/**
 * IQ1_M (56 bytes): qs[32], qh[16] (3 high index bits + delta sign per 8 values), scales u16[4] (four 3-bit scales
 * each; the top nibbles of the four words together form the f16 super-scale).
 */
export const decodeIQ1_M: BlockDecoder = (src, so, out, oo, nb) => {
  const grid = IQ1S_GRID;
  const sc = new Uint16Array(4);
  for (let i = 0; i < nb; i++, so += 56) {
    for (let k = 0; k < 4; k++) sc[k] = src[so + 48 + 2 * k] | (src[so + 49 + 2 * k] << 8);
    const d = F16_TABLE[(sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000)];
    for (let ib = 0; ib < 8; ib++) {
      const s = sc[ib >> 1] >> (6 * (ib & 1));
      const dl1 = fround(d * (2 * (s & 7) + 1));
      const dl2 = fround(d * (2 * ((s >> 3) & 7) + 1));
      const q = so + 4 * ib;
      const h0 = src[so + 32 + 2 * ib];
      const h1 = src[so + 33 + 2 * ib];
      for (let l = 0; l < 4; l++, oo += 8) {
        const h = l < 2 ? h0 : h1;
        const hi = l & 1 ? (h << 4) & 0x700 : (h << 8) & 0x700;
        const g = 8 * (src[q + l] | hi);
        const delta = h & (l & 1 ? 0x80 : 0x08) ? -IQ1S_DELTA : IQ1S_DELTA;
        const dl = l < 2 ? dl1 : dl2;
        for (let j = 0; j < 8; j++) out[oo + j] = dl * (grid[g + j] + delta);
      }
    }
  }
};
