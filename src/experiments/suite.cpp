#include "experiments/suite.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/process.h"
#include "core/sys.h"
#include "eval/retrieval.h"
#include "experiments/presets.h"
#include "experiments/report.h"
#include "data/corpus.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/synth.h"
#include "kernels/attention_common.h"
#include "model/config.h"

namespace aah {

namespace {

using json = nlohmann::json;

// The preset regimes that stand for a baseline matched to kMatchedTo's pair ratio (resolved while running).
constexpr const char* kFixedMatched = "fixed_matched";
constexpr const char* kCoverageMatched = "coverage_matched";
constexpr const char* kCopyMatched = "copy_matched";
constexpr const char* kMatchedTo = "full_adaptive";
bool is_matched(const std::string& regime) {
  return regime == kFixedMatched || regime == kCoverageMatched || regime == kCopyMatched;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("[suite] cannot find the aah binary (/proc/self/exe): ", std::strerror(errno));
  return std::string(buf, size_t(n));
}

struct Run {
  std::string regime;
  int seed = 0;
  std::string dir;
  int steps = 0;       // configured optimizer steps
  int done_steps = 0;  // at the last checkpoint
  bool evaluated = false;
  bool base = false;  // a pretrained start (SuitePreset::base), in OUT/base/
  int attempt = 0;    // a base: how many earlier starts did not retrieve (train.seed = seed + 1000 x attempt)
};

constexpr int kBaseRestartSeedStride = 1000;

// A base's failed attempt k (1, 2, ...): kept beside the base that replaced it.
std::string base_failed_dir(const std::string& base_dir, int k) { return base_dir + "-failed" + std::to_string(k); }

// The step of a run's last checkpoint (0 if none). A checkpoint that cannot be read is an error: the user decides.
int checkpoint_step(const std::string& dir) {
  const std::string path = dir + "/training_state.safetensors";
  if (!file_exists(path)) return 0;
  SafetensorsReader r(path);
  if (!r.metadata().count("step")) fail("[suite] ", path, ": no step in its metadata");
  return std::stoi(r.metadata().at("step"));
}

bool eval_done(const std::string& dir) {
  const std::string path = dir + "/eval.json";
  if (!file_exists(path)) return false;
  const json j = json::parse(read_file(path), nullptr, false);
  return j.is_object() && j.contains("val_loss");
}

// Parses "step 40/300 | ..." from a training progress line; false for other lines.
bool parse_step(const std::string& line, int* step) {
  int s = 0, n = 0;
  if (std::sscanf(line.c_str(), "step %d/%d", &s, &n) != 2) return false;
  *step = s;
  return true;
}

void prepare_data(const SuitePreset& p, const std::string& dir) {
  if (file_exists(dir + "/train.bin") && file_exists(dir + "/val.bin")) return;
  std::fprintf(stderr, "[suite] preparing the %s corpus in %s\n", p.data.c_str(), dir.c_str());
  if (p.data == "synth") {
    SynthOptions so = p.synth;
    so.vocab_size = p.data_vocab;
    synth_write(dir, so, /*force=*/true);
  } else if (p.data == "brown") {
    CorpusOptions co;
    co.out = dir;
    co.force = true;
    co.vocab_size = p.data_vocab;
    brown_write(co);
  } else if (p.data == "code") {  // the Python standard library, one document per .py file
    CorpusOptions co;
    co.out = dir;
    co.force = true;
    co.vocab_size = p.data_vocab;
    code_write(co);
  } else {
    fail("[suite] preset ", p.name, ": unknown data '", p.data, "'");
  }
}

// The final pair ratio of a finished run (its eval.json), NaN when it has none.
double final_pair_ratio(const std::string& dir) {
  const std::string path = dir + "/eval.json";
  const json j = read_json_file(path);
  if (!j.is_object() || !j.contains("pair_ratio") || !j["pair_ratio"].is_number())
    fail("[suite] ", path, ": no pair_ratio");
  return j["pair_ratio"].get<double>();
}

// Resolves a matched baseline (is_matched) from the mean final pair ratio of the suite's full_adaptive runs (all
// seeds, finished): "fixed_matched" -> fixed_window_W, W the fixed window of the closest pair ratio;
// "coverage_matched" -> coverage_budget_P, the coverage policy under the pair budget P / 1000 (spec section 10);
// "copy_matched" -> copy_budget_P, the copy-use policy under that budget (controller/copy_use.h).
// Recorded in suite.json: later reruns and added seeds use the same regime.
std::string resolve_matched(const std::string& name, json& suite, const std::string& suite_path,
                            const std::vector<Run>& runs, int T) {
  if (suite.contains("matched") && suite["matched"].contains(name))
    return suite["matched"][name]["regime"].get<std::string>();
  std::vector<double> ratios;
  json from = json::array();
  for (const Run& r : runs)
    if (r.regime == kMatchedTo) {
      if (!eval_done(r.dir)) fail("[suite] ", r.dir, ": ", name, " needs every ", kMatchedTo, " run finished first");
      ratios.push_back(final_pair_ratio(r.dir));
      from.push_back(r.dir.substr(r.dir.rfind('/') + 1));
    }
  double target = 0;
  for (double v : ratios) target += v / double(ratios.size());
  json m = {{"target_pair_ratio", target}, {"matched_to", kMatchedTo}, {"from", from}};
  if (name == kFixedMatched) {
    const int w = fixed_window_matching(T, target);
    m["regime"] = "fixed_window_" + std::to_string(w);
    m["window"] = w;
    m["pair_ratio"] = fixed_window_pair_ratio(T, w);
  } else {
    const int budget = std::max(1, int(std::lround(1000 * target)));  // thousandths
    m["regime"] = (name == kCopyMatched ? "copy_budget_" : "coverage_budget_") + std::to_string(budget);
    m["pair_budget"] = budget / 1000.0;
  }
  suite["matched"][name] = m;
  write_file_atomic(suite_path, suite.dump(2) + "\n");
  std::fprintf(stderr, "[suite] %s: %s matches %s's mean final pair ratio %.4f\n", name.c_str(),
               m["regime"].get<std::string>().c_str(), kMatchedTo, target);
  return m["regime"].get<std::string>();
}

// The finished runs' directory names (those with eval.json), sorted.
std::vector<std::string> finished_runs(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& n : list_dir(dir + "/runs"))
    if (path_exists(dir + "/runs/" + n + "/eval.json")) names.push_back(n);
  return names;
}

// DIR/timing.json: `aah bench maps` over the finished runs' final window maps (a child process: its memory is its
// own). Kept when it already timed the same runs.
int suite_timing(const std::string& dir, const std::string& exe, double budget_s) {
  const std::string path = dir + "/timing.json";
  const std::vector<std::string> names = finished_runs(dir);
  if (path_exists(path)) {
    const json old = json::parse(read_file(path), nullptr, false);
    if (old.is_object() && old.value("runs", json::array()) == json(names)) return 0;
  }
  std::fprintf(stderr, "[suite] timing every regime's final window map side by side (aah bench maps, ~%s)\n",
               format_duration(budget_s).c_str());
  std::string out;
  auto say = [&](const std::string& line) { std::fprintf(stderr, "[timing] %s\n", line.c_str()); };
  const int rc = process_run({exe, "bench", "maps", "--suite", dir, "--json", "--budget", str_cat(budget_s)},
                             {.output = &out, .on_stderr_line = say, .forward_signals = true});
  json t = json::parse(out, nullptr, false);
  if (rc != 0 || !t.is_object()) {
    std::fprintf(stderr, "[suite] %s: aah bench maps exited with %d\n", dir.c_str(), rc);
    return rc ? rc : 1;
  }
  t["runs"] = names;
  write_file_atomic(path, t.dump(2) + "\n");
  return 0;
}

}  // namespace

