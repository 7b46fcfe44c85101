// bf16 mixed precision (issue 43): the rounding against hand-worked values, the oneDNN products against the scalar
// reference with bf16 rounding emulated in software (so they run on every CPU: oneDNN has a reference path where
// the CPU lacks bf16), a whole model step against the double model, and the refusal on a CPU without bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "helpers.h"
#include "infer/decoder.h"
#include "kernels/backend.h"
#include "kernels/bf16/bf16.h"
#include "kernels/decode.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"
#include "model/model.h"

namespace aah {
namespace {

// Hand-worked: bf16 keeps 8 significant bits (7 stored), so between 1 and 2 its spacing is 2^-7.
TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bf16::round(1.0f), 0x3f80);
  EXPECT_EQ(bf16::round(-2.0f), 0xc000);
  EXPECT_EQ(bf16::round(1.0f + 0x1p-8f), 0x3f80);             // halfway between 1 and 1 + 2^-7: to the even, 1
  EXPECT_EQ(bf16::round(1.0f + 3 * 0x1p-8f), 0x3f82);         // halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6
  EXPECT_EQ(bf16::round(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // just above halfway: up
  EXPECT_EQ(bf16::rounded(3.14159265f), 3.140625f);           // pi: 1.1001001 0000111... x 2^1 -> 1.1001001 x 2
  EXPECT_EQ(bf16::round(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16::widen(bf16::round(NAN))));
  EXPECT_EQ(bf16::round(3.4e38f), 0x7f80);  // above bf16's largest finite value (~3.39e38): infinity
  std::vector<float> x = {0.1f, -7.77f, 65504.0f, 1e-30f};
  std::vector<uint16_t> b(x.size());
  bf16::convert(b.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(b[i], bf16::round(x[i]));
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(r.normal());
  return v;
}

// In double, from the operands rounded to bf16: the exact products oneDNN forms (8-bit x 8-bit significands fit
// in fp32), summed without error.
std::vector<double> emulated(const std::vector<float>& x) {
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); i++) d[i] = bf16::rounded(x[i]);
  return d;
}
std::vector<double> magnitudes(const std::vector<double>& x) {
  std::vector<double> m(x.size());
  for (size_t i = 0; i < x.size(); i++) m[i] = std::fabs(x[i]);
  return m;
}

// The error bound of summing K exact products in fp32, in any order: gamma_K sum |a b| (Higham, Thm 3.1), with
// gamma_K = K u / (1 - K u), u = 2^-24; plus the one rounding of an accumulated result.
void expect_within_fp32_sum_bound(const std::vector<float>& got, const std::vector<double>& want,
                                  const std::vector<double>& abs_sum, int K, const char* what) {
  const double u = 0x1p-24, gamma = (K + 1) * u / (1 - (K + 1) * u);
  int over = 0;
  for (size_t i = 0; i < got.size(); i++)
    if (std::fabs(got[i] - want[i]) > gamma * abs_sum[i] + 1e-30) over++;
  EXPECT_EQ(over, 0) << what << ": " << over << " of " << got.size() << " values outside the fp32 summation bound";
}

// Shapes with odd sizes (no multiple of a vector width) and one tall product as in a training step.
struct Shape {
  int N, C, OC;
};
const Shape kShapes[] = {{37, 70, 53}, {1, 64, 40}, {256, 96, 160}};

TEST(Bf16, MatmulForwardMatchesEmulatedReference) {
  for (const Shape& s : kShapes) {
    if (s.N == 1) continue;  // below
    const std::vector<float> inp = random_vector(size_t(s.N) * s.C, 1), w = random_vector(size_t(s.OC) * s.C, 2);
    std::vector<float> out(size_t(s.N) * s.OC, -99.0f);
    bf16::matmul_forward(out.data(), inp.data(), w.data(), s.N, s.C, s.OC);
    const std::vector<double> inp_d = emulated(inp), w_d = emulated(w);
    std::vector<double> want(out.size()), abs_sum(out.size());
    ref::matmul_forward<double>(want.data(), inp_d.data(), w_d.data(), s.N, s.C, s.OC);
    ref::matmul_forward<double>(abs_sum.data(), magnitudes(inp_d).data(), magnitudes(w_d).data(), s.N, s.C, s.OC);
    expect_within_fp32_sum_bound(out, want, abs_sum, s.C, "out");
    // and it is bf16: the fp32 product of the unrounded operands differs by far more than that bound
    std::vector<float> fp32(out.size());
    ref::matmul_forward<float>(fp32.data(), inp.data(), w.data(), s.N, s.C, s.OC);
    double largest = 0;
    for (size_t i = 0; i < out.size(); i++) largest = std::max(largest, double(std::fabs(out[i] - fp32[i])));
    EXPECT_GT(largest, 1e-3) << "N=" << s.N;
  }
}

// One row (a decoding step) is the fp32 product, bit for bit: rounding all of w for one row would cost more.
TEST(Bf16, MatmulForwardOfOneRowIsTheFp32Product) {
  const std::vector<float> inp = random_vector(64, 1), w = random_vector(40 * 64, 2);
  std::vector<float> out(40), fp32(40);
  bf16::matmul_forward(out.data(), inp.data(), w.data(), 1, 64, 40);
  cpu::matmul_forward(fp32.data(), inp.data(), w.data(), 1, 64, 40);
  EXPECT_EQ(0, std::memcmp(out.data(), fp32.data(), out.size() * 4));
}

// The decoder's products with weights stored in bf16 (matmul_forward_bf16w): one row keeps x in fp32 and widens the
// weights (matvec), more rows round x as well (oneDNN). Both against the reference on the widened weights, within
// the fp32 summation bound; lengths on the vector path (multiples of 32 up to 2048) and off it, rows on and off
// its blocks of 16.
TEST(Bf16, ProductsWithBf16WeightsMatchWidenedReference) {
  for (int C : {5, 32, 64, 96, 256, 704, 2080})
    for (int OC : {1, 15, 16, 17, 100})
      for (int N : {1, 3}) {
        const std::vector<float> inp = random_vector(size_t(N) * C, C + OC), wf = random_vector(size_t(OC) * C, 7 + C);
        std::vector<uint16_t> w(wf.size());
        bf16::convert(w.data(), wf.data(), w.size());
        std::vector<float> out(size_t(N) * OC, -1.0f);
        bf16::matmul_forward_bf16w(out.data(), inp.data(), w.data(), N, C, OC);
        const std::vector<double> inp_d = N == 1 ? std::vector<double>(inp.begin(), inp.end()) : emulated(inp);
        std::vector<double> want(out.size()), abs_sum(out.size());
        ref::matmul_forward_bf16w<double>(want.data(), inp_d.data(), w.data(), N, C, OC);
        ref::matmul_forward<double>(abs_sum.data(), magnitudes(inp_d).data(), magnitudes(emulated(wf)).data(), N, C,
                                    OC);
        SCOPED_TRACE("C=" + std::to_string(C) + " OC=" + std::to_string(OC) + " N=" + std::to_string(N));
        expect_within_fp32_sum_bound(out, want, abs_sum, C, "out");
      }
}

// The LM head's loss with its gradient written in bf16: the fp32 kernel's losses and its dlogits rounded once, bit
// for bit (rows of vocabularies on and off the vector blocks, the target anywhere in the row); and its backward
// product reading that gradient gives what rounding dout at the call gives.
// SwiGLU's input gradient written in bf16: the fp32 kernel's rounded once, bit for bit (rows on and off the
// kernel's blocks of 16, widths on and off the vector blocks).
TEST(Bf16, SwigluGradientInBf16IsTheFp32OneRounded) {
  for (int F : {5, 24, 704})
    for (int N : {1, 16, 37}) {
      const std::vector<float> h = random_vector(size_t(N) * 2 * F, F + N), dout = random_vector(size_t(N) * F, 9);
      std::vector<float> dh(h.size());
      std::vector<uint16_t> dh16(h.size());
      cpu::swiglu_backward(dh.data(), dout.data(), h.data(), N, F);
      bf16::swiglu_backward(dh16.data(), dout.data(), h.data(), N, F);
      size_t differ = 0;
      for (size_t i = 0; i < dh.size(); i++) differ += dh16[i] != bf16::round(dh[i]);
      EXPECT_EQ(differ, 0u) << "F=" << F << " N=" << N;
    }
}

TEST(Bf16, LossGradientInBf16IsTheFp32OneRounded) {
  for (int V : {7, 64, 1000, 8192})
    for (int N : {1, 5}) {
      const std::vector<float> logits = random_vector(size_t(N) * V, V + N);
      std::vector<int32_t> targets(N);
      for (int n = 0; n < N; n++) targets[n] = (n * 7919 + V / 3) % V;
      std::vector<float> losses(N), losses16(N), dlogits(logits.size());
      std::vector<uint16_t> dlogits16(logits.size());
      cpu::crossentropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V, 0.25f);
      bf16::crossentropy_forward_backward(losses16.data(), dlogits16.data(), logits.data(), targets.data(), N, V,
                                          0.25f);
      SCOPED_TRACE("V=" + std::to_string(V) + " N=" + std::to_string(N));
      EXPECT_EQ(0, std::memcmp(losses16.data(), losses.data(), N * 4));
      size_t differ = 0;
      for (size_t i = 0; i < dlogits.size(); i++) differ += dlogits16[i] != bf16::round(dlogits[i]);
      EXPECT_EQ(differ, 0u);
      const int C = 48;
      const std::vector<float> inp = random_vector(size_t(N) * C, 3), wf = random_vector(size_t(V) * C, 4);
      std::vector<uint16_t> w(wf.size());
      bf16::convert(w.data(), wf.data(), w.size());
      std::vector<float> dinp(size_t(N) * C), dw(wf.size(), 0.5f), dinp2 = dinp, dw2 = dw;
      bf16::matmul_backward_bf16(dinp.data(), dw.data(), dlogits16.data(), inp.data(), w.data(), N, C, V);
      bf16::matmul_backward_bf16w(dinp2.data(), dw2.data(), dlogits.data(), inp.data(), w.data(), N, C, V);
      EXPECT_EQ(0, std::memcmp(dinp.data(), dinp2.data(), dinp.size() * 4));
      EXPECT_EQ(0, std::memcmp(dw.data(), dw2.data(), dw.size() * 4));
    }
}

