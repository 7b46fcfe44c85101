// AAH-v3 controller (spec sections 2-5 and 7): per attention layer, turns per-head features into per-head causal
// windows. One LayerController per attention layer; Controller holds them all, knows the control interval and
// computes the window statistics that are logged.
//
// One control update of a layer (LayerController::update), in spec order:
//   2  feature EMA            xbar_h = alpha xbar_h + (1 - alpha) x_h (initialised to the first observation)
//   3  hierarchy              level-0 groups, upper levels, sibling pairs (recomputed / frozen / reused per regime)
//   4  scoring                enriched inputs u_i(r); base logits; joint logits replace them for sibling pairs
//   5.1 raw choice            chat_i = argmax_k z_ik (ties: smallest k)
//   5.2 parent clamp          c_i = min(chat_i, c_parent(i)), top level uses chat
//   5.3 head mapping          c_h = c_group(h)
//   5.4 ramp (optional)       see ControllerConfig::ramp_steps
//   5.5 resolution EMA        ctilde_h = round_half_even(beta ctilde_h + (1 - beta) c_h), clamped to [0, K-1]
//   5.6 execution window      W_h = clamp(W[ctilde_h], W_0, T)
//   7  shuffle_post_select    (diagnostic) a seeded permutation of the layer's windows across its heads
// Policy coverage (spec section 10) replaces 2-5.3 by c_h = the smallest k with mass m_h(W_k) >= aah.coverage (or
// the pair-budget choice, coverage.h); 5.4-5.6 and 7 are the same.
// Between updates (every control_interval steps; step 0 is an update) the cached windows are reused.
//
// H heads per layer, L layers, K candidate windows, F = 9 features.
//
// Choices made here where the spec is silent (all deterministic; knobs where it matters):
//   * cosine uses per-norm epsilon 1e-8 (PyTorch): a zero vector has cosine 0 with everything.
//   * Every "most similar / least similar" search breaks ties by the lowest (i, j) in item order; items at every
//     level are ordered by the smallest head index they cover, so sibling a is always the lower-ordered item.
//   * L0 cap merges recompute the merged centroid as the mean of all member heads (head-weighted).
//   * Upper-level parents are ordered by smallest head index; an odd item's own parent has one child (no sibling).
//   * Branching factor: shape[r] builds level r+1 and must be 2 (validated); the last entry only enters L0max.
//   * grouping off: no upper levels and no sibling pairs at all (the joint scorer has nothing to score).
//   * Frozen topology (shallow_freeze) caches the level-0 partition, every parent map and the sibling pairs
//     (including the top level's greedy pairs); features, sizes, inputs and decisions are recomputed.
//   * fixed_random_grouping: labels uniform in [0, min(product(shape), H)) per head, empty labels dropped, redrawn
//     until there are two groups (H >= 2); drawn once at the first update, upper levels rebuilt every update.
//   * random_window draws W[idx] directly (no resolution EMA: "a fresh random index per head per update").
//     fixed / deterministic / off windows hold from construction; is_update_step is false for them (unless
//     shuffled), so the model need not collect features or diagnostics.
//   * shuffle_post_select permutes only the windows in force; the resolution EMA state stays in head order.
//   * freeze_after_warmup: updates at step 0 and at update steps < warmup_steps; then windows stay.
//   * The post-warmup ramp (off by default) moves the index linearly from K-1 to c_h over ramp_steps after warmup.
//   * Non-finite raw features skip the update (state unchanged), so one bad step cannot poison the feature EMA.
//   * Scorer weights are fp32, drawn from a double uniform and rounded; the MLP arithmetic is double.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/controller_config.h"
#include "controller/copy_use.h"
#include "controller/features.h"
#include "controller/hierarchy.h"
#include "controller/scorer.h"

