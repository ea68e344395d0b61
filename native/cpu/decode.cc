// Products of fewer than four tokens (decode): fused kernels that read each weight once, four rows at a time,
// with the next rows' bytes asked for ahead. Same integers and f32 operations as kernels.as's, hence its bits.
#include "kernels-internal.h"

namespace latent {
namespace detail {

#if LATENT_AVX512

namespace {

// ---------------------------------------------------------------- Q4_K, one token: fused, u8 × s8 in two pieces

// A single token's product has no rows to share an unpacked row with, and folding the sub-block scales into i16
// weights costs a multiply per 32 values beside the dot's own. Here the nibbles stay u8 and meet the activations in
// two i8 pieces, a = 128·hi + lo (lo in 0..127, hi in −64..63: |a| ≤ 8191), through vpdpbusd (64 u8 × s8 products an
// instruction); each sub-block's sum is taken exactly across lanes, then scaled in i32. The same integers as the
// unpacked kernels, hence the same result bits.

/**
 * The token's activations as pieces for fusedQ4K41, 512 bytes per block: for z = 0..3, [lo, hi] of 64 bytes each
 * holding the values of sub-blocks (A, B) = (0, 2), (1, 3), (4, 6), (5, 7) — the order in which a block's nibbles
 * come out of its two 64-byte halves (low nibbles of bytes 0–63: sub-blocks 0 and 2; high: 1 and 3; then 4–7).
 */
void splitQ4K(const int16_t* a, int nb, int8_t* out) {
  static const int SUB_A[4] = {0, 1, 4, 5};
  static const int SUB_B[4] = {2, 3, 6, 7};
  const __m512i m7 = _mm512_set1_epi16(127);
  for (int b = 0; b < nb; b++)
    for (int z = 0; z < 4; z++) {
      int8_t* o = out + size_t(b) * 512 + z * 128;
      for (int h = 0; h < 2; h++) {
        const __m512i x = _mm512_loadu_si512(a + size_t(b) * 256 + (h == 0 ? SUB_A[z] : SUB_B[z]) * 32);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * h), _mm512_cvtepi16_epi8(_mm512_and_si512(x, m7)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 + 32 * h), _mm512_cvtepi16_epi8(_mm512_srai_epi16(x, 7)));
      }
    }
}

// sub-block sums come out in the order 0, 1, 4, 5, 2, 3, 6, 7: the scales' bytes picked in that order
alignas(16) const int8_t SCALE_ORDER[16] = {0, 1, 4, 5, 2, 3, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1};


/** out[r] for rows row0 + r·rowBytes, r < 4 (rows past nr read row 0 again; their results are dropped) */
void fusedQ4K41(const uint8_t* row0, size_t rowBytes, int nr, const int8_t* pieces, const float* ad, const int32_t* as,
                int nb, float* out) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m128i order = _mm_load_si128(reinterpret_cast<const __m128i*>(SCALE_ORDER));
  const uint8_t* rows[4];
  for (int r = 0; r < 4; r++) rows[r] = row0 + (r < nr ? r : 0) * rowBytes;
  __m128 acc = _mm_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const int8_t* A = pieces + size_t(b) * 512;
    // the four rows are contiguous: ask for the group FUSED_AHEAD groups on, a block's share (576 bytes) a block
    for (int o = 0; o < 576; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(row0 + 4 * rowBytes * FUSED_AHEAD + size_t(b) * 576 + o), Q4_HINT);
    const __m256i AS = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(as + size_t(b) * 8));
    __m256i P[4], Q[4];
    alignas(16) uint32_t dd[4];
    for (int r = 0; r < 4; r++) {
      const uint8_t* p = rows[r] + size_t(b) * 144;
      dd[r] = load32(p);
      const __m512i h0 = _mm512_loadu_si512(p + 16), h1 = _mm512_loadu_si512(p + 80);
      const __m512i z[4] = {_mm512_and_si512(h0, m4), _mm512_and_si512(_mm512_srli_epi16(h0, 4), m4), _mm512_and_si512(h1, m4),
                            _mm512_and_si512(_mm512_srli_epi16(h1, 4), m4)};
      __m512i t[4];
      for (int k = 0; k < 4; k++) {
        const __m512i lo = dotBytes(z[k], _mm512_loadu_si512(A + 128 * k));
        const __m512i hi = dotBytes(z[k], _mm512_loadu_si512(A + 128 * k + 64));
        t[k] = _mm512_add_epi32(_mm512_slli_epi32(hi, 7), lo);
      }
      // lanes 0–7 of each t: sub-block A's 32 products in 8 lanes, lanes 8–15: B's
      const __m512i w = quads(t[0], t[1], t[2], t[3]);
      const __m256i S = _mm512_castsi512_si256(foldQuarters(w, w));
      const __m128i sm = scalesMinsQ4K(p);
      P[r] = _mm256_mullo_epi32(S, _mm256_cvtepu8_epi32(_mm_shuffle_epi8(sm, order)));
      Q[r] = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)), AS);
    }
    const __m256i hI = _mm256_hadd_epi32(_mm256_hadd_epi32(P[0], P[1]), _mm256_hadd_epi32(P[2], P[3]));
    const __m256i hM = _mm256_hadd_epi32(_mm256_hadd_epi32(Q[0], Q[1]), _mm256_hadd_epi32(Q[2], Q[3]));
    const __m128 I = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(hI), _mm256_extracti128_si256(hI, 1)));
    const __m128 M = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(hM), _mm256_extracti128_si256(hM, 1)));
    // d and dmin of the four rows: kernels.as's f16, lane by lane ([d0, dm0, d1, dm1, …] → d, dm)
    const __m256i h = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(dd)));
    const __m256 mag = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13)),
                                     _mm256_set1_ps(5.192296858534828e33f));
    const __m256 f = _mm256_or_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16)));
    const __m256 fp = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    const __m128 dw = _mm256_castps256_ps128(fp), dm = _mm256_extractf128_ps(fp, 1);
    const __m128 da = _mm_set1_ps(ad[b]);
    acc = _mm_add_ps(acc, _mm_sub_ps(_mm_mul_ps(I, _mm_mul_ps(dw, da)), _mm_mul_ps(M, _mm_mul_ps(dm, da))));
  }
  _mm_storeu_ps(out, acc);
}

