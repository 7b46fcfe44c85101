// Hostile and careless input around the readers: where output goes (never through a device, FIFO or socket; a run,
// a corpus and a suite directory never become one another), what an input stream is (a FIFO or device is refused
// at once; standard input has a limit), command-line numbers (range-checked, the flag named), messages that name the
// right thing, and nothing created in a directory aah refuses. And the ease of use a careless user needs: --resume
// finds the run's data (and refuses other data), vocab_size follows the data, a window beyond the context is refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "controller/controller_config.h"
#include "core/process.h"
#include "experiments/report.h"
#include "helpers.h"
#include "formats/checksum.h"
#include "core/files.h"
#include "data/shard.h"
#include "data/synth.h"
#include "model/config.h"

namespace aah {
namespace {

using test::error_of;
using test::TempDir;
namespace fs = std::filesystem;

struct Result {
  int rc;
  std::string out;
};

// Runs a shell command line with the aah binary as $AAH (one OpenMP thread); stdout and stderr together.
Result sh(const std::string& cmd) {
  Result r;
  r.rc = process_run({"env", "OMP_NUM_THREADS=1", std::string("AAH=") + AAH_BINARY, "sh", "-c", cmd}, {.output = &r.out});
  return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A small synth corpus (vocabulary 96) and a 6-step run on it, made once.
struct Fixture {
  TempDir dir{"robust"};
  std::string data = dir.path + "/data", run = dir.path + "/run";
  Fixture() {
    SynthOptions so;
    so.tokens = 20000;
    so.vocab_size = 96;
    so.doc_tokens = 128;
    so.keys = 8;
    so.min_distance = 4;
    so.max_distance = 24;
    synth_write(data, so);
    const Result r = sh("$AAH train --quiet --data " + data + " --out " + run + " " + small_model());
    EXPECT_EQ(r.rc, 0) << r.out;
  }
  // vocab_size 128 > the tokenizer's 96 ids: generate must never emit one it cannot decode.
  static std::string small_model() {
    return "--set hidden_size=32 --set intermediate_size=64 --set num_hidden_layers=1 --set num_attention_heads=2 "
           "--set num_key_value_heads=1 --set head_dim=16 --set vocab_size=128 --set train.context=32 "
           "--set train.batch_size=2 --set train.steps=6 --set train.eval_windows=2 --set train.log_interval=2";
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

TEST(Robustness, OutputPathsNeverWriteThroughDevicesFifosOrSockets) {
  TempDir d("robust_out");
  const std::string fifo = d.path + "/fifo", dev_link = d.path + "/null-link";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("/dev/null", dev_link);
  std::string msg = error_of([&] { write_file_atomic(fifo, "x"); });
  EXPECT_TRUE(has(msg, fifo) && has(msg, "FIFO")) << msg;
  EXPECT_TRUE(fs::is_fifo(fifo));
  msg = error_of([&] { write_file_atomic(dev_link, "x"); });
  EXPECT_TRUE(has(msg, "character device") && has(msg, "a link to /dev/null")) << msg;
  EXPECT_TRUE(fs::is_symlink(dev_link));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  msg = error_of([&] { write_file_atomic(d.path, "x"); });
  EXPECT_TRUE(has(msg, "directory")) << msg;

  // The command line: tokenizer train onto a device (through a link) or a FIFO is refused, nothing replaced.
  const std::string text = d.file("in.txt", "hello world hello there\n");
  for (const std::string& out : {dev_link, fifo}) {
    const Result r = sh("$AAH tokenizer train --in " + text + " --out " + out + " --vocab 300 --force");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_TRUE(has(r.out, out) && has(r.out, "aah writes only regular files")) << r.out;
  }
  EXPECT_TRUE(fs::is_symlink(dev_link) && fs::is_fifo(fifo) && fs::is_character_file("/dev/null"));
}

TEST(Robustness, RunCorpusAndSuiteDirectoriesNeverBecomeAnother) {
  Fixture& f = fixture();
  const std::string tok_before = read_file(f.data + "/tokenizer.json");
  // train --out onto a corpus: refused even with --force; the corpus's tokenizer is untouched.
  Result r = sh("$AAH train --quiet --force --data " + f.data + " --out " + f.data + " " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "--out " + f.data + " is a corpus directory")) << r.out;
  EXPECT_EQ(read_file(f.data + "/tokenizer.json"), tok_before);
  EXPECT_FALSE(path_exists(f.data + "/.lock"));
  // data synth --out onto a run, with --force: refused, the run's files stay.
  const std::string config_before = read_file(f.run + "/config.json");
  r = sh("$AAH data synth --out " + f.run + " --tokens 5000 --force");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "is a run directory")) << r.out;
  EXPECT_EQ(read_file(f.run + "/config.json"), config_before);
  EXPECT_FALSE(path_exists(f.run + "/train.bin"));
  // suite --out onto a corpus or a run: refused.
  for (const std::string& dir : {f.data, f.run}) {
    r = sh("$AAH suite --preset smoke --out " + dir);
    EXPECT_NE(r.rc, 0);
    EXPECT_TRUE(has(r.out, "[suite] --out " + dir + " is a")) << r.out;
    EXPECT_FALSE(path_exists(dir + "/suite.json"));
  }
  // --out that is a plain file says so.
  TempDir d("robust_file");
  const std::string plain = d.file("plain.txt", "x");
  r = sh("$AAH train --quiet --data " + f.data + " --out " + plain + " " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, plain + " is a file, not a directory")) << r.out;
  // A directory of someone else's files: refused without --force; with it, refused still where a file of aah's would
  // replace one of theirs (config.json), and accepted beside files it does not write (notes.txt).
  const std::string mine = d.file("mine/config.json", "{\"mine\": 1}");
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/mine " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "is a directory of other files that aah did not make")) << r.out;
  r = sh("$AAH train --quiet --force --data " + f.data + " --out " + d.path + "/mine " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "holds config.json, which aah did not write")) << r.out;
  EXPECT_EQ(read_file(mine), "{\"mine\": 1}");
  const std::string notes = d.file("beside/notes.txt", "keep");
  r = sh("$AAH train --quiet --force --data " + f.data + " --out " + d.path + "/beside " + Fixture::small_model() +
         " --set train.steps=2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(read_file(notes), "keep");
  // Suites: an empty --out, the root directory, a directory of the user's own report and figures (even with --force:
  // report.md would be replaced), a suite inside a run directory (its --resume would remove it), a corpus inside one.
  for (const std::string& out : {std::string("''"), std::string("/")}) {
    r = sh("$AAH suite --preset smoke --out " + out);
    EXPECT_NE(r.rc, 0) << out;
    EXPECT_TRUE(has(r.out, out == "/" ? "that aah did not make" : "--out is empty")) << r.out;
  }
  EXPECT_FALSE(path_exists("/suite.json"));
  const std::string report = d.file("results/report.md", "my report");
  d.file("results/figures/val_loss.svg", "<svg/>");
  r = sh("$AAH suite --preset smoke --out " + d.path + "/results");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "that aah did not make")) << r.out;
  r = sh("$AAH suite --preset smoke --force --out " + d.path + "/results");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "holds figures, which aah did not write")) << r.out;
  EXPECT_EQ(read_file(report), "my report");
  EXPECT_FALSE(path_exists(d.path + "/results/suite.json"));
  for (const std::string& inside : {f.run + "/checkpoint/suite", f.run + "/sub"}) {
    r = sh("$AAH suite --preset smoke --out " + inside);
    EXPECT_NE(r.rc, 0);
    EXPECT_TRUE(has(r.out, "lies inside the run directory " + f.run)) << r.out;
    EXPECT_FALSE(path_exists(inside));
  }
  r = sh("$AAH data synth --tokens 5000 --out " + f.run + "/corpus");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "lies inside the run directory")) << r.out;
}