namespace aah {

class SafetensorsReader;
class SafetensorsWriter;

// ---- decision steps (spec section 5), exposed for tests ----
// Streams of random numbers, each an Rng seeded with controller_stream_seed(run_seed, stream, layer, step):
//   x = run_seed; h = splitmix64(x); x = h ^ stream; h = splitmix64(x); x = h ^ layer; h = splitmix64(x);
//   x = h ^ step; return splitmix64(x)          (splitmix64 of core/rng.h, which advances its argument)
enum : uint64_t {
  kSeedStreamScorer = 1,         // step 0: the layer's scorer weights
  kSeedStreamRandomGrouping = 2, // step 0: fixed random level-0 partition
  kSeedStreamRandomWindow = 3,   // step s: random_window indices at update step s
  kSeedStreamShuffle = 4,        // step s: shuffle_post_select permutation at update step s
  kSeedStreamCopyShuffle = 5,    // step 0 (layer 0): copy_shuffle's permutation of the model's heads, kept
};
uint64_t controller_stream_seed(uint64_t run_seed, uint64_t stream, uint64_t layer, uint64_t step);

// argmax_k z_k, ties to the smallest k.
int argmax_first(const double* z, int K);
// Round to nearest integer, exact halves to the even neighbour (independent of the FP rounding mode).
double round_half_even(double x);
// ctilde = round_half_even(beta prev + (1 - beta) c), clamped to [0, K-1].
int resolution_ema_step(int prev, int c, double beta, int K);
// clamp(W[idx], W_0, T) with T = W[K-1] and idx clamped to [0, K-1].
int execution_window(const std::vector<int>& windows, int idx);
// Post-warmup ramp [implemented choice]: progress p = clamp((step - warmup_steps) / ramp_steps, 0, 1);
// returns round_half_even((K-1) - p ((K-1) - c)): full window during warmup, moving linearly to c.
int ramp_index(int c, int K, int step, int warmup_steps, int ramp_steps);

// Everything the scoring and decision steps computed for one hierarchy (for the trace and tests).
struct ControllerDecision {
  std::vector<std::vector<double>> enriched;     // per level (n_r, 29) u_i(r)
  std::vector<std::vector<double>> logits_base;  // per level (n_r, K) f_base(u_i)
  std::vector<std::vector<double>> logits_joint; // per sibling pair (hier.pairs order) (2, K) f_joint(j_ab)
  std::vector<std::vector<double>> logits;       // per level (n_r, K) logits used (joint replaces base for pairs)
  std::vector<std::vector<int>> raw;             // per level (n_r) chat_i
  std::vector<std::vector<int>> choice;          // per level (n_r) c_i after the parent clamp
  std::vector<int> head;                         // (H) c_h = c_group(h)
};
// Spec 4 and 5.1-5.3 over a built hierarchy.
ControllerDecision controller_decide(const Hierarchy& hier, const Scorers& scorers, bool joint_scorer,
                                     bool parent_clamp);

// What one control update reads. The policy decides which measurement that is, and exactly that field is set
// (Controller::needs_features / needs_mass / needs_copy_use say which); the policies that measure nothing (fixed,
// random, shuffles of them) read none. A field the policy does not read is an error, not ignored.
struct ControlInput {
  const double* features = nullptr;  // (H, 9) raw head features (features.h): policy controller
  const double* mass = nullptr;      // (H, K) attention mass within each candidate window (coverage.h): policy coverage
  const double* use = nullptr;       // (H, K) use beyond each candidate window (copy_use.h): policy copy
  static ControlInput of_features(const double* f) { return {f, nullptr, nullptr}; }
  static ControlInput of_mass(const double* m) { return {nullptr, m, nullptr}; }
  static ControlInput of_use(const double* u) { return {nullptr, nullptr, u}; }
};

// ---- one attention layer ----
class LayerController {
 public:
  LayerController(const ControllerConfig& cfg, int num_heads, int layer);

