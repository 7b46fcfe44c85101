// Tests of the copy-use window policy (src/controller/copy_use.h): the statistic against its definition computed
// here in double from scratch, on hand-built heads (a head that copies from 150 back, a diffuse head, a sink head);
// the whole-model budget solver against brute force; the evidence rule; the regime, the controller's decisions
// through update(), and save/load of the evidence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"
#include "controller/controller.h"
#include "controller/copy_use.h"
#include "core/rng.h"
#include "formats/safetensors.h"
#include "kernels/ref/ref.h"
#include "kernels/attention_common.h"
#include "kernels/ref/attention.h"

using namespace aah;

namespace {

// u summed over queries, from the definition: softmax at full window in double, copy set C_i, chance correction.
std::vector<double> copy_use_reference(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<int32_t>& x, int T, int D, const std::vector<int>& windows) {
  std::vector<double> use(windows.size(), 0.0);
  for (int i = 0; i + 1 < T; i++) {
    std::vector<double> p(i + 1);
    double mx = -INFINITY, z = 0;
    for (int j = 0; j <= i; j++) {
      double s = 0;
      for (int d = 0; d < D; d++) s += double(q[size_t(i) * D + d]) * double(k[size_t(j) * D + d]);
      p[j] = s / std::sqrt(double(D));
      mx = std::max(mx, p[j]);
    }
    for (double& v : p) z += (v = std::exp(v - mx));
    for (size_t c = 0; c < windows.size(); c++) {
      double far = 0, far_copy = 0, n_copy = 0, n_far = 0;
      for (int j = 0; j <= i; j++) {
        if (i - j < windows[c]) continue;  // inside the window
        const bool in_copy = x[j] == x[i + 1] || (x[j] == x[i] && x[j + 1] == x[i + 1]);
        far += p[j] / z, n_far += 1;
        if (in_copy) far_copy += p[j] / z, n_copy += 1;
      }
      if (n_far > 0) use[c] += far_copy - far * n_copy / n_far;
    }
  }
  return use;
}

constexpr int kT = 256, kD = 8;
const std::vector<int> kWindows = {32, 64, 128, 256};

// Tokens: distinct filler 10 + (i % 50) so that nothing repeats nearby by accident, position 0 a sink token (1),
// and one key/value pair: x[50] = 7 defined, asked at 200 with target x[201] = 7 (150 back).
std::vector<int32_t> hand_built_tokens() {
  std::vector<int32_t> x(kT);
  for (int i = 0; i < kT; i++) x[i] = 10 + (i * 7) % 53;
  x[0] = 1;
  x[50] = 7, x[201] = 7;
  return x;
}

// Three heads' q, k (T, D): 0 copies (query 200 -> key 50), 1 diffuse (q = 0: uniform), 2 sink (every query -> key 0).
void hand_built_heads(std::vector<float>& q, std::vector<float>& k) {
  q.assign(size_t(3) * kT * kD, 0.0f);
  k.assign(size_t(3) * kT * kD, 0.0f);
  auto at = [](std::vector<float>& t, int h, int i, int d) -> float& { return t[(size_t(h) * kT + i) * kD + d]; };
  at(q, 0, 200, 0) = 12.0f, at(k, 0, 50, 0) = 12.0f;  // the copy head's question finds its DEF
  for (int i = 0; i < kT; i++) at(q, 2, i, 1) = 12.0f;
  at(k, 2, 0, 1) = 12.0f;  // the sink
}

}  // namespace

