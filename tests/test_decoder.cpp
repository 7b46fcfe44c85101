// Cached decoding equals a full forward over the same tokens, with per-head windows shorter than the prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "helpers.h"
#include "infer/decoder.h"
#include "model/model.h"
#include "model/window_policy.h"

namespace aah {
namespace {

ModelConfig small_config() {
  return test::small_model(50);
}

void check_decoder_matches_forward(Model<float>& model, int prompt, int total, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> tokens(total);
  for (auto& t : tokens) t = int32_t(r.below(model.config().vocab_size));
  const int V = model.config().vocab_size;
  std::vector<float> full(size_t(total) * V);
  model.forward_logits(tokens.data(), 1, total, full.data());
  Decoder dec(model, total);
  const float* logits = dec.prefill(tokens.data(), prompt);
  for (int pos = prompt - 1; pos < total; pos++) {
    if (pos >= prompt) logits = dec.step(tokens[pos]);
    // within 1e-5 of the logits' scale at this position
    double worst = 0, scale = 0;
    for (int i = 0; i < V; i++) {
      worst = std::max(worst, double(std::fabs(logits[i] - full[size_t(pos) * V + i])));
      scale = std::max(scale, double(std::fabs(full[size_t(pos) * V + i])));
    }
    ASSERT_LT(worst, 1e-5 * scale) << "position " << pos << " max |logit| " << scale;
  }
}

TEST(Decoder, CachedLogitsEqualFullForward) {
  const int T = 96;
  Model<float> model(small_config(), 1, T, false);
  model.init_weights(7);
  // windows shorter than the prompt, mixed across heads and KV groups (GQA 2)
  model.windows() = {5, 96, 17, 1, 33, 2, 96, 64};
  check_decoder_matches_forward(model, 40, T, 1);
  // a prompt longer than the batched chunk is not needed here; a one-token prompt goes through step() only
  check_decoder_matches_forward(model, 1, 30, 2);
}

// Long context, T = 16384: the last 300 positions, decoded step by step after a prefill of 16084, match the full
// forward. A full-context head, and ring buffers of 5, 64 and 1000 positions, 16 to 3200 laps deep when decoding
// starts (reads straddle each ring's end); RoPE at positions up to 16383.
TEST(Decoder, LongContextEqualsFullForward) {
  const int T = 16384;
  Model<float> model(small_config(), 1, T, false);
  model.init_weights(11);
  model.windows() = {T, 3, 1000, 64, 5, 2, 17, 64};  // rings: layer 0 {T, 3} {1000, 64}, layer 1 {5, 2} {17, 64}
  EXPECT_EQ(Decoder(model, T).cache().capacity, (std::vector<int>{T, 1000, 5, 64}));
  check_decoder_matches_forward(model, T - 300, T, 3);
}

TEST(Decoder, RingBuffersAreSizedPerHead) {
  Model<float> model(small_config(), 1, 64, false);
  model.windows() = {8, 8, 16, 4, 64, 8, 2, 2};  // layer 0: KV heads read by {8, 8} and {16, 4}
  Decoder dec(model, 64);
  const auto& c = dec.cache();
  EXPECT_EQ(c.capacity, (std::vector<int>{8, 16, 64, 2}));
  EXPECT_EQ(c.bytes(), size_t(8 + 16 + 64 + 2) * 16 * 4 * 2);
}

class DecoderRegimes : public ::testing::TestWithParam<std::string> {};

// The windows a regime's controller decided (one control update on a batch) are what the cache serves.
TEST_P(DecoderRegimes, MatchFullForward) {
  Config cfg;
  cfg.model = small_config();
  cfg.train.context = 64;
  cfg.train.batch_size = 1;
  config_set(cfg, "aah.regime=" + GetParam());
  Model<float> model(cfg.model, 1, 64, false);
  model.init_weights(3);
  {
    WindowPolicyRunner policy(cfg, model);
    std::vector<int32_t> tokens(65);
    Rng r(4);
    for (auto& t : tokens) t = int32_t(r.below(50));
    for (int s = 0; s < 3; s++) {  // a few updates so the resolution EMA moves
      policy.begin_forward(s * 5, true);
      model.forward(tokens.data(), tokens.data() + 1, 1, 64);
      policy.end_forward();
    }
  }
  check_decoder_matches_forward(model, 20, 64, 5);
}

INSTANTIATE_TEST_SUITE_P(All, DecoderRegimes,
                         ::testing::Values("full", "grouping_off", "full_adaptive", "shallow_freeze", "deep_reuse",
                                           "random_window", "fixed_window_8", "deterministic_window"));

}  // namespace
}  // namespace aah
