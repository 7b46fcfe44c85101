// Gradients written in bf16 for the product that reads them (see bf16.h): the fp32 kernels' arithmetic, each value
// rounded once on the way out, instead of writing the fp32 gradient and rounding it in a second pass over memory
// (the product's own rounding of dout). The LM head's loss (dlogits, 4096 x 8192 on bench-c) and SwiGLU's backward
// (dh, 4096 x 1408 per layer) are the largest such operands of a step.

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/bf16/bf16.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

namespace aah::bf16 {

// cpu::crossentropy_forward_backward's loss; each row's exps stay in a per-thread row in cache, and one pass scales
// and rounds them.
void crossentropy_forward_backward(float* losses, uint16_t* dlogits, const float* logits, const int32_t* targets, int N,
                                   int V, float dscale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* l = logits + int64_t(n) * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    thread_local std::vector<float> row;  // exp(l - mx), grown once per thread
    if (int(row.size()) < V) row.resize(V);
    float* e = row.data();
    const float sum = cpu::vexp_shifted_sum(e, l, mx, V);
    losses[n] = mx + std::log(sum) - l[targets[n]];
    const float scale = dscale / sum;
    uint16_t* d = dlogits + int64_t(n) * V;
#pragma omp simd
    for (int i = 0; i < V; i++) d[i] = round(e[i] * scale);
    d[targets[n]] = round(e[targets[n]] * scale - dscale);  // the fp32 kernel's order: scaled, then the target's -1
  }
}

// cpu::swiglu_backward on blocks of rows into a per-thread fp32 block (in cache), then rounded. The fp32 kernel
// computes each row alone, so the values are its own.
void swiglu_backward(uint16_t* dh, const float* dout, const float* h, int N, int F) {
  constexpr int kRows = 16;
#pragma omp parallel for schedule(static)
  for (int n0 = 0; n0 < N; n0 += kRows) {
    const int rows = std::min(kRows, N - n0);
    thread_local std::vector<float> block;  // (kRows, 2F), grown once per thread
    if (block.size() < size_t(kRows) * 2 * F) block.resize(size_t(kRows) * 2 * F);
    cpu::swiglu_backward(block.data(), dout + int64_t(n0) * F, h + int64_t(n0) * 2 * F, rows, F);
    uint16_t* out = dh + int64_t(n0) * 2 * F;
#pragma omp simd
    for (int64_t i = 0; i < int64_t(rows) * 2 * F; i++) out[i] = round(block[i]);
  }
}

}  // namespace aah::bf16
