#include "bench/bench_train.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "core/sys.h"
#include "model/model.h"
#include "model/window_policy.h"
#include "train/optimizer.h"

namespace aah {

double bench_sgemm_gflops(int M, int N, int K) {
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(N) * K, 0.25f), c(size_t(M) * N);
  std::vector<double> times;
  for (int r = 0; r < 7; r++) {
    const double t0 = now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    times.push_back(now_seconds() - t0);
  }
  std::sort(times.begin(), times.end());
  return 2.0 * M * N * K / times[times.size() / 2] / 1e9;
}

ModelConfig bench_c_model() {
  ModelConfig m;
  m.hidden_size = 256;
  m.intermediate_size = 704;
  m.num_hidden_layers = 4;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 8;
  m.head_dim = 32;
  m.vocab_size = 8192;
  return m;
}

namespace {

Config bench_c_config(const std::string& regime, int context) {
  Config cfg;
  cfg.model = bench_c_model();
  cfg.train.context = context;
  cfg.train.batch_size = std::max(1, 4096 / context);
  config_set(cfg, "aah.regime=" + regime);
  config_validate(cfg);
  return cfg;
}

struct StepTimes {
  double ms_per_step = 0;      // mean over the timed steps (control updates amortised)
  double attention_ms = 0;     // per step, inside the attention kernels
  double controller_ms = 0;    // per step, features + decisions, amortised
  double acr = 1, pair_ratio = 1;
  double peak_rss_mb = 0;
};

// Trains `steps` timed steps after `warm` untimed ones (the first touches every buffer; for AAH regimes the warm
// steps also let the controller's resolution EMA move the windows from full towards its choices).
StepTimes time_steps(const Config& cfg, int warm, int steps) {
  const int B = cfg.train.batch_size, T = cfg.train.context;
  Model<float> model(cfg.model, B, T);
  model.init_weights(0);
  WindowPolicyRunner policy(cfg, model);
  AdamW opt;
  opt.init(model);
  Rng rng(1);
  std::vector<int32_t> tokens(size_t(B) * T + 1);
  for (auto& t : tokens) t = int32_t(rng.below(cfg.model.vocab_size));
  auto step = [&](int s) {
    model.zero_grads();
    policy.begin_forward(s, true);
    model.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f);
    policy.end_forward();
    model.backward(tokens.data(), B, T);
    const double norm = global_norm(model.grads_data(), model.num_params()) / (B * T);
    opt.update(model.params_data(), model.grads_data(), model.num_params(), 1e-4, cfg.train,
               float(1.0 / (B * T) / std::max(1.0, norm)));
  };
  for (int s = 0; s < warm; s++) step(s);
  const double attn0 = model.attention_seconds, ctrl0 = policy.seconds(), t0 = now_seconds();
  for (int s = warm; s < warm + steps; s++) step(s);
  StepTimes r;
  r.ms_per_step = (now_seconds() - t0) * 1e3 / steps;
  r.attention_ms = (model.attention_seconds - attn0) * 1e3 / steps;
  r.controller_ms = (policy.seconds() - ctrl0) * 1e3 / steps;
  r.acr = policy.controller().acr();
  r.pair_ratio = policy.controller().exact_pair_ratio(T);
  r.peak_rss_mb = peak_rss_mb();
  return r;
}

}  // namespace