// Also with w already bf16 (matmul_backward_bf16w): bit for bit what rounding w at the call gives.
TEST(Bf16, MatmulBackwardMatchesEmulatedReference) {
  for (const Shape& s : kShapes) {
    const std::vector<float> inp = random_vector(size_t(s.N) * s.C, 3), w = random_vector(size_t(s.OC) * s.C, 4),
                             dout = random_vector(size_t(s.N) * s.OC, 5), dw0 = random_vector(size_t(s.OC) * s.C, 6);
    for (bool with_dinp : {true, false}) {
      std::vector<float> dinp(size_t(s.N) * s.C, -99.0f), dw = dw0;  // dw accumulates onto what it holds
      bf16::matmul_backward(with_dinp ? dinp.data() : nullptr, dw.data(), dout.data(), inp.data(), w.data(), s.N, s.C,
                            s.OC);
      const std::vector<double> inp_d = emulated(inp), w_d = emulated(w), dout_d = emulated(dout);
      std::vector<double> want_dinp(dinp.size(), 0.0), want_dw(dw.size(), 0.0), abs_dinp(dinp.size(), 0.0),
          abs_dw(dw.size(), 0.0);
      ref::matmul_backward<double>(want_dinp.data(), want_dw.data(), dout_d.data(), inp_d.data(), w_d.data(), s.N, s.C,
                                   s.OC);
      ref::matmul_backward<double>(abs_dinp.data(), abs_dw.data(), magnitudes(dout_d).data(), magnitudes(inp_d).data(),
                                   magnitudes(w_d).data(), s.N, s.C, s.OC);
      for (size_t i = 0; i < dw.size(); i++) want_dw[i] += dw0[i], abs_dw[i] += std::fabs(dw0[i]);
      if (with_dinp) expect_within_fp32_sum_bound(dinp, want_dinp, abs_dinp, s.OC, "dinp");
      if (!with_dinp) {
        EXPECT_EQ(dinp[0], -99.0f);  // not written
      }
      expect_within_fp32_sum_bound(dw, want_dw, abs_dw, s.N + 1, "dw");
      // With w rounded once beforehand (the model's Weights16): the same operands, so the same bits.
      std::vector<uint16_t> w16(w.size());
      bf16::convert(w16.data(), w.data(), w.size());
      std::vector<float> dinp16(dinp.size(), -99.0f), dw16 = dw0;
      bf16::matmul_backward_bf16w(with_dinp ? dinp16.data() : nullptr, dw16.data(), dout.data(), inp.data(), w16.data(),
                                  s.N, s.C, s.OC);
      EXPECT_EQ(0, std::memcmp(dinp16.data(), dinp.data(), dinp.size() * 4));
      EXPECT_EQ(0, std::memcmp(dw16.data(), dw.data(), dw.size() * 4));
    }
  }
}

