// The row unpackers (kernels.as's, in AVX-512): integer values with the sub-block scales folded in (i16), the
// block's float scales, and Q4_K's integer mins.
#include "rows.h"

namespace latent {
namespace detail {

#if LATENT_AVX512

thread_local Scratch scratch;

namespace {

// ---------------------------------------------------------------- row unpackers (as kernels.as's)

void unpackQ4K(const uint8_t* row, int nb, const RowOut& o) {
  const __m512i m4 = _mm512_set1_epi16(15);
  const __m512i idx[8] = {byteIndex16(0), byteIndex16(1), byteIndex16(2), byteIndex16(3),
                          byteIndex16(4), byteIndex16(5), byteIndex16(6), byteIndex16(7)};
  for (int b = 0; b < nb; b++) {
    const uint8_t* p = row + size_t(b) * 144;
    prefetchBlock(p, 144);
    const uint32_t dd = load32(p);
    o.d[b * o.stride] = f16(dd & 0xffff);
    o.dm[b * o.stride] = f16(dd >> 16);
    const __m128i sm = scalesMinsQ4K(p);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.mn + size_t(b) * 8), _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
    const __m512i SC = _mm512_broadcast_i32x4(sm);
    int16_t* q = o.q + size_t(b) * 256;
    for (int j = 0; j < 4; j++) {
      const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * j)));
      _mm512_store_si512(q + 64 * j, _mm512_mullo_epi16(_mm512_and_si512(v, m4), _mm512_shuffle_epi8(SC, idx[2 * j])));
      _mm512_store_si512(q + 64 * j + 32, _mm512_mullo_epi16(_mm512_srli_epi16(v, 4), _mm512_shuffle_epi8(SC, idx[2 * j + 1])));
    }
  }
}

// the block's 16 i8 scales as i16, each 32 values' pair [sc[2g] ×16, sc[2g + 1] ×16] picked by vpermw
inline __m512i scalePairs16(const int8_t* sc) {
  return _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
}
inline __m512i pairIndex(int g) { return _mm512_inserti64x4(_mm512_set1_epi16(int16_t(2 * g)), _mm256_set1_epi16(int16_t(2 * g + 1)), 1); }

// Q6_K: values in order have the i8 scale of their group of 16 (sc[v / 16]); |q·sc| ≤ 32·128 = 4096
void unpackQ6K(const uint8_t* row, int nb, const RowOut& o) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i c32 = _mm256_set1_epi8(32);
  const __m512i pi[8] = {pairIndex(0), pairIndex(1), pairIndex(2), pairIndex(3), pairIndex(4), pairIndex(5), pairIndex(6), pairIndex(7)};
  for (int b = 0; b < nb; b++) {
    const uint8_t* p = row + size_t(b) * 210;
    prefetchBlock(p, 210);
    o.d[b * o.stride] = f16(load16(p + 208));
    o.dm[b * o.stride] = 0;
    const __m512i S = scalePairs16(reinterpret_cast<const int8_t*>(p + 192));
    int16_t* q = o.q + size_t(b) * 256;
    for (int nh = 0; nh < 2; nh++) {
      const uint8_t* ql = p + 64 * nh;
      const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i B = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * nh));
      // bit fields cut in bytes with 16-bit shifts and byte masks
      const __m256i q1 = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(A, m4), _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)), c32);
      const __m256i q2 = _mm256_sub_epi8(
          _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)), c32);
      const __m256i q3 = _mm256_sub_epi8(
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)),
          c32);
      const __m256i q4 = _mm256_sub_epi8(
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)),
          c32);
      int16_t* o128 = q + 128 * nh;
      _mm512_store_si512(o128, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q1), _mm512_permutexvar_epi16(pi[4 * nh], S)));
      _mm512_store_si512(o128 + 32, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q2), _mm512_permutexvar_epi16(pi[4 * nh + 1], S)));
      _mm512_store_si512(o128 + 64, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q3), _mm512_permutexvar_epi16(pi[4 * nh + 2], S)));
      _mm512_store_si512(o128 + 96, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q4), _mm512_permutexvar_epi16(pi[4 * nh + 3], S)));
    }
  }
}

void unpackQ8_0(const uint8_t* row, int nb, const RowOut& o) {
  for (int b = 0; b < nb; b++) {
    const uint8_t* p = row + size_t(b) * 34;
    if ((b & 1) == 0) prefetchBlock(p, 68);
    o.d[b * o.stride] = f16(load16(p));
    _mm512_store_si512(o.q + size_t(b) * 32, _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))));
  }
}

// Q5_0: value j < 16 = (qs[j] & 15) | bit j of qh << 4, value j + 16 = (qs[j] >> 4) | bit j + 16 << 4; minus 16
void unpackQ5_0(const uint8_t* row, int nb, const RowOut& o) {
  const __m128i m4 = _mm_set1_epi8(15);
  const __m256i c16 = _mm256_set1_epi8(16);
  for (int b = 0; b < nb; b++) {
    const uint8_t* p = row + size_t(b) * 22;
    if ((b & 1) == 0) prefetchBlock(p, 44);
    o.d[b * o.stride] = f16(load16(p));
    const __mmask32 qh = load32(p + 2);
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6));
    const __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m4)),
                                                _mm_and_si128(_mm_srli_epi16(qs, 4), m4), 1);
    const __m256i v = _mm256_sub_epi8(_mm256_mask_add_epi8(nib, qh, nib, c16), c16);
    _mm512_store_si512(o.q + size_t(b) * 32, _mm512_cvtepi8_epi16(v));
  }
}

}  // namespace

void unpackRow(int type, const uint8_t* row, int nb, const RowOut& o) {
  switch (type) {
    case Q4_K:
      unpackQ4K(row, nb, o);
      break;
    case Q6_K:
      unpackQ6K(row, nb, o);
      break;
    case Q8_0:
      unpackQ8_0(row, nb, o);
      break;
    default:
      unpackQ5_0(row, nb, o);
      break;
  }
}

#endif  // LATENT_AVX512

}  // namespace detail
}  // namespace latent
