// Data-parallel training over MPI (issue #9): `mpirun -np 2 aah train` with global batch B equals one process with
// batch B (losses and weights within 1e-6 relative, windows identical), resumes under another process count, and
// a rank killed mid-run ends the job with a clear message while the last checkpoint stays valid.
// The mpirun tests skip (with the reason) on a build without MPI or without mpirun; the feature combination they
// rely on is tested here without MPI.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "controller/features.h"
#include "helpers.h"
#include "dist/comm.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/synth.h"
#include "model/config.h"

namespace aah {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/aah_mpi_XXXXXX";
  return mkdtemp(tmpl);
}

// Features of a batch split in parts (each part's moments, combined) equal the features of the whole batch.
TEST(DistFeatures, CombinedMomentsEqualTheWholeBatch) {
  const int B = 6, H = 4, Hkv = 2, T = 16, D = 8;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.5f, 2.0f);
  auto fill = [&](std::vector<float>& x) {
    for (float& e : x) e = nd(gen) + 100.0f;  // a large common offset: the combination must not lose the variance
  };
  std::vector<float> q(size_t(B) * H * T * D), k(size_t(B) * Hkv * T * D), v(k.size());
  fill(q), fill(k), fill(v);
  double ent[H] = {1, 2, 3, 4}, onorm[H] = {5, 6, 7, 8}, usage[H] = {0.1, 0.2, 0.3, 0.4};
  std::vector<double> whole(size_t(H) * kControllerFeatures), split(whole.size());
  controller_head_features(whole.data(), q.data(), k.data(), v.data(), B, H, Hkv, T, D, ent, onorm, usage);
  for (int parts : {1, 2, 3}) {
    const int Bp = B / parts, heads = H + 2 * Hkv;
    std::vector<double> mom(size_t(parts) * heads * kMomentStats), all(size_t(heads) * kMomentStats);
    for (int p = 0; p < parts; p++)
      controller_head_moments(mom.data() + size_t(p) * heads * kMomentStats, q.data() + size_t(p) * Bp * H * T * D,
                              k.data() + size_t(p) * Bp * Hkv * T * D, v.data() + size_t(p) * Bp * Hkv * T * D, Bp, H,
                              Hkv, T, D);
    controller_moments_combine(all.data(), mom.data(), parts, heads);
    controller_features_from_moments(split.data(), all.data(), H, Hkv, ent, onorm, usage);
    for (size_t i = 0; i < whole.size(); i++)
      EXPECT_NEAR(split[i], whole[i], 1e-12 * std::max(1.0, std::fabs(whole[i]))) << "parts " << parts << " i " << i;
  }
}

TEST(DistComm, SingleProcessWithoutLauncher) {
  Comm& c = comm_world();
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  double x[2] = {1, 2}, all[2];
  c.allreduce_sum(x, 2);
  c.allgather(x, 2, all);
  EXPECT_EQ(all[0], 1);
  EXPECT_EQ(all[1], 2);
}

// ---- mpirun tests ----

const char* kMpirun =
    "mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader "
    "--mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1 ";

#define SKIP_WITHOUT_MPI()                                                                              \
  do {                                                                                                  \
    if (!comm_built_with_mpi()) GTEST_SKIP() << "aah was built without MPI (cmake -DAAH_MPI=ON)";       \
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed"; \
  } while (0)

int sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

Config tiny_config(const std::string& regime) {
  Config c = test::tiny_train_config();
  TrainConfig& t = c.train;
  t.steps = 12;
  t.warmup_steps = 3;
  t.log_interval = 1;
  t.eval_interval = 6;
  // AdamW divides by sqrt(v) + eps: with the default eps (1e-8) a gradient element that nearly cancels to zero
  // gets a full-size step whose sign is float rounding, and the weights of two runs that sum the same gradient in
  // a different order (two ranks' halves, or one process with other micro-batches) then differ by up to ~1e-4
  // relative in a few elements. A larger eps keeps such elements from stepping, so the comparison measures the
  // data-parallel arithmetic; RoundingFloorWithDefaultEps checks the default eps against one process's own floor.
  c.train.adam_eps = 1e-4;
  config_set(c, "aah.regime=" + regime);
  config_set(c, "aah.control_interval=3");
  return c;
}

const std::string& data_dir() { return test::tiny_synth_dir(); }

// aah train with `np` processes (0: no mpirun) into `out`; extra arguments appended. Returns the exit code.
int train(int np, const Config& cfg, const std::string& out, const std::string& extra = "") {
  const std::string cfg_file = out + ".json";
  write_file_atomic(cfg_file, config_to_json(cfg).dump(2));
  std::string cmd = std::string(AAH_BINARY) + " train --quiet --data " + data_dir() + " --out " + out + " " + extra;
  if (extra.find("--resume") == std::string::npos) cmd += " --config " + cfg_file;
  cmd = np > 0 ? std::string(kMpirun) + "-np " + std::to_string(np) + " " + cmd : "OMP_NUM_THREADS=1 " + cmd;
  return sh(cmd + " >" + out + ".log 2>&1");
}

std::vector<nlohmann::json> read_metrics(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::max(std::fabs(a), std::fabs(b))); }