TEST(CopyUse, MatchesTheDefinitionOnHandBuiltHeads) {
  std::vector<float> q, k;
  hand_built_heads(q, k);
  const std::vector<int32_t> x = hand_built_tokens();
  std::vector<double> use(3 * kWindows.size());
  copy_use(backend_local(), use.data(), q.data(), k.data(), x.data(), 1, 3, 3, kT, kD, kWindows.data(),
           int(kWindows.size()));
  for (int h = 0; h < 3; h++) {
    const std::vector<float> qh(q.begin() + size_t(h) * kT * kD, q.begin() + size_t(h + 1) * kT * kD);
    const std::vector<float> kh(k.begin() + size_t(h) * kT * kD, k.begin() + size_t(h + 1) * kT * kD);
    const std::vector<double> ref = copy_use_reference(qh, kh, x, kT, kD, kWindows);
    for (size_t c = 0; c < kWindows.size(); c++)
      EXPECT_NEAR(use[h * kWindows.size() + c], ref[c], 1e-5) << "head " << h << " window " << kWindows[c];
  }
  // The copy head uses about one copy beyond 32, 64 and 128 (its DEF is 150 back), nothing beyond 256.
  for (int c = 0; c < 3; c++) EXPECT_GT(use[c], 0.9) << kWindows[c];
  EXPECT_EQ(use[3], 0.0);
  // The diffuse head's far copies are exactly what chance gives; the sink's far mass lands on no copy.
  for (int c = 0; c < 4; c++) EXPECT_NEAR(use[4 + c], 0.0, 1e-6);
  for (int c = 0; c < 4; c++) EXPECT_LE(use[8 + c], 1e-6);
}

TEST(CopyUse, TheBudgetKeepsTheCopyHeadLongAndCutsTheOthers) {
  std::vector<float> q, k;
  hand_built_heads(q, k);
  const std::vector<int32_t> x = hand_built_tokens();
  std::vector<double> use(3 * kWindows.size()), evidence(use.size(), 0.0);
  copy_use(backend_local(), use.data(), q.data(), k.data(), x.data(), 1, 3, 3, kT, kD, kWindows.data(), 4);
  copy_evidence_update(evidence.data(), use.data(), int(use.size()), 0.9);
  // Budget 0.5 of the three heads' full pairs: the copy head gets 256, the diffuse and sink heads the smallest.
  EXPECT_EQ(copy_budget_choice(evidence.data(), 3, kWindows, 0.5), (std::vector<int>{3, 0, 0}));
  // A budget that cannot hold one full head plus two smallest keeps the copy head as long as it can afford.
  const double one_full = double(attn_visible_pairs(kT, kT)), small = double(attn_visible_pairs(kT, 32));
  const double mid = double(attn_visible_pairs(kT, 128));
  EXPECT_EQ(copy_budget_choice(evidence.data(), 3, kWindows, (mid + 2 * small) / (3 * one_full)),
            (std::vector<int>{2, 0, 0}));
}

TEST(CopyUse, EvidenceRisesAtOnceAndFallsSlowly) {
  std::vector<double> e = {0.5, 0.0};
  const std::vector<double> low = {0.1, 0.0}, high = {0.6, 0.2};
  copy_evidence_update(e.data(), low.data(), 2, 0.9);
  EXPECT_DOUBLE_EQ(e[0], 0.45);  // 0.9 x 0.5
  copy_evidence_update(e.data(), high.data(), 2, 0.9);
  EXPECT_DOUBLE_EQ(e[0], 0.6);  // use appears: at once
  EXPECT_DOUBLE_EQ(e[1], 0.2);
  for (int i = 0; i < 10; i++) copy_evidence_update(e.data(), low.data(), 2, 0.9);
  EXPECT_NEAR(e[0], 0.6 * std::pow(0.9, 10), 1e-12);  // 0.209: still above the use now (0.1)
}

