// Products of four tokens and more (prompt chunks, batched decode): four unpacked rows × four tokens in sixteen
// registers, and the tails (four rows × one token). Per block the integer sums are reduced exactly and the block's f32
// term is added in block order, as kernels.as's kernels do.
#include "kernels-internal.h"

namespace latent {
namespace detail {

#if LATENT_AVX512

namespace {

// ---------------------------------------------------------------- K class: four rows × four tokens, four rows × one


// lane r·4 + t from the mins' fold (see minsOf44)
alignas(64) const int32_t MINS_ORDER[16] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
// lane r·4 + t takes row r's value (quarter r = lane r of a four-lane vector)
alignas(64) const int32_t ROW_OF_LANE[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};

/** Σ_j mn[r][j]·as[t][j] for the 16 (row, token) pairs of block b, lane r·4 + t (exact in i32) */
inline __m512i minsOf44(const Group& g, const Tokens4& T, int b) {
  const __m512i as01 = _mm512_load_si512(T.asP + size_t(b) * 32);
  const __m512i as23 = _mm512_load_si512(T.asP + size_t(b) * 32 + 16);
  __m512i p[8];
  for (int r = 0; r < 4; r++) {
    const __m512i mn = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(g.mn[r] + size_t(b) * 8)));
    p[2 * r] = _mm512_mullo_epi32(mn, as01);
    p[2 * r + 1] = _mm512_mullo_epi32(mn, as23);
  }
  // each product holds two pairs (quarters 0–1: the first token, 2–3: the second)
  const __m512i f = foldQuarters(quads(p[0], p[1], p[2], p[3]), quads(p[4], p[5], p[6], p[7]));
  return _mm512_permutexvar_epi32(_mm512_load_si512(MINS_ORDER), f);
}

/** out[r·4 + t]: kernels.as's blockTerm summed over blocks in order, lane by lane */
template <bool Wide, bool Mins>
void tile44(const Group& g, const Tokens4& T, int nb, float* out) {
  const __m512i rowLane = _mm512_load_si512(ROW_OF_LANE);
  __m512 acc = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    __m512i s[16];
    for (int i = 0; i < 16; i++) s[i] = _mm512_setzero_si512();
    for (int c = 0; c < 8; c++) {
      const size_t off = size_t(b) * 256 + size_t(c) * 32;
      const __m512i w0 = _mm512_load_si512(g.q[0] + off), w1 = _mm512_load_si512(g.q[1] + off);
      const __m512i w2 = _mm512_load_si512(g.q[2] + off), w3 = _mm512_load_si512(g.q[3] + off);
      for (int t = 0; t < 4; t++) {
        const __m512i a = _mm512_loadu_si512(T.aq[t] + off * 2);
        s[t] = dot16(s[t], w0, a);
        s[4 + t] = dot16(s[4 + t], w1, a);
        s[8 + t] = dot16(s[8 + t], w2, a);
        s[12 + t] = dot16(s[12 + t], w3, a);
      }
    }
    const __m512 I = sums16<Wide>(s);
    const __m512 M = Mins ? _mm512_cvtepi32_ps(minsOf44(g, T, b)) : _mm512_setzero_ps();
    const __m512 da = _mm512_broadcast_f32x4(_mm_load_ps(T.daT + size_t(b) * 4));
    const __m512 dw = _mm512_permutexvar_ps(rowLane, _mm512_castps128_ps512(_mm_load_ps(g.d + size_t(b) * 4)));
    const __m512 dm = _mm512_permutexvar_ps(rowLane, _mm512_castps128_ps512(_mm_load_ps(g.dm + size_t(b) * 4)));
    // kernels.as blockTerm: <f32>i · (dw·da) − <f32>m · (dm·da)
    acc = _mm512_add_ps(acc, _mm512_sub_ps(_mm512_mul_ps(I, _mm512_mul_ps(dw, da)), _mm512_mul_ps(M, _mm512_mul_ps(dm, da))));
  }
  _mm512_storeu_ps(out, acc);
}

/** out[r·4 + t] for the 32 class, four unpacked rows × four tokens: each block's sixteen exact sums at once */
void tile32x44(const Group& g, const Tokens4& T, int nb, float* out) {
  const __m512i rowLane = _mm512_load_si512(ROW_OF_LANE);
  __m512 acc = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const size_t off = size_t(b) * 32;
    __m512i s[16];
    const __m512i w0 = _mm512_load_si512(g.q[0] + off), w1 = _mm512_load_si512(g.q[1] + off);
    const __m512i w2 = _mm512_load_si512(g.q[2] + off), w3 = _mm512_load_si512(g.q[3] + off);
    for (int t = 0; t < 4; t++) {
      const __m512i a = _mm512_loadu_si512(T.aq[t] + off * 2);
      s[t] = _mm512_madd_epi16(w0, a);
      s[4 + t] = _mm512_madd_epi16(w1, a);
      s[8 + t] = _mm512_madd_epi16(w2, a);
      s[12 + t] = _mm512_madd_epi16(w3, a);
    }
    const __m512 I = sums16<false>(s);
    const __m512 da = _mm512_broadcast_f32x4(_mm_load_ps(T.daT + size_t(b) * 4));
    const __m128 d4 = _mm_setr_ps(g.d[b], g.d[size_t(nb) + b], g.d[2 * size_t(nb) + b], g.d[3 * size_t(nb) + b]);
    const __m512 dw = _mm512_permutexvar_ps(rowLane, _mm512_castps128_ps512(d4));
    // kernels.as dot32x24: <f32>Σ · (dw·da), added in block order
    acc = _mm512_add_ps(acc, _mm512_mul_ps(I, _mm512_mul_ps(dw, da)));
  }
  _mm512_storeu_ps(out, acc);
}

