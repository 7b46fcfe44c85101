// The controller's configuration (spec section 7): its knobs (ControllerConfig, one table row each in
// controller_config.cpp), the enums among them with their name tables, and the regimes, named sets of knob values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/config_table.h"

namespace aah {

// How the hierarchy's topology evolves over updates (spec section 7). Names: kTopologyModeNames, in this order.
enum class TopologyMode {
  recompute,     // full_adaptive: level 0 and upper levels rebuilt at every update
  freeze,        // shallow_freeze: the whole topology (level 0, upper levels, pairs) built at the first update, kept
  reuse_level0,  // deep_reuse: level-0 partition cached at the first update (>= reuse_cache_step); upper levels rebuilt
  fixed_random,  // fixed_random_grouping: a seeded random level-0 partition, kept; upper levels rebuilt
};

// Where the windows come from. Names: kWindowPolicyNames, in this order.
enum class WindowPolicy {
  controller,     // the AAH-v3 controller
  off,            // full windows (full, control_off)
  fixed,          // every head fixed_window (clamped to [1, T])
  deterministic,  // head h gets W[h mod K]
  random,         // a fresh seeded random index per head per update, W[idx] (bypasses the resolution EMA)
  coverage,       // need-aware (spec section 10): the smallest window holding aah.coverage of the attention mass
  copy,           // copy use (copy_use.h): one pair budget for the model, the windows that lose the least copy use
  oracle,         // a control on synth retrieval data: windows from the base's per-head cut probe (eval/oracle.h), kept
};

// Policy copy's statistic of use (copy_use.h): chance-corrected copy mass beyond each window, or the relative change
// of the head's output when cut to it.
enum class UseStatistic { copy, output };
// Policy copy: how the use of several heads adds up. per_head: the sum over heads of each head's use lost (separable,
// solved exactly); once: a query's copy counts once, kept if any head keeps it (copy_use.h, copy_once_choice).
enum class CopyCount { per_head, once };

extern const EnumNames<UseStatistic> kUseStatisticNames;  // copy, output
extern const EnumNames<CopyCount> kCopyCountNames;         // per_head, once
extern const EnumNames<TopologyMode> kTopologyModeNames;  // recompute, freeze, reuse_level0, fixed_random
extern const EnumNames<WindowPolicy> kWindowPolicyNames;  // controller, off, fixed, deterministic, random, coverage, copy, oracle
inline const char* topology_mode_name(TopologyMode m) { return enum_name(kTopologyModeNames, m); }
inline const char* window_policy_name(WindowPolicy p) { return enum_name(kWindowPolicyNames, p); }

// Every knob of the controller. Defaults are the spec's full_adaptive regime. The knobs settable as aah.<name>
// are the rows of controller_knobs(); regime, eps, warmup_steps and seed are not (set by the run).
struct ControllerConfig {
  std::string regime = "full_adaptive";
  std::vector<int> windows;           // candidate windows W_0 < ... < W_{K-1} = T (context); see controller_default_windows
  int control_interval = 5;           // optimizer steps between control updates; step 0 is an update
  double feature_ema = 0.9;           // alpha; 0 = no feature EMA
  double resolution_ema = 0.15;       // beta
  double tau = 0.995;                 // level-0 cosine threshold [decided]
  double lambda = 16.0;               // cosine_normdiff norm penalty
  double eps = 1e-6;                  // cosine_normdiff epsilon
  std::vector<int> shape = {2, 2, 2, 2};  // hierarchy shape: L0max = min(product, H), at most shape.size() levels
  bool grouping = true;               // false: every head its own level-0 item, no upper levels (grouping_off)
  bool joint_scorer = true;           // joint sibling logits replace base logits for sibling pairs
  bool parent_clamp = true;           // c_i = min(chat_i, c_parent)
  TopologyMode topology = TopologyMode::recompute;
  WindowPolicy policy = WindowPolicy::controller;
  int fixed_window = 0;               // W of policy fixed (must be set, >= 1)
  bool shuffle_post_select = false;   // permute the final windows across the layer's heads at each update
  bool freeze_after_warmup = false;   // no control update after warmup: updates only at steps < warmup_steps (and 0)
  int warmup_steps = 0;               // the training warmup (train.warmup_steps); used by freeze and ramp
  int ramp_steps = 0;                 // post-warmup ramp length in steps; 0 = off (spec default)
  int reuse_cache_step = 0;           // reuse_level0: level 0 is cached at the first update at or after this step;
                                      // a run's default is train.warmup_steps (controller_config_of), 0 here
  double coverage = 0.95;             // policy coverage: W_h = the smallest W_k with mass m_h(W_k) >= coverage
  int coverage_sample = 1;            // policy coverage: sequences of the batch the mass is measured on (the first)
  double coverage_tail = 1;           // policy coverage: a window's mass is the mean over this share of the queries,
                                      // those with the least mass in it (1: every query, the plain mean)
  UseStatistic use_statistic = UseStatistic::copy;  // policy copy: what its evidence measures
  CopyCount copy_count = CopyCount::per_head;  // policy copy: how the heads' use adds up (per_head: sum; once)
  double copy_decay = 0.9;            // policy copy: evidence = max(use now, copy_decay x evidence before) per update
  bool copy_shuffle = false;          // policy copy, control: the solver reads head p(h)'s evidence for head h, p a
                                      // permutation of the model's heads drawn once from the run seed
  double pair_budget = 0;             // policy coverage: 0 off; else per layer the windows of most mass with exact
                                      // pair ratio <= pair_budget (greedy by mass gained per pair), replacing coverage
  uint64_t seed = 0;                  // run seed (train.seed); every random stream is derived from it
};

// The knob table: one row per knob settable as aah.<name> (key "aah.<name>"), pointing into `c`.
std::vector<ConfigField> controller_knobs(ControllerConfig& c);

// W = [T/8, T/4, T/2, T] (the paper's ratios), smaller entries below 1 or duplicated dropped.
std::vector<int> controller_default_windows(int T);

// Applies regime `name` (the regime table is in controller_config.cpp). First resets the regime-owned knobs (those
// some regime sets: controller_knob_set_by_regimes) to their ControllerConfig defaults, then sets the knobs the name
// lists. A name is a main regime (full, grouping_off, full_adaptive, shallow_freeze, deep_reuse, coverage) optionally
// followed by '+variant' parts, or variants alone (then on top of full_adaptive), e.g.
// "shallow_freeze+shuffle_post_select", "shallow_freeze+control_interval_10", "fixed_window_1024", "no_feature_ema".
// Apply the regime first and the individual knobs given explicitly afterwards. Unknown names: aah::Error naming it and listing the known ones.
void controller_apply_regime(ControllerConfig& cfg, const std::string& name);
// The aah.* keys that the regime `name` itself sets (its rows', e.g. copy_budget_500: aah.policy, aah.pair_budget).
std::vector<std::string> controller_regime_keys(const std::string& name);
// Names accepted by controller_apply_regime (main regimes, then variants; "_N" / "_W" stand for a number).
std::vector<std::string> controller_regime_names();
// docs/regimes.md: the regime table as Markdown (name, the knobs it sets, what it does), written from the rows
// (aah --help-regimes --markdown); a test keeps the committed file equal to it.
std::string controller_regimes_markdown();
// True when some regime sets the knob `key` ("aah.topology"): applying any regime resets it.
bool controller_knob_set_by_regimes(const std::string& key);
// Checks ranges (the knob table's) and relations; errors name the knob ("[controller] key 'aah.tau' ...").
void controller_validate(const ControllerConfig& cfg);
// "" when the knob `key` acts under cfg's policy, is not tied to one policy, or has its default value; else why it would do nothing
// there (aah train refuses such a --set; a suite's --set spans regimes and may hold knobs of some of them).
std::string controller_knob_inert(const ControllerConfig& cfg, const std::string& key);
// Every knob as JSON, plus regime, eps, warmup_steps and seed.
nlohmann::json controller_config_to_json(const ControllerConfig& cfg);

}  // namespace aah
