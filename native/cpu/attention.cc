// The attention kernels of kernels.as (attnAbsorbed, attnPrefill) for AVX-512, with the WebAssembly kernels' results
// bit for bit: each f32 sum is accumulated in the same order and the same lanes as there (a query's dot product in
// four lanes over i mod 4, added across lanes left to right; an output column over keys in order), and the softmax
// uses the same table-driven exp (exp-table.h) in f64. What changes is the width: four queries' lanes share a 512-bit
// register, several keys (or output columns) run at once, so the additions that must stay in order overlap.
#include <math.h>

#include "exp-table.h"
#include "kernels.h"
#include "simd.h"

#if LATENT_AVX512

namespace latent {
namespace {

using detail::bitCast;
inline double f64From(uint64_t u) { return bitCast<double>(u); }
inline uint64_t bitsOf(double d) { return bitCast<uint64_t>(d); }

/** AssemblyScript's NativeMath.exp (the table-driven exp of ARM's optimized routines, without FMA), operation by operation */
double expLut(double x) {
  const double InvLn2N = f64From(0x3FF71547652B82FEull) * 128;
  const double NegLn2hiN = f64From(0xBF762E42FEFA0000ull);
  const double NegLn2loN = f64From(0xBD0CF79ABC9E3B3Aull);
  const double shift = f64From(0x4338000000000000ull);
  const double C2 = f64From(0x3FDFFFFFFFFFFDBDull), C3 = f64From(0x3FC555555555543Cull);
  const double C4 = f64From(0x3FA55555CF172B91ull), C5 = f64From(0x3F81111167A4D017ull);
  const uint64_t ux = bitsOf(x);
  uint32_t abstop = uint32_t(ux >> 52) & 0x7ff;
  if (abstop - 0x3c9 >= 0x03f) {
    if (abstop - 0x3c9 >= 0x80000000u) return 1;
    if (abstop >= 0x409) {
      if (ux == 0xfff0000000000000ull) return 0;
      if (abstop >= 0x7ff) return 1.0 + x;
      return int64_t(ux) < 0 ? 0 : INFINITY;
    }
    abstop = 0;
  }
  const double z = InvLn2N * x;
  double kd = z + shift;
  const uint64_t ki = bitsOf(kd);
  kd -= shift;
  const double r = x + kd * NegLn2hiN + kd * NegLn2loN;
  const size_t idx = size_t((ki & 127) << 1);
  const uint64_t top = ki << 45;
  const double tail = f64From(EXP_TAB[idx]);
  uint64_t sbits = EXP_TAB[idx + 1] + top;
  const double r2 = r * r;
  const double tmp = tail + r + r2 * (C2 + r * C3) + r2 * r2 * (C4 + r * C5);
  if (abstop == 0) {
    // specialcase: results that may overflow or fall in the subnormal range
    if (!(ki & 0x80000000u)) {
      sbits -= uint64_t(1009) << 52;
      const double scale = f64From(sbits);
      return f64From(0x7F00000000000000ull) * (scale + scale * tmp);
    }
    sbits += uint64_t(1022) << 52;
    const double scale = f64From(sbits);
    double y = scale + scale * tmp;
    if (fabs(y) < 1.0) {
      const double one = copysign(1.0, y);
      double lo = scale - y + scale * tmp;
      const double hi = one + y;
      lo = one - hi + y + lo;
      y = (hi + lo) - one;
      if (y == 0.0) y = f64From(sbits & 0x8000000000000000ull);
    }
    return y * f64From(0x0010000000000000ull);
  }
  const double scale = f64From(sbits);
  return scale + scale * tmp;
}

/** WebAssembly's f32.max: NaN if either is, +0 over −0, else the larger */
inline float maxWasm(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == 0 && b == 0) return signbit(a) ? b : a;
  return a > b ? a : b;
}

/** kernels.as softmaxRow: in place over T values, f64 exp and sum, −∞ becomes 0 */
void softmaxRow(float* s, int T) {
  float mx = -INFINITY;
  for (int t = 0; t < T; t++) mx = maxWasm(mx, s[t]);
  double sum = 0;
  for (int t = 0; t < T; t++) {
    const double e = expLut(double(s[t] - mx));
    s[t] = float(e);
    sum += e;
  }
  const float inv = float(1 / sum);
  for (int t = 0; t < T; t++) s[t] = s[t] * inv;
}

/** hsum of a four-lane partial: ((l0 + l1) + l2) + l3 */
inline float hsum4(const float* l) { return ((l[0] + l[1]) + l[2]) + l[3]; }

/**
 * kernels.as dot4 for KB keys at once: out[k·4 + j] += (row_k · q_j) over n values, four lanes per query (i mod 4)
 * then the tail; Q4: the four queries interleaved per four values ([q0 i..i+3, q1 …, q2 …, q3 …] for each i).
 */
template <int KB>
inline void dot4Keys(const float* const* rows, const float* Q4, const float* const* q, int n, float* out) {
  __m512 acc[KB];
  for (int k = 0; k < KB; k++) acc[k] = _mm512_setzero_ps();
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m512 qv = _mm512_load_ps(Q4 + size_t(i) * 4);
    for (int k = 0; k < KB; k++) acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(rows[k] + i)), qv));
  }
  alignas(64) float l[16];
  for (int k = 0; k < KB; k++) {
    _mm512_store_ps(l, acc[k]);
    for (int j = 0; j < 4; j++) {
      float s = hsum4(l + 4 * j);
      for (int t = i; t < n; t++) s += rows[k][t] * q[j][t];
      out[k * 4 + j] += s;
    }
  }
}

