// Attention with one causal window per head: the tiled fast kernels (cpu::attn_local_*) and the dense-masked
// path (cpu::attn_dense_*) against the scalar reference in double; the reference against finite differences;
// diagnostics against a direct computation; work counters; bitwise determinism across threads and schedules.
//
// Shapes: B batch, H query heads, Hkv key/value heads, T positions, D head dim.
//   q, out, dout, dq (B, H, T, D)   k, v, dk, dv (B, Hkv, T, D)   lse (B, H, T)   window (H)
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "core/sys.h"
#include "kernels/ref/ref.h"
#include "kernels/decode.h"
#include "kernels/backend.h"
#include "kernels/ops.h"

namespace aah {
namespace {

constexpr int kTile = 64;  // tile size of the fast kernel: windows tile-1, tile, tile+1 probe its boundaries

std::vector<float> attn_randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(scale * r.normal());
  return v;
}
std::vector<double> attn_to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Worst |a - r| relative to max(1, largest |r| of the tensor): the error of a float kernel against the double
// reference, scaled by the tensor's magnitude (values here are O(1); the floor of 1 keeps tensors that are
// analytically 0, like dq and dk under W = 1, from dividing rounding noise by ~0).
double attn_scaled_error(const std::vector<float>& a, const std::vector<double>& r, double atol = 1.0) {
  double mx = 0, err = 0;
  for (double x : r) mx = std::max(mx, std::fabs(x));
  for (size_t i = 0; i < a.size(); i++) {
    const double e = std::fabs(double(a[i]) - r[i]);
    if (!(e <= err)) err = e;  // NaN sticks
  }
  return err / std::max(mx, atol);
}

struct AttnCase {
  int B, H, Hkv, T, D;
  std::vector<int> window;
  std::string name() const {
    std::string w;
    for (int x : window) w += str_cat(w.empty() ? "" : ",", x);
    return str_cat("B=", B, " H=", H, " Hkv=", Hkv, " T=", T, " D=", D, " W={", w, "}");
  }
};

// Inputs and outputs of one case, float for the fast kernels and double for the reference.
struct AttnData {
  AttnCase c;
  std::vector<float> q, k, v, dout;
  std::vector<float> out, lse, dq, dk, dv;
  explicit AttnData(const AttnCase& cs, uint64_t seed) : c(cs) {
    const size_t nq = size_t(c.B) * c.H * c.T * c.D, nk = size_t(c.B) * c.Hkv * c.T * c.D;
    q = attn_randn(nq, seed, 2.0);  // peaked rows: the online softmax has to rescale
    k = attn_randn(nk, seed + 1);
    v = attn_randn(nk, seed + 2);
    dout = attn_randn(nq, seed + 3);
    out.assign(nq, NAN), lse.assign(size_t(c.B) * c.H * c.T, NAN);
    dq.assign(nq, NAN), dk.assign(nk, NAN), dv.assign(nk, NAN);  // outputs are written with =, not +=
  }
  void forward_fast(AttnDiagnostics* diag = nullptr, AttnCounters* cnt = nullptr) {
    cpu::attn_local_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv,
                            c.T, c.D, diag, cnt);
  }
  void backward_fast(AttnCounters* cnt = nullptr) {
    cpu::attn_local_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                             k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D, cnt);
  }
  void forward_dense(AttnDiagnostics* diag = nullptr, AttnCounters* cnt = nullptr) {
    cpu::attn_dense_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv,
                            c.T, c.D, diag, cnt);
  }
  void backward_dense(AttnCounters* cnt = nullptr) {
    cpu::attn_dense_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                             k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D, cnt);
  }
};

struct AttnRefResult {
  std::vector<double> out, lse, dq, dk, dv;
};

AttnRefResult attn_reference(const AttnData& d) {
  const AttnCase& c = d.c;
  auto q = attn_to_double(d.q), k = attn_to_double(d.k), v = attn_to_double(d.v), g = attn_to_double(d.dout);
  AttnRefResult r;
  r.out.resize(q.size()), r.lse.resize(d.lse.size()), r.dq.resize(q.size()), r.dk.resize(k.size());
  r.dv.resize(k.size());
  ref::attn_local_forward<double>(r.out.data(), r.lse.data(), q.data(), k.data(), v.data(), c.window.data(), c.B,
                                  c.H, c.Hkv, c.T, c.D, nullptr, nullptr);
  ref::attn_local_backward<double>(r.dq.data(), r.dk.data(), r.dv.data(), g.data(), r.out.data(), r.lse.data(),
                                   q.data(), k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D,
                                   nullptr);
  return r;
}

// Forward and backward of `d` (already run) against the double reference.
void attn_expect_matches(const AttnData& d, const AttnRefResult& r, double tol, const std::string& what) {
  EXPECT_LE(attn_scaled_error(d.out, r.out), tol) << what << " out, " << d.c.name();
  EXPECT_LE(attn_scaled_error(d.lse, r.lse), tol) << what << " lse, " << d.c.name();
  EXPECT_LE(attn_scaled_error(d.dq, r.dq), 2 * tol) << what << " dq, " << d.c.name();
  EXPECT_LE(attn_scaled_error(d.dk, r.dk), 2 * tol) << what << " dk, " << d.c.name();
  EXPECT_LE(attn_scaled_error(d.dv, r.dv), 2 * tol) << what << " dv, " << d.c.name();
}