// bf16 attention (AMX tile products, kernels/bf16/attention.cpp) against the double reference on the operands the
// kernel rounds: q / sqrt(D), k, v and dO rounded to bf16 as the kernel rounds them, so that what is left is the
// kernel's own rounding of P and dS to bf16 (u / 2 relative each, u = 2^-8) and its fp32 sums. Bounded normwise per
// tensor: out within u, the gradients within 4u (dS carries P's rounding into dQ and dK), and at least u / 64 away
// from the fp32 kernel's result (bf16 is really in use). Shapes: T a multiple of the 64-row tile and not, windows
// from 1 to more than T, grouped heads, head dims 32, 64, 128. The tile visits match the fp32 kernel's, and the score
// elements computed cover the visible pairs.
struct AttnCase {
  int B, H, Hkv, T, D;
  std::vector<int> window;
};
double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); i++) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / den);
}
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  return rel_error(got, std::vector<double>(want.begin(), want.end()));
}

TEST(Bf16, AttentionMatchesEmulatedReference) {
  std::vector<bf16::AttnKernel> kernels;  // every bf16 kernel this CPU has (AMX: both)
  for (bf16::AttnKernel k : {bf16::AttnKernel::amx, bf16::AttnKernel::dot})
    if (bf16::attn_kernel_available(k)) kernels.push_back(k);
  if (kernels.empty()) GTEST_SKIP() << "no AVX-512 BF16 here: bf16 attention runs the fp32 kernel (next test)";
  const AttnCase cases[] = {
      {2, 4, 2, 64, 64, {1, 5, 64, 1000}}, {1, 4, 4, 200, 32, {3, 64, 100, 200}}, {2, 2, 1, 300, 128, {70, 17}}};
  const double u = 0x1p-8;
  for (bf16::AttnKernel kernel : kernels)
    for (const AttnCase& c : cases) {
      SCOPED_TRACE(std::string(bf16::attn_kernel_name(kernel)) + " T=" + std::to_string(c.T) +
                   " D=" + std::to_string(c.D));
      const size_t nq = size_t(c.B) * c.H * c.T * c.D, nkv = size_t(c.B) * c.Hkv * c.T * c.D;
      const std::vector<float> q = random_vector(nq, 1), k = random_vector(nkv, 2), v = random_vector(nkv, 3),
                               dout = random_vector(nq, 4);
      std::vector<float> out(nq), lse(size_t(c.B) * c.H * c.T), dq(nq), dk(nkv), dv(nkv);
      AttnCounters cnt16, cnt32;
      bf16::attn_local_forward_on(kernel, out.data(), lse.data(), q.data(), k.data(), v.data(), c.window.data(), c.B,
                                  c.H, c.Hkv, c.T, c.D, nullptr, &cnt16);
      bf16::attn_local_backward_on(kernel, dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                                   q.data(), k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D, &cnt16);
      // the reference on the rounded operands; its q is rounded(q / sqrt(D)) * sqrt(D), the kernel's scaled q
      const float scale = 1.0f / std::sqrt(float(c.D));
      std::vector<double> qd(nq), kd = emulated(k), vd = emulated(v), gd = emulated(dout);
      for (size_t i = 0; i < nq; i++) qd[i] = bf16::rounded(q[i] * scale) / double(scale);
      std::vector<double> ro(nq), rl(lse.size()), rdq(nq), rdk(nkv), rdv(nkv);
      ref::attn_local_forward<double>(ro.data(), rl.data(), qd.data(), kd.data(), vd.data(), c.window.data(), c.B, c.H,
                                      c.Hkv, c.T, c.D, nullptr, nullptr);
      // the backward from the kernel's own out and lse (dQ, dK scale q's rounding away: the kernel's dK takes q
      // rounded unscaled, the reference's qd is within one more rounding of it)
      const std::vector<double> od(out.begin(), out.end()), ld(lse.begin(), lse.end());
      ref::attn_local_backward<double>(rdq.data(), rdk.data(), rdv.data(), gd.data(), od.data(), ld.data(), qd.data(),
                                       kd.data(), vd.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D, nullptr);
      EXPECT_LT(rel_error(out, ro), u);
      EXPECT_LT(rel_error(lse, rl), u / 64);
      EXPECT_LT(rel_error(dq, rdq), 4 * u);
      EXPECT_LT(rel_error(dk, rdk), 4 * u);
      EXPECT_LT(rel_error(dv, rdv), 4 * u);
      // bf16, not fp32: the fp32 kernel on the unrounded operands is further away than fp32 sums could be
      std::vector<float> out32(nq), lse32(lse.size()), dq32(nq), dk32(nkv), dv32(nkv);
      cpu::attn_local_forward(out32.data(), lse32.data(), q.data(), k.data(), v.data(), c.window.data(), c.B, c.H,
                              c.Hkv, c.T, c.D, nullptr, &cnt32);
      cpu::attn_local_backward(dq32.data(), dk32.data(), dv32.data(), dout.data(), out32.data(), lse32.data(), q.data(),
                               k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D, &cnt32);
      EXPECT_GT(rel_error(out, out32), u / 64);
      EXPECT_GT(rel_error(dk, dk32), u / 64);
      // the same work skipped: the tiles the windows leave out are the fp32 kernel's
      EXPECT_EQ(cnt16.fwd_tiles_visited, cnt32.fwd_tiles_visited);
      EXPECT_EQ(cnt16.fwd_tiles_skipped, cnt32.fwd_tiles_skipped);
      EXPECT_EQ(cnt16.fwd_pairs, cnt32.fwd_pairs);
      EXPECT_EQ(cnt16.bwd_tiles_skipped, cnt32.bwd_tiles_skipped);
      // and inside them, the 32 x 32 blocks that hold no visible pair: computed covers the visible pairs, at most the
      // visited tiles
      EXPECT_GE(cnt16.fwd_pairs_computed, cnt16.fwd_pairs);
      EXPECT_LE(cnt16.fwd_pairs_computed, cnt16.fwd_tiles_visited * 64 * 64);
      EXPECT_EQ(cnt16.bwd_pairs_computed, cnt16.fwd_pairs_computed);
      std::printf("%s T=%d D=%d: out %.2e, dq %.2e, dk %.2e, dv %.2e relative (u = %.2e)\n",
                  bf16::attn_kernel_name(kernel), c.T, c.D, rel_error(out, ro), rel_error(dq, rdq), rel_error(dk, rdk),
                  rel_error(dv, rdv), u);
    }
}

