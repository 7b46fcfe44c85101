// The vectorized exp of every CPU kernel (softmax of logits, SiLU, attention, decoding). A Cephes-style polynomial
// after the range reduction x = n ln2 + r, |r| <= ln2/2; relative error about 2 ulp over the clamped range
// [-87.3, 88.7]. The scalar and AVX2 versions compute the same arithmetic, so tails of loops match their bodies.
//   vexp          exp(x), x clamped to [-87.3, 88.7]
//   vexp_masked   the same, but exactly 0 below kVexpZeroBelow (and for -inf and NaN): attention's masked scores
//                 (-inf) give probabilities that are exactly 0. Above it the two are the same, bit for bit.
//   vexp_masked_vec  vexp_masked on a Vec8 or Vec16 register (kernels/cpu/simd.h), for width-generic loops
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd.h"

namespace aah::cpu {

constexpr float kVexpZeroBelow = -87.0f;

inline float vexp_scalar(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r);
  p += 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

inline float vexp_masked_scalar(float x) {
  if (!(x >= kVexpZeroBelow)) return 0.0f;
  return vexp_scalar(x);
}

#ifdef AAH_AVX2
inline __m256 vexp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

inline __m256 vexp_masked_avx2(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(kVexpZeroBelow), _CMP_GE_OQ);
  return _mm256_and_ps(vexp_avx2(x), keep);
}
inline __m256 vexp_masked_vec(__m256 x) { return vexp_masked_avx2(x); }
#endif

#ifdef AAH_AVX512
// GCC 12's AVX-512 intrinsics pass an "undefined" vector that -Wmaybe-uninitialized reports (GCC bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The AVX2 arithmetic, 16 lanes wide: the same bits lane for lane.
inline __m512 vexp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

inline __m512 vexp_masked_vec(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kVexpZeroBelow), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(keep, vexp_avx512(x));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// out[i] = exp(x[i] - shift) (vexp, or vexp_masked when MASKED); returns the sum of the outputs, accumulated in a
// fixed order. out may be x.
template <bool MASKED = false>
inline float vexp_shifted_sum(float* out, const float* x, float shift, int n) {
  int i = 0;
  float sum = 0;
#ifdef AAH_AVX2
  __m256 acc = _mm256_setzero_ps();
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), s);
    const __m256 e = MASKED ? vexp_masked_avx2(d) : vexp_avx2(d);
    _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) sum += l;
#endif
  for (; i < n; i++) {
    out[i] = MASKED ? vexp_masked_scalar(x[i] - shift) : vexp_scalar(x[i] - shift);
    sum += out[i];
  }
  return sum;
}

}  // namespace aah::cpu
