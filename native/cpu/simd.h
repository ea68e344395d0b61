// Shared pieces of the native CPU kernels: the instruction-set gate, ggml type ids, loads, the integer dot steps,
// prefetch distances and the exact reductions across lanes. Internal (namespace latent::detail).
#pragma once
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define LATENT_AVX512 1
#include <immintrin.h>
#else
#define LATENT_AVX512 0
#endif

namespace latent {
namespace detail {

// ggml type ids: the types with native kernels (kernels.cc NATIVE_TYPES lists them for the addon)
constexpr int Q5_0 = 6;
constexpr int Q8_0 = 8;
constexpr int Q4_K = 12;
constexpr int Q6_K = 14;

inline bool kClass(int type) { return type == Q4_K || type == Q6_K; }
inline bool c32Class(int type) { return type == Q8_0 || type == Q5_0; }

#if LATENT_AVX512

/** the same bits as another type of the same size (float ↔ uint32_t, double ↔ uint64_t) */
template <typename To, typename From>
inline To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bitCast between types of one size");
  To t;
  memcpy(&t, &v, sizeof(To));
  return t;
}
/** kernels.as's f16: the magnitude's bits moved into place and scaled by 2^112, then the sign (same bits for every input) */
inline float f16(uint32_t h) {
  const float f = bitCast<float>((h & 0x7fff) << 13) * 5.192296858534828e33f;
  return bitCast<float>(bitCast<uint32_t>(f) | ((h & 0x8000) << 16));
}
inline uint32_t load16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

inline __m512i dot16(__m512i acc, __m512i w, __m512i a) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, w, a);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(w, a));
#endif
}

/**
 * Σ of four u8 × s8 products per i32 lane. Without VNNI: vpmaddubsw (pairs into i16, exact here: the u8 operand is at
 * most 63 and the s8 at most 128 in magnitude, |pair| ≤ 16128) and vpmaddwd against ones.
 */
inline __m512i dotBytes(__m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#else
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
#endif
}

/** 32 i16 lanes: the first 16 = lo, the last 16 = hi */
inline __m512i halves16(int16_t lo, int16_t hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(lo)), _mm256_set1_epi16(hi), 1);
}

/**
 * Weights stream from memory once per product; the work per block leaves too few loads in flight for the hardware
 * prefetcher alone (single-token Q4_K read 4 GB/s of a core's ~16 without this), so each block asks for the lines
 * PREFETCH bytes ahead.
 */
#ifndef LATENT_PREFETCH
#define LATENT_PREFETCH 2048
#endif
constexpr size_t PREFETCH = LATENT_PREFETCH;
inline void prefetchBlock(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + PREFETCH + o), _MM_HINT_T0);
}

/**
 * kernels.as scalesMinsQ4K: a Q4_K block's eight 6-bit scales (bytes 0..7) and eight mins (8..15), cut from its 12
 * scale bytes with ggml's 32-bit masks (reads 16 bytes from p + 4: the last 4 are the block's first quants, unused)
 */
inline __m128i scalesMinsQ4K(const uint8_t* p) {
  const __m128i L = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
  const __m128i lo = _mm_and_si128(L, _mm_set1_epi32(0x3f3f3f3f));
  const __m128i x = _mm_and_si128(_mm_unpacklo_epi32(_mm_shuffle_epi32(L, 0xaa), _mm_shuffle_epi32(_mm_srli_epi32(L, 4), 0xaa)),
                                  _mm_set1_epi32(0x0f0f0f0f));
  const __m128i y = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(L, 6), _mm_set1_epi32(0x03030303)), 4);
  return _mm_unpacklo_epi32(lo, _mm_or_si128(x, y));
}

inline size_t round64(size_t x) { return (x + 63) & ~static_cast<size_t>(63); }

/** a growing, 64-byte-aligned buffer (each thread keeps its own: thread_local) */
struct Scratch {
  uint8_t* p = nullptr;
  size_t size = 0;
  ~Scratch() { free(p); }
  uint8_t* get(size_t bytes) {
    if (bytes > size) {
      free(p);
      size = round64(bytes + (bytes >> 1));
      p = static_cast<uint8_t*>(aligned_alloc(64, size));
      if (p == nullptr) size = 0;
    }
    return p;
  }
};


#ifndef LATENT_FUSED_AHEAD
#define LATENT_FUSED_AHEAD 1
#endif
constexpr size_t FUSED_AHEAD = LATENT_FUSED_AHEAD;
#ifndef Q4_HINT
#define Q4_HINT _MM_HINT_T0
#endif
#ifndef Q6_AHEAD
#define Q6_AHEAD 1
#endif
#ifndef Q6_HINT
#define Q6_HINT _MM_HINT_T1
#endif

// ---------------------------------------------------------------- exact reductions across lanes

// pairs(a, b), per 128-bit quarter: [a0 + a2, b0 + b2, a1 + a3, b1 + b3]
inline __m512i pairs(__m512i a, __m512i b) { return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b)); }
// quads(a, b, c, d), quarter q: [Σ a's quarter q, Σ b's, Σ c's, Σ d's] (lane 4q + i holds vector i's part)
inline __m512i quads(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = pairs(a, b), cd = pairs(c, d);
  return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}
// [quarters 0 + 1, 2 + 3] of a, then of b
inline __m512i foldQuarters(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}
/** lane i of quads' result summed over its four quarters, as f32 (one rounding of the exact sum, in i64) */
inline __m128 quarterSumsWide(__m512i w) {
  const __m512i s = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(w)), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(w, 1)));
  return _mm256_cvtepi64_ps(_mm256_add_epi64(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)));
}
inline __m128 quarterSums(__m512i w) {
  const __m512i x = _mm512_add_epi32(w, _mm512_shuffle_i32x4(w, w, 0x4e));
  return _mm_cvtepi32_ps(_mm512_castsi512_si128(_mm512_add_epi32(x, _mm512_shuffle_i32x4(x, x, 0xb1))));
}

/**
 * The exact lane sums of s[0..15] as f32, lane k = Σ s[k]. Every partial of four lanes fits i32 (|lane| ≤ 16 products
 * ≤ 4096·8191), the whole may not for Q6_K (Wide): there the last two steps run in i64.
 */
template <bool Wide>
inline __m512 sums16(const __m512i* s) {
  const __m512i w0 = quads(s[0], s[1], s[2], s[3]), w1 = quads(s[4], s[5], s[6], s[7]);
  const __m512i w2 = quads(s[8], s[9], s[10], s[11]), w3 = quads(s[12], s[13], s[14], s[15]);
  if (!Wide) return _mm512_cvtepi32_ps(foldQuarters(foldQuarters(w0, w1), foldQuarters(w2, w3)));
  const __m256 a = _mm256_insertf128_ps(_mm256_castps128_ps256(quarterSumsWide(w0)), quarterSumsWide(w1), 1);
  const __m256 b = _mm256_insertf128_ps(_mm256_castps128_ps256(quarterSumsWide(w2)), quarterSumsWide(w3), 1);
  return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
}

#endif  // LATENT_AVX512

}  // namespace detail
}  // namespace latent
