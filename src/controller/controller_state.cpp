// Controller state: save and load, all or nothing, with errors naming the tensor (layout below). See controller.h.
#include "controller/controller.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "formats/safetensors.h"

namespace aah {

namespace {
constexpr int F = kControllerFeatures;
}  // namespace

// Per layer, under P = prefix + "layers.{l}.":
//   P base.fc1.weight (64, 29) F32     P base.fc1.bias (64) F32     P base.fc2.weight (K, 64)   P base.fc2.bias (K)
//   P joint.fc1.weight (256, 116) F32  P joint.fc1.bias (256)       P joint.fc2.weight (2K, 256) P joint.fc2.bias (2K)
//   P feature_ema (H, 9) F64           smoothed features
//   P resolution_ema (H) I32           ctilde_h
//   P windows (H) I32                  windows in force
//   P state (4) I32                    [feature_ema initialised, topology cached, updates done, levels of the last
//                                       hierarchy R (0 before any)]
//   P level0_groups (H) I32            level-0 group of each head in the last hierarchy (-1 before any)
//   P topology (n) I32                 the last hierarchy's structure: [R, P, n_0 .. n_{R-1},
//                                       parent of each item of levels 0 .. R-2, P triples (level, a, b)];
//                                       [0, 0] before any. Level 0's members come from level0_groups.
//   P level0_cache_step (1) I32        topology reuse_level0 only: the step whose level 0 is cached (-1 before).
//                                       Absent (a checkpoint written before it existed): the first update step at
//                                       or after aah.reuse_cache_step when cached, -1 when not.
namespace {

void save_linear(SafetensorsWriter& w, const std::string& name, const Linear& lin) {
  w.add_f32(name + ".weight", lin.weight.data(), {lin.out, lin.in});
  w.add_f32(name + ".bias", lin.bias.data(), {lin.out});
}

void load_linear(const SafetensorsReader& r, const std::string& name, Linear& lin) {
  r.read_f32(name + ".weight", lin.weight.data(), {lin.out, lin.in});
  r.read_f32(name + ".bias", lin.bias.data(), {lin.out});
}

std::vector<int32_t> read_i32_vector(const SafetensorsReader& r, const std::string& name) {
  const SafetensorsTensor& t = r.tensor(name);
  if (t.shape.size() != 1) fail("[controller] ", r.path(), ": tensor '", name, "' must be one-dimensional");
  std::vector<int32_t> v(size_t(t.shape[0]));
  r.read_raw(name, "I32", v.data(), {t.shape[0]});
  return v;
}

}  // namespace

void LayerController::save(SafetensorsWriter& w, const std::string& prefix) const {
  static_assert(sizeof(int) == sizeof(int32_t));
  const std::string P = prefix + "layers." + std::to_string(layer_) + ".";
  save_linear(w, P + "base.fc1", scorers_.base.fc1);
  save_linear(w, P + "base.fc2", scorers_.base.fc2);
  save_linear(w, P + "joint.fc1", scorers_.joint.fc1);
  save_linear(w, P + "joint.fc2", scorers_.joint.fc2);
  w.add_raw(P + "feature_ema", "F64", xbar_.data(), xbar_.size() * sizeof(double), {H_, F});
  w.add_raw(P + "resolution_ema", "I32", ctilde_.data(), ctilde_.size() * 4, {H_});
  w.add_raw(P + "windows", "I32", windows_.data(), windows_.size() * 4, {H_});
  const int R = hier_.levels_used();
  save_state_ = {xbar_init_ ? 1 : 0, topo_cached_ ? 1 : 0, updates_, R};
  w.add_raw(P + "state", "I32", save_state_.data(), save_state_.size() * 4, {int64_t(save_state_.size())});
  save_groups_.assign(H_, -1);
  if (R > 0) save_groups_.assign(hier_.group_of_head.begin(), hier_.group_of_head.end());
  w.add_raw(P + "level0_groups", "I32", save_groups_.data(), save_groups_.size() * 4, {H_});
  save_topology_ = {R, int32_t(hier_.pairs.size())};
  for (int r = 0; r < R; r++) save_topology_.push_back(hier_.levels[r].size());
  for (int r = 0; r + 1 < R; r++)
    save_topology_.insert(save_topology_.end(), hier_.levels[r].parent.begin(), hier_.levels[r].parent.end());
  for (const SiblingPair& p : hier_.pairs) save_topology_.insert(save_topology_.end(), {p.level, p.a, p.b});
  w.add_raw(P + "topology", "I32", save_topology_.data(), save_topology_.size() * 4,
            {int64_t(save_topology_.size())});
  if (cfg_.topology == TopologyMode::reuse_level0) {
    save_cache_step_ = {cache_step_};
    w.add_raw(P + "level0_cache_step", "I32", save_cache_step_.data(), 4, {1});
  }
}

void LayerController::load(const SafetensorsReader& rd, const std::string& prefix) {
  const std::string P = prefix + "layers." + std::to_string(layer_) + ".";
  Scorers sc = scorers_;
  load_linear(rd, P + "base.fc1", sc.base.fc1);
  load_linear(rd, P + "base.fc2", sc.base.fc2);
  load_linear(rd, P + "joint.fc1", sc.joint.fc1);
  load_linear(rd, P + "joint.fc2", sc.joint.fc2);
  std::vector<double> xbar(size_t(H_) * F);
  rd.read_raw(P + "feature_ema", "F64", xbar.data(), {H_, F});
  std::vector<int> ctilde(H_), windows(H_), groups(H_);
  rd.read_raw(P + "resolution_ema", "I32", ctilde.data(), {H_});
  rd.read_raw(P + "windows", "I32", windows.data(), {H_});
  std::vector<int32_t> state(4);
  rd.read_raw(P + "state", "I32", state.data(), {4});
  rd.read_raw(P + "level0_groups", "I32", groups.data(), {H_});
  const std::vector<int32_t> topo = read_i32_vector(rd, P + "topology");
  int32_t cache_step = -1;
  const bool reuse = cfg_.topology == TopologyMode::reuse_level0;
  if (reuse && rd.has(P + "level0_cache_step")) {
    rd.read_raw(P + "level0_cache_step", "I32", &cache_step, {1});
  } else if (reuse && state[1]) {
    const int n = cfg_.control_interval;
    cache_step = int32_t((int64_t(cfg_.reuse_cache_step) + n - 1) / n * n);
  }

  auto bad = [&](const std::string& name, const std::string& what) {
    fail("[controller] ", rd.path(), ": tensor '", P, name, "' ", what);
  };
  for (int h = 0; h < H_; h++) {
    if (ctilde[h] < 0 || ctilde[h] >= K_) bad("resolution_ema", str_cat("holds index ", ctilde[h], " outside [0, ", K_ - 1, "]"));
    if (windows[h] < 1) bad("windows", str_cat("holds window ", windows[h]));
  }
  // Rebuild the hierarchy's structure (features follow at the next update).
  Hierarchy hier;
  hier.H = H_;
  size_t pos = 0;
  auto next = [&]() -> int {
    if (pos >= topo.size()) bad("topology", "is truncated");
    return topo[pos++];
  };
  const int R = next(), npairs = next();
  if (R < 0 || R > 64 || npairs < 0 || npairs > 4 * H_) bad("topology", "has a malformed header");
  if (R != state[3]) bad("topology", str_cat("has ", R, " levels, state says ", state[3]));
  if (R > 0) {
    std::vector<int> n(R);
    for (int r = 0; r < R; r++) {
      n[r] = next();
      if (n[r] < 1 || n[r] > H_ || (r > 0 && n[r] > n[r - 1])) bad("topology", "has a malformed level size");
    }
    hier.levels.resize(R);
    // Level 0 from the head groups.
    HierLevel& l0 = hier.levels[0];
    l0.members.resize(n[0]);
    for (int h = 0; h < H_; h++) {
      if (groups[h] < 0 || groups[h] >= n[0]) bad("level0_groups", str_cat("puts head ", h, " in group ", groups[h]));
      l0.members[groups[h]].push_back(h);
    }
    for (int r = 0; r < R; r++) {
      HierLevel& lv = hier.levels[r];
      if (r > 0) lv.members.resize(n[r]);
      lv.parent.assign(n[r], -1);
      if (r + 1 < R)
        for (int i = 0; i < n[r]; i++) {
          lv.parent[i] = next();
          if (lv.parent[i] < 0 || lv.parent[i] >= n[r + 1]) bad("topology", "has a parent index out of range");
        }
    }
    for (int r = 0; r < R; r++) {
      HierLevel& lv = hier.levels[r];
      if (r > 0)
        for (int c = 0; c < n[r - 1]; c++) lv.members[hier.levels[r - 1].parent[c]].push_back(c);
      lv.min_head.resize(n[r]);
      for (int i = 0; i < n[r]; i++) {
        if (lv.members[i].empty()) bad("topology", str_cat("has an empty item at level ", r));
        lv.min_head[i] = r == 0 ? lv.members[i][0] : hier.levels[r - 1].min_head[lv.members[i][0]];
        if (i > 0 && lv.min_head[i] <= lv.min_head[i - 1]) bad("topology", "has items out of order");
      }
      lv.feature.assign(size_t(n[r]) * F, 0.0);
      lv.size_frac.assign(n[r], 0.0);
    }
    for (int p = 0; p < npairs; p++) {
      const int level = next(), a = next(), b = next();
      if (level < 0 || level >= R || a < 0 || b < 0 || a >= n[level] || b >= n[level] || a == b)
        bad("topology", "has a malformed sibling pair");
      hier.pairs.push_back({level, a, b});
    }
    hier.group_of_head.assign(groups.begin(), groups.end());
  } else if (state[1]) {
    bad("state", "says the topology is cached but there is none");
  }
  if (reuse && (cache_step < -1 || (cache_step >= 0) != (state[1] != 0)))
    bad("level0_cache_step", str_cat("holds ", cache_step, " but the state says level 0 is ", state[1] ? "" : "not ",
                                     "cached"));
  if (pos != topo.size()) bad("topology", "has trailing entries");

  scorers_ = std::move(sc);
  xbar_ = std::move(xbar);
  ctilde_ = std::move(ctilde);
  windows_ = std::move(windows);
  xbar_init_ = state[0] != 0;
  topo_cached_ = state[1] != 0;
  cache_step_ = cache_step;
  updates_ = state[2];
  hier_ = std::move(hier);
  if (R > 0) hierarchy_update_features(hier_, xbar_.data());  // the trace and stats see sensible features
}

void Controller::save(SafetensorsWriter& w, const std::string& prefix) const {
  save_dims_ = {int32_t(layers_.size()), H_};
  save_windows_.assign(cfg_.windows.begin(), cfg_.windows.end());
  w.add_raw(prefix + "controller.dims", "I32", save_dims_.data(), 8, {2});
  w.add_raw(prefix + "controller.candidate_windows", "I32", save_windows_.data(), save_windows_.size() * 4,
            {int64_t(save_windows_.size())});
  for (const auto& lc : layers_) lc.save(w, prefix);
  if (needs_copy_use()) {  // policy copy: the evidence and how many updates it holds, for an exact resume
    copy_evidence_.resize(size_t(layers_.size()) * H_ * cfg_.windows.size(), 0.0);
    save_copy_measured_ = copy_measured_;
    w.add_raw(prefix + "controller.copy_evidence", "F64", copy_evidence_.data(), copy_evidence_.size() * 8,
              {int64_t(layers_.size()), H_, int64_t(cfg_.windows.size())});
    w.add_raw(prefix + "controller.copy_measured", "I32", &save_copy_measured_, 4, {1});
    if (!copy_rows_.weight.empty()) {  // aah.copy_count=once: the rows held (the weights follow from the ages)
      w.add_raw(prefix + "controller.copy_rows", "F32", copy_rows_.use.data(), copy_rows_.use.size() * 4,
                {int64_t(copy_rows_.size()), int64_t(copy_rows_.N), int64_t(copy_rows_.K)});
      w.add_raw(prefix + "controller.copy_row_age", "I32", copy_row_age_.data(), copy_row_age_.size() * 4,
                {int64_t(copy_row_age_.size())});
    }
  }
}

void Controller::load(const SafetensorsReader& r, const std::string& prefix) {
  std::vector<int32_t> dims(2);
  r.read_raw(prefix + "controller.dims", "I32", dims.data(), {2});
  if (dims[0] != num_layers() || dims[1] != H_)
    fail("[controller] ", r.path(), ": tensor '", prefix, "controller.dims' says ", dims[0], " layers x ", dims[1],
         " heads, the model has ", num_layers(), " x ", H_);
  const std::vector<int32_t> w = read_i32_vector(r, prefix + "controller.candidate_windows");
  if (!std::equal(w.begin(), w.end(), cfg_.windows.begin(), cfg_.windows.end())) {
    nlohmann::json a = w, b = cfg_.windows;
    fail("[controller] ", r.path(), ": tensor '", prefix, "controller.candidate_windows' is ", a.dump(),
         ", the configuration says ", b.dump());
  }
  std::vector<LayerController> loaded = layers_;  // all or nothing: a bad layer leaves this controller unchanged
  for (auto& lc : loaded) lc.load(r, prefix);
  std::vector<double> evidence(size_t(layers_.size()) * H_ * cfg_.windows.size());
  int32_t measured = 0;
  if (needs_copy_use()) {
    r.read_raw(prefix + "controller.copy_evidence", "F64", evidence.data(),
               {int64_t(layers_.size()), H_, int64_t(cfg_.windows.size())});
    r.read_raw(prefix + "controller.copy_measured", "I32", &measured, {1});
    if (measured < 0) fail("[controller] ", r.path(), ": tensor '", prefix, "controller.copy_measured' is negative");
    for (double e : evidence)
      if (!std::isfinite(e)) fail("[controller] ", r.path(), ": tensor '", prefix, "controller.copy_evidence' is not finite");
  }
  CopyRows rows;
  std::vector<int32_t> ages;
  if (needs_copy_queries() && r.has(prefix + "controller.copy_rows")) {
    const std::string name = prefix + "controller.copy_rows";
    const int64_t N = int64_t(layers_.size()) * H_, K = int64_t(cfg_.windows.size());
    const SafetensorsTensor& t = r.tensor(name);
    if (t.shape.size() != 3 || t.shape[1] != N || t.shape[2] != K || t.shape[0] < 0 || t.shape[0] > (1 << 24))
      fail("[controller] ", r.path(), ": tensor '", name, "' must have shape (rows, ", N, ", ", K, ")");
    rows.N = int(N), rows.K = int(K);
    rows.use.resize(size_t(t.shape[0] * N * K));
    r.read_raw(name, "F32", rows.use.data(), {t.shape[0], N, K});
    ages = read_i32_vector(r, prefix + "controller.copy_row_age");
    if (int64_t(ages.size()) != t.shape[0])
      fail("[controller] ", r.path(), ": tensor '", prefix, "controller.copy_row_age' has ", ages.size(),
           " entries for ", t.shape[0], " rows");
    for (const float u : rows.use)
      if (!std::isfinite(u) || u < 0) fail("[controller] ", r.path(), ": tensor '", name, "' holds ", u, " (use >= 0)");
    for (const int32_t a : ages) {
      if (a < 0) fail("[controller] ", r.path(), ": tensor '", prefix, "controller.copy_row_age' is negative");
      rows.weight.push_back(float(std::pow(cfg_.copy_decay, a)));
    }
  }
  layers_ = std::move(loaded);
  copy_evidence_ = std::move(evidence), copy_measured_ = measured;
  copy_rows_ = std::move(rows), copy_row_age_ = std::move(ages);
}

}  // namespace aah