// ---------------------------------------------------------------- Q6_K, one token: fused, u8 × s8 in two pieces

// As fusedQ4K41: the 6-bit values q (0..63, before their −32) stay u8 and meet the activations in two i8 pieces;
// a 128-bit quarter of a dot's result is one group of 16 values (one i8 scale), so four dots' quarters give the
// block's sixteen group sums at once. Σ (q − 32)·a = Σ q·a − 32·Σ a per group (the token's group sums of a, taken
// once per product). The block's total can pass 2³¹ (16 · 16·32·8191 · 128): it is summed in i64.

/** the token's pieces in value order ([lo, hi] of 64 bytes for values 64z … 64z + 63) and 32·Σa per group of 16 */
void splitQ6K(const int16_t* a, int nb, int8_t* pieces, int32_t* sum32) {
  const __m512i m7 = _mm512_set1_epi16(127);
  for (int b = 0; b < nb; b++) {
    for (int z = 0; z < 4; z++) {
      int8_t* o = pieces + size_t(b) * 512 + z * 128;
      for (int h = 0; h < 2; h++) {
        const __m512i x = _mm512_loadu_si512(a + size_t(b) * 256 + z * 64 + h * 32);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * h), _mm512_cvtepi16_epi8(_mm512_and_si512(x, m7)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 + 32 * h), _mm512_cvtepi16_epi8(_mm512_srai_epi16(x, 7)));
      }
    }
    // lane 4q + i: group 4i + q (the order of quads over the four dots)
    for (int i = 0; i < 4; i++)
      for (int q = 0; q < 4; q++) {
        int32_t t = 0;
        for (int v = 0; v < 16; v++) t += a[size_t(b) * 256 + (4 * i + q) * 16 + v];
        sum32[size_t(b) * 16 + 4 * q + i] = 32 * t;
      }
  }
}

