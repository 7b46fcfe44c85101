// Tests of the need-aware window policy (spec section 10, src/controller/coverage.h) and of deep_reuse's cache step
// (spec section 7, revised): the mass measurement against probabilities computed here from the scalar reference
// attention, the decisions on hand-made mass profiles, the trace, save/load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"
#include "controller/controller.h"
#include "controller/coverage.h"
#include "core/rng.h"
#include "formats/safetensors.h"
#include "kernels/ref/ref.h"
#include "kernels/ref/attention.h"

using namespace aah;

namespace {

ControllerConfig config_for(const std::string& regime, std::vector<int> windows = {4, 8, 16, 32}) {
  ControllerConfig c;
  c.windows = std::move(windows);
  c.seed = 7;
  controller_apply_regime(c, regime);
  return c;
}

// (H, K) mass rows.
std::vector<double> rows(std::initializer_list<std::vector<double>> r) {
  std::vector<double> m;
  for (const auto& x : r) m.insert(m.end(), x.begin(), x.end());
  return m;
}

}  // namespace

// m_h(W) from coverage_window_mass against the definition: p_ij = exp(q_i . k_j / sqrt(D) - lse_i), lse_i from the
// scalar reference attention (double) at full window, summed here over i - j < W and averaged over queries. T = 150
// spans three query blocks of 64 (the last partial); GQA 4 heads on 2 KV heads; a window larger than T. With
// aah.coverage_tail 0.1 the mean is over the 15 queries of least mass instead.
TEST(CoverageMass, MatchesReferenceAttentionProbabilities) {
  const int S = 2, H = 4, Hkv = 2, T = 150, D = 8, K = 5;
  const std::vector<int> windows = {1, 5, 40, 150, 300};
  Rng rng(3);
  std::vector<float> q(size_t(S) * H * T * D), k(size_t(S) * Hkv * T * D);
  // Scores of a few units: peaked rows, so the bands really differ.
  for (auto& x : q) x = float(3 * rng.normal());
  for (auto& x : k) x = float(rng.normal());
  std::vector<double> mass(size_t(S) * H * K);
  coverage_window_mass(backend_local(), mass.data(), q.data(), k.data(), S, H, Hkv, T, D, windows.data(), K);

  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), out(qd.size()), lse(size_t(S) * H * T);
  std::vector<int> full(H, T);
  ref::attn_local_forward<double>(out.data(), lse.data(), qd.data(), kd.data(), kd.data(), full.data(), S, H, Hkv, T,
                                  D, nullptr, nullptr);
  // each query's reference mass within window W_c: the sum of its p_ij over i - j < W_c
  auto per_query_mass = [&](int s, int h, int c) {
    std::vector<double> m(T, 0.0);
    for (int i = 0; i < T; i++) {
      const double* qi = &qd[((size_t(s) * H + h) * T + i) * D];
      for (int j = std::max(0, i - windows[c] + 1); j <= i; j++) {
        const double* kj = &kd[((size_t(s) * Hkv + h / 2) * T + j) * D];
        double dot = 0;
        for (int d = 0; d < D; d++) dot += qi[d] * kj[d];
        m[i] += std::exp(dot / std::sqrt(double(D)) - lse[(size_t(s) * H + h) * T + i]);
      }
    }
    return m;
  };
  // aah.coverage_tail 0.1: per (s, h, W) the mean of the ceil(0.1 T) = 15 least per-query masses.
  const int n_tail = 15;
  std::vector<double> tail_mass(mass.size());
  coverage_window_mass(backend_local(), tail_mass.data(), q.data(), k.data(), S, H, Hkv, T, D, windows.data(), K, 0.1);
  double spread = 0;  // how far the windows' masses lie apart: the test must not pass on all-ones
  for (int s = 0; s < S; s++)
    for (int h = 0; h < H; h++)
      for (int c = 0; c < K; c++) {
        std::vector<double> per_query = per_query_mass(s, h, c);
        double m = 0, least = 0;
        for (double x : per_query) m += x;
        m /= T;
        std::sort(per_query.begin(), per_query.end());
        for (int i = 0; i < n_tail; i++) least += per_query[i];
        least /= n_tail;
        const size_t at = (size_t(s) * H + h) * K + c;
        EXPECT_NEAR(mass[at], m, 2e-5) << "s " << s << " h " << h << " W " << windows[c];
        EXPECT_NEAR(tail_mass[at], least, 2e-5) << "tail: s " << s << " h " << h << " W " << windows[c];
        EXPECT_LE(tail_mass[at], mass[at] + 1e-12);  // the least of the queries: never above the mean
        if (windows[c] >= T) {  // every key: exactly 1
          EXPECT_EQ(mass[at], 1.0);
          EXPECT_EQ(tail_mass[at], 1.0);
        }
        spread = std::max(spread, mass[at] - mass[(size_t(s) * H + h) * K]);
      }
  EXPECT_GT(spread, 0.5);
  // tail 1 is the plain mean, bit for bit
  std::vector<double> all(mass.size());
  coverage_window_mass(backend_local(), all.data(), q.data(), k.data(), S, H, Hkv, T, D, windows.data(), K, 1.0);
  EXPECT_EQ(all, mass);
  // The mean over sequences, in sequence order.
  std::vector<double> mean(size_t(H) * K);
  coverage_mass_mean(mean.data(), mass.data(), S, H, K);
  EXPECT_DOUBLE_EQ(mean[K + 1], (mass[K + 1] + mass[size_t(H) * K + K + 1]) / 2);
}