// The exact solver against enumeration of every assignment, on random instances (N <= 6 heads, K = 4 windows).
TEST(CopyUse, BudgetSolverMatchesBruteForce) {
  Rng rng(40);
  const std::vector<int> W = {8, 16, 32, 64};
  const int K = 4, T = 64;
  for (int trial = 0; trial < 300; trial++) {
    const int N = 1 + int(rng.below(6));
    std::vector<double> loss(size_t(N) * K);
    for (auto& v : loss) v = rng.uniform() < 0.3 ? 0.0 : rng.uniform() - 0.1;  // ties at 0, some negative
    const double budget = rng.uniform();
    const double limit = budget * N * double(attn_visible_pairs(T, T));
    auto lost = [&](int h, int c) { return c == K - 1 ? 0.0 : std::max(0.0, loss[size_t(h) * K + c]); };
    double best_loss = INFINITY, best_cost = INFINITY;
    std::vector<int> c(N, 0);
    for (long code = 0; code < std::lround(std::pow(K, N)); code++) {
      long r = code;
      double l = 0, cost = 0;
      for (int h = 0; h < N; h++) c[h] = int(r % K), r /= K, l += lost(h, c[h]), cost += double(attn_visible_pairs(T, W[c[h]]));
      if (cost > limit && code != 0) continue;
      if (l < best_loss - 1e-12 || (std::fabs(l - best_loss) <= 1e-12 && cost < best_cost)) best_loss = l, best_cost = cost;
    }
    const std::vector<int> got = copy_budget_choice(loss.data(), N, W, budget);
    double l = 0, cost = 0;
    for (int h = 0; h < N; h++) l += lost(h, got[h]), cost += double(attn_visible_pairs(T, W[got[h]]));
    ASSERT_NEAR(l, best_loss, 1e-9) << "trial " << trial << " N " << N << " budget " << budget;
    ASSERT_EQ(cost, best_cost) << "trial " << trial;
    ASSERT_TRUE(cost <= limit || cost == N * double(attn_visible_pairs(T, W[0])));
  }
}

// Through the controller: the first update keeps the windows (no evidence yet), the next decides for the whole
// model from the evidence; the trace holds what the decision read; save/load restores the evidence exactly.
TEST(CopyUse, ControllerDecidesFromEvidenceAndRestoresIt) {
  ControllerConfig cfg;
  cfg.windows = {8, 16, 32, 64};
  controller_apply_regime(cfg, "copy_budget_500");
  EXPECT_EQ(cfg.policy, WindowPolicy::copy);
  EXPECT_DOUBLE_EQ(cfg.pair_budget, 0.5);
  Controller c(cfg, 2, 2);
  ASSERT_TRUE(c.needs_copy_use());
  ASSERT_TRUE(c.is_update_step(0));
  // layer 0: head 0 uses far context (beyond 8, 16, 32), head 1 none; layer 1: nothing
  const std::vector<double> use0 = {1.0, 0.8, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0}, use1(8, 0.0);
  nlohmann::json t0;
  EXPECT_EQ(c.update(0, ControlInput::of_use(use0.data()), 0, &t0), (std::vector<int>{64, 64}));  // first update: windows kept
  EXPECT_FALSE(t0.contains("choice"));
  c.update(1, ControlInput::of_use(use1.data()), 0);
  nlohmann::json t1;
  EXPECT_EQ(c.update(0, ControlInput::of_use(use1.data()), 5, &t1), (std::vector<int>{64, 8}));
  EXPECT_EQ(t1["choice"], (std::vector<int>{3, 0, 0, 0}));
  EXPECT_EQ(c.windows(1), (std::vector<int>{8, 8}));
  EXPECT_NEAR(t1["evidence"][0].get<double>(), 0.9, 1e-12);  // max(0, 0.9 x 1.0) after this update's zero use
  test::TempDir tmp("copy-use");
  {
    SafetensorsWriter w;
    c.save(w);
    w.write(tmp.path + "/state.safetensors");
  }
  Controller d(cfg, 2, 2);
  d.load(SafetensorsReader(tmp.path + "/state.safetensors"));
  c.update(1, ControlInput::of_use(use1.data()), 5), d.update(1, ControlInput::of_use(use1.data()), 5);
  nlohmann::json a, b;
  c.update(0, ControlInput::of_use(use1.data()), 10, &a), d.update(0, ControlInput::of_use(use1.data()), 10, &b);
  EXPECT_EQ(a.dump(), b.dump());
  // the policy needs its budget
  ControllerConfig none = cfg;
  none.pair_budget = 0;
  EXPECT_NE(test::error_of([&] { controller_validate(none); }).find("policy copy needs aah.pair_budget > 0"),
            std::string::npos);
}