// Window sets for a given T: 1, 2, tile-1, tile, tile+1, T, and a mixture across heads.
std::vector<std::vector<int>> attn_window_sets(int T, int H) {
  std::vector<std::vector<int>> sets;
  for (int w : {1, 2, kTile - 1, kTile, kTile + 1, T}) sets.push_back(std::vector<int>(H, std::max(1, w)));
  std::vector<int> mix(H);
  const int choices[] = {1, 3, kTile + 1, T, std::max(1, T / 3), kTile - 1, 2, T + 5};
  for (int h = 0; h < H; h++) mix[h] = choices[h % 8];
  sets.push_back(mix);
  return sets;
}

void attn_run_matrix(const std::vector<int>& Ts, const std::vector<int>& Ds, double tol) {
  const int ratios[] = {1, 2, 4};
  int n = 0;
  for (int T : Ts)
    for (int D : Ds)
      for (const auto& wset : attn_window_sets(T, 4)) {
        const int ratio = ratios[n % 3];
        const int H = 4, Hkv = H / ratio, B = n % 5 == 0 ? 2 : 1;
        AttnCase c{B, H, Hkv, T, D, wset};
        AttnData d(c, 1000 + n);
        d.forward_fast();
        d.backward_fast();
        attn_expect_matches(d, attn_reference(d), tol, "fast");
        n++;
      }
}

TEST(AttnLocal, MatchesReferenceShortSequences) { attn_run_matrix({1, 2, 7, 63, 64, 65}, {16, 32, 64, 128}, 1e-5); }

TEST(AttnLocal, MatchesReferenceT300) { attn_run_matrix({300}, {16, 32, 64, 128}, 1e-5); }

TEST(AttnLocal, MatchesReferenceT1024) {
  // The O(T^2 D) reference makes T = 1024 expensive: a few representative cases.
  const std::vector<AttnCase> cases = {
      {1, 4, 4, 1024, 64, {1024, 1024, 1024, 1024}},
      {1, 4, 2, 1024, 32, {128, 65, 1024, 256}},
      {1, 4, 1, 1024, 16, {1, 64, 2, 1024}},
      {1, 2, 1, 1024, 128, {100, 1024}},
  };
  int n = 0;
  for (const auto& c : cases) {
    AttnData d(c, 5000 + n++);
    d.forward_fast();
    d.backward_fast();
    attn_expect_matches(d, attn_reference(d), 1e-5, "fast");
  }
}

TEST(AttnLocal, AnyHeadDim) {
  // D not a multiple of the vector width takes the scalar column tails of the tile products.
  int n = 0;
  for (int D : {1, 3, 8, 12, 20, 40, 72})
    for (int T : {5, 70, 130}) {
      AttnCase c{1, 2, 1, T, D, {7, T}};
      AttnData d(c, 7000 + n++);
      d.forward_fast();
      d.backward_fast();
      attn_expect_matches(d, attn_reference(d), 1e-5, "fast");
    }
}

// Decoding against a ring buffer: every start (wrapping or not), lengths 1..cap, odd head dims.
TEST(AttnDecode, MatchesReferenceOnRingBuffers) {
  for (int D : {2, 6, 16, 32, 128})
    for (int cap : {1, 5, 64, 300}) {
      const auto k = attn_randn(size_t(cap) * D, 10 + D + cap, 2.0), v = attn_randn(size_t(cap) * D, 20 + D + cap);
      const auto q = attn_randn(D, 30 + D + cap, 2.0);
      const auto kd = attn_to_double(k), vd = attn_to_double(v), qd = attn_to_double(q);
      for (int start : {0, 1, cap / 2, cap - 1})
        for (int n : {1, 2, cap / 3 + 1, cap - 1, cap}) {
          if (n < 1 || n > cap || start >= cap) continue;
          std::vector<float> out(D, -1.0f), sc(n);
          std::vector<double> outr(D), scr(n);
          cpu::attn_decode_forward(out.data(), q.data(), k.data(), v.data(), cap, start, n, D, sc.data());
          ref::attn_decode_forward<double>(outr.data(), qd.data(), kd.data(), vd.data(), cap, start, n, D, scr.data());
          EXPECT_LT(attn_scaled_error(out, outr), 1e-5) << "D=" << D << " cap=" << cap << " start=" << start << " n=" << n;
        }
    }
}

TEST(AttnDense, MatchesReference) {
  int n = 0;
  for (int T : {1, 7, 65, 300})
    for (int D : {16, 64})
      for (const auto& wset : attn_window_sets(T, 4)) {
        AttnCase c{n % 2 + 1, 4, n % 3 == 0 ? 2 : 4, T, D, wset};
        AttnData d(c, 9000 + n++);
        d.forward_dense();
        d.backward_dense();
        attn_expect_matches(d, attn_reference(d), 1e-5, "dense");
      }
}