// aah report replaces only the files an earlier report wrote: a user's report.md or summary.csv in the suite
// directory stops it before it writes anything (report_owns_file, by title, keys and CSV header).
TEST(Robustness, ReportNeverReplacesAFileItDidNotWrite) {
  EXPECT_TRUE(report_owns_file("# aah suite report\n\nPreset `x`", "# aah suite report\n\nPreset `y`"));
  EXPECT_FALSE(report_owns_file("# My report\n", "# aah suite report\n\n"));
  EXPECT_FALSE(report_owns_file("", "# aah suite report\n"));
  EXPECT_TRUE(report_owns_file("regime,source,metric\n1,2,3\n", "regime,source,metric\n4,5,6\n"));
  EXPECT_FALSE(report_owns_file("a,b\n", "regime,source,metric\n"));
  // a report of an earlier aah, whose CSV had fewer columns, is still this suite's
  EXPECT_TRUE(report_owns_file("run,regime,seed,loss\n", "run,regime,seed,loss,nonfinite_steps\n"));
  EXPECT_FALSE(report_owns_file("run,notes\n", "run,regime,seed\n"));
  EXPECT_FALSE(report_owns_file("run\n", "run,regime,seed\n"));
  EXPECT_TRUE(report_owns_file(R"({"regimes": [], "runs": [], "suite": {}})", "{\n}"));
  EXPECT_FALSE(report_owns_file(R"({"mine": 1})", "{\n}"));
  EXPECT_FALSE(report_owns_file("<!DOCTYPE html><title>mine</title>", "<!DOCTYPE html>\n<title>aah suite report</title>"));
}

