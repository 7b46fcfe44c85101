// TEMPORARY placeholder (routes to the reference) until the dense-masked path lands; the attention helper
// replaces this file.
#include "kernels/ops.h"

namespace aah::cpu {
void attn_dense_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters) {
  ref::attn_local_forward<float>(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
}
void attn_dense_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters) {
  ref::attn_local_backward<float>(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
}
}  // namespace aah::cpu