// Where bf16 attention does not run a bf16 kernel it is the fp32 kernel, bit for bit: a head dim that is not a
// multiple of 32, calls with diagnostics (the controller's update steps), and every call on a CPU or build without
// AVX-512 BF16.
TEST(Bf16, AttentionFallsBackToTheFp32Kernel) {
  const int B = 1, H = 2, Hkv = 1, T = 70;
  const std::vector<int> window = {9, 70};
  for (int D : {48, 64})
    for (bool with_diag : {false, true}) {
      if (D == 64 && !with_diag && bf16::attn_kernel(D) != bf16::AttnKernel::fp32) continue;  // the test above
      const size_t nq = size_t(B) * H * T * D, nkv = size_t(B) * Hkv * T * D;
      const std::vector<float> q = random_vector(nq, 5), k = random_vector(nkv, 6), v = random_vector(nkv, 7),
                               dout = random_vector(nq, 8);
      std::vector<double> ent(H), ent32(H);
      AttnDiagnostics diag, diag32;
      diag.entropy = ent.data(), diag32.entropy = ent32.data();
      std::vector<float> out(nq), lse(B * H * T), out32(nq), lse32(B * H * T);
      bf16::attn_local_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), window.data(), B, H, Hkv, T, D,
                               with_diag ? &diag : nullptr, nullptr);
      cpu::attn_local_forward(out32.data(), lse32.data(), q.data(), k.data(), v.data(), window.data(), B, H, Hkv, T, D,
                              with_diag ? &diag32 : nullptr, nullptr);
      EXPECT_EQ(bf16::attn_kernel(D, with_diag ? &diag : nullptr), bf16::AttnKernel::fp32);
      EXPECT_EQ(0, std::memcmp(out.data(), out32.data(), nq * 4)) << "D=" << D;
      EXPECT_EQ(ent, ent32);
      if (with_diag) continue;  // the backward has no diagnostics
      std::vector<float> dq(nq), dk(nkv), dv(nkv), dq32(nq), dk32(nkv), dv32(nkv);
      bf16::attn_local_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                                k.data(), v.data(), window.data(), B, H, Hkv, T, D, nullptr);
      cpu::attn_local_backward(dq32.data(), dk32.data(), dv32.data(), dout.data(), out.data(), lse.data(), q.data(),
                               k.data(), v.data(), window.data(), B, H, Hkv, T, D, nullptr);
      EXPECT_EQ(0, std::memcmp(dq.data(), dq32.data(), nq * 4));
      EXPECT_EQ(0, std::memcmp(dk.data(), dk32.data(), nkv * 4));
      EXPECT_EQ(0, std::memcmp(dv.data(), dv32.data(), nkv * 4));
    }
}

