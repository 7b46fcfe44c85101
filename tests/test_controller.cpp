// Tests of src/controller: the AAH-v3 controller, step by step against hand-worked examples (spec sections 2-5),
// then each regime's structural promise (section 7), determinism, and save/load.
//
// Expected values are worked out by hand in the comments; none is copied from the implementation's output.
#include <gtest/gtest.h>

#include "helpers.h"
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "controller/features.h"
#include "controller/hierarchy.h"
#include "controller/scorer.h"
#include "core/check.h"
#include "core/rng.h"
#include "formats/safetensors.h"

using namespace aah;
namespace fs = std::filesystem;

namespace {

constexpr int F = kControllerFeatures;

// (H, 9) features from short rows (missing entries are 0).
std::vector<double> feats(std::initializer_list<std::vector<double>> rows) {
  std::vector<double> x;
  for (const auto& r : rows) {
    std::vector<double> row(F, 0.0);
    for (size_t i = 0; i < r.size(); i++) row[i] = r[i];
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

std::vector<double> random_feats(int H, Rng& rng) {
  std::vector<double> x(size_t(H) * F);
  for (auto& v : x) v = 0.1 + rng.uniform();
  return x;
}

using aah::test::error_of;

ControllerConfig config_for(const std::string& regime, std::vector<int> windows = {4, 8, 16, 32}, uint64_t seed = 7) {
  ControllerConfig c;
  c.windows = std::move(windows);
  c.seed = seed;
  controller_apply_regime(c, regime);
  return c;
}

// A scorer whose base logits are the item's g[0..3] (K = 4): hidden unit k = gelu(u_k + 10) = u_k + 10 exactly in
// double (1 - Phi(10) ~ 7.6e-24 is below half an ulp), logit k = hidden_k - 10. All other weights are 0.
Scorers identity_scorers(int K = 4) {
  Scorers s = scorers_init(K, 1);
  for (Linear* l : {&s.base.fc1, &s.base.fc2, &s.joint.fc1, &s.joint.fc2}) {
    std::fill(l->weight.begin(), l->weight.end(), 0.0f);
    std::fill(l->bias.begin(), l->bias.end(), 0.0f);
  }
  for (int k = 0; k < K; k++) {
    s.base.fc1.weight[size_t(k) * kEnrichedInputs + k] = 1.0f;  // (out, in): unit k reads u_k = g_k
    s.base.fc1.bias[k] = 10.0f;
    s.base.fc2.weight[size_t(k) * kBaseHidden + k] = 1.0f;
    s.base.fc2.bias[k] = -10.0f;
  }
  return s;
}

struct TempDir {
  std::string dir;
  TempDir() {
    char tmpl[] = "/tmp/aah_test_controller_XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string path(const std::string& n) const { return dir + "/" + n; }
};

}  // namespace

// ============================================================================================================
// Spec 2: features
// ============================================================================================================

TEST(ControllerFeatures, HandWorkedStatsAndGqaMapping) {
  // B = 2, H = 2, Hkv = 1, T = 1, D = 2. Layout (B, H, T, D).
  const std::vector<float> q = {1, -1, /*b0h1*/ 2, 2, /*b1h0*/ 3, -3, /*b1h1*/ 2, 2};
  const std::vector<float> k = {1, 2, /*b1*/ 3, 4};
  const std::vector<float> v = {-1, -1, /*b1*/ 1, 1};
  const double entropy[2] = {0.5, 0.7}, usage[2] = {0.1, 0.2};
  std::vector<double> out(2 * F, -1.0);
  controller_head_features(out.data(), q.data(), k.data(), v.data(), 2, 2, 1, 1, 2, entropy, nullptr, usage);
  // head 0, q elements {1, -1, 3, -3}: mean|q| = 8/4 = 2; mean 0, sum of squares 20, unbiased var 20/3.
  EXPECT_DOUBLE_EQ(out[0], 2.0);
  EXPECT_NEAR(out[1], std::sqrt(20.0 / 3.0), 1e-12);
  // head 1, q {2, 2, 2, 2}: mean|q| 2, std 0.
  EXPECT_DOUBLE_EQ(out[F + 0], 2.0);
  EXPECT_NEAR(out[F + 1], 0.0, 1e-12);
  // k {1, 2, 3, 4}: mean|k| 2.5, var ((1.5^2 + 0.5^2) * 2) / 3 = 5/3; both query heads read KV head 0.
  // v {-1, -1, 1, 1}: mean|v| 1, var 4/3.
  for (int h = 0; h < 2; h++) {
    EXPECT_DOUBLE_EQ(out[h * F + 2], 2.5);
    EXPECT_NEAR(out[h * F + 3], std::sqrt(5.0 / 3.0), 1e-12);
    EXPECT_DOUBLE_EQ(out[h * F + 4], 1.0);
    EXPECT_NEAR(out[h * F + 5], std::sqrt(4.0 / 3.0), 1e-12);
    EXPECT_EQ(out[h * F + 6], entropy[h]);
    EXPECT_EQ(out[h * F + 7], 0.0);  // out_norm nullptr -> 0
    EXPECT_EQ(out[h * F + 8], usage[h]);
  }
}

TEST(ControllerFeatures, SeparateKvHeads) {
  // B = 1, H = 2, Hkv = 2, T = 1, D = 2: k head 0 = {0, 0}, head 1 = {5, -5} (mean 0, var 50 / 1).
  const std::vector<float> q = {1, 1, 1, 1}, k = {0, 0, 5, -5}, v = {1, 1, 1, 1};
  std::vector<double> out(2 * F);
  controller_head_features(out.data(), q.data(), k.data(), v.data(), 1, 2, 2, 1, 2, nullptr, nullptr, nullptr);
  EXPECT_DOUBLE_EQ(out[2], 0.0);
  EXPECT_DOUBLE_EQ(out[3], 0.0);
  EXPECT_DOUBLE_EQ(out[F + 2], 5.0);
  EXPECT_NEAR(out[F + 3], std::sqrt(50.0), 1e-12);
  for (int f = 6; f < 9; f++) EXPECT_EQ(out[f], 0.0);  // no diagnostics yet
}

TEST(ControllerFeatures, StatisticsAtTrainingShapes) {
  // B 4, H 8, Hkv 8, T 1024, D 32: the training shape. Its cost is measured by `aah bench train --regime
  // full_adaptive` (the controller's share of the step), not here: timed unit tests fail on a loaded machine.
  const int B = 4, H = 8, T = 1024, D = 32;
  std::vector<float> q(size_t(B) * H * T * D), k(q.size()), v(q.size());
  Rng rng(3);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = float(rng.uniform() - 0.5);
  std::vector<double> out(size_t(H) * F);
  controller_head_features(out.data(), q.data(), k.data(), v.data(), B, H, H, T, D, nullptr, nullptr, nullptr);
  // uniform(-0.5, 0.5): mean |x| = 0.25, std = 1/sqrt(12) = 0.2887
  EXPECT_NEAR(out[0], 0.25, 2e-3);
  EXPECT_NEAR(out[1], 1 / std::sqrt(12.0), 2e-3);
}

// ============================================================================================================
// Spec 3: hierarchy
// ============================================================================================================

TEST(ControllerHierarchy, ThresholdClustering) {
  // tau 0.9. h0 (1,0) opens A. h1 (0,1): cos with A = 0 -> opens B. h2 (1, 0.1): cos with A = 1/sqrt(1.01) = 0.995
  // -> A, centroid (1, 0.05). h3 (0.1, 1): cos with A = 0.15 / (1.00125 * 1.005) = 0.149, with B = 0.995 -> B.
  const auto x = feats({{1, 0}, {0, 1}, {1, 0.1}, {0.1, 1}});
  EXPECT_EQ(level0_threshold_clusters(x.data(), 4, 0.9), (HeadPartition{{0, 2}, {1, 3}}));
}

TEST(ControllerHierarchy, CentroidsUpdateAsMembersJoin) {
  // tau 0.95. h0 (1,0). h1 (1, 0.3): cos 1/sqrt(1.09) = 0.9578 -> joins; centroid (1, 0.15).
  // h2 (1, 0.5): against the updated centroid (1.075) / (sqrt(1.0225) sqrt(1.25)) = 0.9509 >= 0.95 -> joins.
  // (Against h0 alone it would be 1/sqrt(1.25) = 0.894 and open a new group.)
  const auto x = feats({{1, 0}, {1, 0.3}, {1, 0.5}});
  EXPECT_EQ(level0_threshold_clusters(x.data(), 3, 0.95), (HeadPartition{{0, 1, 2}}));
}

TEST(ControllerHierarchy, ClusteringTieJoinsEarlierGroup) {
  // tau 0.7: h0 (1,0) A, h1 (0,1) B, h2 (1,1) has cos 0.7071 with both -> the earlier group A.
  const auto x = feats({{1, 0}, {0, 1}, {1, 1}});
  EXPECT_EQ(level0_threshold_clusters(x.data(), 3, 0.7), (HeadPartition{{0, 2}, {1}}));
}

TEST(ControllerHierarchy, ForcedBipartitionFallback) {
  // x0 (2,1), x1 (1,2), x2 (1,1), x3 (3,0). Pairwise cosines: (0,1) 4/5 = 0.8, (0,2) 3/sqrt10 = 0.9487,
  // (0,3) 6/(3 sqrt5) = 0.8944, (1,2) 0.9487, (1,3) 3/(3 sqrt5) = 0.4472, (2,3) 3/(3 sqrt2) = 0.7071.
  // Least similar (1,3): a = 1, b = 3. x0: 0.8 to a, 0.8944 to b -> b. x2: 0.9487 to a, 0.7071 to b -> a.
  // Groups {1,2} and {0,3}, ordered by smallest head: {0,3}, {1,2}.
  const auto x = feats({{2, 1}, {1, 2}, {1, 1}, {3, 0}});
  EXPECT_EQ(level0_forced_bipartition(x.data(), 4), (HeadPartition{{0, 3}, {1, 2}}));
  // With tau = -1 every head joins one cluster, so the full level-0 procedure falls back to the same bipartition.
  EXPECT_EQ(level0_threshold_clusters(x.data(), 4, -1.0).size(), 1u);
  EXPECT_EQ(level0_partition(x.data(), 4, -1.0, 16), (HeadPartition{{0, 3}, {1, 2}}));
  // Without collapse there is no fallback: tau 0.99 gives four singletons, capped at 16 -> unchanged.
  EXPECT_EQ(level0_partition(x.data(), 4, 0.99, 16).size(), 4u);
}

TEST(ControllerHierarchy, ForcedBipartitionTies) {
  // x0 (1,0), x1 (-1,0), x2 (1,0), x3 (0,1). Cosines: (0,1) -1, (0,2) 1, (0,3) 0, (1,2) -1, (1,3) 0, (2,3) 0.
  // Least similar: (0,1) and (1,2) tie at -1 -> lowest indices (0,1): a = 0, b = 1.
  // x2: 1 vs -1 -> a. x3: 0 vs 0 tie -> a. Groups {0,2,3}, {1}.
  const auto x = feats({{1, 0}, {-1, 0}, {1, 0}, {0, 1}});
  EXPECT_EQ(level0_forced_bipartition(x.data(), 4), (HeadPartition{{0, 2, 3}, {1}}));
}

TEST(ControllerHierarchy, Level0Cap) {
  // tau 0.999 keeps x0 (1,0), x1 (0,1), x2 (1,0.1), x3 (0.2,1) apart. Cap 2:
  // cosines (0,1) 0, (0,2) 0.995, (0,3) 0.196, (1,2) 0.0995, (1,3) 0.9806, (2,3) 0.2927 -> merge {0},{2};
  // centroid (1, 0.05): with {1} 0.0499, with {3} 0.2448; ({1},{3}) 0.9806 -> merge. Result {0,2}, {1,3}.
  const auto x = feats({{1, 0}, {0, 1}, {1, 0.1}, {0.2, 1}});
  EXPECT_EQ(level0_partition(x.data(), 4, 0.999, 2), (HeadPartition{{0, 2}, {1, 3}}));
  // Cap 3 stops after the first merge.
  EXPECT_EQ(level0_partition(x.data(), 4, 0.999, 3), (HeadPartition{{0, 2}, {1}, {3}}));
}

TEST(ControllerHierarchy, Level0CapTieMergesLowestPair) {
  // Three orthogonal heads: all centroid cosines 0 -> merge the lowest pair (0,1) first.
  const auto x = feats({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}});
  HeadPartition g = {{0}, {1}, {2}};
  level0_cap_groups(g, x.data(), 2);
  EXPECT_EQ(g, (HeadPartition{{0, 1}, {2}}));
  level0_cap_groups(g, x.data(), 1);
  EXPECT_EQ(g, (HeadPartition{{0, 1, 2}}));
}

TEST(ControllerHierarchy, Level0MaxGroups) {
  EXPECT_EQ(level0_max_groups({2}, 8), 2);
  EXPECT_EQ(level0_max_groups({2, 2, 2, 2}, 8), 8);    // never more than H
  EXPECT_EQ(level0_max_groups({2, 2, 2, 2}, 32), 16);  // product
}

TEST(ControllerHierarchy, NormDiffSimilarity) {
  // a (3,4) |a| 5, b (6,8) |b| 10: cos 1; penalty lambda |5 - 10| / 10.
  const auto x = feats({{3, 4}, {6, 8}, {0, 0}, {0, 0}, {-3, -4}});
  EXPECT_DOUBLE_EQ(hier_sim_normdiff(&x[0], &x[F], F, 16.0, 1e-6), 1.0 - 16.0 * 0.5);  // -7
  EXPECT_DOUBLE_EQ(hier_sim_normdiff(&x[0], &x[F], F, 0.5, 1e-6), 0.75);
  // Zero vectors: cosine 0 (per-norm epsilon), norm difference 0 / max(0, 0, eps) = 0.
  EXPECT_DOUBLE_EQ(hier_sim_normdiff(&x[2 * F], &x[3 * F], F, 16.0, 1e-6), 0.0);
  // Opposite equal-norm vectors: cos -1, no norm penalty.
  EXPECT_DOUBLE_EQ(hier_sim_normdiff(&x[0], &x[4 * F], F, 16.0, 1e-6), -1.0);
}

TEST(ControllerHierarchy, PairingWithOddItemAndUpperLevel) {
  // Three singleton groups g0 (1,0), g1 (2,0), g2 (0,1); lambda 1:
  // sim(0,1) = 1 - |1-2|/2 = 0.5; sim(0,2) = 0 - 0 = 0; sim(1,2) = 0 - |2-1|/2 = -0.5 -> pair (0,1), 2 alone.
  const auto x = feats({{1, 0}, {2, 0}, {0, 1}});
  EXPECT_EQ(hier_greedy_pairs(x.data(), 3, 1.0, 1e-6), (std::vector<std::pair<int, int>>{{0, 1}}));
  const Hierarchy h = hierarchy_build(level0_singletons(3), x.data(), 3, {2, 2}, 1.0, 1e-6);
  ASSERT_EQ(h.levels_used(), 2);
  EXPECT_EQ(h.levels[1].members, (std::vector<std::vector<int>>{{0, 1}, {2}}));  // the odd item's own parent
  EXPECT_EQ(h.levels[0].parent, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(h.levels[1].parent, (std::vector<int>{-1, -1}));
  // Parent features: mean of children (1.5, 0) and (0, 1); size fractions 2/3, 1/3; level 0: 1/3 each.
  EXPECT_DOUBLE_EQ(h.levels[1].feature[0], 1.5);
  EXPECT_DOUBLE_EQ(h.levels[1].feature[F + 1], 1.0);
  EXPECT_DOUBLE_EQ(h.levels[1].size_frac[0], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(h.levels[1].size_frac[1], 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(h.levels[0].size_frac[2], 1.0 / 3.0);
  // Siblings: (0,1) at level 0 (children of parent 0); the top level has exactly two items -> pair (0,1).
  ASSERT_EQ(h.pairs.size(), 2u);
  EXPECT_EQ(h.pairs[0].level, 0);
  EXPECT_EQ(h.pairs[0].a, 0);
  EXPECT_EQ(h.pairs[0].b, 1);
  EXPECT_EQ(h.pairs[1].level, 1);
  EXPECT_EQ(h.pairs[1].a, 0);
  EXPECT_EQ(h.pairs[1].b, 1);
}

TEST(ControllerHierarchy, PairingTiesLowestIndices) {
  // Four orthogonal unit vectors: every sim is 0 -> (0,1) first, then (2,3).
  const auto x = feats({{1}, {0, 1}, {0, 0, 1}, {0, 0, 0, 1}});
  EXPECT_EQ(hier_greedy_pairs(x.data(), 4, 16.0, 1e-6), (std::vector<std::pair<int, int>>{{0, 1}, {2, 3}}));
}

TEST(ControllerHierarchy, LevelsStopAtShapeAndAtTwoItems) {
  // Five singleton heads along distinct axes with equal norms: level 1 has 3 items ((0,1), (2,3), {4}),
  // level 2 has 2 items -> stop: 3 levels of the 4 the shape allows.
  const auto x = feats({{1}, {0, 1}, {0, 0, 1}, {0, 0, 0, 1}, {0, 0, 0, 0, 1}});
  const Hierarchy h = hierarchy_build(level0_singletons(5), x.data(), 5, {2, 2, 2, 2}, 16.0, 1e-6);
  ASSERT_EQ(h.levels_used(), 3);
  EXPECT_EQ(h.levels[1].members, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4}}));
  // Level 1 features (0.5,0.5,0,0,0), (0,0,0.5,0.5,0), (0,0,0,0,1): norms 0.7071, 0.7071, 1; sims (0,1) = 0,
  // (0,2) = 0 - 16 * 0.2929 = -4.69, (1,2) the same -> pair (0,1), {2} alone.
  EXPECT_EQ(h.levels[2].members, (std::vector<std::vector<int>>{{0, 1}, {2}}));
  // The shape caps the levels: with shape [2, 2] only two levels are built; the top then has 3 items and is paired
  // greedily by sim: (0,1), item 2 scored alone.
  const Hierarchy h2 = hierarchy_build(level0_singletons(5), x.data(), 5, {2, 2}, 16.0, 1e-6);
  ASSERT_EQ(h2.levels_used(), 2);
  EXPECT_EQ(h2.levels[1].size(), 3);
  int top_pairs = 0;
  for (const auto& p : h2.pairs)
    if (p.level == 1) {
      top_pairs++;
      EXPECT_EQ(p.a, 0);
      EXPECT_EQ(p.b, 1);
    }
  EXPECT_EQ(top_pairs, 1);
}

// ============================================================================================================
// Spec 4: enriched inputs and scorers
// ============================================================================================================

TEST(ControllerScorer, EnrichedInputsTopAndLowerLevels) {
  // The hierarchy of PairingWithOddItemAndUpperLevel: level 0 g0 (1,0), g1 (2,0), g2 (0,1); level 1 P0 (1.5,0)
  // over {0,1}, P1 (0,1) over {2}. R = 2. u = [g (0..8), eta (9), g - p (10..18), g - gbar (19..27), s (28)].
  const auto x = feats({{1, 0}, {2, 0}, {0, 1}});
  const Hierarchy h = hierarchy_build(level0_singletons(3), x.data(), 3, {2, 2}, 1.0, 1e-6);
  double u[kEnrichedInputs];
  ASSERT_EQ(kEnrichedInputs, 29);
  // Level 0, item 0: eta 0 / max(1, 1) = 0; g - p = (1 - 1.5, 0) = (-0.5, 0); gbar(0) = (1, 1/3) -> (0, -1/3); s 1/3.
  enriched_input(u, h, 0, 0);
  EXPECT_DOUBLE_EQ(u[0], 1.0);
  EXPECT_DOUBLE_EQ(u[9], 0.0);
  EXPECT_DOUBLE_EQ(u[10], -0.5);
  EXPECT_DOUBLE_EQ(u[11], 0.0);
  EXPECT_DOUBLE_EQ(u[19], 0.0);
  EXPECT_DOUBLE_EQ(u[20], -1.0 / 3.0);
  EXPECT_DOUBLE_EQ(u[28], 1.0 / 3.0);
  // Level 0, item 2: its parent is P1 = (0,1) itself -> g - p = 0; g - gbar = (-1, 2/3).
  enriched_input(u, h, 0, 2);
  EXPECT_DOUBLE_EQ(u[10], 0.0);
  EXPECT_DOUBLE_EQ(u[11], 0.0);
  EXPECT_DOUBLE_EQ(u[19], -1.0);
  EXPECT_DOUBLE_EQ(u[20], 2.0 / 3.0);
  // Level 1 (top), item 0: eta 1; top level p = g -> zeros; gbar(1) = (0.75, 0.5) -> (0.75, -0.5); s 2/3.
  enriched_input(u, h, 1, 0);
  EXPECT_DOUBLE_EQ(u[0], 1.5);
  EXPECT_DOUBLE_EQ(u[9], 1.0);
  for (int f = 10; f < 19; f++) EXPECT_EQ(u[f], 0.0);
  EXPECT_DOUBLE_EQ(u[19], 0.75);
  EXPECT_DOUBLE_EQ(u[20], -0.5);
  EXPECT_DOUBLE_EQ(u[28], 2.0 / 3.0);
  // Level 1, item 1: g - gbar = (-0.75, 0.5), s 1/3.
  enriched_input(u, h, 1, 1);
  EXPECT_DOUBLE_EQ(u[19], -0.75);
  EXPECT_DOUBLE_EQ(u[20], 0.5);
  EXPECT_DOUBLE_EQ(u[28], 1.0 / 3.0);
  // Joint input [u_a, u_b, u_a - u_b, u_b - u_a].
  double ua[kEnrichedInputs], ub[kEnrichedInputs], j[kJointInputs];
  enriched_input(ua, h, 1, 0);
  enriched_input(ub, h, 1, 1);
  joint_input(j, ua, ub);
  ASSERT_EQ(kJointInputs, 116);
  EXPECT_DOUBLE_EQ(j[0], 1.5);         // u_a g0
  EXPECT_DOUBLE_EQ(j[29 + 1], 1.0);    // u_b g1
  EXPECT_DOUBLE_EQ(j[58 + 0], 1.5);    // (u_a - u_b) g0 = 1.5 - 0
  EXPECT_DOUBLE_EQ(j[87 + 1], 1.0);    // (u_b - u_a) g1 = 1 - 0
  EXPECT_DOUBLE_EQ(j[87 + 28], -1.0 / 3.0);  // s_b - s_a = 1/3 - 2/3
}

TEST(ControllerScorer, GeluErf) {
  // gelu(x) = x Phi(x): Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208, Phi(-1) = 0.15865525393145707.
  EXPECT_EQ(gelu_erf(0.0), 0.0);
  EXPECT_NEAR(gelu_erf(1.0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(gelu_erf(-1.0), -0.15865525393145707, 1e-15);
  EXPECT_NEAR(gelu_erf(2.0), 2 * 0.9772498680518208, 1e-15);
  // The tanh approximation would give 0.8411919906082768 at 1: the exact form differs from it by 1.5e-4.
  EXPECT_GT(std::fabs(gelu_erf(1.0) - 0.8411919906082768), 1e-4);
}

TEST(ControllerScorer, LinearLayoutAndMlp) {
  // W stored (out, in) = [[1, 2], [3, 4]], b = [0.5, -1], x = [1, -1]: y = x W^T + b = [1 - 2 + 0.5, 3 - 4 - 1].
  Linear lin;
  lin.in = 2, lin.out = 2, lin.weight = {1, 2, 3, 4}, lin.bias = {0.5f, -1.0f};
  const double x[2] = {1, -1};
  double y[2];
  linear_forward(y, lin, x);
  EXPECT_DOUBLE_EQ(y[0], -0.5);
  EXPECT_DOUBLE_EQ(y[1], -2.0);
  // MLP 1 -> 2 -> 1: fc1 W [[1], [-1]] -> h = [1, -1] -> gelu [0.8413447, -0.1586553]; fc2 W [[1, 1]]:
  // y = Phi(1) - Phi(-1) = erf(1/sqrt 2) = 0.6826894921370859.
  Mlp m;
  m.fc1.in = 1, m.fc1.out = 2, m.fc1.weight = {1, -1}, m.fc1.bias = {0, 0};
  m.fc2.in = 2, m.fc2.out = 1, m.fc2.weight = {1, 1}, m.fc2.bias = {0};
  double hidden[2], out;
  const double one = 1.0;
  mlp_forward(&out, m, &one, hidden);
  EXPECT_NEAR(out, 0.6826894921370859, 1e-15);
}

TEST(ControllerScorer, InitUniformBoundsDrawOrderAndDeterminism) {
  const int K = 4;
  const uint64_t seed = 1234;
  const Scorers a = scorers_init(K, seed), b = scorers_init(K, seed), c = scorers_init(K, seed + 1);
  EXPECT_EQ(a.base.fc1.weight, b.base.fc1.weight);
  EXPECT_EQ(a.joint.fc2.bias, b.joint.fc2.bias);
  EXPECT_NE(a.base.fc1.weight, c.base.fc1.weight);
  // Shapes (out, in): base 29 -> 64 -> K, joint 116 -> 256 -> 2K.
  EXPECT_EQ(a.base.fc1.weight.size(), size_t(64 * 29));
  EXPECT_EQ(a.base.fc2.weight.size(), size_t(K * 64));
  EXPECT_EQ(a.joint.fc1.weight.size(), size_t(256 * 116));
  EXPECT_EQ(a.joint.fc2.weight.size(), size_t(2 * K * 256));
  EXPECT_EQ(a.joint.fc2.bias.size(), size_t(2 * K));
  // Bounds 1/sqrt(fan_in) for weights and biases, and the draws fill the interval.
  for (const Linear* l : {&a.base.fc1, &a.base.fc2, &a.joint.fc1, &a.joint.fc2}) {
    const float bound = float(1.0 / std::sqrt(double(l->in)));
    float mx = 0;
    for (float w : l->weight) {
      EXPECT_LE(std::fabs(w), bound);
      mx = std::max(mx, std::fabs(w));
    }
    for (float w : l->bias) EXPECT_LE(std::fabs(w), bound);
    EXPECT_GT(mx, 0.9f * bound);
  }
  // Draw order from one Rng(seed): base.fc1.weight (row-major), base.fc1.bias, base.fc2.weight, ...
  Rng rng(seed);
  auto draw = [&](int fan_in) { return float((2.0 * rng.uniform() - 1.0) / std::sqrt(double(fan_in))); };
  EXPECT_EQ(a.base.fc1.weight[0], draw(29));
  EXPECT_EQ(a.base.fc1.weight[1], draw(29));
  for (int i = 2; i < 64 * 29; i++) draw(29);
  EXPECT_EQ(a.base.fc1.bias[0], draw(29));
  for (int i = 1; i < 64; i++) draw(29);
  EXPECT_EQ(a.base.fc2.weight[0], draw(64));
  for (int i = 1; i < K * 64 + K; i++) draw(64);
  EXPECT_EQ(a.joint.fc1.weight[0], draw(116));
}

TEST(ControllerScorer, LayerSeedDerivation) {
  // seed = splitmix64 chain over (run seed, stream 1, layer, step 0), as documented in controller.h.
  auto chain = [](uint64_t run, uint64_t stream, uint64_t layer, uint64_t step) {
    uint64_t x = run;
    uint64_t h = splitmix64(x);
    x = h ^ stream;
    h = splitmix64(x);
    x = h ^ layer;
    h = splitmix64(x);
    x = h ^ step;
    return splitmix64(x);
  };
  EXPECT_EQ(controller_stream_seed(7, kSeedStreamScorer, 2, 0), chain(7, 1, 2, 0));
  const ControllerConfig cfg = config_for("full_adaptive", {4, 8, 16, 32}, 7);
  LayerController lc(cfg, 4, 2);
  const Scorers expect = scorers_init(4, chain(7, 1, 2, 0));
  EXPECT_EQ(lc.scorers().joint.fc1.weight, expect.joint.fc1.weight);
  // Layers get different scorers.
  LayerController l0(cfg, 4, 0);
  EXPECT_NE(l0.scorers().base.fc1.weight, lc.scorers().base.fc1.weight);
}

// ============================================================================================================
// Spec 5: decisions
// ============================================================================================================

namespace {
// Four singleton heads, shape [2, 2], lambda 0 (plain cosine). With identity_scorers the base logits are g[0..3].
//   x0 (0,0,0.8,1)  raw 3     x1 (0,0,1,0.2) raw 2     x2 (1,0.6,0,0) raw 0     x3 (0,0.6,0,1) raw 3
// Cosines: (0,1) 1/(1.2806 * 1.0198) = 0.7657, (0,2) 0, (0,3) 1/(1.2806 * 1.1662) = 0.6696, (1,2) 0,
// (1,3) 0.2/(1.0198 * 1.1662) = 0.168, (2,3) 0.36/1.36 = 0.2647 -> pairs (0,1), then (2,3).
// Level 1: P0 = (0,0,0.9,0.6) raw 2, P1 = (0.5,0.6,0,0.5) raw 1.
Hierarchy clamp_hierarchy() {
  const auto x = feats({{0, 0, 0.8, 1}, {0, 0, 1, 0.2}, {1, 0.6, 0, 0}, {0, 0.6, 0, 1}});
  return hierarchy_build(level0_singletons(4), x.data(), 4, {2, 2}, 0.0, 1e-6);
}
}  // namespace

TEST(ControllerDecide, ArgmaxTiesToSmallestIndex) {
  const double z1[4] = {0, 1, 1, 0.5}, z2[4] = {2, 2, 2, 2}, z3[4] = {-1, -3, -0.5, -0.5};
  EXPECT_EQ(argmax_first(z1, 4), 1);
  EXPECT_EQ(argmax_first(z2, 4), 0);
  EXPECT_EQ(argmax_first(z3, 4), 2);
}

TEST(ControllerDecide, ParentClamp) {
  const Hierarchy h = clamp_hierarchy();
  ASSERT_EQ(h.levels_used(), 2);
  ASSERT_EQ(h.levels[1].members, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  const Scorers s = identity_scorers();
  // Clamp on, joint off: top (level 1) raw [2, 1] used directly; level 0 raw [3, 2, 0, 3] ->
  // min(3,2) = 2, min(2,2) = 2, min(0,1) = 0 (a child may be smaller), min(3,1) = 1.
  const ControllerDecision d = controller_decide(h, s, false, true);
  EXPECT_EQ(d.raw[1], (std::vector<int>{2, 1}));
  EXPECT_EQ(d.choice[1], (std::vector<int>{2, 1}));
  EXPECT_EQ(d.raw[0], (std::vector<int>{3, 2, 0, 3}));
  EXPECT_EQ(d.choice[0], (std::vector<int>{2, 2, 0, 1}));
  EXPECT_EQ(d.head, (std::vector<int>{2, 2, 0, 1}));
  EXPECT_NEAR(d.logits_base[0][0 * 4 + 3], 1.0, 1e-12);  // logits are g[0..3]
  // No parent constraint: the raw choices.
  EXPECT_EQ(controller_decide(h, s, false, false).head, (std::vector<int>{3, 2, 0, 3}));
}

TEST(ControllerDecide, JointLogitsReplaceBaseLogits) {
  // Two heads, shape [2]: one level of two items -> one sibling pair at the top.
  // Base logits constant [0, 0, 100, 0] (fc2 bias) -> both heads choose 2 without the joint scorer.
  // Joint scorer constant [5, 0, 0, 0 | 0, 0, 0, 5] -> a = 0, b = 3. Added to the base logits they would give
  // [5, 0, 100, 0] and [0, 0, 100, 5], both 2: replacement gives 0 and 3.
  const auto x = feats({{1, 0}, {0, 1}});
  const Hierarchy h = hierarchy_build(level0_partition(x.data(), 2, 0.995, 2), x.data(), 2, {2}, 16, 1e-6);
  ASSERT_EQ(h.levels_used(), 1);
  ASSERT_EQ(h.pairs.size(), 1u);
  Scorers s = identity_scorers();
  std::fill(s.base.fc2.weight.begin(), s.base.fc2.weight.end(), 0.0f);
  s.base.fc2.bias = {0, 0, 100, 0};
  s.joint.fc2.bias = {5, 0, 0, 0, 0, 0, 0, 5};
  const ControllerDecision dj = controller_decide(h, s, true, true);
  EXPECT_EQ(dj.head, (std::vector<int>{0, 3}));
  EXPECT_EQ(dj.logits[0], (std::vector<double>{5, 0, 0, 0, 0, 0, 0, 5}));
  EXPECT_EQ(dj.logits_base[0], (std::vector<double>{0, 0, 100, 0, 0, 0, 100, 0}));
  EXPECT_EQ(controller_decide(h, s, false, true).head, (std::vector<int>{2, 2}));
}

TEST(ControllerDecide, JointScorerWithParentClamp) {
  // clamp_hierarchy: pairs (0,1) and (2,3) at level 0, (P0, P1) at the top. Joint logits a -> 1, b -> 3 replace
  // every paired item's logits: top [1, 3]; level 0 raw [1, 3, 1, 3] -> clamp min(1,1), min(3,1), min(1,3), min(3,3).
  const Hierarchy h = clamp_hierarchy();
  ASSERT_EQ(h.pairs.size(), 3u);
  Scorers s = identity_scorers();
  s.joint.fc2.bias = {0, 5, 0, 0, 0, 0, 0, 5};
  const ControllerDecision d = controller_decide(h, s, true, true);
  EXPECT_EQ(d.raw[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(d.raw[0], (std::vector<int>{1, 3, 1, 3}));
  EXPECT_EQ(d.head, (std::vector<int>{1, 1, 1, 3}));
  EXPECT_EQ(d.logits_joint.size(), 3u);
}

TEST(ControllerDecide, RoundHalfEvenAndResolutionEma) {
  EXPECT_EQ(round_half_even(2.5), 2.0);
  EXPECT_EQ(round_half_even(3.5), 4.0);
  EXPECT_EQ(round_half_even(0.5), 0.0);
  EXPECT_EQ(round_half_even(1.5), 2.0);
  EXPECT_EQ(round_half_even(-1.5), -2.0);
  EXPECT_EQ(round_half_even(2.4999), 2.0);
  EXPECT_EQ(round_half_even(2.5001), 3.0);
  // beta 0.15, prev 3, c 2: 0.45 + 1.7 = 2.15 -> 2.
  EXPECT_EQ(resolution_ema_step(3, 2, 0.15, 4), 2);
  // beta 0.15, prev 3, c 0: 0.45 -> 0. prev 0, c 3: 2.55 -> 3. prev 1, c 3: 0.15 + 2.55 = 2.7 -> 3.
  EXPECT_EQ(resolution_ema_step(3, 0, 0.15, 4), 0);
  EXPECT_EQ(resolution_ema_step(0, 3, 0.15, 4), 3);
  EXPECT_EQ(resolution_ema_step(1, 3, 0.15, 4), 3);
  // Exact halves with beta 0.5: prev 1, c 2 -> 1.5 -> 2; prev 0, c 1 -> 0.5 -> 0; prev 3, c 2 -> 2.5 -> 2.
  EXPECT_EQ(resolution_ema_step(1, 2, 0.5, 4), 2);
  EXPECT_EQ(resolution_ema_step(0, 1, 0.5, 4), 0);
  EXPECT_EQ(resolution_ema_step(3, 2, 0.5, 4), 2);
  // Clamped to [0, K-1].
  EXPECT_EQ(resolution_ema_step(3, 7, 0.0, 4), 3);
  EXPECT_EQ(resolution_ema_step(0, -2, 0.0, 4), 0);
}

TEST(ControllerDecide, ExecutionWindowClamp) {
  const std::vector<int> w = {4, 8, 16, 32};
  EXPECT_EQ(execution_window(w, 0), 4);
  EXPECT_EQ(execution_window(w, 2), 16);
  EXPECT_EQ(execution_window(w, 3), 32);
  EXPECT_EQ(execution_window(w, 9), 32);  // index clamped to K-1
  EXPECT_EQ(execution_window(w, -1), 4);
}

TEST(ControllerDecide, RampFromFullToChoice) {
  // K 4 (full index 3), warmup 10, ramp 4 steps, c = 0: p = clamp((step - 10) / 4, 0, 1);
  // index round_half_even(3 - 3p): step 10 -> 3, 11 -> 2.25 -> 2, 12 -> 1.5 -> 2, 13 -> 0.75 -> 1, 14 -> 0.
  EXPECT_EQ(ramp_index(0, 4, 0, 10, 4), 3);
  EXPECT_EQ(ramp_index(0, 4, 10, 10, 4), 3);
  EXPECT_EQ(ramp_index(0, 4, 11, 10, 4), 2);
  EXPECT_EQ(ramp_index(0, 4, 12, 10, 4), 2);
  EXPECT_EQ(ramp_index(0, 4, 13, 10, 4), 1);
  EXPECT_EQ(ramp_index(0, 4, 14, 10, 4), 0);
  EXPECT_EQ(ramp_index(0, 4, 99, 10, 4), 0);
  EXPECT_EQ(ramp_index(2, 4, 0, 10, 0), 2);  // off
}

// ============================================================================================================
// LayerController / Controller
// ============================================================================================================

TEST(ControllerLayer, StartsFullAndFollowsEma) {
  // Before any update every head runs the full window (ctilde = K-1 = 3). With scorers forced to choose 0 for every
  // item, one update with beta 0.15 gives round(0.15 * 3 + 0.85 * 0) = round(0.45) = 0 -> W_0 = 4; with beta 0.9
  // it gives round(2.7) = 3: the index stays at the full window.
  ControllerConfig cfg = config_for("full_adaptive");
  LayerController lc(cfg, 4, 0);
  EXPECT_EQ(lc.windows(), (std::vector<int>(4, 32)));
  EXPECT_EQ(lc.resolution_index(), (std::vector<int>(4, 3)));
  for (Linear* l : {&lc.scorers().base.fc2, &lc.scorers().joint.fc2}) {
    std::fill(l->weight.begin(), l->weight.end(), 0.0f);
    for (size_t i = 0; i < l->bias.size(); i++) l->bias[i] = (i % 4 == 0) ? 1.0f : 0.0f;  // argmax 0
  }
  Rng rng(5);
  auto x = random_feats(4, rng);
  EXPECT_EQ(lc.update(ControlInput::of_features(x.data()), 0, nullptr), (std::vector<int>(4, 4)));

  cfg.resolution_ema = 0.9;
  LayerController slow(cfg, 4, 0);
  for (Linear* l : {&slow.scorers().base.fc2, &slow.scorers().joint.fc2}) {
    std::fill(l->weight.begin(), l->weight.end(), 0.0f);
    for (size_t i = 0; i < l->bias.size(); i++) l->bias[i] = (i % 4 == 0) ? 1.0f : 0.0f;
  }
  // 0.9 * 3 = 2.7 -> 3: stays at 3 forever (the fixed point of round(0.9 c) with c = 3).
  slow.update(ControlInput::of_features(x.data()), 0, nullptr);
  EXPECT_EQ(slow.resolution_index(), (std::vector<int>(4, 3)));
}

TEST(ControllerLayer, FeatureEma) {
  // alpha 0.9: first observation initialises; then xbar = 0.9 xbar + 0.1 x.
  ControllerConfig cfg = config_for("full_adaptive");
  LayerController lc(cfg, 2, 0);
  const auto a = feats({{1, 2}, {3, 4}}), b = feats({{11, 2}, {3, 14}});
  lc.update(ControlInput::of_features(a.data()), 0, nullptr);
  EXPECT_EQ(lc.feature_ema(), a);
  lc.update(ControlInput::of_features(b.data()), 5, nullptr);
  EXPECT_DOUBLE_EQ(lc.feature_ema()[0], 0.9 * 1 + 0.1 * 11);  // 2.0
  EXPECT_DOUBLE_EQ(lc.feature_ema()[F + 1], 0.9 * 4 + 0.1 * 14);  // 5.0
  // no_feature_ema: alpha 0, xbar = x.
  LayerController raw(config_for("no_feature_ema"), 2, 0);
  raw.update(ControlInput::of_features(a.data()), 0, nullptr);
  raw.update(ControlInput::of_features(b.data()), 5, nullptr);
  EXPECT_EQ(raw.feature_ema(), b);
}

TEST(ControllerLayer, NonFiniteFeaturesSkipTheUpdate) {
  LayerController lc(config_for("full_adaptive"), 2, 0);
  auto x = feats({{1, 2}, {3, 4}});
  lc.update(ControlInput::of_features(x.data()), 0, nullptr);
  const auto ema = lc.feature_ema();
  const auto win = lc.windows();
  x[3] = std::nan("");
  nlohmann::json t;
  lc.update(ControlInput::of_features(x.data()), 5, &t);
  EXPECT_EQ(lc.feature_ema(), ema);
  EXPECT_EQ(lc.windows(), win);
  EXPECT_TRUE(t.contains("skipped"));
}

TEST(ControllerRegimes, Table) {
  ControllerConfig c;
  c.windows = {4, 8, 16, 32};
  controller_apply_regime(c, "full");
  EXPECT_EQ(c.policy, WindowPolicy::off);
  controller_apply_regime(c, "grouping_off");
  EXPECT_EQ(c.policy, WindowPolicy::controller);
  EXPECT_FALSE(c.grouping);
  EXPECT_FALSE(c.joint_scorer);
  EXPECT_FALSE(c.parent_clamp);
  controller_apply_regime(c, "full_adaptive");
  EXPECT_TRUE(c.grouping && c.joint_scorer && c.parent_clamp);
  EXPECT_EQ(c.shape, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(c.topology, TopologyMode::recompute);
  controller_apply_regime(c, "shallow_freeze");
  EXPECT_EQ(c.shape, (std::vector<int>{2}));
  EXPECT_EQ(c.topology, TopologyMode::freeze);
  EXPECT_TRUE(c.joint_scorer);
  controller_apply_regime(c, "deep_reuse");
  EXPECT_EQ(c.shape, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(c.topology, TopologyMode::reuse_level0);
  // Variants alone sit on full_adaptive.
  controller_apply_regime(c, "independent_scoring");
  EXPECT_FALSE(c.joint_scorer);
  EXPECT_EQ(c.topology, TopologyMode::recompute);
  EXPECT_EQ(c.shape, (std::vector<int>{2, 2, 2, 2}));
  controller_apply_regime(c, "no_parent_constraint");
  EXPECT_TRUE(c.joint_scorer);  // reset by the new regime
  EXPECT_FALSE(c.parent_clamp);
  controller_apply_regime(c, "no_feature_ema");
  EXPECT_EQ(c.feature_ema, 0.0);
  controller_apply_regime(c, "control_off");
  EXPECT_EQ(c.feature_ema, 0.9);
  EXPECT_EQ(c.policy, WindowPolicy::off);
  controller_apply_regime(c, "fixed_random_grouping");
  EXPECT_EQ(c.topology, TopologyMode::fixed_random);
  controller_apply_regime(c, "freeze_after_warmup");
  EXPECT_TRUE(c.freeze_after_warmup);
  controller_apply_regime(c, "fixed_window_1024");
  EXPECT_EQ(c.policy, WindowPolicy::fixed);
  EXPECT_EQ(c.fixed_window, 1024);
  controller_apply_regime(c, "deterministic_window");
  EXPECT_EQ(c.policy, WindowPolicy::deterministic);
  controller_apply_regime(c, "random_window");
  EXPECT_EQ(c.policy, WindowPolicy::random);
  controller_apply_regime(c, "control_interval_10");
  EXPECT_EQ(c.control_interval, 10);
  EXPECT_EQ(c.policy, WindowPolicy::controller);
  // Composition: shuffle on top of either base.
  controller_apply_regime(c, "full_adaptive+shuffle_post_select");
  EXPECT_TRUE(c.shuffle_post_select);
  EXPECT_EQ(c.topology, TopologyMode::recompute);
  controller_apply_regime(c, "shallow_freeze+shuffle_post_select");
  EXPECT_TRUE(c.shuffle_post_select);
  EXPECT_EQ(c.topology, TopologyMode::freeze);
  EXPECT_EQ(c.regime, "shallow_freeze+shuffle_post_select");
  controller_apply_regime(c, "shallow_freeze+control_interval_10");
  EXPECT_EQ(c.control_interval, 10);
  EXPECT_FALSE(c.shuffle_post_select);
  // Knobs outside the regime are kept.
  c.tau = 0.9;
  controller_apply_regime(c, "full_adaptive");
  EXPECT_EQ(c.tau, 0.9);
}

TEST(ControllerRegimes, UnknownNamesAreErrors) {
  ControllerConfig c;
  c.windows = {4, 8};
  std::string e = error_of([&] { controller_apply_regime(c, "full_adaptiv"); });
  EXPECT_NE(e.find("'full_adaptiv'"), std::string::npos) << e;
  EXPECT_NE(e.find("shallow_freeze"), std::string::npos) << e;
  EXPECT_NE(e.find("shuffle_post_select"), std::string::npos) << e;
  e = error_of([&] { controller_apply_regime(c, "shallow_freeze+bogus"); });
  EXPECT_NE(e.find("'bogus'"), std::string::npos) << e;
  e = error_of([&] { controller_apply_regime(c, "control_interval_x"); });
  EXPECT_NE(e.find("control_interval_x"), std::string::npos) << e;
  e = error_of([&] { controller_apply_regime(c, "shuffle_post_select+deep_reuse"); });  // main regime only first
  EXPECT_NE(e.find("'deep_reuse'"), std::string::npos) << e;
  // fixed_window without a window is caught by validation.
  controller_apply_regime(c, "fixed_window");
  e = error_of([&] { controller_validate(c); });
  EXPECT_NE(e.find("fixed_window"), std::string::npos) << e;
  c = ControllerConfig();
  c.windows = {8, 4};
  e = error_of([&] { controller_validate(c); });
  EXPECT_NE(e.find("ascending"), std::string::npos) << e;
  c.windows = {4, 8};
  c.shape = {3, 2};
  e = error_of([&] { controller_validate(c); });
  EXPECT_NE(e.find("aah.shape"), std::string::npos) << e;
}

// Every name of the regime table applies and validates; a name ending in _N / _W takes a number there.
TEST(ControllerRegimes, EveryNameApplies) {
  for (std::string name : controller_regime_names()) {
    const size_t n = name.size();
    if (n > 2 && name[n - 2] == '_' && std::isupper(static_cast<unsigned char>(name[n - 1]))) name[n - 1] = '3';
    ControllerConfig c = config_for(name);
    EXPECT_EQ(c.regime, name);
    if (name == "fixed_window") c.fixed_window = 2;  // takes its window from the knob
    if (name == "copy_shuffled") c.pair_budget = 0.5;  // takes its budget from the knob (or copy_budget_P before it)
    EXPECT_NO_THROW(controller_validate(c)) << name;
  }
  EXPECT_EQ(config_for("fixed_window_007").fixed_window, 7);
  EXPECT_EQ(config_for("shallow_freeze+control_interval_3").control_interval, 3);
  EXPECT_EQ(config_for("shallow_freeze+control_interval_3").topology, TopologyMode::freeze);
}

TEST(ControllerRegimes, GroupingOffHasNoUpperLevels) {
  LayerController lc(config_for("grouping_off"), 8, 0);
  Rng rng(2);
  for (int s = 0; s < 3; s++) {
    const auto x = random_feats(8, rng);
    lc.update(ControlInput::of_features(x.data()), s * 5, nullptr);
    EXPECT_EQ(lc.levels_used(), 1);
    EXPECT_EQ(lc.hierarchy().levels[0].size(), 8);
    EXPECT_EQ(lc.hierarchy().levels[0].parent, std::vector<int>(8, -1));
    EXPECT_TRUE(lc.hierarchy().pairs.empty());
  }
}

namespace {
// Features A: clusters {0,1} (e0) and {2,3} (e1); B: {0,2} (e0) and {1,3} (e1).
const std::vector<double> kA = feats({{1, 0.01}, {1}, {0, 1}, {0, 1}});
const std::vector<double> kB = feats({{1}, {0, 1}, {1}, {0, 1}});
}  // namespace

TEST(ControllerRegimes, ShallowFreezeKeepsTopology) {
  // Without feature EMA so that B fully replaces A. Recompute (control) follows the features; freeze does not.
  ControllerConfig frozen = config_for("shallow_freeze+no_feature_ema");
  ControllerConfig moving = frozen;
  moving.topology = TopologyMode::recompute;
  LayerController f(frozen, 4, 0), m(moving, 4, 0);
  f.update(ControlInput::of_features(kA.data()), 0, nullptr);
  m.update(ControlInput::of_features(kA.data()), 0, nullptr);
  EXPECT_EQ(f.hierarchy().levels[0].members, (HeadPartition{{0, 1}, {2, 3}}));
  EXPECT_EQ(f.levels_used(), 1);
  for (int s = 1; s <= 3; s++) {
    f.update(ControlInput::of_features(kB.data()), 5 * s, nullptr);
    m.update(ControlInput::of_features(kB.data()), 5 * s, nullptr);
    EXPECT_EQ(f.hierarchy().levels[0].members, (HeadPartition{{0, 1}, {2, 3}}));
    EXPECT_EQ(m.hierarchy().levels[0].members, (HeadPartition{{0, 2}, {1, 3}}));
    // Group features follow the current features: group {0,1} under B = mean(e0, e1) = (0.5, 0.5).
    EXPECT_DOUBLE_EQ(f.hierarchy().levels[0].feature[0], 0.5);
    EXPECT_DOUBLE_EQ(f.hierarchy().levels[0].feature[1], 0.5);
  }
  EXPECT_TRUE(f.topology_cached());
  EXPECT_FALSE(m.topology_cached());
}

TEST(ControllerRegimes, DeepReuseKeepsLevel0AndRebuildsUpperLevels) {
  // A: four clusters {0,1} e0, {2,3} e1, {4,5} e2, {6,7} e3: level 0 has 4 groups; all level-1 sims are 0 -> pairs
  // by lowest indices: (g0,g1), (g2,g3).
  // B: heads 0,1 e0; 2,3 e1; 4,5 e0 + 0.05 e5; 6,7 e3. Reusing A's level 0, g2 = e0 + 0.05 e5 (norm 1.00125):
  // sim(g0, g2) = 0.99875 - 16 * 0.00125 / 1.00125 = 0.9788, every other pair <= 0 -> pairs (g0,g2), (g1,g3).
  // Recomputing level 0 under B would merge heads 0,1,4,5 (cos 0.99875 >= 0.995) into one group.
  const auto A = feats({{1}, {1}, {0, 1}, {0, 1}, {0, 0, 1}, {0, 0, 1}, {0, 0, 0, 1}, {0, 0, 0, 1}});
  const auto B = feats({{1}, {1}, {0, 1}, {0, 1}, {1, 0, 0, 0, 0, 0.05}, {1, 0, 0, 0, 0, 0.05}, {0, 0, 0, 1}, {0, 0, 0, 1}});
  LayerController reuse(config_for("deep_reuse+no_feature_ema"), 8, 0);
  LayerController adaptive(config_for("full_adaptive+no_feature_ema"), 8, 0);
  reuse.update(ControlInput::of_features(A.data()), 0, nullptr);
  adaptive.update(ControlInput::of_features(A.data()), 0, nullptr);
  const HeadPartition l0 = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  EXPECT_EQ(reuse.hierarchy().levels[0].members, l0);
  EXPECT_EQ(reuse.hierarchy().levels[1].members, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  reuse.update(ControlInput::of_features(B.data()), 5, nullptr);
  adaptive.update(ControlInput::of_features(B.data()), 5, nullptr);
  EXPECT_EQ(reuse.hierarchy().levels[0].members, l0);
  EXPECT_EQ(reuse.hierarchy().levels[1].members, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(adaptive.hierarchy().levels[0].members, (HeadPartition{{0, 1, 4, 5}, {2, 3}, {6, 7}}));
}

// aah.reuse_cache_step = k: deep_reuse recomputes level 0 at the updates before step k and caches the partition of
// the first update at or after k. Features (no feature EMA): A, then B at step 5, then A again at step 10. A gives
// level 0 {0,1} {2,3} {4,5} {6,7}; B merges heads 0,1,4,5 (cos 0.99875 >= 0.995): {0,1,4,5} {2,3} {6,7}.
TEST(ControllerRegimes, DeepReuseCachesLevel0FromReuseCacheStep) {
  const auto A = feats({{1}, {1}, {0, 1}, {0, 1}, {0, 0, 1}, {0, 0, 1}, {0, 0, 0, 1}, {0, 0, 0, 1}});
  const auto B = feats({{1}, {1}, {0, 1}, {0, 1}, {1, 0, 0, 0, 0, 0.05}, {1, 0, 0, 0, 0, 0.05}, {0, 0, 0, 1}, {0, 0, 0, 1}});
  const HeadPartition partA = {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, partB = {{0, 1, 4, 5}, {2, 3}, {6, 7}};
  ControllerConfig first = config_for("deep_reuse+no_feature_ema");  // reuse_cache_step 0: cached at step 0
  ControllerConfig late = first;
  late.reuse_cache_step = 3;  // updates at 0, 5, 10: the first at or after 3 is step 5
  LayerController f(first, 8, 0), l(late, 8, 0);
  f.update(ControlInput::of_features(A.data()), 0, nullptr);
  l.update(ControlInput::of_features(A.data()), 0, nullptr);
  EXPECT_TRUE(f.topology_cached());
  EXPECT_FALSE(l.topology_cached());
  EXPECT_EQ(l.hierarchy().levels[0].members, partA);
  nlohmann::json t;
  f.update(ControlInput::of_features(B.data()), 5, nullptr);
  l.update(ControlInput::of_features(B.data()), 5, &t);
  EXPECT_EQ(t["topology"], "recomputed");  // level 0 of step 5 computed from B, then cached
  EXPECT_TRUE(l.topology_cached());
  EXPECT_EQ(f.hierarchy().levels[0].members, partA);
  EXPECT_EQ(l.hierarchy().levels[0].members, partB);
  f.update(ControlInput::of_features(A.data()), 10, nullptr);
  l.update(ControlInput::of_features(A.data()), 10, &t);
  EXPECT_EQ(t["topology"], "level0_cached");
  EXPECT_EQ(f.hierarchy().levels[0].members, partA);
  EXPECT_EQ(l.hierarchy().levels[0].members, partB);  // kept from step 5, not recomputed from A
  late.reuse_cache_step = -1;
  EXPECT_NE(error_of([&] { controller_validate(late); }).find("'aah.reuse_cache_step' must be >= 0"), std::string::npos);
}

TEST(ControllerRegimes, FixedRandomGroupingIsKept) {
  LayerController lc(config_for("fixed_random_grouping"), 8, 0);
  Rng rng(9);
  HeadPartition first;
  for (int s = 0; s < 4; s++) {
    const auto x = random_feats(8, rng);
    lc.update(ControlInput::of_features(x.data()), 5 * s, nullptr);
    const HeadPartition p = lc.hierarchy().levels[0].members;
    if (s == 0) first = p;
    EXPECT_EQ(p, first);
  }
  // A valid partition of the 8 heads into 2..8 groups, ordered by smallest head.
  std::set<int> heads;
  for (const auto& g : first) heads.insert(g.begin(), g.end());
  EXPECT_EQ(heads.size(), 8u);
  EXPECT_GE(first.size(), 2u);
  for (size_t i = 1; i < first.size(); i++) EXPECT_LT(first[i - 1][0], first[i][0]);
  // Seeded: some seed gives a different partition.
  bool differs = false;
  for (uint64_t seed = 1; seed < 6 && !differs; seed++)
    differs = level0_random_partition(8, 8, seed) != level0_random_partition(8, 8, seed + 100);
  EXPECT_TRUE(differs);
  EXPECT_EQ(level0_random_partition(8, 8, 42), level0_random_partition(8, 8, 42));
  // Two groups at most with max_groups 2, never one when H >= 2.
  for (uint64_t seed = 0; seed < 20; seed++) EXPECT_EQ(level0_random_partition(3, 2, seed).size(), 2u);
}

// The control input is typed: each policy reads its one measurement, and a measurement it does not read is refused
// (it would be silently ignored), as is a missing one.
TEST(ControllerRegimes, APolicyRefusesAMeasurementItDoesNotRead) {
  const std::vector<double> x(size_t(8) * kControllerFeatures, 0.5), m(size_t(8) * 4, 0.5);
  Controller features(config_for("full_adaptive"), 2, 8), coverage(config_for("coverage"), 2, 8),
      copy(config_for("copy_budget_500"), 2, 8), random(config_for("random_window"), 2, 8);
  EXPECT_THROW(features.update(0, ControlInput::of_mass(m.data()), 0), Error);
  EXPECT_THROW(features.update(0, ControlInput{}, 0), Error);
  EXPECT_NO_THROW(features.update(0, ControlInput::of_features(x.data()), 0));
  EXPECT_THROW(coverage.update(0, ControlInput::of_features(x.data()), 0), Error);
  EXPECT_NO_THROW(coverage.update(0, ControlInput::of_mass(m.data()), 0));
  EXPECT_THROW(copy.update(0, ControlInput::of_mass(m.data()), 0), Error);
  EXPECT_NO_THROW(copy.update(0, ControlInput::of_use(m.data()), 0));
  EXPECT_THROW(random.update(0, ControlInput::of_use(m.data()), 0), Error);
  EXPECT_NO_THROW(random.update(0, ControlInput{}, 0));
}

TEST(ControllerRegimes, WindowPolicies) {
  Rng rng(4);
  const auto x = random_feats(8, rng);
  {  // full and control_off: full windows, no updates needed for full.
    Controller full(config_for("full"), 2, 8);
    EXPECT_FALSE(full.is_update_step(0));
    Controller off(config_for("control_off"), 2, 8);
    for (int s = 0; s < 20; s++)
      for (int l = 0; l < 2; l++) EXPECT_EQ(off.update(l, ControlInput{}, s), std::vector<int>(8, 32));
    EXPECT_DOUBLE_EQ(off.acr(), 1.0);
  }
  {  // fixed W: every head W, before and after updates.
    Controller fixed(config_for("fixed_window_8"), 2, 8);
    EXPECT_EQ(fixed.windows(1), std::vector<int>(8, 8));
    fixed.layer(1).update(ControlInput{}, 0, nullptr);
    EXPECT_EQ(fixed.windows(1), std::vector<int>(8, 8));
    EXPECT_DOUBLE_EQ(fixed.acr(), 0.25);
  }
  {  // deterministic: head h gets W[h mod 4].
    Controller det(config_for("deterministic_window"), 1, 8);
    EXPECT_EQ(det.windows(0), (std::vector<int>{4, 8, 16, 32, 4, 8, 16, 32}));
  }
  {  // random: candidate windows, redrawn at updates, cached in between, same seed -> same draws.
    Controller r1(config_for("random_window"), 1, 8), r2(config_for("random_window"), 1, 8);
    std::set<std::vector<int>> seen;
    for (int s = 0; s < 30; s++) {
      const auto before = r1.windows(0);
      const auto& w = r1.update(0, ControlInput{}, s);
      EXPECT_EQ(w, r2.update(0, ControlInput{}, s));
      if (s % 5 != 0) {
        EXPECT_EQ(w, before);
      }
      for (int v : w) EXPECT_TRUE(v == 4 || v == 8 || v == 16 || v == 32);
      seen.insert(w);
    }
    EXPECT_GE(seen.size(), 5u);  // 6 updates of 8 heads over 4 windows: all equal has probability ~4^-40
    Controller r3(config_for("random_window", {4, 8, 16, 32}, 8), 1, 8);
    r3.update(0, ControlInput{}, 0);
    Controller r4(config_for("random_window", {4, 8, 16, 32}, 7), 1, 8);
    r4.update(0, ControlInput{}, 0);
    EXPECT_NE(r3.windows(0), r4.windows(0));
  }
}

TEST(ControllerRegimes, ShufflePostSelectPermutesWindows) {
  // deterministic_window + shuffle: each update is a permutation of {4, 8, 16, 32, 4, 8, 16, 32}.
  Controller c(config_for("deterministic_window+shuffle_post_select"), 1, 8);
  EXPECT_TRUE(c.is_update_step(0));
  std::set<std::vector<int>> orders;
  const std::multiset<int> expect = {4, 8, 16, 32, 4, 8, 16, 32};
  for (int s = 0; s < 50; s += 5) {
    const auto& w = c.update(0, ControlInput{}, s);
    EXPECT_EQ(std::multiset<int>(w.begin(), w.end()), expect);
    orders.insert(w);
  }
  EXPECT_GE(orders.size(), 3u);
  // On the controller policy: same seed and features with and without shuffle give the same multiset.
  Rng rng(6);
  LayerController plain(config_for("full_adaptive"), 8, 0), shuf(config_for("full_adaptive+shuffle_post_select"), 8, 0);
  for (int s = 0; s < 5; s++) {
    const auto x = random_feats(8, rng);
    const auto a = plain.update(ControlInput::of_features(x.data()), 5 * s, nullptr), b = shuf.update(ControlInput::of_features(x.data()), 5 * s, nullptr);
    EXPECT_EQ(std::multiset<int>(a.begin(), a.end()), std::multiset<int>(b.begin(), b.end()));
    EXPECT_EQ(plain.resolution_index(), shuf.resolution_index());  // the EMA state is not shuffled
  }
}

TEST(ControllerSchedule, IntervalFreezeAndCachedWindows) {
  Controller c(config_for("full_adaptive"), 2, 4);
  EXPECT_TRUE(c.is_update_step(0));
  EXPECT_FALSE(c.is_update_step(1));
  EXPECT_FALSE(c.is_update_step(4));
  EXPECT_TRUE(c.is_update_step(5));
  Controller c10(config_for("shallow_freeze+control_interval_10"), 2, 4);
  EXPECT_FALSE(c10.is_update_step(5));
  EXPECT_TRUE(c10.is_update_step(10));
  // freeze_after_warmup with warmup 10: updates at 0 and 5 only.
  ControllerConfig fw = config_for("freeze_after_warmup");
  fw.warmup_steps = 10;
  Controller f(fw, 2, 4);
  EXPECT_TRUE(f.is_update_step(0));
  EXPECT_TRUE(f.is_update_step(5));
  EXPECT_FALSE(f.is_update_step(10));
  EXPECT_FALSE(f.is_update_step(15));
  // Between updates the cached windows (and the whole state) stay, whatever features are passed.
  Rng rng(8);
  for (int step = 0; step < 12; step++) {
    const auto x = random_feats(4, rng);
    const auto before = c.windows(0);
    const auto ema = c.layer(0).feature_ema();
    c.update(0, ControlInput::of_features(x.data()), step);
    if (step % 5 != 0) {
      EXPECT_EQ(c.windows(0), before);
      EXPECT_EQ(c.layer(0).feature_ema(), ema);
    } else {
      EXPECT_NE(c.layer(0).feature_ema(), ema);
    }
  }
  EXPECT_EQ(c.layer(0).updates_done(), 3);  // steps 0, 5, 10
}

TEST(ControllerDeterminism, SameSeedSameWindowsDifferentSeedDifferentScorers) {
  auto run = [](uint64_t seed) {
    Controller c(config_for("full_adaptive", {4, 8, 16, 32}, seed), 3, 8);
    Rng rng(77);  // the same features for every run
    std::vector<std::vector<int>> out;
    for (int step = 0; step < 40; step++)
      for (int l = 0; l < 3; l++) {
        const auto x = random_feats(8, rng);
        out.push_back(c.update(l, ControlInput::of_features(x.data()), step));
      }
    return std::make_pair(out, c.layer(0).scorers().base.fc1.weight);
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_NE(a.second, c.second);
}

TEST(ControllerStats, AcrPairRatioBucketsLevels) {
  // deterministic_window, T 16, W [2, 4, 8, 16], H 4, L 2: windows 2, 4, 8, 16 in each layer.
  Controller c(config_for("deterministic_window", {2, 4, 8, 16}), 2, 4);
  // ACR = mean(2, 4, 8, 16) / 16 = 30 / 64.
  EXPECT_DOUBLE_EQ(c.acr(), 30.0 / 64.0);
  // Pairs over t = 1..16 of min(t, W): W 2: 1 + 2*15 = 31; W 4: 1+2+3 + 4*13 = 58; W 8: 28 + 8*9 = 100;
  // W 16: 136. Ratio (31 + 58 + 100 + 136) / (4 * 136) = 325 / 544.
  EXPECT_DOUBLE_EQ(c.exact_pair_ratio(16), 325.0 / 544.0);
  const auto b = c.window_bucket_fractions();
  ASSERT_EQ(b.size(), 4u);
  for (const auto& e : b) EXPECT_DOUBLE_EQ(e.second, 0.25);
  EXPECT_EQ(c.levels_used(), (std::vector<int>{0, 0}));
  // A fixed window outside the candidates gets its own bucket.
  Controller f(config_for("fixed_window_3", {2, 4, 8, 16}), 1, 4);
  const auto bf = f.window_bucket_fractions();
  ASSERT_EQ(bf.size(), 5u);
  EXPECT_EQ(bf[1].first, 3);
  EXPECT_DOUBLE_EQ(bf[1].second, 1.0);
  EXPECT_DOUBLE_EQ(bf[0].second, 0.0);
  // Levels used after updates: shallow_freeze builds one level.
  Controller s(config_for("shallow_freeze"), 2, 4);
  Rng rng(1);
  for (int l = 0; l < 2; l++) {
    const auto x = random_feats(4, rng);
    s.update(l, ControlInput::of_features(x.data()), 0);
  }
  EXPECT_EQ(s.levels_used(), (std::vector<int>{1, 1}));
  EXPECT_DOUBLE_EQ(s.mean_levels_used(), 1.0);
}

TEST(ControllerTrace, RecomputesEveryDecision) {
  // From the trace alone plus the scorer weights, recompute the base logits (with an independent MLP), the raw
  // choices, the clamp, the head mapping, the resolution EMA and the windows.
  ControllerConfig cfg = config_for("full_adaptive");
  cfg.tau = 0.9999;  // many groups -> upper levels
  LayerController lc(cfg, 8, 0);
  Rng rng(12);
  nlohmann::json t;
  for (int s = 0; s < 3; s++) {
    const auto x = random_feats(8, rng);
    lc.update(ControlInput::of_features(x.data()), 5 * s, &t);
  }
  for (const char* k : {"step", "layer", "raw_features", "smoothed_features", "level0_groups", "levels", "pairs",
                        "head_choice", "resolution_prev", "resolution", "windows"})
    EXPECT_TRUE(t.contains(k)) << k;
  EXPECT_EQ(t["step"], 10);
  const Scorers& sc = lc.scorers();
  auto my_mlp = [](const Mlp& m, const std::vector<double>& x) {
    std::vector<double> h(m.fc1.out), y(m.fc2.out);
    for (int o = 0; o < m.fc1.out; o++) {
      double a = m.fc1.bias[o];
      for (int i = 0; i < m.fc1.in; i++) a += double(m.fc1.weight[size_t(o) * m.fc1.in + i]) * x[i];
      h[o] = 0.5 * a * std::erfc(-a / std::sqrt(2.0));  // x Phi(x)
    }
    for (int o = 0; o < m.fc2.out; o++) {
      double a = m.fc2.bias[o];
      for (int i = 0; i < m.fc2.in; i++) a += double(m.fc2.weight[size_t(o) * m.fc2.in + i]) * h[i];
      y[o] = a;
    }
    return y;
  };
  const auto& levels = t["levels"];
  const int R = int(levels.size());
  ASSERT_GE(R, 2);
  EXPECT_EQ(t["levels_used"], R);
  std::vector<std::vector<int>> choice(R);
  for (int r = R - 1; r >= 0; r--) {
    const auto& lv = levels[r];
    const int n = int(lv["items"].size());
    for (int i = 0; i < n; i++) {
      const std::vector<double> u = lv["enriched"][i];
      const std::vector<double> z = my_mlp(sc.base, u);
      const std::vector<double> zb = lv["logits_base"][i];
      for (int k = 0; k < 4; k++) EXPECT_NEAR(zb[k], z[k], 1e-12);
      const std::vector<double> used = lv["logits"][i];
      int am = 0;
      for (int k = 1; k < 4; k++)
        if (used[k] > used[am]) am = k;
      EXPECT_EQ(lv["raw_choice"][i], am);
      int c = am;
      if (r < R - 1) c = std::min(c, choice[r + 1][int(lv["parent"][i])]);
      choice[r].push_back(c);
      EXPECT_EQ(lv["choice"][i], c);
    }
  }
  // Joint logits of each pair replace the pair's logits and equal the joint MLP on [u_a, u_b, u_a-u_b, u_b-u_a].
  for (const auto& p : t["pairs"]) {
    const int r = p["level"], a = p["a"], b = p["b"];
    const std::vector<double> ua = levels[r]["enriched"][a], ub = levels[r]["enriched"][b];
    std::vector<double> j(ua);
    j.insert(j.end(), ub.begin(), ub.end());
    for (int k = 0; k < 29; k++) j.push_back(ua[k] - ub[k]);
    for (int k = 0; k < 29; k++) j.push_back(ub[k] - ua[k]);
    const auto z = my_mlp(sc.joint, j);
    for (int k = 0; k < 4; k++) {
      EXPECT_NEAR(double(levels[r]["logits"][a][k]), z[k], 1e-12);
      EXPECT_NEAR(double(levels[r]["logits"][b][k]), z[4 + k], 1e-12);
    }
  }
  // Head mapping, resolution EMA (beta 0.15, nearbyint = round half to even), windows.
  const std::vector<int> win = {4, 8, 16, 32};
  for (int h = 0; h < 8; h++) {
    int g = -1;
    for (size_t i = 0; i < t["level0_groups"].size(); i++)
      for (int m : t["level0_groups"][i])
        if (m == h) g = int(i);
    ASSERT_GE(g, 0);
    EXPECT_EQ(t["head_choice"][h], choice[0][g]);
    const int prev = t["resolution_prev"][h];
    const int ct = int(std::nearbyint(0.15 * prev + 0.85 * choice[0][g]));
    EXPECT_EQ(t["resolution"][h], ct);
    EXPECT_EQ(t["windows"][h], win[ct]);
  }
}

// ============================================================================================================
// State
// ============================================================================================================

// The features as a control input for a policy that reads them; nothing for one that does not (random windows).
ControlInput features_if_read(const Controller& c, const std::vector<double>& x) {
  return c.needs_features() ? ControlInput::of_features(x.data()) : ControlInput{};
}

TEST(ControllerState, SaveLoadContinuesIdentically) {
  for (const std::string regime : {"full_adaptive", "shallow_freeze", "deep_reuse", "fixed_random_grouping",
                                   "grouping_off", "random_window", "full_adaptive+shuffle_post_select"}) {
    SCOPED_TRACE(regime);
    TempDir tmp;
    const ControllerConfig cfg = config_for(regime, {4, 8, 16, 32}, 3);
    Controller a(cfg, 2, 8);
    Rng rng(21);
    int step = 0;
    for (; step < 12; step++)
      for (int l = 0; l < 2; l++) {
        const auto x = random_feats(8, rng);
        a.update(l, features_if_read(a, x), step);
      }
    {
      SafetensorsWriter w;
      a.save(w, "aah_state.");
      w.write(tmp.path("ctl.safetensors"));
    }
    Controller b(cfg, 2, 8);
    SafetensorsReader r(tmp.path("ctl.safetensors"));
    b.load(r, "aah_state.");
    for (int l = 0; l < 2; l++) {
      EXPECT_EQ(b.windows(l), a.windows(l));
      EXPECT_EQ(b.layer(l).feature_ema(), a.layer(l).feature_ema());
      EXPECT_EQ(b.layer(l).resolution_index(), a.layer(l).resolution_index());
      EXPECT_EQ(b.layer(l).scorers().joint.fc1.weight, a.layer(l).scorers().joint.fc1.weight);
    }
    Controller fresh(cfg, 2, 8);  // what b would do without the state
    bool fresh_differs = false;
    for (; step < 40; step++)
      for (int l = 0; l < 2; l++) {
        const auto x = random_feats(8, rng);
        const auto wa = a.update(l, features_if_read(a, x), step);
        const auto wb = b.update(l, features_if_read(b, x), step);
        const auto wf = fresh.update(l, features_if_read(fresh, x), step);
        EXPECT_EQ(wa, wb) << "step " << step << " layer " << l;
        if (cfg.policy == WindowPolicy::controller) {
          EXPECT_EQ(a.layer(l).feature_ema(), b.layer(l).feature_ema());
        }
        fresh_differs |= wf != wa || fresh.layer(l).feature_ema() != a.layer(l).feature_ema();
      }
    if (cfg.policy == WindowPolicy::controller) {
      EXPECT_TRUE(fresh_differs);
    }
    if (cfg.topology != TopologyMode::recompute && cfg.grouping) {
      EXPECT_EQ(b.layer(1).hierarchy().levels[0].members, a.layer(1).hierarchy().levels[0].members);
    }
  }
}

TEST(ControllerState, MismatchesAndCorruptionAreErrors) {
  TempDir tmp;
  const ControllerConfig cfg = config_for("shallow_freeze");
  Controller a(cfg, 2, 4);
  Rng rng(1);
  for (int l = 0; l < 2; l++) {
    const auto x = random_feats(4, rng);
    a.update(l, ControlInput::of_features(x.data()), 0);
  }
  {
    SafetensorsWriter w;
    a.save(w);
    w.write(tmp.path("ok.safetensors"));
  }
  SafetensorsReader ok(tmp.path("ok.safetensors"));
  // Other head count, other windows, other layer count.
  std::string e = error_of([&] { Controller(cfg, 2, 8).load(ok); });
  EXPECT_NE(e.find("controller.dims"), std::string::npos) << e;
  e = error_of([&] { Controller(config_for("shallow_freeze", {4, 8, 16, 64}), 2, 4).load(ok); });
  EXPECT_NE(e.find("candidate_windows"), std::string::npos) << e;
  e = error_of([&] { Controller(cfg, 3, 4).load(ok); });
  EXPECT_NE(e.find("controller.dims"), std::string::npos) << e;
  // A corrupt topology: copy every tensor, break layers.1.topology.
  {
    SafetensorsWriter w;
    std::vector<std::vector<char>> bufs;
    for (const auto& t : ok.tensors()) {
      bufs.emplace_back(t.end - t.begin);
      ok.read_raw(t.name, t.dtype, bufs.back().data(), t.shape);
      if (t.name == "layers.1.topology") reinterpret_cast<int32_t*>(bufs.back().data())[2] = 99;  // n_0 = 99
      w.add_raw(t.name, t.dtype, bufs.back().data(), bufs.back().size(), t.shape);
    }
    w.write(tmp.path("bad.safetensors"));
  }
  SafetensorsReader bad(tmp.path("bad.safetensors"));
  Controller c(cfg, 2, 4);
  e = error_of([&] { c.load(bad); });
  EXPECT_NE(e.find("layers.1.topology"), std::string::npos) << e;
  // All or nothing: layer 0 was not loaded either.
  EXPECT_FALSE(c.layer(0).feature_ema_initialised());
}
