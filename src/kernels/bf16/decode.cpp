// Decoding attention against bf16 rings (kernels/decode.h): scores = K q and out = V^T p as plain loops that widen
// each stored bf16 value (a 16-bit shift) in the vector registers; decoding at long context is bound by the bytes
// it reads, which bf16 halves. Single-threaded: the decoder runs heads in parallel.
#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/cpu/vexp.h"
#include "kernels/decode.h"

namespace aah::bf16 {

namespace {

inline float widen(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

// scores[j] = scale * q . k[j] for n rows of the ring from row `first`.
void ring_scores(float* scores, const float* q, const uint16_t* k, int first, int n, int D, float scale) {
  for (int j = 0; j < n; j++) {
    const uint16_t* row = k + int64_t(first + j) * D;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < D; d++) s += q[d] * widen(row[d]);
    scores[j] = s * scale;
  }
}

// out += sum_j p[j] v[j] over n rows of the ring from row `first`.
void ring_weighted_sum(float* out, const float* p, const uint16_t* v, int first, int n, int D) {
  for (int j = 0; j < n; j++) {
    const uint16_t* row = v + int64_t(first + j) * D;
    const float pj = p[j];
#pragma omp simd
    for (int d = 0; d < D; d++) out[d] += pj * widen(row[d]);
  }
}

}  // namespace

void attn_decode_forward(float* out, const float* q, const uint16_t* k, const uint16_t* v, int cap, int start, int n,
                         int D, float* scores) {
  const float scale = 1.0f / std::sqrt(float(D));
  const int n1 = std::min(n, cap - start), n2 = n - n1;  // before and after the ring's wrap
  ring_scores(scores, q, k, start, n1, D, scale);
  ring_scores(scores + n1, q, k, 0, n2, D, scale);
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) mx = std::max(mx, scores[j]);
  const float inv = 1.0f / cpu::vexp_shifted_sum(scores, scores, mx, n);
  for (int j = 0; j < n; j++) scores[j] *= inv;
  for (int d = 0; d < D; d++) out[d] = 0;
  ring_weighted_sum(out, scores, v, start, n1, D);
  ring_weighted_sum(out, scores + n1, v, 0, n2, D);
}

}  // namespace aah::bf16