double fixed_window_pair_ratio(int T, int w) {
  return double(attn_visible_pairs(T, w)) / double(attn_visible_pairs(T, T));
}

int fixed_window_matching(int T, double target) {
  int best = 1;
  for (int w = 2; w <= T; w++)
    if (std::abs(fixed_window_pair_ratio(T, w) - target) < std::abs(fixed_window_pair_ratio(T, best) - target))
      best = w;
  return best;
}

double suite_eta_seconds(const SuiteEta& e) {
  if (e.runs_left <= 0) return e.tail_s;
  double per_run = 0;
  if (e.finished_runs > 0) {
    per_run = e.finished_seconds / e.finished_runs;
  } else if (e.current_fraction > 0) {
    per_run = e.current_seconds / e.current_fraction;
  } else {
    return NAN;
  }
  return per_run * (e.runs_left - e.current_fraction) + e.tail_s;
}

namespace {

// A run directory named after a regime holds that regime: a --set (the preset's or the user's) that changes a knob
// the regime itself sets is refused, naming both (copy_budget_500 with --set aah.pair_budget=0.3 is not
// copy_budget_500).
void check_sets_keep_regime(const std::string& regime, const std::vector<std::string>& sets) {
  const std::vector<std::string> owned = controller_regime_keys(regime);
  Config base;
  config_set(base, "aah.regime=" + regime);
  const nlohmann::json want = controller_config_to_json(controller_config_of(base));
  for (const std::string& s : sets) {
    const std::string key = s.substr(0, s.find('='));
    if (std::find(owned.begin(), owned.end(), key) == owned.end()) continue;
    Config c = base;
    config_set(c, s);
    const nlohmann::json got = controller_config_to_json(controller_config_of(c));
    const std::string k = key.substr(4);  // "aah.pair_budget" -> "pair_budget"
    if (got.value(k, nlohmann::json()) != want.value(k, nlohmann::json()))
      fail("[suite] --set ", s, " contradicts regime ", regime, ", which sets ", key, "=",
           want.value(k, nlohmann::json()).dump(), ": its runs would carry the regime's name but train something else; drop the --set, or name a regime ",
           "that says it (e.g. a _P or _N suffix, or a '+variant')");
  }
}

// The list without repeats, first occurrences kept; says on stderr what was collapsed.
template <class T>
std::vector<T> collapse_repeats(const std::vector<T>& v, const char* what) {
  std::vector<T> out;
  for (const T& x : v)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    else std::fprintf(stderr, "[suite] %s lists %s twice: it runs once\n", what, str_cat(x).c_str());
  return out;
}

// What differs between a suite's record (suite.json) and this invocation's, in words ("" when nothing that matters):
// the preset, the data, the assignments given to every run or to the bases (named one by one).
std::string suite_record_difference(const json& old, const json& now) {
  if (old.value("preset", json()) != now["preset"])
    return str_cat("preset ", old.value("preset", json()).dump(), ", this command ", now["preset"].dump());
  if (old.contains("data") && old["data"] != now["data"])
    return str_cat("data ", old["data"].dump(), ", this command ", now["data"].dump());
  for (const char* key : {"sets", "base_sets"}) {
    const json a = old.value(key, json::array()), b = now.value(key, json::array());
    if (a == b) continue;
    std::string only_old, only_new;
    for (const auto& x : a)
      if (std::find(b.begin(), b.end(), x) == b.end()) only_old += (only_old.empty() ? "" : ", ") + x.dump();
    for (const auto& x : b)
      if (std::find(a.begin(), a.end(), x) == a.end()) only_new += (only_new.empty() ? "" : ", ") + x.dump();
    return str_cat(key, ": the suite has ", only_old.empty() ? "nothing more" : only_old, ", this command ",
                   only_new.empty() ? "nothing more" : only_new,
                   only_old.empty() && only_new.empty() ? " (the same, in another order)" : "");
  }
  return "";
}

// One suite per directory at a time: an exclusive flock on OUT/.suite.lock while the suite runs (the kernel drops it
// when the process dies, so a killed suite never blocks its rerun).
class SuiteLock {
 public:
  explicit SuiteLock(const std::string& dir)
      : fd_(lock_file_exclusive(dir + "/.suite.lock", "[suite]",
                                str_cat(dir, ": another aah suite is running on this directory (", dir,
                                        "/.suite.lock is locked): wait for it to finish, or choose another --out"))) {}
  ~SuiteLock() { ::close(fd_); }
  SuiteLock(const SuiteLock&) = delete;
  SuiteLock& operator=(const SuiteLock&) = delete;

