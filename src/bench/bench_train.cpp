#include "bench/bench_train.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "experiments/presets.h"
#include "core/sys.h"
#include "model/model.h"
#include "model/window_policy.h"
#include "train/optimizer.h"

namespace aah {

MeasureCase SgemmBench::make_case() const {
  struct Buffers {
    std::vector<float> a, b, c;
  };
  auto buf = std::make_shared<Buffers>();
  buf->a.assign(size_t(M) * K, 0.5f);
  buf->b.assign(size_t(N) * K, 0.25f);
  buf->c.assign(size_t(M) * N, 0.0f);
  const SgemmBench g = *this;
  return {"sgemm", [buf, g] {
            for (int r = 0; r < g.repeats; r++)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.M, g.N, g.K, 1.0f, buf->a.data(), g.K,
                          buf->b.data(), g.K, 0.0f, buf->c.data(), g.N);
          }};
}

BenchTrainer::BenchTrainer(const Config& c)
    : cfg(c), B(c.train.batch_size), T(c.train.context), model(c.model, B, T), tokens(size_t(B) * T + 1) {
  model.init_weights(0);
  opt.init(model);
  Rng rng(1);
  for (auto& t : tokens) t = int32_t(rng.below(c.model.vocab_size));
}

void BenchTrainer::step() {
  model.zero_grads();
  model.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f);
  model.backward(tokens.data(), B, T);
  const double norm = global_norm(model.grads_data(), model.num_params()) / (B * T);
  opt.update(model.params_data(), model.grads_data(), model.num_params(), 1e-4, cfg.train,
             float(1.0 / (B * T) / std::max(1.0, norm)));
}

void BenchTrainer::forward() { model.forward(tokens.data(), tokens.data() + 1, B, T); }

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

// bench-c at `context` (batch 4096 / context), or a suite preset's model, context and batch.
Config bench_config(const std::string& regime, int context, const std::string& preset) {
  Config cfg;
  config_set(cfg, "aah.regime=" + regime);  // first: a regime clears the aah.* knobs
  if (preset.empty()) {
    cfg.model = bench_c_model();
    cfg.train.context = context;
    cfg.train.batch_size = std::max(1, 4096 / context);
  } else {
    for (const auto& s : suite_preset(preset).sets) config_set(cfg, s);
  }
  config_validate(cfg);
  return cfg;
}

// The regime's windows after its warm-up, and what the warm-up measured.
struct RegimeWarmup {
  std::vector<int> windows;  // (L, H) frozen for the timed rounds
  int updates = 0;           // control updates run
  double seconds = 0;        // wall time of the warm-up
  double controller_ms = 0;  // per training step: features + decisions of one update / control interval
  double acr = 1, pair_ratio = 1;
};

// Runs the regime's controller on `model` (forward passes only, on its update steps 0, I, 2I, ...) until its
// windows stop changing: at least 3 updates (the first has no attention diagnostics yet), at most 8. Training
// steps in between would only move the weights a little; the resolution EMA is what needs the updates.
RegimeWarmup warm_up_regime(const Config& cfg, Model<float>& model, const std::vector<int32_t>& tokens) {
  const int B = cfg.train.batch_size, T = cfg.train.context;
  const int interval = controller_config_of(cfg).control_interval;
  RegimeWarmup w;
  const double t0 = now_seconds();
  WindowPolicyRunner policy(cfg, model);  // removes itself from the model when it goes out of scope
  std::vector<int> prev = model.windows();
  double first_update_s = 0;
  for (int u = 0; u < 8; u++) {
    const int step = u * interval;
    if (!policy.controller().is_update_step(step)) break;  // fixed windows, or frozen after its warmup
    policy.begin_forward(step, true);
    model.forward(tokens.data(), tokens.data() + 1, B, T);
    policy.end_forward();
    w.updates++;
    if (u == 0) first_update_s = policy.seconds();
    if (u >= 2 && model.windows() == prev) break;
    prev = model.windows();
  }
  // The first update also builds what later ones reuse: count it only when it is the only one.
  const double per_update_s =
      w.updates > 1 ? (policy.seconds() - first_update_s) / (w.updates - 1) : policy.seconds();
  w.controller_ms = per_update_s * 1e3 / interval;
  w.windows = model.windows();
  w.acr = policy.controller().acr();
  w.pair_ratio = policy.controller().exact_pair_ratio(T);
  w.seconds = now_seconds() - t0;
  return w;
}

}  // namespace