// The chance control: the solver reads a fixed permutation of the heads' evidence, the same at every update.
TEST(CopyUse, ShuffledControlDecidesOnAnotherHeadsEvidence) {
  ControllerConfig cfg;
  cfg.windows = {8, 16, 32, 64};
  cfg.seed = 3;
  controller_apply_regime(cfg, "copy_budget_500+copy_shuffled");
  EXPECT_TRUE(cfg.copy_shuffle);
  Controller c(cfg, 2, 2);
  const std::vector<double> use0 = {1.0, 0.8, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0}, use1(8, 0.0);
  c.update(0, ControlInput::of_use(use0.data()), 0), c.update(1, ControlInput::of_use(use1.data()), 0);
  nlohmann::json t;
  c.update(0, ControlInput::of_use(use1.data()), 5, &t);
  const std::vector<int> perm = t["copy_permutation"];
  ASSERT_EQ(perm.size(), 4u);
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3}));
  // the head that reads head 0's evidence is the one kept long
  const int reader = int(std::find(perm.begin(), perm.end(), 0) - perm.begin());
  EXPECT_EQ(t["choice"][reader], 3);
  for (int h = 0; h < 4; h++)
    if (h != reader) {
      EXPECT_EQ(t["choice"][h], 0);
    }
  nlohmann::json t2;
  c.update(1, ControlInput::of_use(use1.data()), 5), c.update(0, ControlInput::of_use(use1.data()), 10, &t2);
  EXPECT_EQ(t2["copy_permutation"], t["copy_permutation"]);  // drawn once
  ControllerConfig wrong;
  wrong.windows = {8, 16, 32, 64};
  controller_apply_regime(wrong, "full_adaptive");
  wrong.copy_shuffle = true;
  EXPECT_NE(test::error_of([&] { controller_validate(wrong); }).find("policy copy only"), std::string::npos);
}

// The output-change statistic against the scalar reference attention in double: per head and window, the head's
// outputs under that window (every head of a GQA group at once) against full, summed squared differences over the
// sum of squared full outputs. Random q, k, v with two query heads per key/value head, 2 sequences, T = 200 with
// windows 16 / 50 / 200 (and a hand check: with v constant over the keys every window gives the same output).
TEST(CopyUse, OutputChangeMatchesTheReferenceAttention) {
  const int S = 2, H = 4, Hkv = 2, T = 200, D = 8;
  const std::vector<int> windows = {16, 50, 200};
  const int K = int(windows.size());
  Rng rng(5);
  std::vector<float> q(size_t(S) * H * T * D), k(size_t(S) * Hkv * T * D), v(k.size());
  for (auto& x : q) x = float(rng.normal());
  for (auto& x : k) x = float(rng.normal());
  for (auto& x : v) x = float(rng.normal());
  std::vector<double> change(size_t(S) * H * K);
  output_change(backend_local(), change.data(), q.data(), k.data(), v.data(), S, H, Hkv, T, D, windows.data(), K);
  for (int s = 0; s < S; s++) {
    const size_t qo = size_t(s) * H * T * D, ko = size_t(s) * Hkv * T * D;
    const std::vector<double> qd(q.begin() + qo, q.begin() + qo + size_t(H) * T * D);
    const std::vector<double> kd(k.begin() + ko, k.begin() + ko + size_t(Hkv) * T * D);
    const std::vector<double> vd(v.begin() + ko, v.begin() + ko + size_t(Hkv) * T * D);
    std::vector<std::vector<double>> out(size_t(K), std::vector<double>(size_t(H) * T * D));
    std::vector<double> lse(size_t(H) * T);
    for (int c = 0; c < K; c++) {
      const std::vector<int> win(size_t(H), windows[size_t(c)]);
      ref::attn_local_forward(out[size_t(c)].data(), lse.data(), qd.data(), kd.data(), vd.data(), win.data(), 1, H, Hkv,
                              T, D, nullptr, nullptr);
    }
    for (int h = 0; h < H; h++) {
      double energy = 0;
      for (size_t i = size_t(h) * T * D; i < size_t(h + 1) * T * D; i++) energy += out[size_t(K - 1)][i] * out[size_t(K - 1)][i];
      for (int c = 0; c < K; c++) {
        double diff = 0;
        for (size_t i = size_t(h) * T * D; i < size_t(h + 1) * T * D; i++) {
          const double x = out[size_t(c)][i] - out[size_t(K - 1)][i];
          diff += x * x;
        }
        EXPECT_NEAR(change[(size_t(s) * H + h) * K + c], diff / energy, 1e-5 * (diff / energy) + 1e-9)
            << s << " " << h << " " << windows[size_t(c)];
      }
      EXPECT_GT(change[(size_t(s) * H + h) * K], change[(size_t(s) * H + h) * K + 1]);  // a smaller window changes more
      EXPECT_EQ(change[(size_t(s) * H + h) * K + 2], 0.0);
    }
  }
  std::fill(v.begin(), v.end(), 1.0f);  // every key's value the same: no window changes the output
  output_change(backend_local(), change.data(), q.data(), k.data(), v.data(), S, H, Hkv, T, D, windows.data(), K);
  for (double c : change) EXPECT_NEAR(c, 0.0, 1e-12);
}

