// bf16 matrix products on oneDNN (see bf16.h). Each call rounds its fp32 operands to bf16 into scratch buffers,
// then runs one oneDNN matmul (fp32 result) whose primitive is created once per shape and layout and reused.

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "kernels/bf16/bf16.h"
#include "kernels/ops.h"

namespace aah::bf16 {

namespace {

using dnnl::memory;
using Dims = memory::dims;

// One product c (M, N) = a (M, K) b (K, N), or += with `accumulate`; a and b bf16, addressed by (row, column)
// strides so that a transposed operand is a view, not a copy; c fp32, row-major.
struct Product {
  int64_t M, N, K;
  Dims a_strides, b_strides;
  bool accumulate;
  auto key() const { return std::tie(M, N, K, a_strides, b_strides, accumulate); }
  bool operator<(const Product& o) const { return key() < o.key(); }
};

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Product, dnnl::matmul> primitives;
  std::mutex mutex;
};
Dnnl& dnnl_context() {
  static Dnnl d;
  return d;
}

void run(const Product& p, const uint16_t* a, const uint16_t* b, float* c) {
  if (p.M <= 0 || p.N <= 0) return;
  Dnnl& d = dnnl_context();
  const std::lock_guard<std::mutex> lock(d.mutex);
  const memory::desc a_md({p.M, p.K}, memory::data_type::bf16, p.a_strides);
  const memory::desc b_md({p.K, p.N}, memory::data_type::bf16, p.b_strides);
  const memory::desc c_md({p.M, p.N}, memory::data_type::f32, Dims{p.N, 1});
  auto it = d.primitives.find(p);
  if (it == d.primitives.end()) {
    dnnl::primitive_attr attr;
    if (p.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, d.engine);
    it = d.primitives.emplace(p, dnnl::matmul(pd)).first;
  }
  memory am(a_md, d.engine, const_cast<uint16_t*>(a)), bm(b_md, d.engine, const_cast<uint16_t*>(b)),
      cm(c_md, d.engine, c);
  it->second.execute(d.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  d.stream.wait();
}

// Scratch for the rounded operands of one call, kept between calls (the step's shapes repeat).
uint16_t* rounded_copy(std::vector<uint16_t>& buf, const float* x, size_t n) {
  if (buf.size() < n) buf.resize(n);
  convert(buf.data(), x, n);
  return buf.data();
}
thread_local std::vector<uint16_t> scratch_a, scratch_b, scratch_w;

}  // namespace

void convert(uint16_t* out, const float* in, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (1u << 16))
  for (size_t i = 0; i < n; i++) out[i] = round(in[i]);
}

bool cpu_supported(std::string* isa) {
  const dnnl::cpu_isa found = dnnl::get_effective_cpu_isa();
  if (isa) {
    switch (found) {
      case dnnl::cpu_isa::avx512_core_amx:
        *isa = "avx512_core_amx";
        break;
      case dnnl::cpu_isa::avx512_core_bf16:
        *isa = "avx512_core_bf16";
        break;
      case dnnl::cpu_isa::avx512_core_vnni:
        *isa = "avx512_core_vnni";
        break;
      case dnnl::cpu_isa::avx512_core:
        *isa = "avx512_core";
        break;
      case dnnl::cpu_isa::avx2_vnni:
        *isa = "avx2_vnni";
        break;
      case dnnl::cpu_isa::avx2:
        *isa = "avx2";
        break;
      default:
        *isa = "older than avx2";
    }
  }
  return found == dnnl::cpu_isa::avx512_core_bf16 || found == dnnl::cpu_isa::avx512_core_amx;
}

// out (N, OC) = inp (N, C) w^T: b is w (OC, C) read as its transpose (C, OC). One row (a decoding step) stays
// fp32: rounding all of w for one row would read more than the fp32 product does.
void matmul_forward(float* out, const float* inp, const float* w, int N, int C, int OC) {
  if (N == 1) return cpu::matmul_forward(out, inp, w, N, C, OC);
  const uint16_t* a = rounded_copy(scratch_a, inp, size_t(N) * C);
  const uint16_t* b = rounded_copy(scratch_b, w, size_t(OC) * C);
  run({N, OC, C, Dims{C, 1}, Dims{1, C}, false}, a, b, out);
}

void matmul_forward_bf16w(float* out, const float* inp, const uint16_t* w, int N, int C, int OC) {
  if (N == 1) return matvec(out, inp, w, OC, C);
  run({N, OC, C, Dims{C, 1}, Dims{1, C}, false}, rounded_copy(scratch_a, inp, size_t(N) * C), w, out);
}

// dinp (N, C) = dout (N, OC) w (OC, C); dw (OC, C) += dout^T (OC, N) inp (N, C).
void matmul_backward_bf16(float* dinp, float* dw, const uint16_t* dout, const float* inp, const uint16_t* w, int N,
                          int C, int OC) {
  if (dinp) run({N, C, OC, Dims{OC, 1}, Dims{C, 1}, false}, dout, w, dinp);
  run({OC, C, N, Dims{1, OC}, Dims{C, 1}, true}, dout, rounded_copy(scratch_b, inp, size_t(N) * C), dw);
}

void matmul_backward_bf16w(float* dinp, float* dw, const float* dout, const float* inp, const uint16_t* w, int N, int C,
                           int OC) {
  matmul_backward_bf16(dinp, dw, rounded_copy(scratch_a, dout, size_t(N) * OC), inp, w, N, C, OC);
}

void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int C,
                     int OC) {
  const uint16_t* w16 = dinp ? rounded_copy(scratch_w, w, size_t(OC) * C) : nullptr;
  matmul_backward_bf16w(dinp, dw, dout, inp, w16, N, C, OC);
}

void gemm_nt(float* c, const uint16_t* a, const uint16_t* b, int M, int N, int K) {
  run({M, N, K, Dims{K, 1}, Dims{1, K}, false}, a, b, c);
}

ProductRates product_rates() {
  const int M = 2048, N = 1024, K = 256;
  const std::vector<uint16_t> a16(size_t(M) * K, round(0.5f)), b16(size_t(N) * K, round(0.25f));
  const std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(N) * K, 0.25f);
  std::vector<float> c(size_t(M) * N);
  using Clock = std::chrono::steady_clock;
  double best16 = std::numeric_limits<double>::infinity(), best32 = best16;
  for (int r = 0; r <= 5; r++) {  // r = 0 warms up: the primitive, the pages, the threads
    const auto t0 = Clock::now();
    gemm_nt(c.data(), a16.data(), b16.data(), M, N, K);
    const auto t1 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    const auto t2 = Clock::now();
    if (r == 0) continue;
    best16 = std::min(best16, std::chrono::duration<double>(t1 - t0).count());
    best32 = std::min(best32, std::chrono::duration<double>(t2 - t1).count());
  }
  const double gflop = 2.0 * M * N * K / 1e9;
  return {gflop / best16, gflop / best32};
}

std::string slow_product_warning(const ProductRates& rates) {
  if (!(rates.bf16_gflops < rates.fp32_gflops)) return "";
  char text[512];
  std::snprintf(text, sizeof text,
                "on this CPU oneDNN's bf16 product ran at %.0f GFLOP/s against the fp32 sgemm's %.0f (%.2fx, measured "
                "just now): its bf16 instructions are slower than its fp32 ones, so bf16 will most likely train slower "
                "than fp32 here (aah bench train --precision fp32,bf16 times the two steps side by side); "
                "train.precision=fp32 is the default",
                rates.bf16_gflops, rates.fp32_gflops, rates.bf16_gflops / rates.fp32_gflops);
  return text;
}

}  // namespace aah::bf16
