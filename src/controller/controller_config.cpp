// The controller's configuration: the knob table, the enum name tables, the regime table, validation, JSON.
// See controller_config.h.
#include "controller/controller_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace aah {

const EnumNames<UseStatistic> kUseStatisticNames = {{"copy", "output"}};
const EnumNames<CopyCount> kCopyCountNames = {{"per_head", "once"}};
const EnumNames<TopologyMode> kTopologyModeNames = {{"recompute", "freeze", "reuse_level0", "fixed_random"}};
const EnumNames<WindowPolicy> kWindowPolicyNames = {{"controller", "off", "fixed", "deterministic", "random", "coverage", "copy", "oracle"}};

// ============================================================================================================
// Knobs: one row per aah.* key of the controller (default: the member's initializer in ControllerConfig)
// ============================================================================================================

std::vector<ConfigField> controller_knobs(ControllerConfig& c) {
  return {
      {"aah.windows", &c.windows, at_least(1),
       "candidate windows, ascending, the last = train.context (default context/8, /4, /2, /1)"},
      {"aah.control_interval", &c.control_interval, at_least(1), "optimizer steps between control updates (step 0 is one)"},
      {"aah.feature_ema", &c.feature_ema, in_half_open(0, 1), "feature EMA alpha (0: off)"},
      {"aah.resolution_ema", &c.resolution_ema, in_closed(0, 1), "resolution EMA beta"},
      {"aah.tau", &c.tau, in_closed(-1, 1), "level-0 cosine clustering threshold"},
      {"aah.lambda", &c.lambda, at_least(0), "cosine_normdiff norm penalty"},
      {"aah.shape", &c.shape, at_least(1), "hierarchy shape: every entry but the last 2, e.g. [2,2,2,2]"},
      {"aah.grouping", &c.grouping, {}, "level-0 grouping (false: every head its own item, no upper levels)"},
      {"aah.joint_scorer", &c.joint_scorer, {}, "wide joint sibling scorer replaces base logits for sibling pairs"},
      {"aah.parent_clamp", &c.parent_clamp, {}, "child window index <= parent's"},
      {"aah.topology", enum_ref(&c.topology, kTopologyModeNames), {}, "how the hierarchy's topology evolves over updates"},
      {"aah.policy", enum_ref(&c.policy, kWindowPolicyNames), {}, "where the windows come from"},
      {"aah.fixed_window", &c.fixed_window, {}, "window of policy fixed (1 <= W <= train.context there)"},
      {"aah.shuffle_post_select", &c.shuffle_post_select, {}, "permute final windows across heads at each update (diagnostic)"},
      {"aah.freeze_after_warmup", &c.freeze_after_warmup, {}, "no control updates after train.warmup_steps"},
      {"aah.ramp_steps", &c.ramp_steps, at_least(0), "post-warmup ramp length from full windows to the choice (0: off)"},
      {"aah.reuse_cache_step", &c.reuse_cache_step, at_least(0),
       "deep_reuse: cache level 0 at the first update at or after this step (default train.warmup_steps; 0: the first)"},
      {"aah.coverage", &c.coverage, {.lo = 0, .hi = 1, .lo_open = true},
       "policy coverage: a head's window is the smallest holding this share of its attention mass"},
      {"aah.coverage_sample", &c.coverage_sample, at_least(1),
       "policy coverage: sequences of the batch (the first ones) the attention mass is measured on"},
      {"aah.coverage_tail", &c.coverage_tail, {.lo = 0, .hi = 1, .lo_open = true},
       "policy coverage: a window's mass is the mean over this share of the queries, those with the least mass in it "
       "(1: all; e.g. 0.02 lets the few queries that reach far decide)"},
      {"aah.pair_budget", &c.pair_budget, in_closed(0, 1),
       "policy coverage: 0 off; else per layer the windows of most mass within this exact pair ratio; policies copy "
       "and oracle: the whole model's exact pair ratio at most (> 0)"},
      {"aah.copy_shuffle", &c.copy_shuffle, {},
       "policy copy, a control: each head decided on another head's evidence (a fixed random permutation of the "
       "model's heads): what the same budget gives by chance"},
      {"aah.use_statistic", enum_ref(&c.use_statistic, kUseStatisticNames), {},
       "policy copy: the evidence per head and window, copy (chance-corrected copy mass beyond it) or output (the "
       "relative change of the head's output when cut to it, ||o(W) - o(full)||^2 / ||o(full)||^2)"},
      {"aah.copy_count", enum_ref(&c.copy_count, kCopyCountNames), {},
       "policy copy with use_statistic copy: per_head (the loss is the sum over heads of the use each loses: exact "
       "solver) or once (a query's copy counts once, kept when any head's window keeps it: redundant heads need "
       "only one long window; greedy and exchange search from the per_head solution, never worse than it)"},
      {"aah.copy_decay", &c.copy_decay, in_half_open(0, 1),
       "policy copy: evidence of use = max(use now, this x evidence before) at each update (0.9: half-life 6.6 "
       "updates)"},
  };
}

