// Fast kernels (kernels/cpu) against the scalar references (kernels/ref, in double) over many shapes.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "kernels/ref/ref.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

namespace aah {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(scale * r.normal());
  return v;
}
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// max |a - b| / (atol + rtol |b|) must stay below 1
void expect_close(const std::vector<float>& a, const std::vector<double>& b, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); i++) {
    const double e = std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": index " << at << " fast " << a[at] << " ref " << b[at];
}

struct Shape {
  int N, C;
};
const Shape kShapes[] = {{1, 1}, {3, 7}, {17, 64}, {64, 256}, {129, 100}, {8, 1024}};

TEST(Kernels, Embedding) {
  for (auto [N, C] : kShapes) {
    const int V = 11;
    auto wte = randn(size_t(V) * C, 1);
    std::vector<int32_t> tok(N);
    Rng r(2);
    for (auto& t : tok) t = int32_t(r.below(V));
    std::vector<float> out(size_t(N) * C);
    std::vector<double> outr(out.size());
    cpu::embedding_forward(out.data(), tok.data(), wte.data(), N, C);
    auto wd = to_double(wte);
    ref::embedding_forward<double>(outr.data(), tok.data(), wd.data(), N, C);
    expect_close(out, outr, 0, 0 + 1e-30, "embedding_forward");
    auto dout = randn(size_t(N) * C, 3);
    std::vector<float> dw(size_t(V) * C, 0.5f);
    std::vector<double> dwr(dw.size(), 0.5);
    cpu::embedding_backward(dw.data(), dout.data(), tok.data(), N, C);
    auto dd = to_double(dout);
    ref::embedding_backward<double>(dwr.data(), dd.data(), tok.data(), N, C);
    expect_close(dw, dwr, 1e-6, 1e-6, "embedding_backward");
  }
}

TEST(Kernels, RmsNorm) {
  for (auto [N, C] : kShapes) {
    auto x = randn(size_t(N) * C, 4, 2.0f), w = randn(C, 5), dout = randn(size_t(N) * C, 6);
    std::vector<float> out(x.size()), rstd(N), dx(x.size()), dw(C, 0.25f);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto xd = to_double(x), wd = to_double(w), dd = to_double(dout);
    std::vector<double> outr(x.size()), rstdr(N), dxr(x.size()), dwr(C, 0.25);
    ref::rmsnorm_forward<double>(outr.data(), rstdr.data(), xd.data(), wd.data(), N, C, 1e-6f);
    ref::rmsnorm_backward<double>(dxr.data(), dwr.data(), dd.data(), xd.data(), wd.data(), rstdr.data(), N, C);
    expect_close(out, outr, 1e-5, 1e-6, "rmsnorm out");
    expect_close(rstd, rstdr, 1e-5, 1e-7, "rmsnorm rstd");
    expect_close(dx, dxr, 1e-4, 1e-5, "rmsnorm dx");
    expect_close(dw, dwr, 1e-4, 1e-4, "rmsnorm dw");
  }
}

TEST(Kernels, Matmul) {
  // N = 1 (decoding) takes the matrix-vector path
  const int shapes[][3] = {{1, 1, 1}, {1, 33, 17}, {1, 256, 2048}, {5, 3, 7}, {64, 32, 48}, {100, 129, 65}, {256, 64, 512}};
  for (auto& s : shapes) {
    const int N = s[0], C = s[1], OC = s[2];
    auto inp = randn(size_t(N) * C, 7), w = randn(size_t(OC) * C, 8), dout = randn(size_t(N) * OC, 9);
    std::vector<float> out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C, 1.0f);
    cpu::matmul_forward(out.data(), inp.data(), w.data(), N, C, OC);
    cpu::matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    auto id = to_double(inp), wd = to_double(w), dd = to_double(dout);
    std::vector<double> outr(out.size()), dinpr(dinp.size()), dwr(dw.size(), 1.0);
    ref::matmul_forward<double>(outr.data(), id.data(), wd.data(), N, C, OC);
    ref::matmul_backward<double>(dinpr.data(), dwr.data(), dd.data(), id.data(), wd.data(), N, C, OC);
    const double tol = 1e-5 * std::sqrt(double(std::max({C, OC, N})));
    expect_close(out, outr, tol, tol, "matmul out");
    expect_close(dinp, dinpr, tol, tol, "matmul dinp");
    expect_close(dw, dwr, tol, tol, "matmul dw");
  }
}