// The reference backward (double) against central differences of loss = sum(out * R).
TEST(AttnRef, GradientsMatchFiniteDifferences) {
  const int B = 1, H = 2, Hkv = 1, T = 9, D = 4;
  const std::vector<int> window = {3, 9};
  Rng rng(11);
  auto rnd = [&](size_t n) {
    std::vector<double> x(n);
    for (auto& e : x) e = rng.normal();
    return x;
  };
  auto q = rnd(size_t(B) * H * T * D), k = rnd(size_t(B) * Hkv * T * D), v = rnd(size_t(B) * Hkv * T * D);
  auto R = rnd(q.size());
  std::vector<double> out(q.size()), lse(size_t(B) * H * T);
  auto loss = [&]() {
    ref::attn_local_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), window.data(), B, H, Hkv,
                                    T, D, nullptr, nullptr);
    double s = 0;
    for (size_t i = 0; i < out.size(); i++) s += out[i] * R[i];
    return s;
  };
  loss();
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  ref::attn_local_backward<double>(dq.data(), dk.data(), dv.data(), R.data(), out.data(), lse.data(), q.data(),
                                   k.data(), v.data(), window.data(), B, H, Hkv, T, D, nullptr);
  const double eps = 1e-5;
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < x.size(); i++) {
      const double x0 = x[i];
      x[i] = x0 + eps;
      const double lp = loss();
      x[i] = x0 - eps;
      const double lm = loss();
      x[i] = x0;
      worst = std::max(worst, std::fabs((lp - lm) / (2 * eps) - grad[i]));
      gmax = std::max(gmax, std::fabs(grad[i]));
    }
    EXPECT_GT(gmax, 1e-3) << name;
    EXPECT_LE(worst, 1e-8 * std::max(1.0, gmax)) << name;
  };
  check(q, dq, "dq");
  check(k, dk, "dk");
  check(v, dv, "dv");
}

// Diagnostics straight from the definition: probabilities in double from the float inputs.
struct AttnDiagDirect {
  std::vector<double> entropy, out_norm, usage;
};
AttnDiagDirect attn_diag_direct(const AttnData& d) {
  const AttnCase& c = d.c;
  AttnDiagDirect r{std::vector<double>(c.H, 0.0), std::vector<double>(c.H, 0.0), std::vector<double>(c.H, 0.0)};
  const double scale = 1.0 / std::sqrt(double(c.D)), n = double(c.B) * c.T;
  std::vector<double> s(c.T), o(c.D);
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.H; h++) {
      const int hk = h / (c.H / c.Hkv), W = c.window[h];
      for (int i = 0; i < c.T; i++) {
        const float* qi = d.q.data() + ((size_t(b) * c.H + h) * c.T + i) * c.D;
        double mx = -INFINITY;
        for (int j = 0; j < c.T; j++) {
          s[j] = -INFINITY;
          if (!(j <= i && i - j < W)) continue;  // written out, independent of attn_visible
          const float* kj = d.k.data() + ((size_t(b) * c.Hkv + hk) * c.T + j) * c.D;
          double dot = 0;
          for (int e = 0; e < c.D; e++) dot += double(qi[e]) * kj[e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j < c.T; j++) z += std::exp(s[j] - mx);
        double ent = 0, dist = 0;
        std::fill(o.begin(), o.end(), 0.0);
        for (int j = 0; j <= i; j++) {
          const double p = std::exp(s[j] - mx) / z;
          if (p > 0) ent -= p * std::log(p);
          dist += p * (i - j);
          const float* vj = d.v.data() + ((size_t(b) * c.Hkv + hk) * c.T + j) * c.D;
          for (int e = 0; e < c.D; e++) o[e] += p * vj[e];
        }
        double nrm = 0;
        for (double x : o) nrm += x * x;
        r.entropy[h] += ent / n;
        r.out_norm[h] += std::sqrt(nrm) / n;
        if (W > 1) r.usage[h] += dist / (W - 1) / n;
      }
    }
  return r;
}

void attn_expect_diag(const AttnDiagDirect& want, const std::vector<double>& ent, const std::vector<double>& nrm,
                      const std::vector<double>& use, const std::string& what) {
  for (size_t h = 0; h < want.entropy.size(); h++) {
    EXPECT_NEAR(ent[h], want.entropy[h], 2e-5 * std::max(1.0, want.entropy[h])) << what << " entropy head " << h;
    EXPECT_NEAR(nrm[h], want.out_norm[h], 2e-5 * std::max(1.0, want.out_norm[h])) << what << " norm head " << h;
    EXPECT_NEAR(use[h], want.usage[h], 2e-5) << what << " usage head " << h;
  }
}