TEST(Robustness, InputStreamsAreRefusedAtOnceAndStdinHasALimit) {
  Fixture& f = fixture();
  TempDir d("robust_in");
  const std::string fifo = d.path + "/fifo", zero_link = d.path + "/zero";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", zero_link);
  // No writer ever opens the FIFO: a reader that waited would hang the test.
  std::string msg = error_of([&] { read_file(fifo); });
  EXPECT_TRUE(has(msg, fifo) && has(msg, "FIFO (named pipe), not a regular file")) << msg;
  msg = error_of([&] { read_file(zero_link); });
  EXPECT_TRUE(has(msg, "character device (a link to /dev/zero)")) << msg;
  msg = error_of([&] { ByteSource::file(fifo, "[shard]"); });
  EXPECT_TRUE(has(msg, "[shard] " + fifo) && has(msg, "FIFO")) << msg;

  // As shard, tokenizer, config and checkpoint file, through the command line.
  const std::string corpus = d.path + "/corpus";
  fs::create_directories(corpus);
  fs::copy_file(f.data + "/val.bin", corpus + "/val.bin");
  fs::copy_file(f.data + "/meta.json", corpus + "/meta.json");
  ASSERT_EQ(::mkfifo((corpus + "/train.bin").c_str(), 0644), 0);
  Result r = sh("$AAH train --quiet --data " + corpus + " --out " + d.path + "/r1 " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, corpus + "/train.bin") && has(r.out, "FIFO")) << r.out;
  EXPECT_FALSE(path_exists(d.path + "/r1")) << "a fresh run that failed before writing anything leaves no directory";
  fs::create_directories(d.path + "/r1-mine");  // ... and a directory it did not make stays, empty
  r = sh("$AAH train --quiet --data " + corpus + " --out " + d.path + "/r1-mine " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(fs::is_directory(d.path + "/r1-mine") && fs::is_empty(d.path + "/r1-mine"));
  r = sh("$AAH tokenize --tokenizer " + fifo + " --ids < /dev/null");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "FIFO")) << r.out;
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/r2 --config " + fifo);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "FIFO")) << r.out;
  // A run whose config.json is a FIFO: reported as what it is, not as missing.
  const std::string run = d.path + "/run";
  fs::create_directories(run);
  ASSERT_EQ(::mkfifo((run + "/config.json").c_str(), 0644), 0);
  r = sh("$AAH eval --run " + run + " --data " + f.data);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "FIFO") && !has(r.out, "no config.json")) << r.out;

  // Standard input: an endless stream stops at the limit with a clear error.
  r = sh("$AAH tokenize --tokenizer " + f.data + "/tokenizer.json --ids < /dev/zero");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "standard input: more than the limit")) << r.out;
}

TEST(Robustness, GenerateNumbersAreRangeCheckedAndNamed) {
  Fixture& f = fixture();
  const std::string base = "$AAH generate --run " + f.run + " --prompt '<doc> k1' ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--max-new -1", "--max-new"},       {"--max-new 0", "--max-new"},      {"--max-new 100000000", "--max-new"},
      {"--temperature nan", "--temperature"}, {"--temperature -1", "--temperature"}, {"--top-k -3", "--top-k"},
      {"--top-p nan", "--top-p"},          {"--top-p 0", "--top-p"},          {"--top-p 1.5", "--top-p"},
      {"--top-p -0.5", "--top-p"}};
  for (auto& [flags, named] : bad) {
    const Result r = sh(base + flags);
    EXPECT_NE(r.rc, 0) << flags << ": " << r.out;
    EXPECT_TRUE(has(r.out, named)) << flags << ": " << r.out;
  }
  // The model has 128 rows, the tokenizer 96 ids: a hot, long sample never emits an id it cannot decode.
  const Result r = sh(base + "--max-new 300 --temperature 20 --top-k 0 --top-p 1 --seed 9");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(has(r.out, "cannot decode")) << r.out;
}

