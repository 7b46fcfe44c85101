#include "bench/bench_train.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "core/sys.h"
#include "model/model.h"
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

int bench_train(bool json, int steps) {
  ModelConfig m;  // defaults are bench-c
  m.hidden_size = 256;
  m.intermediate_size = 704;
  m.num_hidden_layers = 4;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 8;
  m.head_dim = 32;
  m.vocab_size = 8192;
  TrainConfig tc;
  const int B = 4, T = 1024;
  Model<float> model(m, B, T);
  model.init_weights(0);
  AdamW opt;
  opt.init(model);
  Rng rng(1);
  std::vector<int32_t> tokens(size_t(B) * T + 1);
  for (auto& t : tokens) t = int32_t(rng.below(m.vocab_size));

  auto step = [&] {
    model.zero_grads();
    model.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f);
    model.backward(tokens.data(), B, T);
    const double norm = global_norm(model.grads_data(), model.num_params());
    opt.update(model.params_data(), model.grads_data(), model.num_params(), 1e-4, tc,
               float(1.0 / (B * T) / std::max(1.0, norm / (B * T))));
  };
  step();  // warmup: first touch of every buffer
  std::vector<double> times;
  for (int s = 0; s < steps; s++) {
    const double t0 = now_seconds();
    step();
    times.push_back(now_seconds() - t0);
  }
  std::sort(times.begin(), times.end());
  const double sec = times[times.size() / 2];
  const double sgemm = bench_sgemm_gflops();
  // Model FLOPs per token: 6 x (matmul parameters) + attention (QK^T and PV: 2 x 2 x D per visible pair,
  // forward; twice that backward), causal pairs averaged over the sequence.
  const double C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads, D = m.head_dim;
  const double matmul_params = L * (C * (H + 2 * m.num_key_value_heads) * D + C * H * D + 3 * C * m.intermediate_size) +
                               double(m.vocab_size) * C;
  const double avg_keys = (T + 1) / 2.0;
  const double flops_per_token = 6 * matmul_params + 3 * L * H * 4 * D * avg_keys;
  const double tok_s = B * T / sec;
  const double gflops = flops_per_token * tok_s / 1e9;
  nlohmann::json row = {{"config", "bench-c"},      {"tokens_per_s", tok_s},
                        {"ms_per_step", sec * 1e3}, {"model_gflops", gflops},
                        {"sgemm_gflops", sgemm},    {"sgemm_share", gflops / sgemm},
                        {"peak_rss_mb", peak_rss_mb()}, {"threads", num_threads()},
                        {"steps_timed", steps}};
  if (json) {
    std::printf("%s\n", row.dump().c_str());
  } else {
    std::printf("bench-c: 4 layers, hidden 256, 8 heads x 32, SwiGLU 704, vocab 8192, batch 4 x 1024, full windows\n");
    std::printf("  %-16s %10.0f\n  %-16s %10.1f\n  %-16s %10.1f\n  %-16s %10.1f  (1024^3, this process)\n"
                "  %-16s %10.2f\n  %-16s %10.0f\n",
                "tokens/s", tok_s, "ms/step", sec * 1e3, "model GFLOP/s", gflops, "sgemm GFLOP/s", sgemm,
                "share of sgemm", gflops / sgemm, "peak RSS MB", peak_rss_mb());
  }
  return 0;
}

}  // namespace aah