using test::small_model;

// A whole step (forward, loss, backward) on the bf16 backend against the double model on the same weights. Each
// product rounds both operands once (relative error u = 2^-8 each); the model chains a handful of products per
// layer, so the loss and the gradients move by a few u at most: bounded by 4u relative for the loss and 16u
// (relative, gradient norm) for the gradients, and at least u/16 away (bf16 is really in use).
TEST(Bf16, ModelStepAgainstDoubleWithinBf16Roundoff) {
  const ModelConfig cfg = small_model(37);
  const int B = 2, T = 40;
  Model<double> ref(cfg, B, T);
  Model<float> fast(cfg, B, T);
  fast.backend = &backend_named("local-bf16");
  ref.init_weights(7);
  for (size_t i = 0; i < ref.num_params(); i++) fast.params_data()[i] = float(ref.params_data()[i]);
  ref.windows() = fast.windows() = {40, 5, 1, 17, 40, 40, 2, 9};
  Rng r(8);
  std::vector<int32_t> tokens(B * T + 1);
  for (auto& t : tokens) t = int32_t(r.below(cfg.vocab_size));
  ref.zero_grads();
  fast.zero_grads();
  const double lr = ref.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
  const double lf = fast.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
  const double u = 0x1p-8;
  EXPECT_LT(std::fabs(lf - lr), 4 * u * std::fabs(lr)) << "loss " << lf << " vs " << lr;
  ref.backward(tokens.data(), B, T);
  fast.backward(tokens.data(), B, T);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.num_params(); i++) {
    const double d = fast.grads_data()[i] - ref.grads_data()[i];
    num += d * d;
    den += ref.grads_data()[i] * ref.grads_data()[i];
  }
  const double rel = std::sqrt(num / den);
  EXPECT_LT(rel, 16 * u);
  EXPECT_GT(rel, u / 16);
  std::printf("loss %.6f (double %.6f), gradient relative error %.2e (u = %.2e)\n", lf, lr, rel, u);
}

