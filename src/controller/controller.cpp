// AAH-v3 controller (spec sections 2-5 and 7): the decision steps, one layer's update, and the statistics. See
// controller.h; the configuration and regimes are in controller_config.cpp, save/load in controller_state.cpp.
#include "controller/controller.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "controller/copy_use.h"
#include "controller/coverage.h"
#include "core/check.h"
#include "core/rng.h"
#include "kernels/attention_common.h"

namespace aah {

namespace {
constexpr int F = kControllerFeatures;
}  // namespace

// ============================================================================================================
// Decision steps (spec section 5)
// ============================================================================================================

uint64_t controller_stream_seed(uint64_t run_seed, uint64_t stream, uint64_t layer, uint64_t step) {
  uint64_t x = run_seed;
  uint64_t h = splitmix64(x);
  x = h ^ stream, h = splitmix64(x);
  x = h ^ layer, h = splitmix64(x);
  x = h ^ step;
  return splitmix64(x);
}

int argmax_first(const double* z, int K) {
  int best = 0;
  for (int k = 1; k < K; k++)
    if (z[k] > z[best]) best = k;  // strict: ties keep the smaller k
  return best;
}

double round_half_even(double x) {
  const double f = std::floor(x);
  const double d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

int resolution_ema_step(int prev, int c, double beta, int K) {
  const double v = round_half_even(beta * double(prev) + (1.0 - beta) * double(c));
  return int(std::clamp(v, 0.0, double(K - 1)));
}

int execution_window(const std::vector<int>& windows, int idx) {
  const int K = int(windows.size());
  const int w = windows[std::clamp(idx, 0, K - 1)];
  return std::clamp(w, windows.front(), windows.back());  // clamp(W[idx], W_min = W_0, T)
}

int ramp_index(int c, int K, int step, int warmup_steps, int ramp_steps) {
  if (ramp_steps <= 0) return c;
  const double p = std::clamp(double(step - warmup_steps) / double(ramp_steps), 0.0, 1.0);
  const double full = double(K - 1);
  return int(std::clamp(round_half_even(full - p * (full - double(c))), 0.0, full));
}

ControllerDecision controller_decide(const Hierarchy& hier, const Scorers& sc, bool joint_scorer,
                                     bool parent_clamp) {
  const int R = hier.levels_used(), K = sc.K;
  constexpr int E = kEnrichedInputs;
  ControllerDecision d;
  d.enriched.resize(R), d.logits_base.resize(R), d.logits.resize(R), d.raw.resize(R), d.choice.resize(R);
  std::vector<double> hidden(std::max(kBaseHidden, kJointHidden));
  // Spec 4: enriched inputs and base logits of every item at every level.
  for (int r = 0; r < R; r++) {
    const int n = hier.levels[r].size();
    d.enriched[r].resize(size_t(n) * E), d.logits_base[r].resize(size_t(n) * K);
    for (int i = 0; i < n; i++) {
      enriched_input(&d.enriched[r][size_t(i) * E], hier, r, i);
      mlp_forward(&d.logits_base[r][size_t(i) * K], sc.base, &d.enriched[r][size_t(i) * E], hidden.data());
    }
    d.logits[r] = d.logits_base[r];
  }
  // Spec 4: joint sibling logits replace the base logits of both siblings (row 0 -> a, row 1 -> b).
  if (joint_scorer) {
    std::vector<double> j(kJointInputs);
    for (const SiblingPair& p : hier.pairs) {
      std::vector<double> z(size_t(2) * K);
      joint_input(j.data(), &d.enriched[p.level][size_t(p.a) * E], &d.enriched[p.level][size_t(p.b) * E]);
      mlp_forward(z.data(), sc.joint, j.data(), hidden.data());
      std::copy(z.begin(), z.begin() + K, d.logits[p.level].begin() + size_t(p.a) * K);
      std::copy(z.begin() + K, z.end(), d.logits[p.level].begin() + size_t(p.b) * K);
      d.logits_joint.push_back(std::move(z));
    }
  }
  // Spec 5.1: raw choices.
  for (int r = 0; r < R; r++) {
    const int n = hier.levels[r].size();
    d.raw[r].resize(n);
    for (int i = 0; i < n; i++) d.raw[r][i] = argmax_first(&d.logits[r][size_t(i) * K], K);
  }
  // Spec 5.2: top-down parent clamp; the top level uses its raw choices.
  for (int r = R - 1; r >= 0; r--) {
    const HierLevel& lv = hier.levels[r];
    d.choice[r] = d.raw[r];
    if (!parent_clamp || r == R - 1) continue;
    for (int i = 0; i < lv.size(); i++)
      if (lv.parent[i] >= 0) d.choice[r][i] = std::min(d.raw[r][i], d.choice[r + 1][lv.parent[i]]);
  }
  // Spec 5.3: head mapping from level 0.
  d.head.resize(hier.H);
  for (int h = 0; h < hier.H; h++) d.head[h] = d.choice[0][hier.group_of_head[h]];
  return d;
}

// ============================================================================================================
// LayerController
// ============================================================================================================

LayerController::LayerController(const ControllerConfig& cfg, int num_heads, int layer)
    : cfg_(cfg), H_(num_heads), K_(int(cfg.windows.size())), layer_(layer) {
  controller_validate(cfg_);
  AAH_CHECK(H_ >= 1 && layer_ >= 0);
  scorers_ = scorers_init(K_, controller_stream_seed(cfg_.seed, kSeedStreamScorer, uint64_t(layer_), 0));
  xbar_.assign(size_t(H_) * F, 0.0);
  ctilde_.assign(H_, K_ - 1);  // spec 5.5: initialised to the full window
  windows_.assign(H_, execution_window(cfg_.windows, K_ - 1));
  // Windows of the step-independent policies are known before any update.
  if (cfg_.policy == WindowPolicy::fixed || cfg_.policy == WindowPolicy::deterministic) set_policy_windows(0);
}

// Windows of the non-controller policies (spec section 7).
void LayerController::set_policy_windows(int step) {
  const int T = cfg_.windows.back();
  switch (cfg_.policy) {
    case WindowPolicy::controller:
    case WindowPolicy::coverage:
    case WindowPolicy::copy:
    case WindowPolicy::oracle: break;  // oracle: full until Controller::set_model_windows
    case WindowPolicy::off: windows_.assign(H_, T); break;
    case WindowPolicy::fixed: windows_.assign(H_, std::clamp(cfg_.fixed_window, 1, T)); break;
    case WindowPolicy::deterministic:
      for (int h = 0; h < H_; h++) windows_[h] = execution_window(cfg_.windows, h % K_);
      break;
    case WindowPolicy::random: {
      Rng rng(controller_stream_seed(cfg_.seed, kSeedStreamRandomWindow, uint64_t(layer_), uint64_t(step)));
      for (int h = 0; h < H_; h++) windows_[h] = execution_window(cfg_.windows, int(rng.below(uint64_t(K_))));
      break;
    }
  }
}

// Spec 7, shuffle_post_select: Fisher-Yates from the top (i = H-1 .. 1 swaps perm[i] with perm[rng.below(i+1)]),
// then head h takes the window of head perm[h].
void LayerController::shuffle_windows(int step, nlohmann::json* trace) {
  Rng rng(controller_stream_seed(cfg_.seed, kSeedStreamShuffle, uint64_t(layer_), uint64_t(step)));
  std::vector<int> perm(H_);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = H_ - 1; i >= 1; i--) std::swap(perm[i], perm[rng.below(uint64_t(i) + 1)]);
  const std::vector<int> before = windows_;
  for (int h = 0; h < H_; h++) windows_[h] = before[perm[h]];
  if (trace) (*trace)["windows_before_shuffle"] = before, (*trace)["shuffle_permutation"] = perm;
}

// Spec 3 under the regime's topology mode (spec 7), from the smoothed features xbar_.
void LayerController::build_topology(int step) {
  if (!cfg_.grouping) {  // grouping_off: every head its own level-0 item, no upper levels, no siblings
    hier_ = hierarchy_build(level0_singletons(H_), xbar_.data(), H_, {1}, cfg_.lambda, cfg_.eps);
    hier_.pairs.clear();
    return;
  }
  const int max_groups = level0_max_groups(cfg_.shape, H_);
  switch (cfg_.topology) {
    case TopologyMode::recompute:
      hier_ = hierarchy_build(level0_partition(xbar_.data(), H_, cfg_.tau, max_groups), xbar_.data(), H_,
                              cfg_.shape, cfg_.lambda, cfg_.eps);
      break;
    case TopologyMode::freeze:
      if (topo_cached_) {
        hierarchy_update_features(hier_, xbar_.data());
      } else {
        hier_ = hierarchy_build(level0_partition(xbar_.data(), H_, cfg_.tau, max_groups), xbar_.data(), H_,
                                cfg_.shape, cfg_.lambda, cfg_.eps);
        topo_cached_ = true;
      }
      break;
    case TopologyMode::reuse_level0:
    case TopologyMode::fixed_random: {
      HeadPartition l0;
      if (topo_cached_) {
        l0 = hierarchy_level0(hier_);
      } else if (cfg_.topology == TopologyMode::reuse_level0) {
        l0 = level0_partition(xbar_.data(), H_, cfg_.tau, max_groups);
      } else {
        l0 = level0_random_partition(
            H_, max_groups, controller_stream_seed(cfg_.seed, kSeedStreamRandomGrouping, uint64_t(layer_), 0));
      }
      hier_ = hierarchy_build(l0, xbar_.data(), H_, cfg_.shape, cfg_.lambda, cfg_.eps);
      // reuse_level0 recomputes level 0 at the updates before reuse_cache_step, then caches this update's.
      if (cfg_.topology == TopologyMode::reuse_level0 && !topo_cached_ && step >= cfg_.reuse_cache_step)
        cache_step_ = step;
      if (cfg_.topology == TopologyMode::fixed_random || step >= cfg_.reuse_cache_step) topo_cached_ = true;
      break;
    }
  }
}

namespace {

// Rows of a flat (n, cols) array as nested JSON arrays.
template <class T>
nlohmann::json rows_json(const std::vector<T>& flat, int cols) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t i = 0; i + cols <= flat.size(); i += cols)
    a.push_back(std::vector<T>(flat.begin() + i, flat.begin() + i + cols));
  return a;
}

}  // namespace

