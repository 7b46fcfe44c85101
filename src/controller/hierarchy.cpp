// AAH-v3 hierarchy (spec section 3). See hierarchy.h.
#include "controller/hierarchy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace aah {

namespace {

constexpr int F = kControllerFeatures;

double norm(const double* a, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += a[i] * a[i];
  return std::sqrt(s);
}

// Mean of the rows `rows` of x (., F) into out (F).
void mean_rows(double* out, const double* x, const std::vector<int>& rows) {
  for (int f = 0; f < F; f++) out[f] = 0;
  for (int r : rows)
    for (int f = 0; f < F; f++) out[f] += x[size_t(r) * F + f];
  const double inv = rows.empty() ? 0.0 : 1.0 / double(rows.size());
  for (int f = 0; f < F; f++) out[f] *= inv;
}

// Level 0 of a hierarchy: members, order, group features g_i(0) and sizes s_i(0) = |G_i| / H.
HierLevel make_level0(const HeadPartition& groups, const double* x, int H) {
  HierLevel lv;
  lv.members = groups;
  const int n = int(groups.size());
  lv.min_head.resize(n), lv.parent.assign(n, -1), lv.feature.resize(size_t(n) * F), lv.size_frac.resize(n);
  for (int i = 0; i < n; i++) {
    lv.min_head[i] = groups[i].front();
    mean_rows(&lv.feature[size_t(i) * F], x, groups[i]);
    lv.size_frac[i] = double(groups[i].size()) / double(H);
  }
  return lv;
}

// Features and sizes of an upper level from its children at `below`: mean of children, |C_i| / n_below.
void fill_upper_features(HierLevel& lv, const HierLevel& below) {
  const int n = lv.size();
  lv.feature.resize(size_t(n) * F), lv.size_frac.resize(n);
  for (int i = 0; i < n; i++) {
    mean_rows(&lv.feature[size_t(i) * F], below.feature.data(), lv.members[i]);
    lv.size_frac[i] = double(lv.members[i].size()) / double(below.size());
  }
}

// Orders a pair by the smaller head index it covers (the sibling order a, b).
SiblingPair ordered_pair(const HierLevel& lv, int level, int i, int j) {
  return lv.min_head[i] < lv.min_head[j] ? SiblingPair{level, i, j} : SiblingPair{level, j, i};
}

}  // namespace

double hier_cosine(const double* a, const double* b, int n) {
  double dot = 0;
  for (int i = 0; i < n; i++) dot += a[i] * b[i];
  return dot / (std::max(norm(a, n), 1e-8) * std::max(norm(b, n), 1e-8));
}

double hier_sim_normdiff(const double* a, const double* b, int n, double lambda, double eps) {
  const double na = norm(a, n), nb = norm(b, n);
  return hier_cosine(a, b, n) - lambda * std::fabs(na - nb) / std::max({na, nb, eps});
}

void partition_sort(HeadPartition& groups) {
  for (auto& g : groups) std::sort(g.begin(), g.end());
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
}

// Spec 3, level 0, step 1.
HeadPartition level0_threshold_clusters(const double* x, int H, double tau) {
  HeadPartition groups;
  std::vector<double> centroids;  // (groups, F), mean of the members
  std::vector<double> c(F);
  for (int h = 0; h < H; h++) {
    const double* xh = x + size_t(h) * F;
    int best = -1;
    double best_sim = 0;
    for (int g = 0; g < int(groups.size()); g++) {
      const double s = hier_cosine(xh, &centroids[size_t(g) * F], F);
      if (best < 0 || s > best_sim) best = g, best_sim = s;  // strict: ties keep the earlier group
    }
    if (best >= 0 && best_sim >= tau) {
      groups[best].push_back(h);
      mean_rows(c.data(), x, groups[best]);
      std::copy(c.begin(), c.end(), centroids.begin() + size_t(best) * F);
    } else {
      groups.push_back({h});
      centroids.insert(centroids.end(), xh, xh + F);
    }
  }
  return groups;  // already ordered: groups open in head order
}