// lane 4q + i takes scale 4i + q
alignas(16) const int8_t GROUP_ORDER[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/** out[r] for Q6_K rows row0 + r·rowBytes, r < 4 (rows past nr read row 0 again; dropped) */
void fusedQ6K41(const uint8_t* row0, size_t rowBytes, int nr, const int8_t* pieces, const int32_t* sum32, const float* ad,
                int nb, float* out) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i sh02 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i sh46 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  const __m128i order = _mm_load_si128(reinterpret_cast<const __m128i*>(GROUP_ORDER));
  const uint8_t* rows[4];
  for (int r = 0; r < 4; r++) rows[r] = row0 + (r < nr ? r : 0) * rowBytes;
  __m128 acc = _mm_setzero_ps();
  for (int b = 0; b < nb; b++) {
    for (int o = 0; o < 840; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(row0 + 4 * rowBytes * Q6_AHEAD + size_t(b) * 840 + o), Q6_HINT);
    const int8_t* A = pieces + size_t(b) * 512;
    const __m512i S32 = _mm512_loadu_si512(sum32 + size_t(b) * 16);
    __m512i tot[4];
    alignas(16) uint16_t dh[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int r = 0; r < 4; r++) {
      const uint8_t* p = rows[r] + size_t(b) * 210;
      dh[r] = uint16_t(load16(p + 208));
      const __m512i QL0 = _mm512_loadu_si512(p), QL1 = _mm512_loadu_si512(p + 64);
      const __m512i H0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128)));
      const __m512i H1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 160)));
      // values 64z … 64z + 63: a nibble of ql and two bits of qh (byte fields cut with 16-bit shifts and byte masks)
      const __m512i z[4] = {
          _mm512_or_si512(_mm512_and_si512(QL0, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H0, sh02), m3), 4)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(QL0, 4), m4),
                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H0, sh46), m3), 4)),
          _mm512_or_si512(_mm512_and_si512(QL1, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H1, sh02), m3), 4)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(QL1, 4), m4),
                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H1, sh46), m3), 4)),
      };
      __m512i t[4];
      for (int k = 0; k < 4; k++) {
        const __m512i lo = dotBytes(z[k], _mm512_loadu_si512(A + 128 * k));
        const __m512i hi = dotBytes(z[k], _mm512_loadu_si512(A + 128 * k + 64));
        t[k] = _mm512_add_epi32(_mm512_slli_epi32(hi, 7), lo);
      }
      // group sums of (q − 32)·a, times their scales: |each| ≤ 16·32·8191·128 < 2³¹
      const __m512i G = _mm512_sub_epi32(quads(t[0], t[1], t[2], t[3]), S32);
      const __m512i sc = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)), order));
      const __m512i S = _mm512_mullo_epi32(G, sc);
      tot[r] = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(S)), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(S, 1)));
    }
    // the rows' totals in i64: pairs within 128-bit lanes, then quarters
    const __m512i u01 = _mm512_add_epi64(_mm512_unpacklo_epi64(tot[0], tot[1]), _mm512_unpackhi_epi64(tot[0], tot[1]));
    const __m512i u23 = _mm512_add_epi64(_mm512_unpacklo_epi64(tot[2], tot[3]), _mm512_unpackhi_epi64(tot[2], tot[3]));
    const __m512i v = _mm512_add_epi64(_mm512_shuffle_i64x2(u01, u23, 0x88), _mm512_shuffle_i64x2(u01, u23, 0xdd));
    const __m512i x = _mm512_add_epi64(_mm512_shuffle_i64x2(v, v, 0x88), _mm512_shuffle_i64x2(v, v, 0xdd));
    const __m128 I = _mm256_cvtepi64_ps(_mm512_castsi512_si256(x));
    const __m128i h = _mm_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m128 mag = _mm_mul_ps(_mm_castsi128_ps(_mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x7fff)), 13)), _mm_set1_ps(5.192296858534828e33f));
    const __m128 dw = _mm_or_ps(mag, _mm_castsi128_ps(_mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x8000)), 16)));
    const __m128 da = _mm_set1_ps(ad[b]);
    const __m128 zero = _mm_setzero_ps();
    // kernels.as blockTerm with no mins: <f32>i · (dw·da) − 0 · (0·da)
    acc = _mm_add_ps(acc, _mm_sub_ps(_mm_mul_ps(I, _mm_mul_ps(dw, da)), _mm_mul_ps(zero, _mm_mul_ps(zero, da))));
  }
  _mm_storeu_ps(out, acc);
}

// ---------------------------------------------------------------- 32 class, one token: fused

/** a Q8_0 or Q5_0 block's 32 values as i16 (Q5_0: the fifth bits from qh, minus 16) */
template <int Type>
inline __m512i values32(const uint8_t* p) {
  if (Type == Q8_0) return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
  const __m128i m4 = _mm_set1_epi8(15);
  const __mmask32 qh = load32(p + 2);
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6));
  const __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m4)), _mm_and_si128(_mm_srli_epi16(qs, 4), m4), 1);
  const __m256i c16 = _mm256_set1_epi8(16);
  return _mm512_cvtepi8_epi16(_mm256_sub_epi8(_mm256_mask_add_epi8(nib, qh, nib, c16), c16));
}

/**
 * out[r] for rows row0 + r·rowBytes, r < 4 (rows past nr read row 0; dropped), one token: sixteen blocks' exact sums
 * of a row at once (vpmaddwd, then across lanes), their f16 scales gathered, and the terms added in block order.
 */