// Decoding against bf16 rings: every start (wrapping or not), the vector path's head dims (32, 64, 128) and others,
// lengths with and without a partial block of 8 rows, against the reference on the
// widened values in double. Only the fp32 sums differ: within 1e-5 of the output's scale, as the fp32 kernel.
TEST(Bf16, DecodeMatchesEmulatedReferenceOnRingBuffers) {
  for (int D : {2, 6, 16, 32, 64, 128})
    for (int cap : {1, 5, 64, 300}) {
      const std::vector<float> kf = random_vector(size_t(cap) * D, 10 + D + cap),
                               vf = random_vector(size_t(cap) * D, 20 + D + cap), qf = random_vector(D, 30 + D + cap);
      std::vector<uint16_t> k(kf.size()), v(vf.size());
      bf16::convert(k.data(), kf.data(), k.size());
      bf16::convert(v.data(), vf.data(), v.size());
      const std::vector<double> qd(qf.begin(), qf.end());
      for (int start : {0, 1, cap / 2, cap - 1})
        for (int n : {1, 2, cap / 3 + 1, cap - 1, cap}) {
          if (n < 1 || n > cap || start >= cap) continue;
          std::vector<float> out(D, -1.0f), sc(n);
          std::vector<double> want(D), scr(n);
          bf16::attn_decode_forward(out.data(), qf.data(), k.data(), v.data(), cap, start, n, D, sc.data());
          ref::attn_decode_forward_bf16<double>(want.data(), qd.data(), k.data(), v.data(), cap, start, n, D,
                                                scr.data());
          double worst = 0, scale = 1e-30;
          for (int d = 0; d < D; d++) {
            worst = std::max(worst, std::fabs(out[d] - want[d]));
            scale = std::max(scale, std::fabs(want[d]));
          }
          EXPECT_LT(worst, 1e-5 * scale) << "D=" << D << " cap=" << cap << " start=" << start << " n=" << n;
        }
    }
}