// Spec 3, level 0, step 2.
HeadPartition level0_forced_bipartition(const double* x, int H) {
  AAH_CHECK(H >= 2, "[controller] forced bipartition needs two heads");
  int a = 0, b = 1;
  double lowest = hier_cosine(x, x + F, F);
  for (int i = 0; i < H; i++)
    for (int j = i + 1; j < H; j++) {
      const double s = hier_cosine(x + size_t(i) * F, x + size_t(j) * F, F);
      if (s < lowest) lowest = s, a = i, b = j;  // strict: ties keep the lexicographically first pair
    }
  HeadPartition groups(2);
  for (int h = 0; h < H; h++) {
    if (h == a) {
      groups[0].push_back(h);
    } else if (h == b) {
      groups[1].push_back(h);
    } else {
      const double sa = hier_cosine(x + size_t(h) * F, x + size_t(a) * F, F);
      const double sb = hier_cosine(x + size_t(h) * F, x + size_t(b) * F, F);
      groups[sa >= sb ? 0 : 1].push_back(h);  // ties: a
    }
  }
  partition_sort(groups);
  return groups;
}

// Spec 3, level 0, step 3.
void level0_cap_groups(HeadPartition& groups, const double* x, int max_groups) {
  partition_sort(groups);
  std::vector<double> ci(F), cj(F);
  while (int(groups.size()) > std::max(1, max_groups)) {
    const int n = int(groups.size());
    std::vector<double> cent(size_t(n) * F);
    for (int g = 0; g < n; g++) mean_rows(&cent[size_t(g) * F], x, groups[g]);
    int bi = 0, bj = 1;
    double best = hier_cosine(&cent[0], &cent[F], F);
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) {
        const double s = hier_cosine(&cent[size_t(i) * F], &cent[size_t(j) * F], F);
        if (s > best) best = s, bi = i, bj = j;  // strict: ties keep the lexicographically first pair
      }
    groups[bi].insert(groups[bi].end(), groups[bj].begin(), groups[bj].end());
    std::sort(groups[bi].begin(), groups[bi].end());
    groups.erase(groups.begin() + bj);  // bi < bj keeps its smallest head, so the order stays sorted
  }
}

int level0_max_groups(const std::vector<int>& shape, int H) {
  int64_t p = 1;
  for (int s : shape) p = std::min<int64_t>(p * std::max(s, 1), int64_t(1) << 30);
  return int(std::min<int64_t>(p, H));
}

HeadPartition level0_partition(const double* x, int H, double tau, int max_groups) {
  HeadPartition groups = level0_threshold_clusters(x, H, tau);                 // step 1
  if (groups.size() == 1 && H >= 2) groups = level0_forced_bipartition(x, H);  // step 2
  level0_cap_groups(groups, x, max_groups);                                    // step 3
  return groups;                                                               // step 4: ordered by smallest head
}

HeadPartition level0_singletons(int H) {
  HeadPartition groups(H);
  for (int h = 0; h < H; h++) groups[h] = {h};
  return groups;
}

HeadPartition level0_random_partition(int H, int max_groups, uint64_t seed) {
  Rng rng(seed);
  const int G = std::max(1, std::min(max_groups, H));
  HeadPartition groups;
  for (;;) {
    HeadPartition by_label(G);
    for (int h = 0; h < H; h++) by_label[rng.below(G)].push_back(h);
    groups.clear();
    for (auto& g : by_label)
      if (!g.empty()) groups.push_back(std::move(g));
    if (groups.size() >= 2 || H < 2 || G < 2) break;
  }
  partition_sort(groups);
  return groups;
}

std::vector<std::pair<int, int>> hier_greedy_pairs(const double* g, int n, double lambda, double eps) {
  struct Cand {
    double sim;
    int i, j;
  };
  std::vector<Cand> cands;
  cands.reserve(size_t(n) * (n - 1) / 2);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      cands.push_back({hier_sim_normdiff(g + size_t(i) * F, g + size_t(j) * F, F, lambda, eps), i, j});
  // Most similar first; ties: lowest (i, j). (NaN similarities, from non-finite features, sort last.)
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    const bool an = std::isnan(a.sim), bn = std::isnan(b.sim);
    if (an != bn) return bn;
    return !an && a.sim > b.sim;
  });
  std::vector<char> used(n, 0);
  std::vector<std::pair<int, int>> pairs;
  for (const Cand& c : cands) {
    if (used[c.i] || used[c.j]) continue;
    used[c.i] = used[c.j] = 1;
    pairs.push_back({c.i, c.j});
  }
  return pairs;
}