// Regime output_budget_P: policy copy with the output statistic at budget P / 1000; the statistic knob belongs to
// policy copy only.
TEST(CopyUse, OutputBudgetRegime) {
  ControllerConfig c;
  controller_apply_regime(c, "output_budget_500");
  EXPECT_EQ(c.policy, WindowPolicy::copy);
  EXPECT_EQ(c.use_statistic, UseStatistic::output);
  EXPECT_DOUBLE_EQ(c.pair_budget, 0.5);
  ControllerConfig d;
  controller_apply_regime(d, "full_adaptive");
  d.use_statistic = UseStatistic::output;
  d.windows = {8, 16};
  EXPECT_NE(test::error_of([&] { controller_validate(d); }).find("aah.use_statistic' applies to policy copy only"),
            std::string::npos);
}

// aah.copy_count=once. Each query's own use (per_query) holds the terms of the summed use; the copy head's question
// (query 200, its DEF 150 back) is one query using about one copy beyond 32, 64 and 128.
TEST(CopyUse, PerQueryUseHoldsTheTermsOfTheSum) {
  std::vector<float> q, k;
  hand_built_heads(q, k);
  const std::vector<int32_t> x = hand_built_tokens();
  const int K = int(kWindows.size());
  std::vector<double> use(3 * K);
  std::vector<float> per_query(size_t(3) * kT * K, -1.0f);
  copy_use(backend_local(), use.data(), q.data(), k.data(), x.data(), 1, 3, 3, kT, kD, kWindows.data(), K,
           per_query.data());
  for (int h = 0; h < 3; h++)
    for (int c = 0; c < K; c++) {
      double sum = 0;
      for (int i = 0; i < kT; i++) sum += per_query[(size_t(h) * kT + i) * K + c];
      EXPECT_NEAR(sum, use[size_t(h) * K + c], 1e-4) << "head " << h << " window " << kWindows[c];
    }
  for (int c = 0; c < 3; c++) EXPECT_GT(per_query[size_t(200) * K + c], 0.9f) << kWindows[c];
  EXPECT_EQ(per_query[size_t(200) * K + 3], 0.0f);
  EXPECT_EQ(per_query[size_t(kT - 1) * K + 0], 0.0f);  // the last query predicts nothing
  EXPECT_EQ(per_query[size_t(20) * K + 0], 0.0f);      // 21 keys: all within 32
}