TEST(Kernels, SplitMergeRope) {
  const int cfgs[][5] = {{1, 1, 1, 1, 2}, {2, 5, 4, 2, 8}, {3, 17, 8, 2, 32}, {1, 64, 4, 4, 64}};
  for (auto& c : cfgs) {
    const int B = c[0], T = c[1], H = c[2], Hkv = c[3], D = c[4], W = (H + 2 * Hkv) * D;
    auto qkv = randn(size_t(B) * T * W, 10);
    std::vector<float> q(size_t(B) * H * T * D), k(size_t(B) * Hkv * T * D), v(k.size());
    std::vector<double> qr(q.size()), kr(k.size()), vr(v.size());
    cpu::qkv_split_forward(q.data(), k.data(), v.data(), qkv.data(), B, T, H, Hkv, D);
    auto qkvd = to_double(qkv);
    ref::qkv_split_forward<double>(qr.data(), kr.data(), vr.data(), qkvd.data(), B, T, H, Hkv, D);
    expect_close(q, qr, 0, 1e-30, "split q");
    expect_close(k, kr, 0, 1e-30, "split k");
    expect_close(v, vr, 0, 1e-30, "split v");
    std::vector<float> back(qkv.size());
    cpu::qkv_split_backward(back.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, D);
    expect_close(back, qkvd, 0, 1e-30, "split backward is the inverse");
    std::vector<float> merged(size_t(B) * T * H * D), unmerged(q.size());
    std::vector<double> mergedr(merged.size());
    cpu::heads_merge_forward(merged.data(), q.data(), B, H, T, D);
    ref::heads_merge_forward<double>(mergedr.data(), qr.data(), B, H, T, D);
    expect_close(merged, mergedr, 0, 1e-30, "merge");
    cpu::heads_merge_backward(unmerged.data(), merged.data(), B, H, T, D);
    expect_close(unmerged, qr, 0, 1e-30, "merge backward is the inverse");
    // RoPE: forward against reference, backward is the exact transpose (rotation by -angle)
    const int half = D / 2;
    std::vector<float> cs(size_t(T) * half), sn(cs.size());
    std::vector<double> csd(cs.size()), snd(cs.size());
    for (int t = 0; t < T; t++)
      for (int i = 0; i < half; i++) {
        const double a = t * std::pow(10000.0, -2.0 * i / D);
        cs[t * half + i] = float(std::cos(a)), sn[t * half + i] = float(std::sin(a));
        csd[t * half + i] = cs[t * half + i], snd[t * half + i] = sn[t * half + i];
      }
    std::vector<float> x = q;
    std::vector<double> xr = qr;
    cpu::rope_forward(x.data(), cs.data(), sn.data(), B * H, T, D);
    ref::rope_forward<double>(xr.data(), csd.data(), snd.data(), B * H, T, D);
    expect_close(x, xr, 1e-6, 1e-6, "rope forward");
    // <rope(x), g> == <x, rope_backward(g)>
    auto g = randn(x.size(), 11);
    std::vector<float> gb = g;
    cpu::rope_backward(gb.data(), cs.data(), sn.data(), B * H, T, D);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < x.size(); i++) lhs += double(x[i]) * g[i], rhs += double(q[i]) * gb[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs)));
  }
}

// Scaling is one rounding per element and the maximum is exact: the vectorized version equals the reference bit for
// bit, at every length around its 8-lane blocks, with negative rows too.
TEST(Kernels, ScaleMax) {
  Rng r(5);
  for (int n : {1, 7, 8, 9, 63, 1000}) {
    std::vector<float> a(n), b;
    for (float& x : a) x = float(r.normal()) - 3.0f;
    b = a;
    const float ma = cpu::scale_max(a.data(), n, 0.125f), mb = ref::scale_max<float>(b.data(), n, 0.125f);
    EXPECT_EQ(ma, mb) << n;
    EXPECT_EQ(a, b) << n;
    EXPECT_EQ(mb, *std::max_element(b.begin(), b.end()));
  }
}

