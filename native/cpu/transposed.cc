// The transposed product of kernels.as (f32 activations; prefill's W_UK), with its result bits.
#include "kernels.h"

#include "kernels-internal.h"

namespace latent {

using namespace detail;

#if LATENT_AVX512

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

#else

bool matmulT(uint8_t*, int, uint32_t, uint32_t, int, int, int, int, uint32_t, int, uint32_t, int) { return false; }

#endif

}  // namespace latent