 private:
  int fd_ = -1;
};

// What a suite runs: the preset with the user's options applied, the settings of every run and of the bases, and
// what they come to (steps, context). Every configuration is checked here, before anything runs: a typo fails now,
// not after an hour.
struct SuitePlan {
  SuitePreset p;
  std::vector<std::string> sets;       // every regime run's: the preset's, then the user's
  std::vector<std::string> base_sets;  // the bases': the preset's, its base settings, then the user's (--set wins)
  int steps = 0, context = 0, base_steps = 0;
  double timing_budget_s = 0;
};

SuitePlan suite_plan(const SuiteOptions& o) {
  SuitePlan plan;
  SuitePreset& p = plan.p;
  p = suite_preset(o.preset);
  if (!o.regimes.empty()) p.regimes = collapse_repeats(o.regimes, "--regimes");
  if (!o.seeds.empty()) p.seeds = collapse_repeats(o.seeds, "--seeds");
  if (o.base_extend_steps >= 0) p.base_extend_steps = o.base_extend_steps;
  if (o.base_max_steps >= 0) p.base_max_steps = o.base_max_steps;
  if (o.base_restarts >= 0) p.base_restarts = o.base_restarts;
  plan.timing_budget_s = o.timing_budget_s >= 0 ? o.timing_budget_s : p.timing_budget_s;
  plan.sets = p.sets;
  plan.sets.insert(plan.sets.end(), o.sets.begin(), o.sets.end());
  plan.base_sets = p.sets;
  plan.base_sets.insert(plan.base_sets.end(), p.base_sets.begin(), p.base_sets.end());
  plan.base_sets.insert(plan.base_sets.end(), o.sets.begin(), o.sets.end());
  if (p.base) {
    Config cfg;
    for (const auto& s : plan.base_sets) config_set(cfg, s);
    config_validate(cfg);
    plan.base_steps = cfg.train.steps;
  }
  for (const auto& regime : p.regimes) {
    const bool matched = is_matched(regime);
    const auto position = [&](const std::string& g) { return std::find(p.regimes.begin(), p.regimes.end(), g); };
    if (matched && position(kMatchedTo) >= position(regime))
      fail("[suite] regime ", regime, " needs ", kMatchedTo, " before it in the regime list");
    Config cfg;
    config_set(cfg, "aah.regime=" + (!matched                   ? regime
                                     : regime == kFixedMatched ? std::string("fixed_window_1")
                                     : regime == kCopyMatched  ? std::string("copy_budget_500")
                                                               : std::string("coverage_budget_500")));
    for (const auto& s : plan.sets) config_set(cfg, s);
    config_validate(cfg);
    controller_config_of(cfg);
    if (!matched) check_sets_keep_regime(regime, plan.sets);
    plan.steps = cfg.train.steps, plan.context = cfg.train.context;
  }
  return plan;
}

// suite.json: what this suite is. A rerun must be the same preset with the same assignments (regimes and seeds
// may be added); otherwise finished runs would be silently mixed with differently configured ones. Returns the
// record as written (an earlier one's regimes, seeds and matched baselines kept).
json suite_record(const SuiteOptions& o, const SuitePlan& plan, const std::string& suite_path) {
  const SuitePreset& p = plan.p;
  json suite = {{"preset", p.name}, {"summary", p.summary}, {"sets", plan.sets}, {"regimes", p.regimes},
                {"seeds", p.seeds}, {"data", o.data.empty() ? p.data : o.data}};
  if (p.base) suite["base_sets"] = plan.base_sets;
  if (file_exists(suite_path)) {
    const json old = read_json_file(suite_path);
    if (!old.is_object()) fail("[suite] ", suite_path, ": not a JSON object (a suite's record)");
    const std::string differs = suite_record_difference(old, suite);
    if (!differs.empty())
      fail("[suite] ", suite_path, " records another suite: ", differs, ". Its finished runs would be mixed with "
           "differently configured ones: give the same --preset, --set and --data as before, or another --out to start "
           "afresh");
    for (const auto& r : old.value("regimes", json::array()))
      if (std::find(p.regimes.begin(), p.regimes.end(), r.get<std::string>()) == p.regimes.end())
        suite["regimes"].push_back(r);
    for (const auto& s : old.value("seeds", json::array()))
      if (std::find(p.seeds.begin(), p.seeds.end(), s.get<int>()) == p.seeds.end()) suite["seeds"].push_back(s);
    if (old.contains("matched")) suite["matched"] = old["matched"];
  }
  write_file_atomic(suite_path, suite.dump(2) + "\n");
  return suite;
}

std::string base_dir(const std::string& out, int seed) { return out + "/base/full-s" + std::to_string(seed); }

// The runs: one base per seed first (a pretrained start), then every regime x seed, each with what is on disk (an
// evaluation, a checkpoint's step, a base's failed attempts).
std::vector<Run> suite_runs(const SuiteOptions& o, const SuitePlan& plan, const json& suite) {
  const SuitePreset& p = plan.p;
  std::vector<Run> runs;
  for (int seed : p.base ? p.seeds : std::vector<int>{}) {
    Run r;
    r.regime = "full", r.seed = seed, r.steps = plan.base_steps, r.base = true, r.dir = base_dir(o.out, seed);
    while (dir_exists(base_failed_dir(r.dir, r.attempt + 1))) r.attempt++;
    r.evaluated = eval_done(r.dir);
    r.done_steps = r.evaluated ? r.steps : checkpoint_step(r.dir);
    runs.push_back(r);
  }
  for (const auto& regime : p.regimes)
    for (int seed : p.seeds) {
      Run r;
      r.regime = regime, r.seed = seed, r.steps = plan.steps;
      if (is_matched(regime) && suite.contains("matched") && suite["matched"].contains(regime))
        r.regime = suite["matched"][regime]["regime"].get<std::string>();
      r.dir = o.out + "/runs/" + r.regime + "-s" + std::to_string(seed);
      r.evaluated = !is_matched(r.regime) && eval_done(r.dir);
      r.done_steps = r.evaluated ? plan.steps : !is_matched(r.regime) ? checkpoint_step(r.dir) : 0;
      runs.push_back(r);
    }
  return runs;
}

// The synth retrieval accuracy by distance bucket of an evaluation, for the progress line ("" without).
std::string retrieval_summary(const json& ev) {
  std::string recall;
  if (ev.contains("retrieval") && ev["retrieval"].is_object())
    for (const auto& bk : ev["retrieval"].value("buckets", json::array()))
      if (bk.is_object() && bk.value("n", 0) > 0)
        recall += str_cat(recall.empty() ? ", retrieval " : " ", bk.value("lo", 0), bk["hi"].is_number() ? "-" : "+",
                          bk["hi"].is_number() ? str_cat(bk["hi"].get<int>() - 1) : "", ":",
                          int(std::lround(100 * bk.value("accuracy", 0.0))), "%");
  return recall;
}

// Runs a suite's runs as child processes (aah train, aah eval, aah probe heads), with progress and an ETA.
class SuiteRunner {
 public:
  SuiteRunner(const SuiteOptions& o, const SuitePlan& plan, std::vector<Run>& runs, std::string data)
      : o_(o), plan_(plan), runs_(runs), data_(std::move(data)), exe_(self_exe()) {
    for (const Run& r : runs_) total_steps_ += r.steps, left_steps_ += r.steps - r.done_steps;
    eta_.tail_s = plan.timing_budget_s;
    for (const Run& r : runs_) eta_.runs_left += r.evaluated ? 0 : weight(r);
  }
  int total_steps() const { return total_steps_; }
  int left_steps() const { return left_steps_; }
  const std::string& exe() const { return exe_; }