int bench_train(bool json, int steps, const std::string& regime, int context) {
  const Config full_cfg = bench_c_config("full", context);
  const ModelConfig& m = full_cfg.model;
  const int B = full_cfg.train.batch_size, T = full_cfg.train.context;
  const StepTimes full = time_steps(full_cfg, 1, steps);
  const double sgemm = bench_sgemm_gflops();
  // Model FLOPs per token: 6 x (matmul parameters) + attention: QK^T and PV are 2 x 2 x D flops per visible
  // pair forward, twice that backward; causal pairs average (T + 1) / 2 per query.
  const double C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads, D = m.head_dim;
  const double matmul_params =
      L * (C * (H + 2 * m.num_key_value_heads) * D + C * H * D + 3 * C * m.intermediate_size) +
      double(m.vocab_size) * C;
  const double flops_per_token = 6 * matmul_params + 3 * L * H * 4 * D * (T + 1) / 2.0;
  const double tok_s = B * T / (full.ms_per_step / 1e3);
  const double gflops = flops_per_token * tok_s / 1e9;
  nlohmann::json row = {{"config", "bench-c"},
                        {"regime", "full"},
                        {"context", T},
                        {"batch", B},
                        {"tokens_per_s", tok_s},
                        {"ms_per_step", full.ms_per_step},
                        {"attention_ms", full.attention_ms},
                        {"model_gflops", gflops},
                        {"sgemm_gflops", sgemm},
                        {"sgemm_share", gflops / sgemm},
                        {"peak_rss_mb", full.peak_rss_mb},
                        {"threads", num_threads()},
                        {"steps_timed", steps}};
  std::vector<nlohmann::json> rows = {row};
  if (regime != "full") {
    const Config cfg = bench_c_config(regime, context);
    // warm: enough control updates for the resolution EMA to settle (beta 0.15: a few updates)
    const int interval = controller_config_of(cfg).control_interval;
    const StepTimes r = time_steps(cfg, 6 * interval, std::max(steps, interval) / interval * interval);
    const double expected_ms = full.ms_per_step - full.attention_ms * (1 - r.pair_ratio);
    rows.push_back({{"config", "bench-c"},
                    {"regime", regime},
                    {"context", T},
                    {"batch", B},
                    {"tokens_per_s", B * T / (r.ms_per_step / 1e3)},
                    {"ms_per_step", r.ms_per_step},
                    {"attention_ms", r.attention_ms},
                    {"controller_ms", r.controller_ms},
                    {"controller_share", r.controller_ms / r.ms_per_step},
                    {"attn_ratio", r.acr},
                    {"pair_ratio", r.pair_ratio},
                    {"time_ratio", r.ms_per_step / full.ms_per_step},
                    {"attention_time_ratio", r.attention_ms / full.attention_ms},
                    {"expected_ms_per_step", expected_ms},
                    {"peak_rss_mb", r.peak_rss_mb},
                    {"threads", num_threads()}});
  }
  if (json) {
    for (auto& r : rows) std::printf("%s\n", r.dump().c_str());
    return 0;
  }
  std::printf("bench-c: 4 layers, hidden 256, 8 heads x 32, SwiGLU 704, vocab 8192, batch %d x %d, %d threads\n",
              B, T, num_threads());
  std::printf("  full windows: %.0f tokens/s, %.1f ms/step (attention %.1f ms), %.1f model GFLOP/s = %.2f of the "
              "in-process sgemm (%.1f GFLOP/s), peak RSS %.0f MB\n",
              tok_s, full.ms_per_step, full.attention_ms, gflops, gflops / sgemm, sgemm, full.peak_rss_mb);
  if (rows.size() > 1) {
    const auto& r = rows[1];
    std::printf("  %s: %.0f tokens/s, %.1f ms/step (attention %.1f ms, controller %.2f ms = %.2f%% of the step)\n"
                "    ACR %.4f, exact pair ratio %.4f; step time ratio vs full %.3f (attention time ratio %.3f);\n"
                "    expected from the skipped attention work: %.1f ms/step\n",
                regime.c_str(), r["tokens_per_s"].get<double>(), r["ms_per_step"].get<double>(),
                r["attention_ms"].get<double>(), r["controller_ms"].get<double>(),
                100 * r["controller_share"].get<double>(), r["attn_ratio"].get<double>(),
                r["pair_ratio"].get<double>(), r["time_ratio"].get<double>(), r["attention_time_ratio"].get<double>(),
                r["expected_ms_per_step"].get<double>());
  }
  return 0;
}

}  // namespace aah