/** kernels.as dotF: lanes i mod 8 (two f32x4 accumulators), added pairwise, then across, then the tail */
float dotF(const float* w, const float* x, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i)));
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  const float p[4] = {l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]};
  float s = hsum4(p);
  for (; i < n; i++) s += w[i] * x[i];
  return s;
}

/** kernels.as weighted2 for one or two probability rows: out[c] = Σ_t p_t·X_t[c], each column over t in order */
void weighted(const float* X, size_t xs, int T, int W, const float* pA, const float* pB, float* outA, float* outB) {
  constexpr int CB = 8;  // 16-column blocks at once: independent chains of additions
  int c = 0;
  for (; c + 16 * CB <= W; c += 16 * CB) {
    __m512 a[CB], b[CB];
    for (int k = 0; k < CB; k++) a[k] = b[k] = _mm512_setzero_ps();
    const float* row = X + c;
    for (int t = 0; t < T; t++, row += xs) {
      const __m512 pa = _mm512_set1_ps(pA[t]);
      const __m512 pb = _mm512_set1_ps(pB != nullptr ? pB[t] : 0.f);
      for (int k = 0; k < CB; k++) {
        const __m512 r = _mm512_loadu_ps(row + 16 * k);
        a[k] = _mm512_add_ps(a[k], _mm512_mul_ps(r, pa));
        if (pB != nullptr) b[k] = _mm512_add_ps(b[k], _mm512_mul_ps(r, pb));
      }
    }
    for (int k = 0; k < CB; k++) {
      _mm512_storeu_ps(outA + c + 16 * k, a[k]);
      if (pB != nullptr) _mm512_storeu_ps(outB + c + 16 * k, b[k]);
    }
  }
  for (; c + 16 <= W; c += 16) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    const float* row = X + c;
    for (int t = 0; t < T; t++, row += xs) {
      const __m512 r = _mm512_loadu_ps(row);
      a = _mm512_add_ps(a, _mm512_mul_ps(r, _mm512_set1_ps(pA[t])));
      if (pB != nullptr) b = _mm512_add_ps(b, _mm512_mul_ps(r, _mm512_set1_ps(pB[t])));
    }
    _mm512_storeu_ps(outA + c, a);
    if (pB != nullptr) _mm512_storeu_ps(outB + c, b);
  }
  for (; c < W; c++) {
    float sa = 0, sb = 0;
    for (int t = 0; t < T; t++) {
      const float x = X[size_t(t) * xs + c];
      sa += pA[t] * x;
      if (pB != nullptr) sb += pB[t] * x;
    }
    outA[c] = sa;
    if (pB != nullptr) outB[c] = sb;
  }
}

thread_local detail::Scratch scores;
thread_local detail::Scratch queries;

/** the g ≤ 4 queries' values interleaved per four (Q4 layout of dot4Keys), n values each; copies of query 0 pad g < 4 */
void interleave(const float* const* q, int n, float* Q4) {
  for (int i = 0; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; j++)
      for (int l = 0; l < 4; l++) Q4[size_t(i) * 4 + 4 * j + l] = q[j][i + l];
}

/**
 * kernels.as attendGroup: g ≤ 4 queries; query j sees keys u < nk0 + j·step. Key u = [A_u (L values, stride as) | B_u
 * (R values, stride bs)], query j = [QA + j·qas (L) | QB + j·qbs (R)]; value rows Vr_u (Vd values, stride vs); out_j at
 * out + j·os. False when the scratch cannot be allocated.
 */