// The decoder on the bf16 backend keeps its KV cache and its weight matrices in bf16 (half the bytes) and its logits
// stay within bf16's roundoff of the fp32 forward: keys, values and weights rounded once (u = 2^-8 relative each)
// move a logit by a few u of the logits' scale; bounded at 8u. Not equal to the fp32 decoder's: both are really bf16.
TEST(Bf16, DecoderKeepsItsCacheInBf16) {
  const ModelConfig cfg = small_model(50);
  const int T = 80, prompt = 30;
  Model<float> model(cfg, 1, T, false);
  model.init_weights(7);
  model.windows() = {5, 80, 17, 1, 33, 2, 80, 64};
  Rng r(1);
  std::vector<int32_t> tokens(T);
  for (auto& t : tokens) t = int32_t(r.below(cfg.vocab_size));
  std::vector<float> full(size_t(T) * cfg.vocab_size);
  model.forward_logits(tokens.data(), 1, T, full.data());
  const Decoder fp32_decoder(model, T);
  const size_t fp32_bytes = fp32_decoder.cache().bytes(), fp32_matrix_bytes = fp32_decoder.matrix_bytes();
  model.backend = &backend_named("local-bf16");
  Decoder dec(model, T);
  EXPECT_TRUE(dec.cache().bf16);
  EXPECT_EQ(dec.cache().bytes() * 2, fp32_bytes);
  EXPECT_EQ(dec.matrix_bytes() * 2, fp32_matrix_bytes);  // its weight matrices in bf16 too
  const int V = cfg.vocab_size;
  const double u = 0x1p-8;
  double largest_diff = 0;
  const float* logits = dec.prefill(tokens.data(), prompt);
  for (int pos = prompt - 1; pos < T; pos++) {
    if (pos >= prompt) logits = dec.step(tokens[pos]);
    double worst = 0, scale = 0;
    for (int i = 0; i < V; i++) {
      worst = std::max(worst, double(std::fabs(logits[i] - full[size_t(pos) * V + i])));
      scale = std::max(scale, double(std::fabs(full[size_t(pos) * V + i])));
    }
    EXPECT_LT(worst, 8 * u * scale) << "position " << pos;
    largest_diff = std::max(largest_diff, worst / scale);
  }
  EXPECT_GT(largest_diff, u / 64);
  std::printf("largest logit difference from the fp32 forward: %.2e of the logits' scale (u = %.2e)\n", largest_diff,
              u);
}

