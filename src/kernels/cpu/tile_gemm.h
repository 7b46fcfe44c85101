// Tile products for the tiled attention kernel (kernels/cpu/attention.cpp): C (M, N) = [C or diag(rs) C or 0] + A B
// on tiles that fit in L1, with A(r, k) = A[r rsa + k ksa] (read by broadcasts), B(k, c) = B[k ldb + c] and
// C(r, c) = C[r ldc + c]. Each C element is one FMA chain over k = 0 .. K-1, in ascending k, whatever the
// blocking: results do not depend on M, N, the vector width or the thread that runs them. A register-blocked
// micro-kernel (MR rows x NV vectors; 16-wide with AVX-512, else 8-wide with AVX2) covers whole column panels; a
// scalar FMA loop covers the rest (and everything without AVX2).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/check.h"
#include "kernels/cpu/simd.h"

namespace aah::cpu {

// kSet: C = A B; kAdd: C += A B; kScaleAdd: C = diag(rs) C + A B; kInit: C = A B where blocks that the range
// skips are set to 0 (kSet leaves them as they were), so that C needs no zeroing before a first, banded product.
enum TileGemmMode { kSet, kAdd, kScaleAdd, kInit };

// The k range [lo, hi) that a block of rows [r0, r1) x columns [c0, c1) needs: a Range is a callable
// (r0, r1, c0, c1) -> TileRange. Attention's boundary tiles pass band ranges (kernels/cpu/attention.cpp), so the
// parts of a tile that no visible pair touches are not computed: an empty range skips the block (kSet and kAdd
// leave C as it is, kScaleAdd only rescales, kInit zeroes it).
struct TileRange {
  int lo, hi;
};
// The most rows any band-range block has (every MR below): a block's k range is the union of its rows' ranges, so
// it reads at most kTileMaxBlockRows - 1 entries of A past either end of a row's own range.
constexpr int kTileMaxBlockRows = 8;
struct TileFullRange {
  int K;
  TileRange operator()(int, int, int, int) const { return {0, K}; }
};

// An epilogue sees a micro-kernel's accumulators before they are stored: apply<V, MR, NV>(acc, r, c) for the block
// whose first row is r and first column c (of C). Attention fuses its softmax passes into the score products this
// way (kernels/cpu/attention.cpp). Epilogues run in the vector micro-kernels only: a product that passes one needs
// AVX2 and N a multiple of 8. A block that the range skips runs no epilogue (its C is left as it was).
struct TileNoEpilogue {
  template <class V, int MR, int NV>
  void apply(typename V::T (&)[MR][NV], int, int) const {}
};

#ifdef AAH_AVX2
// MR rows x NV vectors of C, one FMA chain per element over k.
template <class V, int MR, int NV, int MODE, class Epi>
inline void tile_gemm_ukernel(int K, const float* A, int64_t rsa, int64_t ksa, const float* Bm, int64_t ldb,
                              float* C, int64_t ldc, const float* rs, const Epi& epi, int er, int ec) {
  constexpr int w = V::kWidth;
  typename V::T acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) {
      if constexpr (MODE == kSet || MODE == kInit)
        acc[r][v] = V::zero();
      else if constexpr (MODE == kAdd)
        acc[r][v] = V::load(C + r * ldc + w * v);
      else
        acc[r][v] = V::mul(V::set1(rs[r]), V::load(C + r * ldc + w * v));
    }
  for (int k = 0; k < K; k++) {
    typename V::T b[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) b[v] = V::load(Bm + k * ldb + w * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      const typename V::T a = V::set1(A[r * rsa + k * ksa]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; v++) acc[r][v] = V::fmadd(a, b[v], acc[r][v]);
    }
  }
  epi.template apply<V, MR, NV>(acc, er, ec);
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) V::store(C + r * ldc + w * v, acc[r][v]);
}

// Rows left over after the MR-row blocks: one kernel instantiation per remainder.
template <class V, int R, int NV, int MODE, class Epi>
inline void tile_gemm_ukernel_tail(int rem, int K, const float* A, int64_t rsa, int64_t ksa, const float* Bm,
                                   int64_t ldb, float* C, int64_t ldc, const float* rs, const Epi& epi, int er,
                                   int ec) {
  if constexpr (R > 0) {
    if (rem == R)
      tile_gemm_ukernel<V, R, NV, MODE>(K, A, rsa, ksa, Bm, ldb, C, ldc, rs, epi, er, ec);
    else
      tile_gemm_ukernel_tail<V, R - 1, NV, MODE>(rem, K, A, rsa, ksa, Bm, ldb, C, ldc, rs, epi, er, ec);
  }
}

// One block: rows [r, r + mr) (mr <= MR) x columns [c0, c0 + width NV) over the k range k. An empty range skips
// the block (kScaleAdd only rescales it, kInit zeroes it). Returns the multiply-adds executed.
template <class V, int MR, int NV, int MODE, class Epi>
inline uint64_t tile_gemm_block(int r, int mr, int c0, TileRange k, const float* A, int64_t rsa, int64_t ksa,
                                const float* Bm, int64_t ldb, float* C, int64_t ldc, const float* rs,
                                const Epi& epi) {
  static_assert(MR <= kTileMaxBlockRows);
  if (k.hi <= k.lo) {
    if (MODE != kScaleAdd && MODE != kInit) return 0;
    k.hi = k.lo;
  }
  const float* a = A + r * rsa + k.lo * ksa;
  const float* b = Bm + c0 + k.lo * ldb;
  float* cp = C + r * ldc + c0;
  const float* rr = MODE == kScaleAdd ? rs + r : rs;
  if (mr == MR)
    tile_gemm_ukernel<V, MR, NV, MODE>(k.hi - k.lo, a, rsa, ksa, b, ldb, cp, ldc, rr, epi, r, c0);
  else
    tile_gemm_ukernel_tail<V, MR - 1, NV, MODE>(mr, k.hi - k.lo, a, rsa, ksa, b, ldb, cp, ldc, rr, epi, r, c0);
  return (uint64_t)mr * V::kWidth * NV * (k.hi - k.lo);
}