// Spec 5.4-5.6 from the head choices c (H), then shuffle_post_select (7); counts the update. Trace: head_choice,
// ramped_choice (with a ramp), resolution_prev, resolution, windows (and the shuffle's fields).
void LayerController::apply_choice(const std::vector<int>& c, int step, nlohmann::json* trace) {
  const std::vector<int> prev = ctilde_;
  std::vector<int> ramped(H_);
  for (int h = 0; h < H_; h++) {
    ramped[h] = ramp_index(c[h], K_, step, cfg_.warmup_steps, cfg_.ramp_steps);
    ctilde_[h] = resolution_ema_step(prev[h], ramped[h], cfg_.resolution_ema, K_);
    windows_[h] = execution_window(cfg_.windows, ctilde_[h]);
  }
  if (cfg_.shuffle_post_select) shuffle_windows(step, trace);
  updates_++;
  if (trace) {
    nlohmann::json& t = *trace;
    t["head_choice"] = c;
    if (cfg_.ramp_steps > 0) t["ramped_choice"] = ramped;
    t["resolution_prev"] = prev;
    t["resolution"] = ctilde_;
    t["windows"] = windows_;
  }
}

// Policy coverage (spec section 10): c_h = the smallest k with m_h(W_k) >= coverage, or the pair-budget choice.
// A measurement the policy does not read is a caller's mistake (it would be silently ignored): refused.
static void check_input_fields(const ControlInput& in, WindowPolicy policy) {
  const bool reads_features = policy == WindowPolicy::controller, reads_mass = policy == WindowPolicy::coverage,
             reads_use = policy == WindowPolicy::copy;
  AAH_CHECK((in.features == nullptr || reads_features) && (in.mass == nullptr || reads_mass) &&
                (in.use == nullptr || reads_use),
            "[controller] policy ", window_policy_name(policy), " was given a measurement it does not read");
}