bool attendGroup(const float* A, size_t as, const float* B, size_t bs, int L, int R, const float* QA, size_t qas, const float* QB,
                 size_t qbs, int g, int nk0, int step, float scale, const float* Vr, size_t vs, int Vd, float* out, size_t os) {
  const int T = nk0 + (g - 1) * step;
  float* sc = reinterpret_cast<float*>(scores.get((size_t(4) * T + 16) * 4));
  if (sc == nullptr) return false;
  if (g == 4) {
    float* Q4 = reinterpret_cast<float*>(queries.get((size_t(L + R) * 4 + 32) * 4));
    if (Q4 == nullptr) return false;
    const float* qa[4] = {QA, QA + qas, QA + 2 * qas, QA + 3 * qas};
    const float* qb[4] = {QB, QB + qbs, QB + 2 * qbs, QB + 3 * qbs};
    float* QA4 = Q4;
    float* QB4 = Q4 + ((size_t(L) * 4 + 15) & ~size_t(15));
    interleave(qa, L, QA4);
    interleave(qb, R, QB4);
    constexpr int KB = 4;
    int u = 0;
    for (; u < T; u += KB) {
      const int kb = T - u < KB ? T - u : KB;
      // keys past T repeat the last (their scores are dropped)
      const float* ra[KB];
      const float* rb[KB];
      for (int k = 0; k < KB; k++) {
        const int uk = u + (k < kb ? k : kb - 1);
        ra[k] = A + size_t(uk) * as;
        rb[k] = B + size_t(uk) * bs;
      }
      float tmp[KB * 4] = {};
      dot4Keys<KB>(ra, QA4, qa, L, tmp);
      dot4Keys<KB>(rb, QB4, qb, R, tmp);
      for (int k = 0; k < kb; k++)
        for (int j = 0; j < 4; j++) sc[size_t(j) * T + u + k] = u + k < nk0 + j * step ? tmp[k * 4 + j] * scale : -INFINITY;
    }
  } else {
    for (int u = 0; u < T; u++) {
      for (int j = 0; j < g; j++) {
        const float v = dotF(A + size_t(u) * as, QA + j * qas, L) + dotF(B + size_t(u) * bs, QB + j * qbs, R);
        sc[size_t(j) * T + u] = u < nk0 + j * step ? v * scale : -INFINITY;
      }
    }
  }
  for (int j = 0; j < g; j++) softmaxRow(sc + size_t(j) * T, T);
  int j = 0;
  for (; j + 2 <= g; j += 2) weighted(Vr, vs, T, Vd, sc + size_t(j) * T, sc + size_t(j + 1) * T, out + j * os, out + (j + 1) * os);
  if (j < g) weighted(Vr, vs, T, Vd, sc + size_t(j) * T, nullptr, out + j * os, nullptr);
  return true;
}

inline const float* F(uint8_t* base, uint32_t off) { return reinterpret_cast<const float*>(base + off); }

}  // namespace

bool attnAbsorbed(uint8_t* base, uint32_t C, uint32_t K, int T, int L, int R, uint32_t qc, uint32_t qp, int h0, int h1, float scale,
                  uint32_t out) {
  for (int h = h0; h < h1; h += 4) {
    const int g = h1 - h < 4 ? h1 - h : 4;
    if (!attendGroup(F(base, C), L, F(base, K), R, L, R, F(base, qc) + size_t(h) * L, L, F(base, qp) + size_t(h) * R, R, g, T, 0,
                     scale, F(base, C), L, L, reinterpret_cast<float*>(base + out) + size_t(h) * L, L))
      return false;
  }
  return true;
}

bool attnPrefill(uint8_t* base, uint32_t kNope, uint32_t kPe, uint32_t v, uint32_t q, int n, int pos0, int H, int P, int R, int V,
                 int h0, int h1, float scale, uint32_t out) {
  const int D = P + R;
  for (int h = h0; h < h1; h++)
    for (int i = 0; i < n; i += 4) {
      const int g = n - i < 4 ? n - i : 4;
      const float* qi = F(base, q) + size_t(i * H + h) * D;
      if (!attendGroup(F(base, kNope) + size_t(h) * P, size_t(H) * P, F(base, kPe), R, P, R, qi, size_t(H) * D, qi + P, size_t(H) * D, g,
                       pos0 + i + 1, 1, scale, F(base, v) + size_t(h) * V, size_t(H) * V, V,
                       reinterpret_cast<float*>(base + out) + size_t(i * H + h) * V, size_t(H) * V))
        return false;
    }
  return true;
}

}  // namespace latent

#else

namespace latent {
bool attnAbsorbed(uint8_t*, uint32_t, uint32_t, int, int, int, uint32_t, uint32_t, int, int, float, uint32_t) { return false; }
bool attnPrefill(uint8_t*, uint32_t, uint32_t, uint32_t, uint32_t, int, int, int, int, int, int, int, int, float, uint32_t) {
  return false;
}
}  // namespace latent

#endif
