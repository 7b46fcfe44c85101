#include "kernels/dispatch.h"

#include "core/check.h"
#include "kernels/ops.h"

namespace aah {

// The one name table of AttnImpl, in enum order (aah.attention accepts local and dense: kAttentionNames).
static const char* const kAttnImplNames[] = {"local", "dense", "ref"};

AttnImpl attn_impl_from_name(const std::string& name) {
  for (int i = 0; i < 3; i++)
    if (name == kAttnImplNames[i]) return AttnImpl(i);
  fail("[config] aah.attention: unknown attention '", name, "': expected local or dense (or ref)");
}

const char* attn_impl_name(AttnImpl impl) { return kAttnImplNames[int(impl)]; }

void attention_forward(AttnImpl impl, float* out, float* lse, const float* q, const float* k, const float* v,
                       const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                       AttnCounters* counters) {
  switch (impl) {
    case AttnImpl::local:
      return cpu::attn_local_forward(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
    case AttnImpl::dense:
      return cpu::attn_dense_forward(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
    case AttnImpl::ref:
      return ref::attn_local_forward<float>(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
  }
}

void attention_backward(AttnImpl impl, float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, const int* window, int B,
                        int H, int Hkv, int T, int D, AttnCounters* counters) {
  switch (impl) {
    case AttnImpl::local:
      return cpu::attn_local_backward(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
    case AttnImpl::dense:
      return cpu::attn_dense_backward(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
    case AttnImpl::ref:
      return ref::attn_local_backward<float>(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
  }
}

void attention_forward(AttnImpl impl, double* out, double* lse, const double* q, const double* k, const double* v,
                       const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                       AttnCounters* counters) {
  if (impl != AttnImpl::ref) fail("[attention] ", attn_impl_name(impl), " runs float only; double runs ref");
  ref::attn_local_forward<double>(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
}

void attention_backward(AttnImpl impl, double* dq, double* dk, double* dv, const double* dout, const double* out,
                        const double* lse, const double* q, const double* k, const double* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnCounters* counters) {
  if (impl != AttnImpl::ref) fail("[attention] ", attn_impl_name(impl), " runs float only; double runs ref");
  ref::attn_local_backward<double>(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
}

}  // namespace aah
