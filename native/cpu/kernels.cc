// The exact-activation integer products of kernels.as (see kernels.h), for AVX-512: the driver. Compiled with the
// build machine's instruction set (-march=native) and without floating-point contraction (-ffp-contract=off): every
// f32 operation rounds as WebAssembly's does, so results equal the WebAssembly kernels' bit for bit.
//
// Fewer than four tokens (decode) go to the fused kernels of decode.cc, which read each weight once. Four tokens and
// more unpack four rows at a time into the thread's scratch (integer weights with their sub-block scales folded in,
// i16; float scales per block; integer mins; rows.cc) and run the tiles of prefill.cc: vpdpwssd, 32 multiply-adds an
// instruction where WebAssembly SIMD's i32x4.dot_i16x8_s does 8. Per block the integer sums are reduced exactly (i32
// where they fit, i64 for Q6_K's wider range) and the block's f32 term is added in block order.
#include "kernels.h"

#include "kernels-internal.h"

namespace latent {

using namespace detail;

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

static const int NATIVE_TYPES[] = {Q5_0, Q8_0, Q4_K, Q6_K};

const int* nativeTypes(int* count) {
  *count = LATENT_AVX512 ? int(sizeof(NATIVE_TYPES) / sizeof(NATIVE_TYPES[0])) : 0;
  return NATIVE_TYPES;
}

bool supportsType(int type) { return LATENT_AVX512 && (kClass(type) || c32Class(type)); }

#if LATENT_AVX512

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
        c32Rows(type, row, rowBytes, nr, a, AD + size_t(t) * nb, nb, out);
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
      q6kPieces(reinterpret_cast<const int16_t*>(base + aq + size_t(t) * aqRow), nb, pieces, sum32);
      for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        q6kRows(base + w + size_t(r) * rowBytes, rowBytes, nr, pieces, sum32, AD + size_t(t) * nb, nb, out);
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
      q4kPieces(reinterpret_cast<const int16_t*>(base + aq + size_t(t) * aqRow), nb, pieces);
      for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        q4kRows(base + w + size_t(r) * rowBytes, rowBytes, nr, pieces, AD + size_t(t) * nb, AS + size_t(t) * nb * 8, nb, out);
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
        if (!K) tile32(g, T, nb, out);
        else tile44(wide, g, T, nb, out);
        for (int i = 0; i < nr; i++)
          for (int k = 0; k < 4; k++) Y[size_t(t + k) * yStride + r + i] = out[i * 4 + k];
      }
      for (; t < t1; t++) {
        const uint8_t* a = base + aq + size_t(t) * aqRow;
        if (!K) dot32rows(g, nb, a, AD + size_t(t) * nb, out);
        else tile41(wide, g, a, AD + size_t(t) * nb, AS + size_t(t) * nb * 8, nb, out);
        for (int i = 0; i < nr; i++) Y[size_t(t) * yStride + r + i] = out[i];
      }
    }
  }
  return true;
}

#else  // no AVX-512: nothing runs here (supportsType is false); the WebAssembly kernels do the work

bool matmul(uint8_t*, int, uint32_t, uint32_t, int, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, int, int) { return false; }

#endif

}  // namespace latent