const std::vector<int>& LayerController::update_coverage(const double* mass, int step, nlohmann::json* trace) {
  AAH_CHECK(mass != nullptr, "[controller] update needs the attention mass under policy coverage");
  for (size_t i = 0; i < size_t(H_) * K_; i++)
    if (!std::isfinite(mass[i])) {
      if (trace) (*trace)["skipped"] = "non-finite attention mass", (*trace)["windows"] = windows_;
      return windows_;
    }
  std::vector<int> c(H_);
  if (cfg_.pair_budget > 0) {
    c = coverage_budget_choice(mass, H_, cfg_.windows, cfg_.pair_budget);
  } else {
    for (int h = 0; h < H_; h++) c[h] = coverage_choice(mass + size_t(h) * K_, K_, cfg_.coverage);
  }
  if (trace) {
    (*trace)["mass"] = rows_json(std::vector<double>(mass, mass + size_t(H_) * K_), K_);
    (*trace)["coverage"] = cfg_.coverage;
    if (cfg_.pair_budget > 0) (*trace)["pair_budget"] = cfg_.pair_budget;
    if (cfg_.coverage_tail < 1) (*trace)["coverage_tail"] = cfg_.coverage_tail;  // what the mass was measured as
  }
  apply_choice(c, step, trace);
  return windows_;
}