// All M rows of the column panel [c0, c0 + width NV) (its B panel stays in L1 while the row blocks stream).
template <class V, int MR, int NV, int MODE, class Range, class Epi>
inline uint64_t tile_gemm_panel(int M, int c0, const float* A, int64_t rsa, int64_t ksa, const float* Bm,
                                int64_t ldb, float* C, int64_t ldc, const float* rs, const Range& range,
                                const Epi& epi) {
  uint64_t macs = 0;
  for (int r = 0; r < M; r += MR) {
    const int mr = std::min(MR, M - r);
    macs += tile_gemm_block<V, MR, NV, MODE>(r, mr, c0, range(r, r + mr, c0, c0 + V::kWidth * NV), A, rsa, ksa, Bm,
                                             ldb, C, ldc, rs, epi);
  }
  return macs;
}

// A two-vector panel whose blocks keep one-vector granularity: a row block runs as one MR x 2 block where both
// halves need the same k range (whole tiles, ranges that depend on rows only, score blocks inside the band), else
// as two MR x 1 blocks with their own ranges (score blocks on a band's edge, where one half may be skipped). The
// work of one-vector blocks at the speed of two-vector ones.
template <class V, int MR, int MODE, class Range, class Epi>
inline uint64_t tile_gemm_panel_split(int M, int c0, const float* A, int64_t rsa, int64_t ksa, const float* Bm,
                                      int64_t ldb, float* C, int64_t ldc, const float* rs, const Range& range,
                                      const Epi& epi) {
  constexpr int w = V::kWidth;
  uint64_t macs = 0;
  for (int r = 0; r < M; r += MR) {
    const int mr = std::min(MR, M - r);
    const TileRange a = range(r, r + mr, c0, c0 + w), b = range(r, r + mr, c0 + w, c0 + 2 * w);
    if (a.lo == b.lo && a.hi == b.hi) {
      macs += tile_gemm_block<V, MR, 2, MODE>(r, mr, c0, a, A, rsa, ksa, Bm, ldb, C, ldc, rs, epi);
    } else {
      macs += tile_gemm_block<V, MR, 1, MODE>(r, mr, c0, a, A, rsa, ksa, Bm, ldb, C, ldc, rs, epi);
      macs += tile_gemm_block<V, MR, 1, MODE>(r, mr, c0 + w, b, A, rsa, ksa, Bm, ldb, C, ldc, rs, epi);
    }
  }
  return macs;
}
#endif

// C (M, N) = [C or diag(rs) C or 0] + A B over the k ranges `range` gives; returns the multiply-adds executed.
template <int MODE, class Range, class Epi = TileNoEpilogue>
uint64_t tile_gemm(int M, int N, const float* A, int64_t rsa, int64_t ksa, const float* Bm, int64_t ldb, float* C,
                   int64_t ldc, const float* rs, const Range& range, const Epi& epi = {}) {
  int c = 0;
  uint64_t macs = 0;
#ifdef AAH_AVX512
  // 32 zmm registers: blocks of 8 rows x 2 vectors (16 accumulators, 10 loads per 16 FMAs), split into two 8 x 1
  // blocks on a band's edge, so that the blocks straddling it stay as narrow as AVX2's.
  for (; c + 32 <= N; c += 32)
    macs += tile_gemm_panel_split<Vec16, 8, MODE>(M, c, A, rsa, ksa, Bm, ldb, C, ldc, rs, range, epi);
  for (; c + 16 <= N; c += 16)
    macs += tile_gemm_panel<Vec16, 8, 1, MODE>(M, c, A, rsa, ksa, Bm, ldb, C, ldc, rs, range, epi);
#endif
#ifdef AAH_AVX2
  // 6 rows x 2 vectors = 12 accumulators (+ 2 B vectors + 1 broadcast = 15 of the 16 ymm registers): 8 loads
  // per 12 FMAs and enough independent FMAs in flight to hide their latency.
  for (; c + 16 <= N; c += 16)
    macs += tile_gemm_panel<Vec8, 6, 2, MODE>(M, c, A, rsa, ksa, Bm, ldb, C, ldc, rs, range, epi);
  for (; c + 8 <= N; c += 8)
    macs += tile_gemm_panel<Vec8, 8, 1, MODE>(M, c, A, rsa, ksa, Bm, ldb, C, ldc, rs, range, epi);
#endif
  // portable path, and columns left over when N is not a multiple of 8 (never with an epilogue)
  if constexpr (!std::is_same_v<Epi, TileNoEpilogue>) AAH_CHECK(c == N, "tile_gemm: an epilogue needs the vector path");
  for (; c < N; c++)
    for (int r = 0; r < M; r++) {
      const TileRange k = range(r, r + 1, c, c + 1);
      if (k.hi <= k.lo && MODE != kScaleAdd && MODE != kInit) continue;
      float acc = MODE == kSet || MODE == kInit ? 0.0f : MODE == kAdd ? C[r * ldc + c] : rs[r] * C[r * ldc + c];
      for (int j = k.lo; j < k.hi; j++) acc = std::fma(A[r * rsa + j * ksa], Bm[j * ldb + c], acc);
      C[r * ldc + c] = acc;
      macs += std::max(0, k.hi - k.lo);
    }
  return macs;
}

}  // namespace aah::cpu