// The once loss worked by hand. Windows 8/16/32 (T = 32), three heads.
//   row A (weight 1):   heads 0 and 1 both copy from beyond 16: b = [0.9, 0.9, 0] each; head 2 nothing.
//   row B (weight 0.5): head 2 copies from between 8 and 16: b = [0.4, 0, 0]; head 0 a little: [0.1, 0.1, 0].
TEST(CopyUse, OnceLossWorkedByHand) {
  CopyRows rows;
  rows.N = 3, rows.K = 3;
  rows.use = {0.9f, 0.9f, 0, 0.9f, 0.9f, 0, 0, 0, 0,   // row A
              0.1f, 0.1f, 0, 0, 0, 0, 0.4f, 0, 0};     // row B
  rows.weight = {1.0f, 0.5f};
  // every head at 8: A loses its need 0.9, B its need 0.4 (x 0.5)
  EXPECT_NEAR(copy_once_loss(rows, {0, 0, 0}), 0.9 + 0.5 * 0.4, 1e-7);
  // head 0 at 32 keeps A (0.9) and 0.1 of B; B still loses 0.3
  EXPECT_NEAR(copy_once_loss(rows, {2, 0, 0}), 0.5 * 0.3, 1e-7);
  // head 1 at 32 instead: the same for A (counted once, either head), B loses 0.4
  EXPECT_NEAR(copy_once_loss(rows, {0, 2, 0}), 0.5 * 0.4, 1e-7);
  // both redundant heads long keep no more than one of them: A is counted once
  EXPECT_NEAR(copy_once_loss(rows, {2, 2, 0}), 0.5 * 0.3, 1e-7);
  // head 2 at 16 keeps B (0.4 - 0): nothing lost with head 0 long
  EXPECT_NEAR(copy_once_loss(rows, {2, 0, 1}), 0.0, 1e-7);
  // the per-head sum would count A twice with both redundant heads short (1.8); once counts it once
  EXPECT_NEAR(copy_once_loss(rows, {0, 0, 1}), 0.9, 1e-7);
}

namespace {

// Rows of redundant heads: heads in groups of `group` copy the same queries with use split among them (each head a
// random share), at random distances (a query's use is beyond the windows below its distance); plus noise rows.
CopyRows redundant_rows(Rng& rng, int N, int K, int R, int group) {
  CopyRows rows;
  rows.N = N, rows.K = K;
  for (int r = 0; r < R; r++) {
    std::vector<float> row(size_t(N) * K, 0.0f);
    const int g = int(rng.below(uint64_t(std::max(1, N / group))));
    const int reach = 1 + int(rng.below(uint64_t(K - 1)));  // beyond W_0 .. W_{reach-1}
    const float u = float(0.2 + 0.8 * rng.uniform());
    for (int h = g * group; h < std::min(N, (g + 1) * group); h++) {
      const float share = float(0.5 + 0.5 * rng.uniform());
      for (int c = 0; c < reach; c++) row[size_t(h) * K + c] = u * share * (c + 1 == reach ? 1.0f : 1.0f + 0.1f * float(reach - 1 - c));
    }
    if (rng.uniform() < 0.3) row[size_t(rng.below(uint64_t(N))) * K] += 0.05f;
    rows.use.insert(rows.use.end(), row.begin(), row.end());
    rows.weight.push_back(float(0.5 + 0.5 * rng.uniform()));
  }
  return rows;
}

}  // namespace