// Trace of one update (when requested), one JSON object:
//   step, layer, regime, policy, windows_candidates
//   policy coverage: mass (H, K) m_h(W_k) as measured (full window, sampled sequences), coverage, pair_budget (when
//   > 0), coverage_tail (when < 1), head_choice (H) c_h, ramped_choice (with a ramp), resolution_prev, resolution,
//   windows (and the shuffle's fields); that is all
//   other policies != controller: windows (and shuffle fields); that is all
//   raw_features (H, 9), smoothed_features (H, 9), feature_ema_first (bool: EMA initialised by this observation)
//   topology: "recomputed" | "cached" | "level0_cached" (what this update did), levels_used
//   level0_cache_step (reuse_level0 only): the step whose level 0 is cached, null while level 0 is recomputed
//   level0_groups: [[heads]]
//   levels: per level r {level, eta, items (level 0: heads; above: child indices), min_head, parent, features
//           (n, 9), size_frac, enriched (n, 29), logits_base (n, K), logits (n, K, used), raw_choice, choice}
//   pairs: [{level, a, b, logits_joint: [[K] for a, [K] for b]}] (logits_joint only with the joint scorer on)
//   head_choice (H) c_h; ramped_choice (H, only with a ramp); resolution_prev (H); resolution (H) ctilde_h;
//   windows (H) in force; with shuffle_post_select also windows_before_shuffle and shuffle_permutation (H):
//   head h takes the window of head shuffle_permutation[h].
//   skipped: reason, when the update was skipped (non-finite features)
const std::vector<int>& LayerController::update(const ControlInput& input, int step, nlohmann::json* trace) {
  check_input_fields(input, cfg_.policy);
  const double* raw = input.features;
  if (trace) {
    *trace = {{"step", step}, {"layer", layer_}, {"regime", cfg_.regime},
              {"policy", window_policy_name(cfg_.policy)}, {"windows_candidates", cfg_.windows}};
  }
  if (cfg_.policy == WindowPolicy::coverage) return update_coverage(input.mass, step, trace);
  if (cfg_.policy != WindowPolicy::controller) {
    set_policy_windows(step);
    if (cfg_.shuffle_post_select) shuffle_windows(step, trace);
    if (trace) (*trace)["windows"] = windows_;
    updates_++;
    return windows_;
  }
  AAH_CHECK(raw != nullptr, "[controller] update needs features under policy controller");
  for (size_t i = 0; i < size_t(H_) * F; i++)
    if (!std::isfinite(raw[i])) {
      if (trace) (*trace)["skipped"] = "non-finite features", (*trace)["windows"] = windows_;
      return windows_;
    }
  // Spec 2: feature EMA, initialised to the first observation.
  const bool first = !xbar_init_;
  for (size_t i = 0; i < size_t(H_) * F; i++)
    xbar_[i] = first ? raw[i] : cfg_.feature_ema * xbar_[i] + (1.0 - cfg_.feature_ema) * raw[i];
  xbar_init_ = true;
  // Spec 3: hierarchy.
  const bool was_cached = topo_cached_;
  build_topology(step);
  // Spec 4, 5.1-5.3: scores, raw choices, parent clamp, head mapping.
  const ControllerDecision d = controller_decide(hier_, scorers_, cfg_.joint_scorer, cfg_.parent_clamp);
  // Spec 5.4-5.6: ramp, resolution EMA, execution windows (and 7: shuffle_post_select).
  apply_choice(d.head, step, trace);

  if (trace) {
    nlohmann::json& t = *trace;
    t["raw_features"] = rows_json(std::vector<double>(raw, raw + size_t(H_) * F), F);
    t["smoothed_features"] = rows_json(xbar_, F);
    t["feature_ema_first"] = first;
    const bool reused = cfg_.grouping && was_cached;
    t["topology"] = reused ? (cfg_.topology == TopologyMode::freeze ? "cached" : "level0_cached") : "recomputed";
    if (cfg_.topology == TopologyMode::reuse_level0 && cfg_.grouping)
      t["level0_cache_step"] = cache_step_ >= 0 ? nlohmann::json(cache_step_) : nlohmann::json(nullptr);
    t["levels_used"] = hier_.levels_used();
    t["level0_groups"] = hier_.levels[0].members;
    const int R = hier_.levels_used();
    nlohmann::json levels = nlohmann::json::array();
    for (int r = 0; r < R; r++) {
      const HierLevel& lv = hier_.levels[r];
      levels.push_back({{"level", r},
                        {"eta", double(r) / double(std::max(1, R - 1))},
                        {"items", lv.members},
                        {"min_head", lv.min_head},
                        {"parent", lv.parent},
                        {"features", rows_json(lv.feature, F)},
                        {"size_frac", lv.size_frac},
                        {"enriched", rows_json(d.enriched[r], kEnrichedInputs)},
                        {"logits_base", rows_json(d.logits_base[r], K_)},
                        {"logits", rows_json(d.logits[r], K_)},
                        {"raw_choice", d.raw[r]},
                        {"choice", d.choice[r]}});
    }
    t["levels"] = std::move(levels);
    nlohmann::json pairs = nlohmann::json::array();
    for (size_t p = 0; p < hier_.pairs.size(); p++) {
      const SiblingPair& sp = hier_.pairs[p];
      nlohmann::json o = {{"level", sp.level}, {"a", sp.a}, {"b", sp.b}};
      if (p < d.logits_joint.size()) o["logits_joint"] = rows_json(d.logits_joint[p], K_);
      pairs.push_back(std::move(o));
    }
    t["pairs"] = std::move(pairs);
    t["joint_scorer"] = cfg_.joint_scorer;
    t["parent_clamp"] = cfg_.parent_clamp;
  }
  return windows_;
}