int bench_train(const BenchOptions& o, const std::string& regime, int context, const std::string& preset) {
  const Config full_cfg = bench_config("full", context, preset);
  const ModelConfig& m = full_cfg.model;
  const int B = full_cfg.train.batch_size, T = full_cfg.train.context;
  const bool with_regime = regime != "full";
  // One model and optimizer for both configurations: they differ only in the windows in force.
  BenchTrainer bt(full_cfg);
  Model<float>& model = bt.model;
  const std::vector<int32_t>& tokens = bt.tokens;

  std::optional<RegimeWarmup> warm;
  if (with_regime) warm = warm_up_regime(bench_config(regime, context, preset), model, tokens);

  // One training step under `windows` (nullptr: full); appends the seconds spent in attention to `attn`.
  auto step_case = [&](const std::vector<int>* windows, std::vector<double>* attn) {
    return [&, windows, attn] {
      if (windows)
        model.windows() = *windows;
      else
        model.set_full_windows(T);
      const double a0 = model.attention_seconds;
      bt.step();
      attn->push_back(model.attention_seconds - a0);
    };
  };
  std::vector<double> attn_full, attn_regime;  // per call, warm-up rounds included (dropped below)
  const SgemmBench sgemm;
  std::vector<MeasureCase> cases = {{"full", step_case(nullptr, &attn_full)}};
  if (with_regime) cases.push_back({regime, step_case(&warm->windows, &attn_regime)});
  cases.push_back(sgemm.make_case());
  const int i_full = 0, i_regime = 1, i_sgemm = int(cases.size()) - 1;
  MeasureOptions mo = o.measure;
  if (with_regime) mo.ratios.push_back({i_regime, i_full});
  mo.ratios.push_back({i_sgemm, i_full});
  const MeasureResult res = measure_interleaved(cases, mo);
  const double lim = res.spread_limit;
  for (auto* a : {&attn_full, &attn_regime})
    if (!a->empty()) a->erase(a->begin(), a->begin() + res.warmup_rounds);

  // Model FLOPs per token: 6 x (matmul parameters) + attention: QK^T and PV are 2 x 2 x D flops per visible
  // pair forward, twice that backward; causal pairs average (T + 1) / 2 per query.
  const double C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads, D = m.head_dim;
  const double matmul_params =
      L * (C * (H + 2 * m.num_key_value_heads) * D + C * H * D + 3 * C * m.intermediate_size) +
      double(m.vocab_size) * C;
  const double flops_per_token = 6 * matmul_params + 3 * L * H * 4 * D * (T + 1) / 2.0;
  const double tokens_per_step = double(B) * T;
  const SampleStats& full = res.cases[i_full];
  const SampleStats full_ms = scaled(full, 1e3), attn_full_ms = scaled(sample_stats(attn_full, lim), 1e3);
  const SampleStats tok_s = rate_stats(full, tokens_per_step, lim);
  const SampleStats gflops = scaled(rate_stats(full, flops_per_token * tokens_per_step, lim), 1e-9);
  const SampleStats sgemm_gflops = scaled(rate_stats(res.cases[i_sgemm], sgemm.flops(), lim), 1e-9);
  // model GFLOP/s over sgemm GFLOP/s, per round: (model flops / t_step) / (sgemm flops / t_sgemm)
  const SampleStats sgemm_share =
      scaled(ratio_stats(res, i_sgemm, i_full), flops_per_token * tokens_per_step / sgemm.flops());
  const double peak_rss = peak_rss_mb();
  const bool ss = o.samples;
  auto measured = [&](nlohmann::json& row) {
    row["rounds"] = res.rounds;
    row["warmup_rounds"] = res.warmup_rounds;
    row["settled"] = res.settled;
    row["measure_seconds"] = res.seconds;
    row["threads"] = num_threads();
  };
  const std::string config_name = preset.empty() ? "bench-c" : "preset " + preset;
  nlohmann::json row = {{"config", config_name},
                        {"regime", "full"},
                        {"context", T},
                        {"batch", B},
                        {"tokens_per_s", tok_s.median},
                        {"ms_per_step", full_ms.median},
                        {"attention_ms", attn_full_ms.median},
                        {"attention_share", attn_full_ms.median / full_ms.median},
                        {"model_gflops", gflops.median},
                        {"sgemm_gflops", sgemm_gflops.median},
                        {"sgemm_share", sgemm_share.median},
                        {"peak_rss_mb", peak_rss},
                        {"steps_timed", res.rounds}};
  measured(row);
  row["stats"] = {{"ms_per_step", stats_json(full_ms, ss)},
                  {"tokens_per_s", stats_json(tok_s, ss)},
                  {"attention_ms", stats_json(attn_full_ms, ss)},
                  {"sgemm_gflops", stats_json(sgemm_gflops, ss)},
                  {"sgemm_share", stats_json(sgemm_share, ss)}};
  row["flagged"] = full_ms.flagged || sgemm_share.flagged;
  std::vector<nlohmann::json> rows = {row};

  SampleStats reg_ms, reg_tok_s, attn_reg_ms, time_ratio, attn_ratio, expected_ms;
  if (with_regime) {
    // The regime's step: the timed step under its frozen windows plus its controller's update cost, amortised.
    std::vector<double> with_ctrl = res.cases[i_regime].samples, expected = full.samples;
    for (double& t : with_ctrl) t += warm->controller_ms / 1e3;
    for (size_t i = 0; i < expected.size(); i++) expected[i] -= attn_full[i] * (1 - warm->pair_ratio);
    const SampleStats reg = sample_stats(with_ctrl, lim);
    reg_ms = scaled(reg, 1e3);
    reg_tok_s = rate_stats(reg, tokens_per_step, lim);
    attn_reg_ms = scaled(sample_stats(attn_regime, lim), 1e3);
    time_ratio = ratio_stats(with_ctrl, full.samples, lim);
    attn_ratio = ratio_stats(attn_regime, attn_full, lim);
    expected_ms = scaled(sample_stats(expected, lim), 1e3);
    nlohmann::json r = {{"config", config_name},
                        {"regime", regime},
                        {"context", T},
                        {"batch", B},
                        {"tokens_per_s", reg_tok_s.median},
                        {"ms_per_step", reg_ms.median},
                        {"attention_ms", attn_reg_ms.median},
                        {"controller_ms", warm->controller_ms},
                        {"controller_share", warm->controller_ms / reg_ms.median},
                        {"attn_ratio", warm->acr},
                        {"pair_ratio", warm->pair_ratio},
                        {"time_ratio", time_ratio.median},
                        {"attention_time_ratio", attn_ratio.median},
                        {"expected_ms_per_step", expected_ms.median},
                        {"warmup_updates", warm->updates},
                        {"warmup_seconds", warm->seconds},
                        {"windows", warm->windows},
                        {"peak_rss_mb", peak_rss}};
    measured(r);
    r["stats"] = {{"ms_per_step", stats_json(reg_ms, ss)},
                  {"tokens_per_s", stats_json(reg_tok_s, ss)},
                  {"attention_ms", stats_json(attn_reg_ms, ss)},
                  {"time_ratio", stats_json(time_ratio, ss)},
                  {"attention_time_ratio", stats_json(attn_ratio, ss)},
                  {"expected_ms_per_step", stats_json(expected_ms, ss)}};
    r["flagged"] = reg_ms.flagged || time_ratio.flagged;
    rows.push_back(r);
  }
  if (o.json) {
    for (auto& r : rows) std::printf("%s\n", r.dump().c_str());
    return 0;
  }
  std::printf("%s: %d layers, hidden %d, %d heads x %d (%d KV), SwiGLU %d, vocab %d, batch %d x %d, %d threads\n",
              config_name.c_str(), m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.head_dim,
              m.num_key_value_heads, m.intermediate_size, m.vocab_size, B, T, num_threads());
  std::printf("%d rounds (%s) after %d warm-up round%s, %.1f s%s; figures: median (min, spread = IQR / median)\n",
              res.rounds, with_regime ? ("full, " + regime + ", sgemm").c_str() : "full, sgemm", res.warmup_rounds,
              res.warmup_rounds == 1 ? "" : "s", res.seconds, res.settled ? "" : " (spreads not all settled)");
  std::printf("  full windows: %.0f tokens/s, ms/step %s, attention %.1f ms/step (%.0f%% of the step)\n"
              "    %.1f model GFLOP/s = %s of the in-process sgemm (%.1f GFLOP/s), peak RSS %.0f MB\n",
              tok_s.median, stats_text(full_ms, 1).c_str(), attn_full_ms.median,
              100 * attn_full_ms.median / full_ms.median, gflops.median,
              stats_text(sgemm_share, 2).c_str(), sgemm_gflops.median, peak_rss);
  if (with_regime) {
    std::printf("  %s: warm-up %d control update%s (forward only, %.1f s), then windows frozen: ACR %.4f, exact pair "
                "ratio %.4f\n"
                "    %.0f tokens/s, ms/step %s, attention %.1f ms/step, controller %.2f ms/step = %.2f%% (amortised "
                "over its interval, measured in the warm-up)\n"
                "    step time ratio vs full %s, attention time ratio %s\n"
                "    expected from the skipped attention work: %.1f ms/step\n",
                regime.c_str(), warm->updates, warm->updates == 1 ? "" : "s", warm->seconds, warm->acr,
                warm->pair_ratio, reg_tok_s.median, stats_text(reg_ms, 1).c_str(), attn_reg_ms.median,
                warm->controller_ms, 100 * warm->controller_ms / reg_ms.median, stats_text(time_ratio, 3).c_str(),
                stats_text(attn_ratio, 3).c_str(), expected_ms.median);
  }
  if (full_ms.flagged || sgemm_share.flagged || (with_regime && (reg_ms.flagged || time_ratio.flagged || attn_ratio.flagged)))
    print_flag_note(lim);
  return 0;
}

}  // namespace aah