// The once solver against enumeration of every assignment (N <= 6 heads, K = 4 windows, redundant groups of 2-3
// heads): within the budget always, never worse than its start (the per-head solver's choice), and at the exact
// optimum in most instances (measured: see the count printed).
TEST(CopyUse, OnceSolverAgainstBruteForce) {
  Rng rng(41);
  const std::vector<int> W = {8, 16, 32, 64};
  const int K = 4, T = 64;
  int optimal = 0, warm_optimal = 0, better_than_per_head = 0, trials = 200;
  for (int trial = 0; trial < trials; trial++) {
    const int N = 2 + int(rng.below(5)), group = 2 + int(rng.below(2));
    const CopyRows rows = redundant_rows(rng, N, K, 6 + int(rng.below(20)), group);
    const double budget = 0.3 + 0.5 * rng.uniform();
    const double limit = budget * N * double(attn_visible_pairs(T, T));
    // the per-head evidence: each head's use summed over the rows (weighted), as the per-head policy reads it
    std::vector<double> per_head(size_t(N) * K, 0.0);
    for (size_t r = 0; r < rows.size(); r++)
      for (int i = 0; i < N * K; i++) per_head[size_t(i)] += rows.weight[r] * rows.use[r * size_t(N) * K + size_t(i)];
    const std::vector<int> start = copy_budget_choice(per_head.data(), N, W, budget);
    double best = INFINITY;
    std::vector<int> c(size_t(N), 0);
    for (long code = 0; code < std::lround(std::pow(K, N)); code++) {
      long r = code;
      double cost = 0;
      for (int h = 0; h < N; h++) c[size_t(h)] = int(r % K), r /= K, cost += double(attn_visible_pairs(T, W[c[size_t(h)]]));
      if (cost <= limit) best = std::min(best, copy_once_loss(rows, c));
    }
    const std::vector<int> got = copy_once_choice(rows, W, budget, start);
    // stable: a choice in force that no move improves stays, even where the per-head choice is as good
    ASSERT_EQ(copy_once_choice(rows, W, budget, start, got), got) << "trial " << trial;
    // warm: from the per-head choice and an earlier choice in force (here the cold result, shuffled across heads)
    std::vector<int> previous = got;
    std::reverse(previous.begin(), previous.end());
    const std::vector<int> warm = copy_once_choice(rows, W, budget, start, previous);
    double warm_cost = 0;
    for (int h = 0; h < N; h++) warm_cost += double(attn_visible_pairs(T, W[warm[size_t(h)]]));
    ASSERT_LE(warm_cost, limit) << "trial " << trial;
    ASSERT_LE(copy_once_loss(rows, warm), std::min(copy_once_loss(rows, start), copy_once_loss(rows, previous)) + 1e-9);
    warm_optimal += copy_once_loss(rows, warm) <= best + 1e-6 * std::max(1.0, best);
    double cost = 0;
    for (int h = 0; h < N; h++) cost += double(attn_visible_pairs(T, W[got[size_t(h)]]));
    ASSERT_LE(cost, limit) << "trial " << trial;
    const double l = copy_once_loss(rows, got), l_start = copy_once_loss(rows, start);
    ASSERT_LE(l, l_start + 1e-9) << "trial " << trial;
    ASSERT_GE(l, best - 1e-9) << "trial " << trial;
    optimal += l <= best + 1e-6 * std::max(1.0, best);
    better_than_per_head += l < l_start - 1e-6;
  }
  std::printf("[ once solver ] exact optimum in %d of %d instances (warm-started: %d); better than the per-head choice "
              "in %d\n", optimal, trials, warm_optimal, better_than_per_head);
  EXPECT_GE(optimal, trials * 9 / 10);
  EXPECT_GE(warm_optimal, trials * 9 / 10);
  EXPECT_GE(better_than_per_head, trials / 10);  // the instances are built to need it
}

