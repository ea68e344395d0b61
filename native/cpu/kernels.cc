// The exact-activation integer products of kernels.as (see kernels.h), for AVX-512. Compiled with the build
// machine's instruction set (-march=native) and without floating-point contraction (-ffp-contract=off): every f32
// operation rounds as WebAssembly's does, so results equal the WebAssembly kernels' bit for bit.
//
// Shape of the work: rows are unpacked a few at a time into a per-thread scratch (integer weights with their
// sub-block scales folded in, i16; float scales per block; integer mins), then dotted with the tokens' quantized
// activations (i16) by vpdpwssd (or vpmaddwd + vpaddd without VNNI): 32 multiply-adds an instruction, where
// WebAssembly SIMD's i32x4.dot_i16x8_s does 8. Per block the integer sums are reduced exactly (i32 where they fit,
// i64 for Q6_K's wider range) and the block's f32 term is added in block order.
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define LATENT_AVX512 1
#include <immintrin.h>
#else
#define LATENT_AVX512 0
#endif

namespace latent {

int compiledLevel() {
#if LATENT_AVX512 && defined(__AVX512VNNI__)
  return 2;
#elif LATENT_AVX512
  return 1;
#else
  return 0;
#endif
}

bool cpuSupportsCompiled() {
#if LATENT_AVX512 && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#if defined(__AVX512VNNI__)
  ok = ok && __builtin_cpu_supports("avx512vnni");
#endif
  return ok;
#else
  return false;
#endif
}

namespace {

// ggml type ids (and kernels.as's internal Q6_KR: Q6_K repacked, 276 bytes per 256 values)
constexpr int Q5_0 = 6;
constexpr int Q8_0 = 8;
constexpr int Q4_K = 12;
constexpr int Q6_K = 14;
constexpr int Q6_KR = 1014;

inline bool kClass(int type) { return type == Q4_K || type == Q6_K || type == Q6_KR; }
inline bool c32Class(int type) { return type == Q8_0 || type == Q5_0; }

}  // namespace

bool supportsType(int type) { return LATENT_AVX512 && (kClass(type) || c32Class(type)); }

#if LATENT_AVX512

namespace {

inline float bitsToF32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32ToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
/** kernels.as's f16: the magnitude's bits moved into place and scaled by 2^112, then the sign (same bits for every input) */
inline float f16(uint32_t h) {
  const float f = bitsToF32((h & 0x7fff) << 13) * 5.192296858534828e33f;
  return bitsToF32(f32ToBits(f) | ((h & 0x8000) << 16));
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

inline size_t round64(size_t x) { return (x + 63) & ~static_cast<size_t>(63); }

/**
 * Four rows unpacked into scratch (a row group; missing rows of a group at the matrix's end are zero). q[r]: i16
 * values with sub-block scales folded in. K class: d and dm interleaved by row, [b·4 + r]; mn[r]: i32 mins per 32
 * values [b·8 + j] (Q4_K only). 32 class: d[r·nb + b].
 */
struct Group {
  int16_t* q[4];
  float* d;
  float* dm;
  int32_t* mn[4];
};

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
thread_local Scratch scratch;

size_t groupBytes(int cols, int nb) {
  return 4 * round64(size_t(cols) * 2) + 2 * round64(size_t(nb) * 16) + 4 * round64(size_t(nb) * 32);
}

Group groupAt(uint8_t* s, int cols, int nb) {
  Group g;
  for (int r = 0; r < 4; r++, s += round64(size_t(cols) * 2)) g.q[r] = reinterpret_cast<int16_t*>(s);
  g.d = reinterpret_cast<float*>(s);
  s += round64(size_t(nb) * 16);
  g.dm = reinterpret_cast<float*>(s);
  s += round64(size_t(nb) * 16);
  for (int r = 0; r < 4; r++, s += round64(size_t(nb) * 32)) g.mn[r] = reinterpret_cast<int32_t*>(s);
  return g;
}

/** where an unpacker writes one row: values, block scales (d[b·stride]), mins' scales and mins (K class) */
struct RowOut {
  int16_t* q;
  float* d;
  float* dm;
  size_t stride;
  int32_t* mn;
};

// i16 lanes = byte s of a 16-byte pattern repeated in each 128-bit lane (vpshufb; 0x80 zeroes the high byte)
inline __m512i byteIndex16(int s) { return _mm512_set1_epi16(int16_t(0x8000 | s)); }

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
    // kernels.as scalesMinsQ4K: bytes 0..7 = the eight 6-bit scales, 8..15 = the eight mins (ggml's masks)
    const __m128i L = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
    const __m128i lo = _mm_and_si128(L, _mm_set1_epi32(0x3f3f3f3f));
    const __m128i x = _mm_and_si128(_mm_unpacklo_epi32(_mm_shuffle_epi32(L, 0xaa), _mm_shuffle_epi32(_mm_srli_epi32(L, 4), 0xaa)),
                                    _mm_set1_epi32(0x0f0f0f0f));
    const __m128i y = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(L, 6), _mm_set1_epi32(0x03030303)), 4);
    const __m128i sm = _mm_unpacklo_epi32(lo, _mm_or_si128(x, y));
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

// Q6_KR (kernels.as repackQ6K): f32 d, 16 i8 scales, 256 i8 values q − 32 in order
void unpackQ6KR(const uint8_t* row, int nb, const RowOut& o) {
  const __m512i pi[8] = {pairIndex(0), pairIndex(1), pairIndex(2), pairIndex(3), pairIndex(4), pairIndex(5), pairIndex(6), pairIndex(7)};
  for (int b = 0; b < nb; b++) {
    const uint8_t* p = row + size_t(b) * 276;
    prefetchBlock(p, 276);
    float d;
    memcpy(&d, p, 4);
    o.d[b * o.stride] = d;
    o.dm[b * o.stride] = 0;
    const __m512i S = scalePairs16(reinterpret_cast<const int8_t*>(p + 4));
    int16_t* q = o.q + size_t(b) * 256;
    for (int g = 0; g < 8; g++) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 20 + 32 * g));
      _mm512_store_si512(q + 32 * g, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(x), _mm512_permutexvar_epi16(pi[g], S)));
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