TEST(AttnLocal, DiagnosticsMatchDirectComputation) {
  const std::vector<AttnCase> cases = {
      {2, 8, 4, 300, 32, {1, 2, 63, 64, 65, 300, 100, 7}},
      {1, 4, 1, 1, 16, {1, 1, 2, 5}},
      {1, 4, 2, 130, 64, {129, 130, 4000, 3}},
  };
  int n = 0;
  for (const auto& c : cases) {
    AttnData d(c, 3000 + n++);
    const AttnDiagDirect want = attn_diag_direct(d);
    std::vector<double> ent(c.H, NAN), nrm(c.H, NAN), use(c.H, NAN);
    AttnDiagnostics diag{ent.data(), nrm.data(), use.data()};
    d.forward_fast(&diag);
    attn_expect_diag(want, ent, nrm, use, "fast " + c.name());
    // The reference and the dense path define the same quantities.
    std::fill(ent.begin(), ent.end(), NAN), std::fill(nrm.begin(), nrm.end(), NAN);
    std::fill(use.begin(), use.end(), NAN);
    d.forward_dense(&diag);
    attn_expect_diag(want, ent, nrm, use, "dense " + c.name());
    auto q = attn_to_double(d.q), k = attn_to_double(d.k), v = attn_to_double(d.v);
    std::vector<double> out(q.size()), lse(d.lse.size());
    ref::attn_local_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), c.window.data(), c.B, c.H,
                                    c.Hkv, c.T, c.D, &diag, nullptr);
    attn_expect_diag(want, ent, nrm, use, "ref " + c.name());
  }
  // Uniform attention (q = 0): entropy log(min(t + 1, W)) and usage 1/2 exactly known.
  AttnCase c{1, 1, 1, 50, 8, {10}};
  AttnData d(c, 1);
  std::fill(d.q.begin(), d.q.end(), 0.0f);
  double ent, nrm, use;
  AttnDiagnostics diag{&ent, &nrm, &use};
  d.forward_fast(&diag);
  double want_ent = 0, want_use = 0;
  for (int t = 0; t < c.T; t++) {
    const int n_vis = std::min(t + 1, 10);
    want_ent += std::log(double(n_vis)) / c.T;
    want_use += (n_vis - 1) / 2.0 / 9.0 / c.T;
  }
  EXPECT_NEAR(ent, want_ent, 1e-5);
  EXPECT_NEAR(use, want_use, 1e-5);
}

// Sum over rows of min(t + 1, W_h), counted with a plain loop.
uint64_t attn_expected_pairs(const AttnCase& c) {
  uint64_t n = 0;
  for (int h = 0; h < c.H; h++)
    for (int t = 0; t < c.T; t++) n += uint64_t(std::min(t + 1, c.window[h]));
  return n * c.B;
}

TEST(AttnLocal, PairCountersAreExact) {
  const std::vector<AttnCase> cases = {
      {2, 4, 2, 300, 16, {1, 64, 65, 300}},
      {1, 8, 8, 1000, 16, {125, 125, 125, 125, 250, 250, 500, 1000}},
      {1, 2, 1, 7, 16, {2, 1000}},
  };
  int n = 0;
  for (const auto& c : cases) {
    AttnData d(c, 4000 + n++);
    const uint64_t want = attn_expected_pairs(c);
    AttnCounters fast, dense, refc;
    d.forward_fast(nullptr, &fast);
    d.backward_fast(&fast);
    EXPECT_EQ(fast.fwd_pairs, want) << c.name();
    EXPECT_EQ(fast.bwd_pairs, want) << c.name();
    // Whole tiles: at least the visible pairs, at most what the visited tiles hold.
    EXPECT_GE(fast.fwd_pairs_computed, want);
    EXPECT_LE(fast.fwd_pairs_computed, fast.fwd_tiles_visited * kTile * kTile);
    EXPECT_GE(fast.bwd_pairs_computed, want);
    EXPECT_GT(fast.macs, 0u);
    // Every query tile of every head runs once (the forward takes them in runs of consecutive tiles): it visits the
    // key tiles that intersect [q0 - W + 1, q0 + nq - 1].
    uint64_t tiles = 0;
    for (int h = 0; h < c.H; h++)
      for (int q0 = 0; q0 < c.T; q0 += kTile) {
        const int last = std::min(c.T, q0 + kTile) - 1;
        tiles += uint64_t(c.B) * (last / kTile - std::max(0, q0 - c.window[h] + 1) / kTile + 1);
      }
    EXPECT_EQ(fast.fwd_tiles_visited, tiles) << c.name();
    // Counters accumulate.
    AttnCounters twice = fast;
    d.forward_fast(nullptr, &twice);
    EXPECT_EQ(twice.fwd_pairs, 2 * want);
    EXPECT_EQ(twice.fwd_tiles_visited, 2 * fast.fwd_tiles_visited);

    d.forward_dense(nullptr, &dense);
    d.backward_dense(&dense);
    EXPECT_EQ(dense.fwd_pairs, want);
    EXPECT_EQ(dense.bwd_pairs, want);
    EXPECT_EQ(dense.fwd_pairs_computed, uint64_t(c.B) * c.H * c.T * c.T);

    auto q = attn_to_double(d.q), k = attn_to_double(d.k), v = attn_to_double(d.v), g = attn_to_double(d.dout);
    std::vector<double> out(q.size()), lse(d.lse.size()), dq(q.size()), dk(k.size()), dv(k.size());
    ref::attn_local_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), c.window.data(), c.B, c.H,
                                    c.Hkv, c.T, c.D, nullptr, &refc);
    ref::attn_local_backward<double>(dq.data(), dk.data(), dv.data(), g.data(), out.data(), lse.data(), q.data(),
                                     k.data(), v.data(), c.window.data(), c.B, c.H, c.Hkv, c.T, c.D, &refc);
    EXPECT_EQ(refc.fwd_pairs, want);
    EXPECT_EQ(refc.bwd_pairs, want);
    EXPECT_EQ(attn_visible_pairs(c.T, c.window[0]) * c.B, [&] {
      uint64_t s = 0;
      for (int t = 0; t < c.T; t++) s += std::min(t + 1, c.window[0]);
      return s * c.B;
    }());
  }
}