// ============================================================================================================
// Controller
// ============================================================================================================

Controller::Controller(const ControllerConfig& cfg, int num_layers, int num_heads) : cfg_(cfg), H_(num_heads) {
  controller_validate(cfg_);
  AAH_CHECK(num_layers >= 0 && num_heads >= 1);
  layers_.reserve(num_layers);
  for (int l = 0; l < num_layers; l++) layers_.emplace_back(cfg_, num_heads, l);
}

bool Controller::is_update_step(int step) const {
  const bool changes = cfg_.policy == WindowPolicy::controller || cfg_.policy == WindowPolicy::coverage ||
                       cfg_.policy == WindowPolicy::copy ||
                       cfg_.policy == WindowPolicy::random ||
                       (cfg_.shuffle_post_select && cfg_.policy != WindowPolicy::off);
  if (!changes || step < 0 || step % cfg_.control_interval != 0) return false;
  if (cfg_.freeze_after_warmup && step != 0 && step >= cfg_.warmup_steps) return false;
  return true;
}

const std::vector<int>& Controller::update(int l, const ControlInput& input, int step, nlohmann::json* trace) {
  check_input_fields(input, cfg_.policy);
  if (!is_update_step(step)) return windows(l);
  if (cfg_.policy == WindowPolicy::copy) return update_copy(l, input.use, step, trace);
  return layers_.at(l).update(input, step, trace);
}