// Runs a and b agree: losses, grad norms and val losses within `tol` relative, every weight tensor within `tol`
// relative (||a - b|| / ||a||; no element off by more than 10 tol of the tensor's largest), the controller's
// integer state (windows, resolution EMA, groups, topology) identical.
// Largest per-tensor max |a - b| / max |a| over the weights of runs a and b.
double weight_difference(const std::string& a, const std::string& b) {
  SafetensorsReader ra(a + "/model.safetensors"), rb(b + "/model.safetensors");
  double worst = 0;
  for (const auto& t : ra.tensors()) {
    std::vector<float> wa(t.numel()), wb(t.numel());
    ra.read_f32(t.name, wa.data(), t.shape);
    rb.read_f32(t.name, wb.data(), t.shape);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < wa.size(); i++)
      diff = std::max(diff, double(std::fabs(wa[i] - wb[i]))), scale = std::max(scale, double(std::fabs(wa[i])));
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

void expect_same_run(const std::string& a, const std::string& b, double tol) {
  auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  ASSERT_GT(ma.size(), 0u);
  for (size_t i = 0; i < ma.size(); i++) {
    EXPECT_EQ(ma[i]["step"], mb[i]["step"]);
    EXPECT_LE(rel(ma[i]["loss"], mb[i]["loss"]), tol) << "step " << ma[i]["step"];
    EXPECT_LE(rel(ma[i]["grad_norm"], mb[i]["grad_norm"]), tol) << "step " << ma[i]["step"];
    EXPECT_EQ(ma[i]["window_fractions"], mb[i]["window_fractions"]) << "step " << ma[i]["step"];
    EXPECT_EQ(ma[i].contains("val_loss"), mb[i].contains("val_loss"));
    if (ma[i].contains("val_loss")) {
      EXPECT_LE(rel(ma[i]["val_loss"], mb[i]["val_loss"]), tol);
    }
  }
  SafetensorsReader ra(a + "/model.safetensors"), rb(b + "/model.safetensors");
  ASSERT_EQ(ra.tensors().size(), rb.tensors().size());
  for (const auto& t : ra.tensors()) {  // per tensor: relative error ||a - b|| / ||a||, and no outlier element
    std::vector<float> wa(t.numel()), wb(t.numel());
    ra.read_f32(t.name, wa.data(), t.shape);
    rb.read_f32(t.name, wb.data(), t.shape);
    double d2 = 0, a2 = 0, dmax = 0, amax = 0;
    for (size_t i = 0; i < wa.size(); i++) {
      const double d = double(wa[i]) - double(wb[i]);
      d2 += d * d, a2 += double(wa[i]) * wa[i];
      dmax = std::max(dmax, std::fabs(d)), amax = std::max(amax, std::fabs(double(wa[i])));
    }
    EXPECT_LE(std::sqrt(d2 / a2), tol) << t.name;
    EXPECT_LE(dmax / amax, 10 * tol) << t.name;
  }
  SafetensorsReader ca(a + "/controller_state.safetensors"), cb(b + "/controller_state.safetensors");
  int compared = 0;
  for (const auto& t : ca.tensors()) {
    if (t.dtype != "I32") continue;
    std::vector<int32_t> xa(t.numel()), xb(t.numel());
    ca.read_raw(t.name, "I32", xa.data(), t.shape);
    cb.read_raw(t.name, "I32", xb.data(), t.shape);
    EXPECT_EQ(xa, xb) << t.name;
    compared++;
  }
  EXPECT_GT(compared, 0);
}

class MpiTrain : public ::testing::TestWithParam<std::string> {};

// Two ranks with global batch 4 (2 sequences each) vs one process with batch 4.
TEST_P(MpiTrain, TwoRanksEqualOneProcess) {
  SKIP_WITHOUT_MPI();
  Config cfg = tiny_config(GetParam());
  if (GetParam() == "coverage") {  // 3 sampled sequences: 2 on rank 0, 1 on rank 1; a share a young model reaches
    config_set(cfg, "aah.coverage_sample=3");
    config_set(cfg, "aah.coverage=0.8");
  }
  const std::string one = temp_dir() + "/run", two = temp_dir() + "/run";
  ASSERT_EQ(train(0, cfg, one), 0) << read_file(one + ".log");
  ASSERT_EQ(train(2, cfg, two), 0) << read_file(two + ".log");
  expect_same_run(one, two, 1e-6);
  auto m = read_metrics(two);
  EXPECT_EQ(m.back()["ranks"], 2);
  EXPECT_GE(m.back()["allreduce_ms"].get<double>(), 0.0);
  if (GetParam() != "full") {  // the controller really moved windows (so identical windows mean something)
    double min_acr = 1;
    for (auto& x : m) min_acr = std::min(min_acr, x["attn_ratio"].get<double>());
    EXPECT_LT(min_acr, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Regimes, MpiTrain, ::testing::Values("full", "full_adaptive", "coverage"));

// With AdamW's default eps, two ranks differ from one process by no more than one process differs from itself when
// the same batch of 4 is run as 2 micro-batches of 2 (the same sums in another order): the rounding floor.
TEST(MpiTrainRounding, RoundingFloorWithDefaultEps) {
  SKIP_WITHOUT_MPI();
  Config cfg = tiny_config("full");
  cfg.train.adam_eps = 1e-8;
  Config split = cfg;
  split.train.batch_size = 2;
  split.train.grad_accum = 4;
  const std::string one = temp_dir() + "/run", two = temp_dir() + "/run", micro = temp_dir() + "/run";
  ASSERT_EQ(train(0, cfg, one), 0) << read_file(one + ".log");
  ASSERT_EQ(train(2, cfg, two), 0) << read_file(two + ".log");
  ASSERT_EQ(train(0, split, micro), 0) << read_file(micro + ".log");
  const double floor = weight_difference(one, micro), mpi = weight_difference(one, two);
  EXPECT_LE(mpi, 3 * floor + 1e-6) << "two ranks " << mpi << ", one process with micro-batches of 2: " << floor;
  auto ma = read_metrics(one), mb = read_metrics(two);
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); i++) EXPECT_LE(rel(ma[i]["loss"], mb[i]["loss"]), 1e-5) << i;
}

// Interrupted under 2 ranks (blocking all-reduce), resumed as one process: equals the uninterrupted single run.
TEST(MpiTrainResume, TwoRanksThenOneProcess) {
  SKIP_WITHOUT_MPI();
  const Config cfg = tiny_config("full_adaptive");
  const std::string one = temp_dir() + "/run", mixed = temp_dir() + "/run";
  ASSERT_EQ(train(0, cfg, one), 0) << read_file(one + ".log");
  ASSERT_EQ(train(2, cfg, mixed, "--stop-after 7 --allreduce blocking"), 0) << read_file(mixed + ".log");
  EXPECT_EQ(read_metrics(mixed).size(), 7u);
  ASSERT_EQ(train(0, cfg, mixed, "--resume"), 0) << read_file(mixed + ".log");
  expect_same_run(one, mixed, 1e-6);
}

// A batch that does not split over the ranks is refused with a clear message, and the job ends.
TEST(MpiTrainErrors, BatchMustSplit) {
  SKIP_WITHOUT_MPI();
  Config cfg = tiny_config("full");
  cfg.train.batch_size = 3;
  const std::string out = temp_dir() + "/run";
  EXPECT_NE(train(2, cfg, out), 0);
  EXPECT_NE(read_file(out + ".log").find("does not split over 2 processes"), std::string::npos)
      << read_file(out + ".log");
}

// The pid of the aah process of rank `rank` whose command line mentions `tag`, or 0.
pid_t find_rank(const std::string& tag, int rank) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline, environ;
    try {
      cmdline = read_file(e.path().string() + "/cmdline");
      environ = read_file(e.path().string() + "/environ");
    } catch (...) {
      continue;
    }
    if (cmdline.rfind(AAH_BINARY, 0) != 0 || cmdline.find(tag) == std::string::npos) continue;
    if (environ.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return pid_t(std::stoi(name));
  }
  return 0;
}