  // Every run not yet evaluated, in order: trains (a base until it retrieves), evaluates, writes eval.json.
  int run_all(json& suite, const std::string& suite_path) {
    const size_t bases = plan_.p.base ? plan_.p.seeds.size() : 0;  // base runs come first, one per seed
    for (size_t i = 0; i < runs_.size(); i++) {
      Run& r = runs_[i];
      if (is_matched(r.regime)) {
        const std::string name = r.regime;
        const std::string resolved = resolve_matched(name, suite, suite_path, runs_, plan_.context);
        for (Run& m : runs_)  // this seed and the others of the matched regime
          if (m.regime == name) {
            m.regime = resolved;
            m.dir = o_.out + "/runs/" + resolved + "-s" + std::to_string(m.seed);
            m.evaluated = eval_done(m.dir);
            m.done_steps = m.evaluated ? plan_.steps : checkpoint_step(m.dir);
          }
      }
      // Base runs are counted apart: "[base 1/3 s0]", then "[1/24 full s0]" ...
      const std::string tag = r.base ? str_cat("[base ", i + 1, "/", bases, " s", r.seed, "]")
                                     : str_cat("[", i + 1 - bases, "/", runs_.size() - bases, " ", r.regime, " s",
                                               r.seed, "]");
      if (r.evaluated) {
        std::fprintf(stderr, "%s finished earlier: skipped\n", tag.c_str());
        continue;
      }
      const double run_t0 = now_seconds();
      eta_.current_fraction = 0, eta_.current_seconds = 0;
      json ev;
      const bool checks = r.base && synth_is_corpus(data_);
      if (const int rc = checks ? train_base(r, tag, run_t0, ev) : train_and_evaluate(r, tag, run_t0, ev); rc != 0)
        return rc;
      write_file_atomic(r.dir + "/eval.json", ev.dump(2) + "\n");
      // A run resumed from a checkpoint counts as the share of a run it trained here.
      const double share = r.done_steps > 0 ? double(r.steps - r.done_steps) / r.steps : 1.0;
      eta_.finished_runs += share * weight(r), eta_.finished_seconds += now_seconds() - run_t0;
      eta_.runs_left -= weight(r);
      eta_.current_fraction = 0;
      std::fprintf(stderr, "%s val loss %.4f, inference ACR %.4f, pair ratio %.4f, %.0f tokens/s%s | suite ETA %s\n",
                   tag.c_str(), ev["val_loss"].get<double>(), ev["inference_acr"].get<double>(),
                   ev["pair_ratio"].get<double>(), ev["tokens_per_s"].get<double>(), retrieval_summary(ev).c_str(),
                   format_duration(suite_eta_seconds(eta_)).c_str());
    }
    return 0;
  }