// Through the controller (aah.copy_count=once, regime copy_once_budget_P): the rows join after the last layer of an
// update, the decision is the once solver's on them from the per-head choice, and save/load restores the rows.
// Two layers of two heads, windows 8/16/32/64 (T = 64), one sequence: head (0, 0) and head (1, 0) copy the same far
// query (50, beyond 8-32), head (0, 1) a near one (query 20, beyond 8 only).
TEST(CopyUse, OnceControllerDecidesOnTheRowsAndRestoresThem) {
  ControllerConfig cfg;
  cfg.windows = {8, 16, 32, 64};
  controller_apply_regime(cfg, "copy_once_budget_500");
  ASSERT_EQ(cfg.copy_count, CopyCount::once);
  const int L = 2, H = 2, T = 64, K = 4;
  Controller c(cfg, L, H);
  ASSERT_TRUE(c.needs_copy_queries());
  std::vector<std::vector<float>> pq(L, std::vector<float>(size_t(H) * T * K, 0.0f));
  for (int k = 0; k < 3; k++) pq[0][(size_t(0) * T + 50) * K + k] = 0.6f, pq[1][(size_t(0) * T + 50) * K + k] = 0.6f;
  pq[0][(size_t(1) * T + 20) * K + 0] = 0.5f;
  pq[0][(size_t(1) * T + 30) * K + 0] = -0.2f;  // negative use: clipped to 0 in the rows
  auto use_of = [&](int l) {  // the per-head use: each head's sum over its queries
    std::vector<double> u(size_t(H) * K, 0.0);
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++)
        for (int k = 0; k < K; k++) u[size_t(h) * K + k] += pq[size_t(l)][(size_t(h) * T + i) * K + k];
    return u;
  };
  auto step = [&](Controller& ctl, int s, nlohmann::json* t0) {
    for (int l = 0; l < L; l++) {
      ctl.add_copy_queries(l, pq[size_t(l)].data(), 1, T);
      const std::vector<double> u = use_of(l);
      ctl.update(l, ControlInput::of_use(u.data()), s, l == 0 ? t0 : nullptr);
    }
  };
  step(c, 0, nullptr);
  ASSERT_EQ(c.copy_rows().size(), 2u);  // queries 50 and 20; the others need nothing
  EXPECT_EQ(c.copy_rows().weight, (std::vector<float>{1.0f, 1.0f}));
  const CopyRows rows = c.copy_rows();
  nlohmann::json t;
  step(c, 5, &t);
  const std::vector<int> per_head = copy_budget_choice(t["evidence_used"].get<std::vector<double>>().data(), L * H,
                                                       cfg.windows, cfg.pair_budget);
  const std::vector<int> want = copy_once_choice(rows, cfg.windows, cfg.pair_budget, per_head);
  EXPECT_EQ(t["choice"].get<std::vector<int>>(), want);
  EXPECT_NEAR(t["once_loss"].get<double>(), copy_once_loss(rows, want), 1e-12);
  // one of the two redundant heads long enough for query 50, head (0, 1) beyond 8 for query 20: nothing lost
  EXPECT_NEAR(t["once_loss"].get<double>(), 0.0, 1e-9);
  EXPECT_TRUE(want[0] == 3 || want[2] == 3) << t["choice"].dump();
  EXPECT_GE(want[1], 1);
  ASSERT_EQ(c.copy_rows().size(), 4u);  // the step-0 rows aged one update, this update's joined
  EXPECT_NEAR(c.copy_rows().weight[0], 0.9f, 1e-7);
  test::TempDir tmp("copy-once");
  {
    SafetensorsWriter w;
    c.save(w);
    w.write(tmp.path + "/state.safetensors");
  }
  Controller d(cfg, L, H);
  d.load(SafetensorsReader(tmp.path + "/state.safetensors"));
  EXPECT_EQ(d.copy_rows().use, c.copy_rows().use);
  EXPECT_EQ(d.copy_rows().weight, c.copy_rows().weight);
  nlohmann::json a, b;
  step(c, 10, &a), step(d, 10, &b);
  EXPECT_EQ(a.dump(), b.dump());
  // once needs the copy statistic
  ControllerConfig wrong = cfg;
  wrong.use_statistic = UseStatistic::output;
  EXPECT_NE(test::error_of([&] { controller_validate(wrong); }).find("needs aah.use_statistic=copy"), std::string::npos);
}
