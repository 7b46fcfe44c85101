// Matrix products whose bits depend on the shape alone, never on the thread count.
//
// OpenBLAS splits a product among its threads, and with some of its kernels (Haswell, Zen: the ones Debian's
// OpenBLAS picks on AMD CPUs and on every CPU where OPENBLAS_CORETYPE=Haswell) the result depends on that split:
// measured 2026-12-03 on an AMD EPYC family 26, one against two threads changed 4-11% of the outputs of
// (128..4096) x 48..256 x 1024 products, by up to 5e-5; SkylakeX's kernels did not. So every product here is cut
// into output tiles of a size fixed by the shape, and each tile is one single-threaded OpenBLAS call (OpenBLAS's
// OpenMP build runs one thread inside an active parallel region, and when omp_get_max_threads() is 1). Measured
// against OpenBLAS's own threading on the training step's shapes (2 threads): 0.92-1.15x its time per product.
#pragma once

namespace aah::cpu {

// C (M, N) = alpha op(A) op(B) + beta C, row-major; op(A) is (M, K), op(B) (K, N); trans_a / trans_b: A is stored
// (K, M) / B is stored (N, K).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);

// y (M) = alpha op(A) x + beta y, row-major A (M, K) (trans_a: A is stored (K, M)).
void gemv(bool trans_a, int M, int K, float alpha, const float* A, int lda, const float* x, float beta, float* y);

}  // namespace aah::cpu