void unpackRow(int type, const uint8_t* row, int nb, const RowOut& o) {
  switch (type) {
    case Q4_K:
      unpackQ4K(row, nb, o);
      break;
    case Q6_K:
      unpackQ6K(row, nb, o);
      break;
    case Q6_KR:
      unpackQ6KR(row, nb, o);
      break;
    case Q8_0:
      unpackQ8_0(row, nb, o);
      break;
    default:
      unpackQ5_0(row, nb, o);
      break;
  }
}

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

// ---------------------------------------------------------------- K class: four rows × four tokens, four rows × one

/** four tokens' activations and, per block, their scales [b·4 + t] and sums of 32 in pairs of tokens [b][pair][16] */
struct Tokens4 {
  const uint8_t* aq[4];
  const float* daT;
  const int32_t* asP;
};

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
      // kernels.as scalesMinsQ4K: bytes 0..7 the scales, 8..15 the mins
      const __m128i L = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
      const __m128i lo = _mm_and_si128(L, _mm_set1_epi32(0x3f3f3f3f));
      const __m128i x = _mm_and_si128(_mm_unpacklo_epi32(_mm_shuffle_epi32(L, 0xaa), _mm_shuffle_epi32(_mm_srli_epi32(L, 4), 0xaa)),
                                      _mm_set1_epi32(0x0f0f0f0f));
      const __m128i y = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(L, 6), _mm_set1_epi32(0x03030303)), 4);
      const __m128i sm = _mm_unpacklo_epi32(lo, _mm_or_si128(x, y));
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