// Executed work follows the windows: small windows visit fewer tiles, full windows skip none; at T = 4096 with
// W = T/8 the whole-tile overhead stays within 15% of the exact pair ratio.
TEST(AttnLocal, WorkFollowsWindows) {
  const int T = 4096, D = 16;
  AttnCounters full, small;
  AttnData f({1, 1, 1, T, D, {T}}, 1), s({1, 1, 1, T, D, {T / 8}}, 1);
  f.forward_fast(nullptr, &full);
  f.backward_fast(&full);
  s.forward_fast(nullptr, &small);
  s.backward_fast(&small);
  EXPECT_EQ(full.fwd_tiles_skipped, 0u);
  EXPECT_GT(small.fwd_tiles_skipped, 0u);
  EXPECT_EQ(small.fwd_tiles_visited + small.fwd_tiles_skipped, full.fwd_tiles_visited);
  const double pair_ratio = double(small.fwd_pairs) / full.fwd_pairs;
  const double computed_ratio = double(small.fwd_pairs_computed) / full.fwd_pairs_computed;
  EXPECT_LT(computed_ratio, 1.15 * pair_ratio);
  EXPECT_LT(double(small.bwd_pairs_computed) / full.bwd_pairs_computed, 1.15 * pair_ratio);
  EXPECT_LT(double(small.macs) / full.macs, 1.15 * pair_ratio);
}

TEST(AttnLocal, DeterministicAcrossThreadsAndSchedules) {
  AttnCase c{2, 8, 2, 700, 32, {700, 64, 65, 1, 350, 700, 2, 100}};
  AttnData ref1(c, 77);
  const int saved = omp_get_max_threads();
  std::vector<double> e1(c.H), n1(c.H), u1(c.H);
  AttnDiagnostics diag1{e1.data(), n1.data(), u1.data()};
  omp_set_num_threads(1);
  ref1.forward_fast(&diag1);
  ref1.backward_fast();
  // fused: the softmax passes of interior tiles in the score products' epilogues (the default), or separate
  struct Run {
    int threads;
    cpu::AttnBackwardSchedule schedule;
    bool fused = true;
  };
  for (Run run : {Run{2, cpu::AttnBackwardSchedule::automatic}, Run{2, cpu::AttnBackwardSchedule::per_head},
                  Run{2, cpu::AttnBackwardSchedule::per_tile}, Run{3, cpu::AttnBackwardSchedule::per_tile},
                  Run{1, cpu::AttnBackwardSchedule::per_tile}, Run{1, cpu::AttnBackwardSchedule::per_head, false},
                  Run{2, cpu::AttnBackwardSchedule::per_tile, false}}) {
    omp_set_num_threads(run.threads);
    cpu::attn_local_set_backward_schedule(run.schedule);
    cpu::attn_local_set_fused_epilogues(run.fused);
    AttnData d(c, 77);
    std::vector<double> e(c.H), n(c.H), u(c.H);
    AttnDiagnostics diag{e.data(), n.data(), u.data()};
    d.forward_fast(&diag);
    d.backward_fast();
    const std::string what = str_cat("threads ", run.threads, " schedule ", int(run.schedule), " fused ", run.fused);
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    EXPECT_TRUE(same(d.out, ref1.out)) << what;
    EXPECT_TRUE(same(d.lse, ref1.lse)) << what;
    EXPECT_TRUE(same(d.dq, ref1.dq)) << what;
    EXPECT_TRUE(same(d.dk, ref1.dk)) << what;
    EXPECT_TRUE(same(d.dv, ref1.dv)) << what;
    EXPECT_TRUE(same(e, e1) && same(n, n1) && same(u, u1)) << what;
  }
  cpu::attn_local_set_backward_schedule(cpu::AttnBackwardSchedule::automatic);
  cpu::attn_local_set_fused_epilogues(true);
  omp_set_num_threads(saved);
}

