// Tile products for the tiled attention kernel (kernels/cpu/attention.cpp): C (M, N) = [C or diag(rs) C or 0] + A B
// on tiles that fit in L1, with A(r, k) = A[r rsa + k ksa] (read by broadcasts), B(k, c) = B[k ldb + c] and
// C(r, c) = C[r ldc + c]. Each C element is one FMA chain over k = 0 .. K-1, in ascending k, whatever the
// blocking: results do not depend on M, N or the thread that runs them. A register-blocked AVX2 micro-kernel
// (MR rows x NV 8-wide vectors) covers full 8-column panels; a scalar FMA loop covers the rest (and everything
// without AVX2).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace aah::cpu {

enum TileGemmMode { kSet, kAdd, kScaleAdd };

// The k range [lo, hi) that a block of rows [r0, r1) x columns [c0, c1) needs: a Range is a callable
// (r0, r1, c0, c1) -> TileRange. Attention's boundary tiles pass band ranges (kernels/cpu/attention.cpp), so the
// parts of a tile that no visible pair touches are not computed: an empty range skips the block (kSet and kAdd
// leave C as it is, kScaleAdd only rescales).
struct TileRange {
  int lo, hi;
};
struct TileFullRange {
  int K;
  TileRange operator()(int, int, int, int) const { return {0, K}; }
};

#ifdef AAH_AVX2
template <int MR, int NV, int MODE>
inline void tile_gemm_ukernel(int K, const float* A, int64_t rsa, int64_t ksa, const float* Bm, int64_t ldb,
                              float* C, int64_t ldc, const float* rs) {
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) {
      if constexpr (MODE == kSet)
        acc[r][v] = _mm256_setzero_ps();
      else if constexpr (MODE == kAdd)
        acc[r][v] = _mm256_loadu_ps(C + r * ldc + 8 * v);
      else
        acc[r][v] = _mm256_mul_ps(_mm256_set1_ps(rs[r]), _mm256_loadu_ps(C + r * ldc + 8 * v));
    }
  for (int k = 0; k < K; k++) {
    __m256 b[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) b[v] = _mm256_loadu_ps(Bm + k * ldb + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      const __m256 a = _mm256_broadcast_ss(A + r * rsa + k * ksa);
#pragma GCC unroll 16
      for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(C + r * ldc + 8 * v, acc[r][v]);
}

// Rows left over after the MR-row blocks: one kernel instantiation per remainder.
template <int R, int NV, int MODE>
inline void tile_gemm_ukernel_tail(int rem, int K, const float* A, int64_t rsa, int64_t ksa, const float* Bm,
                                   int64_t ldb, float* C, int64_t ldc, const float* rs) {
  if constexpr (R > 0) {
    if (rem == R)
      tile_gemm_ukernel<R, NV, MODE>(K, A, rsa, ksa, Bm, ldb, C, ldc, rs);
    else
      tile_gemm_ukernel_tail<R - 1, NV, MODE>(rem, K, A, rsa, ksa, Bm, ldb, C, ldc, rs);
  }
}
#endif

#ifdef AAH_AVX2
// All M rows of the column panel [c0, c0 + 8 NV) (its B panel stays in L1 while the row blocks stream).
// Returns the multiply-adds executed.
template <int MR, int NV, int MODE, class Range>
inline uint64_t tile_gemm_panel(int M, int c0, const float* A, int64_t rsa, int64_t ksa, const float* Bm,
                                int64_t ldb, float* C, int64_t ldc, const float* rs, const Range& range) {
  uint64_t macs = 0;
  for (int r = 0; r < M; r += MR) {
    const int mr = std::min(MR, M - r);
    TileRange k = range(r, r + mr, c0, c0 + 8 * NV);
    if (k.hi <= k.lo) {
      if (MODE != kScaleAdd) continue;
      k.hi = k.lo;
    }
    const float* a = A + r * rsa + k.lo * ksa;
    const float* b = Bm + c0 + k.lo * ldb;
    float* cp = C + r * ldc + c0;
    const float* rr = MODE == kScaleAdd ? rs + r : rs;
    if (mr == MR)
      tile_gemm_ukernel<MR, NV, MODE>(k.hi - k.lo, a, rsa, ksa, b, ldb, cp, ldc, rr);
    else
      tile_gemm_ukernel_tail<MR - 1, NV, MODE>(mr, k.hi - k.lo, a, rsa, ksa, b, ldb, cp, ldc, rr);
    macs += (uint64_t)mr * 8 * NV * (k.hi - k.lo);
  }
  return macs;
}
#endif

// C (M, N) = [C or diag(rs) C or 0] + A B over the k ranges `range` gives; returns the multiply-adds executed.
template <int MODE, class Range>
uint64_t tile_gemm(int M, int N, const float* A, int64_t rsa, int64_t ksa, const float* Bm, int64_t ldb, float* C,
                   int64_t ldc, const float* rs, const Range& range) {
  int c = 0;
  uint64_t macs = 0;
#ifdef AAH_AVX2
  // 6 rows x 2 vectors = 12 accumulators (+ 2 B vectors + 1 broadcast = 15 of the 16 ymm registers): 8 loads
  // per 12 FMAs and enough independent FMAs in flight to hide their latency.
  for (; c + 16 <= N; c += 16) macs += tile_gemm_panel<6, 2, MODE>(M, c, A, rsa, ksa, Bm, ldb, C, ldc, rs, range);
  for (; c + 8 <= N; c += 8) macs += tile_gemm_panel<8, 1, MODE>(M, c, A, rsa, ksa, Bm, ldb, C, ldc, rs, range);
#endif
  for (; c < N; c++)  // portable path, and columns left over when N is not a multiple of 8
    for (int r = 0; r < M; r++) {
      const TileRange k = range(r, r + 1, c, c + 1);
      if (k.hi <= k.lo && MODE != kScaleAdd) continue;
      float acc = MODE == kSet ? 0.0f : MODE == kAdd ? C[r * ldc + c] : rs[r] * C[r * ldc + c];
      for (int j = k.lo; j < k.hi; j++) acc = std::fma(A[r * rsa + j * ksa], Bm[j * ldb + c], acc);
      C[r * ldc + c] = acc;
      macs += std::max(0, k.hi - k.lo);
    }
  return macs;
}

}  // namespace aah::cpu