TEST(Kernels, SwiGlu) {
  for (auto [N, F] : kShapes) {
    auto h = randn(size_t(N) * 2 * F, 12, 3.0f), dout = randn(size_t(N) * F, 13);
    std::vector<float> out(size_t(N) * F), dh(h.size());
    cpu::swiglu_forward(out.data(), h.data(), N, F);
    cpu::swiglu_backward(dh.data(), dout.data(), h.data(), N, F);
    auto hd = to_double(h), dd = to_double(dout);
    std::vector<double> outr(out.size()), dhr(dh.size());
    ref::swiglu_forward<double>(outr.data(), hd.data(), N, F);
    ref::swiglu_backward<double>(dhr.data(), dd.data(), hd.data(), N, F);
    expect_close(out, outr, 1e-5, 1e-6, "swiglu out");
    expect_close(dh, dhr, 1e-5, 1e-6, "swiglu dh");
  }
}

TEST(Kernels, CrossEntropy) {
  const int shapes[][2] = {{1, 2}, {3, 7}, {17, 100}, {64, 8192}, {5, 50000}};
  for (auto& s : shapes) {
    const int N = s[0], V = s[1];
    auto logits = randn(size_t(N) * V, 14, 4.0f);
    std::vector<int32_t> tgt(N);
    Rng r(15);
    for (auto& t : tgt) t = int32_t(r.below(V));
    std::vector<float> loss(N), loss_only(N), d = logits;  // gradient written in place
    cpu::crossentropy_forward_backward(loss.data(), d.data(), d.data(), tgt.data(), N, V, 0.5f);
    cpu::crossentropy_forward_backward(loss_only.data(), nullptr, logits.data(), tgt.data(), N, V, 0.5f);
    auto ld = to_double(logits);
    std::vector<double> lossr(N), dr(ld.size());
    ref::crossentropy_forward_backward<double>(lossr.data(), dr.data(), ld.data(), tgt.data(), N, V, 0.5f);
    expect_close(loss, lossr, 1e-5, 1e-6, "ce loss");
    expect_close(loss_only, lossr, 1e-5, 1e-6, "ce loss without grad");
    expect_close(d, dr, 1e-5, 1e-8, "ce dlogits");
  }
}

TEST(Kernels, ExpApproximation) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double e = std::fabs(cpu::vexp_scalar(x) - std::exp(double(x))) / std::exp(double(x));
    worst = std::max(worst, e);
  }
  EXPECT_LT(worst, 5e-7);
  std::vector<float> xs(1000), out(1000);
  for (int i = 0; i < 1000; i++) xs[i] = -20.0f + 0.04f * i;
  const float sum = cpu::vexp_shifted_sum(out.data(), xs.data(), 1.5f, 1000);
  double ref_sum = 0;
  for (int i = 0; i < 1000; i++) {
    const double e = std::exp(double(xs[i] - 1.5f));  // the kernel subtracts in float
    ref_sum += e;
    EXPECT_NEAR(out[i], e, 5e-7 * e);
  }
  EXPECT_NEAR(sum, ref_sum, 1e-5 * ref_sum);
}

// vexp_masked is vexp, bit for bit, from kVexpZeroBelow up, and exactly 0 below it, for -inf and for NaN; the
// vector and scalar versions agree (the masked shifted sum of the dense attention included).
TEST(Kernels, ExpMaskedIsExpAboveTheCut) {
  std::vector<float> xs = {-INFINITY, NAN, -1e30f, -88.0f, -87.2f, -87.0f, -86.99f, 0.0f, 80.0f};
  Rng rng(3);
  for (int i = 0; i < 4000; i++) xs.push_back(-100.0f + 180.0f * float(rng.uniform()));
  std::vector<float> e(xs.size()), m(xs.size());
  cpu::vexp_shifted_sum(e.data(), xs.data(), 0.0f, int(xs.size()));
  const float msum = cpu::vexp_shifted_sum</*MASKED=*/true>(m.data(), xs.data(), 0.0f, int(xs.size()));
  double ref = 0;
  for (size_t i = 0; i < xs.size(); i++) {
    const float x = xs[i];
    const bool keep = x >= cpu::kVexpZeroBelow;
    EXPECT_EQ(cpu::vexp_masked_scalar(x), keep ? cpu::vexp_scalar(x) : 0.0f) << x;
    if (!std::isnan(x)) {
      EXPECT_EQ(e[i], cpu::vexp_scalar(x)) << x;  // vector body = scalar tail
    }
    EXPECT_EQ(m[i], keep ? e[i] : 0.0f) << x;
    ref += m[i];
  }
  EXPECT_NEAR(msum, ref, 1e-6 * ref);
  for (float x : {88.4f, 88.6f, 88.8f, INFINITY}) EXPECT_EQ(cpu::vexp_masked_scalar(x), cpu::vexp_scalar(x)) << x;
}

