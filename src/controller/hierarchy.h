// AAH-v3 hierarchy over the heads of one attention layer (spec section 3).
//
//   level 0     head groups: cosine centroid-threshold clustering, forced bipartition fallback, L0 cap
//   levels 1..  cosine_normdiff greedy pairing of the level below (branching factor 2)
//   siblings    two children of one parent, and the top level's pairs
//
// H heads, F = 9 features per head (smoothed), n_r items at level r. Items at every level are ordered by the
// smallest head index they cover, so "lowest index" tie rules and sibling order are the same everywhere.
#pragma once
#include <cstdint>
#include <vector>

#include "controller/features.h"

namespace aah {

// A partition of heads into groups: each group's heads ascending, groups ordered by their smallest head.
using HeadPartition = std::vector<std::vector<int>>;

struct HierLevel {
  // level 0: the heads of each group; level r > 0: the child items (indices into level r-1), smaller head first.
  std::vector<std::vector<int>> members;
  std::vector<int> min_head;      // (n_r) smallest head index under each item; items are sorted by it
  std::vector<int> parent;        // (n_r) parent item at level r+1, -1 at the top level
  std::vector<double> feature;    // (n_r, F) g_i(r)
  std::vector<double> size_frac;  // (n_r) s_i(r): heads in group / H at level 0; children / n_{r-1} above
  int size() const { return int(min_head.size()); }
};

// Ordered sibling pair (a, b) at one level: a is the item holding the smaller head index.
struct SiblingPair {
  int level, a, b;
};

struct Hierarchy {
  int H = 0;
  std::vector<HierLevel> levels;   // levels[0] head groups ... levels.back() the top level
  std::vector<SiblingPair> pairs;  // every sibling pair, by level, then in the order they were formed
  std::vector<int> group_of_head;  // (H) level-0 item of each head
  int levels_used() const { return int(levels.size()); }
};

// ---- similarities ----
// cos(a, b) = a.b / (max(|a|, 1e-8) max(|b|, 1e-8)) (PyTorch's per-norm epsilon; zero vectors have cosine 0).
double hier_cosine(const double* a, const double* b, int n);
// Spec section 3, upper levels: cos(a, b) - lambda * | |a| - |b| | / max(|a|, |b|, eps).
double hier_sim_normdiff(const double* a, const double* b, int n, double lambda, double eps);

// ---- level 0 (spec section 3, level 0, steps 1-4) ----
// Step 1: heads in index order join the existing group whose centroid (mean of its members) is most cosine-similar
// (ties: the earlier group) if that similarity >= tau, else open a new group. Centroids update as members join.
HeadPartition level0_threshold_clusters(const double* x /*(H, F)*/, int H, double tau);
// Step 2: anchors a < b = the least cosine-similar pair (ties: lowest (a, b) lexicographically); every other head
// joins the anchor it is more similar to (ties: a). Needs H >= 2.
HeadPartition level0_forced_bipartition(const double* x, int H);
// Step 3: while there are more than max_groups groups, merge the two groups whose centroids are most
// cosine-similar (ties: lowest (i, j) in group order, i < j); centroids are recomputed from the members.
void level0_cap_groups(HeadPartition& groups, const double* x, int max_groups);
// L0max = min(product(shape), H).
int level0_max_groups(const std::vector<int>& shape, int H);
// Steps 1-3 in order: clusters, fallback when they collapse to one group (H >= 2), cap.
HeadPartition level0_partition(const double* x, int H, double tau, int max_groups);
// Every head its own group (grouping off).
HeadPartition level0_singletons(int H);
// Seeded random partition (fixed_random_grouping): each head, in index order, draws a label rng.below(max_groups)
// from Rng(seed); empty labels are dropped; if H >= 2 and max_groups >= 2 and all heads drew one label, all labels
// are drawn again (same stream) until there are at least two groups. Groups ordered by smallest head.
HeadPartition level0_random_partition(int H, int max_groups, uint64_t seed);
// Sorts heads inside each group and the groups by their smallest head.
void partition_sort(HeadPartition& groups);

// ---- upper levels (spec section 3, upper levels) ----
// Greedy pairing of n items with features g (n, F) under hier_sim_normdiff: repeatedly join the most similar pair
// of not-yet-joined items; ties: lowest (i, j) lexicographically, i < j. Returns the pairs in the order formed
// (each with i < j); with n odd one item is left out.
std::vector<std::pair<int, int>> hier_greedy_pairs(const double* g, int n, double lambda, double eps);

// Builds the whole hierarchy from a level-0 partition and the smoothed head features x (H, F):
// level-0 features and sizes; while the current level has more than 2 items and fewer than shape.size() levels
// exist, a new level from greedy pairs (an odd item left over gets a parent of its own); the sibling pairs
// (children of two-child parents; at the top level, the two items if exactly two, else greedy pairs by sim).
Hierarchy hierarchy_build(const HeadPartition& level0, const double* x, int H, const std::vector<int>& shape,
                          double lambda, double eps);
// Frozen topology: recomputes every g_i(r) and s_i(r) from the current x, keeping items, parents and pairs.
void hierarchy_update_features(Hierarchy& hier, const double* x);
// The level-0 partition of a hierarchy.
HeadPartition hierarchy_level0(const Hierarchy& hier);

}  // namespace aah
