// Tiled matrix products, see gemm.h.
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace aah::cpu {

namespace {

// The tile of an (M, N) output: whole rows in 256-row bands for the tall products of a step (tokens x channels:
// the packed B is shared by the band's rows), 128 x 128 squares otherwise (the weight gradients, channels x
// channels, which need both dimensions cut to give every core work). A function of the shape only.
struct Tile {
  int rows, cols;
};
Tile gemm_tile(int M, int N) { return M >= 1024 ? Tile{256, N} : Tile{128, 128}; }

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const Tile t = gemm_tile(M, N);
  const int mt = (M + t.rows - 1) / t.rows, nt = (N + t.cols - 1) / t.cols;
  // Always an active parallel region (when there are threads), even for one tile: inside it OpenBLAS runs one
  // thread, so a lone tile is computed the same way as when it shares the team.
#pragma omp parallel for schedule(dynamic, 1)
  for (int tile = 0; tile < mt * nt; tile++) {
    const int i = (tile / nt) * t.rows, j = (tile % nt) * t.cols;
    const int m = std::min(t.rows, M - i), n = std::min(t.cols, N - j);
    const float* a = trans_a ? A + i : A + int64_t(i) * lda;
    const float* b = trans_b ? B + int64_t(j) * ldb : B + j;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, K,
                alpha, a, lda, b, ldb, beta, C + int64_t(i) * ldc + j, ldc);
  }
}

void gemv(bool trans_a, int M, int K, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  if (M <= 0) return;
  constexpr int kRows = 256;  // output rows per single-threaded call
  const int nt = (M + kRows - 1) / kRows;
#pragma omp parallel for schedule(static)
  for (int tile = 0; tile < nt; tile++) {
    const int i = tile * kRows, m = std::min(kRows, M - i);
    if (trans_a)  // y[i..] = alpha A[:, i..]^T x: A stored (K, M), columns i .. i+m
      cblas_sgemv(CblasRowMajor, CblasTrans, K, m, alpha, A + i, lda, x, 1, beta, y + i, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasNoTrans, m, K, alpha, A + int64_t(i) * lda, lda, x, 1, beta, y + i, 1);
  }
}

}  // namespace aah::cpu
