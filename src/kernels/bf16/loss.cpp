// The loss of a bf16 backend's LM head (see bf16.h): cpu::crossentropy_forward_backward's arithmetic, its gradient
// written straight in bf16, the operand the LM head's backward products read. One pass over each row's exps (in a
// per-thread row that stays in cache) scales and rounds them, instead of writing the (N, V) fp32 gradient and then
// rounding it in a second pass: the largest conversion of a step (33.5M values on bench-c).

#include <cmath>
#include <vector>

#include "kernels/bf16/bf16.h"
#include "kernels/cpu/vexp.h"

namespace aah::bf16 {

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

}  // namespace aah::bf16
