// The backend table (issue 42): every operation a model step and a decoding step need, as one struct of functions
// chosen at run time. Model, layers and decoder reach kernels only through it. The instances:
//   local  kernels/cpu: AVX2/AVX-512 float kernels; attention tiled, skipping the work the windows mask
//   dense  the same, with the paper's execution of attention (T x T scores plus the window mask), for comparisons
//   ref    kernels/ref: the scalar reference every fast kernel is tested against, at float (and at double:
//          backend_ref_double, the engine of Model<double> and the gradient checks)
//   local-bf16, dense-bf16  the same with their matrix products in bf16 on oneDNN (kernels/bf16), fp32 elsewhere;
//          local-bf16's attention runs its tile products in bf16 on AMX where the CPU has it
//          (kernels/bf16/attention.cpp)
// aah.attention and train.precision name the backend of a run (backend_for; ref is for tests).
//
// A new backend (bf16, CUDA) writes the functions below with these signatures (shapes and conventions in
// kernels/ops.h, attention in kernels/attention_common.h, decoding in kernels/decode.h), fills one Backend, and adds
// one row to the name table in backend.cpp. Memory too: every buffer the model and the optimizer keep is allocated
// by the backend (Memory below) and the host reads or writes it only through the backend's copies, so a backend's
// buffers may live on a device (the CPU backends' are host memory, read in place). The other pointers the operations
// take are host memory, which a device backend copies itself: token ids and targets, windows, AttnDiagnostics and
// AttnCounters. tests/test_backend_memory.cpp runs a toy backend whose buffers the host cannot touch (protected pages)
// through training steps, AdamW, saving, loading, evaluation and decoding (the KV cache too). Still host-only (they
// refuse a backend whose memory is not the host's, saying so): bf16 weights and the bf16 KV cache (rounded on the
// host), the retrieval scorer and the MPI all-reduce.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_common.h"
#include "kernels/ops.h"

namespace aah {

// A backend's memory: where the model's parameters, gradients, activations and RoPE tables and the optimizer's moments
// live. The host touches them only through upload and download (and DeviceBuffer, HostCopy, HostStage below, built on
// them); where `host` is true they are host memory and host code may read and write them in place, which is what
// HostCopy and HostStage then do (no copy). The CPU backends: aligned_alloc, free, memcpy (x3), memset, host = true.
struct Memory {
  void* (*alloc)(size_t bytes);  // zeroed, 64-byte aligned; fails with an error (never returns null)
  void (*release)(void* p);
  void (*upload)(void* device, const void* host, size_t bytes);
  void (*download)(void* host, const void* device, size_t bytes);
  void (*copy)(void* device_dst, const void* device_src, size_t bytes);
  void (*zero)(void* device, size_t bytes);
  bool host;
};

// The host memory Memory of the CPU backends.
const Memory& host_memory();

template <class real>
struct Backend {
  const char* name;
  // Elementwise, norms, matrix products, loss (kernels/ops.h for each one's shapes).
  void (*embedding_forward)(real* out, const int32_t* tokens, const real* wte, int N, int C);
  void (*embedding_backward)(real* dwte, const real* dout, const int32_t* tokens, int N, int C);
  void (*rmsnorm_forward)(real* out, real* rstd, const real* x, const real* w, int N, int C, float eps);
  void (*rmsnorm_backward)(real* dx, real* dw, const real* dout, const real* x, const real* w, const real* rstd, int N,
                           int C);
  void (*matmul_forward)(real* out, const real* inp, const real* w, int N, int C, int OC);
  void (*matmul_backward)(real* dinp, real* dw, const real* dout, const real* inp, const real* w, int N, int C, int OC);
  // matmul_forward and matmul_backward with w already stored in bf16 (a bf16 backend's weights, rounded once per
  // forward by the model and once by the decoder: model/model.h, Weights16).
  void (*matmul_forward_bf16w)(real* out, const real* inp, const uint16_t* w, int N, int C, int OC);
  void (*matmul_backward_bf16w)(real* dinp, real* dw, const real* dout, const real* inp, const uint16_t* w, int N,
                                int C, int OC);
  void (*qkv_split_forward)(real* q, real* k, real* v, const real* qkv, int B, int T, int H, int Hkv, int D);
  void (*qkv_split_backward)(real* dqkv, const real* dq, const real* dk, const real* dv, int B, int T, int H, int Hkv,
                             int D);
  void (*heads_merge_forward)(real* out, const real* inp, int B, int H, int T, int D);
  void (*heads_merge_backward)(real* dinp, const real* dout, int B, int H, int T, int D);
  void (*rope_forward)(real* x, const real* cos, const real* sin, int BH, int T, int D);
  void (*rope_backward)(real* dx, const real* cos, const real* sin, int BH, int T, int D);
  void (*swiglu_forward)(real* out, const real* h, int N, int F);
  void (*swiglu_backward)(real* dh, const real* dout, const real* h, int N, int F);
  void (*crossentropy_forward_backward)(real* losses, real* dlogits, const real* logits, const int32_t* targets, int N,
                                        int V, float dscale);
  // A bf16 backend's two largest gradients written in bf16 at once, for the product that reads them: the LM head's
  // loss (model.cpp, Model::forward) and SwiGLU's backward (layer.cpp); matmul_backward_bf16 reads them (dout and w
  // both bf16; matmul_backward_bf16w rounds dout itself).
  void (*crossentropy_forward_backward_bf16)(real* losses, uint16_t* dlogits, const real* logits,
                                             const int32_t* targets, int N, int V, float dscale);
  void (*swiglu_backward_bf16)(uint16_t* dh, const real* dout, const real* h, int N, int F);
  void (*matmul_backward_bf16)(real* dinp, real* dw, const uint16_t* dout, const real* inp, const uint16_t* w, int N,
                               int C, int OC);
  // out_i = exp(x_i - shift) over n values (out may be x); returns their sum. The controller's measurements of
  // attention (coverage.h, copy_use.h) build their softmax rows with it and matmul_forward.
  real (*exp_shifted_sum)(real* out, const real* x, real shift, int n);
  // x_i *= scale in place over n values; returns the largest (the measurements' scaled score rows).
  real (*scale_max)(real* x, int n, real scale);
  // Causal attention with one window per head (kernels/ops.h, attn_local_forward / attn_local_backward).
  void (*attention_forward)(real* out, real* lse, const real* q, const real* k, const real* v, const int* window, int B,
                            int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters);
  void (*attention_backward)(real* dq, real* dk, real* dv, const real* dout, const real* out, const real* lse,
                             const real* q, const real* k, const real* v, const int* window, int B, int H, int Hkv,
                             int T, int D, AttnCounters* counters);
  // One query row against its cached keys and values (kernels/decode.h).
  void (*attention_decode)(real* out, const real* q, const real* k, const real* v, int cap, int start, int n, int D,
                           real* scores);
  // The same against rings stored in bf16 (the decoder's KV cache when `bf16`).
  void (*attention_decode_bf16)(real* out, const real* q, const uint16_t* k, const uint16_t* v, int cap, int start,
                                int n, int D, real* scores);
  // bf16 precision (train.precision=bf16): the matrix products take bf16 operands, the model and the decoder keep
  // their weights in bf16 (matmul_*_bf16w), and the decoder its KV cache. Every other op is fp32 either way.
  bool bf16;
  // What a training step does besides the layers: y += x over n values (the residual stream and its gradient); the
  // sum of squares of n values in double (the global gradient norm: fixed chunks, so the same whatever the thread
  // count); AdamW's update of n parameters and their moments m, v (decay: 1 where weight decay applies).
  void (*residual_add)(real* y, const real* x, size_t n);
  double (*sum_squares)(const real* x, size_t n);
  void (*adamw_update)(real* params, real* m, real* v, const uint8_t* decay, const real* grads, size_t n,
                       const AdamWStep& s);
  Memory memory;
};

// n values of T from a backend's Memory, released by it; moves, never copies.
template <class T>
struct DeviceBuffer {
  T* data = nullptr;
  size_t size = 0;
  const Memory* memory = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const Memory& m, size_t n)
      : data(static_cast<T*>(m.alloc(std::max<size_t>(1, n) * sizeof(T)))), size(n), memory(&m) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data, o.data), std::swap(size, o.size), std::swap(memory, o.memory);
    return *this;
  }
  ~DeviceBuffer() {
    if (data) memory->release(data);
  }
};