std::vector<int> controller_default_windows(int T) {
  std::vector<int> w;
  for (int div : {8, 4, 2, 1}) {
    const int x = T / div;
    if (x >= 1 && (w.empty() || x > w.back())) w.push_back(x);
  }
  return w;
}

// ============================================================================================================
// Regimes (spec section 7): a regime is a named set of knob values, written as --set writes them
// (aah.regime=deep_reuse sets aah.shape=[2,2,2,2] and aah.topology=reuse_level0 on top of the defaults). A name
// ending in "_N" or "_W" takes a number there ("control_interval_10"), which replaces "N" / "W" among its values.
// A knob that some regime sets is regime-owned: every regime first resets it to its default.
// ============================================================================================================

namespace {

struct Regime {
  const char* name;
  std::vector<std::pair<const char*, const char*>> sets;  // knob (aah.<knob>) -> value
  const char* what;
};

const std::vector<Regime> kMainRegimes = {
    {"full", {{"policy", "off"}}, "ordinary causal attention, every head the full context"},
    {"grouping_off", {{"grouping", "false"}, {"joint_scorer", "false"}, {"parent_clamp", "false"}},
     "every head its own level-0 item, no upper levels, no joint scorer or clamp"},
    {"full_adaptive", {{"shape", "[2,2,2,2]"}, {"topology", "recompute"}},
     "level 0 and upper levels recomputed at every update, joint scorer, parent clamp"},
    {"shallow_freeze", {{"shape", "[2]"}, {"topology", "freeze"}},
     "topology computed at the first update, then frozen (decisions keep updating)"},
    {"deep_reuse", {{"shape", "[2,2,2,2]"}, {"topology", "reuse_level0"}},
     "level-0 partition cached at the first update at or after aah.reuse_cache_step, upper levels recomputed"},
    {"coverage", {{"policy", "coverage"}},
     "need-aware (spec section 10, not the paper's): the smallest window holding aah.coverage of the attention mass"},
    {"coverage_budget_P", {{"policy", "coverage"}, {"pair_budget", "P/1000"}},
     "coverage under the pair budget aah.pair_budget = P / 1000 (e.g. coverage_budget_526: pair ratio <= 0.526)"},
    {"copy_budget_P", {{"policy", "copy"}, {"pair_budget", "P/1000"}},
     "copy use (not the paper's): per head the chance-corrected copy mass beyond each window, measured at full "
     "window on every sequence of the batch, held as evidence; one pair budget P / 1000 for the whole model, the "
     "windows that lose the least evidence (exact)"},
    {"copy_once_budget_P", {{"policy", "copy"}, {"copy_count", "once"}, {"pair_budget", "P/1000"}},
     "copy_budget_P with each query's copy counted once, kept if any head keeps it (aah.copy_count=once): one long "
     "head can serve heads that copy the same thing"},
    {"output_budget_P", {{"policy", "copy"}, {"use_statistic", "output"}, {"pair_budget", "P/1000"}},
     "copy_budget_P with the output change as the evidence (DuoAttention's criterion, measured directly): per head "
     "and window the relative change of the head's output when cut to it, at full window on every sequence"},
    {"oracle_budget_P", {{"policy", "oracle"}, {"pair_budget", "P/1000"}},
     "a control on synth retrieval data (not the paper's): before fine-tuning, each head of the train.init_from base "
     "alone cut to each candidate window on the validation questions; one pair budget P / 1000 for the whole model, "
     "the windows that add the least answer loss (exact), kept"},
};

// One change each; alone they apply on top of full_adaptive, after a main regime joined by '+' on top of it.
const std::vector<Regime> kVariants = {
    {"control_off", {{"policy", "off"}}, "the controller never changes windows (full)"},
    {"fixed_random_grouping", {{"topology", "fixed_random"}}, "a seeded random level-0 partition, kept"},
    {"freeze_after_warmup", {{"freeze_after_warmup", "true"}}, "no control updates after train.warmup_steps"},
    {"independent_scoring", {{"joint_scorer", "false"}}, "joint scorer off"},
    {"no_parent_constraint", {{"parent_clamp", "false"}}, "parent clamp off"},
    {"no_feature_ema", {{"feature_ema", "0"}}, "feature EMA alpha = 0"},
    {"fixed_window", {{"policy", "fixed"}}, "every head the window aah.fixed_window"},
    {"fixed_window_W", {{"policy", "fixed"}, {"fixed_window", "W"}}, "every head window W"},
    {"deterministic_window", {{"policy", "deterministic"}}, "head h gets W[h mod K]"},
    {"random_window", {{"policy", "random"}}, "a fresh seeded random window per head per update"},
    {"shuffle_post_select", {{"shuffle_post_select", "true"}}, "windows permuted across a layer's heads (diagnostic)"},
    {"control_interval_N", {{"control_interval", "N"}}, "control updates every N steps"},
    {"copy_shuffled", {{"policy", "copy"}, {"copy_shuffle", "true"}},
     "policy copy with every head decided on another head's evidence (a fixed random permutation): the chance "
     "control of copy_budget_P (use after it: copy_budget_500+copy_shuffled)"},
    {"coverage_tail_P", {{"policy", "coverage"}, {"coverage_tail", "P/1000"}},
     "policy coverage, masses over the P / 1000 of queries with the least (after coverage_budget_P: within its budget)"},
};

std::string known_regimes() {
  std::string s = "main regimes: ";
  for (size_t i = 0; i < kMainRegimes.size(); i++) s += (i ? ", " : "") + std::string(kMainRegimes[i].name);
  s += "; variants (alone, or after a main regime joined by '+'): ";
  for (size_t i = 0; i < kVariants.size(); i++) s += (i ? ", " : "") + std::string(kVariants[i].name);
  return s;
}

[[noreturn]] void unknown_regime(const std::string& full, const std::string& part) {
  fail("[controller] unknown regime '", part, "'", part == full ? "" : str_cat(" in '", full, "'"), " (",
       known_regimes(), ")");
}

// The row of `table` that `part` names; for a row whose name ends in "_N" (any capital letter), `part` is the name
// with a number of up to 9 digits there, returned in *number as the letter and its value.
const Regime* find_regime(const std::vector<Regime>& table, const std::string& part,
                          std::pair<std::string, std::string>* number) {
  for (const Regime& r : table) {
    const std::string name = r.name;
    const size_t n = name.size();
    const bool numbered = n >= 2 && name[n - 2] == '_' && std::isupper(static_cast<unsigned char>(name[n - 1]));
    if (!numbered) {
      if (part == name) return &r;
      continue;
    }
    const std::string prefix = name.substr(0, n - 1);  // "control_interval_"
    if (part.size() <= prefix.size() || part.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = part.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    *number = {name.substr(n - 1), std::to_string(std::stoi(digits))};
    return &r;
  }
  return nullptr;
}

void set_knob(ControllerConfig& c, const std::string& knob, const std::string& text) {
  const std::vector<ConfigField> knobs = controller_knobs(c);
  const ConfigField* f = field_find(knobs, "aah." + knob);
  AAH_CHECK(f != nullptr, "the regime table sets an unknown knob", knob);
  field_assign(*f, field_value_of_text(*f, text), "regime table");
}

// Sets the row's knobs; returns (knob, value) as set.
std::vector<std::pair<std::string, std::string>> apply_regime_row(ControllerConfig& c, const Regime& r,
                                                                  const std::pair<std::string, std::string>& number) {
  std::vector<std::pair<std::string, std::string>> set;
  for (const auto& [knob, value] : r.sets) {
    std::string v = value;
    if (value == number.first) v = number.second;
    if (value == number.first + "/1000") v = std::to_string(std::stoi(number.second) / 1000.0);  // thousandths
    set_knob(c, knob, v);
    set.push_back({knob, v});
  }
  return set;
}

void reset_regime_knobs(ControllerConfig& c) {
  ControllerConfig defaults;
  const std::vector<ConfigField> to = controller_knobs(c), from = controller_knobs(defaults);
  for (size_t i = 0; i < to.size(); i++)
    if (controller_knob_set_by_regimes(to[i].key)) field_assign(to[i], field_json(from[i]), "defaults");
}

}  // namespace

void controller_apply_regime(ControllerConfig& cfg, const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t plus = name.find('+', start);
    parts.push_back(name.substr(start, plus == std::string::npos ? std::string::npos : plus - start));
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  ControllerConfig c = cfg;
  reset_regime_knobs(c);
  std::map<std::string, std::pair<std::string, std::string>> by;  // knob -> (value, the part that set it)
  for (size_t i = 0; i < parts.size(); i++) {
    std::pair<std::string, std::string> number;
    const Regime* r = i == 0 ? find_regime(kMainRegimes, parts[i], &number) : nullptr;  // a main regime only first
    if (!r) r = find_regime(kVariants, parts[i], &number);
    if (!r) unknown_regime(name, parts[i]);
    // Two parts that set one knob to different values contradict each other (control_interval_5+control_interval_10,
    // coverage+fixed_window): refused rather than the last one silently winning.
    for (const auto& [knob, v] : apply_regime_row(c, *r, number)) {
      const auto it = by.find(knob);
      if (it != by.end() && it->second.first != v)
        fail("[controller] regime '", name, "': '", it->second.second, "' sets aah.", knob, "=", it->second.first,
             " and '", parts[i], "' sets it to ", v, ": choose one");
      by[knob] = {v, parts[i]};
    }
  }
  c.regime = name;
  cfg = c;
}

std::vector<std::string> controller_regime_keys(const std::string& name) {
  std::vector<std::string> keys;
  auto add = [&](const Regime& r) {
    for (const auto& [knob, value] : r.sets)
      if (std::find(keys.begin(), keys.end(), std::string("aah.") + knob) == keys.end())
        keys.push_back(std::string("aah.") + knob);
  };
  size_t start = 0;
  for (int i = 0;; i++) {
    const size_t plus = name.find('+', start);
    const std::string part = name.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    std::pair<std::string, std::string> number;
    const Regime* r = i == 0 ? find_regime(kMainRegimes, part, &number) : nullptr;
    if (!r && i == 0)  // a variant alone is on top of full_adaptive
      if (const Regime* fa = find_regime(kMainRegimes, "full_adaptive", &number)) add(*fa);
    if (!r) r = find_regime(kVariants, part, &number);
    if (!r) unknown_regime(name, part);
    add(*r);
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  return keys;
}

std::vector<std::string> controller_regime_names() {
  std::vector<std::string> names;
  for (const auto* table : {&kMainRegimes, &kVariants})
    for (const Regime& r : *table) names.push_back(r.name);
  return names;
}

std::string controller_regimes_markdown() {
  std::string md =
      "# Regimes\n\n"
      "Written by `aah --help-regimes --markdown` from the regime table (`kMainRegimes` and `kVariants` in\n"
      "`src/controller/controller_config.cpp`); a test fails when this file differs from what the binary prints.\n"
      "Choose one with `--set aah.regime=NAME` or a suite's `--regimes`. A name ending in `_N`, `_W` or `_P` takes a\n"
      "number there (`control_interval_10`, `fixed_window_64`, `coverage_budget_500`: P / 1000). Variants combine\n"
      "with a main regime using `+` (`shallow_freeze+shuffle_post_select`); a variant alone applies on top of\n"
      "`full_adaptive`. Every regime first resets the knobs any regime sets, then sets its own (the `aah.*` keys in\n"
      "[config.md](config.md)); knobs given after `aah.regime` refine it.\n\n";
  for (const auto* table : {&kMainRegimes, &kVariants}) {
    md += table == &kMainRegimes ? "## Main regimes\n\n" : "\n## Variants\n\n";
    md += "| regime | sets | what it does |\n|---|---|---|\n";
    for (const Regime& r : *table) {
      std::string sets;
      for (const auto& [k, v] : r.sets) sets += (sets.empty() ? "" : ", ") + std::string("aah.") + k + "=" + v;
      md += std::string("| `") + r.name + "` | `" + sets + "` | " + r.what + " |\n";
    }
  }
  return md;
}

bool controller_knob_set_by_regimes(const std::string& key) {
  for (const auto* table : {&kMainRegimes, &kVariants})
    for (const Regime& r : *table)
      for (const auto& kv : r.sets)
        if (key == "aah." + std::string(kv.first)) return true;
  return false;
}

// ============================================================================================================
// Validation and JSON
// ============================================================================================================

void controller_validate(const ControllerConfig& cfg) {
  ControllerConfig c = cfg;
  for (const ConfigField& f : controller_knobs(c)) field_check(f, "[controller]");
  // Relations the rows cannot state.
  const auto& w = c.windows;
  if (w.empty()) fail("[controller] key 'aah.windows' is empty (the last candidate window must be the context T)");
  for (size_t i = 1; i < w.size(); i++)
    if (w[i] <= w[i - 1])
      fail("[controller] key 'aah.windows' must be strictly ascending, got ", w[i - 1], " then ", w[i]);
  if (c.shape.empty()) fail("[controller] key 'aah.shape' is empty");
  // shape[r] is the branching factor that builds level r+1; only 2 (greedy pairing) is implemented.
  for (size_t i = 0; i + 1 < c.shape.size(); i++)
    if (c.shape[i] != 2)
      fail("[controller] key 'aah.shape': branching factor ", c.shape[i], " at level ", i,
           " is not supported (upper levels pair items: every entry but the last must be 2)");
  if (c.policy == WindowPolicy::fixed && c.fixed_window < 1)
    fail("[controller] key 'aah.fixed_window' must be >= 1 for regime '", c.regime, "' (fixed window policy)");
  if (c.pair_budget > 0 && c.policy != WindowPolicy::coverage && c.policy != WindowPolicy::copy &&
      c.policy != WindowPolicy::oracle)
    fail("[controller] key 'aah.pair_budget' applies to policies coverage, copy and oracle only, regime '", c.regime,
         "' has policy ", window_policy_name(c.policy));
  if (c.policy == WindowPolicy::copy && !(c.pair_budget > 0))
    fail("[controller] policy copy needs aah.pair_budget > 0 (the whole model's pair ratio), regime '", c.regime,
         "' (e.g. regime copy_budget_500)");
  if (c.policy == WindowPolicy::oracle && !(c.pair_budget > 0))
    fail("[controller] policy oracle needs aah.pair_budget > 0 (the whole model's pair ratio), regime '", c.regime,
         "' (e.g. regime oracle_budget_500)");
  if (c.copy_shuffle && c.policy != WindowPolicy::copy)
    fail("[controller] key 'aah.copy_shuffle' applies to policy copy only, regime '", c.regime, "' has policy ",
         window_policy_name(c.policy));
  if (c.use_statistic != UseStatistic::copy && c.policy != WindowPolicy::copy)
    fail("[controller] key 'aah.use_statistic' applies to policy copy only, regime '", c.regime, "' has policy ",
         window_policy_name(c.policy));
  if (c.copy_count != CopyCount::per_head && c.policy != WindowPolicy::copy)
    fail("[controller] key 'aah.copy_count' applies to policy copy only, regime '", c.regime, "' has policy ",
         window_policy_name(c.policy));
  if (c.copy_count == CopyCount::once && c.use_statistic != UseStatistic::copy)
    fail("[controller] key 'aah.copy_count=once' needs aah.use_statistic=copy (per-query copy use); regime '", c.regime,
         "' measures ", enum_name(kUseStatisticNames, c.use_statistic));
  if (c.copy_decay != ControllerConfig{}.copy_decay && c.policy != WindowPolicy::copy)
    fail("[controller] key 'aah.copy_decay' applies to policy copy only, regime '", c.regime, "' has policy ",
         window_policy_name(c.policy));
  if (c.coverage_tail < 1 && c.policy != WindowPolicy::coverage)
    fail("[controller] key 'aah.coverage_tail' applies to policy coverage only, regime '", c.regime, "' has policy ",
         window_policy_name(c.policy));
  if (!(c.eps > 0 && std::isfinite(c.eps))) fail("[controller] eps must be > 0, got ", c.eps);
  if (c.warmup_steps < 0) fail("[controller] warmup_steps (train.warmup_steps) must be >= 0");
}

std::string controller_knob_inert(const ControllerConfig& cfg, const std::string& key) {
  // Knobs of one policy's machinery (the others check themselves in controller_validate); at its default a knob is
  // no setting (a config.json written by aah lists every knob).
  static const struct {
    std::vector<std::string> keys;
    WindowPolicy policy;
  } kScopes[] = {
      {{"aah.feature_ema", "aah.resolution_ema", "aah.tau", "aah.lambda", "aah.shape", "aah.grouping",
        "aah.joint_scorer", "aah.parent_clamp", "aah.topology"},
       WindowPolicy::controller},
      {{"aah.fixed_window"}, WindowPolicy::fixed},
      {{"aah.coverage", "aah.coverage_sample", "aah.coverage_tail"}, WindowPolicy::coverage},
  };
  ControllerConfig c = cfg, defaults;
  const std::vector<ConfigField> now = controller_knobs(c), dflt = controller_knobs(defaults);
  bool at_default = false;
  for (size_t i = 0; i < now.size(); i++)
    if (now[i].key == key) at_default = field_json(now[i]) == field_json(dflt[i]);
  if (at_default) return "";
  for (const auto& scope : kScopes)
    if (cfg.policy != scope.policy && std::find(scope.keys.begin(), scope.keys.end(), key) != scope.keys.end())
      return str_cat("key '", key, "' applies to policy ", window_policy_name(scope.policy), " only; regime '",
                     cfg.regime, "' has policy ", window_policy_name(cfg.policy), ", where it would do nothing");
  return "";
}

nlohmann::json controller_config_to_json(const ControllerConfig& cfg) {
  ControllerConfig c = cfg;
  nlohmann::json j = {{"regime", c.regime}, {"eps", c.eps}, {"warmup_steps", c.warmup_steps}, {"seed", c.seed}};
  for (const ConfigField& f : controller_knobs(c)) j[f.key.substr(4)] = field_json(f);  // "aah.tau" -> "tau"
  return j;
}

}  // namespace aah