TEST(Robustness, KnobValuesOutsideTheirMeaningAreErrorsNamingTheKey) {
  auto error_for = [](const std::vector<std::string>& sets) {
    return error_of([&] {
      Config c;
      for (auto& s : sets) config_set(c, s);
      config_validate(c);
    });
  };
  for (const char* tau : {"aah.tau=1.5", "aah.tau=-1.01"}) {
    const std::string msg = error_for({"aah.regime=full_adaptive", tau});
    EXPECT_TRUE(has(msg, "aah.tau")) << msg;
  }
  std::string msg = error_for({"train.steps=100", "train.checkpoint_steps=[50,200]"});
  EXPECT_TRUE(has(msg, "train.checkpoint_steps") && has(msg, "200") && has(msg, "past the last step")) << msg;
  // The parameter limit names the key that made the model large.
  msg = error_for({"vocab_size=9000000"});
  EXPECT_TRUE(has(msg, "'vocab_size'") && has(msg, "2B")) << msg;
  msg = error_for({"intermediate_size=2000000"});
  EXPECT_TRUE(has(msg, "'intermediate_size'")) << msg;
  // In range: accepted.
  Config ok;
  config_set(ok, "aah.tau=-1");
  config_set(ok, "train.checkpoint_steps=[1000]");
  config_validate(ok);
}

// What aah prints to its standard output (tables, Markdown references, token ids, text) must reach the file: a full
// device behind a redirection is an error naming the cause, not a short output with exit 0.
TEST(Robustness, AFullStandardOutputIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  Fixture& f = fixture();
  for (const std::string& cmd : std::vector<std::string>{"$AAH --help-config --markdown", "$AAH --help-regimes --markdown", "$AAH info",
                                "echo '5 6 7' | $AAH tokenize --text --tokenizer " + f.data + "/tokenizer.json"}) {
    const Result r = sh(cmd + " > /dev/full");
    EXPECT_NE(r.rc, 0) << cmd;
    EXPECT_TRUE(has(r.out, "writing the standard output failed") && has(r.out, "the disk is full")) << cmd << "\n"
                                                                                                   << r.out;
    EXPECT_EQ(sh(cmd + " > /dev/null").rc, 0) << cmd;
  }
}

// aah train: a knob the chosen policy never reads (given by --set or the --config file's "aah" block) is refused
// before anything is written; the same knob under its own policy trains.
TEST(Robustness, TrainRefusesKnobsThePolicyNeverReads) {
  Fixture& f = fixture();
  TempDir d("robust_inert");
  const std::string base = "$AAH train --quiet --data " + f.data + " " + Fixture::small_model() + " --out ";
  struct Case {
    std::string sets, key, policy;
  };
  for (const Case& c : {Case{"--set aah.regime=full --set aah.tau=0.5", "aah.tau", "off"},
                        Case{"--set aah.coverage_tail=0.02", "aah.coverage_tail", "off"},  // the default regime: full
                        Case{"--set aah.regime=coverage --set aah.tau=0.5", "aah.tau", "coverage"},
                        Case{"--set aah.regime=copy_budget_500 --set aah.fixed_window=8", "aah.fixed_window", "copy"},
                        Case{"--set aah.regime=fixed_window_8 --set aah.shape=[2]", "aah.shape", "fixed"}}) {
    const std::string out = d.path + "/r";
    const Result r = sh(base + out + " " + c.sets);
    EXPECT_NE(r.rc, 0) << c.sets;
    EXPECT_TRUE(has(r.out, "'" + c.key + "' applies to policy") && has(r.out, "has policy " + c.policy))
        << c.sets << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << c.sets;
  }
  d.file("cfg.json", R"({"aah": {"regime": "full_adaptive", "coverage": 0.9}})");
  Result r = sh(base + d.path + "/r --config " + d.path + "/cfg.json");
  EXPECT_TRUE(r.rc != 0 && has(r.out, "'aah.coverage'")) << r.out;
  // under their own policies: accepted
  r = sh(base + d.path + "/ok1 --set aah.regime=coverage --set aah.coverage=0.9");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = sh(base + d.path + "/ok2 --set aah.regime=full_adaptive --set aah.tau=0.5");
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(Robustness, RefusedResumeCreatesNothingAndEarlyKillsSayHowToGoOn) {
  Fixture& f = fixture();
  TempDir d("robust_resume");
  // --resume of a directory that is not a run: refused, nothing created in it.
  const std::string other = d.path + "/other";
  d.file("other/notes.txt", "mine");
  Result r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + other);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "not a run directory")) << r.out;
  EXPECT_EQ(list_dir(other), std::vector<std::string>{"notes.txt"});
  // A run stopped before its first checkpoint: --resume says to start again with --force, and so does a new start.
  const std::string early = d.path + "/early";
  fs::create_directories(early);
  write_file_atomic(early + "/config.json", read_file(f.run + "/config.json"));
  write_file_atomic(early + "/metrics.jsonl", "");
  r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + early);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "stopped before its first checkpoint") && has(r.out, "--force")) << r.out;
  r = sh("$AAH train --quiet --data " + f.data + " --out " + early + " " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "stopped before its first checkpoint") && has(r.out, "--force")) << r.out;
  r = sh("$AAH train --quiet --force --data " + f.data + " --out " + early + " " + Fixture::small_model());
  EXPECT_EQ(r.rc, 0) << r.out;
}

