// Training loop: loss falls on learnable data, resume continues bit-identically, config errors name the key.
#include <gtest/gtest.h>

#include "helpers.h"
#include <stdlib.h>

#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/synth.h"
#include "kernels/bf16/bf16.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/optimizer.h"
#include "train/train.h"

namespace aah {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/aah_train_XXXXXX";
  return mkdtemp(tmpl);
}

Config tiny_config() {
  Config c = test::tiny_train_config();
  TrainConfig& t = c.train;
  t.steps = 40;
  t.warmup_steps = 5;
  t.log_interval = 5;
  t.eval_interval = 20;
  return c;
}

const std::string& make_data() { return test::tiny_synth_dir(); }

std::vector<nlohmann::json> read_metrics(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Train, LossFallsOnLearnableData) {
  TrainOptions o;
  o.data_dir = make_data();
  o.out_dir = temp_dir();
  o.config = tiny_config();
  o.quiet = true;
  ASSERT_EQ(train_run(o), 0);
  auto m = read_metrics(o.out_dir);
  ASSERT_GE(m.size(), 8u);
  const double first = m.front()["loss"], last = m.back()["loss"];
  EXPECT_GT(first, std::log(128.0) - 0.5);  // starts near uniform
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  EXPECT_TRUE(m.back().contains("val_loss"));
  EXPECT_LT(m.back()["val_loss"].get<double>(), first - 1.0);
}

// The model.safetensors of two run directories hold the same tensors, bit for bit.
void expect_same_weights(const std::string& run_a, const std::string& run_b) {
  SafetensorsReader ra(run_a + "/model.safetensors"), rb(run_b + "/model.safetensors");
  ASSERT_EQ(ra.tensors().size(), rb.tensors().size());
  for (const auto& t : ra.tensors()) {
    std::vector<float> wa(t.numel()), wb(t.numel());
    ra.read_f32(t.name, wa.data(), t.shape);
    rb.read_f32(t.name, wb.data(), t.shape);
    EXPECT_EQ(0, std::memcmp(wa.data(), wb.data(), wa.size() * 4)) << t.name;
  }
}

// Interrupted after step 7, resumed: the same losses and the same final weights, bit for bit.
void expect_resume_bit_identical(const Config& cfg) {
  TrainOptions a;
  a.data_dir = make_data();
  a.out_dir = temp_dir();
  a.config = cfg;
  a.quiet = true;
  ASSERT_EQ(train_run(a), 0);

  TrainOptions b = a;
  b.out_dir = temp_dir();
  b.stop_after = 7;  // interrupted after step 7
  ASSERT_EQ(train_run(b), 0);
  EXPECT_EQ(read_metrics(b.out_dir).size(), 7u);
  TrainOptions c = b;
  c.stop_after = 0;
  c.resume = true;
  ASSERT_EQ(train_run(c), 0);

  auto ma = read_metrics(a.out_dir), mb = read_metrics(b.out_dir);
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); i++) {
    EXPECT_EQ(ma[i]["step"], mb[i]["step"]);
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << ma[i]["step"];
    EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>());
    EXPECT_EQ(ma[i]["window_fractions"], mb[i]["window_fractions"]);
  }
  expect_same_weights(a.out_dir, b.out_dir);  // final weights bit for bit
}

Config resume_config(const std::string& regime) {
  Config cfg = tiny_config();
  cfg.train.steps = 16;
  config_set(cfg, "aah.regime=" + regime);
  config_set(cfg, "aah.control_interval=3");
  cfg.train.log_interval = 1;
  return cfg;
}

class TrainResume : public ::testing::TestWithParam<std::string> {};

// For plain attention and for controller regimes (whose state, windows and diagnostics are checkpointed too).
TEST_P(TrainResume, IsBitIdentical) {
  expect_resume_bit_identical(resume_config(GetParam()));
}

// In bf16 too (train.precision=bf16: oneDNN's products are deterministic on one machine), with an adaptive regime.
TEST(TrainResume, IsBitIdenticalInBf16) {
  std::string isa;
  if (!bf16::cpu_supported(&isa)) GTEST_SKIP() << "this CPU has no bf16 matrix instructions (" << isa << ")";
  Config cfg = resume_config("full_adaptive");
  cfg.train.precision = "bf16";
  expect_resume_bit_identical(cfg);
}