  // One control update at `step` from the policy's input (ControlInput; policy copy is decided for the whole model by
  // Controller::update, not here). Returns the per-head execution windows, which stay cached until the next update. If `trace` is non-null
  // it is set to one JSON object describing the update (fields in controller.cpp, before update()). A non-finite
  // input skips the update (state and windows unchanged; the trace says so).
  const std::vector<int>& update(const ControlInput& input, int step, nlohmann::json* trace);

  const std::vector<int>& windows() const { return windows_; }          // (H) W_h in force
  void set_windows(const std::vector<int>& w) { windows_ = w; }         // policy copy: decided for the whole model
  const std::vector<int>& resolution_index() const { return ctilde_; }  // (H) ctilde_h
  const std::vector<double>& feature_ema() const { return xbar_; }      // (H, 9)
  bool feature_ema_initialised() const { return xbar_init_; }
  bool topology_cached() const { return topo_cached_; }
  // reuse_level0 (deep_reuse): the step of the update that cached level 0; -1 before (spec section 7, revised).
  int level0_cache_step() const { return cache_step_; }
  const Hierarchy& hierarchy() const { return hier_; }  // of the last update (empty before the first)
  int levels_used() const { return hier_.levels_used(); }
  int updates_done() const { return updates_; }
  const Scorers& scorers() const { return scorers_; }
  Scorers& scorers() { return scorers_; }
  int num_heads() const { return H_; }
  int layer_index() const { return layer_; }

  // State tensors under prefix "layers.{l}." (layout in controller_state.cpp). The writer keeps pointers into
  // this object: do not update the controller between save() and the writer's write().
  void save(SafetensorsWriter& w, const std::string& prefix) const;
  void load(const SafetensorsReader& r, const std::string& prefix);

 private:
  void set_policy_windows(int step);
  void shuffle_windows(int step, nlohmann::json* trace);
  void build_topology(int step);
  void apply_choice(const std::vector<int>& c, int step, nlohmann::json* trace);
  const std::vector<int>& update_coverage(const double* mass, int step, nlohmann::json* trace);

  ControllerConfig cfg_;
  int H_, K_, layer_;
  Scorers scorers_;
  std::vector<double> xbar_;  // (H, 9) smoothed features
  bool xbar_init_ = false;
  Hierarchy hier_;            // last hierarchy; its topology is the cache when topo_cached_
  bool topo_cached_ = false;
  int cache_step_ = -1;       // reuse_level0: step at which level 0 was cached
  std::vector<int> ctilde_;   // (H) resolution EMA state
  std::vector<int> windows_;  // (H) windows in force
  int updates_ = 0;
  // save() buffers (the writer holds pointers until write())
  mutable std::vector<int32_t> save_groups_, save_topology_, save_state_, save_cache_step_;
};

// ---- all attention layers ----
class Controller {
 public:
  Controller(const ControllerConfig& cfg, int num_layers, int num_heads);

  const ControllerConfig& config() const { return cfg_; }
  int num_layers() const { return int(layers_.size()); }
  int num_heads() const { return H_; }
  int context() const { return cfg_.windows.back(); }  // T