// Trace line (policy copy): step, layer, use (H, K) as measured, evidence (H, K) after it joined, budget, decay, and
// at layer 0 the decision: evidence_used (L, H, K: what the solver read) and choice (L, H); windows (H) in force.
const std::vector<int>& Controller::update_copy(int l, const double* use, int step, nlohmann::json* trace) {
  AAH_CHECK(use != nullptr, "[controller] update needs the copy use under policy copy");
  const int L = num_layers(), K = int(cfg_.windows.size());
  copy_evidence_.resize(size_t(L) * H_ * K, 0.0);
  if (trace) (*trace)["step"] = step, (*trace)["layer"] = l;
  if (l == 0 && copy_measured_ > 0) {  // no evidence yet (the first update): the windows stay as they are
    std::vector<double> read = copy_evidence_;
    std::vector<int> perm;
    if (cfg_.copy_shuffle) {  // the chance control: head h reads head perm[h]'s evidence (Fisher-Yates from the top)
      perm.resize(size_t(L) * H_);
      for (size_t h = 0; h < perm.size(); h++) perm[h] = int(h);
      Rng rng(controller_stream_seed(cfg_.seed, kSeedStreamCopyShuffle, 0, 0));
      for (size_t i = perm.size() - 1; i > 0; i--) std::swap(perm[i], perm[rng.below(i + 1)]);
      for (size_t h = 0; h < perm.size(); h++)
        std::copy_n(copy_evidence_.data() + size_t(perm[h]) * K, K, read.data() + h * K);
      if (trace) (*trace)["copy_permutation"] = perm;
    }
    std::vector<int> choice = copy_budget_choice(read.data(), L * H_, cfg_.windows, cfg_.pair_budget);
    if (cfg_.copy_count == CopyCount::once) {  // the per-head choice is where the once-search starts
      CopyRows rows = copy_rows_;
      if (cfg_.copy_shuffle) {  // the same permutation: head h reads head perm[h]'s column of every row
        for (size_t r = 0; r < rows.size(); r++)
          for (int h = 0; h < L * H_; h++)
            std::copy_n(copy_rows_.use.data() + (r * size_t(L) * H_ + size_t(perm[size_t(h)])) * K, K,
                        rows.use.data() + (r * size_t(L) * H_ + size_t(h)) * K);
      }
      const std::vector<int> per_head = choice;
      std::vector<int> previous;  // the windows in force as candidate indices (none when one is not a candidate)
      for (int m = 0; m < L; m++)
        for (const int w : layers_[m].windows()) {
          const auto it = std::find(cfg_.windows.begin(), cfg_.windows.end(), w);
          if (it != cfg_.windows.end()) previous.push_back(int(it - cfg_.windows.begin()));
        }
      if (previous.size() != size_t(L) * H_) previous.clear();
      choice = copy_once_choice(rows, cfg_.windows, cfg_.pair_budget, per_head, previous);
      if (trace) {
        (*trace)["once_rows"] = rows.size();
        (*trace)["once_loss_per_head_choice"] = copy_once_loss(rows, per_head);
        (*trace)["once_loss"] = copy_once_loss(rows, choice);
      }
    }
    for (int m = 0; m < L; m++) {
      std::vector<int> w(H_);
      for (int h = 0; h < H_; h++) w[h] = cfg_.windows[choice[size_t(m) * H_ + h]];
      layers_[m].set_windows(w);
    }
    if (trace) (*trace)["evidence_used"] = read, (*trace)["choice"] = choice;
  }
  double* ev = copy_evidence_.data() + size_t(l) * H_ * K;
  copy_evidence_update(ev, use, H_ * K, cfg_.copy_decay);
  if (l == L - 1) {
    copy_measured_++;
    if (cfg_.copy_count == CopyCount::once) copy_rows_join();
  }
  if (trace) {
    (*trace)["use"] = std::vector<double>(use, use + size_t(H_) * K);
    (*trace)["evidence"] = std::vector<double>(ev, ev + size_t(H_) * K);
    (*trace)["pair_budget"] = cfg_.pair_budget, (*trace)["copy_decay"] = cfg_.copy_decay;
    (*trace)["windows"] = layers_[l].windows();
  }
  return layers_[l].windows();
}