template <int Type>
void fused32x41(const uint8_t* row0, size_t rowBytes, int nr, const uint8_t* aq, const float* ad, int nb, float* out) {
  constexpr int BB = Type == Q8_0 ? 34 : 22;
  const uint8_t* rows[4];
  for (int r = 0; r < 4; r++) rows[r] = row0 + (r < nr ? r : 0) * rowBytes;
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(BB));
  float acc[4] = {0, 0, 0, 0};
  alignas(64) float terms[4][16];
  if (nb <= 4) {
    // short rows (a head's 128 columns): the four rows' blocks share one reduction, lane 4r + k
    __m512i v[16];
    alignas(64) int32_t off[16];
    for (int r = 0; r < 4; r++)
      for (int k = 0; k < 4; k++) {
        off[4 * r + k] = int32_t((rows[r] - row0) + k * BB);
        v[4 * r + k] = k < nb ? _mm512_madd_epi16(values32<Type>(rows[r] + k * BB), _mm512_loadu_si512(aq + size_t(k) * 64)) : _mm512_setzero_si512();
      }
    const __mmask16 m = __mmask16(((1u << nb) - 1) * 0x1111u);
    const __m512 I = sums16<false>(v);
    const __m512i h = _mm512_and_si512(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, _mm512_load_si512(off), row0, 1), _mm512_set1_epi32(0xffff));
    const __m512 mag = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), 13)),
                                     _mm512_set1_ps(5.192296858534828e33f));
    const __m512 dw = _mm512_or_ps(mag, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16)));
    const __m512 da = _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(__mmask8((1u << nb) - 1), ad));
    _mm512_store_ps(terms[0], _mm512_mul_ps(I, _mm512_mul_ps(dw, da)));
    for (int k = 0; k < nb; k++)
      for (int r = 0; r < 4; r++) acc[r] += terms[0][4 * r + k];
    for (int r = 0; r < 4; r++) out[r] = acc[r];
    return;
  }
  for (int b0 = 0; b0 < nb; b0 += 16) {
    const int cnt = nb - b0 < 16 ? nb - b0 : 16;
    const __mmask16 m = __mmask16((1u << cnt) - 1);
    const __m512 da = _mm512_maskz_loadu_ps(m, ad + b0);
    for (int r = 0; r < 4; r++) {
      const uint8_t* p = rows[r] + size_t(b0) * BB;
      for (int o = 0; o < 16 * BB; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + 4 * rowBytes * FUSED_AHEAD + o), _MM_HINT_T1);
      __m512i v[16];
      for (int k = 0; k < 16; k++)
        v[k] = k < cnt ? _mm512_madd_epi16(values32<Type>(p + k * BB), _mm512_loadu_si512(aq + size_t(b0 + k) * 64)) : _mm512_setzero_si512();
      const __m512 I = sums16<false>(v);
      const __m512i h = _mm512_and_si512(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, offsets, p, 1), _mm512_set1_epi32(0xffff));
      // kernels.as's f16, lane by lane
      const __m512 mag = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), 13)),
                                       _mm512_set1_ps(5.192296858534828e33f));
      const __m512 dw = _mm512_or_ps(mag, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16)));
      _mm512_store_ps(terms[r], _mm512_mul_ps(I, _mm512_mul_ps(dw, da)));
    }
    for (int k = 0; k < cnt; k++)
      for (int r = 0; r < 4; r++) acc[r] += terms[r][k];
  }
  for (int r = 0; r < 4; r++) out[r] = acc[r];
}

}  // namespace

void q4kPieces(const int16_t* a, int nb, int8_t* out) { splitQ4K(a, nb, out); }
void q4kRows(const uint8_t* row0, size_t rowBytes, int nr, const int8_t* pieces, const float* ad, const int32_t* as, int nb,
             float* out) {
  fusedQ4K41(row0, rowBytes, nr, pieces, ad, as, nb, out);
}
void q6kPieces(const int16_t* a, int nb, int8_t* pieces, int32_t* sum32) { splitQ6K(a, nb, pieces, sum32); }
void q6kRows(const uint8_t* row0, size_t rowBytes, int nr, const int8_t* pieces, const int32_t* sum32, const float* ad, int nb,
             float* out) {
  fusedQ6K41(row0, rowBytes, nr, pieces, sum32, ad, nb, out);
}
void c32Rows(int type, const uint8_t* row0, size_t rowBytes, int nr, const uint8_t* aq, const float* ad, int nb, float* out) {
  if (type == Q8_0) fused32x41<Q8_0>(row0, rowBytes, nr, aq, ad, nb, out);
  else fused32x41<Q5_0>(row0, rowBytes, nr, aq, ad, nb, out);
}

#endif  // LATENT_AVX512

}  // namespace detail
}  // namespace latent