// A head that attends only to the key 20 back (and the first 20 queries only to themselves) has mass ~0 below
// W = 21 and ~1 from it; one that attends to itself has mass ~1 everywhere.
TEST(CoverageMass, HandBuiltReach) {
  const int H = 2, T = 100, D = 4;
  const std::vector<int> windows = {1, 16, 32, 100};
  // Positions on a circle: k_j = (cos a_j, sin a_j, 0, 0), a_j = 2 pi j / T. Head 0: q_i = 20000 k_{i-20} (i >= 20)
  // or 20000 k_i; head 1: q_i = 20000 k_i. Score (scale 1/2) 10000 cos(a_i' - a_j): the next key on the circle
  // scores 10000 (1 - cos(2 pi / 100)) = 19.7 lower, so the peak holds all but ~1e-8 of the mass.
  std::vector<float> q(size_t(H) * T * D, 0.0f), k(size_t(T) * D, 0.0f);
  const double pi = std::acos(-1.0);
  for (int j = 0; j < T; j++) k[size_t(j) * D] = float(std::cos(2 * pi * j / T)), k[size_t(j) * D + 1] = float(std::sin(2 * pi * j / T));
  for (int i = 0; i < T; i++) {
    const int src = i >= 20 ? i - 20 : i;
    for (int d = 0; d < 2; d++) {
      q[size_t(i) * D + d] = 20000 * k[size_t(src) * D + d];
      q[(size_t(T) + i) * D + d] = 20000 * k[size_t(i) * D + d];
    }
  }
  std::vector<double> mass(size_t(H) * 4);
  coverage_window_mass(backend_local(), mass.data(), q.data(), k.data(), 1, H, 1, T, D, windows.data(), 4);
  // Head 0: 20 of 100 queries look at themselves (counted by every window), 80 look 20 back (from W = 21 on).
  EXPECT_NEAR(mass[0], 0.2, 0.02);
  EXPECT_NEAR(mass[1], 0.2, 0.02);
  EXPECT_NEAR(mass[2], 1.0, 0.02);
  EXPECT_EQ(mass[3], 1.0);
  EXPECT_EQ(coverage_choice(&mass[0], 4, 0.95), 2);
  EXPECT_GT(mass[4], 0.95);
  EXPECT_EQ(coverage_choice(&mass[4], 4, 0.95), 0);
  // aah.coverage_tail: the mean over the queries of least mass. Tail 0.5 (50 queries): all of them look 20 back, so
  // head 0 has ~0 below W = 21, where the plain mean said 0.2. Tail 0.9 (90): those 80 and 10 that see themselves,
  // 10 / 90. Head 1 stays ~1 everywhere.
  coverage_window_mass(backend_local(), mass.data(), q.data(), k.data(), 1, H, 1, T, D, windows.data(), 4, 0.5);
  EXPECT_NEAR(mass[0], 0.0, 0.02);
  EXPECT_NEAR(mass[1], 0.0, 0.02);
  EXPECT_NEAR(mass[2], 1.0, 0.02);
  EXPECT_EQ(mass[3], 1.0);
  EXPECT_GT(mass[4], 0.95);
  coverage_window_mass(backend_local(), mass.data(), q.data(), k.data(), 1, H, 1, T, D, windows.data(), 4, 0.9);
  EXPECT_NEAR(mass[0], 10.0 / 90, 0.02);
  EXPECT_NEAR(mass[1], 10.0 / 90, 0.02);
  EXPECT_NEAR(mass[2], 1.0, 0.02);
}