 private:
  // ETA in units of one regime run: a base run counts as its steps / the regime runs' steps.
  double weight(const Run& r) const { return double(r.steps) / plan_.steps; }

  int train_and_evaluate(Run& r, const std::string& tag, double run_t0, json& ev) {
    if (const int rc = train(r, tag, run_t0); rc != 0) return rc;
    return evaluate(r, tag, ev);
  }

  // A base on synth data trains on until it retrieves at the farthest distance (base_extend_steps at a time, up to
  // base_max_steps; its steps are the first of base_steps + k x extend at or past its checkpoint, so a rerun
  // continues where it stopped); one that still does not starts again from a new initialization, its failed
  // attempt kept and evaluated, at most base_restarts times. Leaves the last evaluation in ev.
  int train_base(Run& r, const std::string& tag, double run_t0, json& ev) {
    const SuitePreset& p = plan_.p;
    const bool extends = p.base_extend_steps > 0;
    if (extends && r.done_steps > r.steps) {
      const int k = (r.done_steps - plan_.base_steps + p.base_extend_steps - 1) / p.base_extend_steps;
      const int target = std::min(p.base_max_steps, plan_.base_steps + k * p.base_extend_steps);
      total_steps_ += target - r.steps, left_steps_ += target - r.steps;
      r.steps = target;
    }
    auto far = [&] { return retrieval_far_accuracy(ev.value("retrieval", json())); };
    for (;;) {
      if (const int rc = train_and_evaluate(r, tag, run_t0, ev); rc != 0) return rc;
      while (extends && !(far() >= kRetrievalKept) && r.steps < p.base_max_steps) {
        const int more = std::min(p.base_extend_steps, p.base_max_steps - r.steps);
        std::fprintf(stderr, "%s retrieval at the farthest distance %.3f < %.2f after %d steps: training on to %d "
                     "(at most %d)\n", tag.c_str(), far(), kRetrievalKept, r.steps, r.steps + more, p.base_max_steps);
        r.done_steps = r.steps;
        r.steps += more, total_steps_ += more, left_steps_ += more;
        if (const int rc = train_and_evaluate(r, tag, run_t0, ev); rc != 0) return rc;
      }
      if (far() >= kRetrievalKept || r.attempt >= p.base_restarts) break;
      // Still no copy: start again from a new initialization; the failed attempt stays on disk, evaluated.
      write_file_atomic(r.dir + "/eval.json", ev.dump(2) + "\n");
      const std::string failed = base_failed_dir(r.dir, r.attempt + 1);
      rename_to_new(r.dir, failed);
      r.attempt++;
      std::fprintf(stderr, "%s retrieval at the farthest distance %.3f < %.2f after %d steps: kept as %s; starting "
                   "again from a new initialization (train.seed %d, restart %d of at most %d)\n", tag.c_str(), far(),
                   kRetrievalKept, r.steps, failed.c_str(), r.seed + kBaseRestartSeedStride * r.attempt, r.attempt,
                   p.base_restarts);
      total_steps_ += plan_.base_steps, left_steps_ += plan_.base_steps;
      r.done_steps = 0, r.steps = plan_.base_steps;
    }
    if (!(far() >= kRetrievalKept))
      std::fprintf(stderr, "%s still does not retrieve at the farthest distance after %d start(s): its runs are "
                   "reported, and the report counts only seeds whose base retrieves\n", tag.c_str(), r.attempt + 1);
    return 0;
  }