// metrics.jsonl without what depends on the clock or memory: one line per entry.
std::vector<std::string> metrics_without_timing(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* k : {"tokens_per_s", "peak_rss_mb", "elapsed_s", "allreduce_ms", "allreduce_share"}) j.erase(k);
    lines.push_back(j.dump());
  }
  return lines;
}

TEST(Robustness, ResumeLogsWhatAnUninterruptedRunLogs) {
  Fixture& f = fixture();
  TempDir d("robust_log");
  // Log every 3 steps, checkpoint every 4: resumes land inside a log window, whose average must still cover it all.
  const std::string model = Fixture::small_model() +
                            " --set train.steps=12 --set train.log_interval=3 --set train.checkpoint_interval=4 "
                            "--set aah.regime=full_adaptive --set aah.control_interval=2";
  Result r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/whole " + model);
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::vector<std::string> whole = metrics_without_timing(d.path + "/whole/metrics.jsonl");
  ASSERT_EQ(whole.size(), 4u);
  for (const int stop : {4, 5}) {  // 5: a stop checkpoint between the regular ones
    const std::string run = d.path + "/stopped" + std::to_string(stop);
    r = sh("$AAH train --quiet --data " + f.data + " --out " + run + " " + model + " --stop-after " +
           std::to_string(stop));
    ASSERT_EQ(r.rc, 0) << r.out;
    r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + run);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(metrics_without_timing(run + "/metrics.jsonl"), whole) << "stopped after step " << stop;
  }
}

TEST(Robustness, EvalRefusesAnUnreadableControllerState) {
  Fixture& f = fixture();
  TempDir d("robust_eval");
  const std::string run = d.path + "/run";
  fs::copy(f.run, run, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  Result r = sh("$AAH eval --run " + run + " --data " + f.data);
  ASSERT_EQ(r.rc, 0) << r.out;
  // A dangling link where the state was: an error naming it, not a silent re-decision.
  fs::remove(run + "/controller_state.safetensors");
  fs::create_symlink("checkpoint/none.safetensors", run + "/controller_state.safetensors");
  r = sh("$AAH eval --run " + run + " --data " + f.data);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "controller_state.safetensors")) << r.out;
  // Missing altogether: the same.
  fs::remove(run + "/controller_state.safetensors");
  r = sh("$AAH eval --run " + run + " --data " + f.data);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "controller_state.safetensors is missing")) << r.out;
}

// A copy of the fixture's corpus at `dir` whose tokenizer.json maps two words to each other's ids: the same
// vocabulary size, another tokenizer.
void copy_with_swapped_tokenizer(const std::string& from, const std::string& dir) {
  fs::copy(from, dir, fs::copy_options::recursive);
  nlohmann::json tok = nlohmann::json::parse(read_file(dir + "/tokenizer.json"));
  nlohmann::json& vocab = tok["model"]["vocab"];
  const int w0 = vocab["w0"].get<int>(), w1 = vocab["w1"].get<int>();
  vocab["w0"] = w1, vocab["w1"] = w0;
  write_file_atomic(dir + "/tokenizer.json", tok.dump(2) + "\n");
}

