// Decoding attention (kernels/decode.h): the ring's two contiguous pieces (before and after the wrap), each a
// matrix-vector product, scores = K q then out = V^T p, with the vectorized exp in between. Single-threaded
// sgemv: the decoder runs heads in parallel (OpenBLAS runs one thread inside an OpenMP parallel region).
#include "kernels/decode.h"

#include <cblas.h>

#include "kernels/cpu/vexp.h"

namespace aah::cpu {

void attn_decode_forward(float* out, const float* q, const float* k, const float* v, int cap, int start, int n,
                         int D, float* scores) {
  const float scale = 1.0f / std::sqrt(float(D));
  const int n1 = std::min(n, cap - start), n2 = n - n1;
  cblas_sgemv(CblasRowMajor, CblasNoTrans, n1, D, scale, k + int64_t(start) * D, D, q, 1, 0.0f, scores, 1);
  if (n2 > 0) cblas_sgemv(CblasRowMajor, CblasNoTrans, n2, D, scale, k, D, q, 1, 0.0f, scores + n1, 1);
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) mx = std::max(mx, scores[j]);
  const float inv = 1.0f / vexp_shifted_sum(scores, scores, mx, n);
  cblas_sgemv(CblasRowMajor, CblasTrans, n1, D, inv, v + int64_t(start) * D, D, scores, 1, 0.0f, out, 1);
  if (n2 > 0) cblas_sgemv(CblasRowMajor, CblasTrans, n2, D, inv, v, D, scores + n1, 1, 1.0f, out, 1);
}

}  // namespace aah::cpu
