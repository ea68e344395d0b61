// What the native kernels' files share beyond simd.h and rows.h: the prefill tiles (prefill.cc) and the fused decode
// kernels (decode.cc), called by the drivers in kernels.cc and transposed.cc. Internal (namespace latent::detail).
#pragma once
#include "rows.h"

namespace latent {
namespace detail {

#if LATENT_AVX512

/** four tokens' activations and, per block, their scales [b·4 + t] and sums of 32 in pairs of tokens [b][pair][16] */
struct Tokens4 {
  const uint8_t* aq[4];
  const float* daT;
  const int32_t* asP;
};

/** out[r·4 + t], K class (wide: Q6_K's i64 block totals; else Q4_K with its mins) */
void tile44(bool wide, const Group& g, const Tokens4& T, int nb, float* out);
/** out[r], K class, one token */
void tile41(bool wide, const Group& g, const uint8_t* aq, const float* ad, const int32_t* as, int nb, float* out);
/** out[r·4 + t], 32 class */
void tile32(const Group& g, const Tokens4& T, int nb, float* out);
/** out[r], 32 class, one token */
void dot32rows(const Group& g, int nb, const uint8_t* aq, const float* ad, float* out);

/** a token's Q4_K activation pieces (512 bytes a block) and the fused Q4_K kernel over four rows */
void q4kPieces(const int16_t* a, int nb, int8_t* out);
void q4kRows(const uint8_t* row0, size_t rowBytes, int nr, const int8_t* pieces, const float* ad, const int32_t* as, int nb,
             float* out);
/** a token's Q6_K pieces and 32·Σa per group of 16, and the fused Q6_K kernel over four rows */
void q6kPieces(const int16_t* a, int nb, int8_t* pieces, int32_t* sum32);
void q6kRows(const uint8_t* row0, size_t rowBytes, int nr, const int8_t* pieces, const int32_t* sum32, const float* ad, int nb,
             float* out);
/** the fused Q8_0 / Q5_0 kernel over four rows */
void c32Rows(int type, const uint8_t* row0, size_t rowBytes, int nr, const uint8_t* aq, const float* ad, int nb, float* out);

#endif  // LATENT_AVX512

}  // namespace detail
}  // namespace latent