// aah.copy_count=once: the rows held as evidence. Each update, the kCopyOnceRowsPerUpdate (128) queries with the most
// use beyond the smallest window (need, copy_use.h) join with weight 1; every row's weight is copy_decay^age, and a
// row leaves once its weight is under kCopyOnceWeightFloor (at decay 0.9: after 29 updates). A decayed sum, where
// the per-head evidence is a peak-hold: new use counts in full at once, and old use fades.
constexpr int kCopyOnceRowsPerUpdate = 128;
constexpr double kCopyOnceWeightFloor = 0.05;

int Controller::evidence_updates() const {
  if (!needs_copy_queries()) return 1;
  int ages = 0;  // rows of ages 0 .. ages-1 are held
  while (ages < 10000 && std::pow(cfg_.copy_decay, ages) >= kCopyOnceWeightFloor) ages++;
  return std::max(1, ages);
}

void Controller::add_copy_queries(int l, const float* per_query, int S, int T) {
  const int L = num_layers(), K = int(cfg_.windows.size());
  const size_t cols = size_t(L) * H_ * K;
  if (copy_queries_.size() != size_t(S) * T * cols) copy_queries_.assign(size_t(S) * T * cols, 0.0f);
  for (int s = 0; s < S; s++)
    for (int h = 0; h < H_; h++)
      for (int i = 0; i < T; i++)
        std::copy_n(per_query + ((size_t(s) * H_ + h) * T + i) * K, K,
                    copy_queries_.data() + (size_t(s) * T + i) * cols + (size_t(l) * H_ + h) * K);
}