// The score tiles hold NaN before every tile pair (attn_local_set_poison_scratch): a product that read an entry no
// product wrote for this pair (a block the band skipped, a margin left unset) would give NaN. Boundary tiles of
// every kind (windows below, at and above a tile, odd T, head dims with column tails), fused and not.
TEST(AttnLocal, NoProductReadsAStaleScore) {
  const std::vector<AttnCase> cases = {{1, 8, 2, 300, 32, {1, 7, 63, 64, 65, 100, 129, 300}},
                                       {1, 4, 4, 77, 24, {2, 9, 40, 77}},
                                       {1, 2, 1, 200, 16, {17, 150}}};
  cpu::attn_local_set_poison_scratch(true);
  int n = 0;
  for (bool fused : {true, false}) {
    cpu::attn_local_set_fused_epilogues(fused);
    for (const auto& c : cases) {
      AttnData d(c, 9100 + n++);
      d.forward_fast();
      d.backward_fast();
      attn_expect_matches(d, attn_reference(d), 1e-5, fused ? "fused, poisoned" : "separate, poisoned");
    }
  }
  cpu::attn_local_set_fused_epilogues(true);
  cpu::attn_local_set_poison_scratch(false);
}

// T = 16384 runs without a T x T buffer (that alone would be 1 GiB); spot-check rows against a direct sum.
TEST(AttnLocal, LongContextWithoutQuadraticMemory) {
  const int T = 16384, D = 16;
  AttnCase c{1, 2, 1, T, D, {T, 1000}};
  AttnData d(c, 5);
  std::ofstream("/proc/self/clear_refs") << "5";  // resets the peak RSS (VmHWM) to the current RSS
  const double rss0 = current_rss_mb(), peak0 = peak_rss_mb();
  d.forward_fast();
  d.backward_fast();
  // If the reset is unavailable an earlier, higher peak only makes the check weaker, never flaky.
  const double grown = peak_rss_mb() - std::max(rss0, peak0);
  EXPECT_LT(grown, 256.0) << "peak RSS grew by " << grown << " MB";
  for (int h = 0; h < c.H; h++)
    for (int i : {0, 1, 63, 64, 999, 1000, 5000, T - 1}) {
      const float* qi = d.q.data() + (size_t(h) * T + i) * D;
      double mx = -INFINITY;
      std::vector<double> s(i + 1, -INFINITY), o(D, 0.0);
      for (int j = std::max(0, i - c.window[h] + 1); j <= i; j++) {
        double dot = 0;
        for (int e = 0; e < D; e++) dot += double(qi[e]) * d.k[size_t(j) * D + e];
        s[j] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (int j = 0; j <= i; j++) z += std::exp(s[j] - mx);
      for (int j = 0; j <= i; j++)
        for (int e = 0; e < D; e++) o[e] += std::exp(s[j] - mx) / z * d.v[size_t(j) * D + e];
      EXPECT_NEAR(d.lse[size_t(h) * T + i], mx + std::log(z), 1e-5 * std::max(1.0, std::fabs(mx)));
      for (int e = 0; e < D; e++) EXPECT_NEAR(d.out[(size_t(h) * T + i) * D + e], o[e], 1e-5) << "row " << i;
    }
  for (float x : d.dq) ASSERT_TRUE(std::isfinite(x));
  for (float x : d.dk) ASSERT_TRUE(std::isfinite(x));
}

// Sampled rows of one long attention (B = 1) in double, straight from the definition: the softmax of query i over
// the keys [i - W + 1, i], written out here (not via attn_visible, ref:: or any tiling), so it shares no code with
// the kernels. Query row (h, i): lse, out, Delta = dout . out, dq. Key row (hk, j): dk and dv, sums over the
// queries of every head of the group that see j, each needing that query's row (lse, Delta).
struct AttnSampledRef {
  const AttnData& d;
  struct Row {
    double lse = 0, delta = 0;
    std::vector<double> out;
  };
  std::map<std::pair<int, int>, Row> rows;  // (h, i), filled by add_rows

  const float* at(const std::vector<float>& x, int head, int t) const {
    return x.data() + (size_t(head) * d.c.T + t) * d.c.D;
  }
  int kv(int h) const { return h / (d.c.H / d.c.Hkv); }
  int first_key(int h, int i) const { return std::max(0, i - d.c.window[h] + 1); }
  double score(int h, int i, int j) const {
    const float *qi = at(d.q, h, i), *kj = at(d.k, kv(h), j);
    double s = 0;
    for (int e = 0; e < d.c.D; e++) s += double(qi[e]) * kj[e];
    return s / std::sqrt(double(d.c.D));
  }
  // The query rows (h, i) that see key j of KV head hk.
  std::vector<std::pair<int, int>> queries_of(int hk, int j) const {
    std::vector<std::pair<int, int>> qs;
    for (int h = 0; h < d.c.H; h++)
      if (kv(h) == hk)
        for (int i = j; i < d.c.T && i - j < d.c.window[h]; i++) qs.push_back({h, i});
    return qs;
  }
  void add_rows(std::vector<std::pair<int, int>> need) {
    std::sort(need.begin(), need.end());
    need.erase(std::unique(need.begin(), need.end()), need.end());
    std::vector<Row> done(need.size());
#pragma omp parallel for schedule(dynamic, 8)
    for (size_t n = 0; n < need.size(); n++) {
      const auto [h, i] = need[n];
      const int j0 = first_key(h, i);
      std::vector<double> s(i + 1 - j0);
      double mx = -INFINITY, z = 0;
      for (int j = j0; j <= i; j++) mx = std::max(mx, s[j - j0] = score(h, i, j));
      Row& r = done[n];
      r.out.assign(d.c.D, 0.0);
      for (int j = j0; j <= i; j++) {
        const double p = std::exp(s[j - j0] - mx);
        z += p;
        for (int e = 0; e < d.c.D; e++) r.out[e] += p * at(d.v, kv(h), j)[e];
      }
      for (int e = 0; e < d.c.D; e++) r.out[e] /= z, r.delta += at(d.dout, h, i)[e] * r.out[e];
      r.lse = mx + std::log(z);
    }
    for (size_t n = 0; n < need.size(); n++) rows[need[n]] = std::move(done[n]);
  }
  // P_ij and dS_ij = P_ij (dP_ij - Delta_i) of a visible pair, dP_ij = dout_i . v_j
  std::pair<double, double> p_ds(int h, int i, int j) const {
    const Row& r = rows.at({h, i});
    const float *g = at(d.dout, h, i), *vj = at(d.v, kv(h), j);
    double dp = 0;
    for (int e = 0; e < d.c.D; e++) dp += double(g[e]) * vj[e];
    const double p = std::exp(score(h, i, j) - r.lse);
    return {p, p * (dp - r.delta)};
  }
  // dq_i = sum_j dS_ij k_j / sqrt(D)
  std::vector<double> dq(int h, int i) const {
    std::vector<double> g(d.c.D, 0.0);
    for (int j = first_key(h, i); j <= i; j++) {
      const double ds = p_ds(h, i, j).second / std::sqrt(double(d.c.D));
      for (int e = 0; e < d.c.D; e++) g[e] += ds * at(d.k, kv(h), j)[e];
    }
    return g;
  }
  // dk_j = sum_i dS_ij q_i / sqrt(D), dv_j = sum_i P_ij dout_i over the queries i that see key j
  void dkv(int hk, int j, std::vector<double>& dk, std::vector<double>& dv) const {
    dk.assign(d.c.D, 0.0), dv.assign(d.c.D, 0.0);
    for (auto [h, i] : queries_of(hk, j)) {
      const auto [p, ds] = p_ds(h, i, j);
      for (int e = 0; e < d.c.D; e++)
        dk[e] += ds / std::sqrt(double(d.c.D)) * at(d.q, h, i)[e], dv[e] += p * at(d.dout, h, i)[e];
    }
  }
};

// T = 16384, forward and backward, on sampled rows against AttnSampledRef: tile boundaries (multiples of 64 and
// +-1), window edges, rows 0 and T-1, random rows. A key row is checked where its queries are cheap: any key of a
// KV group with short windows, only the last keys (few queries) of a group with a full-context head.
// Tolerance as in the short tests, 1e-5 (2e-5 for gradients) of max(1, largest sampled |value|) per tensor: fp32
// accumulation over up to 16384 keys measured worst 2.3e-6 (dq), the rest <= 1.3e-6.
TEST(AttnLocal, MatchesSampledReferenceT16384) {
  const int T = 16384;
  const std::vector<AttnCase> cases = {
      {1, 4, 2, T, 32, {T, 2048, 1000, 64}},  // GQA 2: kv 0 serves {T, 2048}, kv 1 serves {1000, 64}
      {1, 3, 1, T, 64, {65, 1, 300}},         // GQA 3, another head dim
  };
  // rows: tile boundaries and window edges, the last rows, a few random ones
  std::vector<int> sample = {0, 1, 63, 64, 65, 127, 128, 299, 300, 999, 1000, 1001, 2047, 2048, 2049, 8191, 8192};
  for (int back : {129, 65, 64, 63, 2, 1}) sample.push_back(T - back);
  Rng rng(16);
  for (int n = 0; n < 4; n++) sample.push_back(int(rng.below(T)));
  int n = 0;
  for (const auto& c : cases) {
    AttnData d(c, 16000 + n++);
    d.forward_fast();
    d.backward_fast();
    AttnSampledRef r{d, {}};
    std::vector<std::pair<int, int>> need, keys;  // query rows (h, i) the reference needs, key rows (hk, j)
    for (int h = 0; h < c.H; h++)
      for (int i : sample) need.push_back({h, i});
    for (int hk = 0; hk < c.Hkv; hk++)
      for (int j : sample) {
        const auto qs = r.queries_of(hk, j);
        int64_t pairs = 0;  // the reference's cost: the rows of key j's queries
        for (auto [h, i] : qs) pairs += std::min(c.window[h], i + 1);
        if (pairs > (int64_t(1) << 22)) continue;
        keys.push_back({hk, j});
        need.insert(need.end(), qs.begin(), qs.end());
      }
    r.add_rows(need);
    std::vector<float> got[5];
    std::vector<double> want[5];  // out, lse, dq, dk, dv at the sampled rows
    auto add = [&](int what, const float* g, const double* w, int len) {
      got[what].insert(got[what].end(), g, g + len), want[what].insert(want[what].end(), w, w + len);
    };
    for (int h = 0; h < c.H; h++)
      for (int i : sample) {
        const auto& row = r.rows.at({h, i});
        add(0, r.at(d.out, h, i), row.out.data(), c.D);
        add(1, &d.lse[size_t(h) * T + i], &row.lse, 1);
        add(2, r.at(d.dq, h, i), r.dq(h, i).data(), c.D);
      }
    for (auto [hk, j] : keys) {
      std::vector<double> dk, dv;
      r.dkv(hk, j, dk, dv);
      add(3, r.at(d.dk, hk, j), dk.data(), c.D);
      add(4, r.at(d.dv, hk, j), dv.data(), c.D);
    }
    const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int w = 0; w < 5; w++) {
      const double err = attn_scaled_error(got[w], want[w]), tol = w < 2 ? 1e-5 : 2e-5;
      EXPECT_LE(err, tol) << names[w] << " at " << want[w].size() << " sampled values, " << c.name();
    }
  }
}

