#include "experiments/suite.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/process.h"
#include "core/sys.h"
#include "experiments/presets.h"
#include "experiments/report.h"
#include "io/corpus.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/synth.h"
#include "model/config.h"

namespace aah {

namespace {

using json = nlohmann::json;

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
};

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
    SynthOptions so;
    so.tokens = p.synth_tokens;
    so.vocab_size = p.data_vocab;
    synth_write(dir, so, /*force=*/true);
  } else if (p.data == "brown") {
    CorpusOptions co;
    co.out = dir;
    co.force = true;
    co.vocab_size = p.data_vocab;
    brown_write(co);
  } else {
    fail("[suite] preset ", p.name, ": unknown data '", p.data, "'");
  }
}

}  // namespace

int suite_run(const SuiteOptions& o) {
  SuitePreset p = suite_preset(o.preset);
  if (!o.regimes.empty()) p.regimes = o.regimes;
  if (!o.seeds.empty()) p.seeds = o.seeds;
  std::vector<std::string> sets = p.sets;
  sets.insert(sets.end(), o.sets.begin(), o.sets.end());
  // Check every configuration before running anything: a typo fails now, not after an hour.
  int steps = 0;
  for (const auto& regime : p.regimes) {
    Config cfg;
    config_set(cfg, "aah.regime=" + regime);
    for (const auto& s : sets) config_set(cfg, s);
    config_validate(cfg);
    controller_config_of(cfg);
    steps = cfg.train.steps;
  }

  dir_check_kind(o.out, DirKind::suite, "[suite]", "--out");
  make_dirs(o.out);
  // suite.json: what this suite is. A rerun must be the same preset with the same assignments (regimes and seeds
  // may be added); otherwise finished runs would be silently mixed with differently configured ones.
  const std::string suite_path = o.out + "/suite.json";
  json suite = {{"preset", p.name}, {"summary", p.summary}, {"sets", sets}, {"regimes", p.regimes},
                {"seeds", p.seeds}, {"data", o.data.empty() ? p.data : o.data}};
  if (file_exists(suite_path)) {
    const json old = read_json_file(suite_path);
    if (!old.is_object() || old.value("preset", "") != p.name || old.value("sets", json::array()) != suite["sets"])
      fail("[suite] ", suite_path, " is a suite of preset '", old.value("preset", "?"),
           "' with other settings; give another --out (or the same --preset and --set as before)");
    for (const auto& r : old.value("regimes", json::array()))
      if (std::find(p.regimes.begin(), p.regimes.end(), r.get<std::string>()) == p.regimes.end())
        suite["regimes"].push_back(r);
    for (const auto& s : old.value("seeds", json::array()))
      if (std::find(p.seeds.begin(), p.seeds.end(), s.get<int>()) == p.seeds.end()) suite["seeds"].push_back(s);
  }
  write_file_atomic(suite_path, suite.dump(2) + "\n");

  const std::string data = o.data.empty() ? o.out + "/data" : o.data;
  if (o.data.empty()) prepare_data(p, data);

  std::vector<Run> runs;
  int total_steps = 0, left_steps = 0;
  for (const auto& regime : p.regimes)
    for (int seed : p.seeds) {
      Run r;
      r.regime = regime, r.seed = seed, r.steps = steps;
      r.dir = o.out + "/runs/" + regime + "-s" + std::to_string(seed);
      r.evaluated = eval_done(r.dir);
      r.done_steps = r.evaluated ? steps : checkpoint_step(r.dir);
      total_steps += steps;
      left_steps += steps - r.done_steps;
      runs.push_back(r);
    }
  std::fprintf(stderr, "[suite] %s: %zu runs (%zu regimes x %zu seeds), %d steps each; %d of %d steps left\n",
               p.name.c_str(), runs.size(), p.regimes.size(), p.seeds.size(), steps, left_steps, total_steps);

  const std::string exe = self_exe();
  const double t0 = now_seconds();
  int steps_here = 0;  // steps trained by this invocation (the ETA's rate)
  for (size_t i = 0; i < runs.size(); i++) {
    Run& r = runs[i];
    const std::string tag = str_cat("[", i + 1, "/", runs.size(), " ", r.regime, " s", r.seed, "]");
    if (r.evaluated) {
      std::fprintf(stderr, "%s finished earlier: skipped\n", tag.c_str());
      continue;
    }
    if (r.done_steps < r.steps) {
      std::vector<std::string> argv = {exe, "train", "--data", data, "--out", r.dir};
      if (r.done_steps > 0) {
        argv.push_back("--resume");
      } else {
        argv.push_back("--force");  // at most an unfinished start without a checkpoint: nothing to keep
        argv.insert(argv.end(), {"--set", "aah.regime=" + r.regime});  // first: a regime clears aah.* knobs
        for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
        argv.insert(argv.end(), {"--set", "train.seed=" + std::to_string(r.seed)});
      }
      std::fprintf(stderr, "%s %s %s\n", tag.c_str(), r.done_steps > 0 ? "resuming at step" : "training",
                   r.done_steps > 0 ? std::to_string(r.done_steps).c_str() : r.dir.c_str());
      int last = r.done_steps;
      auto progress = [&](const std::string& line) {
        int s = 0;
        if (parse_step(line, &s)) {
          steps_here += s - last;
          left_steps -= s - last;
          last = s;
          const double rate = steps_here / std::max(1e-9, now_seconds() - t0);
          std::fprintf(stderr, "%s %s | suite %d%% ETA %s\n", tag.c_str(), line.c_str(),
                       int(100.0 * (total_steps - left_steps) / total_steps),
                       format_duration(left_steps / std::max(1e-9, rate)).c_str());
        } else if (!line.empty()) {
          std::fprintf(stderr, "%s %s\n", tag.c_str(), line.c_str());
        }
      };
      // Ctrl-C reaches `aah train` (forwarded too), which checkpoints and exits 130; a rerun resumes.
      const int rc = process_run(argv, {.on_stderr_line = progress, .forward_signals = true});
      if (rc != 0) {
        std::fprintf(stderr, "[suite] %s: aah train exited with %d%s\n", r.dir.c_str(), rc,
                     rc >= 128 ? "; rerun the same command to resume" : "");
        return rc;
      }
    }
    std::string out;
    auto say = [&](const std::string& line) { std::fprintf(stderr, "%s %s\n", tag.c_str(), line.c_str()); };
    const int rc = process_run({exe, "eval", "--run", r.dir, "--data", data, "--json"},
                               {.output = &out, .on_stderr_line = say, .forward_signals = true});
    const json ev = json::parse(out, nullptr, false);
    if (rc != 0 || !ev.is_object()) {
      std::fprintf(stderr, "[suite] %s: aah eval exited with %d\n", r.dir.c_str(), rc);
      return rc ? rc : 1;
    }
    write_file_atomic(r.dir + "/eval.json", ev.dump(2) + "\n");
    std::fprintf(stderr, "%s val loss %.4f, inference ACR %.4f, pair ratio %.4f, %.0f tokens/s\n", tag.c_str(),
                 ev["val_loss"].get<double>(), ev["inference_acr"].get<double>(), ev["pair_ratio"].get<double>(),
                 ev["tokens_per_s"].get<double>());
  }
  std::fprintf(stderr, "[suite] all %zu runs finished (%s)\n", runs.size(), format_duration(now_seconds() - t0).c_str());
  if (!o.no_report) report_write(o.out);
  return 0;
}

}  // namespace aah