  // Trains r up to r.steps (resuming from its checkpoint, a base with its extended train.steps); 0 or the exit code.
  int train(Run& r, const std::string& tag, double run_t0) {
    if (r.done_steps >= r.steps) return 0;
    std::vector<std::string> argv = {exe_, "train", "--data", data_, "--out", r.dir};
    if (r.done_steps > 0) {
      argv.push_back("--resume");
      if (r.base) argv.insert(argv.end(), {"--set", "train.steps=" + std::to_string(r.steps)});
    } else {
      argv.push_back("--force");  // at most an unfinished start without a checkpoint: nothing to keep
      argv.insert(argv.end(), {"--set", "aah.regime=" + r.regime});  // first: a regime clears aah.* knobs
      for (const auto& s : r.base ? plan_.base_sets : plan_.sets) argv.insert(argv.end(), {"--set", s});
      argv.insert(argv.end(), {"--set", "train.seed=" + std::to_string(r.seed + kBaseRestartSeedStride * r.attempt)});
      if (plan_.p.base && !r.base) argv.insert(argv.end(), {"--set", "train.init_from=" + base_dir(o_.out, r.seed)});
    }
    std::fprintf(stderr, "%s %s %s\n", tag.c_str(), r.done_steps > 0 ? "resuming at step" : "training",
                 r.done_steps > 0 ? std::to_string(r.done_steps).c_str() : r.dir.c_str());
    int last = r.done_steps;
    const int first = r.done_steps;
    auto progress = [&](const std::string& line) {
      int s = 0;
      if (parse_step(line, &s)) {
        left_steps_ -= s - last;
        last = s;
        // Time per run from the runs finished here (training and evaluation); before the first, from this one.
        eta_.current_fraction = weight(r) * double(s - first) / std::max(1, r.steps - first);
        eta_.current_seconds = now_seconds() - run_t0;
        std::fprintf(stderr, "%s %s | suite %d%% ETA %s\n", tag.c_str(), line.c_str(),
                     int(100.0 * (total_steps_ - left_steps_) / total_steps_),
                     format_duration(suite_eta_seconds(eta_)).c_str());
      } else if (!line.empty()) {
        std::fprintf(stderr, "%s %s\n", tag.c_str(), line.c_str());
      }
    };
    // Ctrl-C reaches `aah train` (forwarded too), which checkpoints and exits 130; a rerun resumes.
    const int rc = process_run(argv, {.on_stderr_line = progress, .forward_signals = true});
    if (rc != 0)
      std::fprintf(stderr, "[suite] %s: aah train exited with %d%s\n", r.dir.c_str(), rc,
                   rc >= 128 ? "; rerun the same command to resume" : "");
    return rc;
  }