// The width-generic vexp_masked_vec of the attention softmax loops: every lane of the 8-wide and (where compiled)
// 16-wide versions is the scalar vexp_masked_scalar, bit for bit, so attention gives the same bits at either width.
TEST(Kernels, ExpMaskedVectorLanesAreTheScalar) {
  std::vector<float> xs = {-INFINITY, NAN, -1e30f, -88.0f, -87.2f, -87.0f, -86.99f, 0.0f, 80.0f, 88.6f, 88.8f, INFINITY};
  Rng rng(5);
  while (xs.size() % 16 != 0 || xs.size() < 4096) xs.push_back(-100.0f + 190.0f * float(rng.uniform()));
  int checked = 0;
#ifdef AAH_AVX2
  alignas(32) float out8[8];
  for (size_t i = 0; i < xs.size(); i += 8) {
    _mm256_store_ps(out8, cpu::vexp_masked_vec(_mm256_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 8; l++, checked++) EXPECT_EQ(out8[l], cpu::vexp_masked_scalar(xs[i + l])) << xs[i + l];
  }
#endif
#ifdef AAH_AVX512
  alignas(64) float out16[16];
  for (size_t i = 0; i < xs.size(); i += 16) {
    _mm512_store_ps(out16, cpu::vexp_masked_vec(_mm512_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 16; l++, checked++) EXPECT_EQ(out16[l], cpu::vexp_masked_scalar(xs[i + l])) << xs[i + l];
  }
#endif
  if (checked == 0) GTEST_SKIP() << "no vector exp compiled in (no AVX2)";
}

// vexp_masked_le_vec, attention's softmax exp (no clamps; AVX-512: vscalefps): the scalar vexp_masked_scalar, bit
// for bit, for every x <= 88. All 2^32 floats were checked once by hand; here every 251st bit pattern up to 88
// (13 million: both signs, every exponent, NaNs included) and the edges.
TEST(Kernels, ExpSoftmaxVariantSameBitsUpTo88) {
  std::vector<float> xs = {-INFINITY, NAN, -NAN, -1e30f, -3.4e38f, -88.0f, -87.3f, -87.0f, -86.99f, -0.0f, 0.0f,
                           1e-30f, 80.0f, 87.99f, 88.0f};
  for (uint64_t u = 0; u < (1ull << 32); u += 251) {
    float x;
    const uint32_t b = uint32_t(u);
    std::memcpy(&x, &b, 4);
    if (!(x > 88.0f)) xs.push_back(x);
  }
  while (xs.size() % 16 != 0) xs.push_back(0.0f);
  int64_t checked = 0, differ = 0;
#ifdef AAH_AVX2
  alignas(32) float out8[8];
  for (size_t i = 0; i < xs.size(); i += 8) {
    _mm256_store_ps(out8, cpu::vexp_masked_le_vec<cpu::Vec8>(_mm256_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 8; l++, checked++) {
      const float ref = cpu::vexp_masked_scalar(xs[i + l]);
      if (std::memcmp(&out8[l], &ref, 4) != 0 && differ++ < 5) ADD_FAILURE() << "Vec8 x=" << xs[i + l];
    }
  }
#endif
#ifdef AAH_AVX512
  alignas(64) float out16[16];
  for (size_t i = 0; i < xs.size(); i += 16) {
    _mm512_store_ps(out16, cpu::vexp_masked_le_vec<cpu::Vec16>(_mm512_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 16; l++, checked++) {
      const float ref = cpu::vexp_masked_scalar(xs[i + l]);
      if (std::memcmp(&out16[l], &ref, 4) != 0 && differ++ < 5) ADD_FAILURE() << "Vec16 x=" << xs[i + l];
    }
  }
#endif
  if (checked == 0) GTEST_SKIP() << "no vector exp compiled in (no AVX2)";
  EXPECT_EQ(differ, 0) << "of " << checked;
  EXPECT_GE(checked, int64_t(xs.size())) << "every value, at every width compiled in";
  EXPECT_GT(xs.size(), size_t(12) << 20);
}

// The short exp of the bf16 attention (vexp_short): against exp in double, within 2^-16 relative wherever it is not
// 0 (every x in [-87, 0] it is given: all floats there, sampled), and exactly 0 below -87, at -inf and NaN; the
// vector version gives the scalar's bits. The bound is 2^7 below bf16's rounding (2^-9), which P undergoes next.
TEST(Kernels, ShortExpWithin2ToMinus16AndZeroWhereMasked) {
  std::vector<float> xs = {-INFINITY, NAN,   -NAN, -1e30f,  -3.4e38f,           -88.0f,     -87.3f, -87.0f,
                           -86.99f,   -0.0f, 0.0f, -1e-30f, -0.5f * 0.6931472f, -0.6931472f};
  for (uint32_t b = 0x80000000u; b < 0xc2ae0000u; b += 97) {  // -0 down to -87 (0xc2ae0000), all exponents
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  while (xs.size() % 16 != 0) xs.push_back(0.0f);
  double worst = 0;
  int64_t nonzero = 0;
  for (float x : xs) {
    const float got = cpu::vexp_short_scalar(x);
    if (!(x >= cpu::kVexpZeroBelow)) {
      EXPECT_EQ(got, 0.0f) << "x=" << x;
      continue;
    }
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(got - want) / want);
    nonzero++;
  }
  EXPECT_LT(worst, 0x1p-16);
  EXPECT_GT(worst, 0x1p-22);  // the short polynomial, not a full-precision exp
  EXPECT_GT(nonzero, int64_t(10) << 20);
#ifdef AAH_AVX512
  alignas(64) float out16[16];
  int64_t differ = 0;
  for (size_t i = 0; i < xs.size(); i += 16) {
    _mm512_store_ps(out16, cpu::vexp_short_vec(_mm512_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 16; l++) {
      const float ref = cpu::vexp_short_scalar(xs[i + l]);
      if (std::memcmp(&out16[l], &ref, 4) != 0 && differ++ < 5) ADD_FAILURE() << "x=" << xs[i + l];
    }
  }
  EXPECT_EQ(differ, 0);
#endif
  std::printf("short exp: worst relative error %.2e (2^%.1f) over %lld values\n", worst, std::log2(worst),
              (long long)nonzero);
}

// The bf16 attention's vector log (vlog_vec) against log in double: within 2^-21 relative (4 ulp) where |log x| >= 2^-4
// and 2^-26 absolute nearer 1, over every normal float from 2^-126 to 2^127 (sampled) and exactly 0 at 1.
TEST(Kernels, VectorLogWithin2ToMinus21) {
#ifdef AAH_AVX512
  std::vector<float> xs = {1.0f, 0.75f,   1.5f,       1.4999999f,  0.74999994f,     2.0f,         3.0f,
                           0.5f, 1024.0f, 1.0000001f, 0.99999994f, 1.17549435e-38f, 3.4028235e38f};
  for (uint32_t b = 0x00800000u; b < 0x7f800000u; b += 61) {
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  while (xs.size() % 16 != 0) xs.push_back(1.0f);
  alignas(64) float out16[16];
  double worst_rel = 0, worst_abs = 0;
  for (size_t i = 0; i < xs.size(); i += 16) {
    _mm512_store_ps(out16, cpu::vlog_vec(_mm512_loadu_ps(xs.data() + i)));
    for (int l = 0; l < 16; l++) {
      const double want = std::log(double(xs[i + l])), err = std::abs(out16[l] - want);
      if (std::abs(want) >= 0x1p-4)
        worst_rel = std::max(worst_rel, err / std::abs(want));
      else
        worst_abs = std::max(worst_abs, err);
    }
  }
  EXPECT_LT(worst_rel, 0x1p-21);
  EXPECT_LT(worst_abs, 0x1p-26);
  _mm512_store_ps(out16, cpu::vlog_vec(_mm512_set1_ps(1.0f)));
  EXPECT_EQ(out16[0], 0.0f);
  EXPECT_GT(xs.size(), size_t(30) << 20);
  std::printf("vector log: worst relative %.2e, absolute near 1 %.2e\n", worst_rel, worst_abs);
#else
  GTEST_SKIP() << "no AVX-512 in this build: the vector log is not compiled in";
#endif
}

// Reductions split by channel, never by row: the same bits with 1 thread or 2.
TEST(Kernels, BackwardIsThreadCountInvariant) {
  const int N = 333, C = 96;
  auto x = randn(size_t(N) * C, 16), w = randn(C, 17), dout = randn(size_t(N) * C, 18);
  std::vector<float> rstd(N), tmp(x.size());
  cpu::rmsnorm_forward(tmp.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  std::vector<float> dx1(x.size()), dw1(C), dx2(x.size()), dw2(C);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::rmsnorm_backward(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  omp_set_num_threads(2);
  cpu::rmsnorm_backward(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), dx1.size() * 4));
  EXPECT_EQ(0, std::memcmp(dw1.data(), dw2.data(), dw1.size() * 4));
}


// The attention kernel's tile products (whichever micro-kernel this CPU compiled: 16-wide AVX-512, 8-wide AVX2 or
// scalar) promise one FMA chain per element in ascending k: the same bits as a scalar std::fma loop, for every
// mode, shapes with row and column tails, and band ranges. A band block runs the union of its rows' k ranges, as
// attention's do, with A zero outside each row's own range (an FMA with 0 leaves the sum as it is), and skips
// blocks whose rows all have empty ranges (rows >= 48, a multiple of every block height): kInit zeroes those.
TEST(Kernels, TileGemmIsTheScalarFmaChainBitwise) {
  const int ld = 72;
  for (const auto& shape : {std::tuple{64, 64, 64}, std::tuple{64, 32, 47}, std::tuple{13, 40, 9},
                             std::tuple{7, 17, 64}, std::tuple{50, 72, 33}})
    for (int band = 0; band < 2; band++) {
      const int M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);  // (lambdas capture these)
      auto row_range = [&](int r) {
        if (!band) return cpu::TileRange{0, K};
        if (r >= 48) return cpu::TileRange{0, 0};
        return cpu::TileRange{std::min(r / 3, K / 2), std::min(K, 5 + r)};
      };
      auto block_range = [&](int r0, int r1, int, int) {
        cpu::TileRange u{1 << 30, 0};
        for (int r = r0; r < r1; r++) {
          const cpu::TileRange k = row_range(r);
          if (k.hi > k.lo) u.lo = std::min(u.lo, k.lo), u.hi = std::max(u.hi, k.hi);
        }
        return u.hi > u.lo ? u : cpu::TileRange{0, 0};
      };
      auto A = randn(size_t(M) * K, 31 + M + band);
      for (int r = 0; r < M; r++)
        for (int k = 0; k < K; k++)
          if (k < row_range(r).lo || k >= row_range(r).hi) A[size_t(r) * K + k] = 0.0f;
      const auto Bm = randn(size_t(K) * ld, 32 + N), rs = randn(M, 33), C0 = randn(size_t(M) * ld, 34 + K);
      for (int mode : {cpu::kSet, cpu::kAdd, cpu::kScaleAdd, cpu::kInit}) {
        std::vector<float> fast = C0, want = C0;
        for (int r = 0; r < M; r++)
          for (int c = 0; c < N; c++) {
            const cpu::TileRange k = row_range(r);
            // a skipped block leaves C as it is (kInit: 0, kScaleAdd: rescaled)
            if (mode != cpu::kScaleAdd && mode != cpu::kInit && k.hi <= k.lo) continue;
            float acc = mode == cpu::kSet || mode == cpu::kInit ? 0.0f
                        : mode == cpu::kAdd                     ? C0[r * ld + c]
                                                                : rs[r] * C0[r * ld + c];
            for (int j = k.lo; j < k.hi; j++) acc = std::fma(A[size_t(r) * K + j], Bm[size_t(j) * ld + c], acc);
            want[r * ld + c] = acc;
          }
        auto run = [&](const auto& range) {
          if (mode == cpu::kSet)
            return cpu::tile_gemm<cpu::kSet>(M, N, A.data(), K, 1, Bm.data(), ld, fast.data(), ld, nullptr, range);
          if (mode == cpu::kAdd)
            return cpu::tile_gemm<cpu::kAdd>(M, N, A.data(), K, 1, Bm.data(), ld, fast.data(), ld, nullptr, range);
          if (mode == cpu::kInit)
            return cpu::tile_gemm<cpu::kInit>(M, N, A.data(), K, 1, Bm.data(), ld, fast.data(), ld, nullptr, range);
          return cpu::tile_gemm<cpu::kScaleAdd>(M, N, A.data(), K, 1, Bm.data(), ld, fast.data(), ld, rs.data(), range);
        };
        if (band)
          run(block_range);
        else
          run(cpu::TileFullRange{K});
        int bad = 0;
        for (size_t i = 0; i < want.size(); i++) bad += !(fast[i] == want[i]);
        EXPECT_EQ(bad, 0) << "M=" << M << " N=" << N << " K=" << K << " mode " << mode << " band " << band;
      }
    }
}

}  // namespace
}  // namespace aah