// Spec 10's examples on hand-made profiles (W = 512, 1024, 2048, 4096): mass concentrated near -> the smallest
// window; a head whose mass sits at distance 1000 (outside 512, inside 1024) -> 1024; a head needing it all -> 4096.
TEST(CoverageDecision, SmallestWindowReachingTheCoverage) {
  const std::vector<double> near = {0.97, 0.99, 1.0, 1.0}, at1000 = {0.30, 0.96, 0.98, 1.0}, far = {0.5, 0.6, 0.9, 1.0};
  EXPECT_EQ(coverage_choice(near.data(), 4, 0.95), 0);
  EXPECT_EQ(coverage_choice(at1000.data(), 4, 0.95), 1);
  EXPECT_EQ(coverage_choice(far.data(), 4, 0.95), 3);
  EXPECT_EQ(coverage_choice(near.data(), 4, 0.97), 0);  // >=, not >
  EXPECT_EQ(coverage_choice(near.data(), 4, 0.98), 1);
  EXPECT_EQ(coverage_choice(far.data(), 4, 1.0), 3);
  const std::vector<double> short_of_one = {0.1, 0.2, 0.3, 0.9999};  // K-1 when no window reaches it
  EXPECT_EQ(coverage_choice(short_of_one.data(), 4, 1.0), 3);

  // Through the layer: resolution EMA from full (index 3), beta 0.15: near -> round(0.45) = 0 -> 512;
  // at1000 -> round(0.45 + 0.85) = 1 -> 1024; far -> 3 -> 4096. Next update, near again: round(0) = 0.
  LayerController lc(config_for("coverage", {512, 1024, 2048, 4096}), 3, 0);
  EXPECT_EQ(lc.windows(), (std::vector<int>{4096, 4096, 4096}));
  const std::vector<double> m = rows({near, at1000, far});
  nlohmann::json t;
  lc.update(ControlInput::of_mass(m.data()), 0, &t);
  EXPECT_EQ(lc.windows(), (std::vector<int>{512, 1024, 4096}));
  EXPECT_GE(lc.windows()[1], 1024);
  EXPECT_EQ(t["policy"], "coverage");
  EXPECT_EQ(t["head_choice"].get<std::vector<int>>(), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(t["resolution_prev"].get<std::vector<int>>(), (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(t["mass"][1].get<std::vector<double>>(), at1000);
  EXPECT_EQ(t["coverage"], 0.95);
  // A far head turning near moves through the EMA: round(0.15 * 3 + 0.85 * 1) = round(1.3) = 1.
  const std::vector<double> m2 = rows({near, near, at1000});
  lc.update(ControlInput::of_mass(m2.data()), 5, &t);
  EXPECT_EQ(lc.resolution_index(), (std::vector<int>{0, 0, 1}));
  // Non-finite mass skips the update.
  std::vector<double> bad = m2;
  bad[4] = NAN;
  lc.update(ControlInput::of_mass(bad.data()), 10, &t);
  EXPECT_EQ(t["skipped"], "non-finite attention mass");
  EXPECT_EQ(lc.resolution_index(), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(lc.updates_done(), 2);
}

// The regime and its knobs: coverage updates every control_interval steps, reads the mass, not the features.
TEST(CoverageDecision, RegimeAndKnobs) {
  ControllerConfig c = config_for("coverage+control_interval_10");
  EXPECT_EQ(c.policy, WindowPolicy::coverage);
  EXPECT_EQ(c.control_interval, 10);
  Controller ctl(c, 2, 4);
  EXPECT_TRUE(ctl.needs_mass());
  EXPECT_FALSE(ctl.needs_features());
  EXPECT_TRUE(ctl.is_update_step(0));
  EXPECT_FALSE(ctl.is_update_step(5));
  EXPECT_TRUE(ctl.is_update_step(20));
  EXPECT_FALSE(Controller(config_for("full_adaptive"), 1, 4).needs_mass());
  c.coverage = 0;
  EXPECT_NE(test::error_of([&] { controller_validate(c); }).find("'aah.coverage' must be in (0, 1]"), std::string::npos);
  c.coverage = 1;
  c.coverage_sample = 0;
  EXPECT_NE(test::error_of([&] { controller_validate(c); }).find("aah.coverage_sample"), std::string::npos);
  ControllerConfig f = config_for("full_adaptive");
  f.pair_budget = 0.5;
  EXPECT_NE(test::error_of([&] { controller_validate(f); }).find("applies to policies coverage, copy and oracle only"), std::string::npos);
  f.pair_budget = 0;
  f.coverage_tail = 0.5;
  EXPECT_NE(test::error_of([&] { controller_validate(f); }).find("'aah.coverage_tail' applies to policy coverage only"),
            std::string::npos);
  // the variant on top of the budget regime: both knobs, policy coverage
  ControllerConfig t = config_for("coverage_budget_500+coverage_tail_20");
  EXPECT_EQ(t.policy, WindowPolicy::coverage);
  EXPECT_DOUBLE_EQ(t.pair_budget, 0.5);
  EXPECT_DOUBLE_EQ(t.coverage_tail, 0.02);
  EXPECT_DOUBLE_EQ(config_for("coverage_budget_500").coverage_tail, 1.0);
}

// Budget variant, worked by hand. W = 4, 8, 16, 32 (T 32): pairs 122, 228, 392, 528. Head 0 mass .5 .6 .7 1,
// head 1 .1 .9 .95 1. Budget 0.5: limit 0.5 * 2 * 528 = 528, start 244.
//   round 1: h1 0->1 gains .8 for 106 (7.5e-3 per pair, the best); used 350
//   round 2: h0 0->1 .1/106 (9.4e-4) fits (456); h0 0->2 needs 620, h0 0->3 650, h1 1->2 (.05/164) 514 fits but
//            3.0e-4 < 9.4e-4: h0 -> 1, used 456
//   round 3: h0 1->2 (620), h1 1->2 (620), ... nothing fits: c = (1, 1), pair ratio 456 / 1056.
// Budget 1: h1 0->1, then h0 0->3 (.5/406 = 1.23e-3 beats .1/106), then h1 1->3 (.1/300 beats .05/164): (3, 3).
TEST(CoverageDecision, PairBudgetGreedyByMassPerPair) {
  const std::vector<int> W = {4, 8, 16, 32};
  const std::vector<double> m = rows({{0.5, 0.6, 0.7, 1.0}, {0.1, 0.9, 0.95, 1.0}});
  EXPECT_EQ(coverage_budget_choice(m.data(), 2, W, 0.5), (std::vector<int>{1, 1}));
  EXPECT_EQ(coverage_budget_choice(m.data(), 2, W, 1.0), (std::vector<int>{3, 3}));
  EXPECT_EQ(coverage_budget_choice(m.data(), 2, W, 0.01), (std::vector<int>{0, 0}));  // below W_0 everywhere
  // Through the regime: the budget replaces the threshold; windows in force follow through the EMA (one step here).
  ControllerConfig c = config_for("coverage");
  c.pair_budget = 0.5;
  Controller ctl(c, 1, 2);
  nlohmann::json t;
  ctl.update(0, ControlInput::of_mass(m.data()), 0, &t);
  EXPECT_EQ(ctl.windows(0), (std::vector<int>{8, 8}));
  EXPECT_EQ(t["pair_budget"], 0.5);
  EXPECT_NEAR(ctl.exact_pair_ratio(32), 456.0 / 1056.0, 1e-15);
}

// Every coverage decision re-derives from its trace alone: head_choice from mass and coverage, the resolution EMA
// (beta 0.15, round half even = nearbyint) from resolution_prev, windows from the candidates.
TEST(CoverageTrace, RecomputesEveryDecision) {
  LayerController lc(config_for("coverage"), 6, 0);
  Rng rng(5);
  for (int s = 0; s < 6; s++) {
    std::vector<double> m;
    for (int h = 0; h < 6; h++) {  // increasing profiles ending at 1
      double a = rng.uniform(), b = a + (1 - a) * rng.uniform(), c = b + (1 - b) * rng.uniform();
      m.insert(m.end(), {a, b, c, 1.0});
    }
    nlohmann::json t;
    lc.update(ControlInput::of_mass(m.data()), 5 * s, &t);
    const double cov = t["coverage"];
    const std::vector<int> cand = t["windows_candidates"];
    for (int h = 0; h < 6; h++) {
      const std::vector<double> mh = t["mass"][h];
      int c = 3;
      for (int k = 3; k >= 0; k--)
        if (mh[k] >= cov) c = k;
      EXPECT_EQ(t["head_choice"][h], c);
      const int ct = int(std::nearbyint(0.15 * int(t["resolution_prev"][h]) + 0.85 * c));
      EXPECT_EQ(t["resolution"][h], ct);
      EXPECT_EQ(t["windows"][h], cand[ct]);
    }
    EXPECT_FALSE(t.contains("coverage_tail"));
  }
  // With aah.coverage_tail the trace says how the mass was measured.
  LayerController tail(config_for("coverage+coverage_tail_20"), 2, 0);
  const std::vector<double> m = {0.1, 0.5, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0};
  nlohmann::json t;
  tail.update(ControlInput::of_mass(m.data()), 0, &t);
  EXPECT_DOUBLE_EQ(t["coverage_tail"].get<double>(), 0.02);
  EXPECT_EQ(t["head_choice"], (std::vector<int>{3, 0}));
}

TEST(CoverageState, SaveLoadContinuesIdentically) {
  test::TempDir tmp("coverage");
  const ControllerConfig cfg = config_for("coverage");
  Controller a(cfg, 2, 4), b(cfg, 2, 4);
  Rng rng(8);
  auto masses = [&] {
    std::vector<double> m;
    for (int h = 0; h < 4; h++) {
      const double x = rng.uniform();
      m.insert(m.end(), {x * x, x, 0.5 + x / 2, 1.0});
    }
    return m;
  };
  for (int step = 0; step < 12; step += 2)
    for (int l = 0; l < 2; l++) a.update(l, ControlInput::of_mass(masses().data()), step);
  {
    SafetensorsWriter w;
    a.save(w);
    w.write(tmp.path + "/c.safetensors");
  }
  SafetensorsReader r(tmp.path + "/c.safetensors");
  b.load(r);
  for (int step = 12; step < 30; step++)
    for (int l = 0; l < 2; l++) {
      const auto m = masses();
      EXPECT_EQ(a.update(l, ControlInput::of_mass(m.data()), step), b.update(l, ControlInput::of_mass(m.data()), step));
      EXPECT_EQ(a.layer(l).resolution_index(), b.layer(l).resolution_index());
    }
}

// deep_reuse caches level 0 at the first update at or after aah.reuse_cache_step (a run's default:
// train.warmup_steps, model/config.cpp); the step is in the trace (level0_cache_step, null before) and the state.
TEST(DeepReuseCacheStep, InTraceAndState) {
  test::TempDir tmp("deep_reuse");
  ControllerConfig cfg = config_for("deep_reuse");
  cfg.reuse_cache_step = 7;  // updates every 5 steps: cached at step 10
  Controller a(cfg, 2, 8);
  Rng rng(4);
  auto feats = [&] {
    std::vector<double> x(size_t(8) * kControllerFeatures);
    for (auto& v : x) v = 0.1 + rng.uniform();
    return x;
  };
  std::vector<nlohmann::json> seen;
  for (int step = 0; step <= 10; step += 5)
    for (int l = 0; l < 2; l++) {
      nlohmann::json t;
      a.update(l, ControlInput::of_features(feats().data()), step, &t);
      if (l == 0) seen.push_back(t);
    }
  EXPECT_TRUE(seen[0]["level0_cache_step"].is_null());
  EXPECT_TRUE(seen[1]["level0_cache_step"].is_null());
  EXPECT_EQ(seen[2]["level0_cache_step"], 10);
  EXPECT_EQ(a.layer(1).level0_cache_step(), 10);
  // Not in other regimes' traces.
  LayerController sf(config_for("shallow_freeze"), 8, 0);
  nlohmann::json t;
  sf.update(ControlInput::of_features(feats().data()), 0, &t);
  EXPECT_FALSE(t.contains("level0_cache_step"));
  // The state keeps it; loading gives it back.
  {
    SafetensorsWriter w;
    a.save(w);
    w.write(tmp.path + "/c.safetensors");
  }
  SafetensorsReader r(tmp.path + "/c.safetensors");
  int32_t stored = 0;
  r.read_raw("layers.0.level0_cache_step", "I32", &stored, {1});
  EXPECT_EQ(stored, 10);
  Controller b(cfg, 2, 8);
  b.load(r);
  EXPECT_EQ(b.layer(0).level0_cache_step(), 10);
  // An earlier state without the tensor: the first update step at or after reuse_cache_step (7 -> 10 at interval 5).
  {
    SafetensorsWriter w;
    std::vector<std::vector<char>> bufs;
    for (const auto& ten : r.tensors()) {
      if (ten.name.find("level0_cache_step") != std::string::npos) continue;
      bufs.emplace_back(ten.end - ten.begin);
      r.read_raw(ten.name, ten.dtype, bufs.back().data(), ten.shape);
      w.add_raw(ten.name, ten.dtype, bufs.back().data(), bufs.back().size(), ten.shape);
    }
    w.write(tmp.path + "/old.safetensors");
  }
  Controller c(cfg, 2, 8);
  c.load(SafetensorsReader(tmp.path + "/old.safetensors"));
  EXPECT_EQ(c.layer(1).level0_cache_step(), 10);
  // Before the cache: -1 in the state.
  Controller d(cfg, 2, 8);
  for (int l = 0; l < 2; l++) d.update(l, ControlInput::of_features(feats().data()), 0);
  {
    SafetensorsWriter w;
    d.save(w);
    w.write(tmp.path + "/d.safetensors");
  }
  Controller e(cfg, 2, 8);
  e.load(SafetensorsReader(tmp.path + "/d.safetensors"));
  EXPECT_EQ(e.layer(0).level0_cache_step(), -1);
  EXPECT_FALSE(e.layer(0).topology_cached());
}