// n values of device memory readable on the host: the memory itself where it is host memory, else a copy.
template <class T>
class HostCopy {
 public:
  HostCopy(const Memory& m, const T* device, size_t n) : p_(device) {
    if (m.host) return;
    copy_.resize(n);
    m.download(copy_.data(), device, n * sizeof(T));
    p_ = copy_.data();
  }
  const T* data() const { return p_; }

 private:
  const T* p_;
  std::vector<T> copy_;
};

// n values of device memory writable on the host; commit() makes the writes the device's. Where it is host memory,
// the memory itself (commit does nothing); else a copy of it, uploaded by commit().
template <class T>
class HostStage {
 public:
  HostStage(const Memory& m, T* device, size_t n) : m_(m), device_(device), p_(device), n_(n) {
    if (m.host) return;
    copy_.resize(n);
    m.download(copy_.data(), device, n * sizeof(T));
    p_ = copy_.data();
  }
  T* data() { return p_; }
  void commit() {
    if (!m_.host) m_.upload(device_, p_, n_ * sizeof(T));
  }

 private:
  const Memory& m_;
  T* device_;
  T* p_;
  size_t n_;
  std::vector<T> copy_;
};

// The float backend called `name` (local, dense, local-bf16, dense-bf16, ref); another name is an error listing them.
const Backend<float>& backend_named(const std::string& name);
// The backend of a run: aah.attention (local, dense) at train.precision (fp32, bf16). bf16 on a CPU without bf16
// matrix instructions (AVX-512 BF16 or AMX) is refused with an error that says so.
const Backend<float>& backend_for(const std::string& attention, const std::string& precision);
// The names a run may choose (aah.attention): local, dense.
const std::vector<const char*>& backend_user_names();
const Backend<float>& backend_local();
const Backend<double>& backend_ref_double();
// The default of each element type: local for float, the reference for double.
template <class real>
const Backend<real>& backend_default();

}  // namespace aah
