// The vectorized exp (and one log) of every CPU kernel (softmax of logits, SiLU, attention, decoding). vexp: a
// Cephes-style polynomial after the range reduction x = n ln2 + r, |r| <= ln2/2; relative error about 2 ulp over the
// clamped range [-87.3, 88.7]. The scalar and AVX2 versions compute the same arithmetic, so tails of loops match
// their bodies.
//   vexp          exp(x), x clamped to [-87.3, 88.7]
//   vexp_masked   the same, but exactly 0 below kVexpZeroBelow (and for -inf and NaN): attention's masked scores
//                 (-inf) give probabilities that are exactly 0. Above it the two are the same, bit for bit.
//   vexp_vec<V>      vexp on a Vec8 or Vec16 register (kernels/cpu/simd.h)
//   vexp_masked_vec  vexp_masked on an 8- or 16-wide register, for width-generic loops
//   vexp_masked_le_vec<V>  vexp_masked_vec for x <= 88 only (the same bits there): attention's softmax, whose
//                 arguments are score - max <= 0. Fewer instructions (see there).
//   vexp_short    exp(x) for x <= 0 within 2^-16 relative, 0 where masked: a shorter polynomial for values that are
//                 rounded to bf16 next (the bf16 attention's probabilities); scalar and AVX-512, the same bits.
//   vlog_vec      log(x), 16 at a time (AVX-512), within 2^-21 relative: the bf16 attention's log-sum-exp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

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
// The range reduction and polynomial of vexp_scalar on a vector of V (Vec8 or Vec16), lane for lane (same bits),
// for an x already clamped or known to be in range: returns p with exp(x) = p 2^n, and n.
template <class V>
inline typename V::T vexp_poly(typename V::T x, typename V::T& n) {
  using T = typename V::T;
  n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  T r = V::fmadd(n, V::set1(-0.693359375f), x);
  r = V::fmadd(n, V::set1(2.12194440e-4f), r);
  T p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), r);
  return V::add(p, V::set1(1.0f));
}
// The scalar arithmetic on a vector of V, lane for lane: the same bits.
template <class V>
inline typename V::T vexp_vec(typename V::T x) {
  typename V::T n;
  const typename V::T p = vexp_poly<V>(V::min(V::max(x, V::set1(-87.3f)), V::set1(88.7f)), n);
  return V::mul(p, V::pow2(n));
}
inline __m256 vexp_masked_vec(__m256 x) { return Vec8::keep_ge(vexp_vec<Vec8>(x), x, kVexpZeroBelow); }
#endif
#ifdef AAH_AVX512
inline __m512 vexp_masked_vec(__m512 x) { return Vec16::keep_ge(vexp_vec<Vec16>(x), x, kVexpZeroBelow); }
#endif
#ifdef AAH_AVX2
// vexp_masked_vec without its clamps, for x <= 88: a lane that is kept (x >= kVexpZeroBelow) lies inside the clamp
// range, so clamping does not change it, and a lane below it is zeroed whatever its arithmetic gave (inf, NaN).
// 2^n by V::mul_pow2 (AVX-512: vscalefps, the same rounding as the multiply by 2^n while n <= 127, i.e. x < 88.37).
// Checked over all 2^32 floats: the same bits as vexp_masked_vec for every x <= 88, both widths (the test
// Kernels.ExpSoftmaxVariantSameBitsUpTo88 samples them). Above 88 the two may differ; attention never calls it there.
template <class V>
inline typename V::T vexp_masked_le_vec(typename V::T x) {
  typename V::T n;
  const typename V::T p = vexp_poly<V>(x, n);
  return V::keep_ge(V::mul_pow2(p, n), x, kVexpZeroBelow);
}
#endif