INSTANTIATE_TEST_SUITE_P(Regimes, TrainResume,
                         ::testing::Values("full", "full_adaptive", "shallow_freeze", "deep_reuse", "random_window",
                                           "coverage"));

std::vector<nlohmann::json> read_trace(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A coverage run (spec section 10): every update's trace holds the measured mass (H, K) per layer, non-decreasing
// in the window and exactly 1 at W = T; the decisions re-derive from it; the metrics log the measurement's time.
TEST(TrainRegimes, CoverageRunTraceRederives) {
  TrainOptions o;
  o.data_dir = make_data();
  o.out_dir = temp_dir();
  o.config = tiny_config();
  o.config.train.steps = 12;
  config_set(o.config, "aah.regime=coverage");
  config_set(o.config, "aah.coverage_sample=2");
  // A model this young attends almost uniformly: mass about 0.38, 0.6, 0.85, 1 within 8, 16, 32, 64 keys.
  config_set(o.config, "aah.coverage=0.8");
  o.trace_file = o.out_dir + "/trace.jsonl";
  o.quiet = true;
  ASSERT_EQ(train_run(o), 0);
  const auto trace = read_trace(o.trace_file);
  ASSERT_EQ(trace.size(), 3u * 2);  // updates at steps 0, 5, 10; 2 layers
  bool shortened = false;
  for (const auto& t : trace) {
    EXPECT_EQ(t["policy"], "coverage");
    const std::vector<int> cand = t["windows_candidates"];
    ASSERT_EQ(cand, (std::vector<int>{8, 16, 32, 64}));
    ASSERT_EQ(t["mass"].size(), 4u);
    for (int h = 0; h < 4; h++) {
      const std::vector<double> m = t["mass"][h];
      for (int k = 1; k < 4; k++) EXPECT_GE(m[k], m[k - 1] - 1e-12);
      EXPECT_GT(m[0], 0.0);
      EXPECT_EQ(m[3], 1.0);
      int c = 3;
      for (int k = 3; k >= 0; k--)
        if (m[k] >= 0.8) c = k;
      EXPECT_EQ(t["head_choice"][h], c);
      const int ct = int(std::nearbyint(0.15 * int(t["resolution_prev"][h]) + 0.85 * c));
      EXPECT_EQ(t["resolution"][h], ct);
      EXPECT_EQ(t["windows"][h], cand[ct]);
      shortened |= ct < 3;
    }
  }
  EXPECT_TRUE(shortened) << "coverage never shortened a window";
  const auto m = read_metrics(o.out_dir);
  ASSERT_FALSE(m.empty());
  EXPECT_GT(m.front()["coverage_ms"].get<double>(), 0.0);
  EXPECT_TRUE(m.front().contains("coverage_time_share"));
}

// deep_reuse caches level 0 at the first control update at or after train.warmup_steps by default (spec section 7,
// revised): warmup 7, updates every 5 steps -> step 10; before it the trace says null and level 0 is recomputed.
TEST(TrainRegimes, DeepReuseCachesAfterWarmupByDefault) {
  TrainOptions o;
  o.data_dir = make_data();
  o.out_dir = temp_dir();
  o.config = tiny_config();
  o.config.train.steps = 16;
  o.config.train.warmup_steps = 7;
  config_set(o.config, "aah.regime=deep_reuse");
  o.trace_file = o.out_dir + "/trace.jsonl";
  o.quiet = true;
  ASSERT_EQ(train_run(o), 0);
  for (const auto& t : read_trace(o.trace_file)) {
    const int step = t["step"];
    if (step < 10) {
      EXPECT_TRUE(t["level0_cache_step"].is_null()) << step;
      EXPECT_EQ(t["topology"], "recomputed");
    } else {
      EXPECT_EQ(t["level0_cache_step"], 10) << step;
      EXPECT_EQ(t["topology"], step == 10 ? "recomputed" : "level0_cached") << step;
    }
  }
  const nlohmann::json cfg = nlohmann::json::parse(read_file(o.out_dir + "/config.json"));
  EXPECT_EQ(cfg["aah"]["reuse_cache_step"], 7);  // resolved from train.warmup_steps
}

// control_off keeps full windows and must train exactly like the full regime; full_adaptive really moves windows.
TEST(TrainRegimes, ControlOffEqualsFullAndAdaptiveShortensWindows) {
  auto run = [](const std::string& regime) {
    TrainOptions o;
    o.data_dir = make_data();
    o.out_dir = temp_dir();
    o.config = tiny_config();
    o.config.train.steps = 12;
    o.config.train.log_interval = 1;
    config_set(o.config, "aah.regime=" + regime);
    o.quiet = true;
    EXPECT_EQ(train_run(o), 0);
    return read_metrics(o.out_dir);
  };
  auto full = run("full"), off = run("control_off"), adaptive = run("full_adaptive");
  ASSERT_EQ(full.size(), off.size());
  for (size_t i = 0; i < full.size(); i++) {
    EXPECT_EQ(full[i]["loss"].get<double>(), off[i]["loss"].get<double>());
    EXPECT_EQ(off[i]["attn_ratio"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(off[i]["attn_work_ratio"].get<double>(), 1.0);  // the kernel's own count vs full windows
    EXPECT_DOUBLE_EQ(off[i]["pair_ratio"].get<double>(), 1.0);
  }
  // ACR as logged agrees with the logged window fractions: sum_W f_W W / T
  double min_acr = 1;
  for (auto& m : adaptive) {
    double acr = 0;
    for (auto& [w, f] : m["window_fractions"].items()) acr += f.get<double>() * std::stod(w) / 64.0;
    EXPECT_NEAR(acr, m["attn_ratio"].get<double>(), 1e-12);
    min_acr = std::min(min_acr, m["attn_ratio"].get<double>());
    // measured work follows the windows: never more than full, and at least the exact pairs
    EXPECT_LE(m["attn_work_ratio"].get<double>(), 1.0 + 1e-12);
    EXPECT_GE(m["attn_work_ratio"].get<double>(), m["pair_ratio"].get<double>() - 1e-12);
  }
  EXPECT_LT(min_acr, 1.0) << "the controller never shortened a window";
}

TEST(Train, RefusesToOverwriteARun) {
  TrainOptions o;
  o.data_dir = make_data();
  o.out_dir = temp_dir();
  o.config = tiny_config();
  o.config.train.steps = 1;
  o.quiet = true;
  ASSERT_EQ(train_run(o), 0);
  try {
    train_run(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
}

using aah::test::error_of;

// train.init_from: a run starts from another run's weights. With a learning rate of 1e-30 its one step changes
// nothing, so its final weights are the base's, bit for bit (and not a fresh initialization's). A base of another
// shape is refused, naming the key.
TEST(Train, InitFromStartsFromTheBaseWeights) {
  TrainOptions base;
  base.data_dir = make_data();
  base.out_dir = temp_dir();
  base.config = tiny_config();
  base.config.train.steps = 30;
  base.quiet = true;
  ASSERT_EQ(train_run(base), 0);

  TrainOptions o = base;
  o.out_dir = temp_dir();
  o.config.train.steps = 1, o.config.train.warmup_steps = 0;
  o.config.train.lr = 1e-30, o.config.train.min_lr = 0, o.config.train.weight_decay = 0;
  o.config.train.seed = 7;  // another initialization, overwritten by the base's weights
  config_set(o.config, "train.init_from=" + base.out_dir);
  ASSERT_EQ(train_run(o), 0);
  expect_same_weights(base.out_dir, o.out_dir);
  EXPECT_EQ(run_config_load(o.out_dir).train.init_from, base.out_dir);
  // The first step's loss is a trained model's, well below a fresh one's (about ln 128 = 4.85).
  EXPECT_LT(read_metrics(o.out_dir).front()["loss"].get<double>(), std::log(128.0) - 0.5);

  TrainOptions wide = o;
  wide.out_dir = temp_dir();
  wide.config.model.hidden_size = 96;
  const std::string e = error_of([&] { train_run(wide); });
  EXPECT_NE(e.find("hidden_size=64 but this run's has 96"), std::string::npos) << e;
  EXPECT_NE(e.find(base.out_dir + "/config.json"), std::string::npos) << e;
  TrainOptions missing = o;
  missing.out_dir = temp_dir();
  config_set(missing.config, "train.init_from=" + base.out_dir + "/nope");
  EXPECT_NE(error_of([&] { train_run(missing); }).find("nope: no such directory"), std::string::npos);
}

TEST(Config, ErrorsNameTheKey) {
  Config c;
  EXPECT_NE(error_of([&] { config_set(c, "train.lrr=1"); }).find("'train.lrr'"), std::string::npos);
  EXPECT_NE(error_of([&] { config_set(c, "hidden_size=abc"); }).find("'hidden_size'"), std::string::npos);
  EXPECT_NE(error_of([&] { config_set(c, "train.steps=1.5"); }).find("'train.steps'"), std::string::npos);
  EXPECT_NE(error_of([&] {
              config_apply_json(c, nlohmann::json::parse(R"({"train": {"warmup": 3}})"), "x.json");
            }).find("'train.warmup'"),
            std::string::npos);
  Config bad;
  bad.model.num_key_value_heads = 3;
  EXPECT_NE(error_of([&] { config_validate(bad); }).find("'num_key_value_heads'"), std::string::npos);
  Config bad2;
  config_set(bad2, "train.min_lr=1");
  EXPECT_NE(error_of([&] { config_validate(bad2); }).find("'train.min_lr'"), std::string::npos);
  // a valid set takes effect, lists parse
  config_set(c, "train.checkpoint_steps=[10,20]");
  EXPECT_EQ(c.train.checkpoint_steps, (std::vector<int>{10, 20}));
  config_set(c, "aah.attention=dense");
  EXPECT_EQ(c.aah.attention, "dense");
}

// A window covers at most the context: aah.fixed_window (knob or regime name) or a candidate window above
// train.context is an error naming the key and both numbers, whatever the policy; at the context it is fine.
TEST(Config, WindowsBeyondTheContextAreErrors) {
  auto err = [](const std::vector<std::string>& sets) {
    Config c;  // context 256
    for (const auto& s : sets) config_set(c, s);
    return error_of([&] { config_validate(c); });
  };
  EXPECT_NE(err({"aah.regime=fixed_window_300"}).find("key 'aah.fixed_window' = 300 is larger than train.context = 256"),
            std::string::npos);
  EXPECT_NE(err({"aah.regime=fixed_window", "aah.fixed_window=257"}).find("'aah.fixed_window' = 257"),
            std::string::npos);
  EXPECT_NE(err({"aah.regime=full", "aah.fixed_window=1000"}).find("'aah.fixed_window' = 1000"), std::string::npos);
  EXPECT_NE(err({"aah.regime=fixed_window_64", "train.context=32"}).find("= 64 is larger than train.context = 32"),
            std::string::npos);
  EXPECT_NE(err({"aah.windows=[32,512,256]"}).find("key 'aah.windows' has window 512, larger than train.context = 256"),
            std::string::npos);
  Config ok;
  config_set(ok, "aah.regime=fixed_window_256");
  config_validate(ok);
  EXPECT_EQ(controller_config_of(ok).fixed_window, 256);
}

// An evaluation of a text shorter than the context lowers it; the window knobs follow into the new context.
TEST(Config, LoweringTheContextKeepsWindowsWithinIt) {
  Config fixed;  // a fixed window above the new context becomes the context; one below it stays
  config_set(fixed, "aah.regime=fixed_window_64");
  config_lower_context(fixed, 20);
  config_validate(fixed);
  EXPECT_EQ(fixed.train.context, 20);
  EXPECT_EQ(controller_config_of(fixed).fixed_window, 20);
  Config fixed_small;
  config_set(fixed_small, "aah.regime=fixed_window_8");
  config_lower_context(fixed_small, 20);
  EXPECT_EQ(controller_config_of(fixed_small).fixed_window, 8);
  Config explicit_windows;  // explicit windows keep those below the context and end at it
  config_set(explicit_windows, "aah.regime=full_adaptive");
  config_set(explicit_windows, "aah.windows=[16,64,128,256]");
  config_lower_context(explicit_windows, 40);
  config_validate(explicit_windows);
  EXPECT_EQ(controller_config_of(explicit_windows).windows, (std::vector<int>{16, 40}));
  Config defaults;  // default windows follow the context: 40/8, /4, /2, /1
  config_set(defaults, "aah.regime=full_adaptive");
  config_lower_context(defaults, 40);
  EXPECT_EQ(controller_config_of(defaults).windows, (std::vector<int>{5, 10, 20, 40}));
}

TEST(Config, RoundTripsThroughConfigJson) {
  Config c;
  config_set(c, "hidden_size=96");
  config_set(c, "train.lr=0.00025");
  config_set(c, "tie_word_embeddings=false");
  nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(j["hidden_size"], 96);
  EXPECT_EQ(j["train"]["lr"], 0.00025);
  Config d;
  config_apply_json(d, j, "config.json");
  EXPECT_EQ(config_to_json(d), j);
}

// Every key is one table row: --help-config describes every key config.json holds, explicit knobs refine the regime
// and read back from config.json, a regime clears them, enum knobs take only their names.
TEST(Config, KeysAreDescribedAndKnobsRoundTrip) {
  Config c;
  config_set(c, "aah.regime=shallow_freeze");
  config_set(c, "aah.topology=reuse_level0");
  config_set(c, "aah.tau=0.9");
  config_set(c, "aah.windows=[8,64,256]");
  std::set<std::string> described;
  for (auto& [k, v] : config_describe(c)) described.insert(k);
  const nlohmann::json j = config_to_json(c);
  for (auto& [k, v] : j.items()) {
    if (v.is_object()) {
      for (auto& [k2, v2] : v.items()) EXPECT_TRUE(described.count(k + "." + k2)) << k << "." << k2;
    } else if (k != "architectures" && k != "model_type" && k != "torch_dtype" && k != "hidden_act" &&
               k != "attention_bias" && k != "max_position_embeddings") {
      EXPECT_TRUE(described.count(k)) << k;
    }
  }
  EXPECT_EQ(j["aah"]["topology"], "reuse_level0");
  EXPECT_EQ(j["aah"]["shape"], nlohmann::json({2}));  // from the regime
  EXPECT_EQ(j["aah"]["tau"], 0.9);
  EXPECT_EQ(j["aah"]["windows"], nlohmann::json({8, 64, 256}));
  Config d;
  config_apply_json(d, j, "config.json");
  EXPECT_EQ(config_to_json(d), j);
  EXPECT_EQ(controller_config_of(d).topology, TopologyMode::reuse_level0);
  config_set(c, "aah.regime=deep_reuse");
  EXPECT_EQ(controller_config_of(c).tau, 0.995);
  EXPECT_EQ(controller_config_of(c).windows, (std::vector<int>{32, 64, 128, 256}));
  EXPECT_NE(error_of([&] { config_set(c, "aah.policy=sometimes"); })
                .find("'aah.policy' must be one of controller, off, fixed, deterministic, random"),
            std::string::npos);
}

// A Hugging Face config.json: keys aah does not use are ignored, values that would change the model are refused.
TEST(Config, HuggingFaceKeys) {
  Config c;
  config_apply_json(c, nlohmann::json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "torch_dtype": "bfloat16", "dtype": "bfloat16", "max_position_embeddings": 40960, "rope_scaling": null,
      "sliding_window": null, "use_sliding_window": false, "attention_bias": false, "hidden_act": "silu",
      "head_dim": 128, "tie_word_embeddings": true})"), "config.json");
  EXPECT_EQ(c.model.head_dim, 128);
  EXPECT_EQ(c.train.context, 256);  // max_position_embeddings is the model's limit, not an evaluation context
  for (const char* bad : {R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", R"({"use_sliding_window": true})",
                          R"({"attention_bias": true})", R"({"hidden_act": "gelu"})"}) {
    const std::string key = nlohmann::json::parse(bad).begin().key();
    EXPECT_NE(error_of([&] { config_apply_json(c, nlohmann::json::parse(bad), "config.json"); }).find(key),
              std::string::npos)
        << bad;
  }
}

TEST(Schedule, WarmupThenCosine) {
  TrainConfig t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 10;
  t.steps = 110;
  EXPECT_DOUBLE_EQ(lr_at(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(t, 10), 1.0);
  EXPECT_NEAR(lr_at(t, 60), 0.55, 1e-12);  // halfway: (1 + 0.1) / 2
  EXPECT_NEAR(lr_at(t, 110), 0.1, 1e-12);
}

}  // namespace
}  // namespace aah
