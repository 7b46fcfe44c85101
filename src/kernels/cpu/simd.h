// AAH_AVX2: the AVX2 + FMA paths of the CPU kernels are compiled in (the release build's -march=native on a CPU
// that has them); without it every kernel takes its portable scalar path.
#pragma once
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AAH_AVX2 1
#endif
// AAH_AVX512: the 16-wide tile products (kernels/cpu/tile_gemm.h) are compiled in as well.
#if defined(AAH_AVX2) && defined(__AVX512F__)
#define AAH_AVX512 1
#endif

namespace aah::cpu {
#ifdef AAH_AVX2
// The vector types of the tile products (kernels/cpu/tile_gemm.h) and the softmax loops of attention: 8 floats
// (AVX2) and, where the CPU has it, 16 (AVX-512). Every operation is per lane and rounds once, so both widths
// give the same bits for every element.
struct Vec8 {
  using T = __m256;
  static constexpr int kWidth = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T iota() { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }  // lane i holds i
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T x) { _mm256_storeu_ps(p, x); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T fmsub(T a, T b, T c) { return _mm256_fmsub_ps(a, b, c); }
  static T round(T x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integer-valued n in [-126, 127], built from the exponent bits
  static T pow2(T n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  // p 2^n, rounded once, for integer-valued n in [-126, 127]
  static T mul_pow2(T p, T n) { return mul(p, pow2(n)); }
  // a where x >= bound (false for NaN), else 0
  static T keep_ge(T a, T x, float bound) {
    return _mm256_and_ps(a, _mm256_cmp_ps(x, _mm256_set1_ps(bound), _CMP_GE_OQ));
  }
};
#endif
#ifdef AAH_AVX512
// GCC 12's AVX-512 intrinsics pass an "undefined" vector that -W(maybe-)uninitialized reports (GCC bug 105593):
// code that calls them sits between AAH_AVX512_WARNINGS_OFF and AAH_AVX512_WARNINGS_ON.
#if defined(__clang__)
#define AAH_AVX512_WARNINGS_OFF
#define AAH_AVX512_WARNINGS_ON
#else
#define AAH_AVX512_WARNINGS_OFF                                                              \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define AAH_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")
#endif
AAH_AVX512_WARNINGS_OFF
struct Vec16 {
  using T = __m512;
  static constexpr int kWidth = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T iota() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T x) { _mm512_storeu_ps(p, x); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T fmsub(T a, T b, T c) { return _mm512_fmsub_ps(a, b, c); }
  static T round(T x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T pow2(T n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static T mul_pow2(T p, T n) { return _mm512_scalef_ps(p, n); }  // one instruction instead of four
  static T keep_ge(T a, T x, float bound) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(bound), _CMP_GE_OQ), a);
  }
};
AAH_AVX512_WARNINGS_ON
#endif
}  // namespace aah::cpu