/** out[r] for four rows × one token (decode) */
template <bool Wide, bool Mins>
void tile41(const Group& g, const uint8_t* aq, const float* ad, const int32_t* as, int nb, float* out) {
  __m128 acc = _mm_setzero_ps();
  for (int b = 0; b < nb; b++) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (int c = 0; c < 8; c++) {
      const size_t off = size_t(b) * 256 + size_t(c) * 32;
      const __m512i a = _mm512_loadu_si512(aq + off * 2);
      s0 = dot16(s0, _mm512_load_si512(g.q[0] + off), a);
      s1 = dot16(s1, _mm512_load_si512(g.q[1] + off), a);
      s2 = dot16(s2, _mm512_load_si512(g.q[2] + off), a);
      s3 = dot16(s3, _mm512_load_si512(g.q[3] + off), a);
    }
    const __m512i w = quads(s0, s1, s2, s3);
    const __m128 I = Wide ? quarterSumsWide(w) : quarterSums(w);
    __m128 M = _mm_setzero_ps();
    if (Mins) {
      const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(as + size_t(b) * 8));
      __m256i p[4];
      for (int r = 0; r < 4; r++) p[r] = _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(g.mn[r] + size_t(b) * 8)), A);
      const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
      M = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
    }
    const __m128 da = _mm_set1_ps(ad[b]);
    const __m128 dw = _mm_load_ps(g.d + size_t(b) * 4);
    const __m128 dm = _mm_load_ps(g.dm + size_t(b) * 4);
    acc = _mm_add_ps(acc, _mm_sub_ps(_mm_mul_ps(I, _mm_mul_ps(dw, da)), _mm_mul_ps(M, _mm_mul_ps(dm, da))));
  }
  _mm_storeu_ps(out, acc);
}

// ---------------------------------------------------------------- 32 class: four unpacked rows × one token

/** out[r] = Σ over blocks in order of <f32>(Σ32 q·a) · (dw·da), sixteen blocks' exact sums at a time per row */
void dot32x4(const Group& g, int nb, const uint8_t* aq, const float* ad, float* out) {
  float acc[4] = {0, 0, 0, 0};
  alignas(64) float terms[4][16];
  for (int b0 = 0; b0 < nb; b0 += 16) {
    const int cnt = nb - b0 < 16 ? nb - b0 : 16;
    const __mmask16 m = __mmask16((1u << cnt) - 1);
    const __m512 da = _mm512_maskz_loadu_ps(m, ad + b0);
    for (int r = 0; r < 4; r++) {
      __m512i v[16];
      for (int k = 0; k < 16; k++) {
        const size_t off = size_t(b0 + k) * 32;
        v[k] = k < cnt ? _mm512_madd_epi16(_mm512_load_si512(g.q[r] + off), _mm512_loadu_si512(aq + off * 2)) : _mm512_setzero_si512();
      }
      const __m512 I = sums16<false>(v);
      const __m512 dw = _mm512_maskz_loadu_ps(m, g.d + size_t(r) * nb + b0);
      _mm512_store_ps(terms[r], _mm512_mul_ps(I, _mm512_mul_ps(dw, da)));
    }
    for (int k = 0; k < cnt; k++)
      for (int r = 0; r < 4; r++) acc[r] += terms[r][k];
  }
  for (int r = 0; r < 4; r++) out[r] = acc[r];
}

}  // namespace

void tile44(bool wide, const Group& g, const Tokens4& T, int nb, float* out) {
  if (wide) tile44<true, false>(g, T, nb, out);
  else tile44<false, true>(g, T, nb, out);
}

void tile41(bool wide, const Group& g, const uint8_t* aq, const float* ad, const int32_t* as, int nb, float* out) {
  if (wide) tile41<true, false>(g, aq, ad, as, nb, out);
  else tile41<false, true>(g, aq, ad, as, nb, out);
}

void tile32(const Group& g, const Tokens4& T, int nb, float* out) { tile32x44(g, T, nb, out); }

void dot32rows(const Group& g, int nb, const uint8_t* aq, const float* ad, float* out) { dot32x4(g, nb, aq, ad, out); }

#endif  // LATENT_AVX512

}  // namespace detail
}  // namespace latent