TEST(Robustness, ResumeFindsTheRunsDataAndRefusesOtherData) {
  Fixture& f = fixture();
  TempDir d("robust_data");
  const std::string run = d.path + "/run";
  Result r = sh("$AAH train --quiet --data " + f.data + " --out " + run + " " + Fixture::small_model() +
                " --stop-after 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  // data.json: where the data is (absolute), its vocabulary and the SHA-256 of its tokenizer.json.
  const nlohmann::json rec = nlohmann::json::parse(read_file(run + "/data.json"));
  EXPECT_EQ(rec["dir"], fs::absolute(f.data).string());
  EXPECT_EQ(rec["vocab_size"], 96);
  EXPECT_EQ(rec["vocab_from"], "tokenizer.json");
  EXPECT_EQ(rec["tokenizer_sha256"], sha256_hex(read_file(f.data + "/tokenizer.json")));

  // Another vocabulary (a corpus of 100 ids): refused, both vocabularies and both directories named.
  const std::string v100 = d.path + "/v100";
  SynthOptions so;
  so.tokens = 20000, so.vocab_size = 100, so.doc_tokens = 128, so.keys = 8, so.min_distance = 4, so.max_distance = 24;
  synth_write(v100, so);
  r = sh("$AAH train --quiet --resume --data " + v100 + " --out " + run);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "--data " + v100 + " has vocabulary 100") && has(r.out, f.data + " with vocabulary 96"))
      << r.out;
  // The same vocabulary size, another tokenizer: refused, the tokenizer named.
  const std::string swapped = d.path + "/swapped";
  copy_with_swapped_tokenizer(f.data, swapped);
  r = sh("$AAH train --quiet --resume --data " + swapped + " --out " + run);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "--data " + swapped + " has another tokenizer.json than " + f.data)) << r.out;
  // Nothing changed by the refusals: the run is still at step 2, its record unchanged.
  EXPECT_EQ(nlohmann::json::parse(read_file(run + "/data.json")), rec);
  EXPECT_EQ(list_dir(run + "/checkpoint").size(), 4u);
  EXPECT_EQ(read_link(run + "/checkpoint"), "ckpt-2");

  // Without --data: the recorded data, and the run ends as the uninterrupted fixture run (same settings) did.
  r = sh("$AAH train --quiet --resume --out " + run);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(metrics_without_timing(run + "/metrics.jsonl"), metrics_without_timing(f.run + "/metrics.jsonl"));
  EXPECT_EQ(read_file(run + "/model.safetensors"), read_file(f.run + "/model.safetensors"));
  // With the same --data given: accepted. With a copy elsewhere (the data moved): accepted, and recorded.
  r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + run + " --set train.steps=7");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string moved = d.path + "/moved";
  fs::copy(f.data, moved, fs::copy_options::recursive);
  r = sh("$AAH train --quiet --resume --data " + moved + "/ --out " + run + " --set train.steps=8");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(read_file(run + "/data.json"))["dir"], moved);
  // The recorded data gone: resume without --data names the path and says what to do.
  fs::remove_all(moved);
  r = sh("$AAH train --quiet --resume --out " + run + " --set train.steps=9");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "data directory " + moved + " (recorded in " + run + "/data.json) is gone") &&
              has(r.out, "give --data"))
      << r.out;
  // A run from before data.json: --data is needed, and it is checked against the run's copy of the tokenizer.
  fs::remove(run + "/data.json");
  r = sh("$AAH train --quiet --resume --out " + run + " --set train.steps=9");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "does not record its data directory") && has(r.out, "give --data DIR")) << r.out;
  r = sh("$AAH train --quiet --resume --data " + swapped + " --out " + run + " --set train.steps=9");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "another tokenizer.json than the run's data")) << r.out;
  r = sh("$AAH train --quiet --resume --data " + f.data + " --out " + run + " --set train.steps=9");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(read_file(run + "/data.json")), rec);  // recorded again
  // A new run still needs --data.
  r = sh("$AAH train --quiet --out " + d.path + "/new " + Fixture::small_model());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "--data DIR is required")) << r.out;
  EXPECT_FALSE(path_exists(d.path + "/new"));

  // The run's data regenerated in place with the same tokenizer (here: its shards swapped): resume without --data
  // refuses, naming the shard; the record holds both shards' SHA-256.
  const std::string own = d.path + "/own", run2 = d.path + "/run2";
  fs::copy(f.data, own, fs::copy_options::recursive);
  r = sh("$AAH train --quiet --data " + own + " --out " + run2 + " " + Fixture::small_model() + " --stop-after 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json rec2 = nlohmann::json::parse(read_file(run2 + "/data.json"));
  EXPECT_EQ(rec2["train_sha256"], sha256_hex(read_file(own + "/train.bin")));
  EXPECT_EQ(rec2["val_sha256"], sha256_hex(read_file(own + "/val.bin")));
  const std::string train_bytes = read_file(own + "/train.bin");
  write_file_atomic(own + "/train.bin", read_file(own + "/val.bin"));
  r = sh("$AAH train --quiet --resume --out " + run2);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(has(r.out, "has another train.bin now than when the run started on it") && has(r.out, "--force"))
      << r.out;
  write_file_atomic(own + "/train.bin", train_bytes);  // put back: it resumes
  r = sh("$AAH train --quiet --resume --out " + run2);
  EXPECT_EQ(r.rc, 0) << r.out;
}

