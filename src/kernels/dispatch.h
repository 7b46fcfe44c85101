// One seam per backend: attention is dispatched here, by an implementation tag chosen once (from aah.attention;
// ref for Model<double> and tests). A new backend (cuda) is one more AttnImpl case here and in dispatch.cpp, plus
// the buffers it owns. The other ops are routed by element type in kernels/ops.h.
//
// Arguments as attn_local_forward / attn_local_backward (kernels/ops.h): q (B, H, T, D), k v (B, Hkv, T, D),
// window (H) with 1 <= W <= T; out (B, H, T, D), lse (B, H, T).
#pragma once
#include <string>

#include "kernels/attention_common.h"

namespace aah {

enum class AttnImpl {
  local,  // tiled, skips the work the windows mask (kernels/cpu/attention.cpp); float
  dense,  // T x T scores plus the window mask, the paper's execution, for comparisons (cpu/attention_dense.cpp); float
  ref,    // the scalar reference (kernels/ref/attention.h); float and double
};

// "local", "dense" or "ref" (aah.attention takes the first two); an unknown name is an error naming aah.attention.
AttnImpl attn_impl_from_name(const std::string& name);
const char* attn_impl_name(AttnImpl impl);

void attention_forward(AttnImpl impl, float* out, float* lse, const float* q, const float* k, const float* v,
                       const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                       AttnCounters* counters);
void attention_backward(AttnImpl impl, float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, const int* window, int B,
                        int H, int Hkv, int T, int D, AttnCounters* counters);
// double runs ref only (the fast kernels are float); another impl is an error naming it.
void attention_forward(AttnImpl impl, double* out, double* lse, const double* q, const double* k, const double* v,
                       const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                       AttnCounters* counters);
void attention_backward(AttnImpl impl, double* dq, double* dk, double* dv, const double* dout, const double* out,
                        const double* lse, const double* q, const double* k, const double* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnCounters* counters);

}  // namespace aah
