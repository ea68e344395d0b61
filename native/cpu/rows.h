// Rows unpacked into a thread's scratch, four at a time (a row group): the layout the prefill tiles and the
// transposed product read. Internal (namespace latent::detail).
#pragma once
#include <stdlib.h>

#include "simd.h"

namespace latent {
namespace detail {

#if LATENT_AVX512

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

/** the calling thread's scratch (rows, token tables) */
extern thread_local Scratch scratch;

inline size_t groupBytes(int cols, int nb) {
  return 4 * round64(size_t(cols) * 2) + 2 * round64(size_t(nb) * 16) + 4 * round64(size_t(nb) * 32);
}

inline Group groupAt(uint8_t* s, int cols, int nb) {
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

/** one row of `nb` blocks of `type` (Q4_K, Q6_K, Q8_0, Q5_0) into `o`, as kernels.as's unpackers */
void unpackRow(int type, const uint8_t* row, int nb, const RowOut& o);

#endif  // LATENT_AVX512

}  // namespace detail
}  // namespace latent