  // aah eval of r into ev (and, for a full run on synth data, aah probe heads into probe.json); 0 or an exit code.
  int evaluate(const Run& r, const std::string& tag, json& ev) {
    std::string out;
    auto say = [&](const std::string& line) { std::fprintf(stderr, "%s %s\n", tag.c_str(), line.c_str()); };
    const int rc = process_run({exe_, "eval", "--run", r.dir, "--data", data_, "--json"},
                               {.output = &out, .on_stderr_line = say, .forward_signals = true});
    ev = json::parse(out, nullptr, false);
    if (rc != 0 || !ev.is_object()) {
      std::fprintf(stderr, "[suite] %s: aah eval exited with %d\n", r.dir.c_str(), rc);
      return rc ? rc : 1;
    }
    // Which heads retrieve (synth data, full windows), for the report. Before eval.json: a rerun skips a run
    // that has one.
    if (r.regime == "full" && !r.base && synth_is_corpus(data_)) {
      std::string probe;
      const int prc = process_run({exe_, "probe", "heads", "--run", r.dir, "--data", data_, "--json"},
                                  {.output = &probe, .on_stderr_line = say, .forward_signals = true});
      const json pj = json::parse(probe, nullptr, false);
      if (prc >= 128) return prc;  // interrupted: a rerun evaluates and probes again
      if (prc == 0 && pj.is_object()) {
        write_file_atomic(r.dir + "/probe.json", pj.dump(2) + "\n");
      } else {  // e.g. no question fits the context: the report goes without the heads table
        std::fprintf(stderr, "[suite] %s: aah probe heads exited with %d; the report has no heads table\n",
                     r.dir.c_str(), prc);
      }
    }
    return 0;
  }