// The fixture's model without vocab_size, one step.
std::string model_without_vocab() {
  std::string m = Fixture::small_model();
  m.erase(m.find("--set vocab_size=128 "), std::string("--set vocab_size=128 ").size());
  return m + " --set train.steps=1";
}

int run_vocab(const std::string& run) {
  return nlohmann::json::parse(read_file(run + "/config.json"))["vocab_size"].get<int>();
}

TEST(Robustness, VocabSizeDefaultsToTheDatasVocabulary) {
  Fixture& f = fixture();
  TempDir d("robust_vocab");
  // From the tokenizer (96 ids), not the default 8192.
  Result r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/tok " + model_without_vocab());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(run_vocab(d.path + "/tok"), 96);
  // A corpus of shards only (vocabulary 40 in their headers): from the shards; with a meta.json: from it.
  const std::string bare = d.path + "/bare";
  fs::create_directories(bare);
  std::vector<int32_t> ids(3000);
  for (size_t i = 0; i < ids.size(); i++) ids[i] = int32_t((i * 7 + i / 5) % 40);
  shard_write(bare + "/train.bin", ids, 40);
  shard_write(bare + "/val.bin", std::vector<int32_t>(ids.begin(), ids.begin() + 500), 40);
  r = sh("$AAH train --quiet --data " + bare + " --out " + d.path + "/bare-run " + model_without_vocab());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(run_vocab(d.path + "/bare-run"), 40);
  EXPECT_EQ(nlohmann::json::parse(read_file(d.path + "/bare-run/data.json"))["vocab_from"], "train.bin");
  EXPECT_TRUE(nlohmann::json::parse(read_file(d.path + "/bare-run/data.json"))["tokenizer_sha256"].is_null());
  write_file_atomic(bare + "/meta.json", R"({"vocab_size": 48})");
  r = sh("$AAH train --quiet --data " + bare + " --out " + d.path + "/meta-run " + model_without_vocab());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(run_vocab(d.path + "/meta-run"), 48);
  // Given by --set or --config: as given when it covers the data (larger is allowed)...
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/set " + model_without_vocab() +
         " --set vocab_size=100");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(run_vocab(d.path + "/set"), 100);
  const std::string cfg = d.file("cfg.json", R"({"vocab_size": 120})");
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/cfg --config " + cfg + " " +
         model_without_vocab());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(run_vocab(d.path + "/cfg"), 120);
  const std::string cfg_no_vocab = d.file("cfg2.json", R"({"hidden_size": 32})");
  r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/cfg2 --config " + cfg_no_vocab + " " +
         model_without_vocab());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(run_vocab(d.path + "/cfg2"), 96);
  // ... and an error naming both numbers when smaller than the tokenizer's vocabulary.
  for (const std::string& how : {std::string("--set vocab_size=95"), "--config " + d.file("c3.json", R"({"vocab_size": 95})")}) {
    r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/small " + how + " " + model_without_vocab());
    EXPECT_NE(r.rc, 0);
    EXPECT_TRUE(has(r.out, "vocab_size = 95 is smaller than the vocabulary of " + f.data + " (96, from its tokenizer.json)"))
        << r.out;
  }
}