// Rank 1 killed (SIGKILL) mid-run: mpirun ends the job within seconds, non-zero, saying which rank died, and the
// last checkpoint rank 0 wrote loads and resumes.
TEST(MpiTrainFailure, KilledRankStopsTheJobAndTheCheckpointStaysValid) {
  SKIP_WITHOUT_MPI();
  Config cfg = tiny_config("full_adaptive");
  cfg.train.steps = 100000;
  cfg.train.checkpoint_interval = 3;
  cfg.train.eval_interval = 0;
  cfg.train.log_interval = 10;
  const std::string out = temp_dir() + "/run";
  std::thread job([&] { EXPECT_NE(train(2, cfg, out), 0); });
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  pid_t victim = 0;
  while (clock::now() - t0 < std::chrono::seconds(60)) {  // until a checkpoint or two exist
    if (file_exists(out + "/training_state.safetensors") && (victim = find_rank(out, 1)) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_NE(victim, 0) << "no checkpoint or no rank 1 within 60 s";
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto t_kill = clock::now();
  job.join();
  const double seconds = std::chrono::duration<double>(clock::now() - t_kill).count();
  EXPECT_LT(seconds, 15.0) << "the job did not end after a rank died";
  const std::string log = read_file(out + ".log");
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
  EXPECT_NE(log.find("signal 9"), std::string::npos) << log;
  // The checkpoint is whole: resuming it for one more step works.
  SafetensorsReader r(out + "/training_state.safetensors");
  int64_t counters[3];
  r.read_raw("counters", "I64", counters, {3});
  ASSERT_GT(counters[0], 0);
  cfg.train.steps = int(counters[0]) + 1;
  EXPECT_EQ(train(0, cfg, out, "--resume --set train.steps=" + std::to_string(counters[0] + 1)), 0)
      << read_file(out + ".log");
}

}  // namespace
}  // namespace aah