Hierarchy hierarchy_build(const HeadPartition& level0, const double* x, int H, const std::vector<int>& shape,
                          double lambda, double eps) {
  AAH_CHECK(!level0.empty() && H > 0);
  Hierarchy hier;
  hier.H = H;
  hier.levels.push_back(make_level0(level0, x, H));
  // Upper levels: while the current level has more than 2 items and fewer than len(shape) levels exist.
  while (hier.levels.back().size() > 2 && hier.levels.size() < shape.size()) {
    const int r = int(hier.levels.size()) - 1;
    AAH_CHECK(shape[r] == 2, "[controller] hierarchy branching factor must be 2, shape entry is ", shape[r]);
    HierLevel& below = hier.levels[r];
    const auto pairs = hier_greedy_pairs(below.feature.data(), below.size(), lambda, eps);
    HierLevel up;
    std::vector<char> joined(below.size(), 0);
    for (auto [i, j] : pairs) {
      joined[i] = joined[j] = 1;
      up.members.push_back(below.min_head[i] < below.min_head[j] ? std::vector<int>{i, j} : std::vector<int>{j, i});
    }
    for (int i = 0; i < below.size(); i++)
      if (!joined[i]) up.members.push_back({i});  // an odd item gets a parent of its own
    std::sort(up.members.begin(), up.members.end(),
              [&](const auto& a, const auto& b) { return below.min_head[a[0]] < below.min_head[b[0]]; });
    const int n = int(up.members.size());
    up.min_head.resize(n), up.parent.assign(n, -1);
    for (int p = 0; p < n; p++) {
      up.min_head[p] = below.min_head[up.members[p][0]];
      for (int c : up.members[p]) below.parent[c] = p;
    }
    fill_upper_features(up, below);
    hier.levels.push_back(std::move(up));
  }
  // Siblings: children of two-child parents, level by level.
  const int R = int(hier.levels.size());
  for (int r = 1; r < R; r++)
    for (const auto& ch : hier.levels[r].members)
      if (ch.size() == 2) hier.pairs.push_back(ordered_pair(hier.levels[r - 1], r - 1, ch[0], ch[1]));
  // Top level: exactly two items are a pair; more are paired greedily by sim; an item left alone is scored alone.
  const HierLevel& top = hier.levels.back();
  if (top.size() == 2) {
    hier.pairs.push_back(ordered_pair(top, R - 1, 0, 1));
  } else if (top.size() > 2) {
    for (auto [i, j] : hier_greedy_pairs(top.feature.data(), top.size(), lambda, eps))
      hier.pairs.push_back(ordered_pair(top, R - 1, i, j));
  }
  hier.group_of_head.assign(H, -1);
  for (int g = 0; g < hier.levels[0].size(); g++)
    for (int h : hier.levels[0].members[g]) hier.group_of_head[h] = g;
  for (int h = 0; h < H; h++) AAH_CHECK(hier.group_of_head[h] >= 0, "[controller] head ", h, " is in no group");
  return hier;
}

void hierarchy_update_features(Hierarchy& hier, const double* x) {
  HierLevel& l0 = hier.levels[0];
  for (int i = 0; i < l0.size(); i++) {
    mean_rows(&l0.feature[size_t(i) * F], x, l0.members[i]);
    l0.size_frac[i] = double(l0.members[i].size()) / double(hier.H);
  }
  for (size_t r = 1; r < hier.levels.size(); r++) fill_upper_features(hier.levels[r], hier.levels[r - 1]);
}

HeadPartition hierarchy_level0(const Hierarchy& hier) { return hier.levels.at(0).members; }

}  // namespace aah