void Controller::copy_rows_join() {
  const int N = num_layers() * H_, K = int(cfg_.windows.size());
  const size_t cols = size_t(N) * K;
  // Age the rows held; drop those whose weight fell under the floor.
  CopyRows kept;
  kept.N = N, kept.K = K;
  std::vector<int32_t> ages;
  for (size_t r = 0; r < copy_rows_.size(); r++) {
    const int32_t age = copy_row_age_[r] + 1;
    if (std::pow(cfg_.copy_decay, age) < kCopyOnceWeightFloor) continue;
    kept.use.insert(kept.use.end(), copy_rows_.use.begin() + long(r * cols), copy_rows_.use.begin() + long((r + 1) * cols));
    ages.push_back(age);
  }
  // This update's queries with the most need, need > 0, ties to the lower index.
  std::vector<std::pair<float, int>> need;
  const int queries = int(copy_queries_.size() / cols);
  for (int q = 0; q < queries; q++) {
    float m = 0;
    for (int h = 0; h < N; h++) m = std::max(m, copy_queries_[size_t(q) * cols + size_t(h) * K]);
    if (m > 0) need.push_back({m, q});
  }
  const size_t take = std::min(need.size(), size_t(kCopyOnceRowsPerUpdate));
  std::partial_sort(need.begin(), need.begin() + long(take), need.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  for (size_t n = 0; n < take; n++) {
    const float* row = copy_queries_.data() + size_t(need[n].second) * cols;
    for (size_t c = 0; c < cols; c++) kept.use.push_back(std::max(0.0f, row[c]));
    ages.push_back(0);
  }
  kept.weight.resize(ages.size());
  for (size_t r = 0; r < ages.size(); r++) kept.weight[r] = float(std::pow(cfg_.copy_decay, ages[r]));
  copy_rows_ = std::move(kept), copy_row_age_ = std::move(ages);
  std::fill(copy_queries_.begin(), copy_queries_.end(), 0.0f);
}

void Controller::copy_windows(int* out) const {
  for (size_t l = 0; l < layers_.size(); l++)
    std::copy(layers_[l].windows().begin(), layers_[l].windows().end(), out + l * H_);
}

void Controller::set_model_windows(const std::vector<int>& windows) {
  AAH_CHECK(windows.size() == layers_.size() * size_t(H_), "[controller] set_model_windows: ", windows.size(),
            " windows for ", layers_.size(), " x ", H_, " heads");
  for (const int w : windows)
    AAH_CHECK(w >= 1 && w <= context(), "[controller] set_model_windows: window ", w, " outside [1, ", context(), "]");
  for (size_t l = 0; l < layers_.size(); l++)
    layers_[l].set_windows(std::vector<int>(windows.begin() + long(l * H_), windows.begin() + long((l + 1) * H_)));
}

double Controller::acr() const {
  if (layers_.empty()) return 1.0;
  const double T = context();
  double s = 0;
  for (const auto& lc : layers_)
    for (int w : lc.windows()) s += std::min(double(w), T) / T;
  return s / double(layers_.size() * H_);
}

double Controller::exact_pair_ratio(int T) const {
  if (layers_.empty() || T <= 0) return 1.0;
  double used = 0;
  for (const auto& lc : layers_)
    for (int w : lc.windows()) used += double(attn_visible_pairs(T, w));
  return used / (double(attn_visible_pairs(T, T)) * double(layers_.size() * H_));
}

std::vector<int> Controller::levels_used() const {
  std::vector<int> v;
  for (const auto& lc : layers_) v.push_back(lc.levels_used());
  return v;
}

double Controller::mean_levels_used() const {
  if (layers_.empty()) return 0;
  double s = 0;
  for (const auto& lc : layers_) s += lc.levels_used();
  return s / double(layers_.size());
}

std::vector<std::pair<int, double>> Controller::window_bucket_fractions() const {
  std::vector<std::pair<int, double>> b;
  for (int w : cfg_.windows) b.push_back({w, 0.0});
  const double inv = layers_.empty() ? 0.0 : 1.0 / double(layers_.size() * H_);
  for (const auto& lc : layers_)
    for (int w : lc.windows()) {
      auto it = std::find_if(b.begin(), b.end(), [&](const auto& e) { return e.first == w; });
      if (it == b.end()) it = b.insert(std::upper_bound(b.begin(), b.end(), std::pair<int, double>{w, -1.0}), {w, 0.0});
      it->second += inv;
    }
  return b;
}

}  // namespace aah