TEST(Robustness, AWindowBeyondTheContextIsRefusedAndShortTextsStillEvaluate) {
  Fixture& f = fixture();
  TempDir d("robust_window");
  // Training: aah.fixed_window (by the knob or the regime's name) or a candidate window above train.context = 32.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--set aah.regime=fixed_window --set aah.fixed_window=33", "key 'aah.fixed_window' = 33 is larger than train.context = 32"},
      {"--set aah.regime=fixed_window_64", "key 'aah.fixed_window' = 64 is larger than train.context = 32"},
      {"--set aah.regime=full_adaptive --set aah.windows=[8,64,32]", "key 'aah.windows' has window 64, larger than train.context = 32"}};
  for (const auto& [sets, want] : cases) {
    const Result r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/w " + Fixture::small_model() +
                        " " + sets);
    EXPECT_NE(r.rc, 0) << sets;
    EXPECT_TRUE(has(r.out, want)) << r.out;
  }
  Result r = sh("$AAH train --quiet --data " + f.data + " --out " + d.path + "/w32 " + Fixture::small_model() +
                " --set aah.regime=fixed_window_32");
  EXPECT_EQ(r.rc, 0) << r.out;

  // Evaluation of a text shorter than the context (7 tokens -> context 6): a fixed window of 24 becomes the whole
  // text, so it equals a fixed window of 6 (and full attention); explicit windows end at the text's length.
  const std::string text = d.file("short.txt", "<doc> k1 k2 <ask> k1 w3 w4");
  auto eval_of = [&](const std::string& run, const std::string& sets) {
    const Result e = sh("$AAH eval --run " + run + " --text " + text + " --json " + sets + " 2>/dev/null");
    EXPECT_EQ(e.rc, 0) << e.out;
    return nlohmann::json::parse(e.out.substr(e.out.find('{')));
  };
  auto eval = [&](const std::string& sets) { return eval_of(f.run, sets); };
  const nlohmann::json w24 = eval("--set aah.regime=fixed_window_24"), w6 = eval("--set aah.regime=fixed_window_6");
  EXPECT_EQ(w24["context"], 6);
  EXPECT_EQ(w24["window_map"], nlohmann::json::parse("[[6, 6]]"));
  EXPECT_EQ(w24["val_loss"], w6["val_loss"]);
  EXPECT_EQ(w24["pair_ratio"], 1.0);
  const nlohmann::json adaptive = eval("--set aah.regime=full_adaptive --set aah.windows=[4,16,32]");
  EXPECT_EQ(adaptive["context"], 6);
  for (auto& [w, frac] : adaptive["window_fractions"].items()) EXPECT_TRUE(w == "4" || w == "6") << w;
  // A trained run under its own regime: its controller state is restored in its own context's terms (candidate
  // windows up to 32) and its windows run clamped to the text; fixed window 32 on 6 tokens is full attention.
  const nlohmann::json own = eval_of(d.path + "/w32", ""), as_full = eval_of(d.path + "/w32", "--set aah.regime=full");
  EXPECT_EQ(own["context"], 6);
  EXPECT_EQ(own["windows_decided_at_eval"], false);
  EXPECT_EQ(own["window_map"], nlohmann::json::parse("[[6, 6]]"));
  EXPECT_EQ(own["val_loss"], as_full["val_loss"]);
  const nlohmann::json own_adaptive = eval("");
  EXPECT_EQ(own_adaptive["windows_decided_at_eval"], false);
  for (const auto& row : own_adaptive["window_map"])
    for (const auto& w : row) EXPECT_LE(w.get<int>(), 6) << own_adaptive.dump();
}

}  // namespace
}  // namespace aah

namespace aah {
namespace {

// Meaningless values are refused with messages a person can read: NaN and infinity in float flags (CLI11's range
// checks let them through), a negative seed, regime parts that set one knob two ways.
TEST(Robustness, MeaninglessValuesAreRefused) {
  for (const std::string& cmd : {std::string("$AAH bench train --budget nan"), std::string("$AAH bench train --spread inf"),
                                 std::string("$AAH bench attention --min-sample -nan"),
                                 std::string("$AAH suite --preset smoke --out /tmp/never --timing-budget nan")}) {
    const Result r = sh(cmd);
    EXPECT_NE(r.rc, 0) << cmd;
    EXPECT_TRUE(has(r.out, "is not a finite number")) << cmd << ": " << r.out;
  }
  EXPECT_FALSE(path_exists("/tmp/never"));
  Config c;
  EXPECT_TRUE(has(error_of([&] {
    config_set(c, "train.seed=-5");
    config_validate(c);
  }), "train.seed")) << "a negative seed";
  for (const auto& [regime_name, msg] :
       {std::pair{"control_interval_5+control_interval_10",
                  "'control_interval_5' sets aah.control_interval=5 and 'control_interval_10' sets it to 10"},
        std::pair{"coverage+fixed_window", "'coverage' sets aah.policy=coverage and 'fixed_window' sets it to fixed"}}) {
    ControllerConfig cc;
    const std::string regime = regime_name;  // (clang: a lambda may not capture a structured binding)
    EXPECT_TRUE(has(error_of([&] { controller_apply_regime(cc, regime); }), msg)) << regime;
  }
  // Parts that agree combine as before.
  ControllerConfig ok;
  controller_apply_regime(ok, "copy_budget_500+copy_shuffled");
  EXPECT_TRUE(ok.copy_shuffle);
  controller_apply_regime(ok, "coverage_budget_500+coverage_tail_20");
  EXPECT_DOUBLE_EQ(ok.coverage_tail, 0.02);
}

}  // namespace
}  // namespace aah