TEST(AttnLocal, RejectsBadArguments) {
  AttnData d({1, 2, 1, 8, 16, {4, 0}}, 1);
  EXPECT_THROW(d.forward_fast(), Error);
  AttnData e({1, 3, 2, 8, 16, {4, 4, 4}}, 1);
  EXPECT_THROW(e.forward_fast(), Error);
  EXPECT_THROW(e.backward_fast(), Error);
}

// The backend table (kernels/backend.h): each named float backend's attention runs its kernel (the same work
// counters and, for the fast kernels, bitwise the same results as a direct call; the reference template may contract
// differently in another translation unit); names round-trip, an unknown one is an error; the double backend is the
// reference.
TEST(Backend, EachBackendRunsItsAttentionKernel) {
  const int B = 2, H = 4, Hkv = 2, T = 70, D = 16;
  const std::vector<int> window = {70, 5, 1, 64};
  const size_t nq = size_t(B) * H * T * D, nk = size_t(B) * Hkv * T * D, nl = size_t(B) * H * T;
  const auto q = attn_randn(nq, 1), k = attn_randn(nk, 2), v = attn_randn(nk, 3), dout = attn_randn(nq, 4);
  struct Out {
    std::vector<float> out, lse, dq, dk, dv;
    AttnCounters c;
  };
  auto run = [&](auto forward, auto backward) {
    Out o{std::vector<float>(nq), std::vector<float>(nl), std::vector<float>(nq), std::vector<float>(nk),
          std::vector<float>(nk), {}};
    forward(o.out.data(), o.lse.data(), q.data(), k.data(), v.data(), window.data(), B, H, Hkv, T, D, nullptr, &o.c);
    backward(o.dq.data(), o.dk.data(), o.dv.data(), dout.data(), o.out.data(), o.lse.data(), q.data(), k.data(),
             v.data(), window.data(), B, H, Hkv, T, D, &o.c);
    return o;
  };
  for (const std::string name : {"local", "dense", "ref"}) {
    SCOPED_TRACE(name);
    const Backend<float>& be = backend_named(name);
    EXPECT_EQ(be.name, name);
    const Out via = run(be.attention_forward, be.attention_backward);
    const Out direct =
        name == "local"
            ? run([](auto... a) { cpu::attn_local_forward(a...); }, [](auto... a) { cpu::attn_local_backward(a...); })
        : name == "dense"
            ? run([](auto... a) { cpu::attn_dense_forward(a...); }, [](auto... a) { cpu::attn_dense_backward(a...); })
            : run([](auto... a) { ref::attn_local_forward<float>(a...); },
                  [](auto... a) { ref::attn_local_backward<float>(a...); });
    EXPECT_EQ(via.c.fwd_pairs_computed, direct.c.fwd_pairs_computed);
    EXPECT_EQ(via.c.fwd_tiles_visited, direct.c.fwd_tiles_visited);
    EXPECT_EQ(via.c.bwd_pairs_computed, direct.c.bwd_pairs_computed);
    EXPECT_EQ(via.c.macs, direct.c.macs);
    if (name != "ref") {
      EXPECT_TRUE(via.out == direct.out && via.lse == direct.lse);
      EXPECT_TRUE(via.dq == direct.dq && via.dk == direct.dk && via.dv == direct.dv);
    }
    EXPECT_LT(attn_scaled_error(via.out, attn_to_double(direct.out)), 1e-6);
    EXPECT_LT(attn_scaled_error(via.dq, attn_to_double(direct.dq)), 1e-6);
  }
  EXPECT_THROW(backend_named("flash"), Error);
  EXPECT_EQ(std::string(backend_default<float>().name), "local");
  EXPECT_EQ(std::string(backend_ref_double().name), "ref");
  EXPECT_EQ(backend_default<double>().attention_forward, &ref::attn_local_forward<double>);
}

}  // namespace
}  // namespace aah
