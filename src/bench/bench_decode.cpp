#include "bench/bench_decode.h"

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_train.h"
#include "core/rng.h"
#include "core/sys.h"
#include "infer/decoder.h"
#include "model/model.h"

namespace aah {

namespace {

struct DecodeRow {
  std::string window_set;
  double window_ratio = 1, kv_bytes = 0, prefill_tok_s = 0, decode_tok_s = 0, decode_attn_pairs = 0;
};

DecodeRow run(const ModelConfig& m, const std::vector<int>& head_windows, const std::string& name, int T, int steps) {
  Model<float> model(m, 1, T, /*with_grads=*/false);
  model.init_weights(0);
  const int L = m.num_hidden_layers, H = m.num_attention_heads;
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) model.windows()[size_t(l) * H + h] = head_windows[h];
  Rng rng(1);
  std::vector<int32_t> tokens(T);
  for (auto& t : tokens) t = int32_t(rng.below(m.vocab_size));
  const int prompt = T - steps;
  Decoder dec(model, T);
  double t0 = now_seconds();
  const float* logits = dec.prefill(tokens.data(), prompt);
  const double prefill_s = now_seconds() - t0;
  t0 = now_seconds();
  for (int i = 0; i < steps; i++) logits = dec.step(tokens[prompt + i]);
  const double decode_s = now_seconds() - t0;
  (void)logits;
  DecodeRow r;
  r.window_set = name;
  double wsum = 0;
  for (int w : head_windows) wsum += double(w) / T;
  r.window_ratio = wsum / H;
  r.kv_bytes = double(dec.cache().bytes());
  r.prefill_tok_s = prompt / prefill_s;
  r.decode_tok_s = steps / decode_s;
  r.decode_attn_pairs = dec.attention_pairs() / steps;
  return r;
}

}  // namespace

int bench_decode(bool json) {
  const ModelConfig m = bench_c_model();
  const int T = 4096, steps = 128;
  // The paper's final Full-adaptive mix (50.3% T/8, 20.1% T/4, 9.4% T/2, 20.1% T) on 8 heads: 4 x T/8, 2 x T/4,
  // 1 x T/2, 1 x T per layer.
  const std::vector<int> mix = {T / 8, T / 8, T / 8, T / 8, T / 4, T / 4, T / 2, T};
  const DecodeRow full = run(m, std::vector<int>(8, T), "full", T, steps);
  const DecodeRow adaptive = run(m, mix, "full_adaptive_mix", T, steps);
  for (const DecodeRow* r : {&full, &adaptive}) {
    const double kv_ratio = r->kv_bytes / full.kv_bytes, time_ratio = full.decode_tok_s / r->decode_tok_s;
    if (json) {
      nlohmann::json j = {{"config", "bench-c"},      {"T", T},
                          {"window_set", r->window_set}, {"window_ratio", r->window_ratio},
                          {"kv_bytes", r->kv_bytes},  {"kv_ratio", kv_ratio},
                          {"decode_tokens_per_s", r->decode_tok_s}, {"time_ratio", time_ratio},
                          {"prefill_tokens_per_s", r->prefill_tok_s},
                          {"decode_attention_pairs_per_token", r->decode_attn_pairs}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      if (r == &full)
        std::printf("bench-c at context %d, decoding %d tokens after a %d-token prompt (%d threads)\n%-18s %12s %9s %9s "
                    "%12s %10s %14s\n",
                    T, steps, T - steps, num_threads(), "window set", "KV bytes", "KV ratio", "W ratio", "decode tok/s",
                    "time ratio", "prefill tok/s");
      std::printf("%-18s %12.0f %9.3f %9.3f %12.1f %10.3f %14.0f\n", r->window_set.c_str(), r->kv_bytes, kv_ratio,
                  r->window_ratio, r->decode_tok_s, time_ratio, r->prefill_tok_s);
    }
  }
  return 0;
}

}  // namespace aah