// vexp_short: exp(x) for x <= 0 within 2^-16 relative (about 5 times fewer correct bits than vexp), 0 below
// kVexpZeroBelow and for -inf and NaN: for values rounded to bf16 (2^-9) before they are used, the bf16 attention
// kernel's probabilities. x log2(e) = n + f, |f| <= 1/2; 2^f by a degree-4 polynomial (minimax in relative error
// on [-1/2, 1/2]: 3e-6), 2^n exact; the rounding of x log2(e) adds up to 5e-6 at x = -87. Four multiply-adds
// where vexp has eight. The scalar and vector versions compute the same arithmetic (the same bits).
constexpr float kExpShortC[5] = {0.99999922514f, 0.69311976433f, 0.24024742842f, 0.05593143031f, 0.00957466196f};
inline float vexp_short_scalar(float x) {
  if (!(x >= kVexpZeroBelow)) return 0.0f;
  const float t = x * 1.44269504088896341f, n = std::nearbyint(t), f = t - n;
  float p = kExpShortC[4];
  for (int i = 3; i >= 0; i--) p = std::fma(p, f, kExpShortC[i]);
  return std::ldexp(p, int(n));
}
#ifdef AAH_AVX512
inline __m512 vexp_short_vec(__m512 x) {
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = Vec16::round(t), f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(kExpShortC[4]);
  for (int i = 3; i >= 0; i--) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExpShortC[i]));
  const __mmask16 kept = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kVexpZeroBelow), _CMP_GE_OQ);
  return _mm512_maskz_scalef_ps(kept, p, n);
}
#endif

#ifdef AAH_AVX512
AAH_AVX512_WARNINGS_OFF
// log(x) for a normal x > 0, within 2^-21 relative where |log x| >= 2^-4 and 2^-26 absolute nearer x = 1 (tested
// against log in double): x = 2^e m, m in [3/4, 3/2); log m = 2 atanh(s), s = (m - 1) / (m + 1) in [-1/7, 1/5], by
// its series to s^9 (the next term is below 2^-26 of log m). The bf16 attention's log-sum-exp, 16 rows at a time.
inline __m512 vlog_vec(__m512 x) {
  const __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_zero), one = _mm512_set1_ps(1.0f);
  __m512 e = _mm512_getexp_ps(x);  // floor(log2 x); one more where the mantissa was halved into [3/4, 1)
  e = _mm512_mask_add_ps(e, _mm512_cmp_ps_mask(m, one, _CMP_LT_OQ), e, one);
  const __m512 s = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one)), s2 = _mm512_mul_ps(s, s);
  __m512 p = _mm512_set1_ps(2.0f / 9);
  for (const float c : {2.0f / 7, 2.0f / 5, 2.0f / 3, 2.0f}) p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(c));
  // e ln2 split in two (ln2's high part has 12 bits: e ln2_hi is exact for |e| < 2^11)
  const __m512 lo = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), _mm512_mul_ps(p, s));
  return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), lo);
}
AAH_AVX512_WARNINGS_ON
#endif

// out[i] = exp(x[i] - shift) (vexp, or vexp_masked when MASKED); returns the sum of the outputs, accumulated in a
// fixed order: 8 partial sums (element i into sum i % 8) over the whole blocks of 8, added in order, then the tail.
// The AVX2 path keeps the partial sums in a register and the portable path in an array: the same bits (one serial
// sum over a 50,000-word vocabulary was off by up to 3e-5, relative, in the tests). out may be x.
template <bool MASKED = false>
inline float vexp_shifted_sum(float* out, const float* x, float shift, int n) {
  auto exp1 = [shift](float v) { return MASKED ? vexp_masked_scalar(v - shift) : vexp_scalar(v - shift); };
  int i = 0;
  alignas(32) float lanes[8] = {};
#ifdef AAH_AVX2
  __m256 acc = _mm256_setzero_ps();
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), s);
    const __m256 e = MASKED ? vexp_masked_vec(d) : vexp_vec<Vec8>(d);
    _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  _mm256_store_ps(lanes, acc);
#else
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) {
      out[i + j] = exp1(x[i + j]);
      lanes[j] += out[i + j];
    }
#endif
  float sum = 0;
  for (float l : lanes) sum += l;
  for (; i < n; i++) {
    out[i] = exp1(x[i]);
    sum += out[i];
  }
  return sum;
}

}  // namespace aah::cpu