// A CPU without bf16 matrix instructions refuses train.precision=bf16 with an error that says so. oneDNN is held
// to AVX2 to act as such a CPU; this works only before oneDNN's first use in the process (ctest runs each test in
// its own process).
TEST(Bf16, RefusedWhereTheCpuHasNoBf16) {
  try {
    dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
  } catch (const dnnl::error&) {
  }
  if (dnnl::get_effective_cpu_isa() != dnnl::cpu_isa::avx2)
    GTEST_SKIP() << "oneDNN was already used in this process (run this test on its own, as ctest does)";
  std::string isa;
  EXPECT_FALSE(bf16::cpu_supported(&isa));
  EXPECT_EQ(isa, "avx2");
  try {
    backend_for("local", "bf16");
    ADD_FAILURE() << "bf16 was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no bf16 matrix instructions"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.precision=fp32"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(backend_for("local", "fp32").name, "local");  // fp32 is untouched
}

// The warning of a CPU whose bf16 product is slower than its sgemm, on the figures of an Intel Xeon (family 6 model
// 207) whose AMX is hidden: 166 against 294 GFLOP/s, 0.57x; none where bf16 is as fast or faster (Zen 5: 624 vs 283).
TEST(Bf16, WarnsWhereTheBf16ProductIsTheSlowerOne) {
  const std::string slow = bf16::slow_product_warning({166.4, 293.8});
  EXPECT_NE(slow.find("ran at 166 GFLOP/s against the fp32 sgemm's 294 (0.57x"), std::string::npos) << slow;
  EXPECT_NE(slow.find("train.precision=fp32"), std::string::npos) << slow;
  EXPECT_EQ(bf16::slow_product_warning({624.0, 283.0}), "");
  EXPECT_EQ(bf16::slow_product_warning({300.0, 300.0}), "");
  if (!bf16::cpu_supported()) return;
  // The measured rates: a 2048 x 1024 x 256 product in well under a second and well over a GFLOP/s (a broken timer or
  // a product that did nothing would land outside).
  const bf16::ProductRates rates = bf16::product_rates();
  EXPECT_GT(rates.bf16_gflops, 1.0);
  EXPECT_GT(rates.fp32_gflops, 1.0);
  EXPECT_LT(rates.bf16_gflops, 1e5);
  EXPECT_LT(rates.fp32_gflops, 1e5);
}

// What bf16 adds to a model's bytes, worked by hand for the small model (C 64, F 96, L 2, H 4 x 16, Hkv 2, V 50):
// the weights' bf16 copy, per layer qkv 128 x 64 + o 64 x 64 + gate_up 192 x 64 + down 64 x 96 = 30,720 values, x 2
// layers, + the LM head 50 x 64 = 64,640 values; in training also the LM head's gradient (512 rows x 50) and
// SwiGLU's (B T x 2F = 16 x 192). Two bytes each.
TEST(Bf16, EstimatedBytesCountTheBf16Copies) {
  const ModelConfig m = test::small_model(50);
  const int B = 2, T = 8;
  EXPECT_EQ(Model<float>::estimate_bytes(m, B, T, false, true) - Model<float>::estimate_bytes(m, B, T, false),
            64640u * 2);
  EXPECT_EQ(Model<float>::estimate_bytes(m, B, T, true, true) - Model<float>::estimate_bytes(m, B, T, true),
            (64640u + 512u * 50 + 16u * 192) * 2);
}

TEST(Bf16, BackendForNamesThePrecision) {
  EXPECT_STREQ(backend_for("dense", "fp32").name, "dense");
  if (!bf16::cpu_supported()) {
    EXPECT_THROW(backend_for("local", "bf16"), Error);
    return;
  }
  EXPECT_STREQ(backend_for("local", "bf16").name, "local-bf16");
  EXPECT_STREQ(backend_for("dense", "bf16").name, "dense-bf16");
  EXPECT_THROW(backend_for("local", "fp16"), Error);
}

}  // namespace
}  // namespace aah