bool matmul(uint8_t* base, int type, uint32_t w, uint32_t rowBytes, int r0, int r1, int cols, int n, uint32_t aq,
            uint32_t ad, uint32_t asum, uint32_t y, int yStride, int tc) {
  if (!supportsType(type)) return false;
  const bool K = kClass(type);
  const bool wide = type != Q4_K;  // Q6_K's block sums can pass 2³¹; Q4_K's cannot (256·15·63·8191 < 2³¹)
  const int nb = K ? cols / 256 : cols / 32;
  if (tc < 1) tc = n;
  // scratch: a row group, then per token group of the chunk its scales and sums (K class)
  const int groups = (tc + 3) / 4;
  const size_t gBytes = groupBytes(cols, nb);
  const size_t tBytes = round64(size_t(nb) * 16) + (K ? round64(size_t(nb) * 128) : 0);
  const size_t fusedBytes = size_t(nb) * (512 + 64);  // a token's pieces (and Q6_K's group sums) for the fused kernels
  uint8_t* s = scratch.get(gBytes + (tBytes * groups > fusedBytes ? tBytes * groups : fusedBytes));
  if (s == nullptr) return false;
  const Group g = groupAt(s, cols, nb);
  uint8_t* tokenArea = s + gBytes;
  const size_t aqRow = size_t(cols) * 2;
  const float* AD = reinterpret_cast<const float*>(base + ad);
  const int32_t* AS = reinterpret_cast<const int32_t*>(base + asum);
  float* Y = reinterpret_cast<float*>(base + y);
  // Q8_0 and Q5_0 with fewer than four tokens (decode): fused, no unpack
  if (!K && n < 4) {
    float out[4];
    for (int t = 0; t < n; t++) {
      const uint8_t* a = base + aq + size_t(t) * aqRow;
      for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        const uint8_t* row = base + w + size_t(r) * rowBytes;
        if (type == Q8_0) fused32x41<Q8_0>(row, rowBytes, nr, a, AD + size_t(t) * nb, nb, out);
        else fused32x41<Q5_0>(row, rowBytes, nr, a, AD + size_t(t) * nb, nb, out);
        for (int i = 0; i < nr; i++) Y[size_t(t) * yStride + r + i] = out[i];
      }
    }
    return true;
  }
  // Q6_K with fewer than four tokens (decode): fused, no unpack
  if (type == Q6_K && n < 4) {
    int8_t* pieces = reinterpret_cast<int8_t*>(tokenArea);
    int32_t* sum32 = reinterpret_cast<int32_t*>(tokenArea + size_t(nb) * 512);
    float out[4];
    for (int t = 0; t < n; t++) {
      splitQ6K(reinterpret_cast<const int16_t*>(base + aq + size_t(t) * aqRow), nb, pieces, sum32);
      for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        fusedQ6K41(base + w + size_t(r) * rowBytes, rowBytes, nr, pieces, sum32, AD + size_t(t) * nb, nb, out);
        for (int i = 0; i < nr; i++) Y[size_t(t) * yStride + r + i] = out[i];
      }
    }
    return true;
  }
  // Q4_K with fewer than four tokens (decode): fused, no unpack
  if (type == Q4_K && n < 4) {
    int8_t* pieces = reinterpret_cast<int8_t*>(tokenArea);
    float out[4];
    for (int t = 0; t < n; t++) {
      splitQ4K(reinterpret_cast<const int16_t*>(base + aq + size_t(t) * aqRow), nb, pieces);
      for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        fusedQ4K41(base + w + size_t(r) * rowBytes, rowBytes, nr, pieces, AD + size_t(t) * nb, AS + size_t(t) * nb * 8, nb, out);
        for (int i = 0; i < nr; i++) Y[size_t(t) * yStride + r + i] = out[i];
      }
    }
    return true;
  }
  for (int t0 = 0; t0 < n; t0 += tc) {
    const int t1 = n < t0 + tc ? n : t0 + tc;
    const int full = (t1 - t0) / 4;  // token groups of four
    for (int q = 0; q < full; q++) {
      float* daT = reinterpret_cast<float*>(tokenArea + tBytes * q);
      int32_t* asP = reinterpret_cast<int32_t*>(tokenArea + tBytes * q + round64(size_t(nb) * 16));
      for (int b = 0; b < nb; b++)
        for (int t = 0; t < 4; t++) {
          const int tok = t0 + 4 * q + t;
          daT[b * 4 + t] = AD[size_t(tok) * nb + b];
          if (K) memcpy(asP + size_t(b) * 32 + (t >> 1) * 16 + (t & 1) * 8, AS + size_t(tok) * nb * 8 + size_t(b) * 8, 32);
        }
    }
    for (int r = r0; r < r1; r += 4) {
      const int nr = r1 - r < 4 ? r1 - r : 4;
      for (int i = 0; i < 4; i++) {
        const RowOut o = K ? RowOut{g.q[i], g.d + i, g.dm + i, 4, g.mn[i]} : RowOut{g.q[i], g.d + size_t(i) * nb, g.dm, 1, nullptr};
        if (i < nr) {
          unpackRow(type, base + w + size_t(r + i) * rowBytes, nb, o);
        } else {
          // rows past the matrix: zeros, results dropped
          memset(o.q, 0, size_t(cols) * 2);
          for (int b = 0; b < nb; b++) o.d[b * o.stride] = 0;
          if (K)
            for (int b = 0; b < nb; b++) o.dm[b * o.stride] = 0;
          if (K) memset(o.mn, 0, size_t(nb) * 32);
        }
      }
      float out[16];
      int t = t0;
      for (int q = 0; q < full; q++, t += 4) {
        Tokens4 T{{}, reinterpret_cast<const float*>(tokenArea + tBytes * q),
                  reinterpret_cast<const int32_t*>(tokenArea + tBytes * q + round64(size_t(nb) * 16))};
        for (int k = 0; k < 4; k++) T.aq[k] = base + aq + size_t(t + k) * aqRow;
        if (!K) tile32x44(g, T, nb, out);
        else if (wide) tile44<true, false>(g, T, nb, out);
        else tile44<false, true>(g, T, nb, out);
        for (int i = 0; i < nr; i++)
          for (int k = 0; k < 4; k++) Y[size_t(t + k) * yStride + r + i] = out[i * 4 + k];
      }
      for (; t < t1; t++) {
        const uint8_t* a = base + aq + size_t(t) * aqRow;
        if (!K) dot32x4(g, nb, a, AD + size_t(t) * nb, out);
        else if (wide) tile41<true, false>(g, a, AD + size_t(t) * nb, AS + size_t(t) * nb * 8, nb, out);
        else tile41<false, true>(g, a, AD + size_t(t) * nb, AS + size_t(t) * nb * 8, nb, out);
        for (int i = 0; i < nr; i++) Y[size_t(t) * yStride + r + i] = out[i];
      }
    }
  }
  return true;
}


