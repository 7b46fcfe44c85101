#include "kernels/backend.h"

#include <cstdlib>
#include <cstring>

#include "core/arena.h"
#include "core/check.h"
#include "kernels/bf16/bf16.h"
#include "kernels/cpu/vexp.h"
#include "kernels/decode.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace aah {

const Memory& host_memory() {
  static const Memory m = {[](size_t bytes) { return aligned_zeroed(bytes, "memory"); },
                           [](void* p) { std::free(p); },
                           [](void* device, const void* host, size_t bytes) { std::memcpy(device, host, bytes); },
                           [](void* host, const void* device, size_t bytes) { std::memcpy(host, device, bytes); },
                           [](void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); },
                           [](void* device, size_t bytes) { std::memset(device, 0, bytes); },
                           true};
  return m;
}

namespace {

// kernels/cpu, with one of its two attention executions and its matrix products in fp32 (cpu::) or bf16 (bf16::).
Backend<float> cpu_backend(const char* name, decltype(Backend<float>::attention_forward) fwd,
                           decltype(Backend<float>::attention_backward) bwd,
                           decltype(Backend<float>::matmul_forward) mm_fwd = cpu::matmul_forward,
                           decltype(Backend<float>::matmul_backward) mm_bwd = cpu::matmul_backward) {
  return {name,
          cpu::embedding_forward,
          cpu::embedding_backward,
          cpu::rmsnorm_forward,
          cpu::rmsnorm_backward,
          mm_fwd,
          mm_bwd,
          bf16::matmul_forward_bf16w,
          bf16::matmul_backward_bf16w,
          cpu::qkv_split_forward,
          cpu::qkv_split_backward,
          cpu::heads_merge_forward,
          cpu::heads_merge_backward,
          cpu::rope_forward,
          cpu::rope_backward,
          cpu::swiglu_forward,
          cpu::swiglu_backward,
          cpu::crossentropy_forward_backward,
          bf16::crossentropy_forward_backward,
          bf16::swiglu_backward,
          bf16::matmul_backward_bf16,
          cpu::vexp_shifted_sum<false>,
          cpu::scale_max,
          fwd,
          bwd,
          cpu::attn_decode_forward,
          bf16::attn_decode_forward,
          mm_fwd == bf16::matmul_forward,
          cpu::residual_add,
          cpu::sum_squares,
          cpu::adamw_update,
          host_memory()};
}

// kernels/ref at element type T.
template <class T>
Backend<T> ref_backend() {
  return {"ref",
          ref::embedding_forward<T>,
          ref::embedding_backward<T>,
          ref::rmsnorm_forward<T>,
          ref::rmsnorm_backward<T>,
          ref::matmul_forward<T>,
          ref::matmul_backward<T>,
          ref::matmul_forward_bf16w<T>,
          ref::matmul_backward_bf16w<T>,
          ref::qkv_split_forward<T>,
          ref::qkv_split_backward<T>,
          ref::heads_merge_forward<T>,
          ref::heads_merge_backward<T>,
          ref::rope_forward<T, T>,
          ref::rope_backward<T, T>,
          ref::swiglu_forward<T>,
          ref::swiglu_backward<T>,
          ref::crossentropy_forward_backward<T>,
          ref::crossentropy_forward_backward_bf16<T>,
          ref::swiglu_backward_bf16<T>,
          ref::matmul_backward_bf16<T>,
          ref::exp_shifted_sum<T>,
          ref::scale_max<T>,
          ref::attn_local_forward<T>,
          ref::attn_local_backward<T>,
          ref::attn_decode_forward<T>,
          ref::attn_decode_forward_bf16<T>,
          false,
          ref::residual_add<T>,
          ref::sum_squares<T>,
          ref::adamw_update<T>,
          host_memory()};
}

const Backend<float>& backend_dense() {
  static const Backend<float> b = cpu_backend("dense", cpu::attn_dense_forward, cpu::attn_dense_backward);
  return b;
}
const Backend<float>& backend_local_bf16() {
  static const Backend<float> b = cpu_backend("local-bf16", bf16::attn_local_forward, bf16::attn_local_backward,
                                              bf16::matmul_forward, bf16::matmul_backward);
  return b;
}
const Backend<float>& backend_dense_bf16() {
  static const Backend<float> b = cpu_backend("dense-bf16", cpu::attn_dense_forward, cpu::attn_dense_backward,
                                              bf16::matmul_forward, bf16::matmul_backward);
  return b;
}
const Backend<float>& backend_ref_float() {
  static const Backend<float> b = ref_backend<float>();
  return b;
}

// The one name table: the run's choices first (aah.attention), their bf16 products (train.precision=bf16: the
// name + "-bf16"), then the reference.
using FloatBackendFn = const Backend<float>& (*)();
const FloatBackendFn kFloatBackends[] = {backend_local, backend_dense, backend_local_bf16, backend_dense_bf16,
                                         backend_ref_float};

}  // namespace

const Backend<float>& backend_local() {
  static const Backend<float> b = cpu_backend("local", cpu::attn_local_forward, cpu::attn_local_backward);
  return b;
}

const Backend<double>& backend_ref_double() {
  static const Backend<double> b = ref_backend<double>();
  return b;
}

const Backend<float>& backend_named(const std::string& name) {
  for (const FloatBackendFn b : kFloatBackends)
    if (name == b().name) return b();
  fail("[config] aah.attention: unknown attention '", name, "': expected local or dense (or ref)");
}

const Backend<float>& backend_for(const std::string& attention, const std::string& precision) {
  if (precision == "fp32") return backend_named(attention);
  if (precision != "bf16") fail("[config] train.precision: unknown precision '", precision, "': expected fp32 or bf16");
  std::string isa;
  if (!bf16::cpu_supported(&isa))
    fail("[config] train.precision=bf16: this CPU has no bf16 matrix instructions (oneDNN found ", isa,
         "; bf16 needs AVX-512 BF16 or AMX), where bf16 products would run slower than fp32. Use train.precision=fp32 "
         "(the default).");
  return backend_named(attention + "-bf16");
}

const std::vector<const char*>& backend_user_names() {
  static const std::vector<const char*> names = {backend_local().name, backend_dense().name};
  return names;
}

template <>
const Backend<float>& backend_default<float>() {
  return backend_local();
}
template <>
const Backend<double>& backend_default<double>() {
  return backend_ref_double();
}

}  // namespace aah