  const SuiteOptions& o_;
  const SuitePlan& plan_;
  std::vector<Run>& runs_;
  const std::string data_, exe_;
  int total_steps_ = 0, left_steps_ = 0;
  SuiteEta eta_;
};

}  // namespace

int suite_run(const SuiteOptions& o) {
  const SuitePlan plan = suite_plan(o);
  const SuitePreset& p = plan.p;
  dir_check_kind(o.out, DirKind::suite, "[suite]", "--out", o.force,
                 {"suite.json", "data", "base", "runs", "figures", "report.md", "report.html", "report.json",
                  "runs.csv", "summary.csv", "val_loss_time.csv", "loss_by_position.csv", "timing.json"});
  make_dirs(o.out);
  const SuiteLock lock(o.out);  // before suite.json is read or written
  const std::string suite_path = o.out + "/suite.json";
  json suite = suite_record(o, plan, suite_path);
  const std::string data = o.data.empty() ? o.out + "/data" : o.data;
  if (o.data.empty()) prepare_data(p, data);

  std::vector<Run> runs = suite_runs(o, plan, suite);
  SuiteRunner runner(o, plan, runs, data);
  const size_t bases = p.base ? p.seeds.size() : 0;
  std::fprintf(stderr, "[suite] %s: %zu runs (%zu regimes x %zu seeds), %d steps each; %d of %d steps left\n",
               p.name.c_str(), runs.size() - bases, p.regimes.size(), p.seeds.size(), plan.steps,
               runner.left_steps(), runner.total_steps());
  if (p.base)
    std::fprintf(stderr, "[suite] every run starts from its seed's full-attention base of %d steps (%s/base)\n",
                 plan.base_steps, o.out.c_str());
  const double t0 = now_seconds();
  if (const int rc = runner.run_all(suite, suite_path); rc != 0) return rc;
  std::fprintf(stderr, "[suite] all %zu runs finished (%s)\n", runs.size(),
               format_duration(now_seconds() - t0).c_str());
  if (plan.timing_budget_s > 0) {
    const int rc = suite_timing(o.out, runner.exe(), plan.timing_budget_s);
    if (rc != 0) return rc;
  }
  if (!o.no_report) report_write(o.out);
  return 0;
}

}  // namespace aah