// ---------------------------------------------------------------- the transposed product (f32 activations)

/**
 * kernels.as matmulT for tokens t0 ≤ t < t1: y[t·yStride + c] = Σ_r W[r][c]·x[t·xStride + r], rows in order, a row
 * skipped for a token whose activation is 0. Each row becomes f32 as kernels.as unpackedToF32 makes it
 * (<f32>q · d − dm·<f32>mn), then two tokens' outputs stay in registers, up to 128 columns at a time, over a chunk
 * of rows.
 */
bool matmulT(uint8_t* base, int type, uint32_t w, uint32_t rowBytes, int rows, int cols, int t0, int t1, uint32_t x, int xStride,
             uint32_t y, int yStride) {
  if (!supportsType(type)) return false;
  const bool K = kClass(type);
  const int nb = K ? cols / 256 : cols / 32;
  const int bv = K ? 256 : 32;
  constexpr int RC = 32;  // rows a chunk
  const size_t wfRow = round64(size_t(cols) * 4);
  const size_t gBytes = groupBytes(cols, nb);
  uint8_t* s = scratch.get(gBytes + wfRow * RC);
  if (s == nullptr) return false;
  const Group g = groupAt(s, cols, nb);
  float* wf = reinterpret_cast<float*>(s + gBytes);
  const float* X = reinterpret_cast<const float*>(base + x);
  float* Y = reinterpret_cast<float*>(base + y);
  for (int t = t0; t < t1; t++) memset(Y + size_t(t) * yStride, 0, size_t(cols) * 4);
  for (int r0 = 0; r0 < rows; r0 += RC) {
    const int rc = rows - r0 < RC ? rows - r0 : RC;
    for (int i = 0; i < rc; i++) {
      const RowOut o = K ? RowOut{g.q[0], g.d, g.dm, 1, g.mn[0]} : RowOut{g.q[0], g.d, g.dm, 1, nullptr};
      unpackRow(type, base + w + size_t(r0 + i) * rowBytes, nb, o);
      float* f = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(wf) + wfRow * i);
      for (int b = 0; b < nb; b++) {
        const __m512 d = _mm512_set1_ps(g.d[b]);
        for (int sb = 0; sb < bv; sb += 32) {
          // Q6_K has no mins: kernels.as computes 0·<f32>0 = +0 there
          const __m512 m = _mm512_set1_ps(type == Q4_K ? g.dm[b] * float(g.mn[0][b * 8 + sb / 32]) : 0.f);
          const size_t i0 = size_t(b) * bv + sb;
          const __m512i q = _mm512_load_si512(g.q[0] + i0);
          const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(q)));
          const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(q, 1)));
          _mm512_store_ps(f + i0, _mm512_sub_ps(_mm512_mul_ps(lo, d), m));
          _mm512_store_ps(f + i0 + 16, _mm512_sub_ps(_mm512_mul_ps(hi, d), m));
        }
      }
    }
    for (int t = t0; t < t1; t += 2) {
      const bool two = t + 1 < t1;
      const float* x0 = X + size_t(t) * xStride + r0;
      const float* x1 = two ? x0 + xStride : x0;
      float* y0 = Y + size_t(t) * yStride;
      float* y1 = two ? y0 + yStride : y0;
      for (int c0 = 0; c0 < cols; c0 += 128) {
        const int nv = (cols - c0 + 15) / 16 < 8 ? (cols - c0 + 15) / 16 : 8;
        __mmask16 last = 0xffff;
        if (c0 + nv * 16 > cols) last = __mmask16((1u << (cols - c0 - (nv - 1) * 16)) - 1);
        __m512 a[8], b[8];
        for (int k = 0; k < 8; k++) {
          const __mmask16 m = k < nv ? (k == nv - 1 ? last : 0xffff) : 0;
          a[k] = _mm512_maskz_loadu_ps(m, y0 + c0 + 16 * k);
          b[k] = _mm512_maskz_loadu_ps(two ? m : 0, y1 + c0 + 16 * k);
        }
        for (int i = 0; i < rc; i++) {
          const float* f = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(wf) + wfRow * i) + c0;
          const float p = x0[i], q = x1[i];
          const __m512 P = _mm512_set1_ps(p), Q = _mm512_set1_ps(q);
          for (int k = 0; k < 8; k++) {
            if (k >= nv) break;
            const __m512 wv = _mm512_maskz_loadu_ps(k == nv - 1 ? last : 0xffff, f + 16 * k);
            if (p != 0) a[k] = _mm512_add_ps(a[k], _mm512_mul_ps(wv, P));
            if (two && q != 0) b[k] = _mm512_add_ps(b[k], _mm512_mul_ps(wv, Q));
          }
        }
        for (int k = 0; k < nv; k++) {
          const __mmask16 m = k == nv - 1 ? last : 0xffff;
          _mm512_mask_storeu_ps(y0 + c0 + 16 * k, m, a[k]);
          if (two) _mm512_mask_storeu_ps(y1 + c0 + 16 * k, m, b[k]);
        }
      }
    }
  }
  return true;
}

#else  // no AVX-512: nothing runs here (supportsType is false); the WebAssembly kernels do the work

bool matmul(uint8_t*, int, uint32_t, uint32_t, int, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, int, int) { return false; }
bool matmulT(uint8_t*, int, uint32_t, uint32_t, int, int, int, int, uint32_t, int, uint32_t, int) { return false; }

#endif

}  // namespace latent