  // True when `step` is a control update: step % control_interval == 0, the policy changes windows over time
  // (controller, coverage, random, or shuffle_post_select on), and not frozen (freeze_after_warmup: only steps < warmup_steps,
  // and step 0). On these steps the forward computes features (if needs_features()) and calls update().
  bool is_update_step(int step) const;
  // True when updates read features (policy controller): the forward must compute controller_head_features and
  // the attention must collect diagnostics on update steps.
  bool needs_features() const { return cfg_.policy == WindowPolicy::controller; }
  // True when updates read the attention mass within each candidate window (policy coverage): the forward must
  // compute coverage_window_mass on update steps.
  bool needs_mass() const { return cfg_.policy == WindowPolicy::coverage; }
  // True when updates read the copy use (H, K) of copy_use.h (policy copy): the forward must compute it from the
  // layer's q, k and the batch's tokens on update steps.
  bool needs_copy_use() const { return cfg_.policy == WindowPolicy::copy; }
  // True when policy copy also reads each query's use (aah.copy_count=once): before update(l) on an update step,
  // add_copy_queries(l, per_query (S, H, T, K) of copy_use.h, S, T).
  bool needs_copy_queries() const { return needs_copy_use() && cfg_.copy_count == CopyCount::once; }
  void add_copy_queries(int l, const float* per_query, int S, int T);
  // aah.copy_count=once: the query rows held as evidence (row weights copy_decay^age) and their ages in updates.
  const CopyRows& copy_rows() const { return copy_rows_; }
  // How many control updates of evidence a decision reads once it is at steady state: aah.copy_count=once holds each
  // update's rows while copy_decay^age >= the weight floor (29 at decay 0.9), so its solver sees its full load only
  // from that update on; 1 for every other policy. `aah bench train` times the controller there.
  int evidence_updates() const;

  // Runs layer l's update if is_update_step(step); otherwise returns the cached windows unchanged. `input` holds
  // what the policy reads (ControlInput).
  const std::vector<int>& update(int layer, const ControlInput& input, int step, nlohmann::json* trace = nullptr);
  LayerController& layer(int l) { return layers_.at(l); }
  const LayerController& layer(int l) const { return layers_.at(l); }
  const std::vector<int>& windows(int l) const { return layers_.at(l).windows(); }
  void copy_windows(int* out /*(L, H)*/) const;
  // Policy oracle: every layer's windows (L, H), chosen outside (eval/probe.h) before training; they are kept (and
  // saved with the state). Each window in [1, T].
  void set_model_windows(const std::vector<int>& windows);

  // ---- statistics for logging (spec section 8) ----
  double acr() const;                        // mean over (layer, head) of W_h / T
  double exact_pair_ratio(int T) const;      // sum min(t, W_h) / sum t over t = 1..T, heads and layers
  std::vector<int> levels_used() const;      // per layer, of the last update (0 before any)
  double mean_levels_used() const;
  // Fraction of (layer, head) at each window: every candidate window (possibly 0) plus any other window in force
  // (fixed_window), ascending by window.
  std::vector<std::pair<int, double>> window_bucket_fractions() const;

  // State under `prefix` (e.g. "aah_state."): "controller.candidate_windows" (K) I32, "controller.dims" (2) I32
  // = (L, H), then every layer's tensors "layers.{l}.*". Loading checks dims and windows against this
  // controller; mismatches and missing or malformed tensors are aah::Errors naming the tensor.
  void save(SafetensorsWriter& w, const std::string& prefix = "") const;
  void load(const SafetensorsReader& r, const std::string& prefix = "");

 private:
  // Policy copy: at layer 0 of an update, every layer's windows from the evidence so far (one budget for the
  // model); then layer l's use (H, K) joins its evidence.
  const std::vector<int>& update_copy(int l, const double* use, int step, nlohmann::json* trace);
  // aah.copy_count=once, after the last layer's use of an update: the rows age, this update's queries join.
  void copy_rows_join();

  ControllerConfig cfg_;
  int H_;
  std::vector<LayerController> layers_;
  mutable std::vector<double> copy_evidence_;  // (L, H, K) policy copy: evidence of use beyond each candidate window
  int copy_measured_ = 0;              // policy copy: updates whose use has joined the evidence
  CopyRows copy_rows_;                 // aah.copy_count=once: the evidence rows (copy_use.h), weights decay^age
  std::vector<int32_t> copy_row_age_;  // (rows) updates since each row joined
  std::vector<float> copy_queries_;    // (S T, L H K) this update's per-query use, filled layer by layer
  mutable std::vector<int32_t> save_dims_, save_windows_;
  mutable int32_t save_copy_measured_ = 0;
};

}  // namespace aah
