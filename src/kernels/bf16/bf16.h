// bf16 mixed precision (issue 43, train.precision=bf16): the matrix products take bf16 operands (8 significant bits,
// fp32's exponent) and accumulate in fp32; weights, optimizer state, norms, softmax and loss stay fp32. The
// products run on oneDNN, which picks AMX tiles or AVX-512 BF16 dot products from the CPU it finds; the attention
// kernel's tile products run on AMX tiles of its own (attention.cpp), where the CPU has them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/attention_common.h"

namespace aah::bf16 {

// fp32 -> bf16, rounded to nearest, ties to even (as the CPUs' vcvtneps2bf16 does); NaN stays a quiet NaN.
inline uint16_t round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float widen(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// The value fp32 x has once stored in bf16: the software emulation the tests compare the products against.
inline float rounded(float x) {
  return widen(round(x));
}

// out[i] = round(in[i]) for n values (threads share the work when n is large).
void convert(uint16_t* out, const float* in, size_t n);

// True when the CPU has bf16 matrix instructions (AVX-512 BF16 or AMX); `isa` gets the instruction set oneDNN
// found (e.g. "avx512_core_bf16", "avx512_core_amx", "avx2").
bool cpu_supported(std::string* isa = nullptr);
inline std::string isa() {
  std::string name;
  cpu_supported(&name);
  return name;
}

// The products of kernels/ops.h in bf16 (same shapes and conventions as cpu::matmul_forward/backward); a one-row
// forward runs the fp32 product (rounding all of w for one row would read more than the product does; the decoder
// keeps its weights rounded once and calls matmul_forward_bf16w instead).
void matmul_forward(float* out, const float* inp, const float* w, int N, int C, int OC);
void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int C, int OC);

// The products with w (OC, C) already bf16 (the model's and the decoder's weights, rounded once): out (N, OC) =
// inp w^T, where one row (a decoding step) runs matvec, inp staying fp32, and more rows round inp and run on oneDNN;
// and its backward (dinp may be null), rounding dout and inp.
void matmul_forward_bf16w(float* out, const float* inp, const uint16_t* w, int N, int C, int OC);
void matmul_backward_bf16w(float* dinp, float* dw, const float* dout, const float* inp, const uint16_t* w, int N, int C,
                           int OC);
// The same backward with dout already bf16 as well (the LM head's and gate_up's, from the two kernels below).
void matmul_backward_bf16(float* dinp, float* dw, const uint16_t* dout, const float* inp, const uint16_t* w, int N,
                          int C, int OC);
// cpu::crossentropy_forward_backward and cpu::swiglu_backward with their gradient, dlogits (N, V) and dh (N, 2F),
// written in bf16 (gradients.cpp): the same losses, and each gradient the fp32 kernel's value rounded once.
void crossentropy_forward_backward(float* losses, uint16_t* dlogits, const float* logits, const int32_t* targets, int N,
                                   int V, float dscale);
void swiglu_backward(uint16_t* dh, const float* dout, const float* h, int N, int F);
// out[r] = x . w[r] for `rows` rows of `len` bf16 values (kernels/bf16/decode.cpp); threads share the rows when
// there are many.
void matvec(float* out, const float* x, const uint16_t* w, int rows, int len);

// c (M, N) = a (M, K) b^T, b stored (N, K), both already bf16: oneDNN's product alone, the benches' reference rate.
void gemm_nt(float* c, const uint16_t* a, const uint16_t* b, int M, int N, int K);

// oneDNN's bf16 product (gemm_nt) and the fp32 sgemm (OpenBLAS) on one shape of the training step (2048 x 1024 x 256),
// timed in this process, interleaved, best of 5 each after a warm-up (about 0.05 s): what train.precision=bf16 checks
// before it trains. A CPU can have bf16 instructions that run slower than its fp32 ones: on an Intel Xeon whose AMX
// is hidden, vdpbf16ps retires half the flops of the FMAs, and bf16 trains at about 0.66x fp32's rate.
struct ProductRates {
  double bf16_gflops, fp32_gflops;
};
ProductRates product_rates();
// The warning a run in bf16 prints when the bf16 product is the slower one (rates.bf16 < rates.fp32), else "".
std::string slow_product_warning(const ProductRates& rates);

// Causal attention with one window per head, its tile products in bf16 (kernels/bf16/attention.cpp): the signatures
// and conventions of cpu::attn_local_forward / attn_local_backward (kernels/ops.h), on the kernel attn_kernel picks.
void attn_local_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters);
void attn_local_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters);
// The kernels bf16 attention can run: its tile products on AMX tiles, with AVX-512 BF16 dot products (vdpbf16ps: a
// CPU without AMX such as AMD Zen 4 and 5, or oneDNN held to AVX-512 BF16), or the fp32 kernel. The bf16 ones
// follow oneDNN's choice of instructions (ONEDNN_MAX_CPU_ISA), so that the products and the attention agree.
enum class AttnKernel { fp32, dot, amx };
const char* attn_kernel_name(AttnKernel kernel);  // "fp32", "avx512_bf16", "amx"
const char* attn_kernel_how(AttnKernel kernel);   // "in fp32", "with AVX-512 BF16 dot products", "on AMX tiles"
// Whether this build and CPU can run `kernel` (fp32: always).
bool attn_kernel_available(AttnKernel kernel);
// The kernel attn_local_forward / backward run for head dim D: AMX where available, else the dot products, else
// fp32; fp32 for head dims that are not a multiple of 32 and calls that ask for diagnostics (the controller's
// update steps).
AttnKernel attn_kernel(int D, const AttnDiagnostics* diag = nullptr);
// The same calls on a named kernel (the tests run each one the CPU has): the fp32 kernel where that one is not
// available or does not take the call (attn_kernel's rules).
void attn_local_forward_on(AttnKernel kernel, float* out, float* lse, const float* q, const float* k, const float* v,
                           const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                           AttnCounters* counters);
void attn_local_backward_on(AttnKernel kernel, float* dq, float* dk, float* dv, const float* dout, const float* out,
                            const float* lse, const float* q, const float* k, const float* v, const int* window, int B,
                            int H, int Hkv, int T, int D, AttnCounters* counters);

}  // namespace aah::bf16
